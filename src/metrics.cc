// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/metrics.h"

#include <algorithm>
#include <sstream>

namespace saferetry {

// The arrays indexed by enums are sized from the enums; these fail the build
// if an enum gains a value its array does not cover.
static_assert(static_cast<int>(StopReason::kInvalidArgument) + 1 == kStopReasonCount,
              "kStopReasonCount must follow the last StopReason");
static_assert(static_cast<int>(Outcome::kUnknown) == 2, "three outcomes");

namespace {

// The bucket bounds in nanoseconds, so an observation exactly on a bound falls
// in that bound's bucket (le = "less or equal") without rounding doubts.
constexpr std::array<std::int64_t, kLatencyBucketsSeconds.size()> kBoundsNanos = {
    5000000,   10000000,   25000000,   50000000,   75000000,   100000000,  250000000,
    500000000, 750000000, 1000000000, 2500000000, 5000000000, 7500000000, 10000000000};

}  // namespace

struct Metrics::Histogram {
  std::array<std::atomic<std::int64_t>, kLatencyBucketsSeconds.size() + 1> buckets{};
  std::atomic<std::int64_t> count{0};
  std::atomic<std::int64_t> sum_nanos{0};

  void Observe(Duration d) {
    const std::int64_t ns = std::max<std::int64_t>(d.count(), 0);
    const std::size_t i = static_cast<std::size_t>(
        std::lower_bound(kBoundsNanos.begin(), kBoundsNanos.end(), ns) - kBoundsNanos.begin());
    buckets[i].fetch_add(1, std::memory_order_relaxed);
    count.fetch_add(1, std::memory_order_relaxed);
    sum_nanos.fetch_add(ns, std::memory_order_relaxed);
  }

  HistogramSnapshot Read() const {
    HistogramSnapshot h;
    h.bounds.assign(kLatencyBucketsSeconds.begin(), kLatencyBucketsSeconds.end());
    for (const auto& b : buckets) h.counts.push_back(b.load(std::memory_order_relaxed));
    h.count = count.load(std::memory_order_relaxed);
    h.sum_nanos = sum_nanos.load(std::memory_order_relaxed);
    return h;
  }
};

namespace {

constexpr Outcome kAllOutcomes[] = {Outcome::kSucceeded, Outcome::kFailed, Outcome::kUnknown};

std::string Label(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out.append("\\n");
      continue;
    }
    out.push_back(c);
  }
  return out;
}

// Exact decimal seconds from nanoseconds ("1.5", "0.001", "12").
std::string Seconds(std::int64_t ns) {
  std::string out = std::to_string(ns / 1000000000);
  std::int64_t frac = ns % 1000000000;
  if (frac == 0) return out;
  std::string digits = std::to_string(frac);
  digits.insert(0, 9 - digits.size(), '0');
  while (!digits.empty() && digits.back() == '0') digits.pop_back();
  return out + "." + digits;
}

// Bounds as Prometheus clients print them (shortest round-trip form).
std::string Bound(double b) {
  std::ostringstream os;
  os << b;
  return os.str();
}

void WriteHistogram(std::ostringstream& out, const std::string& name, const std::string& labels,
               const HistogramSnapshot& h) {
  const std::string sep = labels.empty() ? "" : ",";
  std::int64_t cumulative = 0;
  for (std::size_t i = 0; i < h.bounds.size(); ++i) {
    cumulative += h.counts[i];
    out << name << "_bucket{" << labels << sep << "le=\"" << Bound(h.bounds[i]) << "\"} "
        << cumulative << "\n";
  }
  out << name << "_bucket{" << labels << sep << "le=\"+Inf\"} " << h.count << "\n";
  const std::string braces = labels.empty() ? "" : "{" + labels + "}";
  out << name << "_sum" << braces << " " << Seconds(h.sum_nanos) << "\n";
  out << name << "_count" << braces << " " << h.count << "\n";
}

void MetricHeader(std::ostringstream& out, const std::string& name, const char* type, const char* help) {
  out << "# HELP " << name << " " << help << "\n";
  out << "# TYPE " << name << " " << type << "\n";
}

}  // namespace

Metrics::Metrics() {
  for (auto& h : call_duration_) h = std::make_unique<Histogram>();
}

Metrics::~Metrics() {
  for (auto& slot : request_duration_) delete slot.load(std::memory_order_acquire);
}

Metrics::Histogram& Metrics::RequestSeries(int slot) {
  std::atomic<Histogram*>& cell = request_duration_[static_cast<std::size_t>(slot)];
  Histogram* h = cell.load(std::memory_order_acquire);
  if (h != nullptr) return *h;
  auto fresh = std::make_unique<Histogram>();
  Histogram* expected = nullptr;
  if (cell.compare_exchange_strong(expected, fresh.get(), std::memory_order_acq_rel,
                                   std::memory_order_acquire)) {
    return *fresh.release();
  }
  return *expected;  // another thread won the race; ours is freed
}

void Metrics::RecordCall(const CallResult& result) {
  const int outcome = static_cast<int>(result.outcome);
  const int stop = static_cast<int>(result.stop_reason);
  if (outcome >= 0 && outcome < kOutcomes && stop >= 0 && stop < kStopReasons) {
    calls_[static_cast<std::size_t>(outcome * kStopReasons + stop)].fetch_add(
        1, std::memory_order_relaxed);
    call_duration_[static_cast<std::size_t>(outcome)]->Observe(result.elapsed);
  }
  if (result.resolved_by_status_query) resolved_.fetch_add(1, std::memory_order_relaxed);
  for (const AttemptEvidence& ev : result.evidence) {
    if (ev.is_status_query) {
      status_queries_.fetch_add(1, std::memory_order_relaxed);
    } else {
      const int resend = std::clamp(ev.number - 1, 0, kResendSlots - 1);
      attempts_[static_cast<std::size_t>(resend)].fetch_add(1, std::memory_order_relaxed);
    }
    int slot;
    if (ev.http_status.has_value() && *ev.http_status >= 100 && *ev.http_status < kStatusSlots) {
      slot = *ev.http_status;
    } else {
      int code = static_cast<int>(ev.transport_status.code());
      if (ev.transport_status.ok() || code < 0 || code >= kErrorSlots) {
        code = static_cast<int>(absl::StatusCode::kUnknown);
      }
      slot = kStatusSlots + code;
    }
    RequestSeries(slot).Observe(ev.end - ev.start);
    if (ev.delay_after.has_value()) {
      (ev.delay_from_server_hint ? waits_hint_ : waits_backoff_)
          .fetch_add(1, std::memory_order_relaxed);
    }
  }
}

MetricsSnapshot Metrics::Snapshot() const {
  MetricsSnapshot s;
  for (int o = 0; o < kOutcomes; ++o) {
    for (int r = 0; r < kStopReasons; ++r) {
      const std::int64_t n =
          calls_[static_cast<std::size_t>(o * kStopReasons + r)].load(std::memory_order_relaxed);
      if (n == 0) continue;
      const auto outcome = static_cast<Outcome>(o);
      const auto reason = static_cast<StopReason>(r);
      s.calls_by_outcome_and_stop[{outcome, reason}] = n;
      s.calls += n;
      s.calls_by_outcome[outcome] += n;
      s.stops_by_reason[reason] += n;
    }
  }
  for (int i = 0; i < kResendSlots; ++i) {
    const std::int64_t n = attempts_[static_cast<std::size_t>(i)].load(std::memory_order_relaxed);
    if (n == 0) continue;
    s.attempts_by_resend_count[i] = n;
    s.attempts += n;
    if (i == 0) s.calls_started = n;
  }
  s.retries = s.attempts - s.calls_started;
  s.amplification =
      s.calls_started == 0 ? 0 : static_cast<double>(s.attempts) / static_cast<double>(s.calls_started);
  s.status_queries = status_queries_.load(std::memory_order_relaxed);
  s.waits_backoff = waits_backoff_.load(std::memory_order_relaxed);
  s.waits_server_hint = waits_hint_.load(std::memory_order_relaxed);
  s.unknown_resolved_by_status_query = resolved_.load(std::memory_order_relaxed);
  auto stop_it = s.stops_by_reason.find(StopReason::kBudgetExhausted);
  s.budget_refusals = stop_it == s.stops_by_reason.end() ? 0 : stop_it->second;
  auto unknown_it = s.calls_by_outcome.find(Outcome::kUnknown);
  s.unknown_outcomes = unknown_it == s.calls_by_outcome.end() ? 0 : unknown_it->second;

  for (int slot = 0; slot < kStatusSlots + kErrorSlots; ++slot) {
    const Histogram* h = request_duration_[static_cast<std::size_t>(slot)].load(std::memory_order_acquire);
    if (h == nullptr) continue;
    const std::string key =
        slot < kStatusSlots
            ? std::to_string(slot)
            : absl::StatusCodeToString(static_cast<absl::StatusCode>(slot - kStatusSlots));
    s.request_duration_by_status[key] = h->Read();
  }
  for (Outcome o : kAllOutcomes) {
    HistogramSnapshot h = call_duration_[static_cast<std::size_t>(o)]->Read();
    if (h.count > 0) s.call_duration_by_outcome[o] = std::move(h);
  }
  return s;
}

void MetricsListener::OnFinish(const CallResult& result) {
  if (metrics_ != nullptr) metrics_->RecordCall(result);
}

void ListenerChain::OnAttemptStart(int number, bool is_status_query) {
  for (CallListener* l : listeners_) {
    if (l != nullptr) l->OnAttemptStart(number, is_status_query);
  }
}

void ListenerChain::OnAttemptEnd(const AttemptEvidence& evidence) {
  for (CallListener* l : listeners_) {
    if (l != nullptr) l->OnAttemptEnd(evidence);
  }
}

void ListenerChain::OnWaitScheduled(Duration delay, bool from_server_hint) {
  for (CallListener* l : listeners_) {
    if (l != nullptr) l->OnWaitScheduled(delay, from_server_hint);
  }
}

void ListenerChain::OnFinish(const CallResult& result) {
  for (CallListener* l : listeners_) {
    if (l != nullptr) l->OnFinish(result);
  }
}

void AddCircuitBreakers(const CircuitBreakerRegistry& registry, TimePoint now,
                        MetricsSnapshot* snapshot) {
  if (snapshot == nullptr) return;
  for (auto& [host, breaker] : registry.Snapshot(now)) {
    snapshot->circuit_breakers[host] = breaker;
  }
}

absl::Status AddJournalGauge(IntentJournal& journal, MetricsSnapshot* snapshot) {
  if (snapshot == nullptr) return absl::InvalidArgumentError("snapshot: required");
  absl::StatusOr<std::optional<std::chrono::milliseconds>> age = journal.OldestUnresolvedAge();
  if (!age.ok()) return age.status();
  snapshot->journal_oldest_unresolved_age = age->value_or(std::chrono::milliseconds(0));
  return absl::OkStatus();
}

std::string ToPrometheusText(const MetricsSnapshot& s) {
  std::ostringstream out;
  if (!s.calls_by_outcome_and_stop.empty()) {
    const std::string name = "saferetry_calls_total";
    MetricHeader(out, name, "counter", "Logical calls finished, by outcome and stop reason.");
    for (const auto& [key, n] : s.calls_by_outcome_and_stop) {
      out << name << "{saferetry_outcome=\"" << OutcomeName(key.first)
          << "\",saferetry_stop_reason=\"" << StopReasonName(key.second) << "\"} " << n << "\n";
    }
  }
  if (!s.attempts_by_resend_count.empty()) {
    const std::string name = "saferetry_attempts_total";
    MetricHeader(out, name, "counter",
           "Sends of the request (status queries excluded), by resend count (0 = first send).");
    for (const auto& [resend, n] : s.attempts_by_resend_count) {
      out << name << "{http_request_resend_count=\"" << resend << "\"} " << n << "\n";
    }
  }
  const auto counter = [&out](const char* name, const char* help, std::int64_t n) {
    if (n == 0) return;
    MetricHeader(out, name, "counter", help);
    out << name << " " << n << "\n";
  };
  counter("saferetry_retries_total", "Sends of the request after the first.", s.retries);
  counter("saferetry_status_queries_total", "Status queries sent to resolve an ambiguous attempt.",
          s.status_queries);
  counter("saferetry_budget_refusals_total", "Calls stopped because the retry budget refused.",
          s.budget_refusals);
  counter("saferetry_unknown_outcomes_total", "Calls that ended UNKNOWN.", s.unknown_outcomes);
  counter("saferetry_unknown_resolved_total",
          "Calls whose ambiguous attempt a status query resolved as found.",
          s.unknown_resolved_by_status_query);
  if (s.waits_backoff + s.waits_server_hint > 0) {
    const std::string name = "saferetry_waits_total";
    MetricHeader(out, name, "counter", "Waits before a retry or status query, by source of the delay.");
    if (s.waits_backoff > 0) {
      out << name << "{saferetry_delay_source=\"backoff\"} " << s.waits_backoff << "\n";
    }
    if (s.waits_server_hint > 0) {
      out << name << "{saferetry_delay_source=\"server_hint\"} " << s.waits_server_hint << "\n";
    }
  }
  if (!s.request_duration_by_status.empty()) {
    const std::string name = "http_client_request_duration_seconds";
    MetricHeader(out, name, "histogram",
           "Duration of HTTP client requests (every attempt and status query).");
    // Status codes first in numeric order, then error types by name.
    std::vector<std::pair<std::string, const HistogramSnapshot*>> statuses;
    std::vector<std::pair<std::string, const HistogramSnapshot*>> errors;
    for (const auto& [key, h] : s.request_duration_by_status) {
      const bool numeric = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
        return c >= '0' && c <= '9';
      });
      (numeric ? statuses : errors).emplace_back(key, &h);
    }
    std::sort(statuses.begin(), statuses.end(), [](const auto& a, const auto& b) {
      if (a.first.size() != b.first.size()) return a.first.size() < b.first.size();
      return a.first < b.first;
    });
    for (const auto& [key, h] : statuses) {
      WriteHistogram(out, name, "http_response_status_code=\"" + Label(key) + "\"", *h);
    }
    for (const auto& [key, h] : errors) WriteHistogram(out, name, "error_type=\"" + Label(key) + "\"", *h);
  }
  if (!s.call_duration_by_outcome.empty()) {
    const std::string name = "saferetry_call_duration_seconds";
    MetricHeader(out, name, "histogram", "Duration of logical calls, retries and waits included.");
    for (const auto& [o, h] : s.call_duration_by_outcome) {
      WriteHistogram(out, name, "saferetry_outcome=\"" + std::string(OutcomeName(o)) + "\"", h);
    }
  }
  if (!s.circuit_breakers.empty()) {
    // The state is a gauge written for every host, closed included: a
    // missing series would read as "no data", not "closed".
    std::string name = "saferetry_circuit_state";
    MetricHeader(out, name, "gauge",
                 "Circuit breaker state by host: 0 closed, 1 half-open, 2 open.");
    for (const auto& [host, b] : s.circuit_breakers) {
      out << name << "{host=\"" << Label(host) << "\"} " << static_cast<int>(b.state) << "\n";
    }
    const auto per_host = [&out, &s](const char* counter_name, const char* help,
                                     std::int64_t CircuitBreakerSnapshot::*field) {
      bool header = false;
      for (const auto& [host, b] : s.circuit_breakers) {
        if (b.*field == 0) continue;
        if (!header) MetricHeader(out, counter_name, "counter", help);
        header = true;
        out << counter_name << "{host=\"" << Label(host) << "\"} " << b.*field << "\n";
      }
    };
    per_host("saferetry_circuit_refusals_total", "Sends refused by the host's circuit breaker.",
             &CircuitBreakerSnapshot::refusals);
    per_host("saferetry_circuit_opened_total", "Times the host's circuit breaker opened.",
             &CircuitBreakerSnapshot::opened);
  }
  if (s.journal_oldest_unresolved_age.has_value()) {
    // Written even at zero: a missing series would read as "no data".
    const std::string name = "saferetry_journal_oldest_unresolved_age_seconds";
    MetricHeader(out, name, "gauge",
                 "Age of the oldest unresolved journaled intent (0 when none).");
    out << name << " "
        << static_cast<double>(s.journal_oldest_unresolved_age->count()) / 1000.0 << "\n";
  }
  return out.str();
}

}  // namespace saferetry

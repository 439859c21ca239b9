// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/metrics.h"

#include <algorithm>
#include <sstream>

#include "saferetry/circuit_breaker.h"

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
    5000000,   10000000,  25000000,   50000000,   75000000,   100000000,  250000000,
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

struct Metrics::CountHistogram {
  std::array<std::atomic<std::int64_t>, kCountBuckets.size() + 1> buckets{};
  std::atomic<std::int64_t> count{0};
  std::atomic<std::int64_t> sum{0};

  void Observe(std::int64_t v) {
    const std::size_t i = static_cast<std::size_t>(
        std::lower_bound(kCountBuckets.begin(), kCountBuckets.end(), v) - kCountBuckets.begin());
    buckets[i].fetch_add(1, std::memory_order_relaxed);
    count.fetch_add(1, std::memory_order_relaxed);
    sum.fetch_add(v, std::memory_order_relaxed);
  }

  CountHistogramSnapshot Read() const {
    CountHistogramSnapshot h;
    h.bounds.assign(kCountBuckets.begin(), kCountBuckets.end());
    for (const auto& b : buckets) h.counts.push_back(b.load(std::memory_order_relaxed));
    h.count = count.load(std::memory_order_relaxed);
    h.sum = sum.load(std::memory_order_relaxed);
    return h;
  }
};

struct Metrics::RouteSeries {
  std::array<std::atomic<Histogram*>, kStatusSlots + kErrorSlots> request_duration{};
  std::atomic<std::int64_t> attempts_original{0};
  std::atomic<std::int64_t> attempts_retry{0};
  std::atomic<std::int64_t> attempts_hedge{0};
  CountHistogram attempts;
  CountHistogram retries;
  CountHistogram hedges;
  Histogram retry_delay;
  std::array<Histogram, kPhaseCount> phases;
  std::array<std::atomic<std::int64_t>, kPhaseCount> timeouts{};

  ~RouteSeries() {
    for (auto& slot : request_duration) delete slot.load(std::memory_order_acquire);
  }
};

namespace {

// OpenTelemetry's known HTTP methods; anything else is "_OTHER" (the last).
constexpr std::string_view kMethodNames[] = {"GET",     "HEAD",    "POST",  "PUT",   "DELETE",
                                             "CONNECT", "OPTIONS", "TRACE", "PATCH", "_OTHER"};
constexpr int kOtherMethod = 9;

int MethodIndex(std::string_view method) {
  for (int i = 0; i < kOtherMethod; ++i) {
    if (kMethodNames[i] == method) return i;
  }
  return kOtherMethod;
}

// The busy time of a call's exchanges: the length of the union of their
// [start, end] intervals, from the first start to the last end. Allocation-
// free: at most `kMaxIntervals` exchanges are considered (the first ones).
constexpr std::size_t kMaxIntervals = 64;

Duration IdleTime(const Evidence& evidence) {
  std::array<std::pair<TimePoint, TimePoint>, kMaxIntervals> spans;
  std::size_t n = 0;
  for (const AttemptEvidence& ev : evidence) {
    if (n == kMaxIntervals) break;
    spans[n++] = {ev.start, std::max(ev.start, ev.end)};
  }
  if (n < 2) return Duration(0);
  std::sort(spans.begin(), spans.begin() + static_cast<std::ptrdiff_t>(n));
  Duration idle(0);
  TimePoint covered = spans[0].second;
  for (std::size_t i = 1; i < n; ++i) {
    if (spans[i].first > covered) idle += spans[i].first - covered;
    covered = std::max(covered, spans[i].second);
  }
  return idle;
}

// True when request attempt `i` was sent while another request attempt that
// started before it was still in flight.
bool IsHedge(const Evidence& evidence, std::size_t i) {
  const AttemptEvidence& a = evidence[i];
  for (std::size_t j = 0; j < evidence.size(); ++j) {
    const AttemptEvidence& b = evidence[j];
    if (j == i || b.is_status_query) continue;
    const bool earlier = b.start < a.start || (b.start == a.start && b.number < a.number);
    if (earlier && b.end > a.start) return true;
  }
  return false;
}

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

void WriteCountHistogram(std::ostringstream& out, const std::string& name,
                         const std::string& labels, const CountHistogramSnapshot& h) {
  const std::string sep = labels.empty() ? "" : ",";
  std::int64_t cumulative = 0;
  for (std::size_t i = 0; i < h.bounds.size(); ++i) {
    cumulative += h.counts[i];
    out << name << "_bucket{" << labels << sep << "le=\"" << h.bounds[i] << "\"} " << cumulative
        << "\n";
  }
  out << name << "_bucket{" << labels << sep << "le=\"+Inf\"} " << h.count << "\n";
  const std::string braces = labels.empty() ? "" : "{" + labels + "}";
  out << name << "_sum" << braces << " " << h.sum << "\n";
  out << name << "_count" << braces << " " << h.count << "\n";
}

// `http_request_method="GET",server_address="h",server_port="80"`, or empty
// for series recorded without an endpoint.
std::string EndpointLabels(const MetricsEndpoint& e) {
  if (e.method.empty()) return std::string();
  return "http_request_method=\"" + Label(e.method) + "\",server_address=\"" +
         Label(e.server_address) + "\",server_port=\"" + std::to_string(e.server_port) + "\"";
}

// The endpoint's labels and `saferetry_phase` of the phase at `index`
// (`Phase` - 1).
std::string PhaseLabels(const std::string& endpoint, std::size_t index) {
  const std::string_view name = PhaseName(static_cast<Phase>(index + 1));
  return endpoint + (endpoint.empty() ? "" : ",") + "saferetry_phase=\"" + std::string(name) + "\"";
}

void MetricHeader(std::ostringstream& out, const std::string& name, const char* type,
                  const char* help) {
  out << "# HELP " << name << " " << help << "\n";
  out << "# TYPE " << name << " " << type << "\n";
}

}  // namespace

MetricsEndpoint EndpointOfUrl(std::string_view method, std::string_view url) {
  MetricsEndpoint e;
  e.method = std::string(method);
  // "scheme://host:port", path and query already dropped.
  const std::string key = CircuitBreakerKey(url);
  const std::size_t authority = key.find("://");
  const std::size_t colon = key.rfind(':');
  if (authority == std::string::npos || colon == std::string::npos || colon <= authority + 3) {
    return e;
  }
  int port = 0;
  for (std::size_t i = colon + 1; i < key.size(); ++i) {
    const char c = key[i];
    if (c < '0' || c > '9' || port > 65535) return e;
    port = port * 10 + (c - '0');
  }
  if (port <= 0 || port > 65535) return e;
  e.server_address = key.substr(authority + 3, colon - authority - 3);
  e.server_port = port;
  return e;
}

Metrics::Metrics(MetricsOptions options)
    : max_servers_(std::max(options.max_servers, 0)),
      routes_(new std::atomic<RouteSeries*>[static_cast<std::size_t>(
          1 + (std::max(options.max_servers, 0) + 1) * kMethods)]),
      route_count_(1 + (max_servers_ + 1) * kMethods) {
  for (auto& h : call_duration_) h = std::make_unique<Histogram>();
  for (int i = 0; i < route_count_; ++i) routes_[static_cast<std::size_t>(i)].store(nullptr);
  routes_[0].store(new RouteSeries(), std::memory_order_release);
  route_order_.push_back(0);
}

Metrics::~Metrics() {
  for (int i = 0; i < route_count_; ++i) {
    delete routes_[static_cast<std::size_t>(i)].load(std::memory_order_acquire);
  }
}

MetricsRoute Metrics::Register(const MetricsEndpoint& endpoint) {
  const int method = MethodIndex(endpoint.method);
  std::lock_guard<std::mutex> lock(mu_);
  int server = -1;
  for (std::size_t i = 0; i < servers_.size(); ++i) {
    if (servers_[i].first == endpoint.server_address &&
        servers_[i].second == endpoint.server_port) {
      server = static_cast<int>(i);
      break;
    }
  }
  if (server < 0) {
    if (static_cast<int>(servers_.size()) < max_servers_) {
      server = static_cast<int>(servers_.size());
      servers_.emplace_back(endpoint.server_address, endpoint.server_port);
    } else {
      server = max_servers_;
      servers_folded_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  const int index = 1 + server * kMethods + method;
  std::atomic<RouteSeries*>& cell = routes_[static_cast<std::size_t>(index)];
  if (cell.load(std::memory_order_acquire) == nullptr) {
    cell.store(new RouteSeries(), std::memory_order_release);
    route_order_.push_back(index);
  }
  return MetricsRoute(index);
}

Metrics::RouteSeries& Metrics::RouteAt(int index) {
  if (index > 0 && index < route_count_) {
    RouteSeries* r = routes_[static_cast<std::size_t>(index)].load(std::memory_order_acquire);
    if (r != nullptr) return *r;
  }
  return *routes_[0].load(std::memory_order_acquire);
}

Metrics::Histogram& Metrics::RequestSeries(RouteSeries& route, int slot) {
  std::atomic<Histogram*>& cell = route.request_duration[static_cast<std::size_t>(slot)];
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

void Metrics::RecordCall(MetricsRoute route_id, const CallResult& result) {
  RouteSeries& route = RouteAt(route_id.index_);
  const int outcome = static_cast<int>(result.outcome);
  const int stop = static_cast<int>(result.stop_reason);
  if (outcome >= 0 && outcome < kOutcomes && stop >= 0 && stop < kStopReasons) {
    calls_[static_cast<std::size_t>(outcome * kStopReasons + stop)].fetch_add(
        1, std::memory_order_relaxed);
    call_duration_[static_cast<std::size_t>(outcome)]->Observe(result.elapsed);
  }
  if (result.resolved_by_status_query) resolved_.fetch_add(1, std::memory_order_relaxed);
  if (!result.budget_refusal.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = refusals_by_name_.find(result.budget_refusal);
    if (it == refusals_by_name_.end()) {
      const bool room = refusals_by_name_.size() < kMaxRefusalNames;
      it = refusals_by_name_.emplace(room ? result.budget_refusal : std::string("_other"), 0).first;
    }
    ++it->second;
  }
  std::int64_t sends = 0;
  std::int64_t hedges = 0;
  for (std::size_t i = 0; i < result.evidence.size(); ++i) {
    const AttemptEvidence& ev = result.evidence[i];
    if (ev.is_status_query) {
      status_queries_.fetch_add(1, std::memory_order_relaxed);
    } else {
      const int resend = std::clamp(ev.number - 1, 0, kResendSlots - 1);
      attempts_[static_cast<std::size_t>(resend)].fetch_add(1, std::memory_order_relaxed);
      ++sends;
      if (ev.number == 1) {
        route.attempts_original.fetch_add(1, std::memory_order_relaxed);
      } else if (IsHedge(result.evidence, i)) {
        ++hedges;
        route.attempts_hedge.fetch_add(1, std::memory_order_relaxed);
      } else {
        route.attempts_retry.fetch_add(1, std::memory_order_relaxed);
      }
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
    RequestSeries(route, slot).Observe(ev.end - ev.start);
    for (int p = 0; p < kPhaseCount; ++p) {
      const Duration spent = ev.timings.Spent(static_cast<Phase>(p + 1));
      if (spent > Duration(0)) route.phases[static_cast<std::size_t>(p)].Observe(spent);
    }
    if (ev.timings.timed_out != Phase::kNone) {
      const int p = static_cast<int>(ev.timings.timed_out) - 1;
      if (p >= 0 && p < kPhaseCount) {
        route.timeouts[static_cast<std::size_t>(p)].fetch_add(1, std::memory_order_relaxed);
      }
    }
    if (ev.delay_after.has_value()) {
      (ev.delay_from_server_hint ? waits_hint_ : waits_backoff_)
          .fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (sends > 0) {
    route.attempts.Observe(sends);
    route.retries.Observe(sends - 1 - hedges);
    route.hedges.Observe(hedges);
  }
  if (result.evidence.size() > 1) route.retry_delay.Observe(IdleTime(result.evidence));
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
  s.amplification = s.calls_started == 0
                        ? 0
                        : static_cast<double>(s.attempts) / static_cast<double>(s.calls_started);
  s.status_queries = status_queries_.load(std::memory_order_relaxed);
  s.waits_backoff = waits_backoff_.load(std::memory_order_relaxed);
  s.waits_server_hint = waits_hint_.load(std::memory_order_relaxed);
  s.unknown_resolved_by_status_query = resolved_.load(std::memory_order_relaxed);
  auto stop_it = s.stops_by_reason.find(StopReason::kBudgetExhausted);
  s.budget_refusals = stop_it == s.stops_by_reason.end() ? 0 : stop_it->second;
  auto unknown_it = s.calls_by_outcome.find(Outcome::kUnknown);
  s.unknown_outcomes = unknown_it == s.calls_by_outcome.end() ? 0 : unknown_it->second;

  std::vector<std::pair<std::string, int>> servers;
  std::vector<int> order;
  {
    std::lock_guard<std::mutex> lock(mu_);
    servers = servers_;
    order = route_order_;
    s.servers_folded = servers_folded_.load(std::memory_order_relaxed);
    s.budget_refusals_by_name = refusals_by_name_;
  }
  std::int64_t hedges = 0;
  for (int index : order) {
    const RouteSeries* route =
        routes_[static_cast<std::size_t>(index)].load(std::memory_order_acquire);
    if (route == nullptr) continue;
    MetricsEndpoint endpoint;
    if (index > 0) {
      const int server = (index - 1) / kMethods;
      endpoint.method = std::string(kMethodNames[(index - 1) % kMethods]);
      if (server < static_cast<int>(servers.size())) {
        endpoint.server_address = servers[static_cast<std::size_t>(server)].first;
        endpoint.server_port = servers[static_cast<std::size_t>(server)].second;
      } else {
        endpoint.server_address = "_other";
      }
    }
    std::vector<RequestDurationSeries> errors;
    for (int slot = 0; slot < kStatusSlots + kErrorSlots; ++slot) {
      const Histogram* h =
          route->request_duration[static_cast<std::size_t>(slot)].load(std::memory_order_acquire);
      if (h == nullptr) continue;
      RequestDurationSeries series;
      series.endpoint = endpoint;
      series.histogram = h->Read();
      std::string key;
      if (slot < kStatusSlots) {
        series.status_code = slot;
        key = std::to_string(slot);
        if (slot >= 400) series.error_type = key;
      } else {
        key = absl::StatusCodeToString(static_cast<absl::StatusCode>(slot - kStatusSlots));
        series.error_type = key;
      }
      HistogramSnapshot& total = s.request_duration_by_status[key];
      if (total.bounds.empty()) {
        total = series.histogram;
      } else {
        for (std::size_t i = 0; i < total.counts.size(); ++i)
          total.counts[i] += series.histogram.counts[i];
        total.count += series.histogram.count;
        total.sum_nanos += series.histogram.sum_nanos;
      }
      (slot < kStatusSlots ? s.request_duration : errors).push_back(std::move(series));
    }
    std::sort(errors.begin(), errors.end(),
              [](const auto& a, const auto& b) { return a.error_type < b.error_type; });
    for (auto& e : errors) s.request_duration.push_back(std::move(e));

    EndpointCallSeries calls;
    calls.endpoint = std::move(endpoint);
    calls.attempts_original = route->attempts_original.load(std::memory_order_relaxed);
    calls.attempts_retry = route->attempts_retry.load(std::memory_order_relaxed);
    calls.attempts_hedge = route->attempts_hedge.load(std::memory_order_relaxed);
    calls.attempts_per_call = route->attempts.Read();
    calls.retries_per_call = route->retries.Read();
    calls.hedges_per_call = route->hedges.Read();
    calls.retry_delay = route->retry_delay.Read();
    for (std::size_t p = 0; p < kPhaseCount; ++p) {
      calls.phase_duration[p] = route->phases[p].Read();
      calls.timeouts_by_phase[p] = route->timeouts[p].load(std::memory_order_relaxed);
    }
    hedges += calls.attempts_hedge;
    if (calls.attempts_per_call.count > 0 || calls.retry_delay.count > 0) {
      s.call_series.push_back(std::move(calls));
    }
  }
  s.hedges = hedges;
  for (Outcome o : kAllOutcomes) {
    HistogramSnapshot h = call_duration_[static_cast<std::size_t>(o)]->Read();
    if (h.count > 0) s.call_duration_by_outcome[o] = std::move(h);
  }
  return s;
}

void MetricsListener::OnFinish(const CallResult& result) {
  if (metrics_ != nullptr) metrics_->RecordCall(route_, result);
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
    MetricHeader(
        out, name, "counter",
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
  if (!s.budget_refusals_by_name.empty()) {
    const std::string name = "saferetry_budget_refusals_by_name_total";
    MetricHeader(out, name, "counter",
                 "Calls stopped because the retry budget refused, by the budget's name for why.");
    for (const auto& [refusal, n] : s.budget_refusals_by_name) {
      // The name comes from a budget that may be the user's: escape it as a
      // label value must be.
      std::string value;
      for (char c : refusal) {
        if (c == '\\' || c == '"') value += '\\';
        value += c == '\n' ? std::string("\\n") : std::string(1, c);
      }
      out << name << "{saferetry_budget_refusal=\"" << value << "\"} " << n << "\n";
    }
  }
  counter("saferetry_unknown_outcomes_total", "Calls that ended UNKNOWN.", s.unknown_outcomes);
  counter("saferetry_unknown_resolved_total",
          "Calls whose ambiguous attempt a status query resolved as found.",
          s.unknown_resolved_by_status_query);
  if (s.waits_backoff + s.waits_server_hint > 0) {
    const std::string name = "saferetry_waits_total";
    MetricHeader(out, name, "counter",
                 "Waits before a retry or status query, by source of the delay.");
    if (s.waits_backoff > 0) {
      out << name << "{saferetry_delay_source=\"backoff\"} " << s.waits_backoff << "\n";
    }
    if (s.waits_server_hint > 0) {
      out << name << "{saferetry_delay_source=\"server_hint\"} " << s.waits_server_hint << "\n";
    }
  }
  if (!s.request_duration.empty()) {
    const std::string name = "http_client_request_duration_seconds";
    MetricHeader(out, name, "histogram",
                 "Duration of HTTP client requests (every attempt and status query).");
    for (const RequestDurationSeries& r : s.request_duration) {
      std::string labels = EndpointLabels(r.endpoint);
      const auto add = [&labels](const char* key, const std::string& value) {
        if (!labels.empty()) labels += ",";
        labels += std::string(key) + "=\"" + Label(value) + "\"";
      };
      if (r.status_code.has_value())
        add("http_response_status_code", std::to_string(*r.status_code));
      if (!r.error_type.empty()) add("error_type", r.error_type);
      WriteHistogram(out, name, labels, r.histogram);
    }
  }
  if (!s.call_duration_by_outcome.empty()) {
    const std::string name = "saferetry_call_duration_seconds";
    MetricHeader(out, name, "histogram", "Duration of logical calls, retries and waits included.");
    for (const auto& [o, h] : s.call_duration_by_outcome) {
      WriteHistogram(out, name, "saferetry_outcome=\"" + std::string(OutcomeName(o)) + "\"", h);
    }
  }
  if (!s.call_series.empty()) {
    const std::string started = "saferetry_client_attempt_started_total";
    MetricHeader(out, started, "counter",
                 "Sends of the request by attempt type (original, retry, hedge).");
    for (const EndpointCallSeries& c : s.call_series) {
      const std::string labels = EndpointLabels(c.endpoint);
      const std::string sep = labels.empty() ? "" : ",";
      const std::pair<const char*, std::int64_t> types[] = {{"original", c.attempts_original},
                                                            {"retry", c.attempts_retry},
                                                            {"hedge", c.attempts_hedge}};
      for (const auto& [type, n] : types) {
        if (n == 0) continue;
        out << started << "{" << labels << sep << "saferetry_attempt_type=\"" << type << "\"} " << n
            << "\n";
      }
    }
    const auto per_call = [&out, &s](const char* name, const char* help,
                                     CountHistogramSnapshot EndpointCallSeries::*field) {
      bool header = false;
      for (const EndpointCallSeries& c : s.call_series) {
        const CountHistogramSnapshot& h = c.*field;
        if (h.count == 0) continue;
        if (!header) MetricHeader(out, name, "histogram", help);
        header = true;
        WriteCountHistogram(out, name, EndpointLabels(c.endpoint), h);
      }
    };
    per_call("saferetry_call_attempts", "Sends of the request per call.",
             &EndpointCallSeries::attempts_per_call);
    per_call("saferetry_call_retries", "Sends after an earlier one ended, per call.",
             &EndpointCallSeries::retries_per_call);
    per_call("saferetry_call_hedges", "Sends while an earlier one was in flight, per call.",
             &EndpointCallSeries::hedges_per_call);
    bool header = false;
    const std::string delay = "saferetry_call_retry_delay_seconds";
    for (const EndpointCallSeries& c : s.call_series) {
      if (c.retry_delay.count == 0) continue;
      if (!header) {
        MetricHeader(out, delay, "histogram",
                     "Time per call during which no attempt or status query was in flight.");
      }
      header = true;
      WriteHistogram(out, delay, EndpointLabels(c.endpoint), c.retry_delay);
    }
    const std::string phase = "saferetry_client_attempt_phase_duration_seconds";
    header = false;
    for (const EndpointCallSeries& c : s.call_series) {
      const std::string labels = EndpointLabels(c.endpoint);
      for (std::size_t p = 0; p < kPhaseCount; ++p) {
        if (c.phase_duration[p].count == 0) continue;
        if (!header) {
          MetricHeader(out, phase, "histogram",
                       "Time spent per phase of an attempt or status query (dns, connect, tls, "
                       "request_write, first_byte, transfer).");
        }
        header = true;
        WriteHistogram(out, phase, PhaseLabels(labels, p), c.phase_duration[p]);
      }
    }
    const std::string timeouts = "saferetry_client_attempt_timeouts_total";
    header = false;
    for (const EndpointCallSeries& c : s.call_series) {
      const std::string labels = EndpointLabels(c.endpoint);
      for (std::size_t p = 0; p < kPhaseCount; ++p) {
        if (c.timeouts_by_phase[p] == 0) continue;
        if (!header) {
          MetricHeader(out, timeouts, "counter",
                       "Attempts and status queries whose time ran out, by the phase it ran out "
                       "in.");
        }
        header = true;
        out << timeouts << "{" << PhaseLabels(labels, p) << "} " << c.timeouts_by_phase[p] << "\n";
      }
    }
  }
  if (s.servers_folded > 0) {
    const std::string name = "saferetry_metrics_servers_folded_total";
    MetricHeader(
        out, name, "counter",
        "Endpoint registrations past the server cap, recorded as server_address=\"_other\".");
    out << name << " " << s.servers_folded << "\n";
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
    out << name << " " << static_cast<double>(s.journal_oldest_unresolved_age->count()) / 1000.0
        << "\n";
  }
  if (s.server_gauges.has_value()) {
    // Written even at zero, like the journal's gauge.
    const MetricsSnapshot::ServerGauges& g = *s.server_gauges;
    auto gauge = [&](const std::string& name, const char* help, double value) {
      MetricHeader(out, name, "gauge", help);
      out << name << " " << value << "\n";
    };
    gauge("saferetry_server_processing_records", "Idempotency records PROCESSING.",
          static_cast<double>(g.processing));
    gauge("saferetry_server_oldest_processing_age_seconds",
          "Age of the oldest PROCESSING idempotency record (0 when none).",
          static_cast<double>(g.oldest_processing_age.count()) / 1000.0);
    gauge("saferetry_server_abandoned_records",
          "PROCESSING idempotency records whose lease ran out.", static_cast<double>(g.abandoned));
    gauge("saferetry_server_pending_confirmation_records",
          "Idempotency records waiting for a person's decision.",
          static_cast<double>(g.pending_confirmation));
  }
  return out.str();
}

}  // namespace saferetry

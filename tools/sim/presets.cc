// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "tools/sim/presets.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace saferetry {
namespace sim {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

double Ms(Duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Rounds for the report, so JSON stays readable and stable.
double Round(double v, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::round(v * scale) / scale;
}

std::shared_ptr<RetryBudget> Unlimited() { return MakeUnlimitedBudget(); }

// Sums of several trials of one point; rates are computed from the sums.
struct Totals {
  std::int64_t runs = 0;
  SimResult sum;
  double p50_ms = 0;
  double p99_ms = 0;
  double p999_ms = 0;
  double hedge_delay_ms = 0;
  double mean_ms = 0;
  double goodput = 0;
  double offered = 0;

  void Add(const SimResult& r) {
    ++runs;
    sum.calls += r.calls;
    sum.attempts += r.attempts;
    sum.status_queries += r.status_queries;
    sum.timeouts += r.timeouts;
    sum.succeeded += r.succeeded;
    sum.failed += r.failed;
    sum.unknown += r.unknown;
    sum.effects += r.effects;
    sum.duplicates += r.duplicates;
    sum.outcome_violations += r.outcome_violations;
    sum.budget_exhausted += r.budget_exhausted;
    sum.rejected += r.rejected;
    sum.outage_requests += r.outage_requests;
    sum.circuit_refusals += r.circuit_refusals;
    sum.hedges += r.hedges;
    sum.hedge_timers += r.hedge_timers;
    for (std::size_t i = 0; i < r.stop_reasons.size(); ++i) {
      sum.stop_reasons[i] += r.stop_reasons[i];
      sum.unknown_stop_reasons[i] += r.unknown_stop_reasons[i];
    }
    p50_ms += Ms(r.p50);
    p99_ms += Ms(r.p99);
    p999_ms += Ms(r.p999);
    hedge_delay_ms += Ms(r.hedge_delay_mean);
    mean_ms += Ms(r.mean_completion);
    goodput += r.Goodput();
    offered += r.OfferedLoad();
  }

  // Counts are per trial (means), rates from the sums.
  void Write(Row& row) const {
    const double n = static_cast<double>(std::max<std::int64_t>(runs, 1));
    auto mean = [&](std::int64_t v) { return Round(static_cast<double>(v) / n, 1); };
    row["offered_load_per_s"] = Round(offered / n, 1);
    row["calls"] = mean(sum.calls);
    row["attempts"] = mean(sum.attempts);
    row["status_queries"] = mean(sum.status_queries);
    row["write_amplification"] = Round(sum.WriteAmplification(), 4);
    row["load_amplification"] = Round(sum.LoadAmplification(), 4);
    row["success_rate"] = Round(sum.SuccessRate(), 5);
    row["goodput_per_s"] = Round(goodput / n, 1);
    row["failed"] = mean(sum.failed);
    row["unknown"] = mean(sum.unknown);
    row["unknown_rate"] = Round(
        sum.calls == 0 ? 0 : static_cast<double>(sum.unknown) / static_cast<double>(sum.calls), 5);
    row["effects"] = mean(sum.effects);
    row["duplicates"] = mean(sum.duplicates);
    row["outcome_violations"] = mean(sum.outcome_violations);
    row["budget_exhausted"] = mean(sum.budget_exhausted);
    row["rejected"] = mean(sum.rejected);
    row["timeouts"] = mean(sum.timeouts);
    row["p50_ms"] = Round(p50_ms / n, 2);
    row["p99_ms"] = Round(p99_ms / n, 2);
    row["stop_reasons"] = Reasons(sum.stop_reasons, n);
    row["unknown_stop_reasons"] = Reasons(sum.unknown_stop_reasons, n);
  }

  // By `StopReasonName`, the reasons that occurred only (per trial).
  static Row Reasons(const std::array<std::int64_t, kStopReasonCount>& counts, double n) {
    Row out = Row::object();
    for (int i = 0; i < kStopReasonCount; ++i) {
      const std::int64_t v = counts[static_cast<std::size_t>(i)];
      if (v == 0) continue;
      out[std::string(StopReasonName(static_cast<StopReason>(i)))] =
          Round(static_cast<double>(v) / n, 1);
    }
    return out;
  }
};

// The model service shared by the call presets: ~5 ms per hop, 20 ms of
// work on average.
ServerModel BaseServer() {
  ServerModel s;
  s.hop = LatencyModel{LatencyModel::Kind::kAbsNormal, milliseconds(5), milliseconds(1)};
  s.service = LatencyModel{LatencyModel::Kind::kExponential, milliseconds(20), Duration{0}};
  return s;
}

Workload OpenLoop(double rate, double secs) {
  Workload w;
  w.kind = Workload::Kind::kOpenLoop;
  w.calls_per_second = rate;
  w.total_calls = static_cast<std::int64_t>(std::llround(rate * secs));
  return w;
}

int TrialsOr(const PresetOptions& o, int fallback) { return o.trials > 0 ? o.trials : fallback; }

Totals RunTrials(SimConfig config, const PresetOptions& o, int trials, bool keep_timeline) {
  Totals t;
  for (int i = 0; i < trials; ++i) {
    config.seed = o.seed + static_cast<std::uint64_t>(i);
    SimResult r = RunSimulation(config);
    t.Add(r);
    if (i == 0 && keep_timeline && o.timeline != nullptr) {
      *o.timeline = std::move(r.timeline);
      if (o.timeline_bucket != nullptr) *o.timeline_bucket = config.bucket;
    }
  }
  return t;
}

absl::Status CheckRate(std::string_view flag, const std::optional<double>& v, double max) {
  if (v.has_value() && !(*v >= 0 && *v <= max)) {
    return absl::InvalidArgumentError(absl::StrCat(absl::string_view(flag.data(), flag.size()),
                                                   ": must be in [0, ", max, "], got ", *v));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------

std::vector<Row> Contention(const PresetOptions& o) {
  std::vector<int> ns;
  if (o.clients.has_value()) {
    ns = {*o.clients};
  } else if (o.sweep) {
    for (int n = 10; n <= 190; n += 20) ns.push_back(n);
  } else {
    ns = {100};
  }
  std::vector<JitterKind> kinds;
  if (o.jitter.has_value()) {
    kinds = {*o.jitter};
  } else if (o.sweep) {
    kinds = {JitterKind::kNone, JitterKind::kFull, JitterKind::kEqual, JitterKind::kDecorrelated};
  } else {
    kinds = {JitterKind::kFull};
  }
  const int trials = TrialsOr(o, 100);
  std::vector<Row> rows;
  for (int n : ns) {
    for (JitterKind k : kinds) {
      double writes = 0, completion = 0, client_completion = 0, over_cap = 0;
      int max_tries = 0;
      for (int i = 0; i < trials; ++i) {
        ContentionConfig c;
        c.clients = n;
        c.jitter = k;
        c.seed = o.seed + static_cast<std::uint64_t>(i);
        const ContentionResult r = RunContention(c);
        writes += static_cast<double>(r.writes);
        completion += Ms(r.completion);
        client_completion += Ms(r.mean_client_completion);
        over_cap += r.clients_over_attempt_cap;
        max_tries = std::max(max_tries, r.max_tries);
      }
      Row row;
      row["clients"] = n;
      row["jitter"] = std::string(JitterKindName(k));
      row["trials"] = trials;
      row["writes"] = Round(writes / trials, 1);
      row["writes_per_client"] = Round(writes / trials / n, 2);
      row["completion_ms"] = Round(completion / trials, 1);
      row["mean_client_completion_ms"] = Round(client_completion / trials, 1);
      row["max_tries"] = max_tries;
      row["clients_over_attempt_cap"] = Round(over_cap / trials, 2);
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

std::vector<ClientVariant> BrownOutClients() {
  return {ClientVariant::kNoRetry, ClientVariant::kRetries3, ClientVariant::kTokenBucket,
          ClientVariant::kRatioBudget, ClientVariant::kSaferetry};
}

// Overload: 100 slots, 50 ms of work each on average: ~2000 calls/s.
constexpr int kOverloadCapacity = 100;
constexpr double kOverloadThroughput = 2000;

std::vector<Row> BrownOut(const PresetOptions& o) {
  std::vector<ClientVariant> clients =
      o.client.has_value()
          ? std::vector<ClientVariant>{*o.client}
          : (o.sweep ? BrownOutClients() : std::vector<ClientVariant>{ClientVariant::kSaferetry});
  const int trials = TrialsOr(o, 1);
  std::vector<Row> rows;

  const bool overload_only = o.load_factor.has_value();
  const bool independent_only = o.failure_rate.has_value();
  if (!overload_only) {
    std::vector<double> ps;
    if (independent_only) {
      ps = {*o.failure_rate};
    } else if (o.sweep) {
      ps = {0.0, 0.01, 0.05, 0.10, 0.20, 0.30, 0.50, 0.70, 0.90};
    } else {
      ps = {0.10};
    }
    const double secs = o.seconds > 0 ? o.seconds : 30;
    for (double p : ps) {
      for (ClientVariant v : clients) {
        SimConfig c;
        c.server = BaseServer();
        c.server.failure_rate = p;
        c.client = MakeClientModel(v, o.policy);
        c.workload = OpenLoop(o.rate, secs);
        const Totals t = RunTrials(c, o, trials, ps.size() == 1 && clients.size() == 1);
        Row row;
        row["mode"] = "independent";
        row["failure_rate"] = p;
        row["client"] = std::string(ClientVariantName(v));
        t.Write(row);
        // Each attempt fails alone with probability p, so the success rate
        // cannot exceed (1 - p) x load: the line every policy sits on.
        row["success_ceiling"] = Round(std::min(1.0, (1 - p) * t.sum.LoadAmplification()), 5);
        rows.push_back(std::move(row));
      }
    }
  }
  if (!independent_only) {
    std::vector<double> fs;
    if (overload_only) {
      fs = {*o.load_factor};
    } else if (o.sweep) {
      fs = {0.5, 0.8, 1.0, 1.2, 1.5, 2.0, 3.0};
    }
    const double secs = o.seconds > 0 ? o.seconds : 10;
    for (double f : fs) {
      for (ClientVariant v : clients) {
        SimConfig c;
        c.server = BaseServer();
        c.server.capacity = kOverloadCapacity;
        c.server.service =
            LatencyModel{LatencyModel::Kind::kExponential, milliseconds(50), Duration{0}};
        c.client = MakeClientModel(v, o.policy);
        c.workload = OpenLoop(f * kOverloadThroughput, secs);
        const Totals t = RunTrials(c, o, trials, fs.size() == 1 && clients.size() == 1);
        Row row;
        row["mode"] = "overload";
        row["load_factor"] = f;
        row["client"] = std::string(ClientVariantName(v));
        t.Write(row);
        rows.push_back(std::move(row));
      }
    }
  }
  return rows;
}

// Slow commits in the hang preset: 2 % of processed attempts take
// Uniform(5 s, 25 s). With the default 30 s deadline a keyed write's attempt
// timeout is 20.99 s (30 % kept to resolve it), so about a fifth of them time
// out while the server is still working and commit up to 4 s later.
constexpr double kHangSlowRate = 0.02;

std::vector<Row> LostResponses(const PresetOptions& o, bool hang) {
  std::vector<ClientVariant> clients =
      o.client.has_value()
          ? std::vector<ClientVariant>{*o.client}
          : (o.sweep
                 ? std::vector<ClientVariant>{ClientVariant::kCareless, ClientVariant::kSaferetry}
                 : std::vector<ClientVariant>{ClientVariant::kSaferetry});
  std::vector<double> ls;
  if (o.loss_rate.has_value()) {
    ls = {*o.loss_rate};
  } else if (o.sweep) {
    ls = {0.0, 0.01, 0.02, 0.05, 0.10, 0.15, 0.20};
  } else {
    ls = {hang ? 0.20 : 0.10};
  }
  const int trials = TrialsOr(o, 1);
  const double secs = o.seconds > 0 ? o.seconds : 20;
  std::vector<Row> rows;
  for (double l : ls) {
    for (ClientVariant v : clients) {
      SimConfig c;
      c.server = BaseServer();
      if (hang) {
        c.server.hang_rate = l;
        c.server.slow_rate = o.slow_rate.value_or(kHangSlowRate);
      } else {
        c.server.loss_rate = l;
        c.server.slow_rate = o.slow_rate.value_or(0);
      }
      c.server.failure_rate = o.failure_rate.value_or(0);
      c.client = MakeClientModel(v, o.policy);
      c.workload = OpenLoop(o.rate, secs);
      // Hung calls resolve ~21 s after they start; the service keeps its
      // arrivals until they have (see Workload::steady_tail).
      c.workload.steady_tail = hang;
      const Totals t = RunTrials(c, o, trials, ls.size() == 1 && clients.size() == 1);
      Row row;
      row["loss_rate"] = l;
      row["slow_rate"] = c.server.slow_rate;
      row["client"] = std::string(ClientVariantName(v));
      t.Write(row);
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

// A 100 ms bucket after the outage counts as overloaded when the server
// turned away at least this share of the requests sent in it.
constexpr double kOverloadedShare = 0.05;

std::vector<Row> Outage(const PresetOptions& o) {
  std::vector<ClientVariant> clients =
      o.client.has_value()
          ? std::vector<ClientVariant>{*o.client}
          : (o.sweep ? std::vector<ClientVariant>{ClientVariant::kNoRetry, ClientVariant::kRetries3,
                                                  ClientVariant::kNoJitter10,
                                                  ClientVariant::kFullJitter10,
                                                  ClientVariant::kSaferetry}
                     : std::vector<ClientVariant>{ClientVariant::kSaferetry});
  const int trials = TrialsOr(o, 1);
  const double secs = o.seconds > 0 ? o.seconds : 40;
  const Duration outage_start = seconds(10);
  const Duration outage_end = seconds(20);
  const Duration bucket = milliseconds(100);
  // --breaker: every client twice, without and with the breaker, at the
  // same seed (the same arrivals).
  std::vector<std::optional<CircuitBreakerOptions>> breakers = {std::nullopt};
  if (o.breaker) {
    breakers = {std::nullopt, o.policy.circuit_breaker.value_or(CircuitBreakerOptions{})};
  } else if (o.policy.circuit_breaker.has_value()) {
    breakers = {o.policy.circuit_breaker};
  }
  const bool single = clients.size() == 1 && breakers.size() == 1;
  std::vector<Row> rows;
  for (ClientVariant v : clients) {
    for (const std::optional<CircuitBreakerOptions>& breaker : breakers) {
      SimConfig c;
      c.server = BaseServer();
      // 40 slots of 20 ms: ~2000 calls/s, twice the offered load.
      c.server.capacity = 40;
      c.server.failure_rate = o.failure_rate.value_or(0);
      c.server.outage_start = outage_start;
      c.server.outage_end = outage_end;
      c.client = MakeClientModel(v, o.policy);
      c.client.circuit_breaker = breaker;
      c.workload = OpenLoop(o.rate, secs);
      c.bucket = bucket;
      Totals t;
      double baseline = 0, peak = 0, during = 0, drain = 0;
      std::int64_t rejected_after = 0;
      for (int i = 0; i < trials; ++i) {
        c.seed = o.seed + static_cast<std::uint64_t>(i);
        SimResult r = RunSimulation(c);
        t.Add(r);
        const double per_s = 1.0 / std::chrono::duration<double>(bucket).count();
        const auto idx = [&](Duration d) { return static_cast<std::size_t>(d / bucket); };
        double base_sum = 0, during_sum = 0, peak_i = 0;
        std::size_t base_n = 0, during_n = 0, last_rejected = 0;
        for (std::size_t b = 0; b < r.timeline.size(); ++b) {
          const double load =
              static_cast<double>(r.timeline[b].attempts + r.timeline[b].status_queries) * per_s;
          if (b >= idx(seconds(2)) && b < idx(outage_start)) {
            base_sum += load;
            ++base_n;
          } else if (b >= idx(outage_start) && b < idx(outage_end)) {
            during_sum += load;
            ++during_n;
          } else if (b >= idx(outage_end)) {
            peak_i = std::max(peak_i, load);
            // Overloaded: the server turned away at least 5 % of the bucket's
            // requests. A stray refusal (a momentary burst of arrivals at a
            // server with room to spare) is not overload.
            const std::int64_t sent = r.timeline[b].attempts + r.timeline[b].status_queries;
            if (r.timeline[b].rejected > 0 && static_cast<double>(r.timeline[b].rejected) >=
                                                  kOverloadedShare * static_cast<double>(sent)) {
              last_rejected = b + 1;
            }
            rejected_after += r.timeline[b].rejected;
          }
        }
        baseline += base_n ? base_sum / static_cast<double>(base_n) : 0;
        during += during_n ? during_sum / static_cast<double>(during_n) : 0;
        peak += peak_i;
        if (last_rejected > idx(outage_end)) {
          drain += std::chrono::duration<double>(bucket).count() *
                   static_cast<double>(last_rejected - idx(outage_end));
        }
        if (i == 0 && o.timeline != nullptr && single) {
          *o.timeline = std::move(r.timeline);
          if (o.timeline_bucket != nullptr) *o.timeline_bucket = bucket;
        }
      }
      const double n = trials;
      Row row;
      row["client"] = std::string(ClientVariantName(v));
      row["baseline_attempts_per_s"] = Round(baseline / n, 1);
      row["outage_attempts_per_s"] = Round(during / n, 1);
      row["peak_attempts_per_s_after_recovery"] = Round(peak / n, 1);
      row["peak_ratio"] = Round(baseline > 0 ? peak / baseline : 0, 2);
      row["overloaded_s_after_recovery"] = Round(drain / n, 1);
      row["rejected_after_recovery"] = Round(static_cast<double>(rejected_after) / n, 1);
      row["breaker"] = breaker.has_value();
      // Requests that reached the dead server, and what the breaker spared it.
      row["outage_requests"] = Round(static_cast<double>(t.sum.outage_requests) / n, 1);
      const std::int64_t refused =
          t.sum.stop_reasons[static_cast<std::size_t>(StopReason::kCircuitOpen)];
      row["refused_by_breaker"] = Round(static_cast<double>(refused) / n, 1);
      row["breaker_refusals"] = Round(static_cast<double>(t.sum.circuit_refusals) / n, 1);
      t.Write(row);
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

// The tail preset: GETs (safe to send twice) against a server whose
// responses are slow with a small probability, each attempt drawn on its
// own. The same client twice on the same seed (the same arrivals): without
// hedging, and with one hedge after the observed p95 (or a fixed delay).
constexpr double kTailRate = 0.02;
constexpr double kTailFactor = 100;
// Long enough that a slow response (~1 s) finishes within the attempt
// timeout (half of the call for a retryable request).
constexpr Duration kTailDeadline = seconds(5);

std::vector<Row> Tail(const PresetOptions& o) {
  const ClientVariant v = o.client.value_or(ClientVariant::kSaferetry);
  std::vector<double> rates;
  if (o.tail_rate.has_value()) {
    rates = {*o.tail_rate};
  } else if (o.sweep) {
    rates = {0.0, 0.005, 0.01, 0.02, 0.05};
  } else {
    rates = {kTailRate};
  }
  const double factor = o.tail_factor.value_or(kTailFactor);
  const int trials = TrialsOr(o, 1);
  const double secs = o.seconds > 0 ? o.seconds : 20;
  BasePolicy base = o.policy;
  // The preset's own deadline, unless a policy file gives one.
  if (base.source == BasePolicy{}.source) base.timeout = kTailDeadline;
  std::vector<Row> rows;
  for (double rate : rates) {
    SimConfig c;
    c.server = BaseServer();
    // ~10 ms of work, 5 ms per hop: ~20 ms per attempt outside the tail.
    c.server.service =
        LatencyModel{LatencyModel::Kind::kAbsNormal, milliseconds(10), milliseconds(2)};
    c.server.tail_rate = rate;
    c.server.tail_factor = factor;
    c.server.failure_rate = o.failure_rate.value_or(0);
    c.client = MakeClientModel(v, base);
    c.client.hedging = HedgingOptions{};  // the run without hedging
    // A GET: safe and idempotent, no key, nothing to query.
    c.client.policy.traits = RequestTraits{/*idempotent=*/true, /*safe=*/true, /*keyed=*/false};
    c.client.policy.has_status_query = false;
    c.workload = OpenLoop(o.rate, secs);
    const Totals plain = RunTrials(c, o, trials, rates.size() == 1);

    SimConfig h = c;
    h.client.name += "+hedging";
    h.client.hedging.enabled = true;
    h.client.hedging.max_hedges = 1;
    if (base.hedging.enabled) h.client.hedging = base.hedging;  // the policy file's
    if (o.hedge_delay_ms.has_value()) {
      h.client.hedging.delay_from_p95 = false;
      h.client.hedging.delay = std::chrono::duration_cast<Duration>(
          std::chrono::duration<double, std::milli>(*o.hedge_delay_ms));
    } else if (!base.hedging.enabled) {
      h.client.hedging.delay_from_p95 = true;
    }
    const Totals hedged = RunTrials(h, o, trials, false);

    const double n = static_cast<double>(std::max(trials, 1));
    const auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
    Row row;
    row["tail_rate"] = rate;
    row["tail_factor"] = factor;
    row["client"] = std::string(ClientVariantName(v));
    row["hedge_delay"] = h.client.hedging.delay_from_p95 ? "p95" : "fixed";
    row["hedge_delay_ms"] = Round(hedged.hedge_delay_ms / n, 2);
    row["calls"] = Round(static_cast<double>(plain.sum.calls) / n, 1);
    row["requests_no_hedge"] = Round(static_cast<double>(plain.sum.attempts) / n, 1);
    row["requests_hedged"] = Round(static_cast<double>(hedged.sum.attempts) / n, 1);
    row["hedges_sent"] = Round(static_cast<double>(hedged.sum.hedges) / n, 1);
    row["extra_request_ratio"] = Round(
        ratio(static_cast<double>(hedged.sum.attempts), static_cast<double>(plain.sum.attempts)) -
            (plain.sum.attempts > 0 ? 1.0 : 0.0),
        4);
    row["p50_ms_no_hedge"] = Round(plain.p50_ms / n, 2);
    row["p99_ms_no_hedge"] = Round(plain.p99_ms / n, 2);
    row["p999_ms_no_hedge"] = Round(plain.p999_ms / n, 2);
    row["p50_ms_hedged"] = Round(hedged.p50_ms / n, 2);
    row["p99_ms_hedged"] = Round(hedged.p99_ms / n, 2);
    row["p999_ms_hedged"] = Round(hedged.p999_ms / n, 2);
    row["p99_ratio"] = Round(ratio(plain.p99_ms, hedged.p99_ms), 2);
    row["success_rate_no_hedge"] = Round(plain.sum.SuccessRate(), 5);
    row["success_rate_hedged"] = Round(hedged.sum.SuccessRate(), 5);
    // Every client's usual figures, per run.
    Row no_hedge_row;
    plain.Write(no_hedge_row);
    Row hedged_row;
    hedged.Write(hedged_row);
    row["no_hedge"] = std::move(no_hedge_row);
    row["hedged"] = std::move(hedged_row);
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace

std::string_view ClientVariantName(ClientVariant v) {
  switch (v) {
    case ClientVariant::kNoRetry:
      return "no-retry";
    case ClientVariant::kRetries3:
      return "retries3";
    case ClientVariant::kTokenBucket:
      return "token-bucket";
    case ClientVariant::kRatioBudget:
      return "ratio-budget";
    case ClientVariant::kSaferetry:
      return "saferetry";
    case ClientVariant::kCareless:
      return "careless";
    case ClientVariant::kNoJitter10:
      return "no-jitter-10";
    case ClientVariant::kFullJitter10:
      return "full-jitter-10";
  }
  return "unknown";
}

bool ParseClientVariant(std::string_view name, ClientVariant* out) {
  for (ClientVariant v :
       {ClientVariant::kNoRetry, ClientVariant::kRetries3, ClientVariant::kTokenBucket,
        ClientVariant::kRatioBudget, ClientVariant::kSaferetry, ClientVariant::kCareless,
        ClientVariant::kNoJitter10, ClientVariant::kFullJitter10}) {
    if (ClientVariantName(v) == name) {
      *out = v;
      return true;
    }
  }
  return false;
}

ClientModel MakeClientModel(ClientVariant variant, const BasePolicy& base) {
  ClientModel m;
  m.name = std::string(ClientVariantName(variant));
  CallPolicy& p = m.policy;
  p.max_attempts = std::clamp(base.max_attempts, 1, kMaxAttemptsHardCap);
  p.max_status_queries = std::clamp(base.max_status_queries, 0, kMaxStatusQueriesHardCap);
  BackoffParams backoff = base.backoff;
  m.poll_backoff = base.poll_backoff;
  m.deadline_options = base.deadline_options;
  // A POST with an idempotency key, as saferetry sends by default.
  p.traits = RequestTraits{/*idempotent=*/false, /*safe=*/false, /*keyed=*/true};
  p.has_status_query = base.status_query;
  p.server_deduplicates = base.server_deduplicates;
  m.timeout = base.timeout;
  m.classifier = base.classifier;
  m.circuit_breaker = base.circuit_breaker;
  if (variant == ClientVariant::kSaferetry) m.hedging = base.hedging;
  m.make_budget = base.make_budget ? base.make_budget : [] {
    return std::shared_ptr<RetryBudget>(MakeRatioBudget(RatioBudgetOptions{}).value());
  };
  m.make_query_budget = base.make_query_budget ? base.make_query_budget : [] {
    return std::shared_ptr<RetryBudget>(MakeRatioBudget(DefaultStatusQueryAllowance()).value());
  };
  switch (variant) {
    case ClientVariant::kNoRetry:
      p.max_attempts = 1;
      m.make_budget = Unlimited;
      break;
    case ClientVariant::kRetries3:
      p.max_attempts = 4;
      m.make_budget = Unlimited;
      break;
    case ClientVariant::kTokenBucket:
      p.max_attempts = 4;
      m.make_budget = [] {
        return std::shared_ptr<RetryBudget>(MakeTokenThrottle(TokenThrottleOptions{}).value());
      };
      break;
    case ClientVariant::kRatioBudget:
      p.max_attempts = 4;
      m.make_budget = [] {
        RatioBudgetOptions r;
        r.percent = 0.20;  // Finagle's default
        return std::shared_ptr<RetryBudget>(MakeRatioBudget(r).value());
      };
      break;
    case ClientVariant::kSaferetry:
      break;
    case ClientVariant::kCareless:
      m.careless = true;
      break;
    case ClientVariant::kNoJitter10:
      p.max_attempts = 10;
      backoff.jitter = JitterKind::kNone;
      m.make_budget = Unlimited;
      break;
    case ClientVariant::kFullJitter10:
      p.max_attempts = 10;
      backoff.jitter = JitterKind::kFull;
      m.make_budget = Unlimited;
      break;
  }
  // Built once per model, as a RetryPolicy builds it; the machine holds a
  // pointer. Invalid parameters fall back to the default curve (the policy
  // file's reader has already rejected them).
  auto curve = ExponentialBackoff::Create(backoff);
  m.backoff = curve.ok() ? std::shared_ptr<const BackoffPolicy>(*std::move(curve))
                         : ExponentialBackoff::Create(BackoffParams{}).value();
  p.backoff = m.backoff.get();
  return m;
}

const std::vector<std::string_view>& PresetNames() {
  static const auto* names = new std::vector<std::string_view>{
      "contention", "brown-out", "lost-responses", "hang", "outage", "tail"};
  return *names;
}

std::string_view PresetDescription(std::string_view preset) {
  if (preset == "contention") return "optimistic-concurrency writes, N clients start together";
  if (preset == "brown-out") return "independent failures and load-driven overload, 1000 calls/s";
  if (preset == "lost-responses") return "committed requests whose response is lost";
  if (preset == "hang") {
    return "committed requests whose response hangs until the attempt timeout, slow commits";
  }
  if (preset == "outage") return "the downstream refuses for 10 s, then comes back";
  if (preset == "tail") {
    return "GETs, a few responses 100x slower: no hedging vs hedging at the observed p95";
  }
  return "";
}

absl::StatusOr<std::vector<Row>> RunPreset(const PresetOptions& o) {
  if (o.breaker && o.preset != "outage") {
    return absl::InvalidArgumentError(
        "--breaker: used by the outage preset only (a policy's circuitBreaker applies to every "
        "preset)");
  }
  if (absl::Status s = CheckRate("--failure-rate", o.failure_rate, 1.0); !s.ok()) return s;
  if (absl::Status s = CheckRate("--loss-rate", o.loss_rate, 1.0); !s.ok()) return s;
  if (absl::Status s = CheckRate("--slow-rate", o.slow_rate, 1.0); !s.ok()) return s;
  if (absl::Status s = CheckRate("--tail-rate", o.tail_rate, 1.0); !s.ok()) return s;
  if (o.tail_factor.has_value() && !(*o.tail_factor >= 1 && *o.tail_factor <= 10000)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tail-factor: must be in [1, 10000], got ", *o.tail_factor));
  }
  if (o.hedge_delay_ms.has_value() && !(*o.hedge_delay_ms >= 0 && *o.hedge_delay_ms <= 60000)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--hedge-delay-ms: must be in [0, 60000], got ", *o.hedge_delay_ms));
  }
  if (o.preset != "tail") {
    const char* tail_flag = o.tail_rate        ? "--tail-rate"
                            : o.tail_factor    ? "--tail-factor"
                            : o.hedge_delay_ms ? "--hedge-delay-ms"
                                               : nullptr;
    if (tail_flag != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(tail_flag, ": used by the tail preset only, not ", o.preset));
    }
  }
  if (o.load_factor.has_value() && !(*o.load_factor > 0 && *o.load_factor <= 100)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--load-factor: must be in (0, 100], got ", *o.load_factor));
  }
  if (o.clients.has_value() && (*o.clients < 1 || *o.clients > 100000)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--clients: must be in [1, 100000], got ", *o.clients));
  }
  if (o.trials < 0 || o.trials > 100000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--trials: must be in [1, 100000], got ", o.trials));
  }
  if (!(o.rate > 0 && o.rate <= 1e6)) {
    return absl::InvalidArgumentError(absl::StrCat("--rate: must be in (0, 1e6], got ", o.rate));
  }
  if (!(o.seconds >= 0 && o.seconds <= 3600)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--seconds: must be in (0, 3600], got ", o.seconds));
  }
  if (o.preset == "contention") {
    if (o.failure_rate || o.loss_rate || o.load_factor || o.client || o.slow_rate) {
      return absl::InvalidArgumentError(
          "--preset: contention takes --clients, --jitter, --trials and --seed only");
    }
    return Contention(o);
  }
  if (o.clients.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--clients: only the contention preset has clients; ", o.preset,
                     " uses open-loop arrivals (--rate)"));
  }
  if (o.slow_rate && o.preset != "lost-responses" && o.preset != "hang") {
    return absl::InvalidArgumentError(
        absl::StrCat("--slow-rate: not used by ", o.preset, " (lost-responses, hang)"));
  }
  if (o.preset == "brown-out") {
    if (o.loss_rate) return absl::InvalidArgumentError("--loss-rate: not used by brown-out");
    if (o.failure_rate && o.load_factor) {
      return absl::InvalidArgumentError(
          "--load-factor: choose either --failure-rate (independent) or --load-factor (overload)");
    }
    return BrownOut(o);
  }
  if (o.preset == "lost-responses") {
    if (o.load_factor)
      return absl::InvalidArgumentError("--load-factor: not used by lost-responses");
    return LostResponses(o, /*hang=*/false);
  }
  if (o.preset == "hang") {
    if (o.load_factor) return absl::InvalidArgumentError("--load-factor: not used by hang");
    return LostResponses(o, /*hang=*/true);
  }
  if (o.preset == "outage") {
    if (o.loss_rate || o.load_factor) {
      return absl::InvalidArgumentError("--loss-rate: not used by outage");
    }
    return Outage(o);
  }
  if (o.preset == "tail") {
    if (o.loss_rate) return absl::InvalidArgumentError("--loss-rate: not used by tail");
    if (o.load_factor) return absl::InvalidArgumentError("--load-factor: not used by tail");
    return Tail(o);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--preset: unknown preset \"", o.preset,
                   "\" (contention, brown-out, lost-responses, hang, outage, tail)"));
}

}  // namespace sim
}  // namespace saferetry

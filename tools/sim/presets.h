// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The simulator's scenarios. Each preset runs either one point (the flags
// pick it) or, with `sweep`, the whole figure; every point is one row of
// named values (an ordered JSON object), printed as a table or as JSON.
//
//   contention      the jitter experiment: mean writes and completion time
//   brown-out       independent failures 0-90 % and load-driven overload
//   lost-responses  response loss 0-20 %: careless client vs saferetry
//   hang            responses lost by hanging until the attempt timeout,
//                   plus slow commits (long in-progress windows)
//   outage          the downstream refuses for 10 s, then the retry peak
//   tail            GETs, 2 % of responses 100x slower: no hedging vs
//                   hedging at the observed p95

#ifndef SAFERETRY_TOOLS_SIM_PRESETS_H_
#define SAFERETRY_TOOLS_SIM_PRESETS_H_

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/sim/simulator.h"

namespace saferetry {
namespace sim {

using Row = nlohmann::ordered_json;

/// The clients compared by the presets.
enum class ClientVariant {
  kNoRetry,       ///< one attempt
  kRetries3,      ///< 3 retries (4 attempts), no budget
  kTokenBucket,   ///< 3 retries + gRPC retryThrottling {maxTokens 10, tokenRatio 0.1}
  kRatioBudget,   ///< 3 retries + Finagle's default budget (20 % + 10/s over 10 s)
  kSaferetry,     ///< the policy under test (library defaults or --policy)
  kCareless,      ///< the policy's attempts, but keyless: every retry is a new request
  kNoJitter10,    ///< 10 attempts, exponential backoff without jitter, no budget
  kFullJitter10,  ///< 10 attempts, full jitter, no budget
};

std::string_view ClientVariantName(ClientVariant v);
bool ParseClientVariant(std::string_view name, ClientVariant* out);

/// The policy of the `kSaferetry` client (and the base of the others'
/// backoff and deadline). Defaults: the library's defaults plus a status
/// query, which the model server offers.
struct BasePolicy {
  int max_attempts = 3;
  /// 0: derived from the deadline and the poll pacing, as the library does.
  int max_status_queries = 0;
  BackoffParams backoff;
  BackoffParams poll_backoff = DefaultPollBackoff();
  Duration timeout = std::chrono::seconds(30);
  DeadlineOptions deadline_options;
  bool status_query = true;
  bool server_deduplicates = false;
  /// Null: `MakeRatioBudget` with its defaults.
  std::function<std::shared_ptr<RetryBudget>()> make_budget;
  /// The status-query allowance. Null: `DefaultStatusQueryAllowance()`.
  std::function<std::shared_ptr<RetryBudget>()> make_query_budget;
  /// Null: the default classifier.
  std::shared_ptr<const Classifier> classifier;
  /// The policy's `saferetry.circuitBreaker`; empty: none.
  std::optional<CircuitBreakerOptions> circuit_breaker;
  /// The policy's hedging (`hedgingPolicy`, `saferetry.hedging`): the
  /// saferetry client hedges as the file says; the tail preset's hedged run
  /// takes it instead of its own (one hedge at the observed p95).
  HedgingOptions hedging;
  /// Where the policy came from, for the report.
  std::string source = "library defaults";
};

/// The client model for `variant` built on `base`.
ClientModel MakeClientModel(ClientVariant variant, const BasePolicy& base);

/// What the command line chose.
struct PresetOptions {
  std::string preset;
  bool sweep = false;
  std::optional<int> clients;
  int trials = 0;  // 0 = the preset's default
  std::uint64_t seed = 1;
  std::optional<JitterKind> jitter;
  std::optional<double> failure_rate;
  /// lost-responses: replies lost by a reset; hang: replies that hang until
  /// the attempt timeout.
  std::optional<double> loss_rate;
  /// lost-responses and hang: processed attempts that are slow commits
  /// (`ServerModel::slow_rate`; hang default 2 %, lost-responses 0).
  std::optional<double> slow_rate;
  /// Brown-out: offered load as a multiple of server capacity (switches the
  /// point to the load-driven overload model).
  std::optional<double> load_factor;
  std::optional<ClientVariant> client;
  /// Open-loop arrival rate, calls per second.
  double rate = 1000;
  /// Simulated arrival window in seconds (0 = the preset's default).
  double seconds = 0;
  /// outage: run every client without and with a circuit breaker (the
  /// policy's `circuitBreaker`, else `CircuitBreakerOptions{}`).
  bool breaker = false;
  /// tail: the fraction of responses in the slow tail (default 0.02) and
  /// how much slower they are (default 100).
  std::optional<double> tail_rate;
  std::optional<double> tail_factor;
  /// tail: a fixed hedge delay in milliseconds instead of the observed p95.
  std::optional<double> hedge_delay_ms;
  BasePolicy policy;
  /// For single points: the timeline of the (first) run.
  std::vector<TimelineBucket>* timeline = nullptr;
  Duration* timeline_bucket = nullptr;
};

/// The preset names, in the order of the help text.
const std::vector<std::string_view>& PresetNames();

/// Runs the preset: one row per point. InvalidArgument naming the flag when
/// the options do not fit the preset ("--loss-rate: ...").
absl::StatusOr<std::vector<Row>> RunPreset(const PresetOptions& options);

/// The column a sweep's table is grouped by, e.g. "clients" for contention.
std::string_view PresetDescription(std::string_view preset);

}  // namespace sim
}  // namespace saferetry

#endif  // SAFERETRY_TOOLS_SIM_PRESETS_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Policy configuration from JSON, so a service can tune its retries without
// recompiling. Two document shapes are accepted (docs/configuration.md):
//
//   1. saferetry's own document: gRPC's `retryPolicy` and `retryThrottling`
//      objects, with gRPC's field names and value formats, plus a `saferetry`
//      object for what gRPC has no word for. Unknown fields are an error.
//
//      {
//        "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.1s",
//                        "maxBackoff": "1s", "backoffMultiplier": 2,
//                        "retryableStatusCodes": ["UNAVAILABLE"]},
//        "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1},
//        "saferetry": {"deadline": "2s",
//                      "statusQuery": {"urlTemplate": "https://api/orders/by-key/{key}"}}
//      }
//
//   2. a whole gRPC service config (`methodConfig`, `retryThrottling`,
//      `loadBalancingConfig`, ...): the retryPolicy (or hedgingPolicy) and
//      `timeout` of the method config chosen by `LoadOptions::method` (or the
//      only one) are taken; fields with no HTTP meaning are ignored with a
//      warning.
//
// gRPC's `hedgingPolicy` (`maxAttempts`, `hedgingDelay`,
// `nonFatalStatusCodes`) is accepted in both shapes, instead of a
// `retryPolicy` (gRPC allows one of the two), and becomes `hedging`;
// `saferetry.hedging` sets the same options with saferetry's names
// (docs/hedging.md). Only `AsyncClient` hedges.
//
// Errors are `InvalidArgument` naming the JSON path and what was expected:
//   `$.retryPolicy.maxAttempts: expected an integer >= 1, got "three"`.
// Nothing here throws.
//
// @code
//   auto policy = saferetry::LoadPolicyFile("/etc/orders/retry.json");
//   if (!policy.ok()) return policy.status();
//   for (const auto& w : policy->warnings) LOG(WARNING) << w;
//   saferetry::ClientOptions options;
//   options.transport = ...;
//   if (auto s = saferetry::ApplyToClientOptions(*policy, &options); !s.ok()) return s;
//   auto client = saferetry::Client::Create(std::move(options));
//   // Every call of this client now follows the policy; a call may name
//   // another with CallOptions::policy (saferetry::ToRetryPolicy).
// @endcode

#ifndef SAFERETRY_CONFIG_H_
#define SAFERETRY_CONFIG_H_

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "saferetry/backoff.h"
#include "saferetry/budget_registry.h"
#include "saferetry/circuit_breaker.h"
#include "saferetry/client.h"
#include "saferetry/deadline.h"
#include "saferetry/grpc_codes_classifier.h"
#include "saferetry/idempotency.h"
#include "saferetry/result.h"
#include "saferetry/retry_budget.h"
#include "saferetry/retry_policy.h"
#include "saferetry/server_hints.h"

namespace saferetry {

/// A complete retry configuration: the retry policy (`RetryPolicyOptions`,
/// which this extends: what `RetryPolicy::Create` builds) and the
/// client-wide seams (the budget, the classification, the circuit
/// breakers). Defaults equal the library defaults, so an empty document
/// (`{}`) gives `Policy{}`.
///
/// Where each inherited field comes from:
///   max_attempts        `retryPolicy.maxAttempts`, 1..kMaxAttemptsHardCap
///                       (larger values are clamped with a warning)
///   backoff             `retryPolicy.initialBackoff`, `maxBackoff`,
///                       `backoffMultiplier` and `saferetry.jitter`
///   timeout             `saferetry.deadline`, or `methodConfig[].timeout`
///   deadline_options    `saferetry.attemptTimeout` (or
///                       `retryPolicy.perAttemptRecvTimeout`) is
///                       `attempt_cap`; `saferetry.deadlineMargin` and
///                       `saferetry.minUsefulAttempt` are the margin and
///                       minimum useful attempt
///   max_status_queries  `saferetry.maxStatusQueries`
///   status_query        `saferetry.statusQuery.urlTemplate`
///   server_deduplicates `saferetry.serverDeduplicates`
///   key_mode, idempotency_header, key_form
///                       `saferetry.idempotency.{mode,header,form}`
///   deadline_header, attempt_header, request_id_header
///                       `saferetry.deadlineHeader`, `attemptHeader`,
///                       `requestIdHeader`; empty disables
///   hints               `saferetry.maxRetryAfter`, `doNotRetryHeader`
///   hedging             gRPC's `hedgingPolicy`: `maxAttempts` (>= 2) sets
///                       `max_attempts` and `max_hedges` =
///                       min(maxAttempts - 1, 3), `hedgingDelay` (default
///                       "0s") the delay, and `nonFatalStatusCodes` the codes
///                       whose answer lets the other copies run on (as
///                       `retryable_codes`; every other answer is final).
///                       `saferetry.hedging` ({enabled, delay, delayFromP95,
///                       maxHedges}), read after `hedgingPolicy`, wins.
/// `backoff_policy`, the status-query callback and `poll_backoff` have no
/// JSON form.
struct Policy : RetryPolicyOptions {
  /// `saferetry.circuitBreaker` ({failureRatio, window, minimumCalls,
  /// openFor, halfOpenProbes}; missing fields take the defaults of
  /// `CircuitBreakerOptions`). Absent or null (the default): no breaker.
  std::optional<CircuitBreakerOptions> circuit_breaker;

  // --- Budget ----------------------------------------------------------------
  /// `saferetry.budget`, or implied by which budget object is present: the
  /// shared retry budget's name. A built-in one — "ratio" (the default,
  /// `MakeRatioBudget`), "tokenThrottle" (`MakeTokenThrottle`), "costQuota"
  /// (`MakeCostQuota`), "none" (`MakeUnlimitedBudget`: no client-wide limit) —
  /// or one of a `BudgetRegistry` (budget_registry.h).
  std::string budget = "ratio";
  /// `retryThrottling` (used when `budget == "tokenThrottle"`).
  TokenThrottleOptions token_throttle;
  /// `saferetry.ratioBudget` (used when `budget == "ratio"`).
  RatioBudgetOptions ratio_budget;
  /// `saferetry.costQuota` (used when `budget == "costQuota"`).
  CostQuotaOptions cost_quota;
  /// `saferetry.budgetOptions`, the options of a registered budget, as
  /// compact JSON text of an object (what its factory gets as
  /// `BudgetSpec::options_json`). Empty when the document gave none; never
  /// set for a built-in budget.
  std::string budget_options;

  // --- Classification --------------------------------------------------------
  /// `saferetry.classification`: HTTP status -> class, applied first.
  std::map<int, AttemptClass> status_overrides;
  /// `retryPolicy.retryableStatusCodes` (or `hedgingPolicy.nonFatalStatusCodes`):
  /// canonical gRPC code names ("UNAVAILABLE"), as `GrpcCodesClassifierOptions::retryable_codes`.
  /// Empty together with `retryable_http_statuses` means "not given":
  /// saferetry's default classification applies unchanged.
  std::set<std::string> retryable_codes;
  /// HTTP statuses (400..599) listed in `retryableStatusCodes` (a saferetry
  /// extension).
  std::set<int> retryable_http_statuses;

  /// Things the loader changed or ignored (a clamped maxAttempts, a gRPC
  /// field with no HTTP meaning), each naming its JSON path. Not part of the
  /// configuration: `operator==` ignores it.
  std::vector<std::string> warnings;
};

/// Field-by-field equality of the configuration (warnings excluded).
bool operator==(const Policy& a, const Policy& b);
inline bool operator!=(const Policy& a, const Policy& b) { return !(a == b); }

/// How to load.
struct LoadOptions {
  /// For a gRPC service config: the method whose config is taken, as
  /// "package.Service/Method" (a leading '/' is allowed) or
  /// "package.Service". Matching follows gRPC: an exact {service, method}
  /// name first, then {service}, then the default (empty) name. Empty: the
  /// service config must hold exactly one method config.
  std::string method;
  /// Budgets of your own that `saferetry.budget` may name, besides the
  /// built-in ones. Not owned; must outlive the call. Null: built-ins only.
  /// A registered budget is made once while loading, to check its options
  /// (`saferetry.budgetOptions`), and dropped.
  const BudgetRegistry* budgets = nullptr;
};

/// Parses a policy document or a gRPC service config. InvalidArgument naming
/// the JSON path on any bad input (malformed JSON reports line and column).
/// Never throws.
absl::StatusOr<Policy> LoadPolicy(std::string_view json, const LoadOptions& options = {});

/// Reads `path` and parses it like `LoadPolicy`. Every error message starts
/// with the path ("/etc/retry.json: $.retryPolicy...", "/etc/retry.json:
/// cannot open: No such file or directory").
absl::StatusOr<Policy> LoadPolicyFile(const std::string& path, const LoadOptions& options = {});

/// The effective configuration as a saferetry policy document (every field
/// written out, defaults included). `LoadPolicy(DumpPolicy(p))` equals `p`
/// for any policy `LoadPolicy` returned.
std::string DumpPolicy(const Policy& policy);

/// The retry policy of `policy`, built once (`RetryPolicy::Create`):
/// InvalidArgument naming the field when its values are out of range
/// (possible only for a policy built by hand).
absl::StatusOr<std::shared_ptr<const RetryPolicy>> ToRetryPolicy(const Policy& policy);

/// Writes `policy` into `options`: the retry policy (`ToRetryPolicy`) as
/// the client's default, a new budget of the one `policy.budget` names (a
/// built-in one, or one of `budgets`) and the classifier (the default
/// classifier with the overrides or, when retryable codes are given, a
/// `GrpcCodesClassifier`; saferetry/grpc_codes_classifier.h) and, when the
/// policy has `circuit_breaker`, a new `CircuitBreakerRegistry` (without it,
/// `circuit_breakers` is left as it was). The transport, clock and random
/// are left alone. InvalidArgument naming the
/// field when the policy's values are out of range (possible only for a
/// policy built by hand), or when `policy.budget` is neither built in nor in
/// `budgets`; the registered factory's own error otherwise. `budgets` is not
/// owned and may be null (built-ins only).
absl::Status ApplyToClientOptions(const Policy& policy, ClientOptions* options,
                                  const BudgetRegistry* budgets = nullptr);

}  // namespace saferetry

#endif  // SAFERETRY_CONFIG_H_

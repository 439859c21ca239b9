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
// `retryPolicy` (gRPC allows one of the two), and becomes `Policy::hedging`;
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
//   saferetry::CallOptions call = saferetry::ToCallOptions(*policy);
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
#include "saferetry/circuit_breaker.h"
#include "saferetry/client.h"
#include "saferetry/deadline.h"
#include "saferetry/grpc_codes_classifier.h"
#include "saferetry/idempotency.h"
#include "saferetry/result.h"
#include "saferetry/retry_budget.h"
#include "saferetry/server_hints.h"

namespace saferetry {

/// Which shared retry budget a policy asks for.
enum class BudgetKind {
  /// `RatioBudget` (`saferetry.ratioBudget`); the library default.
  kRatio,
  /// `TokenThrottle` (gRPC's `retryThrottling`).
  kTokenThrottle,
  /// `CostQuota` (`saferetry.costQuota`).
  kCostQuota,
  /// `UnlimitedBudget`: no client-wide limit (`"budget": "none"`).
  kNone,
};

/// "ratio", "tokenThrottle", "costQuota", "none".
std::string_view BudgetKindName(BudgetKind kind);

/// A complete retry configuration: the per-call options, the client-wide
/// options and the budget choice. Defaults equal the library defaults, so an
/// empty document (`{}`) gives `Policy{}`.
struct Policy {
  // --- Per call (CallOptions) ----------------------------------------------
  /// `retryPolicy.maxAttempts`, 1..kMaxAttemptsHardCap (larger values are
  /// clamped with a warning). Default 3.
  int max_attempts = 3;
  /// `retryPolicy.initialBackoff`, `maxBackoff`, `backoffMultiplier` and
  /// `saferetry.jitter`.
  BackoffParams backoff;
  /// `saferetry.deadline`, or `methodConfig[].timeout`. Default 30 s.
  Duration timeout = std::chrono::seconds(30);
  /// `saferetry.attemptTimeout` (or `retryPolicy.perAttemptRecvTimeout`) is
  /// `deadline_options.attempt_cap`; `saferetry.deadlineMargin` and
  /// `saferetry.minUsefulAttempt` are the margin and minimum useful attempt.
  DeadlineOptions deadline_options;
  /// `saferetry.maxStatusQueries`, 0..kMaxStatusQueriesHardCap; 0 (the
  /// default) derives the cap from the deadline (`DefaultMaxStatusQueries`).
  int max_status_queries = 0;
  /// `saferetry.statusQuery.urlTemplate`; empty = no status query.
  std::string status_query_url_template;
  /// `saferetry.serverDeduplicates`. Default false.
  bool server_deduplicates = false;
  /// `saferetry.idempotency.mode`. Default auto.
  KeyMode key_mode = KeyMode::kAuto;
  /// Hedging (`CallOptions::hedging`). From gRPC's `hedgingPolicy`:
  /// `maxAttempts` (>= 2) sets `max_attempts` and `max_hedges` =
  /// min(maxAttempts - 1, 3), `hedgingDelay` (default "0s") the delay, and
  /// `nonFatalStatusCodes` the codes whose answer lets the other copies run
  /// on (as `retryable_codes`; every other answer is final). From
  /// `saferetry.hedging` ({enabled, delay, delayFromP95, maxHedges}), read
  /// after `hedgingPolicy` and winning over it. Default off.
  HedgingOptions hedging;

  // --- Client-wide (ClientOptions) -----------------------------------------
  /// `saferetry.idempotency.header`. Default "Idempotency-Key".
  std::string idempotency_header = std::string(kDefaultIdempotencyHeader);
  /// `saferetry.idempotency.form`. Default bare.
  KeyForm key_form = KeyForm::kBare;
  /// `saferetry.deadlineHeader`; empty disables. Default "X-Request-Timeout-Ms".
  std::string deadline_header = std::string(kDefaultDeadlineHeader);
  /// `saferetry.attemptHeader`; empty disables. Default "X-Retry-Attempt".
  std::string attempt_header = std::string(kDefaultAttemptHeader);
  /// `saferetry.requestIdHeader`; empty disables. Default "X-Request-Id".
  std::string request_id_header = std::string(kDefaultRequestIdHeader);
  /// `saferetry.maxRetryAfter` and `saferetry.doNotRetryHeader`.
  HintOptions hints;
  /// `saferetry.circuitBreaker` ({failureRatio, window, minimumCalls,
  /// openFor, halfOpenProbes}; missing fields take the defaults of
  /// `CircuitBreakerOptions`). Absent or null (the default): no breaker.
  std::optional<CircuitBreakerOptions> circuit_breaker;

  // --- Budget ----------------------------------------------------------------
  /// `saferetry.budget`, or implied by which budget object is present.
  BudgetKind budget = BudgetKind::kRatio;
  /// `retryThrottling` (used when `budget == kTokenThrottle`).
  TokenThrottleOptions token_throttle;
  /// `saferetry.ratioBudget` (used when `budget == kRatio`).
  RatioBudgetOptions ratio_budget;
  /// `saferetry.costQuota` (used when `budget == kCostQuota`).
  CostQuotaOptions cost_quota;

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

/// The per-call options of `policy` (listener, cancellation and key are left
/// empty for the caller).
CallOptions ToCallOptions(const Policy& policy);

/// Writes the client-wide part of `policy` into `options`: header names,
/// hints, a new budget of the chosen kind and the classifier (the default
/// classifier with the overrides or, when retryable codes are given, a
/// `GrpcCodesClassifier`; saferetry/grpc_codes_classifier.h) and, when the
/// policy has `circuit_breaker`, a new `CircuitBreakerRegistry` (without it,
/// `circuit_breakers` is left as it was). The transport, clock and random
/// are left alone. InvalidArgument naming the
/// field when the policy's values are out of range (possible only for a
/// policy built by hand).
absl::Status ApplyToClientOptions(const Policy& policy, ClientOptions* options);

}  // namespace saferetry

#endif  // SAFERETRY_CONFIG_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// What the JSON policy files share (not API): the error-message helpers, the
// typed readers, proto3 duration text and the document loader. The jobs live
// in their own files of src/config/:
//   config.cc          budget names, Policy equality, the factories
//                      (ToRetryPolicy, ApplyToClientOptions);
//   json.cc            value formats and typed readers;
//   reader.cc          the document sections, validation and LoadPolicy;
//   service_config.cc  choosing a gRPC service config's method config;
//   dump.cc            DumpPolicy.
// The gRPC status-code table and GrpcCodesClassifier are in
// src/core/grpc_codes_classifier.cc.
//
// Every reader type-checks a value before it reads it, and the parser runs in
// its non-throwing mode, so no nlohmann exception can escape: bad input
// becomes an InvalidArgument naming the JSON path.

#ifndef SAFERETRY_SRC_CONFIG_CONFIG_INTERNAL_H_
#define SAFERETRY_SRC_CONFIG_CONFIG_INTERNAL_H_

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "saferetry/config.h"

#define SAFERETRY_RETURN_IF_ERROR(expr) \
  do {                                  \
    absl::Status _s = (expr);           \
    if (!_s.ok()) return _s;            \
  } while (false)

namespace saferetry {
namespace config_internal {

using nlohmann::json;

// absl::StrCat does not take std::string_view in this Abseil build.
template <typename... Args>
std::string Cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

inline constexpr std::size_t kMaxDocumentBytes = 1 << 20;
// Durations above this (100 years) are refused: they could not be meant, and
// they keep every sum of durations far from overflowing nanoseconds.
inline constexpr std::int64_t kMaxDurationSeconds = 3153600000;

// --- Paths and messages (json.cc) -------------------------------------

// `path` extended by an object key: `$.a.b`, or `$.a["not an identifier"]`.
std::string Child(const std::string& path, std::string_view key);
// `path` extended by an array index: `$.a[3]`.
std::string Index(const std::string& path, std::size_t i);
// "<path>: expected <what>, got <the value, shortened>".
absl::Status Expected(const std::string& path, std::string_view what, const json& got);
// "<path>: <message>".
absl::Status Invalid(const std::string& path, std::string_view message);

// --- proto3 JSON Duration text (json.cc) -------------------------------

// Decimal seconds, up to nine fractional digits, an "s" suffix ("0.1s", "1s",
// "2.500s"), at most kMaxDurationSeconds.
bool ParseProtoDuration(std::string_view text, Duration* out);
// The canonical form: 0, 3, 6 or 9 fractional digits.
std::string FormatProtoDuration(Duration d);

// --- Typed readers (json.cc) -------------------------------------------

absl::Status ReadObject(const json& j, const std::string& path);
// Every key of object `j` is in `allowed`.
absl::Status CheckKeys(const json& j, const std::string& path,
                       const std::vector<std::string_view>& allowed);
absl::Status ReadInt(const json& j, const std::string& path, std::int64_t min, std::int64_t max,
                     std::int64_t* out);
absl::Status ReadNumber(const json& j, const std::string& path, double min, double max,
                        bool min_exclusive, double* out);
absl::Status ReadBool(const json& j, const std::string& path, bool* out);
absl::Status ReadString(const json& j, const std::string& path, std::string* out);
absl::Status ReadDuration(const json& j, const std::string& path, bool allow_zero, Duration* out);
// A header name, or empty when `allow_empty`.
absl::Status ReadHeaderName(const json& j, const std::string& path, bool allow_empty,
                            std::string* out);

// --- Budgets by name (config.cc) ---------------------------------------------

inline constexpr std::string_view kBudgetOptionsPath = "$.saferetry.budgetOptions";

// What a registered budget's factory gets for `policy`: its name, its
// options ("{}" when none were given) and kBudgetOptionsPath. Views into
// `policy`.
BudgetSpec SpecOf(const Policy& policy);

// --- Document sections (reader.cc) ------------------------------------

// Reads the sections of one document into `*policy`, remembering what it saw
// for the checks that span sections.
struct Loader {
  Policy* policy;
  // Budgets of the user that `saferetry.budget` may name; null: built-ins.
  const BudgetRegistry* budgets = nullptr;
  // Which budget objects were present, for the consistency check.
  bool saw_throttling = false;
  bool saw_ratio = false;
  bool saw_quota = false;
  bool saw_budget_name = false;
  bool saw_budget_options = false;
  bool saw_attempt_timeout = false;
  bool saw_deadline = false;

  void Warn(std::string w) { policy->warnings.push_back(std::move(w)); }

  // `grpc_required`: inside a gRPC service config, where gRPC requires the
  // five classic fields.
  absl::Status RetryPolicy(const json& j, const std::string& path, bool grpc_required);
  // A `maxAttempts` >= `min` into policy->max_attempts, clamped to the hard
  // cap with a warning.
  absl::Status MaxAttempts(const json& j, const std::string& path, std::int64_t min);
  // gRPC's hedgingPolicy; `grpc_required`: maxAttempts must be present.
  absl::Status HedgingPolicy(const json& j, const std::string& path, bool grpc_required);
  // `allow_empty`: an empty array is accepted (nonFatalStatusCodes).
  absl::Status RetryableCodes(const json& j, const std::string& path, bool allow_empty = false);
  absl::Status HedgingObject(const json& j, const std::string& path);
  absl::Status PhaseLimitsObject(const json& j, const std::string& path);
  absl::Status RetryThrottling(const json& j, const std::string& path);
  absl::Status Saferetry(const json& j, const std::string& path);
  absl::Status StatusQueryObject(const json& j, const std::string& path);
  absl::Status IdempotencyObject(const json& j, const std::string& path);
  absl::Status Ratio(const json& j, const std::string& path);
  absl::Status Quota(const json& j, const std::string& path);
  absl::Status CircuitBreakerObject(const json& j, const std::string& path);
  absl::Status ClassificationObject(const json& j, const std::string& path);
  // `saferetry.responsePredicate`: {maxBodyBytes, rules: [...]}.
  absl::Status ResponsePredicateObject(const json& j, const std::string& path);
  absl::Status ResponseRuleObject(const json& j, const std::string& path, ResponseRule* out);
  // Budget consistency: at most one budget object, and an explicit name must
  // agree with it; `budgetOptions` only for a registered budget, whose
  // factory must accept them.
  absl::Status ResolveBudget();
};

// --- gRPC service config (service_config.cc) --------------------------

// Reads a whole gRPC service config (`doc` has `methodConfig`): the method
// config `options.method` chooses, `retryThrottling` and `saferetry`.
absl::Status LoadServiceConfig(const json& doc, const LoadOptions& options, Loader& loader);

}  // namespace config_internal
}  // namespace saferetry

#endif  // SAFERETRY_SRC_CONFIG_CONFIG_INTERNAL_H_

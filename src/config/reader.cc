// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Reading and validating a policy document: each section of saferetry's own
// document (and of the parts of a gRPC service config it shares), the checks
// that span sections, LoadPolicy and LoadPolicyFile.

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "config/config_internal.h"
#include "saferetry/call_state_machine.h"
#include "saferetry/config.h"
#include "saferetry/grpc_codes_classifier.h"
#include "saferetry/response_predicate.h"
#include "saferetry/status_query.h"

namespace saferetry {
namespace config_internal {

absl::Status Loader::RetryPolicy(const json& j, const std::string& path, bool grpc_required) {
  SAFERETRY_RETURN_IF_ERROR(ReadObject(j, path));
  SAFERETRY_RETURN_IF_ERROR(
      CheckKeys(j, path,
                {"maxAttempts", "initialBackoff", "maxBackoff", "backoffMultiplier",
                 "retryableStatusCodes", "perAttemptRecvTimeout"}));
  if (grpc_required) {
    for (std::string_view f : {"maxAttempts", "initialBackoff", "maxBackoff", "backoffMultiplier",
                               "retryableStatusCodes"}) {
      if (!j.contains(f)) return Invalid(Child(path, f), "required in a gRPC retryPolicy");
    }
  }
  if (j.contains("maxAttempts")) {
    SAFERETRY_RETURN_IF_ERROR(MaxAttempts(j["maxAttempts"], Child(path, "maxAttempts"), 1));
  }
  if (j.contains("initialBackoff")) {
    SAFERETRY_RETURN_IF_ERROR(ReadDuration(j["initialBackoff"], Child(path, "initialBackoff"),
                                           false, &policy->backoff.base));
  }
  if (j.contains("maxBackoff")) {
    SAFERETRY_RETURN_IF_ERROR(
        ReadDuration(j["maxBackoff"], Child(path, "maxBackoff"), false, &policy->backoff.cap));
  }
  if (policy->backoff.cap < policy->backoff.base) {
    return Invalid(
        Child(path, "maxBackoff"),
        Cat("expected a duration >= initialBackoff (", FormatProtoDuration(policy->backoff.base),
            "), got \"", FormatProtoDuration(policy->backoff.cap), "\""));
  }
  if (j.contains("backoffMultiplier")) {
    SAFERETRY_RETURN_IF_ERROR(ReadNumber(j["backoffMultiplier"], Child(path, "backoffMultiplier"),
                                         1, std::numeric_limits<double>::infinity(), false,
                                         &policy->backoff.multiplier));
  }
  if (j.contains("perAttemptRecvTimeout")) {
    Duration d{0};
    SAFERETRY_RETURN_IF_ERROR(
        ReadDuration(j["perAttemptRecvTimeout"], Child(path, "perAttemptRecvTimeout"), false, &d));
    policy->deadline_options.attempt_cap = d;
    saw_attempt_timeout = true;
  }
  if (j.contains("retryableStatusCodes")) {
    SAFERETRY_RETURN_IF_ERROR(
        RetryableCodes(j["retryableStatusCodes"], Child(path, "retryableStatusCodes")));
  }
  return absl::OkStatus();
}

absl::Status Loader::MaxAttempts(const json& j, const std::string& path, std::int64_t min) {
  std::int64_t v = 0;
  SAFERETRY_RETURN_IF_ERROR(ReadInt(j, path, min, std::numeric_limits<std::int64_t>::max(), &v));
  if (v > kMaxAttemptsHardCap) {
    Warn(Cat(path, ": ", v, " is above the hard cap of ", kMaxAttemptsHardCap, "; clamped to ",
             kMaxAttemptsHardCap));
    v = kMaxAttemptsHardCap;
  }
  policy->max_attempts = static_cast<int>(v);
  return absl::OkStatus();
}

absl::Status Loader::HedgingPolicy(const json& j, const std::string& path, bool grpc_required) {
  SAFERETRY_RETURN_IF_ERROR(ReadObject(j, path));
  SAFERETRY_RETURN_IF_ERROR(
      CheckKeys(j, path, {"maxAttempts", "hedgingDelay", "nonFatalStatusCodes"}));
  if (!j.contains("maxAttempts")) {
    if (grpc_required)
      return Invalid(Child(path, "maxAttempts"), "required in a gRPC hedgingPolicy");
  } else {
    // gRPC: more than 1 (the original request and at least one hedge).
    SAFERETRY_RETURN_IF_ERROR(MaxAttempts(j["maxAttempts"], Child(path, "maxAttempts"), 2));
    const int v = policy->max_attempts;
    constexpr int kMaxHedges = CallStateMachine::kMaxInFlight - 1;
    if (v - 1 > kMaxHedges) {
      Warn(Cat(Child(path, "maxAttempts"), ": at most ", kMaxHedges + 1,
               " copies are in flight at once; the other ", v - 1 - kMaxHedges,
               " attempt(s) are sent only after copies fail"));
    }
    policy->hedging.max_hedges = std::min(v - 1, kMaxHedges);
  }
  // gRPC's default delay is 0: every copy is sent at once.
  policy->hedging.delay = Duration::zero();
  if (j.contains("hedgingDelay")) {
    SAFERETRY_RETURN_IF_ERROR(
        ReadDuration(j["hedgingDelay"], Child(path, "hedgingDelay"), true, &policy->hedging.delay));
  }
  if (j.contains("nonFatalStatusCodes")) {
    SAFERETRY_RETURN_IF_ERROR(
        RetryableCodes(j["nonFatalStatusCodes"], Child(path, "nonFatalStatusCodes"), true));
  }
  policy->hedging.enabled = true;
  return absl::OkStatus();
}

absl::Status Loader::PhaseLimitsObject(const json& j, const std::string& path) {
  SAFERETRY_RETURN_IF_ERROR(ReadObject(j, path));
  SAFERETRY_RETURN_IF_ERROR(
      CheckKeys(j, path, {"connect", "firstByte", "speedLimit", "speedTime"}));
  PhaseLimits& l = policy->phase_limits;
  if (j.contains("connect")) {
    SAFERETRY_RETURN_IF_ERROR(ReadDuration(j["connect"], Child(path, "connect"), true, &l.connect));
  }
  if (j.contains("firstByte")) {
    SAFERETRY_RETURN_IF_ERROR(
        ReadDuration(j["firstByte"], Child(path, "firstByte"), true, &l.first_byte));
  }
  if (j.contains("speedLimit")) {
    SAFERETRY_RETURN_IF_ERROR(ReadInt(j["speedLimit"], Child(path, "speedLimit"), 0,
                                      std::numeric_limits<std::int32_t>::max(), &l.speed_limit));
  }
  if (j.contains("speedTime")) {
    SAFERETRY_RETURN_IF_ERROR(
        ReadDuration(j["speedTime"], Child(path, "speedTime"), true, &l.speed_time));
    if (l.speed_time % std::chrono::seconds(1) != Duration(0)) {
      return Invalid(Child(path, "speedTime"), Cat("libcurl counts whole seconds, got \"",
                                                   FormatProtoDuration(l.speed_time), "\""));
    }
  }
  const std::pair<const char*, Duration> durations[] = {
      {"connect", l.connect}, {"firstByte", l.first_byte}, {"speedTime", l.speed_time}};
  for (const auto& [key, d] : durations) {
    if (d > std::chrono::hours(24 * 365)) {
      return Invalid(Child(path, key),
                     Cat("must be at most a year, got \"", FormatProtoDuration(d), "\""));
    }
  }
  if ((l.speed_limit > 0) != (l.speed_time > Duration(0))) {
    return Invalid(Child(path, l.speed_limit > 0 ? "speedLimit" : "speedTime"),
                   l.speed_limit > 0 ? "given without speedTime" : "given without speedLimit");
  }
  return absl::OkStatus();
}

absl::Status Loader::HedgingObject(const json& j, const std::string& path) {
  SAFERETRY_RETURN_IF_ERROR(ReadObject(j, path));
  SAFERETRY_RETURN_IF_ERROR(CheckKeys(j, path, {"enabled", "delay", "delayFromP95", "maxHedges"}));
  HedgingOptions& h = policy->hedging;
  if (j.contains("enabled")) {
    SAFERETRY_RETURN_IF_ERROR(ReadBool(j["enabled"], Child(path, "enabled"), &h.enabled));
  }
  if (j.contains("delay")) {
    SAFERETRY_RETURN_IF_ERROR(ReadDuration(j["delay"], Child(path, "delay"), true, &h.delay));
  }
  if (j.contains("delayFromP95")) {
    SAFERETRY_RETURN_IF_ERROR(
        ReadBool(j["delayFromP95"], Child(path, "delayFromP95"), &h.delay_from_p95));
  }
  if (j.contains("maxHedges")) {
    std::int64_t v = 0;
    SAFERETRY_RETURN_IF_ERROR(ReadInt(j["maxHedges"], Child(path, "maxHedges"), 0,
                                      CallStateMachine::kMaxInFlight - 1, &v));
    h.max_hedges = static_cast<int>(v);
  }
  return absl::OkStatus();
}

absl::Status Loader::RetryableCodes(const json& j, const std::string& path, bool allow_empty) {
  if (!j.is_array()) return Expected(path, allow_empty ? "an array" : "a non-empty array", j);
  if (j.empty() && !allow_empty) return Expected(path, "a non-empty array", j);
  const auto& names = GrpcCodeNames();
  for (std::size_t i = 0; i < j.size(); ++i) {
    const json& e = j[i];
    const std::string p = Index(path, i);
    constexpr std::string_view kWhat =
        "a gRPC status code name other than OK (\"UNAVAILABLE\"), a code number 1..16, or an "
        "HTTP status 400..599";
    if (e.is_string()) {
      const std::string name = absl::AsciiStrToUpper(e.get_ref<const std::string&>());
      auto it = std::find(names.begin() + 1, names.end(), name);
      if (it == names.end()) return Expected(p, kWhat, e);
      policy->retryable_codes.insert(name);
    } else if (e.is_number_integer()) {
      std::int64_t v = 0;
      if (!ReadInt(e, p, 1, 599, &v).ok() || (v > 16 && v < 400)) return Expected(p, kWhat, e);
      if (v <= 16) {
        policy->retryable_codes.insert(std::string(names[static_cast<std::size_t>(v)]));
      } else {
        policy->retryable_http_statuses.insert(static_cast<int>(v));
      }
    } else {
      return Expected(p, kWhat, e);
    }
  }
  return absl::OkStatus();
}

absl::Status Loader::RetryThrottling(const json& j, const std::string& path) {
  SAFERETRY_RETURN_IF_ERROR(ReadObject(j, path));
  SAFERETRY_RETURN_IF_ERROR(CheckKeys(j, path, {"maxTokens", "tokenRatio"}));
  saw_throttling = true;
  // gRPC requires both fields.
  for (std::string_view f : {"maxTokens", "tokenRatio"}) {
    if (!j.contains(f)) return Invalid(Child(path, f), "required");
  }
  SAFERETRY_RETURN_IF_ERROR(ReadNumber(j["maxTokens"], Child(path, "maxTokens"), 0.001, 1000, false,
                                       &policy->token_throttle.max_tokens));
  SAFERETRY_RETURN_IF_ERROR(ReadNumber(j["tokenRatio"], Child(path, "tokenRatio"), 0.001, 1e12,
                                       false, &policy->token_throttle.token_ratio));
  return absl::OkStatus();
}

absl::Status Loader::Saferetry(const json& j, const std::string& path) {
  SAFERETRY_RETURN_IF_ERROR(ReadObject(j, path));
  SAFERETRY_RETURN_IF_ERROR(CheckKeys(
      j, path, {"jitter",           "deadline",          "attemptTimeout", "deadlineMargin",
                "minUsefulAttempt", "maxStatusQueries",  "statusQuery",    "serverDeduplicates",
                "idempotency",      "deadlineHeader",    "attemptHeader",  "requestIdHeader",
                "maxRetryAfter",    "doNotRetryHeader",  "budget",         "budgetOptions",
                "ratioBudget",      "costQuota",         "classification", "circuitBreaker",
                "hedging",          "responsePredicate", "phaseLimits"}));
  const auto at = [&](std::string_view k) { return Child(path, k); };
  if (j.contains("jitter")) {
    const json& v = j["jitter"];
    constexpr std::string_view kWhat = "one of \"none\", \"full\", \"equal\", \"decorrelated\"";
    if (!v.is_string() ||
        !ParseJitterKind(v.get_ref<const std::string&>(), &policy->backoff.jitter)) {
      return Expected(at("jitter"), kWhat, v);
    }
  }
  if (j.contains("deadline")) {
    SAFERETRY_RETURN_IF_ERROR(ReadDuration(j["deadline"], at("deadline"), false, &policy->timeout));
    saw_deadline = true;
  }
  if (j.contains("attemptTimeout")) {
    if (saw_attempt_timeout) {
      return Invalid(at("attemptTimeout"), "conflicts with retryPolicy.perAttemptRecvTimeout");
    }
    const json& v = j["attemptTimeout"];
    if (v.is_null()) {
      policy->deadline_options.attempt_cap.reset();
    } else {
      Duration d{0};
      if (!v.is_string() || !ReadDuration(v, at("attemptTimeout"), false, &d).ok()) {
        return Expected(at("attemptTimeout"),
                        "a duration > 0 like \"0.1s\" (decimal seconds, \"s\" suffix) or null", v);
      }
      policy->deadline_options.attempt_cap = d;
    }
  }
  if (j.contains("deadlineMargin")) {
    SAFERETRY_RETURN_IF_ERROR(ReadDuration(j["deadlineMargin"], at("deadlineMargin"), true,
                                           &policy->deadline_options.margin));
  }
  if (j.contains("minUsefulAttempt")) {
    SAFERETRY_RETURN_IF_ERROR(ReadDuration(j["minUsefulAttempt"], at("minUsefulAttempt"), false,
                                           &policy->deadline_options.min_useful_attempt));
  }
  if (j.contains("maxStatusQueries")) {
    std::int64_t v = 0;
    // 0: derived from the deadline and the poll pacing (the default).
    SAFERETRY_RETURN_IF_ERROR(ReadInt(j["maxStatusQueries"], at("maxStatusQueries"), 0,
                                      std::numeric_limits<std::int64_t>::max(), &v));
    if (v > kMaxStatusQueriesHardCap) {
      Warn(Cat(at("maxStatusQueries"), ": ", v, " is above the hard cap of ",
               kMaxStatusQueriesHardCap, "; clamped to ", kMaxStatusQueriesHardCap));
      v = kMaxStatusQueriesHardCap;
    }
    policy->max_status_queries = static_cast<int>(v);
  }
  if (j.contains("statusQuery"))
    SAFERETRY_RETURN_IF_ERROR(StatusQueryObject(j["statusQuery"], at("statusQuery")));
  if (j.contains("serverDeduplicates")) {
    SAFERETRY_RETURN_IF_ERROR(
        ReadBool(j["serverDeduplicates"], at("serverDeduplicates"), &policy->server_deduplicates));
  }
  if (j.contains("idempotency"))
    SAFERETRY_RETURN_IF_ERROR(IdempotencyObject(j["idempotency"], at("idempotency")));
  if (j.contains("deadlineHeader")) {
    SAFERETRY_RETURN_IF_ERROR(
        ReadHeaderName(j["deadlineHeader"], at("deadlineHeader"), true, &policy->deadline_header));
  }
  if (j.contains("attemptHeader")) {
    SAFERETRY_RETURN_IF_ERROR(
        ReadHeaderName(j["attemptHeader"], at("attemptHeader"), true, &policy->attempt_header));
  }
  if (j.contains("requestIdHeader")) {
    SAFERETRY_RETURN_IF_ERROR(ReadHeaderName(j["requestIdHeader"], at("requestIdHeader"), true,
                                             &policy->request_id_header));
  }
  if (j.contains("maxRetryAfter")) {
    SAFERETRY_RETURN_IF_ERROR(ReadDuration(j["maxRetryAfter"], at("maxRetryAfter"), false,
                                           &policy->hints.max_retry_after));
  }
  if (j.contains("doNotRetryHeader")) {
    SAFERETRY_RETURN_IF_ERROR(ReadHeaderName(j["doNotRetryHeader"], at("doNotRetryHeader"), true,
                                             &policy->hints.do_not_retry_header));
  }
  if (j.contains("budget")) {
    const json& v = j["budget"];
    std::string what = "one of \"ratio\", \"tokenThrottle\", \"costQuota\", \"none\"";
    if (budgets != nullptr) {
      for (const std::string& name : budgets->Names()) what += Cat(", \"", name, "\"");
    }
    if (!v.is_string()) return Expected(at("budget"), what, v);
    const std::string& name = v.get_ref<const std::string&>();
    if (!BudgetRegistry::IsBuiltIn(name) && (budgets == nullptr || !budgets->Contains(name))) {
      return Expected(at("budget"), what, v);
    }
    policy->budget = name;
    saw_budget_name = true;
  }
  if (j.contains("budgetOptions")) {
    const json& v = j["budgetOptions"];
    SAFERETRY_RETURN_IF_ERROR(ReadObject(v, at("budgetOptions")));
    policy->budget_options = v.dump(-1, ' ', false, json::error_handler_t::replace);
    saw_budget_options = true;
  }
  if (j.contains("ratioBudget"))
    SAFERETRY_RETURN_IF_ERROR(Ratio(j["ratioBudget"], at("ratioBudget")));
  if (j.contains("costQuota")) SAFERETRY_RETURN_IF_ERROR(Quota(j["costQuota"], at("costQuota")));
  if (j.contains("classification")) {
    SAFERETRY_RETURN_IF_ERROR(ClassificationObject(j["classification"], at("classification")));
  }
  if (j.contains("circuitBreaker")) {
    SAFERETRY_RETURN_IF_ERROR(CircuitBreakerObject(j["circuitBreaker"], at("circuitBreaker")));
  }
  if (j.contains("hedging")) SAFERETRY_RETURN_IF_ERROR(HedgingObject(j["hedging"], at("hedging")));
  if (j.contains("phaseLimits")) {
    SAFERETRY_RETURN_IF_ERROR(PhaseLimitsObject(j["phaseLimits"], at("phaseLimits")));
  }
  if (j.contains("responsePredicate")) {
    SAFERETRY_RETURN_IF_ERROR(
        ResponsePredicateObject(j["responsePredicate"], at("responsePredicate")));
  }
  return absl::OkStatus();
}

absl::Status Loader::ResponsePredicateObject(const json& j, const std::string& path) {
  SAFERETRY_RETURN_IF_ERROR(ReadObject(j, path));
  SAFERETRY_RETURN_IF_ERROR(CheckKeys(j, path, {"maxBodyBytes", "rules"}));
  ResponsePredicateOptions& o = policy->response_predicate;
  if (j.contains("maxBodyBytes")) {
    std::int64_t n = 0;
    SAFERETRY_RETURN_IF_ERROR(ReadInt(j["maxBodyBytes"], Child(path, "maxBodyBytes"), 0,
                                      static_cast<std::int64_t>(kMaxResponsePredicateBodyBytes),
                                      &n));
    o.max_body_bytes = static_cast<std::size_t>(n);
  }
  o.rules.clear();
  if (j.contains("rules")) {
    const json& rules = j["rules"];
    const std::string rules_path = Child(path, "rules");
    if (!rules.is_array()) return Expected(rules_path, "an array of rules", rules);
    for (std::size_t i = 0; i < rules.size(); ++i) {
      ResponseRule rule;
      SAFERETRY_RETURN_IF_ERROR(ResponseRuleObject(rules[i], Index(rules_path, i), &rule));
      if ((!rule.body_contains.empty() || !rule.json_pointer.empty()) && o.max_body_bytes == 0) {
        return Invalid(Child(path, "maxBodyBytes"),
                       Cat("is 0, but ", Index(rules_path, i), " reads the body"));
      }
      o.rules.push_back(std::move(rule));
    }
  }
  // The API's own check, as a backstop: the reader's checks above are the
  // same rules, named by their JSON paths.
  return ValidateResponsePredicateOptions(o, path);
}

absl::Status Loader::ResponseRuleObject(const json& j, const std::string& path, ResponseRule* out) {
  SAFERETRY_RETURN_IF_ERROR(ReadObject(j, path));
  SAFERETRY_RETURN_IF_ERROR(CheckKeys(j, path,
                                      {"statuses", "header", "headerValue", "bodyContains",
                                       "jsonPointer", "jsonValue", "verdict"}));
  if (j.contains("statuses")) {
    const json& v = j["statuses"];
    const std::string p = Child(path, "statuses");
    if (!v.is_array() || v.empty()) return Expected(p, "a non-empty array of HTTP statuses", v);
    for (std::size_t k = 0; k < v.size(); ++k) {
      std::int64_t status = 0;
      SAFERETRY_RETURN_IF_ERROR(ReadInt(v[k], Index(p, k), 100, 599, &status));
      out->statuses.push_back(static_cast<int>(status));
    }
  }
  if (j.contains("header")) {
    SAFERETRY_RETURN_IF_ERROR(
        ReadHeaderName(j["header"], Child(path, "header"), false, &out->header));
  }
  if (j.contains("headerValue")) {
    const std::string p = Child(path, "headerValue");
    if (out->header.empty()) return Invalid(p, "needs \"header\"");
    std::string value;
    SAFERETRY_RETURN_IF_ERROR(ReadString(j["headerValue"], p, &value));
    if (value.find_first_of(std::string_view("\r\n\0", 3)) != std::string::npos) {
      return Invalid(p, "may not contain CR, LF or NUL");
    }
    out->header_value = std::move(value);
  }
  if (j.contains("bodyContains")) {
    const std::string p = Child(path, "bodyContains");
    SAFERETRY_RETURN_IF_ERROR(ReadString(j["bodyContains"], p, &out->body_contains));
    if (out->body_contains.empty()) return Expected(p, "a non-empty string", j["bodyContains"]);
  }
  if (j.contains("jsonPointer")) {
    const std::string p = Child(path, "jsonPointer");
    SAFERETRY_RETURN_IF_ERROR(ReadString(j["jsonPointer"], p, &out->json_pointer));
    SAFERETRY_RETURN_IF_ERROR(internal::ValidateJsonPointer(out->json_pointer, p));
  }
  if (j.contains("jsonValue")) {
    const std::string p = Child(path, "jsonValue");
    if (out->json_pointer.empty()) return Invalid(p, "needs \"jsonPointer\"");
    const json& v = j["jsonValue"];
    if (v.is_string()) {
      out->json_value = v.get<std::string>();
    } else if (v.is_number() || v.is_boolean() || v.is_null()) {
      out->json_value = v.dump();  // compared with the field's JSON form
    } else {
      return Expected(p, "a string, number, boolean or null", v);
    }
  }
  if (out->statuses.empty() && out->header.empty() && out->body_contains.empty() &&
      out->json_pointer.empty()) {
    return Invalid(path,
                   "give at least one condition (statuses, header, bodyContains, jsonPointer)");
  }
  const std::string p = Child(path, "verdict");
  if (!j.contains("verdict")) return Invalid(p, "required: \"retry\" or \"notApplied\"");
  const json& v = j["verdict"];
  constexpr std::string_view kWhat = "one of \"retry\", \"notApplied\"";
  if (!v.is_string()) return Expected(p, kWhat, v);
  if (v.get_ref<const std::string&>() == ResponseVerdictName(ResponseVerdict::kRetry)) {
    out->verdict = ResponseVerdict::kRetry;
  } else if (v.get_ref<const std::string&>() == ResponseVerdictName(ResponseVerdict::kNotApplied)) {
    out->verdict = ResponseVerdict::kNotApplied;
  } else {
    return Expected(p, kWhat, v);
  }
  return absl::OkStatus();
}

absl::Status Loader::CircuitBreakerObject(const json& j, const std::string& path) {
  if (j.is_null()) {
    policy->circuit_breaker.reset();  // "no breaker", as DumpPolicy writes it
    return absl::OkStatus();
  }
  SAFERETRY_RETURN_IF_ERROR(ReadObject(j, path));
  SAFERETRY_RETURN_IF_ERROR(
      CheckKeys(j, path, {"failureRatio", "window", "minimumCalls", "openFor", "halfOpenProbes"}));
  CircuitBreakerOptions o;
  if (j.contains("failureRatio")) {
    SAFERETRY_RETURN_IF_ERROR(
        ReadNumber(j["failureRatio"], Child(path, "failureRatio"), 0, 1, true, &o.failure_ratio));
  }
  const auto duration = [&](std::string_view key, Duration* out) -> absl::Status {
    if (!j.contains(key)) return absl::OkStatus();
    const std::string p = Child(path, key);
    const json& v = j[std::string(key)];
    Duration d{0};
    constexpr std::string_view kWhat = "a duration in [0.001s, 86400s] like \"5s\"";
    if (!ReadDuration(v, p, false, &d).ok() || d < std::chrono::milliseconds(1) ||
        d > std::chrono::hours(24)) {
      return Expected(p, kWhat, v);
    }
    *out = d;
    return absl::OkStatus();
  };
  SAFERETRY_RETURN_IF_ERROR(duration("window", &o.window));
  SAFERETRY_RETURN_IF_ERROR(duration("openFor", &o.open_duration));
  std::int64_t n = 0;
  if (j.contains("minimumCalls")) {
    SAFERETRY_RETURN_IF_ERROR(
        ReadInt(j["minimumCalls"], Child(path, "minimumCalls"), 1, 1000000, &n));
    o.minimum_calls = static_cast<int>(n);
  }
  if (j.contains("halfOpenProbes")) {
    SAFERETRY_RETURN_IF_ERROR(
        ReadInt(j["halfOpenProbes"], Child(path, "halfOpenProbes"), 1, 1000, &n));
    o.half_open_probes = static_cast<int>(n);
  }
  policy->circuit_breaker = o;
  return absl::OkStatus();
}

absl::Status Loader::StatusQueryObject(const json& j, const std::string& path) {
  SAFERETRY_RETURN_IF_ERROR(ReadObject(j, path));
  SAFERETRY_RETURN_IF_ERROR(CheckKeys(j, path, {"urlTemplate"}));
  if (!j.contains("urlTemplate")) return absl::OkStatus();
  const std::string p = Child(path, "urlTemplate");
  std::string t;
  SAFERETRY_RETURN_IF_ERROR(ReadString(j["urlTemplate"], p, &t));
  if (!t.empty()) {
    constexpr std::string_view kWhat = "an absolute http(s) URL containing {key}, or \"\"";
    if (t.find("{key}") == std::string::npos) return Expected(p, kWhat, j["urlTemplate"]);
    StatusQuery q;
    q.url_template = t;
    if (!ValidateStatusQuery(q).ok()) return Expected(p, kWhat, j["urlTemplate"]);
  }
  policy->status_query.url_template = std::move(t);
  return absl::OkStatus();
}

absl::Status Loader::IdempotencyObject(const json& j, const std::string& path) {
  SAFERETRY_RETURN_IF_ERROR(ReadObject(j, path));
  SAFERETRY_RETURN_IF_ERROR(CheckKeys(j, path, {"header", "form", "mode"}));
  if (j.contains("header")) {
    SAFERETRY_RETURN_IF_ERROR(
        ReadHeaderName(j["header"], Child(path, "header"), false, &policy->idempotency_header));
  }
  if (j.contains("form")) {
    const json& v = j["form"];
    const std::string s = v.is_string() ? v.get<std::string>() : std::string();
    if (s == "bare") {
      policy->key_form = KeyForm::kBare;
    } else if (s == "quotedString") {
      policy->key_form = KeyForm::kQuotedString;
    } else {
      return Expected(Child(path, "form"), "one of \"bare\", \"quotedString\"", v);
    }
  }
  if (j.contains("mode")) {
    const json& v = j["mode"];
    const std::string s = v.is_string() ? v.get<std::string>() : std::string();
    if (s == "auto") {
      policy->key_mode = KeyMode::kAuto;
    } else if (s == "always") {
      policy->key_mode = KeyMode::kAlways;
    } else if (s == "never") {
      policy->key_mode = KeyMode::kNever;
    } else {
      return Expected(Child(path, "mode"), "one of \"auto\", \"always\", \"never\"", v);
    }
  }
  return absl::OkStatus();
}

absl::Status Loader::Ratio(const json& j, const std::string& path) {
  SAFERETRY_RETURN_IF_ERROR(ReadObject(j, path));
  SAFERETRY_RETURN_IF_ERROR(CheckKeys(j, path, {"percent", "minPerSecond", "window"}));
  saw_ratio = true;
  RatioBudgetOptions& o = policy->ratio_budget;
  if (j.contains("percent")) {
    SAFERETRY_RETURN_IF_ERROR(
        ReadNumber(j["percent"], Child(path, "percent"), 0, 1000, false, &o.percent));
  }
  if (j.contains("minPerSecond")) {
    SAFERETRY_RETURN_IF_ERROR(ReadNumber(j["minPerSecond"], Child(path, "minPerSecond"), 0, 1e9,
                                         false, &o.min_per_second));
  }
  if (j.contains("window")) {
    const std::string p = Child(path, "window");
    Duration d{0};
    constexpr std::string_view kWhat = "a duration in [1s, 86400s] like \"10s\"";
    if (!ReadDuration(j["window"], p, false, &d).ok() || d < std::chrono::seconds(1) ||
        d > std::chrono::hours(24)) {
      return Expected(p, kWhat, j["window"]);
    }
    o.window = d;
  }
  return absl::OkStatus();
}

absl::Status Loader::Quota(const json& j, const std::string& path) {
  SAFERETRY_RETURN_IF_ERROR(ReadObject(j, path));
  SAFERETRY_RETURN_IF_ERROR(CheckKeys(
      j, path, {"capacity", "retryCost", "timeoutCost", "throttlingCost", "successIncrement"}));
  saw_quota = true;
  CostQuotaOptions& o = policy->cost_quota;
  constexpr std::int64_t kMax = std::int64_t{1} << 40;
  struct Field {
    std::string_view name;
    std::int64_t min;
    std::int64_t* out;
  };
  // A capacity of 0 is valid: "never retry". A throttling cost of 0 means
  // "same as retryCost".
  for (const Field& f :
       {Field{"capacity", 0, &o.capacity}, Field{"retryCost", 1, &o.retry_cost},
        Field{"timeoutCost", 1, &o.timeout_cost}, Field{"throttlingCost", 0, &o.throttling_cost},
        Field{"successIncrement", 0, &o.success_increment}}) {
    if (j.contains(f.name)) {
      SAFERETRY_RETURN_IF_ERROR(
          ReadInt(j[std::string(f.name)], Child(path, f.name), f.min, kMax, f.out));
    }
  }
  return absl::OkStatus();
}

absl::Status Loader::ClassificationObject(const json& j, const std::string& path) {
  SAFERETRY_RETURN_IF_ERROR(ReadObject(j, path));
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string p = Child(path, it.key());
    const std::string& key = it.key();
    const bool digits = key.size() == 3 && std::all_of(key.begin(), key.end(),
                                                       [](char c) { return c >= '0' && c <= '9'; });
    const int status = digits ? std::stoi(key) : 0;
    if (status < 100 || status > 599) {
      return Invalid(p, "expected an HTTP status 100..599 as the field name");
    }
    constexpr std::string_view kWhat =
        "one of \"success\", \"permanent\", \"precondition_failed\", \"in_progress\", "
        "\"retryable_transient\", \"ambiguous\", \"unavailable_unproven\"";
    const json& v = it.value();
    if (!v.is_string()) return Expected(p, kWhat, v);
    bool found = false;
    for (AttemptClass c :
         {AttemptClass::kSuccess, AttemptClass::kPermanent, AttemptClass::kPreconditionFailed,
          AttemptClass::kInProgress, AttemptClass::kRetryableTransient, AttemptClass::kAmbiguous,
          AttemptClass::kUnavailableUnproven}) {
      if (v.get_ref<const std::string&>() == AttemptClassName(c)) {
        policy->status_overrides[status] = c;
        found = true;
      }
    }
    if (!found) return Expected(p, kWhat, v);
  }
  return absl::OkStatus();
}

absl::Status Loader::ResolveBudget() {
  const int objects = int{saw_throttling} + int{saw_ratio} + int{saw_quota};
  if (objects > 1) {
    return Invalid("$.saferetry.budget",
                   "retryThrottling, saferetry.ratioBudget and saferetry.costQuota are "
                   "alternatives; give at most one");
  }
  std::string implied = "ratio";
  if (saw_throttling) implied = "tokenThrottle";
  if (saw_quota) implied = "costQuota";
  if (!saw_budget_name) {
    policy->budget = implied;
  } else if (objects == 1 && policy->budget != implied) {
    return Invalid("$.saferetry.budget",
                   Cat("expected \"", implied, "\" to match the budget object given, got \"",
                       policy->budget, "\""));
  }
  if (BudgetRegistry::IsBuiltIn(policy->budget)) {
    if (saw_budget_options) {
      return Invalid(std::string(kBudgetOptionsPath),
                     Cat("only for a registered budget; \"", policy->budget,
                         "\" is built in and reads its own object"));
    }
    return absl::OkStatus();
  }
  // A registered budget: made once here so that a bad option fails the load,
  // naming its path, rather than the first ApplyToClientOptions.
  absl::StatusOr<std::shared_ptr<RetryBudget>> made = budgets->Make(SpecOf(*policy));
  if (!made.ok()) return absl::InvalidArgumentError(made.status().message());
  return absl::OkStatus();
}

}  // namespace config_internal

namespace {

using config_internal::Cat;
using config_internal::CheckKeys;
using config_internal::Expected;
using config_internal::FormatProtoDuration;
using config_internal::json;
using config_internal::kMaxDocumentBytes;
using config_internal::Loader;
using config_internal::LoadServiceConfig;

std::string MalformedMessage(std::string_view text) {
  // The SAX pass reports where the parser stopped, without exceptions.
  struct Sax : json::json_sax_t {
    std::string message;
    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(number_integer_t) override { return true; }
    bool number_unsigned(number_unsigned_t) override { return true; }
    bool number_float(number_float_t, const string_t&) override { return true; }
    bool string(string_t&) override { return true; }
    bool binary(binary_t&) override { return true; }
    bool start_object(std::size_t) override { return true; }
    bool key(string_t&) override { return true; }
    bool end_object() override { return true; }
    bool start_array(std::size_t) override { return true; }
    bool end_array() override { return true; }
    bool parse_error(std::size_t, const std::string&,
                     const nlohmann::detail::exception& ex) override {
      message = ex.what();
      return false;
    }
  } sax;
  json::sax_parse(text.begin(), text.end(), &sax);
  std::string_view m = sax.message;
  // "[json.exception.parse_error.101] parse error at line 1, column 5: ..."
  const std::size_t at = m.find(" at line ");
  if (at != std::string_view::npos) m.remove_prefix(at + 4);
  if (m.empty()) m = "not valid JSON";
  return Cat("$: malformed JSON: ", m);
}

}  // namespace

absl::StatusOr<Policy> LoadPolicy(std::string_view text, const LoadOptions& options) {
  if (text.size() > kMaxDocumentBytes) {
    return absl::InvalidArgumentError(Cat("$: document too large (", text.size(),
                                          " bytes; the limit is ", kMaxDocumentBytes, ")"));
  }
  const json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return absl::InvalidArgumentError(MalformedMessage(text));
  if (!doc.is_object()) return Expected("$", "an object", doc);

  Policy policy;
  Loader loader{&policy};
  loader.budgets = options.budgets;
  if (doc.contains("methodConfig")) {
    SAFERETRY_RETURN_IF_ERROR(LoadServiceConfig(doc, options, loader));
  } else {
    SAFERETRY_RETURN_IF_ERROR(
        CheckKeys(doc, "$", {"retryPolicy", "hedgingPolicy", "retryThrottling", "saferetry"}));
    if (doc.contains("retryPolicy") && doc.contains("hedgingPolicy")) {
      return config_internal::Invalid(
          "$.hedgingPolicy",
          "cannot be combined with $.retryPolicy (one or the other, as in gRPC)");
    }
    if (doc.contains("retryPolicy")) {
      SAFERETRY_RETURN_IF_ERROR(loader.RetryPolicy(doc["retryPolicy"], "$.retryPolicy", false));
    }
    if (doc.contains("hedgingPolicy")) {
      SAFERETRY_RETURN_IF_ERROR(
          loader.HedgingPolicy(doc["hedgingPolicy"], "$.hedgingPolicy", false));
    }
    if (doc.contains("retryThrottling")) {
      SAFERETRY_RETURN_IF_ERROR(
          loader.RetryThrottling(doc["retryThrottling"], "$.retryThrottling"));
    }
    if (doc.contains("saferetry")) {
      SAFERETRY_RETURN_IF_ERROR(loader.Saferetry(doc["saferetry"], "$.saferetry"));
    }
  }
  SAFERETRY_RETURN_IF_ERROR(loader.ResolveBudget());
  if (policy.deadline_options.attempt_cap.has_value() &&
      *policy.deadline_options.attempt_cap > policy.timeout) {
    policy.warnings.push_back(Cat(
        "$.saferetry.attemptTimeout: ", FormatProtoDuration(*policy.deadline_options.attempt_cap),
        " is longer than the deadline ", FormatProtoDuration(policy.timeout),
        "; the deadline bounds every attempt"));
  }
  return policy;
}

absl::StatusOr<Policy> LoadPolicyFile(const std::string& path, const LoadOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    return absl::InvalidArgumentError(
        Cat(path, ": cannot open: ", std::error_code(err, std::generic_category()).message()));
  }
  std::string text;
  char buf[4096];
  while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
    text.append(buf, static_cast<std::size_t>(in.gcount()));
    if (text.size() > kMaxDocumentBytes) break;
  }
  if (in.bad()) return absl::InvalidArgumentError(Cat(path, ": cannot read"));
  absl::StatusOr<Policy> p = LoadPolicy(text, options);
  if (!p.ok()) {
    return absl::Status(p.status().code(), Cat(path, ": ", p.status().message()));
  }
  return p;
}

}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// DumpPolicy: the effective configuration as a saferetry policy document.

#include <string>
#include <string_view>
#include <utility>

#include "config/config_internal.h"
#include "saferetry/config.h"
#include "saferetry/grpc_codes_classifier.h"

namespace saferetry {

namespace {

using config_internal::FormatProtoDuration;
using config_internal::json;

}  // namespace

std::string DumpPolicy(const Policy& p) {
  json retry = json::object();
  retry["maxAttempts"] = p.max_attempts;
  retry["initialBackoff"] = FormatProtoDuration(p.backoff.base);
  retry["maxBackoff"] = FormatProtoDuration(p.backoff.cap);
  retry["backoffMultiplier"] = p.backoff.multiplier;
  if (!p.retryable_codes.empty() || !p.retryable_http_statuses.empty()) {
    json codes = json::array();
    // In code order, so the dump reads like the gRPC docs.
    for (std::string_view name : GrpcCodeNames()) {
      if (p.retryable_codes.count(std::string(name)) > 0) codes.push_back(name);
    }
    for (int s : p.retryable_http_statuses) codes.push_back(s);
    retry["retryableStatusCodes"] = std::move(codes);
  }

  json own = json::object();
  own["jitter"] = JitterKindName(p.backoff.jitter);
  own["deadline"] = FormatProtoDuration(p.timeout);
  own["attemptTimeout"] = p.deadline_options.attempt_cap.has_value()
                              ? json(FormatProtoDuration(*p.deadline_options.attempt_cap))
                              : json(nullptr);
  own["deadlineMargin"] = FormatProtoDuration(p.deadline_options.margin);
  own["minUsefulAttempt"] = FormatProtoDuration(p.deadline_options.min_useful_attempt);
  own["maxStatusQueries"] = p.max_status_queries;
  own["statusQuery"] = {{"urlTemplate", p.status_query.url_template}};
  own["serverDeduplicates"] = p.server_deduplicates;
  const char* mode = p.key_mode == KeyMode::kAlways  ? "always"
                     : p.key_mode == KeyMode::kNever ? "never"
                                                     : "auto";
  own["idempotency"] = {{"header", p.idempotency_header},
                        {"form", p.key_form == KeyForm::kQuotedString ? "quotedString" : "bare"},
                        {"mode", mode}};
  own["deadlineHeader"] = p.deadline_header;
  own["attemptHeader"] = p.attempt_header;
  own["requestIdHeader"] = p.request_id_header;
  own["maxRetryAfter"] = FormatProtoDuration(p.hints.max_retry_after);
  own["doNotRetryHeader"] = p.hints.do_not_retry_header;
  own["budget"] = p.budget;
  json classification = json::object();
  for (const auto& [status, cls] : p.status_overrides) {
    classification[std::to_string(status)] = AttemptClassName(cls);
  }
  own["classification"] = std::move(classification);
  if (p.circuit_breaker.has_value()) {
    const CircuitBreakerOptions& b = *p.circuit_breaker;
    own["circuitBreaker"] = {{"failureRatio", b.failure_ratio},
                             {"window", FormatProtoDuration(b.window)},
                             {"minimumCalls", b.minimum_calls},
                             {"openFor", FormatProtoDuration(b.open_duration)},
                             {"halfOpenProbes", b.half_open_probes}};
  }  // absent: no breaker (as an unused budget object is left out)
  const HedgingOptions& h = p.hedging;
  const HedgingOptions off;
  if (h.enabled || h.delay != off.delay || h.delay_from_p95 || h.max_hedges != off.max_hedges) {
    own["hedging"] = {{"enabled", h.enabled},
                      {"delay", FormatProtoDuration(h.delay)},
                      {"delayFromP95", h.delay_from_p95},
                      {"maxHedges", h.max_hedges}};
  }  // absent: hedging off with the default options
  const PhaseLimits& l = p.phase_limits;
  if (!l.empty()) {
    own["phaseLimits"] = {{"connect", FormatProtoDuration(l.connect)},
                          {"firstByte", FormatProtoDuration(l.first_byte)},
                          {"speedLimit", l.speed_limit},
                          {"speedTime", FormatProtoDuration(l.speed_time)}};
  }  // absent: no limit of a phase's own
  const ResponsePredicateOptions& rp = p.response_predicate;
  if (!rp.rules.empty() || rp.max_body_bytes != ResponsePredicateOptions{}.max_body_bytes) {
    json rules = json::array();
    for (const ResponseRule& r : rp.rules) {
      json rule = json::object();
      if (!r.statuses.empty()) rule["statuses"] = r.statuses;
      if (!r.header.empty()) rule["header"] = r.header;
      if (r.header_value.has_value()) rule["headerValue"] = *r.header_value;
      if (!r.body_contains.empty()) rule["bodyContains"] = r.body_contains;
      if (!r.json_pointer.empty()) rule["jsonPointer"] = r.json_pointer;
      if (r.json_value.has_value()) rule["jsonValue"] = *r.json_value;
      rule["verdict"] = std::string(ResponseVerdictName(r.verdict));
      rules.push_back(std::move(rule));
    }
    own["responsePredicate"] = {{"maxBodyBytes", rp.max_body_bytes}, {"rules", std::move(rules)}};
  }  // absent: no rules (a user predicate has no JSON form)

  json doc = json::object();
  doc["retryPolicy"] = std::move(retry);
  if (p.budget == "tokenThrottle") {
    doc["retryThrottling"] = {{"maxTokens", p.token_throttle.max_tokens},
                              {"tokenRatio", p.token_throttle.token_ratio}};
  } else if (p.budget == "ratio") {
    own["ratioBudget"] = {{"percent", p.ratio_budget.percent},
                          {"minPerSecond", p.ratio_budget.min_per_second},
                          {"window", FormatProtoDuration(p.ratio_budget.window)}};
  } else if (p.budget == "costQuota") {
    own["costQuota"] = {{"capacity", p.cost_quota.capacity},
                        {"retryCost", p.cost_quota.retry_cost},
                        {"timeoutCost", p.cost_quota.timeout_cost},
                        {"throttlingCost", p.cost_quota.throttling_cost},
                        {"successIncrement", p.cost_quota.success_increment}};
  } else if (!p.budget_options.empty()) {
    // A registered budget's options, as read (compact JSON of an object).
    json options = json::parse(p.budget_options, nullptr, /*allow_exceptions=*/false);
    if (!options.is_discarded()) own["budgetOptions"] = std::move(options);
  }
  doc["saferetry"] = std::move(own);
  return doc.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace saferetry

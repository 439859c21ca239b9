// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The factories of a Policy's parts (per-call options, budget, classifier,
// header names) and the Policy's own helpers. Reading is in config_reader.cc.

#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "config_internal.h"
#include "saferetry/classifier.h"
#include "saferetry/config.h"
#include "saferetry/grpc_codes_classifier.h"

namespace saferetry {

namespace {

using config_internal::Invalid;

}  // namespace

std::string_view BudgetKindName(BudgetKind kind) {
  switch (kind) {
    case BudgetKind::kRatio:
      return "ratio";
    case BudgetKind::kTokenThrottle:
      return "tokenThrottle";
    case BudgetKind::kCostQuota:
      return "costQuota";
    case BudgetKind::kNone:
      return "none";
  }
  return "ratio";
}

bool operator==(const Policy& a, const Policy& b) {
  return a.max_attempts == b.max_attempts && a.backoff.base == b.backoff.base &&
         a.backoff.cap == b.backoff.cap && a.backoff.multiplier == b.backoff.multiplier &&
         a.backoff.jitter == b.backoff.jitter && a.timeout == b.timeout &&
         a.deadline_options.margin == b.deadline_options.margin &&
         a.deadline_options.min_useful_attempt == b.deadline_options.min_useful_attempt &&
         a.deadline_options.attempt_cap == b.deadline_options.attempt_cap &&
         a.max_status_queries == b.max_status_queries &&
         a.status_query_url_template == b.status_query_url_template &&
         a.server_deduplicates == b.server_deduplicates && a.key_mode == b.key_mode &&
         a.idempotency_header == b.idempotency_header && a.key_form == b.key_form &&
         a.deadline_header == b.deadline_header && a.attempt_header == b.attempt_header &&
         a.request_id_header == b.request_id_header &&
         a.hints.max_retry_after == b.hints.max_retry_after &&
         a.hints.do_not_retry_header == b.hints.do_not_retry_header && a.budget == b.budget &&
         a.token_throttle.max_tokens == b.token_throttle.max_tokens &&
         a.token_throttle.token_ratio == b.token_throttle.token_ratio &&
         a.ratio_budget.percent == b.ratio_budget.percent &&
         a.ratio_budget.min_per_second == b.ratio_budget.min_per_second &&
         a.ratio_budget.window == b.ratio_budget.window &&
         a.cost_quota.capacity == b.cost_quota.capacity &&
         a.cost_quota.retry_cost == b.cost_quota.retry_cost &&
         a.cost_quota.timeout_cost == b.cost_quota.timeout_cost &&
         a.cost_quota.throttling_cost == b.cost_quota.throttling_cost &&
         a.cost_quota.success_increment == b.cost_quota.success_increment &&
         a.status_overrides == b.status_overrides && a.retryable_codes == b.retryable_codes &&
         a.retryable_http_statuses == b.retryable_http_statuses &&
         a.circuit_breaker.has_value() == b.circuit_breaker.has_value() &&
         (!a.circuit_breaker.has_value() ||
          (a.circuit_breaker->failure_ratio == b.circuit_breaker->failure_ratio &&
           a.circuit_breaker->window == b.circuit_breaker->window &&
           a.circuit_breaker->minimum_calls == b.circuit_breaker->minimum_calls &&
           a.circuit_breaker->open_duration == b.circuit_breaker->open_duration &&
           a.circuit_breaker->half_open_probes == b.circuit_breaker->half_open_probes)) &&
         a.hedging.enabled == b.hedging.enabled && a.hedging.delay == b.hedging.delay &&
         a.hedging.delay_from_p95 == b.hedging.delay_from_p95 &&
         a.hedging.max_hedges == b.hedging.max_hedges;
}

CallOptions ToCallOptions(const Policy& policy) {
  CallOptions o;
  o.timeout = policy.timeout;
  o.max_attempts = policy.max_attempts;
  o.max_status_queries = policy.max_status_queries;
  o.backoff = policy.backoff;
  o.deadline_options = policy.deadline_options;
  o.key_mode = policy.key_mode;
  o.status_query.url_template = policy.status_query_url_template;
  o.server_deduplicates = policy.server_deduplicates;
  o.hedging = policy.hedging;
  return o;
}

absl::Status ApplyToClientOptions(const Policy& policy, ClientOptions* options) {
  if (options == nullptr) return absl::InvalidArgumentError("options: must not be null");
  std::shared_ptr<RetryBudget> budget;
  switch (policy.budget) {
    case BudgetKind::kRatio: {
      auto b = RatioBudget::Create(policy.ratio_budget);
      if (!b.ok()) return Invalid("ratio_budget", std::string(b.status().message()));
      budget = *std::move(b);
      break;
    }
    case BudgetKind::kTokenThrottle: {
      auto b = TokenThrottle::Create(policy.token_throttle);
      if (!b.ok()) return Invalid("token_throttle", std::string(b.status().message()));
      budget = *std::move(b);
      break;
    }
    case BudgetKind::kCostQuota: {
      auto b = CostQuota::Create(policy.cost_quota);
      if (!b.ok()) return Invalid("cost_quota", std::string(b.status().message()));
      budget = *std::move(b);
      break;
    }
    case BudgetKind::kNone:
      budget = std::make_shared<UnlimitedBudget>();
      break;
  }
  std::shared_ptr<const Classifier> classifier;
  if (!policy.retryable_codes.empty() || !policy.retryable_http_statuses.empty()) {
    auto codes = GrpcCodesClassifier::Create(GrpcCodesClassifierOptions{
        policy.status_overrides, policy.retryable_codes, policy.retryable_http_statuses});
    if (!codes.ok()) return codes.status();
    classifier = *std::move(codes);
  } else if (!policy.status_overrides.empty()) {
    classifier = std::make_shared<DefaultClassifier>(ClassifierOptions{policy.status_overrides});
  } else {
    classifier = DefaultClassifierInstance();
  }
  std::shared_ptr<CircuitBreakerRegistry> breakers;
  if (policy.circuit_breaker.has_value()) {
    auto r = CircuitBreakerRegistry::Create(*policy.circuit_breaker);
    if (!r.ok()) return r.status();  // names circuit_breaker.<field>
    breakers = *std::move(r);
  }
  options->budget = std::move(budget);
  options->classifier = std::move(classifier);
  if (breakers != nullptr) options->circuit_breakers = std::move(breakers);
  options->idempotency_header = policy.idempotency_header;
  options->key_form = policy.key_form;
  options->deadline_header = policy.deadline_header;
  options->attempt_header = policy.attempt_header;
  options->request_id_header = policy.request_id_header;
  options->hints = policy.hints;
  return absl::OkStatus();
}

}  // namespace saferetry

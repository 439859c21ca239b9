// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The factories of a Policy's parts (per-call options, budget, classifier,
// header names) and the Policy's own helpers. Reading is in reader.cc.

#include "saferetry/config.h"

#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "config/config_internal.h"
#include "saferetry/classifier.h"
#include "saferetry/grpc_codes_classifier.h"

namespace saferetry {

namespace {

using config_internal::Cat;
using config_internal::Invalid;

}  // namespace

namespace config_internal {

BudgetSpec SpecOf(const Policy& policy) {
  BudgetSpec spec;
  spec.name = policy.budget;
  spec.options_json = policy.budget_options.empty() ? std::string_view("{}")
                                                    : std::string_view(policy.budget_options);
  spec.path = kBudgetOptionsPath;
  return spec;
}

}  // namespace config_internal

bool operator==(const Policy& a, const Policy& b) {
  return static_cast<const RetryPolicyOptions&>(a) == static_cast<const RetryPolicyOptions&>(b) &&
         a.budget == b.budget && a.budget_options == b.budget_options &&
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
           a.circuit_breaker->half_open_probes == b.circuit_breaker->half_open_probes));
}

absl::StatusOr<std::shared_ptr<const RetryPolicy>> ToRetryPolicy(const Policy& policy) {
  return RetryPolicy::Create(static_cast<const RetryPolicyOptions&>(policy));
}

absl::Status ApplyToClientOptions(const Policy& policy, ClientOptions* options,
                                  const BudgetRegistry* budgets) {
  if (options == nullptr) return absl::InvalidArgumentError("options: must not be null");
  absl::StatusOr<std::shared_ptr<const RetryPolicy>> retry = ToRetryPolicy(policy);
  if (!retry.ok()) return retry.status();
  std::shared_ptr<RetryBudget> budget;
  if (policy.budget == "ratio") {
    auto b = MakeRatioBudget(policy.ratio_budget);
    if (!b.ok()) return Invalid("ratio_budget", std::string(b.status().message()));
    budget = *std::move(b);
  } else if (policy.budget == "tokenThrottle") {
    auto b = MakeTokenThrottle(policy.token_throttle);
    if (!b.ok()) return Invalid("token_throttle", std::string(b.status().message()));
    budget = *std::move(b);
  } else if (policy.budget == "costQuota") {
    auto b = MakeCostQuota(policy.cost_quota);
    if (!b.ok()) return Invalid("cost_quota", std::string(b.status().message()));
    budget = *std::move(b);
  } else if (policy.budget == "none") {
    budget = MakeUnlimitedBudget();
  } else {
    if (budgets == nullptr || !budgets->Contains(policy.budget)) {
      return Invalid("budget", Cat("\"", policy.budget,
                                   "\" is neither a built-in budget nor in the registry given"));
    }
    auto b = budgets->Make(config_internal::SpecOf(policy));
    if (!b.ok()) return b.status();
    budget = *std::move(b);
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
  options->policy = *std::move(retry);
  return absl::OkStatus();
}

}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "tools/sim/policy_file.h"

#include <memory>
#include <utility>

#include "saferetry/budget_registry.h"
#include "saferetry/config.h"

namespace saferetry {
namespace sim {

absl::StatusOr<BasePolicy> LoadBasePolicy(const std::string& path, const BudgetRegistry* budgets) {
  // A copy of the registry lives as long as the budget factory below.
  auto registry =
      std::make_shared<const BudgetRegistry>(budgets != nullptr ? *budgets : BudgetRegistry());
  LoadOptions load;
  load.budgets = registry.get();
  absl::StatusOr<Policy> policy = LoadPolicyFile(path, load);
  if (!policy.ok()) return policy.status();
  // The budget and the classifier come from the library's own conversion, so
  // the simulator cannot drift from what a real client would build.
  ClientOptions probe;
  if (absl::Status s = ApplyToClientOptions(*policy, &probe, registry.get()); !s.ok()) return s;

  BasePolicy base;
  base.max_attempts = policy->max_attempts;
  base.max_status_queries = policy->max_status_queries;
  base.backoff = policy->backoff;
  base.timeout = policy->timeout;
  base.deadline_options = policy->deadline_options;
  base.status_query = !policy->status_query.url_template.empty();
  base.server_deduplicates = policy->server_deduplicates;
  base.classifier = probe.classifier;
  base.circuit_breaker = policy->circuit_breaker;
  base.hedging = policy->hedging;
  base.source = path;
  base.make_budget = [p = *std::move(policy), registry] {
    ClientOptions fresh;
    // Already validated above; a failure here cannot happen, and an
    // unlimited budget is the visible fallback if it ever did.
    if (!ApplyToClientOptions(p, &fresh, registry.get()).ok() || fresh.budget == nullptr) {
      return std::shared_ptr<RetryBudget>(MakeUnlimitedBudget());
    }
    return fresh.budget;
  };
  return base;
}

}  // namespace sim
}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Budgets by name: a `BudgetRegistry` maps the name a policy document gives
// in `saferetry.budget` to a factory that makes the budget from its options
// object, `saferetry.budgetOptions`. The built-in budgets keep their names
// and their own objects ("ratio" with `saferetry.ratioBudget`,
// "tokenThrottle" with `retryThrottling`, "costQuota" with
// `saferetry.costQuota`, "none"); a registry adds budgets of your own.
//
// A registry is a plain value: fill it once, then pass it by pointer to
// `LoadPolicy` (`LoadOptions::budgets`), which checks that the name is known
// and that the factory accepts the options, and to `ApplyToClientOptions`,
// which makes the budget. There is no global registry.
//
// @code
//   saferetry::BudgetRegistry budgets;
//   absl::Status added = budgets.Register("perCall", [](const saferetry::BudgetSpec& spec)
//       -> absl::StatusOr<std::shared_ptr<saferetry::RetryBudget>> {
//     ... parse spec.options_json, or return InvalidArgument naming spec.path ...
//   });
//   saferetry::LoadOptions load;
//   load.budgets = &budgets;
//   auto policy = saferetry::LoadPolicyFile("retry.json", load);   // "budget": "perCall"
//   if (!policy.ok()) return policy.status();
//   absl::Status applied = saferetry::ApplyToClientOptions(*policy, &client_options, &budgets);
// @endcode

#ifndef SAFERETRY_BUDGET_REGISTRY_H_
#define SAFERETRY_BUDGET_REGISTRY_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "saferetry/retry_budget.h"

namespace saferetry {

/// What a factory gets: the budget's name and its options.
struct BudgetSpec {
  /// The name the policy gave (`saferetry.budget`).
  std::string_view name;
  /// `saferetry.budgetOptions` as compact JSON text (an object), "{}" when
  /// the policy gave none. Parse it with any JSON library.
  std::string_view options_json;
  /// The JSON path of the options ("$.saferetry.budgetOptions"), so that an
  /// error can name the field: "$.saferetry.budgetOptions.perCall: must be
  /// >= 1, got 0".
  std::string_view path;
};

/// Makes a budget from its spec. InvalidArgument for options it cannot
/// accept; a message that does not start with `spec.path` gets it prepended
/// by the caller. Called once by `LoadPolicy` (to validate; the budget is
/// dropped) and once by each `ApplyToClientOptions`. Must not throw.
using BudgetFactory =
    std::function<absl::StatusOr<std::shared_ptr<RetryBudget>>(const BudgetSpec& spec)>;

/// Budgets of your own, by name. Not thread-safe while it is being filled;
/// once filled, its const methods may be called from any thread.
class BudgetRegistry {
 public:
  /// "ratio", "tokenThrottle", "costQuota", "none": always known, never
  /// registered (their options have typed fields in `Policy`).
  static bool IsBuiltIn(std::string_view name);

  /// Adds `factory` under `name`. InvalidArgument for an empty name, one
  /// longer than 64 characters or holding characters other than ASCII
  /// letters, digits, '_', '-' and '.', or a null factory; AlreadyExists for a
  /// built-in name or one already registered.
  absl::Status Register(std::string name, BudgetFactory factory);

  /// True when `name` was registered here (built-in names are not).
  bool Contains(std::string_view name) const;

  /// The registered names, sorted.
  std::vector<std::string> Names() const;

  /// Makes the budget `spec.name` names. NotFound when no factory has that
  /// name; otherwise what the factory returns, with `spec.path` prepended to
  /// an error message that does not start with it, and InvalidArgument if
  /// the factory returned a null budget.
  absl::StatusOr<std::shared_ptr<RetryBudget>> Make(const BudgetSpec& spec) const;

 private:
  std::map<std::string, BudgetFactory, std::less<>> factories_;
};

}  // namespace saferetry

#endif  // SAFERETRY_BUDGET_REGISTRY_H_

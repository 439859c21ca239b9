// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// --policy FILE: a JSON policy (saferetry/config.h) as the simulator's
// `saferetry` client.

#ifndef SAFERETRY_TOOLS_SIM_POLICY_FILE_H_
#define SAFERETRY_TOOLS_SIM_POLICY_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "saferetry/budget_registry.h"
#include "tools/sim/presets.h"

namespace saferetry {
namespace sim {

/// Loads `path` with `LoadPolicyFile` and converts it. The client sends a
/// status query only when the policy has a status-query URL template; each
/// run gets a fresh budget of the one the policy names. `budgets` (may be
/// null: built-ins only) holds budgets of your own that the policy may name
/// (`saferetry.budget`); it is copied, so it need not outlive the call.
/// Errors name the file.
absl::StatusOr<BasePolicy> LoadBasePolicy(const std::string& path,
                                          const BudgetRegistry* budgets = nullptr);

}  // namespace sim
}  // namespace saferetry

#endif  // SAFERETRY_TOOLS_SIM_POLICY_FILE_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/budget_registry.h"

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace saferetry {
namespace {

constexpr std::size_t kMaxNameLength = 64;

bool NameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.';
}

}  // namespace

bool BudgetRegistry::IsBuiltIn(std::string_view name) {
  return name == "ratio" || name == "tokenThrottle" || name == "costQuota" || name == "none";
}

absl::Status BudgetRegistry::Register(std::string name, BudgetFactory factory) {
  if (name.empty() || name.size() > kMaxNameLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("name: must be 1..", kMaxNameLength, " characters, got \"", name, "\""));
  }
  for (char c : name) {
    if (!NameChar(c)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "name: only ASCII letters, digits, '_', '-' and '.' are allowed, got \"", name, "\""));
    }
  }
  if (factory == nullptr) return absl::InvalidArgumentError("factory: must not be null");
  if (IsBuiltIn(name)) {
    return absl::AlreadyExistsError(absl::StrCat("name: \"", name, "\" is a built-in budget"));
  }
  if (!factories_.emplace(name, std::move(factory)).second) {
    return absl::AlreadyExistsError(absl::StrCat("name: \"", name, "\" is already registered"));
  }
  return absl::OkStatus();
}

bool BudgetRegistry::Contains(std::string_view name) const {
  return factories_.find(name) != factories_.end();
}

std::vector<std::string> BudgetRegistry::Names() const {
  std::vector<std::string> names;
  names.reserve(factories_.size());
  for (const auto& entry : factories_) names.push_back(entry.first);
  return names;
}

absl::StatusOr<std::shared_ptr<RetryBudget>> BudgetRegistry::Make(const BudgetSpec& spec) const {
  const std::string name(spec.name);
  const std::string path(spec.path);
  auto it = factories_.find(name);
  if (it == factories_.end()) {
    return absl::NotFoundError("no budget named \"" + name + "\" is registered");
  }
  absl::StatusOr<std::shared_ptr<RetryBudget>> made = it->second(spec);
  if (!made.ok()) {
    const std::string message(made.status().message());
    if (message.compare(0, path.size(), path) == 0) return made.status();
    return absl::Status(made.status().code(), path + ": " + message);
  }
  if (*made == nullptr) {
    return absl::InvalidArgumentError(path + ": the factory of \"" + name + "\" made no budget");
  }
  return made;
}

}  // namespace saferetry

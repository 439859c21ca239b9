// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/testing/counting_budget.h"

namespace saferetry {
namespace testkit {

void CountingBudget::OnCallStart(TimePoint) {
  std::lock_guard<std::mutex> lock(mu_);
  ++call_starts_;
}

BudgetDecision CountingBudget::OnFailure(const BudgetFailure&, TimePoint) {
  std::lock_guard<std::mutex> lock(mu_);
  ++asks_;
  if (charges_ - refunds_ >= allowed_) return BudgetDecision::Refuse("counting_exhausted");
  ++charges_;
  return BudgetDecision::Allow(BudgetReceipt::Of(1));
}

void CountingBudget::Refund(const BudgetReceipt& receipt, TimePoint) {
  if (receipt.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  ++refunds_;
}

double CountingBudget::Balance(TimePoint) const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<double>(allowed_) - (charges_ - refunds_);
}

int CountingBudget::call_starts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return call_starts_;
}

int CountingBudget::asks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return asks_;
}

int CountingBudget::charges() const {
  std::lock_guard<std::mutex> lock(mu_);
  return charges_;
}

int CountingBudget::refunds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refunds_;
}

}  // namespace testkit
}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/testing/counting_budget.h"

namespace saferetry {
namespace testkit {

void CountingBudget::OnCallStart(TimePoint) {
  std::lock_guard<std::mutex> lock(mu_);
  ++call_starts_;
}

void CountingBudget::OnSuccess(std::int64_t, TimePoint) {}

BudgetDecision CountingBudget::OnFailureTryRetry(AttemptClass, TimePoint) {
  std::lock_guard<std::mutex> lock(mu_);
  ++asks_;
  BudgetDecision d;
  d.allowed = charges_ - refunds_ < allowed_;
  if (d.allowed) {
    ++charges_;
    d.cost = 1;
  } else {
    d.refusal = BudgetRefusal::kQuotaExhausted;
  }
  return d;
}

void CountingBudget::Refund(const BudgetDecision& decision, TimePoint) {
  if (!decision.allowed) return;
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

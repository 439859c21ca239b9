// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// A retry budget for tests that counts what the call asked of it: calls
// started, charges granted and refused, refunds. It grants the first
// `allowed` charges net of refunds (by default all of them), each costing 1.
//
// @code
//   auto budget = std::make_shared<saferetry::testkit::CountingBudget>(/*allowed=*/1);
//   options.budget = budget;                     // ClientOptions
//   ... run a call that retries twice ...
//   EXPECT_EQ(budget->charges(), 1);             // the second retry was refused
//   EXPECT_EQ(budget->asks(), 2);
// @endcode

#ifndef SAFERETRY_TESTING_COUNTING_BUDGET_H_
#define SAFERETRY_TESTING_COUNTING_BUDGET_H_

#include <cstdint>
#include <limits>
#include <mutex>

#include "saferetry/retry_budget.h"

namespace saferetry {
namespace testkit {

/// Thread-safe. Grants a charge while charges() - refunds() < `allowed`.
class CountingBudget final : public RetryBudget {
 public:
  explicit CountingBudget(int allowed = std::numeric_limits<int>::max()) : allowed_(allowed) {}

  void OnCallStart(TimePoint now) override;
  /// Grants while fewer than `allowed` charges are outstanding (each with
  /// a receipt, `first() == 1`), else refuses with "counting_exhausted".
  BudgetDecision OnFailure(const BudgetFailure& failure, TimePoint now) override;
  /// Counts a non-empty receipt as a refund.
  void Refund(const BudgetReceipt& receipt, TimePoint now) override;
  /// The charges still grantable: `allowed` - (charges - refunds).
  double Balance(TimePoint now) const override;

  /// Calls started (`OnCallStart`).
  int call_starts() const;
  /// Charges asked for, granted or not.
  int asks() const;
  /// Charges granted.
  int charges() const;
  /// Granted charges given back (`Refund`).
  int refunds() const;

 private:
  const int allowed_;
  mutable std::mutex mu_;
  int call_starts_ = 0;
  int asks_ = 0;
  int charges_ = 0;
  int refunds_ = 0;
};

}  // namespace testkit
}  // namespace saferetry

#endif  // SAFERETRY_TESTING_COUNTING_BUDGET_H_

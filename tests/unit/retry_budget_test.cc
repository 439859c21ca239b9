// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/retry_budget.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "saferetry/testing/counting_budget.h"

namespace saferetry {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr AttemptClass kTransient = AttemptClass::kRetryableTransient;
constexpr AttemptClass kAmbiguous = AttemptClass::kAmbiguous;
constexpr int kThreads = 8;

// A point `ms` milliseconds after the steady clock's epoch.
TimePoint At(std::int64_t ms) { return TimePoint{} + milliseconds(ms); }

template <typename Fn>
void RunOnThreads(Fn fn) {
  std::vector<std::thread> threads;
  std::atomic<bool> go{false};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&go, &fn] {
      while (!go.load()) std::this_thread::yield();
      fn();
    });
  }
  go.store(true);
  for (auto& th : threads) th.join();
}

std::string Message(const absl::Status& status) { return std::string(status.message()); }

std::shared_ptr<RetryBudget> MakeThrottleForOverload() {
  auto t = MakeTokenThrottle({});
  EXPECT_TRUE(t.ok()) << t.status();
  return *t;
}

TEST(BudgetReceiptTest, EmptyUnlessMadeAndComparedByValue) {
  constexpr BudgetReceipt empty;
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty.first(), 0);
  EXPECT_EQ(empty.second(), 0);
  constexpr BudgetReceipt zero = BudgetReceipt::Of(0);
  EXPECT_FALSE(zero.empty());  // a receipt for a free charge is still a receipt
  EXPECT_NE(zero, empty);
  EXPECT_EQ(BudgetReceipt::Of(7, -3).first(), 7);
  EXPECT_EQ(BudgetReceipt::Of(7, -3).second(), -3);
  EXPECT_EQ(BudgetReceipt::Of(7, -3), BudgetReceipt::Of(7, -3));
  EXPECT_NE(BudgetReceipt::Of(7, -3), BudgetReceipt::Of(7, 3));
  const BudgetDecision refused = BudgetDecision::Refuse("mine");
  EXPECT_FALSE(refused.allowed);
  EXPECT_EQ(refused.refusal, "mine");
  EXPECT_TRUE(refused.receipt.empty());
  const BudgetDecision allowed = BudgetDecision::Allow(BudgetReceipt::Of(2));
  EXPECT_TRUE(allowed.allowed);
  EXPECT_TRUE(allowed.refusal.empty());
  EXPECT_EQ(allowed.receipt, BudgetReceipt::Of(2));
}

AttemptEvidence Response(int status, std::optional<Duration> retry_after = std::nullopt) {
  AttemptEvidence ev;
  ev.delivery = Delivery::kResponseReceived;
  ev.http_status = status;
  ev.hints.retry_after = retry_after;
  return ev;
}

TEST(IsThrottlingTest, Exactly429Or503WithAHint) {
  EXPECT_TRUE(IsThrottling(Response(429)));
  EXPECT_TRUE(IsThrottling(Response(429, seconds(1))));
  EXPECT_TRUE(IsThrottling(Response(503, seconds(1))));
  EXPECT_TRUE(IsThrottling(Response(503, Duration{0})));
  EXPECT_FALSE(IsThrottling(Response(503)));
  for (int status : {200, 408, 425, 500, 502, 504}) {
    EXPECT_FALSE(IsThrottling(Response(status, seconds(1)))) << status;
  }
  AttemptEvidence no_response;
  no_response.delivery = Delivery::kMaybeDelivered;
  no_response.hints.retry_after = seconds(1);
  EXPECT_FALSE(IsThrottling(no_response));
}

// A budget that implements only what it must: OnFailure and Balance.
class MinimalBudget : public RetryBudget {
 public:
  BudgetDecision OnFailure(const BudgetFailure& failure, TimePoint) override {
    ++calls;
    last = failure;
    if (calls > 2) return BudgetDecision::Refuse("minimal_spent");
    return BudgetDecision::Allow(BudgetReceipt::Of(calls));
  }
  double Balance(TimePoint) const override { return 0; }
  int calls = 0;
  BudgetFailure last;
};

TEST(RetryBudgetTest, OneEntryPointAndDefaultsForTheRest) {
  MinimalBudget user;
  RetryBudget& b = user;
  b.OnCallStart(At(0));  // the defaults do nothing
  EXPECT_TRUE(b.OnFailure({kTransient, /*throttled=*/true}, At(0)).allowed);
  EXPECT_TRUE(user.last.throttled);
  EXPECT_EQ(user.last.use, BudgetUse::kRetry);
  BudgetFailure query;
  query.cls = kAmbiguous;
  query.use = BudgetUse::kStatusQuery;
  EXPECT_TRUE(b.OnFailure(query, At(0)).allowed);
  EXPECT_EQ(user.last.cls, kAmbiguous);
  EXPECT_EQ(user.last.use, BudgetUse::kStatusQuery);
  EXPECT_EQ(b.OnFailure({}, At(0)).refusal, "minimal_spent");
  EXPECT_EQ(user.last.cls, kTransient);  // the defaults of an empty event
  EXPECT_FALSE(user.last.throttled);
  EXPECT_EQ(user.calls, 3);
  b.Refund(BudgetReceipt::Of(1), At(0));
  b.OnSuccess(BudgetReceipt::Of(2), At(0));
  EXPECT_EQ(user.calls, 3);

  // The built-in budgets that do not price throttling ignore the flag.
  auto throttle = MakeThrottleForOverload();
  EXPECT_TRUE(throttle->OnFailure({kTransient, true}, At(0)).allowed);
  EXPECT_EQ(throttle->Balance(At(0)), 9.0);
  auto ratio = MakeRatioBudget({0, 1, seconds(1)});
  ASSERT_TRUE(ratio.ok());
  EXPECT_TRUE((*ratio)->OnFailure({kTransient, true}, At(0)).allowed);
  EXPECT_FALSE((*ratio)->OnFailure({kTransient, true}, At(0)).allowed);
  auto unlimited = MakeUnlimitedBudget();
  EXPECT_TRUE(unlimited->OnFailure({kTransient, true}, At(0)).allowed);
  unlimited->Refund(BudgetReceipt::Of(1), At(0));
}

TEST(UnlimitedBudgetTest, AlwaysAllows) {
  auto unlimited = MakeUnlimitedBudget();
  RetryBudget& budget = *unlimited;
  for (int i = 0; i < 1000; ++i) {
    BudgetDecision d = budget.OnFailure({kAmbiguous}, At(0));
    ASSERT_TRUE(d.allowed);
    ASSERT_TRUE(d.refusal.empty());
    ASSERT_TRUE(d.receipt.empty());
  }
}

// ---------------------------------------------------------------------------
// TokenThrottle

std::shared_ptr<RetryBudget> MakeThrottle(double max_tokens, double token_ratio) {
  auto t = MakeTokenThrottle({max_tokens, token_ratio});
  EXPECT_TRUE(t.ok()) << t.status();
  return *t;
}

TEST(TokenThrottleTest, DefaultTraceStepByStep) {
  auto throttle = MakeThrottle(10, 0.1);
  RetryBudget& budget = *throttle;
  EXPECT_EQ(budget.Balance(At(0)), 10.0);
  // 9, 8, 7, 6 are strictly above half (5): allowed.
  for (double expected : {9.0, 8.0, 7.0, 6.0}) {
    BudgetDecision d = budget.OnFailure({kTransient}, At(0));
    EXPECT_TRUE(d.allowed) << expected;
    EXPECT_TRUE(d.refusal.empty());
    EXPECT_EQ(d.receipt, BudgetReceipt::Of(1000));  // the milli-tokens it took
    EXPECT_EQ(budget.Balance(At(0)), expected);
  }
  // Exactly half after the charge: refused.
  BudgetDecision d = budget.OnFailure({kAmbiguous}, At(0));
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.refusal, "throttle_at_or_below_half");
  EXPECT_EQ(budget.Balance(At(0)), 5.0);
  for (double expected : {4.0, 3.0, 2.0, 1.0, 0.0, 0.0, 0.0}) {
    d = budget.OnFailure({kTransient}, At(0));
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.refusal, "throttle_at_or_below_half");
    EXPECT_EQ(budget.Balance(At(0)), expected);  // floor at 0
  }
  // Ten successes earn exactly one token.
  for (int i = 1; i <= 10; ++i) {
    budget.OnSuccess(BudgetReceipt(), At(0));
    EXPECT_EQ(budget.Balance(At(0)), i / 10.0) << i;
  }
}

TEST(TokenThrottleTest, ThresholdIsStrictlyAboveHalf) {
  auto throttle = MakeThrottle(10, 0.1);
  for (int i = 0; i < 5; ++i) (void)throttle->OnFailure({kTransient}, At(0));
  ASSERT_EQ(throttle->Balance(At(0)), 5.0);
  // 5.0 + 1.0 = 6.0, charged to 5.0: equal to half, refused.
  for (int i = 0; i < 10; ++i) throttle->OnSuccess(BudgetReceipt(), At(0));
  EXPECT_EQ(throttle->Balance(At(0)), 6.0);
  EXPECT_FALSE(throttle->OnFailure({kTransient}, At(0)).allowed);
  EXPECT_EQ(throttle->Balance(At(0)), 5.0);
  // 5.0 + 1.1 = 6.1, charged to 5.1: above half by one milli-token step, allowed.
  for (int i = 0; i < 11; ++i) throttle->OnSuccess(BudgetReceipt(), At(0));
  EXPECT_EQ(throttle->Balance(At(0)), 6.1);
  EXPECT_TRUE(throttle->OnFailure({kTransient}, At(0)).allowed);
  EXPECT_EQ(throttle->Balance(At(0)), 5.1);
}

TEST(TokenThrottleTest, RecoveryFromEmptyTakes61Successes) {
  for (int successes : {60, 61}) {
    auto throttle = MakeThrottle(10, 0.1);
    for (int i = 0; i < 20; ++i) (void)throttle->OnFailure({kTransient}, At(0));
    ASSERT_EQ(throttle->Balance(At(0)), 0.0);
    for (int i = 0; i < successes; ++i) throttle->OnSuccess(BudgetReceipt(), At(0));
    // 6.0 is charged to 5.0 (refused); 6.1 to 5.1 (allowed).
    EXPECT_EQ(throttle->OnFailure({kTransient}, At(0)).allowed, successes == 61);
  }
}

TEST(TokenThrottleTest, SuccessIsCappedAtMaxTokens) {
  auto throttle = MakeThrottle(10, 0.7);
  throttle->OnSuccess(BudgetReceipt(), At(0));
  EXPECT_EQ(throttle->Balance(At(0)), 10.0);
  (void)throttle->OnFailure({kTransient}, At(0));
  throttle->OnSuccess(BudgetReceipt(), At(0));
  EXPECT_EQ(throttle->Balance(At(0)), 9.7);
  throttle->OnSuccess(BudgetReceipt(), At(0));
  EXPECT_EQ(throttle->Balance(At(0)), 10.0);
  // retry_cost is irrelevant to the throttle.
  (void)throttle->OnFailure({kTransient}, At(0));
  throttle->OnSuccess(BudgetReceipt::Of(500), At(0));
  EXPECT_EQ(throttle->Balance(At(0)), 9.7);
}

TEST(TokenThrottleTest, TokenRatioKeepsThreeDecimals) {
  auto throttle = MakeThrottle(10, 0.1239);  // 0.123
  (void)throttle->OnFailure({kTransient}, At(0));
  throttle->OnSuccess(BudgetReceipt(), At(0));
  EXPECT_EQ(throttle->Balance(At(0)), 9.123);

  auto exact = MakeThrottle(10, 0.29);  // 0.29 * 1000 is 289.999... in binary
  (void)exact->OnFailure({kTransient}, At(0));
  exact->OnSuccess(BudgetReceipt(), At(0));
  EXPECT_EQ(exact->Balance(At(0)), 9.29);
}

TEST(TokenThrottleTest, OddMaxTokensHalfIsExact) {
  auto throttle = MakeThrottle(3, 1);                              // half is 1.5
  EXPECT_TRUE(throttle->OnFailure({kTransient}, At(0)).allowed);   // 2 > 1.5
  EXPECT_FALSE(throttle->OnFailure({kTransient}, At(0)).allowed);  // 1 <= 1.5
  EXPECT_EQ(throttle->Balance(At(0)), 1.0);

  auto tiny = MakeThrottle(0.001, 0.001);  // one milli-token; half is 0.0005
  EXPECT_FALSE(tiny->OnFailure({kTransient}, At(0)).allowed);
  EXPECT_EQ(tiny->Balance(At(0)), 0.0);
}

TEST(TokenThrottleTest, ValidationNamesTheField) {
  EXPECT_TRUE(MakeTokenThrottle({}).ok());
  EXPECT_TRUE(MakeTokenThrottle({1000, 0.001}).ok());
  struct Case {
    TokenThrottleOptions options;
    std::string message;
  };
  const double nan = std::nan("");
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<Case> cases = {
      {{0, 0.1}, "max_tokens: must be in (0, 1000], got 0"},
      {{-1, 0.1}, "max_tokens: must be in (0, 1000], got -1"},
      {{1000.5, 0.1}, "max_tokens: must be in (0, 1000], got 1000.5"},
      {{nan, 0.1}, "max_tokens: must be in (0, 1000], got nan"},
      {{0.0001, 0.1}, "max_tokens: must be >= 0.001 (three decimals are kept), got 0.0001"},
      {{10, 0}, "token_ratio: must be > 0 and finite, got 0"},
      {{10, -0.5}, "token_ratio: must be > 0 and finite, got -0.5"},
      {{10, nan}, "token_ratio: must be > 0 and finite, got nan"},
      {{10, inf}, "token_ratio: must be > 0 and finite, got inf"},
      {{10, 0.0004}, "token_ratio: must be in [0.001, 1e12] (three decimals are kept), got 0.0004"},
  };
  for (const Case& c : cases) {
    auto t = MakeTokenThrottle(c.options);
    ASSERT_FALSE(t.ok()) << c.message;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Message(t.status()), c.message);
  }
}

// Deposits take no lock: calls starting on many threads while the window
// rotates (their times cross two second boundaries) are each counted once,
// and after the window has moved past them none is left behind.
TEST(RatioBudgetTest, ConcurrentDepositsAcrossRotationsAreCountedOnce) {
  auto made = MakeRatioBudget({0.5, 0, seconds(10)});
  ASSERT_TRUE(made.ok()) << made.status();
  RetryBudget& budget = **made;
  constexpr int kPerThread = 3000;
  std::atomic<int> next{0};
  RunOnThreads([&] {
    for (int i = 0; i < kPerThread; ++i) {
      // 100 s, 101 s and 102 s, interleaved across threads.
      const int n = next.fetch_add(1, std::memory_order_relaxed);
      budget.OnCallStart(At(100'000 + (n % 3) * 1000 + 7));
    }
  });
  EXPECT_DOUBLE_EQ(budget.Balance(At(102'500)), 0.5 * kThreads * kPerThread);
  // Ten seconds on, every one of them has left the window: one new deposit
  // rotates it, and the running sums hold exactly that one.
  budget.OnCallStart(At(112'000));
  EXPECT_DOUBLE_EQ(budget.Balance(At(112'000)), 0.5);
}

// Withdrawals take no lock either: failures on many threads at once are
// allowed exactly as many times as the balance holds whole retries.
TEST(RatioBudgetTest, ConcurrentWithdrawalsNeverOverdraw) {
  auto made = MakeRatioBudget({0.1, 0, seconds(10)});
  ASSERT_TRUE(made.ok()) << made.status();
  RetryBudget& budget = **made;
  for (int i = 0; i < 1000; ++i) budget.OnCallStart(At(100'000));
  ASSERT_DOUBLE_EQ(budget.Balance(At(100'000)), 100.0);
  std::atomic<int> allowed{0};
  RunOnThreads([&] {
    for (int i = 0; i < 50; ++i) {
      if (budget.OnFailure({kTransient}, At(100'500)).allowed) {
        allowed.fetch_add(1, std::memory_order_relaxed);
      }
    }
  });
  EXPECT_EQ(allowed.load(), 100);
  EXPECT_DOUBLE_EQ(budget.Balance(At(100'500)), 0.0);
}

TEST(TokenThrottleTest, ConcurrentUpdatesAreNotLost) {
  // Drained to 500 first; then each thread pairs a failure (-1) with a success
  // (+1). The total stays within [492, 500], far from the floor and the cap,
  // so any lost update of either kind moves the final value off 500.
  auto throttle = MakeThrottle(1000, 1);
  for (int i = 0; i < 500; ++i) (void)throttle->OnFailure({kTransient}, At(0));
  ASSERT_EQ(throttle->Balance(At(0)), 500.0);
  std::atomic<int> allowed{0};
  RunOnThreads([&] {
    for (int i = 0; i < 100000; ++i) {
      // 499 after a charge is never above half: every decision is a refusal.
      if (throttle->OnFailure({kTransient}, At(0)).allowed) allowed.fetch_add(1);
      throttle->OnSuccess(BudgetReceipt(), At(0));
    }
  });
  EXPECT_EQ(allowed.load(), 0);
  EXPECT_EQ(throttle->Balance(At(0)), 500.0);
}

TEST(TokenThrottleTest, ConcurrentFailuresAllowExactlyTheTokensAboveHalf) {
  // From 10 tokens, only the charges that leave 9, 8, 7 and 6 are allowed:
  // exactly 4 across all threads, however they interleave.
  auto throttle = MakeThrottle(10, 0.1);
  std::atomic<int> allowed{0};
  RunOnThreads([&] {
    for (int i = 0; i < 200; ++i) {
      if (throttle->OnFailure({kTransient}, At(0)).allowed) allowed.fetch_add(1);
    }
  });
  EXPECT_EQ(allowed.load(), 4);
  EXPECT_EQ(throttle->Balance(At(0)), 0.0);
}

// The receipt of an allowed decision holds the milli-tokens taken; a refusal
// keeps what the failure cost (gRPC's rule) and so has no receipt to refund.
TEST(TokenThrottleTest, OnlyAnAllowedDecisionHasAReceipt) {
  auto throttle = MakeThrottle(2.5, 0.1);
  BudgetDecision d = throttle->OnFailure({kTransient}, At(0));  // 2.5 -> 1.5
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.receipt, BudgetReceipt::Of(1000));
  d = throttle->OnFailure({kTransient}, At(0));  // 1.5 -> 0.5
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.refusal, "throttle_at_or_below_half");
  EXPECT_TRUE(d.receipt.empty());
  d = throttle->OnFailure({kTransient}, At(0));  // 0.5 -> 0 (floor)
  EXPECT_TRUE(d.receipt.empty());
  EXPECT_EQ(throttle->Balance(At(0)), 0.0);
}

TEST(TokenThrottleTest, RefundGivesBackTheChargeCapped) {
  auto throttle = MakeThrottle(10, 0.1);
  BudgetDecision a = throttle->OnFailure({kTransient}, At(0));  // 9
  BudgetDecision b = throttle->OnFailure({kTransient}, At(0));  // 8
  ASSERT_TRUE(a.allowed);
  ASSERT_TRUE(b.allowed);
  EXPECT_EQ(a.receipt.first(), 1000);
  throttle->Refund(b.receipt, At(0));
  EXPECT_EQ(throttle->Balance(At(0)), 9.0);
  for (int i = 0; i < 5; ++i) throttle->OnSuccess(BudgetReceipt(), At(0));  // 9.5
  EXPECT_EQ(throttle->Balance(At(0)), 9.5);
  throttle->Refund(a.receipt, At(0));  // 10.5, capped
  EXPECT_EQ(throttle->Balance(At(0)), 10.0);
}

TEST(TokenThrottleTest, RefundOfARefusalDoesNothing) {
  auto throttle = MakeThrottle(2, 0.1);
  BudgetDecision d = throttle->OnFailure({kTransient}, At(0));  // 1: refused
  ASSERT_FALSE(d.allowed);
  throttle->Refund(d.receipt, At(0));
  EXPECT_EQ(throttle->Balance(At(0)), 1.0);
}

// ---------------------------------------------------------------------------
// RatioBudget

std::shared_ptr<RetryBudget> MakeRatio(double percent, double min_per_second, Duration window) {
  auto b = MakeRatioBudget({percent, min_per_second, window});
  EXPECT_TRUE(b.ok()) << b.status();
  return *b;
}

TEST(RatioBudgetTest, DefaultsAreTenPercentPlusTenPerSecondOverTenSeconds) {
  RatioBudgetOptions options;
  EXPECT_EQ(options.percent, 0.10);
  EXPECT_EQ(options.min_per_second, 10);
  EXPECT_EQ(options.window, seconds(10));
  auto budget = MakeRatioBudget({});
  ASSERT_TRUE(budget.ok());
  RetryBudget& b = **budget;
  EXPECT_EQ(b.Balance(At(0)), 100.0);
  for (int i = 0; i < 10; ++i) b.OnCallStart(At(500));
  EXPECT_EQ(b.Balance(At(500)), 101.0);
  int allowed = 0;
  for (int i = 0; i < 105; ++i) allowed += b.OnFailure({kTransient}, At(900)).allowed;
  EXPECT_EQ(allowed, 101);
  EXPECT_EQ(b.Balance(At(900)), 0.0);
}

TEST(RatioBudgetTest, ExactTraceAcrossTime) {
  // percent 0.5, 1 retry/s, 3 s window: reserve 3.
  auto budget = MakeRatio(0.5, 1, seconds(3));
  RetryBudget& b = *budget;
  EXPECT_EQ(b.Balance(At(100'000)), 3.0);
  b.OnCallStart(At(100'200));
  b.OnCallStart(At(100'200));
  EXPECT_EQ(b.Balance(At(100'200)), 4.0);
  EXPECT_TRUE(b.OnFailure({kTransient}, At(100'500)).allowed);
  EXPECT_EQ(b.Balance(At(100'500)), 3.0);
  for (int i = 0; i < 3; ++i) {
    BudgetDecision d = b.OnFailure({kAmbiguous}, At(100'900));
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.receipt, BudgetReceipt::Of(1, 100));  // one withdrawal, second 100
  }
  EXPECT_EQ(b.Balance(At(100'900)), 0.0);
  BudgetDecision refused = b.OnFailure({kTransient}, At(100'999));
  EXPECT_FALSE(refused.allowed);
  EXPECT_EQ(refused.refusal, "ratio_exhausted");
  EXPECT_EQ(b.Balance(At(100'999)), 0.0);  // a refusal withdraws nothing

  // Second 101: nothing has expired yet.
  EXPECT_EQ(b.Balance(At(101'000)), 0.0);
  b.OnCallStart(At(101'500));
  EXPECT_EQ(b.Balance(At(101'500)), 0.5);
  EXPECT_FALSE(b.OnFailure({kTransient}, At(101'500)).allowed);  // 0.5 < 1
  b.OnCallStart(At(101'600));
  EXPECT_TRUE(b.OnFailure({kTransient}, At(101'700)).allowed);  // exactly 1
  EXPECT_EQ(b.Balance(At(101'700)), 0.0);
  EXPECT_FALSE(b.OnFailure({kTransient}, At(102'999)).allowed);

  // 103.000: second 100 (2 deposits, 4 withdrawals) leaves the window.
  EXPECT_EQ(b.Balance(At(102'999)), 0.0);
  EXPECT_EQ(b.Balance(At(103'000)), 3.0);
  // 104.000: second 101 (2 deposits, 1 withdrawal) leaves too: back to reserve.
  EXPECT_EQ(b.Balance(At(103'999)), 3.0);
  EXPECT_EQ(b.Balance(At(104'000)), 3.0);
  // The decision path (which rotates slots) agrees with the query.
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(b.OnFailure({kTransient}, At(104'000)).allowed);
  EXPECT_FALSE(b.OnFailure({kTransient}, At(104'000)).allowed);
  EXPECT_EQ(b.Balance(At(104'000)), 0.0);
}

TEST(RatioBudgetTest, DepositLivesUntilItsSecondPlusWindow) {
  auto budget = MakeRatio(1.0, 0, seconds(3));
  budget->OnCallStart(At(12'300));
  EXPECT_EQ(budget->Balance(At(12'300)), 1.0);
  EXPECT_EQ(budget->Balance(At(14'999)), 1.0);
  EXPECT_EQ(budget->Balance(At(15'000)), 0.0);
  // The same through the decision path.
  auto other = MakeRatio(1.0, 0, seconds(3));
  other->OnCallStart(At(12'999));
  EXPECT_FALSE(other->OnFailure({kTransient}, At(15'000)).allowed);
  auto third = MakeRatio(1.0, 0, seconds(3));
  third->OnCallStart(At(12'000));
  EXPECT_TRUE(third->OnFailure({kTransient}, At(14'999)).allowed);
}

TEST(RatioBudgetTest, TenPercentThresholdIsExact) {
  auto budget = MakeRatio(0.1, 0, seconds(10));
  for (int i = 0; i < 9; ++i) budget->OnCallStart(At(0));
  EXPECT_FALSE(budget->OnFailure({kTransient}, At(0)).allowed);  // 0.9
  budget->OnCallStart(At(0));
  EXPECT_TRUE(budget->OnFailure({kTransient}, At(0)).allowed);  // 1.0
  for (int i = 0; i < 30; ++i) budget->OnCallStart(At(0));
  int allowed = 0;
  for (int i = 0; i < 10; ++i) allowed += budget->OnFailure({kTransient}, At(0)).allowed;
  EXPECT_EQ(allowed, 3);  // 0.1 * 40 - 1 = 3
  EXPECT_EQ(budget->Balance(At(0)), 0.0);
}

TEST(RatioBudgetTest, WithdrawalsOutliveDepositsSoBalanceCanGoNegative) {
  auto budget = MakeRatio(1.0, 0, seconds(2));
  budget->OnCallStart(At(10'000));
  EXPECT_TRUE(budget->OnFailure({kTransient}, At(11'000)).allowed);
  EXPECT_EQ(budget->Balance(At(11'000)), 0.0);
  EXPECT_EQ(budget->Balance(At(12'000)), -1.0);
  budget->OnCallStart(At(12'000));
  EXPECT_FALSE(budget->OnFailure({kTransient}, At(12'000)).allowed);
  EXPECT_EQ(budget->Balance(At(12'000)), 0.0);
  EXPECT_EQ(budget->Balance(At(13'000)), 1.0);
}

TEST(RatioBudgetTest, StaleTimeCountsInTheNewestSecond) {
  auto budget = MakeRatio(1.0, 0, seconds(3));
  budget->OnCallStart(At(105'000));
  budget->OnCallStart(At(103'200));  // reported late: recorded in second 105
  EXPECT_EQ(budget->Balance(At(105'000)), 2.0);
  EXPECT_EQ(budget->Balance(At(104'000)), 2.0);  // a stale query sees second 105
  EXPECT_EQ(budget->Balance(At(107'999)), 2.0);
  EXPECT_EQ(budget->Balance(At(108'000)), 0.0);
}

TEST(RatioBudgetTest, LongJumpClearsTheWindow) {
  auto budget = MakeRatio(0.5, 2, seconds(4));  // reserve 8
  for (int i = 0; i < 6; ++i) budget->OnCallStart(At(1'000 + i * 700));
  EXPECT_EQ(budget->Balance(At(4'500)), 11.0);
  for (int i = 0; i < 11; ++i) EXPECT_TRUE(budget->OnFailure({kTransient}, At(4'500)).allowed);
  EXPECT_FALSE(budget->OnFailure({kTransient}, At(4'500)).allowed);
  EXPECT_EQ(budget->Balance(At(1'000'000)), 8.0);
  EXPECT_TRUE(budget->OnFailure({kTransient}, At(1'000'000)).allowed);
  EXPECT_EQ(budget->Balance(At(1'000'000)), 7.0);
}

TEST(RatioBudgetTest, NegativeTimeUsesFloorSeconds) {
  auto budget = MakeRatio(1.0, 0, seconds(2));
  budget->OnCallStart(At(-1'500));  // second -2
  EXPECT_EQ(budget->Balance(At(-1'000)), 1.0);
  EXPECT_EQ(budget->Balance(At(-1)), 1.0);
  EXPECT_EQ(budget->Balance(At(0)), 0.0);
}

TEST(RatioBudgetTest, FractionalWindowDropsTheFraction) {
  auto budget = MakeRatio(0, 1, milliseconds(2700));  // acts as 2 s: reserve 2
  EXPECT_EQ(budget->Balance(At(0)), 2.0);
  EXPECT_TRUE(budget->OnFailure({kTransient}, At(0)).allowed);
  EXPECT_TRUE(budget->OnFailure({kTransient}, At(1'000)).allowed);
  EXPECT_FALSE(budget->OnFailure({kTransient}, At(1'999)).allowed);
  EXPECT_TRUE(budget->OnFailure({kTransient}, At(2'000)).allowed);
}

TEST(RatioBudgetTest, ValidationNamesTheField) {
  struct Case {
    RatioBudgetOptions options;
    std::string message;
  };
  const double nan = std::nan("");
  std::vector<Case> cases = {
      {{-0.1, 10, seconds(10)}, "percent: must be in [0, 1000], got -0.1"},
      {{1000.5, 10, seconds(10)}, "percent: must be in [0, 1000], got 1000.5"},
      {{nan, 10, seconds(10)}, "percent: must be in [0, 1000], got nan"},
      {{std::numeric_limits<double>::infinity(), 10, seconds(10)},
       "percent: must be in [0, 1000], got inf"},
      {{0.1, -1, seconds(10)}, "min_per_second: must be >= 0 and finite, got -1"},
      {{0.1, nan, seconds(10)}, "min_per_second: must be >= 0 and finite, got nan"},
      {{0.1, 10, milliseconds(999)}, "window: must be >= 1s, got 999ms"},
      {{0.1, 10, Duration{0}}, "window: must be >= 1s, got 0"},
      {{0.1, 10, std::chrono::hours(25)}, "window: must be <= 24h, got 25h"},
  };
  for (const Case& c : cases) {
    auto b = MakeRatioBudget(c.options);
    ASSERT_FALSE(b.ok()) << c.message;
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Message(b.status()), c.message);
  }
  EXPECT_TRUE(MakeRatioBudget({0, 0, seconds(1)}).ok());
  EXPECT_TRUE(MakeRatioBudget({1, 0, std::chrono::hours(24)}).ok());
  EXPECT_TRUE(MakeRatioBudget({1.5, 0, seconds(1)}).ok());
  EXPECT_TRUE(MakeRatioBudget({1000, 0, seconds(1)}).ok());
}

TEST(RatioBudgetTest, PercentFiveAllowsFiveRetriesPerCall) {
  auto budget = MakeRatio(5.0, 0, seconds(10));
  EXPECT_EQ(budget->Balance(At(0)), 0.0);
  EXPECT_FALSE(budget->OnFailure({kTransient}, At(0)).allowed);
  budget->OnCallStart(At(0));
  EXPECT_EQ(budget->Balance(At(0)), 5.0);
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(budget->OnFailure({kTransient}, At(100)).allowed) << i;
  }
  BudgetDecision refused = budget->OnFailure({kTransient}, At(100));
  EXPECT_FALSE(refused.allowed);
  EXPECT_EQ(refused.refusal, "ratio_exhausted");
  EXPECT_EQ(budget->Balance(At(100)), 0.0);
  budget->OnCallStart(At(200));
  budget->OnCallStart(At(200));
  int allowed = 0;
  for (int i = 0; i < 20; ++i) allowed += budget->OnFailure({kTransient}, At(300)).allowed;
  EXPECT_EQ(allowed, 10);
}

TEST(RatioBudgetTest, PercentOneThousandAllowsAThousandRetriesPerCall) {
  auto budget = MakeRatio(1000, 0, seconds(10));
  budget->OnCallStart(At(0));
  EXPECT_EQ(budget->Balance(At(0)), 1000.0);
  int allowed = 0;
  for (int i = 0; i < 1005; ++i) allowed += budget->OnFailure({kTransient}, At(0)).allowed;
  EXPECT_EQ(allowed, 1000);
  EXPECT_EQ(budget->Balance(At(0)), 0.0);
}

TEST(RatioBudgetTest, LargestReserveAndPercentStayExact) {
  // The reserve is capped at 1e12 retries (1e18 millionths); with percent
  // 1000 the integer sums stay exact (the arithmetic saturates rather than
  // wrapping). Balance() converts the millionths to double, which at this
  // size rounds to a multiple of 128 millionths.
  auto budget = MakeRatio(1000, 1e300, seconds(10));
  for (int i = 0; i < 3; ++i) budget->OnCallStart(At(0));
  EXPECT_EQ(budget->Balance(At(0)), 1000000003000.0);
  EXPECT_TRUE(budget->OnFailure({kTransient}, At(0)).allowed);
  EXPECT_EQ(budget->Balance(At(0)),
            static_cast<double>(std::int64_t{1'000'000'002'999'000'000}) / 1e6);
}

TEST(RatioBudgetTest, AllowedDecisionRecordsItsSecond) {
  auto budget = MakeRatio(0, 1, seconds(10));
  EXPECT_EQ(budget->OnFailure({kTransient}, At(7'250)).receipt.second(), 7);
  // A late report is recorded in the newest second seen.
  EXPECT_EQ(budget->OnFailure({kTransient}, At(3'000)).receipt.second(), 7);
  BudgetDecision d = budget->OnFailure({kTransient}, At(9'999));
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.receipt.second(), 9);
  EXPECT_EQ(d.receipt.first(), 1);
}

TEST(RatioBudgetTest, RefundRemovesTheWithdrawalWhileInTheWindow) {
  auto budget = MakeRatio(0, 1, seconds(3));  // reserve 3
  BudgetDecision d = budget->OnFailure({kTransient}, At(100'500));
  ASSERT_TRUE(d.allowed);
  EXPECT_EQ(budget->Balance(At(100'500)), 2.0);
  budget->Refund(d.receipt, At(102'999));  // second 100 still counts at 102.999
  EXPECT_EQ(budget->Balance(At(102'999)), 3.0);
  // The refund took the withdrawal out: when second 100 expires nothing is
  // subtracted twice.
  EXPECT_EQ(budget->Balance(At(103'000)), 3.0);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(budget->OnFailure({kTransient}, At(103'000)).allowed);
  }
  EXPECT_FALSE(budget->OnFailure({kTransient}, At(103'000)).allowed);
}

TEST(RatioBudgetTest, RefundAfterExpiryDoesNothing) {
  auto budget = MakeRatio(0, 1, seconds(3));  // reserve 3
  BudgetDecision d = budget->OnFailure({kTransient}, At(100'500));
  ASSERT_TRUE(d.allowed);
  // Second 100 left the window at 103.000, and a new withdrawal now sits in
  // the slot that second 100 used.
  BudgetDecision later = budget->OnFailure({kTransient}, At(103'100));
  ASSERT_TRUE(later.allowed);
  EXPECT_EQ(budget->Balance(At(103'100)), 2.0);
  budget->Refund(d.receipt, At(103'100));
  EXPECT_EQ(budget->Balance(At(103'100)), 2.0);
  budget->Refund(later.receipt, At(103'200));
  EXPECT_EQ(budget->Balance(At(103'200)), 3.0);
}

TEST(RatioBudgetTest, RefundOfARefusalDoesNothing) {
  auto budget = MakeRatio(0, 1, seconds(1));  // reserve 1
  ASSERT_TRUE(budget->OnFailure({kTransient}, At(0)).allowed);
  BudgetDecision refused = budget->OnFailure({kTransient}, At(0));
  ASSERT_FALSE(refused.allowed);
  budget->Refund(refused.receipt, At(0));
  EXPECT_EQ(budget->Balance(At(0)), 0.0);
}

TEST(RatioBudgetTest, ConcurrentUpdatesAreNotLost) {
  // A reserve of 100000 is never exhausted, so every retry is allowed and the
  // final balance is 100000 + 0.1 * 32000 deposits - 16000 withdrawals.
  auto budget = MakeRatio(0.1, 10000, seconds(10));
  std::atomic<int> refused{0};
  RunOnThreads([&] {
    for (int i = 0; i < 2000; ++i) {
      budget->OnCallStart(At(5'000));
      budget->OnCallStart(At(5'000));
      if (!budget->OnFailure({kTransient}, At(5'000)).allowed) refused.fetch_add(1);
    }
  });
  EXPECT_EQ(refused.load(), 0);
  EXPECT_EQ(budget->Balance(At(5'000)), 87200.0);
}

TEST(RatioBudgetTest, ConcurrentWithdrawalsStopExactlyAtZero) {
  auto budget = MakeRatio(0, 10, seconds(10));  // 100 retries
  std::atomic<int> allowed{0};
  RunOnThreads([&] {
    for (int i = 0; i < 50; ++i) {
      // Times spread over one second: rotation happens under contention too.
      if (budget->OnFailure({kTransient}, At(7'000 + i * 20)).allowed) allowed.fetch_add(1);
    }
  });
  EXPECT_EQ(allowed.load(), 100);
  EXPECT_EQ(budget->Balance(At(7'999)), 0.0);
}

// ---------------------------------------------------------------------------
// CostQuota

std::shared_ptr<RetryBudget> MakeQuota(CostQuotaOptions options) {
  auto q = MakeCostQuota(options);
  EXPECT_TRUE(q.ok()) << q.status();
  return *q;
}

TEST(CostQuotaTest, DefaultTraceStepByStep) {
  CostQuotaOptions defaults;
  EXPECT_EQ(defaults.capacity, 500);
  EXPECT_EQ(defaults.retry_cost, 5);
  EXPECT_EQ(defaults.timeout_cost, 10);
  EXPECT_EQ(defaults.success_increment, 1);
  auto quota = MakeQuota({});
  RetryBudget& b = *quota;
  EXPECT_EQ(b.Balance(At(0)), 500.0);
  BudgetDecision d = b.OnFailure({kTransient}, At(0));
  EXPECT_TRUE(d.allowed);
  EXPECT_TRUE(d.refusal.empty());
  EXPECT_EQ(d.receipt.first(), 5);
  EXPECT_EQ(b.Balance(At(0)), 495.0);
  d = b.OnFailure({kAmbiguous}, At(0));
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.receipt.first(), 10);
  EXPECT_EQ(b.Balance(At(0)), 485.0);
  d = b.OnFailure({AttemptClass::kRetryableNotDelivered}, At(0));
  EXPECT_EQ(d.receipt.first(), 5);
  EXPECT_EQ(b.Balance(At(0)), 480.0);
  b.OnSuccess(BudgetReceipt::Of(10), At(0));  // a successful retry refunds its cost
  EXPECT_EQ(b.Balance(At(0)), 490.0);
  b.OnSuccess(BudgetReceipt(), At(0));  // a first-try success adds the increment
  EXPECT_EQ(b.Balance(At(0)), 491.0);
  b.OnSuccess(BudgetReceipt::Of(5), At(0));
  b.OnSuccess(BudgetReceipt::Of(5), At(0));
  EXPECT_EQ(b.Balance(At(0)), 500.0);  // capped (491 + 10 = 501)
  b.OnSuccess(BudgetReceipt(), At(0));
  EXPECT_EQ(b.Balance(At(0)), 500.0);
}

TEST(CostQuotaTest, RefusesBelowTheCostAndAllowsExactlyAtIt) {
  auto quota = MakeQuota({12, 5, 10, 1});
  EXPECT_TRUE(quota->OnFailure({kTransient}, At(0)).allowed);  // 7 left
  BudgetDecision d = quota->OnFailure({kAmbiguous}, At(0));    // 7 < 10
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.refusal, "quota_exhausted");
  EXPECT_TRUE(d.receipt.empty());
  EXPECT_EQ(quota->Balance(At(0)), 7.0);
  EXPECT_TRUE(quota->OnFailure({kTransient}, At(0)).allowed);   // 2 left
  EXPECT_FALSE(quota->OnFailure({kTransient}, At(0)).allowed);  // 2 < 5
  for (int i = 0; i < 3; ++i) quota->OnSuccess(BudgetReceipt(), At(0));
  EXPECT_EQ(quota->Balance(At(0)), 5.0);
  d = quota->OnFailure({kTransient}, At(0));  // 5 == 5: allowed
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.receipt.first(), 5);
  EXPECT_EQ(quota->Balance(At(0)), 0.0);
}

TEST(CostQuotaTest, ZeroIncrementAndHugeRefund) {
  auto quota = MakeQuota({100, 5, 10, 0});
  (void)quota->OnFailure({kAmbiguous}, At(0));
  quota->OnSuccess(BudgetReceipt(), At(0));
  EXPECT_EQ(quota->Balance(At(0)), 90.0);
  quota->OnSuccess(BudgetReceipt::Of(std::numeric_limits<std::int64_t>::max()), At(0));
  EXPECT_EQ(quota->Balance(At(0)), 100.0);
}

TEST(CostQuotaTest, ValidationNamesTheField) {
  struct Case {
    CostQuotaOptions options;
    std::string message;
  };
  std::vector<Case> cases = {
      {{-1, 5, 10, 1}, "capacity: must be >= 0, got -1"},
      {{500, 0, 10, 1}, "retry_cost: must be > 0, got 0"},
      {{500, 5, -1, 1}, "timeout_cost: must be > 0, got -1"},
      {{500, 5, 10, -1}, "success_increment: must be >= 0, got -1"},
      {{500, 5, 10, 1, -1}, "throttling_cost: must be >= 0 (0 = retry_cost), got -1"},
  };
  for (const Case& c : cases) {
    auto q = MakeCostQuota(c.options);
    ASSERT_FALSE(q.ok()) << c.message;
    EXPECT_EQ(q.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Message(q.status()), c.message);
  }
}

TEST(CostQuotaTest, CapacityZeroNeverRetries) {
  auto quota = MakeQuota({0, 5, 10, 1});
  EXPECT_EQ(quota->Balance(At(0)), 0.0);
  for (AttemptClass cls :
       {kTransient, kAmbiguous, AttemptClass::kRetryableNotDelivered, AttemptClass::kInProgress}) {
    for (bool throttled : {false, true}) {
      BudgetDecision d = quota->OnFailure({cls, throttled}, At(0));
      EXPECT_FALSE(d.allowed);
      EXPECT_EQ(d.refusal, "quota_exhausted");
      EXPECT_TRUE(d.receipt.empty());
    }
    EXPECT_FALSE(quota->OnFailure({cls}, At(0)).allowed);
  }
  // Successes cannot lift the pool above its capacity of 0.
  quota->OnSuccess(BudgetReceipt(), At(0));
  quota->OnSuccess(BudgetReceipt::Of(5), At(0));
  EXPECT_EQ(quota->Balance(At(0)), 0.0);
  EXPECT_FALSE(quota->OnFailure({kTransient}, At(0)).allowed);
}

TEST(CostQuotaTest, ThrottlingCostDefaultsToRetryCost) {
  CostQuotaOptions defaults;
  EXPECT_EQ(defaults.throttling_cost, 0);
  auto quota = MakeQuota({});
  BudgetDecision d = quota->OnFailure({kTransient, /*throttled=*/true}, At(0));
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.receipt.first(), 5);
  d = quota->OnFailure({kTransient, /*throttled=*/false}, At(0));
  EXPECT_EQ(d.receipt.first(), 5);
  d = quota->OnFailure({kAmbiguous, /*throttled=*/false}, At(0));
  EXPECT_EQ(d.receipt.first(), 10);
  EXPECT_EQ(quota->Balance(At(0)), 480.0);
}

TEST(CostQuotaTest, ThrottlingIsPricedApart) {
  CostQuotaOptions options{100, 7, 11, 1, 2};
  auto quota = MakeQuota(options);
  EXPECT_EQ(quota->OnFailure({kTransient, true}, At(0)).receipt.first(), 2);
  EXPECT_EQ(quota->OnFailure({kTransient, false}, At(0)).receipt.first(), 7);
  EXPECT_EQ(quota->OnFailure({kAmbiguous, false}, At(0)).receipt.first(), 11);
  // Throttling decides first, even for an ambiguous class.
  EXPECT_EQ(quota->OnFailure({kAmbiguous, true}, At(0)).receipt.first(), 2);
  // The two-argument overload never counts as throttling.
  EXPECT_EQ(quota->OnFailure({kTransient}, At(0)).receipt.first(), 7);
  EXPECT_EQ(quota->Balance(At(0)), 71.0);
}

TEST(CostQuotaTest, Aws2026Preset) {
  const CostQuotaOptions aws = CostQuotaOptions::Aws2026();
  EXPECT_EQ(aws.capacity, 500);
  EXPECT_EQ(aws.retry_cost, 14);
  EXPECT_EQ(aws.timeout_cost, 14);
  EXPECT_EQ(aws.success_increment, 1);
  EXPECT_EQ(aws.throttling_cost, 5);
  auto quota = MakeQuota(aws);
  BudgetDecision d = quota->OnFailure({kTransient, /*throttled=*/true}, At(0));
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.receipt.first(), 5);
  EXPECT_EQ(quota->Balance(At(0)), 495.0);
  d = quota->OnFailure({kTransient, /*throttled=*/false}, At(0));
  EXPECT_EQ(d.receipt.first(), 14);
  EXPECT_EQ(quota->Balance(At(0)), 481.0);
  d = quota->OnFailure({kAmbiguous, /*throttled=*/false}, At(0));
  EXPECT_EQ(d.receipt.first(), 14);
  EXPECT_EQ(quota->Balance(At(0)), 467.0);
  quota->OnSuccess(BudgetReceipt::Of(14), At(0));
  quota->OnSuccess(BudgetReceipt(), At(0));
  EXPECT_EQ(quota->Balance(At(0)), 482.0);

  // From full: 100 throttling retries, or 35 others (35 * 14 = 490, 10 left).
  auto throttled_only = MakeQuota(aws);
  int allowed = 0;
  for (int i = 0; i < 150; ++i) {
    allowed += throttled_only->OnFailure({kTransient, true}, At(0)).allowed;
  }
  EXPECT_EQ(allowed, 100);
  auto transient_only = MakeQuota(aws);
  allowed = 0;
  for (int i = 0; i < 150; ++i) {
    allowed += transient_only->OnFailure({kTransient, false}, At(0)).allowed;
  }
  EXPECT_EQ(allowed, 35);
  EXPECT_EQ(transient_only->Balance(At(0)), 10.0);
  // 10 left: a throttling retry (5) still fits, twice.
  EXPECT_TRUE(transient_only->OnFailure({kTransient, true}, At(0)).allowed);
  EXPECT_TRUE(transient_only->OnFailure({kTransient, true}, At(0)).allowed);
  EXPECT_FALSE(transient_only->OnFailure({kTransient, true}, At(0)).allowed);
}

TEST(CostQuotaTest, Aws2026BackoffPresets) {
  const BackoffParams throttling = Aws2026ThrottlingBackoff();
  EXPECT_EQ(throttling.base, Duration(seconds(1)));
  EXPECT_EQ(throttling.multiplier, 2.0);
  EXPECT_EQ(throttling.cap, Duration(seconds(20)));
  EXPECT_EQ(throttling.jitter, JitterKind::kFull);
  EXPECT_TRUE(ValidateBackoffParams(throttling).ok());
  const BackoffParams other = Aws2026Backoff();
  EXPECT_EQ(other.base, Duration(milliseconds(50)));
  EXPECT_EQ(other.multiplier, 2.0);
  EXPECT_EQ(other.cap, Duration(seconds(20)));
  EXPECT_EQ(other.jitter, JitterKind::kFull);
  EXPECT_TRUE(ValidateBackoffParams(other).ok());
  EXPECT_EQ(ComputeBackoff(throttling, 1, Duration{0}, 0.5), Duration(milliseconds(500)));
  EXPECT_EQ(ComputeBackoff(other, 1, Duration{0}, 0.5), Duration(milliseconds(25)));
  EXPECT_EQ(ComputeBackoff(other, 3, Duration{0}, 0.5), Duration(milliseconds(100)));
}

TEST(CostQuotaTest, RefundGivesBackTheCostCapped) {
  auto quota = MakeQuota({});
  BudgetDecision a = quota->OnFailure({kAmbiguous}, At(0));  // 490
  BudgetDecision b = quota->OnFailure({kTransient}, At(0));  // 485
  quota->Refund(b.receipt, At(0));
  EXPECT_EQ(quota->Balance(At(0)), 490.0);
  for (int i = 0; i < 7; ++i) quota->OnSuccess(BudgetReceipt(), At(0));  // 497
  quota->Refund(a.receipt, At(0));                                       // 507, capped
  EXPECT_EQ(quota->Balance(At(0)), 500.0);
}

TEST(CostQuotaTest, RefundOfARefusalDoesNothing) {
  auto quota = MakeQuota({7, 5, 10, 1});
  ASSERT_TRUE(quota->OnFailure({kTransient}, At(0)).allowed);  // 2
  BudgetDecision refused = quota->OnFailure({kTransient}, At(0));
  ASSERT_FALSE(refused.allowed);
  quota->Refund(refused.receipt, At(0));
  EXPECT_EQ(quota->Balance(At(0)), 2.0);
}

TEST(CostQuotaTest, ConcurrentUpdatesAreNotLost) {
  // Per iteration: -5, -10, +5 (refund), +1 (increment) = -9. Each thread's
  // running contribution is never positive, so the capacity is never reached,
  // and it is never exhausted: 10000000 - 8 * 100000 * 9 = 2800000.
  auto quota = MakeQuota({10000000, 5, 10, 1});
  std::atomic<int> refused{0};
  RunOnThreads([&] {
    for (int i = 0; i < 100000; ++i) {
      BudgetDecision a = quota->OnFailure({kTransient}, At(0));
      BudgetDecision b = quota->OnFailure({kAmbiguous}, At(0));
      if (!a.allowed || !b.allowed) refused.fetch_add(1);
      quota->OnSuccess(a.receipt, At(0));
      quota->OnSuccess(BudgetReceipt(), At(0));
    }
  });
  EXPECT_EQ(refused.load(), 0);
  EXPECT_EQ(quota->Balance(At(0)), 2800000.0);
}

TEST(CostQuotaTest, ConcurrentWithdrawalsStopExactlyAtZero) {
  auto quota = MakeQuota({});
  std::atomic<int> allowed{0};
  RunOnThreads([&] {
    for (int i = 0; i < 200; ++i) {
      if (quota->OnFailure({kTransient}, At(0)).allowed) allowed.fetch_add(1);
    }
  });
  EXPECT_EQ(allowed.load(), 100);  // 500 / 5
  EXPECT_EQ(quota->Balance(At(0)), 0.0);
}

TEST(TestingCountingBudgetTest, GrantsTheAllowedChargesNetOfRefunds) {
  testkit::CountingBudget b(/*allowed=*/2);
  const TimePoint t{};
  b.OnCallStart(t);
  const BudgetDecision first = b.OnFailure({AttemptClass::kRetryableTransient}, t);
  EXPECT_TRUE(first.allowed);
  EXPECT_TRUE(b.OnFailure({AttemptClass::kRetryableTransient}, t).allowed);
  const BudgetDecision refused = b.OnFailure({AttemptClass::kRetryableTransient}, t);
  EXPECT_FALSE(refused.allowed);
  EXPECT_EQ(refused.refusal, "counting_exhausted");
  b.Refund(refused.receipt, t);  // a refused charge has nothing to give back
  EXPECT_EQ(b.refunds(), 0);
  b.Refund(first.receipt, t);
  EXPECT_EQ(b.Balance(t), 1);
  EXPECT_TRUE(b.OnFailure({AttemptClass::kRetryableTransient}, t).allowed);
  EXPECT_EQ(b.call_starts(), 1);
  EXPECT_EQ(b.asks(), 4);
  EXPECT_EQ(b.charges(), 3);
  EXPECT_EQ(b.refunds(), 1);
}

}  // namespace
}  // namespace saferetry

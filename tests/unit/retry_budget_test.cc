// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/retry_budget.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

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

TEST(BudgetRefusalTest, Names) {
  EXPECT_EQ(BudgetRefusalName(BudgetRefusal::kNone), "none");
  EXPECT_EQ(BudgetRefusalName(BudgetRefusal::kThrottleAtOrBelowHalf), "throttle_at_or_below_half");
  EXPECT_EQ(BudgetRefusalName(BudgetRefusal::kRatioExhausted), "ratio_exhausted");
  EXPECT_EQ(BudgetRefusalName(BudgetRefusal::kQuotaExhausted), "quota_exhausted");
}

TEST(UnlimitedBudgetTest, AlwaysAllows) {
  UnlimitedBudget budget;
  for (int i = 0; i < 1000; ++i) {
    BudgetDecision d = budget.OnFailureTryRetry(kAmbiguous, At(0));
    ASSERT_TRUE(d.allowed);
    ASSERT_EQ(d.refusal, BudgetRefusal::kNone);
    ASSERT_EQ(d.cost, 0);
  }
}

// ---------------------------------------------------------------------------
// TokenThrottle

std::shared_ptr<TokenThrottle> MakeThrottle(double max_tokens, double token_ratio) {
  auto t = TokenThrottle::Create({max_tokens, token_ratio});
  EXPECT_TRUE(t.ok()) << t.status();
  return *t;
}

TEST(TokenThrottleTest, DefaultTraceStepByStep) {
  auto throttle = MakeThrottle(10, 0.1);
  RetryBudget& budget = *throttle;
  EXPECT_EQ(budget.Balance(At(0)), 10.0);
  // 9, 8, 7, 6 are strictly above half (5): allowed.
  for (double expected : {9.0, 8.0, 7.0, 6.0}) {
    BudgetDecision d = budget.OnFailureTryRetry(kTransient, At(0));
    EXPECT_TRUE(d.allowed) << expected;
    EXPECT_EQ(d.refusal, BudgetRefusal::kNone);
    EXPECT_EQ(d.cost, 0);
    EXPECT_EQ(budget.Balance(At(0)), expected);
  }
  // Exactly half after the charge: refused.
  BudgetDecision d = budget.OnFailureTryRetry(kAmbiguous, At(0));
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.refusal, BudgetRefusal::kThrottleAtOrBelowHalf);
  EXPECT_EQ(budget.Balance(At(0)), 5.0);
  for (double expected : {4.0, 3.0, 2.0, 1.0, 0.0, 0.0, 0.0}) {
    d = budget.OnFailureTryRetry(kTransient, At(0));
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.refusal, BudgetRefusal::kThrottleAtOrBelowHalf);
    EXPECT_EQ(budget.Balance(At(0)), expected);  // floor at 0
  }
  // Ten successes earn exactly one token.
  for (int i = 1; i <= 10; ++i) {
    budget.OnSuccess(0, At(0));
    EXPECT_EQ(budget.Balance(At(0)), i / 10.0) << i;
  }
}

TEST(TokenThrottleTest, ThresholdIsStrictlyAboveHalf) {
  auto throttle = MakeThrottle(10, 0.1);
  for (int i = 0; i < 5; ++i) (void)throttle->OnFailureTryRetry(kTransient, At(0));
  ASSERT_EQ(throttle->Balance(At(0)), 5.0);
  // 5.0 + 1.0 = 6.0, charged to 5.0: equal to half, refused.
  for (int i = 0; i < 10; ++i) throttle->OnSuccess(0, At(0));
  EXPECT_EQ(throttle->Balance(At(0)), 6.0);
  EXPECT_FALSE(throttle->OnFailureTryRetry(kTransient, At(0)).allowed);
  EXPECT_EQ(throttle->Balance(At(0)), 5.0);
  // 5.0 + 1.1 = 6.1, charged to 5.1: above half by one milli-token step, allowed.
  for (int i = 0; i < 11; ++i) throttle->OnSuccess(0, At(0));
  EXPECT_EQ(throttle->Balance(At(0)), 6.1);
  EXPECT_TRUE(throttle->OnFailureTryRetry(kTransient, At(0)).allowed);
  EXPECT_EQ(throttle->Balance(At(0)), 5.1);
}

TEST(TokenThrottleTest, RecoveryFromEmptyTakes61Successes) {
  for (int successes : {60, 61}) {
    auto throttle = MakeThrottle(10, 0.1);
    for (int i = 0; i < 20; ++i) (void)throttle->OnFailureTryRetry(kTransient, At(0));
    ASSERT_EQ(throttle->Balance(At(0)), 0.0);
    for (int i = 0; i < successes; ++i) throttle->OnSuccess(0, At(0));
    // 6.0 is charged to 5.0 (refused); 6.1 to 5.1 (allowed).
    EXPECT_EQ(throttle->OnFailureTryRetry(kTransient, At(0)).allowed, successes == 61);
  }
}

TEST(TokenThrottleTest, SuccessIsCappedAtMaxTokens) {
  auto throttle = MakeThrottle(10, 0.7);
  throttle->OnSuccess(0, At(0));
  EXPECT_EQ(throttle->Balance(At(0)), 10.0);
  (void)throttle->OnFailureTryRetry(kTransient, At(0));
  throttle->OnSuccess(0, At(0));
  EXPECT_EQ(throttle->Balance(At(0)), 9.7);
  throttle->OnSuccess(0, At(0));
  EXPECT_EQ(throttle->Balance(At(0)), 10.0);
  // retry_cost is irrelevant to the throttle.
  (void)throttle->OnFailureTryRetry(kTransient, At(0));
  throttle->OnSuccess(500, At(0));
  EXPECT_EQ(throttle->Balance(At(0)), 9.7);
}

TEST(TokenThrottleTest, TokenRatioKeepsThreeDecimals) {
  auto throttle = MakeThrottle(10, 0.1239);  // 0.123
  (void)throttle->OnFailureTryRetry(kTransient, At(0));
  throttle->OnSuccess(0, At(0));
  EXPECT_EQ(throttle->Balance(At(0)), 9.123);

  auto exact = MakeThrottle(10, 0.29);  // 0.29 * 1000 is 289.999... in binary
  (void)exact->OnFailureTryRetry(kTransient, At(0));
  exact->OnSuccess(0, At(0));
  EXPECT_EQ(exact->Balance(At(0)), 9.29);
}

TEST(TokenThrottleTest, OddMaxTokensHalfIsExact) {
  auto throttle = MakeThrottle(3, 1);  // half is 1.5
  EXPECT_TRUE(throttle->OnFailureTryRetry(kTransient, At(0)).allowed);   // 2 > 1.5
  EXPECT_FALSE(throttle->OnFailureTryRetry(kTransient, At(0)).allowed);  // 1 <= 1.5
  EXPECT_EQ(throttle->Balance(At(0)), 1.0);

  auto tiny = MakeThrottle(0.001, 0.001);  // one milli-token; half is 0.0005
  EXPECT_FALSE(tiny->OnFailureTryRetry(kTransient, At(0)).allowed);
  EXPECT_EQ(tiny->Balance(At(0)), 0.0);
}

TEST(TokenThrottleTest, ValidationNamesTheField) {
  EXPECT_TRUE(TokenThrottle::Create({}).ok());
  EXPECT_TRUE(TokenThrottle::Create({1000, 0.001}).ok());
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
    auto t = TokenThrottle::Create(c.options);
    ASSERT_FALSE(t.ok()) << c.message;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Message(t.status()), c.message);
  }
}

TEST(TokenThrottleTest, ConcurrentUpdatesAreNotLost) {
  // Drained to 500 first; then each thread pairs a failure (-1) with a success
  // (+1). The total stays within [492, 500], far from the floor and the cap,
  // so any lost update of either kind moves the final value off 500.
  auto throttle = MakeThrottle(1000, 1);
  for (int i = 0; i < 500; ++i) (void)throttle->OnFailureTryRetry(kTransient, At(0));
  ASSERT_EQ(throttle->Balance(At(0)), 500.0);
  std::atomic<int> allowed{0};
  RunOnThreads([&] {
    for (int i = 0; i < 100000; ++i) {
      // 499 after a charge is never above half: every decision is a refusal.
      if (throttle->OnFailureTryRetry(kTransient, At(0)).allowed) allowed.fetch_add(1);
      throttle->OnSuccess(0, At(0));
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
      if (throttle->OnFailureTryRetry(kTransient, At(0)).allowed) allowed.fetch_add(1);
    }
  });
  EXPECT_EQ(allowed.load(), 4);
  EXPECT_EQ(throttle->Balance(At(0)), 0.0);
}

// ---------------------------------------------------------------------------
// RatioBudget

std::shared_ptr<RatioBudget> MakeRatio(double percent, double min_per_second, Duration window) {
  auto b = RatioBudget::Create({percent, min_per_second, window});
  EXPECT_TRUE(b.ok()) << b.status();
  return *b;
}

TEST(RatioBudgetTest, DefaultsAreTenPercentPlusTenPerSecondOverTenSeconds) {
  RatioBudgetOptions options;
  EXPECT_EQ(options.percent, 0.10);
  EXPECT_EQ(options.min_per_second, 10);
  EXPECT_EQ(options.window, seconds(10));
  auto budget = RatioBudget::Create({});
  ASSERT_TRUE(budget.ok());
  RatioBudget& b = **budget;
  EXPECT_EQ(b.Balance(At(0)), 100.0);
  for (int i = 0; i < 10; ++i) b.OnCallStart(At(500));
  EXPECT_EQ(b.Balance(At(500)), 101.0);
  int allowed = 0;
  for (int i = 0; i < 105; ++i) allowed += b.OnFailureTryRetry(kTransient, At(900)).allowed;
  EXPECT_EQ(allowed, 101);
  EXPECT_EQ(b.Balance(At(900)), 0.0);
}

TEST(RatioBudgetTest, ExactTraceAcrossTime) {
  // percent 0.5, 1 retry/s, 3 s window: reserve 3.
  auto budget = MakeRatio(0.5, 1, seconds(3));
  RatioBudget& b = *budget;
  EXPECT_EQ(b.Balance(At(100'000)), 3.0);
  b.OnCallStart(At(100'200));
  b.OnCallStart(At(100'200));
  EXPECT_EQ(b.Balance(At(100'200)), 4.0);
  EXPECT_TRUE(b.OnFailureTryRetry(kTransient, At(100'500)).allowed);
  EXPECT_EQ(b.Balance(At(100'500)), 3.0);
  for (int i = 0; i < 3; ++i) {
    BudgetDecision d = b.OnFailureTryRetry(kAmbiguous, At(100'900));
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.cost, 0);
  }
  EXPECT_EQ(b.Balance(At(100'900)), 0.0);
  BudgetDecision refused = b.OnFailureTryRetry(kTransient, At(100'999));
  EXPECT_FALSE(refused.allowed);
  EXPECT_EQ(refused.refusal, BudgetRefusal::kRatioExhausted);
  EXPECT_EQ(b.Balance(At(100'999)), 0.0);  // a refusal withdraws nothing

  // Second 101: nothing has expired yet.
  EXPECT_EQ(b.Balance(At(101'000)), 0.0);
  b.OnCallStart(At(101'500));
  EXPECT_EQ(b.Balance(At(101'500)), 0.5);
  EXPECT_FALSE(b.OnFailureTryRetry(kTransient, At(101'500)).allowed);  // 0.5 < 1
  b.OnCallStart(At(101'600));
  EXPECT_TRUE(b.OnFailureTryRetry(kTransient, At(101'700)).allowed);  // exactly 1
  EXPECT_EQ(b.Balance(At(101'700)), 0.0);
  EXPECT_FALSE(b.OnFailureTryRetry(kTransient, At(102'999)).allowed);

  // 103.000: second 100 (2 deposits, 4 withdrawals) leaves the window.
  EXPECT_EQ(b.Balance(At(102'999)), 0.0);
  EXPECT_EQ(b.Balance(At(103'000)), 3.0);
  // 104.000: second 101 (2 deposits, 1 withdrawal) leaves too: back to reserve.
  EXPECT_EQ(b.Balance(At(103'999)), 3.0);
  EXPECT_EQ(b.Balance(At(104'000)), 3.0);
  // The decision path (which rotates slots) agrees with the query.
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(b.OnFailureTryRetry(kTransient, At(104'000)).allowed);
  EXPECT_FALSE(b.OnFailureTryRetry(kTransient, At(104'000)).allowed);
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
  EXPECT_FALSE(other->OnFailureTryRetry(kTransient, At(15'000)).allowed);
  auto third = MakeRatio(1.0, 0, seconds(3));
  third->OnCallStart(At(12'000));
  EXPECT_TRUE(third->OnFailureTryRetry(kTransient, At(14'999)).allowed);
}

TEST(RatioBudgetTest, TenPercentThresholdIsExact) {
  auto budget = MakeRatio(0.1, 0, seconds(10));
  for (int i = 0; i < 9; ++i) budget->OnCallStart(At(0));
  EXPECT_FALSE(budget->OnFailureTryRetry(kTransient, At(0)).allowed);  // 0.9
  budget->OnCallStart(At(0));
  EXPECT_TRUE(budget->OnFailureTryRetry(kTransient, At(0)).allowed);  // 1.0
  for (int i = 0; i < 30; ++i) budget->OnCallStart(At(0));
  int allowed = 0;
  for (int i = 0; i < 10; ++i) allowed += budget->OnFailureTryRetry(kTransient, At(0)).allowed;
  EXPECT_EQ(allowed, 3);  // 0.1 * 40 - 1 = 3
  EXPECT_EQ(budget->Balance(At(0)), 0.0);
}

TEST(RatioBudgetTest, WithdrawalsOutliveDepositsSoBalanceCanGoNegative) {
  auto budget = MakeRatio(1.0, 0, seconds(2));
  budget->OnCallStart(At(10'000));
  EXPECT_TRUE(budget->OnFailureTryRetry(kTransient, At(11'000)).allowed);
  EXPECT_EQ(budget->Balance(At(11'000)), 0.0);
  EXPECT_EQ(budget->Balance(At(12'000)), -1.0);
  budget->OnCallStart(At(12'000));
  EXPECT_FALSE(budget->OnFailureTryRetry(kTransient, At(12'000)).allowed);
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
  for (int i = 0; i < 11; ++i) EXPECT_TRUE(budget->OnFailureTryRetry(kTransient, At(4'500)).allowed);
  EXPECT_FALSE(budget->OnFailureTryRetry(kTransient, At(4'500)).allowed);
  EXPECT_EQ(budget->Balance(At(1'000'000)), 8.0);
  EXPECT_TRUE(budget->OnFailureTryRetry(kTransient, At(1'000'000)).allowed);
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
  EXPECT_TRUE(budget->OnFailureTryRetry(kTransient, At(0)).allowed);
  EXPECT_TRUE(budget->OnFailureTryRetry(kTransient, At(1'000)).allowed);
  EXPECT_FALSE(budget->OnFailureTryRetry(kTransient, At(1'999)).allowed);
  EXPECT_TRUE(budget->OnFailureTryRetry(kTransient, At(2'000)).allowed);
}

TEST(RatioBudgetTest, ValidationNamesTheField) {
  struct Case {
    RatioBudgetOptions options;
    std::string message;
  };
  const double nan = std::nan("");
  std::vector<Case> cases = {
      {{-0.1, 10, seconds(10)}, "percent: must be in [0, 1], got -0.1"},
      {{1.5, 10, seconds(10)}, "percent: must be in [0, 1], got 1.5"},
      {{nan, 10, seconds(10)}, "percent: must be in [0, 1], got nan"},
      {{0.1, -1, seconds(10)}, "min_per_second: must be >= 0 and finite, got -1"},
      {{0.1, nan, seconds(10)}, "min_per_second: must be >= 0 and finite, got nan"},
      {{0.1, 10, milliseconds(999)}, "window: must be >= 1s, got 999ms"},
      {{0.1, 10, Duration{0}}, "window: must be >= 1s, got 0"},
      {{0.1, 10, std::chrono::hours(25)}, "window: must be <= 24h, got 25h"},
  };
  for (const Case& c : cases) {
    auto b = RatioBudget::Create(c.options);
    ASSERT_FALSE(b.ok()) << c.message;
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Message(b.status()), c.message);
  }
  EXPECT_TRUE(RatioBudget::Create({0, 0, seconds(1)}).ok());
  EXPECT_TRUE(RatioBudget::Create({1, 0, std::chrono::hours(24)}).ok());
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
      if (!budget->OnFailureTryRetry(kTransient, At(5'000)).allowed) refused.fetch_add(1);
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
      if (budget->OnFailureTryRetry(kTransient, At(7'000 + i * 20)).allowed) allowed.fetch_add(1);
    }
  });
  EXPECT_EQ(allowed.load(), 100);
  EXPECT_EQ(budget->Balance(At(7'999)), 0.0);
}

// ---------------------------------------------------------------------------
// CostQuota

std::shared_ptr<CostQuota> MakeQuota(CostQuotaOptions options) {
  auto q = CostQuota::Create(options);
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
  BudgetDecision d = b.OnFailureTryRetry(kTransient, At(0));
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.refusal, BudgetRefusal::kNone);
  EXPECT_EQ(d.cost, 5);
  EXPECT_EQ(b.Balance(At(0)), 495.0);
  d = b.OnFailureTryRetry(kAmbiguous, At(0));
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.cost, 10);
  EXPECT_EQ(b.Balance(At(0)), 485.0);
  d = b.OnFailureTryRetry(AttemptClass::kRetryableNotDelivered, At(0));
  EXPECT_EQ(d.cost, 5);
  EXPECT_EQ(b.Balance(At(0)), 480.0);
  b.OnSuccess(10, At(0));  // a successful retry refunds its cost
  EXPECT_EQ(b.Balance(At(0)), 490.0);
  b.OnSuccess(0, At(0));  // a first-try success adds the increment
  EXPECT_EQ(b.Balance(At(0)), 491.0);
  b.OnSuccess(5, At(0));
  b.OnSuccess(5, At(0));
  EXPECT_EQ(b.Balance(At(0)), 500.0);  // capped (491 + 10 = 501)
  b.OnSuccess(0, At(0));
  EXPECT_EQ(b.Balance(At(0)), 500.0);
}

TEST(CostQuotaTest, RefusesBelowTheCostAndAllowsExactlyAtIt) {
  auto quota = MakeQuota({12, 5, 10, 1});
  EXPECT_TRUE(quota->OnFailureTryRetry(kTransient, At(0)).allowed);  // 7 left
  BudgetDecision d = quota->OnFailureTryRetry(kAmbiguous, At(0));   // 7 < 10
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.refusal, BudgetRefusal::kQuotaExhausted);
  EXPECT_EQ(d.cost, 0);
  EXPECT_EQ(quota->Balance(At(0)), 7.0);
  EXPECT_TRUE(quota->OnFailureTryRetry(kTransient, At(0)).allowed);  // 2 left
  EXPECT_FALSE(quota->OnFailureTryRetry(kTransient, At(0)).allowed);  // 2 < 5
  for (int i = 0; i < 3; ++i) quota->OnSuccess(0, At(0));
  EXPECT_EQ(quota->Balance(At(0)), 5.0);
  d = quota->OnFailureTryRetry(kTransient, At(0));  // 5 == 5: allowed
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.cost, 5);
  EXPECT_EQ(quota->Balance(At(0)), 0.0);
}

TEST(CostQuotaTest, ZeroIncrementAndHugeRefund) {
  auto quota = MakeQuota({100, 5, 10, 0});
  (void)quota->OnFailureTryRetry(kAmbiguous, At(0));
  quota->OnSuccess(0, At(0));
  EXPECT_EQ(quota->Balance(At(0)), 90.0);
  quota->OnSuccess(std::numeric_limits<std::int64_t>::max(), At(0));
  EXPECT_EQ(quota->Balance(At(0)), 100.0);
}

TEST(CostQuotaTest, ValidationNamesTheField) {
  struct Case {
    CostQuotaOptions options;
    std::string message;
  };
  std::vector<Case> cases = {
      {{0, 5, 10, 1}, "capacity: must be > 0, got 0"},
      {{500, 0, 10, 1}, "retry_cost: must be > 0, got 0"},
      {{500, 5, -1, 1}, "timeout_cost: must be > 0, got -1"},
      {{500, 5, 10, -1}, "success_increment: must be >= 0, got -1"},
  };
  for (const Case& c : cases) {
    auto q = CostQuota::Create(c.options);
    ASSERT_FALSE(q.ok()) << c.message;
    EXPECT_EQ(q.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Message(q.status()), c.message);
  }
}

TEST(CostQuotaTest, ConcurrentUpdatesAreNotLost) {
  // Per iteration: -5, -10, +5 (refund), +1 (increment) = -9. Each thread's
  // running contribution is never positive, so the capacity is never reached,
  // and it is never exhausted: 10000000 - 8 * 100000 * 9 = 2800000.
  auto quota = MakeQuota({10000000, 5, 10, 1});
  std::atomic<int> refused{0};
  RunOnThreads([&] {
    for (int i = 0; i < 100000; ++i) {
      BudgetDecision a = quota->OnFailureTryRetry(kTransient, At(0));
      BudgetDecision b = quota->OnFailureTryRetry(kAmbiguous, At(0));
      if (!a.allowed || !b.allowed) refused.fetch_add(1);
      quota->OnSuccess(a.cost, At(0));
      quota->OnSuccess(0, At(0));
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
      if (quota->OnFailureTryRetry(kTransient, At(0)).allowed) allowed.fetch_add(1);
    }
  });
  EXPECT_EQ(allowed.load(), 100);  // 500 / 5
  EXPECT_EQ(quota->Balance(At(0)), 0.0);
}

}  // namespace
}  // namespace saferetry

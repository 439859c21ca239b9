// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/cancellation.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "saferetry/clock.h"

namespace saferetry {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Steady = std::chrono::steady_clock;

TEST(CancellationTokenTest, HoldsNoWaitStateUntilSomeoneWaits) {
  // The flag and the pointer to the lazily made mutex and condition variable.
  EXPECT_LE(sizeof(CancellationToken), 16u);
}

TEST(CancellationTokenTest, StartsUncancelledAndStaysCancelled) {
  CancellationToken token;
  EXPECT_FALSE(token.IsCancelled());
  token.Cancel();
  EXPECT_TRUE(token.IsCancelled());
  token.Cancel();  // once is enough; twice is harmless
  EXPECT_TRUE(token.IsCancelled());
}

TEST(CancellationTokenTest, ACancelledTokenDoesNotWait) {
  CancellationToken token;
  token.Cancel();
  const auto t0 = Steady::now();
  EXPECT_TRUE(token.WaitFor(std::chrono::hours(1)));
  EXPECT_LT(Steady::now() - t0, seconds(5));
}

TEST(CancellationTokenTest, WaitForRunsItsTimeWhenNobodyCancels) {
  CancellationToken token;
  const auto t0 = Steady::now();
  EXPECT_FALSE(token.WaitFor(milliseconds(30)));
  EXPECT_GE(Steady::now() - t0, milliseconds(30));
  EXPECT_FALSE(token.IsCancelled());
  // The wait state made by that wait serves the next one.
  EXPECT_FALSE(token.WaitFor(milliseconds(1)));
}

TEST(CancellationTokenTest, SystemClockSleepEndsAtTheCancel) {
  CancellationToken token;
  std::thread canceller([&] {
    std::this_thread::sleep_for(milliseconds(20));
    token.Cancel();
  });
  const auto t0 = Steady::now();
  SystemClock()->SleepFor(std::chrono::hours(1), token);
  EXPECT_LT(Steady::now() - t0, seconds(30));
  canceller.join();
  EXPECT_TRUE(token.IsCancelled());
}

// Every waiter wakes at the cancel, however the first waits and the cancel
// interleave: a lost wake-up would hold a waiter for its whole hour.
TEST(CancellationTokenConcurrentTest, ConcurrentWaitersAndCancelNeverLoseTheWakeUp) {
  constexpr int kRounds = 200;
  constexpr int kWaiters = 3;
  const auto t0 = Steady::now();
  for (int round = 0; round < kRounds; ++round) {
    CancellationToken token;
    std::atomic<int> woken{0};
    std::vector<std::thread> waiters;
    for (int i = 0; i < kWaiters; ++i) {
      waiters.emplace_back([&] {
        if (token.WaitFor(std::chrono::hours(1))) woken.fetch_add(1);
      });
    }
    // Sometimes before the waiters have made the wait state, sometimes after.
    if (round % 2 == 1) std::this_thread::yield();
    token.Cancel();
    for (std::thread& t : waiters) t.join();
    ASSERT_EQ(woken.load(), kWaiters) << "round " << round;
  }
  EXPECT_LT(Steady::now() - t0, seconds(60));
}

}  // namespace
}  // namespace saferetry

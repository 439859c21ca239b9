// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// A clock for tests: time moves only when slept on or advanced, and every
// sleep is recorded, so retry tests run in zero wall time and assert the
// exact sequence of waits.
//
// @code
//   auto clock = std::make_shared<saferetry::testing::FakeClock>();
//   ... run a call with options.clock = clock ...
//   EXPECT_THAT(clock->sleeps(), ElementsAre(100ms, 200ms));
// @endcode

#ifndef SAFERETRY_TESTING_FAKE_CLOCK_H_
#define SAFERETRY_TESTING_FAKE_CLOCK_H_

#include <mutex>
#include <vector>

#include "saferetry/clock.h"

namespace saferetry {
namespace testing {

/// Thread-safe fake clock. The steady and wall clocks move together.
class FakeClock final : public Clock {
 public:
  /// Starts at steady time 1000 s and wall time 2026-01-01T00:00:00Z.
  FakeClock();
  FakeClock(TimePoint steady_start, WallTime wall_start);

  TimePoint Now() override;
  WallTime WallNow() override;
  /// Records `d` and advances both clocks by it (nothing for d <= 0, but
  /// the sleep is still recorded).
  void SleepFor(Duration d) override;
  /// Same as `SleepFor(d)`, unless the token is already cancelled (then it
  /// records nothing and returns).
  void SleepFor(Duration d, const CancellationToken& token) override;

  /// Moves both clocks forward without recording a sleep.
  void Advance(Duration d);
  /// Sets the wall clock (e.g. to test skew against a `Date` header).
  void SetWallNow(WallTime wall);
  /// Every sleep, in order.
  std::vector<Duration> sleeps() const;
  /// Sum of all sleeps.
  Duration total_slept() const;

 private:
  mutable std::mutex mu_;
  TimePoint steady_;
  WallTime wall_;
  std::vector<Duration> sleeps_;
};

}  // namespace testing
}  // namespace saferetry

#endif  // SAFERETRY_TESTING_FAKE_CLOCK_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// A clock for tests: time moves only when slept on or advanced, and every
// sleep is recorded, so retry tests run in zero wall time and assert the
// exact sequence of waits.
//
// @code
//   auto clock = std::make_shared<saferetry::testkit::FakeClock>();
//   ... run a call with options.clock = clock ...
//   EXPECT_THAT(clock->sleeps(), ElementsAre(100ms, 200ms));
// @endcode

#ifndef SAFERETRY_TESTING_FAKE_CLOCK_H_
#define SAFERETRY_TESTING_FAKE_CLOCK_H_

#include <cstdint>
#include <mutex>
#include <vector>

#include "saferetry/clock.h"

namespace saferetry {
namespace testkit {

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

  /// Makes the clock wake up late, as real ones do: every later sleep of
  /// d > 0 advances by d plus a lateness drawn uniformly from [0, `max`]
  /// (a fixed sequence for a given `seed`), and `FakeEventLoop` fires each
  /// timer that late. `sleeps()` still records the durations asked for.
  /// `max` = 0 (the default) turns it off: exact time.
  void SetWakeLateness(Duration max, std::uint64_t seed = 1);
  /// The lateness of the next wake-up (0 when off); advances the sequence.
  Duration NextWakeLateness();

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
  Duration max_lateness_{0};
  std::uint64_t lateness_state_ = 0;
};

}  // namespace testkit
}  // namespace saferetry

#endif  // SAFERETRY_TESTING_FAKE_CLOCK_H_

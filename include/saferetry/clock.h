// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The time seam. saferetry never reads a clock or sleeps on its own: every
// component takes a `Clock`, so tests substitute `testkit::FakeClock` and run
// retry loops in zero wall time with exact, assertable sleeps.
//
// Two time lines are kept apart on purpose:
//   - the steady (monotonic) clock measures intervals and deadlines;
//   - the wall clock is used only to interpret HTTP dates (`Retry-After`,
//     `Date`) and for logs.

#ifndef SAFERETRY_CLOCK_H_
#define SAFERETRY_CLOCK_H_

#include <chrono>
#include <memory>

namespace saferetry {

class CancellationToken;

/// A point on the steady clock. Deadlines and attempt start/end use it.
using TimePoint = std::chrono::steady_clock::time_point;
/// A point on the wall clock. Only HTTP dates and logs use it.
using WallTime = std::chrono::system_clock::time_point;
/// The duration type used throughout the API.
using Duration = std::chrono::nanoseconds;

/// Source of time and of blocking waits.
///
/// Implementations must be thread-safe: one clock is shared by every call of a
/// client.
class Clock {
 public:
  virtual ~Clock() = default;
  /// The current point on the steady clock.
  virtual TimePoint Now() = 0;
  /// The current wall-clock time, for HTTP dates only.
  virtual WallTime WallNow() = 0;
  /// Blocks the calling thread for `d` (no-op for `d <= 0`). Only the blocking
  /// driver calls it.
  virtual void SleepFor(Duration d) = 0;
  /// Like `SleepFor` but returns early when `token` is cancelled. The default
  /// checks the token, sleeps the whole `d`, and leaves the check after the
  /// wait to the caller; `SystemClock()` wakes up at once.
  virtual void SleepFor(Duration d, const CancellationToken& token);
};

/// The real clock: `std::chrono::steady_clock`, `system_clock` and
/// `std::this_thread::sleep_for`. Thread-safe, shared, never null.
std::shared_ptr<Clock> SystemClock();

}  // namespace saferetry

#endif  // SAFERETRY_CLOCK_H_

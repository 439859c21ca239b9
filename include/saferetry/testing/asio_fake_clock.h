// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Exact fake time for the Asio adapter (header-only; link saferetry::asio
// and saferetry::testing): a chrono clock that reads a `FakeClock`, wait
// traits that never let Asio's reactor sleep, the adapter on them, and a
// driver that runs an `io_context` with `poll()` and moves the fake clock to
// the next timer when nothing else is ready, the way `FakeEventLoop` does.
// A call with seconds of backoff runs in zero wall time, with exact times.
//
// @code
//   auto clock = std::make_shared<FakeClock>();
//   FakeAsioClock::Use(clock);
//   asio::io_context io;
//   auto loop = std::make_shared<FakeAsioEventLoop>(io);
//   ... AsyncClient with options.loop = loop, options.client.clock = clock ...
//   auto future = client->Execute(request, call);
//   RunFakeAsio(io, *loop, *clock, [&] { return IsReady(future); });
// @endcode
//
// One fake clock at a time per process (`Use` sets it for every
// `FakeAsioClock`); not for a context run by several threads.

#ifndef SAFERETRY_TESTING_ASIO_FAKE_CLOCK_H_
#define SAFERETRY_TESTING_ASIO_FAKE_CLOCK_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <utility>

#include "saferetry/asio_event_loop.h"
#include "saferetry/testing/fake_clock.h"

namespace saferetry {
namespace testkit {

/// A chrono clock (the type Asio timers are parameterised on) over the
/// `FakeClock` set by `Use`; its time points are steady-clock time points,
/// the same as `FakeClock::Now()`.
struct FakeAsioClock {
  using duration = std::chrono::steady_clock::duration;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::steady_clock::time_point;
  static constexpr bool is_steady = true;

  /// The clock every `FakeAsioClock` reads from now on; null stops it (then
  /// `now()` is the epoch).
  static void Use(std::shared_ptr<FakeClock> clock) {
    std::atomic_store(&current(), std::move(clock));
  }
  static time_point now() {
    std::shared_ptr<FakeClock> c = std::atomic_load(&current());
    return c == nullptr ? time_point() : c->Now();
  }

 private:
  static std::shared_ptr<FakeClock>& current() {
    static std::shared_ptr<FakeClock> clock;
    return clock;
  }
};

/// Wait traits under which Asio's reactor never sleeps on a timer: it checks
/// the timers on every pass and finds them due by `FakeAsioClock::now()`.
struct FakeAsioWaitTraits {
  static FakeAsioClock::duration to_wait_duration(const FakeAsioClock::duration&) {
    return FakeAsioClock::duration::zero();
  }
  static FakeAsioClock::duration to_wait_duration(const FakeAsioClock::time_point&) {
    return FakeAsioClock::duration::zero();
  }
};

/// The Asio adapter on fake time.
using FakeAsioEventLoop = BasicAsioEventLoop<FakeAsioClock, FakeAsioWaitTraits>;

/// Runs `io` on the calling thread with `poll()` until `done()` returns
/// true or nothing is left to run; whenever no handler is ready, advances
/// `clock` to `loop`'s next timer (`FakeClock::Advance`, plus the clock's
/// wake-up lateness, as `FakeEventLoop` does). Stops after `max_turns`
/// advances. Returns the handlers run.
template <typename Done>
std::size_t RunFakeAsio(asio_compat::net::io_context& io, const FakeAsioEventLoop& loop,
                        FakeClock& clock, Done done, int max_turns = 1000000) {
  std::size_t ran = 0;
  for (int turn = 0; turn < max_turns; ++turn) {
    io.restart();
    ran += io.poll();
    if (done()) break;
    const auto due = loop.next_timer_due();
    if (!due.has_value()) break;
    const TimePoint now = clock.Now();
    if (*due > now) clock.Advance(*due - now + clock.NextWakeLateness());
  }
  return ran;
}

}  // namespace testkit
}  // namespace saferetry

#endif  // SAFERETRY_TESTING_ASIO_FAKE_CLOCK_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The only place in the library that reads the real clocks or sleeps.

#include "saferetry/clock.h"

#include <thread>

#include "saferetry/cancellation.h"

namespace saferetry {

void Clock::SleepFor(Duration d, const CancellationToken& token) {
  if (token.IsCancelled()) return;
  SleepFor(d);
}

namespace {

class RealClock final : public Clock {
 public:
  TimePoint Now() override { return std::chrono::steady_clock::now(); }
  WallTime WallNow() override { return std::chrono::system_clock::now(); }
  void SleepFor(Duration d) override {
    if (d > Duration::zero()) std::this_thread::sleep_for(d);
  }
  void SleepFor(Duration d, const CancellationToken& token) override {
    if (d > Duration::zero()) token.WaitFor(d);
  }
};

}  // namespace

std::shared_ptr<Clock> SystemClock() {
  static const auto* const kClock = new std::shared_ptr<Clock>(std::make_shared<RealClock>());
  return *kClock;
}

}  // namespace saferetry

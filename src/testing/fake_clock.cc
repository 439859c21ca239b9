// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/testing/fake_clock.h"

#include <algorithm>

#include "saferetry/cancellation.h"

namespace saferetry {
namespace testkit {

FakeClock::FakeClock()
    : FakeClock(TimePoint(std::chrono::seconds(1000)),
                // 2026-01-01T00:00:00Z
                WallTime(std::chrono::seconds(1767225600))) {}

FakeClock::FakeClock(TimePoint steady_start, WallTime wall_start)
    : steady_(steady_start), wall_(wall_start) {}

TimePoint FakeClock::Now() {
  std::lock_guard<std::mutex> lock(mu_);
  return steady_;
}

WallTime FakeClock::WallNow() {
  std::lock_guard<std::mutex> lock(mu_);
  return wall_;
}

void FakeClock::SetWakeLateness(Duration max, std::uint64_t seed) {
  std::lock_guard<std::mutex> lock(mu_);
  max_lateness_ = std::max(Duration::zero(), max);
  lateness_state_ = seed;
}

Duration FakeClock::NextWakeLateness() {
  std::lock_guard<std::mutex> lock(mu_);
  if (max_lateness_ <= Duration::zero()) return Duration::zero();
  // splitmix64: a fixed, well-spread sequence per seed.
  std::uint64_t z = (lateness_state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const auto span = static_cast<std::uint64_t>(max_lateness_.count()) + 1;
  return Duration(static_cast<Duration::rep>(z % span));
}

void FakeClock::SleepFor(Duration d) {
  const Duration late = d > Duration::zero() ? NextWakeLateness() : Duration::zero();
  std::lock_guard<std::mutex> lock(mu_);
  sleeps_.push_back(d);
  if (d > Duration::zero()) {
    steady_ += d + late;
    wall_ += std::chrono::duration_cast<WallTime::duration>(d + late);
  }
}

void FakeClock::SleepFor(Duration d, const CancellationToken& token) {
  if (token.IsCancelled()) return;
  SleepFor(d);
}

void FakeClock::Advance(Duration d) {
  std::lock_guard<std::mutex> lock(mu_);
  if (d <= Duration::zero()) return;
  steady_ += d;
  wall_ += std::chrono::duration_cast<WallTime::duration>(d);
}

void FakeClock::SetWallNow(WallTime wall) {
  std::lock_guard<std::mutex> lock(mu_);
  wall_ = wall;
}

std::vector<Duration> FakeClock::sleeps() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sleeps_;
}

Duration FakeClock::total_slept() const {
  std::lock_guard<std::mutex> lock(mu_);
  Duration total{0};
  for (Duration d : sleeps_) {
    if (d > Duration::zero()) total += d;
  }
  return total;
}

}  // namespace testkit
}  // namespace saferetry

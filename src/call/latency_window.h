// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Not API: the recent attempt latencies a hedging driver keeps, for a hedge
// delay at the observed p95 (`HedgingOptions::delay_from_p95`). Shared by
// the event-loop driver (async_client.cc) and the policy simulator
// (tools/sim/), so both compute the hedge delay the same way.
#ifndef SAFERETRY_SRC_CALL_LATENCY_WINDOW_H_
#define SAFERETRY_SRC_CALL_LATENCY_WINDOW_H_

#include <algorithm>
#include <array>
#include <cstddef>
#include <optional>

#include "saferetry/clock.h"

namespace saferetry {
namespace internal {

/// The latencies of the last `kSize` answered attempts (send to answer), in
/// a ring, and their p95 by nearest rank. Not thread-safe: one driver
/// thread (the loop thread, or the simulator) feeds and reads it.
class LatencyWindow {
 public:
  /// Samples kept; older ones are overwritten.
  static constexpr std::size_t kSize = 512;
  /// Fewer samples than this give no p95.
  static constexpr std::size_t kMinSamples = 20;

  /// Records one answered attempt's latency, or, for a copy cancelled
  /// because another copy of its call answered first, the time it had been
  /// waiting (a lower bound of its latency). Leaving those out would keep
  /// exactly the slow attempts that hedging cuts short out of the window: the
  /// p95 would drift down into the fast answers and hedges be sent for more
  /// than 5 % of calls. A lower bound ranks correctly whenever it is above
  /// the p95, which a hedged-over copy's wait is (it waited at least the
  /// hedge delay, and then for the winning copy).
  void Add(Duration d) {
    samples_[next_ % kSize] = d;
    ++next_;
    stale_ = true;
  }

  /// Samples held now: min(added, kSize).
  std::size_t size() const { return std::min(next_, kSize); }

  /// The nearest-rank p95 of the samples held (the ceil(0.95 n)-th smallest
  /// of n), or nullopt with fewer than `kMinSamples`. Computed when asked
  /// after a change, then cached.
  std::optional<Duration> P95() {
    const std::size_t n = size();
    if (n < kMinSamples) return std::nullopt;
    if (stale_) {
      std::array<Duration, kSize> copy = samples_;
      const std::size_t k = (n * 95 + 99) / 100 - 1;  // nearest rank, 0-based
      std::nth_element(copy.begin(), copy.begin() + static_cast<std::ptrdiff_t>(k),
                       copy.begin() + static_cast<std::ptrdiff_t>(n));
      p95_ = copy[k];
      stale_ = false;
    }
    return p95_;
  }

 private:
  std::array<Duration, kSize> samples_{};
  std::size_t next_ = 0;
  bool stale_ = false;
  Duration p95_{0};
};

}  // namespace internal
}  // namespace saferetry

#endif  // SAFERETRY_SRC_CALL_LATENCY_WINDOW_H_

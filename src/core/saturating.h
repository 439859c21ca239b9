// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Saturating arithmetic on raw duration counts. Callers pass TimePoint::max()
// and Duration::max() on purpose (an infinite deadline, "no cap"), and dates
// saturate to the clock's limits, so sums and differences clamp instead of
// overflowing.

#ifndef SAFERETRY_SRC_SATURATING_H_
#define SAFERETRY_SRC_SATURATING_H_

#include <cstdint>
#include <limits>

namespace saferetry {
namespace internal {

inline std::int64_t SaturatingAdd(std::int64_t a, std::int64_t b) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  if (b > 0 && a > kMax - b) return kMax;
  if (b < 0 && a < kMin - b) return kMin;
  return a + b;
}

inline std::int64_t SaturatingSub(std::int64_t a, std::int64_t b) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  if (b < 0 && a > kMax + b) return kMax;
  if (b > 0 && a < kMin + b) return kMin;
  return a - b;
}

}  // namespace internal
}  // namespace saferetry

#endif  // SAFERETRY_SRC_SATURATING_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The randomness seam. Jitter and idempotency keys draw from a `Random`, so a
// test can script the samples (`testkit::ScriptedRandom`) and assert exact
// delays and keys.

#ifndef SAFERETRY_RANDOM_H_
#define SAFERETRY_RANDOM_H_

#include <cstdint>
#include <memory>

namespace saferetry {

/// Source of uniform samples. Implementations must be thread-safe.
class Random {
 public:
  virtual ~Random() = default;
  /// A uniform sample in [0, 1).
  virtual double Uniform() = 0;
  /// 64 uniformly distributed bits (idempotency keys use two of these).
  virtual std::uint64_t Bits64() = 0;
};

/// A thread-safe generator seeded from the operating system's entropy
/// (`absl::BitGen` behind a mutex). Suitable for jitter; not for secrets (idempotency keys
/// come from the operating system, `MintIdempotencyKey`).
std::shared_ptr<Random> DefaultRandom();

}  // namespace saferetry

#endif  // SAFERETRY_RANDOM_H_

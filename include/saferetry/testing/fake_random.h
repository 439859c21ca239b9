// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// A scripted random source: chosen uniform samples (0 gives a jitter's lower
// bound, just below 1 its upper bound) and reproducible 64-bit draws.

#ifndef SAFERETRY_TESTING_FAKE_RANDOM_H_
#define SAFERETRY_TESTING_FAKE_RANDOM_H_

#include <cstdint>
#include <mutex>
#include <vector>

#include "saferetry/random.h"

namespace saferetry {
namespace testkit {

/// The largest double below 1.0, for "just below 1" samples.
inline constexpr double kJustBelowOne = 0.99999999999999989;

/// Thread-safe. `Uniform()` returns the scripted samples in order and then
/// repeats the last one (0.5 when none were given). `Bits64()` is a
/// SplitMix64 sequence from `seed`, so keys are reproducible.
class ScriptedRandom final : public Random {
 public:
  explicit ScriptedRandom(std::vector<double> uniforms = {}, std::uint64_t seed = 1);
  double Uniform() override;
  std::uint64_t Bits64() override;
  /// How many uniform samples were drawn.
  int uniform_draws() const;

 private:
  mutable std::mutex mu_;
  std::vector<double> uniforms_;
  std::size_t next_ = 0;
  int draws_ = 0;
  std::uint64_t state_;
};

}  // namespace testkit
}  // namespace saferetry

#endif  // SAFERETRY_TESTING_FAKE_RANDOM_H_

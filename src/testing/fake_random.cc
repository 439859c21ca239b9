// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/testing/fake_random.h"

namespace saferetry {
namespace testkit {

ScriptedRandom::ScriptedRandom(std::vector<double> uniforms, std::uint64_t seed)
    : uniforms_(std::move(uniforms)), state_(seed) {}

double ScriptedRandom::Uniform() {
  std::lock_guard<std::mutex> lock(mu_);
  ++draws_;
  if (uniforms_.empty()) return 0.5;
  const double u = uniforms_[next_ < uniforms_.size() ? next_ : uniforms_.size() - 1];
  if (next_ < uniforms_.size()) ++next_;
  return u;
}

std::uint64_t ScriptedRandom::Bits64() {
  std::lock_guard<std::mutex> lock(mu_);
  // SplitMix64 (Steele, Lea, Flood 2014): reproducible and well mixed.
  std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

int ScriptedRandom::uniform_draws() const {
  std::lock_guard<std::mutex> lock(mu_);
  return draws_;
}

}  // namespace testkit
}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/random.h"

#include <mutex>

#include "absl/random/random.h"

namespace saferetry {
namespace {

class BitGenRandom final : public Random {
 public:
  double Uniform() override {
    std::lock_guard<std::mutex> lock(mu_);
    return absl::Uniform<double>(gen_, 0.0, 1.0);
  }
  std::uint64_t Bits64() override {
    std::lock_guard<std::mutex> lock(mu_);
    return absl::Uniform<std::uint64_t>(gen_);
  }

 private:
  std::mutex mu_;
  absl::BitGen gen_;
};

}  // namespace

std::shared_ptr<Random> DefaultRandom() { return std::make_shared<BitGenRandom>(); }

}  // namespace saferetry

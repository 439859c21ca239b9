// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "orders_service/service_clock.h"

namespace saferetry {
namespace example {

namespace {

class RealClock : public ServiceClock {
 public:
  EpochMillis NowMillis() override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

}  // namespace

std::shared_ptr<ServiceClock> RealServiceClock() {
  static const auto* const clock = new std::shared_ptr<ServiceClock>(std::make_shared<RealClock>());
  return *clock;
}

}  // namespace example
}  // namespace saferetry

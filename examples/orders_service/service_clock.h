// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The orders service's clock. Leases, retention and record timestamps are
// persisted, so they live on the wall clock (milliseconds since the Unix
// epoch). The service uses the real clock; tests inject a `ManualClock` so
// lease expiry and retention are exact and take no wall time.

#ifndef SAFERETRY_EXAMPLES_ORDERS_SERVICE_SERVICE_CLOCK_H_
#define SAFERETRY_EXAMPLES_ORDERS_SERVICE_SERVICE_CLOCK_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>

namespace saferetry {
namespace example {

/// Wall-clock milliseconds since the Unix epoch, as stored in the database.
using EpochMillis = std::int64_t;

/// Source of wall time for the service. Thread-safe.
class ServiceClock {
 public:
  virtual ~ServiceClock() = default;
  virtual EpochMillis NowMillis() = 0;
};

/// `std::chrono::system_clock`. Shared, never null.
std::shared_ptr<ServiceClock> RealServiceClock();

/// A clock that moves only when told to. Thread-safe.
class ManualClock : public ServiceClock {
 public:
  explicit ManualClock(EpochMillis start = 1'700'000'000'000) : now_(start) {}
  EpochMillis NowMillis() override {
    std::lock_guard<std::mutex> lock(mu_);
    return now_;
  }
  void Advance(std::chrono::milliseconds d) {
    std::lock_guard<std::mutex> lock(mu_);
    now_ += d.count();
  }
  void Set(EpochMillis t) {
    std::lock_guard<std::mutex> lock(mu_);
    now_ = t;
  }

 private:
  std::mutex mu_;
  EpochMillis now_;
};

}  // namespace example
}  // namespace saferetry

#endif  // SAFERETRY_EXAMPLES_ORDERS_SERVICE_SERVICE_CLOCK_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/cancellation.h"

namespace saferetry {

void CancellationToken::Cancel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

bool CancellationToken::WaitFor(Duration d) const {
  std::unique_lock<std::mutex> lock(mu_);
  // wait_for uses the steady clock; this is the real-time path of
  // SystemClock() only.
  return cv_.wait_for(lock, d, [this] { return cancelled_.load(std::memory_order_acquire); });
}

}  // namespace saferetry

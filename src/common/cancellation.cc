// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/cancellation.h"

#include <condition_variable>
#include <memory>
#include <mutex>

namespace saferetry {

struct CancellationToken::Waiters {
  std::mutex mu;
  std::condition_variable cv;
};

CancellationToken::~CancellationToken() { delete waiters_.load(std::memory_order_acquire); }

CancellationToken::Waiters& CancellationToken::WaitersOf() const {
  Waiters* w = waiters_.load(std::memory_order_seq_cst);
  if (w != nullptr) return *w;
  auto fresh = std::make_unique<Waiters>();
  // Another first waiter may have installed its own meanwhile: one wins.
  if (waiters_.compare_exchange_strong(w, fresh.get(), std::memory_order_seq_cst)) {
    return *fresh.release();
  }
  return *w;
}

void CancellationToken::Cancel() {
  // The flag first, then the waiters (both sequentially consistent, as in
  // WaitFor in the other order): either this sees the waiters a WaitFor
  // installed and wakes them, or that WaitFor sees the flag before it waits.
  cancelled_.store(true, std::memory_order_seq_cst);
  Waiters* w = waiters_.load(std::memory_order_seq_cst);
  if (w == nullptr) return;
  {
    // Taken and released so that a waiter between its check of the flag
    // and its wait cannot miss the notification.
    std::lock_guard<std::mutex> lock(w->mu);
  }
  w->cv.notify_all();
}

bool CancellationToken::WaitFor(Duration d) const {
  Waiters& w = WaitersOf();
  std::unique_lock<std::mutex> lock(w.mu);
  // wait_for uses the steady clock; this is the real-time path of
  // SystemClock() only.
  return w.cv.wait_for(lock, d, [this] { return cancelled_.load(std::memory_order_seq_cst); });
}

}  // namespace saferetry

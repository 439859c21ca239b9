// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Cooperative cancellation. Cancelling stops further attempts and waits; an
// attempt already in flight is aborted by transports that support it (the
// libcurl transport does). A call cancelled after a request may have been
// delivered ends `kUnknown`, never `kFailed`.

#ifndef SAFERETRY_CANCELLATION_H_
#define SAFERETRY_CANCELLATION_H_

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "saferetry/clock.h"

namespace saferetry {

/// A one-shot, thread-safe cancellation flag. Cancel() may be called from any
/// thread (not from a signal handler: use a self-pipe or `std::atomic` there
/// and cancel from a thread).
class CancellationToken {
 public:
  void Cancel();
  bool IsCancelled() const { return cancelled_.load(std::memory_order_acquire); }
  /// Blocks on the real steady clock for up to `d` or until cancelled.
  /// Returns true if cancelled. Used by `SystemClock()`'s cancellable sleep.
  bool WaitFor(Duration d) const;

 private:
  std::atomic<bool> cancelled_{false};
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
};

}  // namespace saferetry

#endif  // SAFERETRY_CANCELLATION_H_

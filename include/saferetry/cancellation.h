// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Cooperative cancellation. Cancelling stops further attempts and waits; an
// attempt already in flight is aborted by transports that support it (the
// libcurl transport does). A call cancelled after a request may have been
// delivered ends `kUnknown`, never `kFailed`.

#ifndef SAFERETRY_CANCELLATION_H_
#define SAFERETRY_CANCELLATION_H_

#include <atomic>

#include "saferetry/clock.h"

namespace saferetry {

/// A one-shot, thread-safe cancellation flag. Cancel() may be called from any
/// thread (not from a signal handler: use a self-pipe or `std::atomic` there
/// and cancel from a thread).
///
/// 16 bytes: the mutex and condition variable that `WaitFor` blocks on are
/// allocated by the first `WaitFor`, so a token that is only set and read
/// (an `AsyncClient` call's, a blocking call that never waits with it)
/// holds none. Not copyable or movable.
class CancellationToken {
 public:
  CancellationToken() = default;
  CancellationToken(const CancellationToken&) = delete;
  CancellationToken& operator=(const CancellationToken&) = delete;
  ~CancellationToken();

  void Cancel();
  bool IsCancelled() const { return cancelled_.load(std::memory_order_acquire); }
  /// Blocks on the real steady clock for up to `d` or until cancelled.
  /// Returns true if cancelled. Used by `SystemClock()`'s cancellable sleep.
  bool WaitFor(Duration d) const;

 private:
  struct Waiters;
  Waiters& WaitersOf() const;  // created on first use

  std::atomic<bool> cancelled_{false};
  mutable std::atomic<Waiters*> waiters_{nullptr};
};

}  // namespace saferetry

#endif  // SAFERETRY_CANCELLATION_H_

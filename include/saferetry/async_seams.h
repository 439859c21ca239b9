// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The asynchronous seams, and nothing else: an event loop (timers, "run
// this on the loop", file-descriptor readiness) and a transport that starts
// one attempt and reports its result through a callback on that loop, with
// no thread blocked while the attempt runs. What implements them (a
// service's own loop, saferetry/asio_event_loop.h, the libcurl multi
// transport) includes this header; the built-in epoll loop and the drivers
// are in saferetry/async_transport.h and saferetry/async_client.h.

#ifndef SAFERETRY_ASYNC_SEAMS_H_
#define SAFERETRY_ASYNC_SEAMS_H_

#include <cstdint>
#include <functional>
#include <optional>

#include "absl/status/status.h"
#include "saferetry/clock.h"
#include "saferetry/request.h"
#include "saferetry/transport.h"

namespace saferetry {

/// One thread's event loop, as saferetry uses it. Except for `Post`, every
/// function is called on the loop thread only (the thread running the
/// loop), and every callback runs there.
class EventLoop {
 public:
  using Task = std::function<void()>;
  /// Identifies a timer; 0 is never a valid id.
  using TimerId = std::uint64_t;
  /// Readiness bits for `WatchFd`.
  enum FdEvents : int { kReadable = 1, kWritable = 2, kError = 4 };
  /// Called with the `FdEvents` bits that are ready.
  using FdCallback = std::function<void(int events)>;

  virtual ~EventLoop() = default;

  /// Runs `task` on the loop thread soon, after the tasks posted before it
  /// (FIFO). Thread-safe: the one function that may be called from any
  /// thread. Never runs `task` inline.
  virtual void Post(Task task) = 0;
  /// Runs `task` once, `delay` from now (<= 0: at the next turn of the
  /// loop). Timers due at the same time run in the order they were added.
  virtual TimerId AddTimer(Duration delay, Task task) = 0;
  /// Cancels a timer that has not run yet; no-op for one that ran, was
  /// cancelled, or never existed.
  virtual void CancelTimer(TimerId id) = 0;
  /// Watches `fd` for `events` (`kReadable` | `kWritable`), replacing any
  /// earlier watch of it; `events == 0` stops watching. `kError` is always
  /// reported. A callback may unwatch or re-watch its own descriptor while
  /// it runs: it is destroyed or replaced after it returns, never during the
  /// call. Unimplemented for loops without file descriptors (the fake).
  virtual absl::Status WatchFd(int fd, int events, FdCallback callback) = 0;
};

/// An event loop that runs on a thread of the caller's choosing.
class RunnableEventLoop : public EventLoop {
 public:
  /// Runs the loop on the calling thread until `Stop()`. Call once.
  virtual void Run() = 0;
  /// Makes `Run()` return after the task or callback running now. Thread-safe.
  virtual void Stop() = 0;
};

/// Starts attempts without blocking; each attempt's result comes back
/// through its callback, on the loop thread.
///
/// Contract, for every implementation:
/// - `Start` and `Cancel` are called on the loop thread only.
/// - The callback never runs inside `Start` or `Cancel`; it runs exactly
///   once per attempt that is not cancelled, and never for a cancelled one.
/// - `request` must stay valid until the callback has run or `Cancel` has
///   returned; `options.extra_headers` is read during `Start` only.
///   `options.cancellation` is ignored: cancel with `Cancel`.
/// - As with `Transport`, an attempt is never resent on its own.
class AsyncTransport {
 public:
  /// Identifies an attempt for `Cancel`; 0 is never a valid id.
  using AttemptId = std::uint64_t;
  using Callback = std::function<void(TransportResult)>;

  virtual ~AsyncTransport() = default;

  /// Starts one attempt of `request` with `options.timeout` and the extra
  /// headers. Failures that happen before anything is sent (bad input)
  /// still arrive through the callback, with `Delivery::kNotSent`.
  virtual AttemptId Start(const Request& request, const AttemptOptions& options, Callback done) = 0;
  /// Cancels an attempt in flight: its callback will not run. Returns what
  /// is known of it at this moment (status kCancelled; `kMaybeDelivered` once
  /// any byte may have been written, else `kNotSent`), or nullopt when the
  /// attempt is not in flight (finished, cancelled, unknown). A cancelled
  /// attempt's connection is closed, never reused.
  virtual std::optional<TransportResult> Cancel(AttemptId id) = 0;
};

}  // namespace saferetry

#endif  // SAFERETRY_ASYNC_SEAMS_H_

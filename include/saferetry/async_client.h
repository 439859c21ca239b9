// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The event-loop driver. `AsyncClient` runs the same calls as `Client` — the
// same state machine, call setup, budgets, status-query allowance,
// evidence and listeners — without blocking a thread per call: attempts are
// started on an `AsyncTransport`, and backoff and poll waits are timers on
// one event loop. It can also hedge (`RetryPolicyOptions::hedging`).
//
// @code
//   auto loop = saferetry::MakeEpollEventLoop().value();
//   saferetry::AsyncClientOptions options;
//   options.loop = loop;
//   options.transport = saferetry::MakeCurlMultiTransport(loop).value();
//   auto client = saferetry::AsyncClient::Create(std::move(options)).value();
//
//   saferetry::CallOptions call;
//   call.timeout = std::chrono::seconds(2);
//   call.status_url = "http://127.0.0.1:8080/orders/by-key/{key}";
//   client->Execute(order, call, [](saferetry::CallResult r) {
//     // On the loop thread: keep it short.
//   });
//   std::future<saferetry::CallResult> f = client->Execute(order, call);
// @endcode
//
// Threads: the client runs its loop on a thread it owns (`run_loop_thread`,
// the default), or the caller runs the loop. Every callback — the result
// callback, listeners, a status-query callback — runs on the loop thread and
// must not block it. `Execute` and `Cancel` may be called from any thread.

#ifndef SAFERETRY_ASYNC_CLIENT_H_
#define SAFERETRY_ASYNC_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <thread>

#include "absl/status/statusor.h"
#include "saferetry/async_transport.h"
#include "saferetry/client.h"
#include "saferetry/request.h"
#include "saferetry/result.h"

namespace saferetry {
/// Options of an `AsyncClient`. Plain struct; defaults documented per field.
struct AsyncClientOptions {
  /// Everything a blocking client takes, with the same defaults and
  /// validation (clock, random, budgets, classifier, headers, ...), except
  /// `client.transport`, which is unused (may be null). The clock must
  /// agree with the loop's timers: `SystemClock()` (the default) with the
  /// epoll loop, the same `FakeClock` with a `testkit::FakeEventLoop`.
  ClientOptions client;
  /// Required: the loop every call of this client runs on.
  std::shared_ptr<EventLoop> loop;
  /// Required: starts attempts on `loop`.
  std::shared_ptr<AsyncTransport> transport;
  /// Run `loop` on a thread the client owns, from `Create` until the client
  /// is destroyed (default). `loop` must then be a `RunnableEventLoop` that
  /// nothing else runs. False: the caller runs the loop.
  bool run_loop_thread = true;
  /// Calls in flight (accepted, not yet finished) at most, >= 1. A call
  /// over the cap is refused at once — not queued — with `kFailed` /
  /// `StopReason::kTooManyCalls` and nothing sent, so that an overloaded
  /// caller sees back-pressure instead of growing latency and memory.
  /// Default 10 000.
  std::size_t max_in_flight = 10000;
};

/// Runs calls on one event loop. Thread-safe: `Execute` and `Cancel` may be
/// called from any thread; everything else happens on the loop thread.
///
/// Destruction: with its own loop thread, the destructor cancels the calls
/// still in flight (each completes with `kCancelled`, its callback run on
/// the loop thread), stops the loop and joins it. With a caller's loop,
/// destroy the client on the loop thread (or with the loop stopped): calls
/// in flight are cancelled there, the same way. Call `Execute` no more once
/// destruction has begun.
class AsyncClient {
 public:
  /// Identifies a call for `Cancel`; 0 is never a valid id.
  using CallId = std::uint64_t;
  /// Receives the result, once, on the loop thread (on the calling thread
  /// for a call refused over the cap). Must not throw.
  using Callback = std::function<void(CallResult)>;

  /// InvalidArgument naming the field for a missing loop or transport, a
  /// loop that cannot run on the client's thread, `max_in_flight` 0 or bad
  /// client options (as `Client::Create`).
  static absl::StatusOr<std::unique_ptr<AsyncClient>> Create(AsyncClientOptions options);

  ~AsyncClient();
  AsyncClient(const AsyncClient&) = delete;
  AsyncClient& operator=(const AsyncClient&) = delete;

  /// Starts one logical call; `done` receives its result. Never throws and
  /// never blocks. Bad input ends `kFailed` / `kInvalidArgument` with
  /// nothing sent (on the loop thread, like every result). Over
  /// `max_in_flight` the call is refused before this returns: `done` runs
  /// on the calling thread with `kFailed` / `kTooManyCalls`, and the
  /// returned id is 0. `options.cancellation` and `options.listener` must
  /// outlive the call; the token is observed at every step of the call (an
  /// attempt's end, a wait's end, before each send and wait); to interrupt
  /// an attempt or a wait at once, use `Cancel`.
  CallId Execute(Request request, CallOptions options, Callback done);
  /// The same, with the result in a future. `id`, when not null, receives
  /// the call's id (0 when refused over the cap).
  std::future<CallResult> Execute(Request request, CallOptions options, CallId* id = nullptr);

  /// Resolves the journaled intent `key` as `Client::Resolve` does, on the
  /// loop: the same session and state machine (status queries only, unless
  /// `options` allow one same-key resend to a deduplicating server), the
  /// same budgets, hints, breakers and rule for "definite"; the journal is
  /// read and written on the loop thread. `done` receives the result. Counts
  /// against `max_in_flight` like a call; `Cancel` works on its id.
  CallId Resolve(std::string key, ResolveOptions options, Callback done);
  /// The same, with the result in a future.
  std::future<CallResult> Resolve(std::string key, ResolveOptions options);

  /// Cancels call `id` from any thread: an attempt in flight is aborted
  /// (its connection closed), a wait ends now, and the call finishes with
  /// `kCancelled` — `kUnknown` if a request may have been delivered.
  /// No-op for a finished or unknown call.
  void Cancel(CallId id);

  /// Calls accepted and not yet finished.
  std::size_t in_flight() const;

  const AsyncClientOptions& options() const;

  class Core;  // Implementation detail.

 private:
  explicit AsyncClient(std::shared_ptr<Core> core);

  std::shared_ptr<Core> core_;
  std::thread thread_;
};

}  // namespace saferetry

#endif  // SAFERETRY_ASYNC_CLIENT_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The asynchronous seams (`EventLoop`, `AsyncTransport`: saferetry/async_seams.h)
// and the built-in event loop. An event loop runs timers, "run this on the
// loop" and file-descriptor readiness; an asynchronous transport starts one
// attempt and reports its result through a callback on that loop, with no
// thread blocked while the attempt runs.
//
// The loop interface is small on purpose, so that a service's own loop
// (libuv, Asio — saferetry/asio_event_loop.h —, a hand-written epoll loop)
// can be plugged in by implementing four functions (six for a
// `RunnableEventLoop`). `MakeEpollEventLoop()` is the built-in one;
// `testkit::FakeEventLoop` (async_fake_transport.h) runs timers on a
// `FakeClock`, so tests are exact and instant.
//
// @code
//   auto loop = saferetry::MakeEpollEventLoop().value();
//   auto transport = saferetry::MakeCurlMultiTransport(loop).value();
//   // From the loop thread:
//   transport->Start(request, attempt_options, [](saferetry::TransportResult r) { ... });
// @endcode

#ifndef SAFERETRY_ASYNC_TRANSPORT_H_
#define SAFERETRY_ASYNC_TRANSPORT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "saferetry/async_seams.h"  // EventLoop, RunnableEventLoop, AsyncTransport
#include "saferetry/clock.h"

namespace saferetry {

/// The built-in loop: epoll, an eventfd for `Post`, timers ordered by due
/// time on `clock` (default `SystemClock()`; the loop reads time only
/// through it). Internal on failure to create the epoll or eventfd
/// descriptor.
absl::StatusOr<std::shared_ptr<RunnableEventLoop>> MakeEpollEventLoop(
    std::shared_ptr<Clock> clock = nullptr);

}  // namespace saferetry

#endif  // SAFERETRY_ASYNC_TRANSPORT_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The production asynchronous transport, on a libcurl multi handle driven by
// an `EventLoop` (socket and timer callbacks: no thread waits in libcurl). No
// curl type appears here: link `saferetry::curl` and call the factory.
//
// @code
//   auto loop = saferetry::MakeEpollEventLoop().value();
//   auto transport = saferetry::MakeCurlMultiTransport(loop);
//   if (!transport.ok()) return transport.status();
// @endcode

#ifndef SAFERETRY_CURL_ASYNC_TRANSPORT_H_
#define SAFERETRY_CURL_ASYNC_TRANSPORT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "saferetry/async_transport.h"
#include "saferetry/curl_transport.h"

namespace saferetry {

/// Creates a libcurl multi transport on `loop` (which must support
/// `WatchFd`). The same options and the same delivery rules as
/// `MakeCurlTransport`, one easy handle per attempt in flight, idle handles
/// kept for reuse (up to `max_idle_handles`), connections shared through the
/// multi handle's cache. Redirects are not followed
/// (`follow_redirects = true` is refused). A cancelled attempt's handle is
/// removed mid-transfer, which closes its connection, and destroyed, never
/// pooled. InvalidArgument naming the field for bad options; Internal when
/// libcurl cannot be initialised.
absl::StatusOr<std::shared_ptr<AsyncTransport>> MakeCurlMultiTransport(
    std::shared_ptr<EventLoop> loop, CurlTransportOptions options = {});

}  // namespace saferetry

#endif  // SAFERETRY_CURL_ASYNC_TRANSPORT_H_

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

#include <cstddef>
#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "saferetry/async_transport.h"
#include "saferetry/curl_transport.h"

namespace saferetry {

/// Options of the libcurl multi transport: every field of
/// `CurlTransportOptions`, with the same meaning and defaults, and those of
/// the multi handle. Built implicitly from a `CurlTransportOptions` (the
/// multi handle's fields then keep their defaults).
struct CurlMultiTransportOptions : CurlTransportOptions {
  CurlMultiTransportOptions() = default;
  CurlMultiTransportOptions(CurlTransportOptions base)  // NOLINT: implicit on purpose
      : CurlTransportOptions(std::move(base)) {}

  /// Connections kept open for reuse in the multi handle's cache after
  /// their transfer (`CURLMOPT_MAXCONNECTS`), in 1..1 000 000. Default 256.
  /// When a transfer ends with more connections than this in the cache,
  /// the oldest idle one is closed. A fixed size, because libcurl's own
  /// default (4 x the transfers running at that moment) shrinks whenever
  /// the transfers in flight dip, and then closes kept-alive connections
  /// that the next calls need. Connections in use are never closed by it:
  /// with more calls in flight than this to the same servers, raise it to
  /// the calls in flight, or connections are reopened as calls finish.
  std::size_t max_connections = 256;
};

/// Creates a libcurl multi transport on `loop` (which must support
/// `WatchFd`). The same options and the same delivery rules as
/// `MakeCurlTransport`, one easy handle per attempt in flight, idle handles
/// kept for reuse (up to `max_idle_handles`), connections shared through the
/// multi handle's cache (up to `max_connections` kept after use). Redirects
/// are not followed (`follow_redirects = true` is refused). A cancelled
/// attempt's handle is removed mid-transfer, which closes its connection,
/// and destroyed, never pooled. InvalidArgument naming the field for bad
/// options; Internal when libcurl cannot be initialised.
absl::StatusOr<std::shared_ptr<AsyncTransport>> MakeCurlMultiTransport(
    std::shared_ptr<EventLoop> loop, CurlMultiTransportOptions options = {});

}  // namespace saferetry

#endif  // SAFERETRY_CURL_ASYNC_TRANSPORT_H_

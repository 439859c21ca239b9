// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Not API. A call finds the request headers saferetry acts on (the
// idempotency header, the trace context) in one pass, after validating them,
// rather than looking for each where it is used.

#ifndef SAFERETRY_SRC_COMMON_REQUEST_SCAN_H_
#define SAFERETRY_SRC_COMMON_REQUEST_SCAN_H_

#include <cstddef>
#include <string_view>

#include "saferetry/request.h"

namespace saferetry {
namespace internal {

/// What a pass over a request's headers found, by position.
struct RequestScan {
  /// 1 + the index of the first header named as the idempotency header
  /// (ASCII case-insensitive); 0: none.
  std::size_t key_header = 0;
  /// 1 + the index of the last `traceparent` header; 0: none.
  std::size_t traceparent = 0;
  std::size_t traceparents = 0;  // how many `traceparent` headers
  std::size_t tracestates = 0;   // how many `tracestate` headers
};

/// Where the headers saferetry acts on are among `headers`, with
/// `key_header` the idempotency header's name: one pass, comparing lengths
/// first, over headers a call has validated.
RequestScan ScanRequestHeaders(const Headers& headers, std::string_view key_header);

}  // namespace internal
}  // namespace saferetry

#endif  // SAFERETRY_SRC_COMMON_REQUEST_SCAN_H_

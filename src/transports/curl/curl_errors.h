// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The CURLcode table: for every code libcurl 7.88 can return, the status code
// saferetry reports, whether another attempt can help, and whether the
// request may have reached the server. docs/curl-transport.md prints the same
// table with the reasoning.

#ifndef SAFERETRY_SRC_CURL_CURL_ERRORS_H_
#define SAFERETRY_SRC_CURL_CURL_ERRORS_H_

#include <curl/curl.h>

#include "absl/status/status.h"

namespace saferetry {
namespace internal {

/// Where in the exchange a code can arise, i.e. what it says about delivery
/// on its own. The transport combines it with what curl measured.
enum class CurlDeliveryRule {
  /// Raised before any request byte can be written (DNS, connect, TLS
  /// handshake, bad option). Only the measured evidence can override it: a
  /// request already started on this handle (libcurl's reconnect) still
  /// counts.
  kBeforeSend,
  /// Raised before or after the request was written: decided by the
  /// evidence (was the request started? did a response byte arrive?).
  kFromEvidence,
  /// Raised only after a request was handed to a connection.
  kAfterSend,
};

/// One row of the table.
struct CurlCodeInfo {
  absl::StatusCode status_code = absl::StatusCode::kInternal;
  /// Whether another attempt can help, all else being equal.
  bool retryable = false;
  CurlDeliveryRule delivery = CurlDeliveryRule::kFromEvidence;
};

/// The row for `code`. Unknown codes (newer libcurl) map to kInternal,
/// not retryable, decided by the evidence.
CurlCodeInfo DescribeCurlCode(CURLcode code);

}  // namespace internal
}  // namespace saferetry

#endif  // SAFERETRY_SRC_CURL_CURL_ERRORS_H_

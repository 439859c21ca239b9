// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// One attempt, no retries. A transport sends the request once and reports the
// evidence: could the request have reached the server, and what came back.
// The libcurl transport (`curl_transport.h`) is the production one;
// `testkit::FakeTransport` scripts results for tests.

#ifndef SAFERETRY_TRANSPORT_H_
#define SAFERETRY_TRANSPORT_H_

#include <optional>

#include "absl/status/status.h"
#include "saferetry/clock.h"
#include "saferetry/request.h"
#include "saferetry/result.h"

namespace saferetry {

class CancellationToken;

/// Per-attempt parameters chosen by the call.
struct AttemptOptions {
  /// The whole attempt must finish within this (`Duration::max()` = none).
  Duration timeout = Duration::max();
  /// Headers added after `request.headers` (idempotency key, deadline,
  /// attempt number, trace context), by reference: valid until `Send`
  /// returns (for an `AsyncTransport`, until `Start` returns). A transport
  /// that needs them later copies them. May be empty.
  HeaderRefs extra_headers;
  /// When set and cancelled, an in-flight attempt is aborted if possible.
  const CancellationToken* cancellation = nullptr;
};

/// What one attempt produced.
struct TransportResult {
  /// What can be proven about delivery. A transport must never report
  /// `kNotSent` once any byte of the request may have been written.
  Delivery delivery = Delivery::kNotSent;
  /// OK iff a complete response arrived. Otherwise the failure:
  /// kUnavailable (connect/DNS/reset), kDeadlineExceeded (timeout),
  /// kCancelled, kResourceExhausted, kInternal, ...
  absl::Status status;
  /// The response, when `delivery == kResponseReceived`.
  std::optional<Response> response;
  PhaseTimings timings;
  /// Redirect hops followed within this attempt (a transport that follows
  /// redirects, e.g. `CurlTransportOptions::follow_redirects`); each is a
  /// resend of the request (`AttemptEvidence::resend_count`).
  int redirects = 0;
};

/// Sends one attempt. Implementations must be thread-safe and must never
/// resend on their own: a hidden resend turns "committed, response lost" into
/// an uncounted duplicate.
class Transport {
 public:
  virtual ~Transport() = default;
  virtual TransportResult Send(const Request& request, const AttemptOptions& options) = 0;
};

}  // namespace saferetry

#endif  // SAFERETRY_TRANSPORT_H_

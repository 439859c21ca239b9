// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// One attempt, no retries. A transport sends the request once and reports the
// evidence: could the request have reached the server, and what came back.
// The libcurl transport (`curl_transport.h`) is the production one;
// `testkit::FakeTransport` scripts results for tests.

#ifndef SAFERETRY_TRANSPORT_H_
#define SAFERETRY_TRANSPORT_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "saferetry/clock.h"
#include "saferetry/request.h"
#include "saferetry/result.h"

namespace saferetry {

class CancellationToken;

/// Limits on the phases of one attempt (docs/curl-transport.md, "Limits
/// per phase"). Each runs inside the attempt's timeout and the call's
/// deadline: a limit longer than what is left of the attempt changes
/// nothing. Zero (the default of every field): no limit of the phase's own;
/// at most a year.
/// Each expiry is classified by what it proves, as any timeout is
/// (`Delivery`): a connect that never finished sent nothing, so even a
/// keyless POST may be retried; an expiry after the request was written may
/// have delivered it.
struct PhaseLimits {
  /// From the attempt's start until the connection is ready for the
  /// request: the name lookup, the TCP connect and, for https, the TLS
  /// handshake (curl's `--connect-timeout`). >= 0.
  Duration connect{0};
  /// From the moment the whole request was written until the first byte of
  /// the response: the server's time to answer. >= 0.
  Duration first_byte{0};
  /// Read-idle: the attempt fails when fewer than `speed_limit` bytes per
  /// second moved during `speed_time` (curl's `--speed-limit` and
  /// `--speed-time`, libcurl's low-speed limit). libcurl checks it from the
  /// moment the request is sent, so a silent server is caught by it as well.
  /// Both or neither: `speed_limit` > 0 with `speed_time` a whole number of
  /// seconds >= 1 (libcurl counts whole seconds).
  std::int64_t speed_limit = 0;
  Duration speed_time{0};
  /// True when no field sets a limit.
  bool empty() const {
    return connect == Duration(0) && first_byte == Duration(0) && speed_limit == 0 &&
           speed_time == Duration(0);
  }
  friend bool operator==(const PhaseLimits& a, const PhaseLimits& b) {
    return a.connect == b.connect && a.first_byte == b.first_byte &&
           a.speed_limit == b.speed_limit && a.speed_time == b.speed_time;
  }
  friend bool operator!=(const PhaseLimits& a, const PhaseLimits& b) { return !(a == b); }
};

/// InvalidArgument naming the field, prefixed with `prefix` ("connect: must
/// be >= 0, got -1ns"; "speed_time: libcurl counts whole seconds, got
/// 1500ms"; "speed_limit: given without speed_time").
absl::Status ValidatePhaseLimits(const PhaseLimits& limits, std::string_view prefix = {});

/// `limits`, each field left at zero taken from `defaults`.
PhaseLimits MergePhaseLimits(const PhaseLimits& limits, const PhaseLimits& defaults);

/// Per-attempt parameters chosen by the call.
struct AttemptOptions {
  /// The whole attempt must finish within this (`Duration::max()` = none).
  Duration timeout = Duration::max();
  /// Limits per phase for this attempt (the policy's,
  /// `RetryPolicyOptions::phase_limits`); a field left at zero takes the
  /// transport's own (`CurlTransportOptions::phase_limits`).
  PhaseLimits phase_limits;
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

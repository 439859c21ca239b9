// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Not API: the call setup every driver shares (the blocking `Client`, the
// event-loop driver): validation, the key (the caller's, the request's own,
// or minted), the body-fingerprint guard, the `CallPolicy` for the state
// machine, and the headers saferetry adds to each attempt and status query.
// Kept in one place so that two drivers cannot drift apart.
#ifndef SAFERETRY_INTERNAL_CALL_SETUP_H_
#define SAFERETRY_INTERNAL_CALL_SETUP_H_

#include <cstddef>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "saferetry/call_state_machine.h"
#include "saferetry/client.h"
#include "saferetry/idempotency.h"
#include "saferetry/request.h"

namespace saferetry {
namespace internal {

/// One call, ready to drive.
struct PreparedCall {
  CallPolicy policy;
  std::optional<std::string> key;
  /// Headers appended to every attempt: the key (unless the request carries
  /// it), the deadline, the attempt number. Status queries carry the first
  /// `query_header_count` of them (key and deadline).
  Headers extra;
  std::size_t query_header_count = 0;
  std::optional<std::size_t> deadline_index;
  std::optional<std::size_t> attempt_index;
};

/// Validates `request` and `options`, chooses the key and checks it against
/// `fingerprints`, and builds the policy (with the hosts' circuit breakers
/// from `client.circuit_breakers`, if any) and the headers. An error (naming
/// the field) means nothing may be sent.
absl::StatusOr<PreparedCall> PrepareCall(const ClientOptions& client, KeyFingerprints& fingerprints,
                                         const Request& request, const CallOptions& options,
                                         TimePoint start);

/// Fills the per-send headers for `action` (a send of the request): the
/// attempt's timeout in the deadline header and "attempt=n; max=m".
void StampAttemptHeaders(PreparedCall& call, const CallAction& action);

/// The status-query request for `call` (the template expanded with the key)
/// and its headers for `action`: the key, the deadline, and the fence when
/// the action asks for it.
Request StatusQueryRequest(const PreparedCall& call, const StatusQuery& query,
                           const Request& original);
Headers StatusQueryHeaders(const PreparedCall& call, const CallAction& action);

/// The evidence of one finished attempt or query, from the transport's
/// result: delivery, status, hints, timings, the downstream request id.
AttemptEvidence EvidenceOf(const TransportResult& result, TimePoint start, TimePoint end,
                           WallTime wall_now, const ClientOptions& client);

/// A result for a call that could not start.
CallResult InvalidCall(absl::Status status);

}  // namespace internal
}  // namespace saferetry

#endif  // SAFERETRY_INTERNAL_CALL_SETUP_H_

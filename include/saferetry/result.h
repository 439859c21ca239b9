// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// What a call returns: a three-valued outcome, the named reason it stopped,
// and the evidence of every attempt and status query.
//
// The outcome is decided by the whole history, not the last attempt: if any
// attempt may have taken effect and nothing since resolved it, the outcome is
// `kUnknown` even when the last attempt got a clean 503 or 400.

#ifndef SAFERETRY_RESULT_H_
#define SAFERETRY_RESULT_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "saferetry/clock.h"
#include "saferetry/request.h"
#include "saferetry/trace_ids.h"

namespace saferetry {

/// The result of one logical call.
enum class Outcome {
  /// The effect happened exactly once and the caller has the response (or a
  /// status answer that proves it).
  kSucceeded,
  /// The effect did not happen: every attempt either was certainly not
  /// delivered or was refused by the server with a final answer.
  kFailed,
  /// The effect may or may not have happened. Like `absl::StatusCode::
  /// kDeadlineExceeded`, the operation "may have completed successfully". Do
  /// not resend with a new key: query the server with the same key, or
  /// reconcile later. Safe methods (GET, HEAD, OPTIONS) never end here.
  kUnknown,
};

/// Why the call stopped. Each reason is reached by exactly one rule of the
/// state machine (docs/design.md, tests/unit/call_state_machine_test.cc).
/// The reasons that end a call on a limit name the limit.
enum class StopReason {
  kSuccess,            ///< A success response or a "found" status answer.
  kPermanentError,     ///< A final error (4xx, 412, a stored final error): retrying cannot help.
                       ///< FAILED only (never UNKNOWN: see `kAnswerNotDefinite`).
  kAttemptsExhausted,  ///< `max_attempts` sends made and the last one was still retryable.
  kStatusQueriesExhausted,    ///< The status-query (poll) cap was reached, still unresolved.
  kDeadlineExceeded,          ///< The deadline was reached during an attempt, a query or a wait.
  kNoTimeForUsefulAttempt,    ///< Time is left, but less than a minimum useful attempt (+ margin).
  kBudgetExhausted,           ///< The retry budget (or the status-query allowance) refused.
  kRetryAfterBeyondDeadline,  ///< The server's Retry-After ends past the deadline; never shortened.
  kAmbiguousUnresolved,  ///< May have taken effect; no status query and no deduplicating resend.
  /// An unmarked 503 (`AttemptClass::kUnavailableUnproven`) to a request
  /// that is not idempotent, and neither a status query nor a deduplicating
  /// resend is available: the server, or a gateway in front of it, answered,
  /// but nothing proves the request was not processed. Always UNKNOWN.
  kUnavailableUnresolved,
  kNotFoundNoAttemptsLeft,  ///< Status says "not found" (unfenced) but no attempt is left.
  kFenced,                  ///< Fenced (a status answer or a 410): no effect, ever.
  /// The server's record of the key is gone (410 `expired` or without a
  /// state, a status answer `expired`): the effect may exist, and the key is
  /// never resent. Always UNKNOWN, unless a status answer settled it.
  kKeyExpired,
  /// A final answer that is not definite (a 4xx the server did not mark as
  /// the key's stored answer, 409/422 and the like) after an attempt that
  /// may have taken effect, and no status answer settled it. Always UNKNOWN.
  kAnswerNotDefinite,
  /// The server's Retry-After is longer than `HintOptions::max_retry_after`:
  /// coming back sooner would disregard its "not before", so the call stops.
  kRetryAfterTooLong,
  /// The server holds the key pending a person's decision (409
  /// `Idempotency-Key-State: pending_confirmation`): no poll or resend can
  /// settle it. Always UNKNOWN; reconcile later, by key.
  kPendingConfirmation,
  kCancelled,           ///< The caller's cancellation token fired.
  kServerDoNotRetry,    ///< The server asked not to be retried.
  kCircuitOpen,         ///< Reserved for a circuit breaker.
  kTooManyCalls,        ///< `AsyncClient`: over its cap of calls in flight; nothing was sent.
  kJournalUnavailable,  ///< The intent journal could not record the intent: nothing was sent.
  kInvalidArgument,     ///< Bad input: nothing was sent (see `CallResult::status`).
};

/// The number of `StopReason` values, for arrays indexed by reason.
inline constexpr int kStopReasonCount = static_cast<int>(StopReason::kInvalidArgument) + 1;

/// What a SUCCEEDED or FAILED outcome rests on: one vocabulary for
/// `CallResult::resolved_by`, the journal's `IntentSummary::resolved_by`
/// and the CLI's `resolved_by` ("response", "status_query", or none).
enum class ResolvedBy {
  /// Nothing: the outcome is UNKNOWN, or FAILED without any answer (refused
  /// connections, a deadline too close to start, a journal that could not
  /// record the intent).
  kNone,
  /// A status answer (found, a stored final error, fenced).
  kStatusQuery,
  /// A response to the request: the first answer, a retry's, a same-key
  /// resend's or a replay.
  kResponse,
};

/// What the client can prove about whether the request reached the server.
enum class Delivery {
  /// Certainly not delivered: no byte of the request was written (connection
  /// refused, DNS failure, TLS handshake failure, pool closed).
  kNotSent,
  /// Some or all of the request was written but no complete response came
  /// back: the server may have acted on it.
  kMaybeDelivered,
  /// A response (status line and headers) was received.
  kResponseReceived,
};

/// How one attempt is classified. Chosen by a `Classifier`.
enum class AttemptClass {
  kSuccess,                ///< 2xx (or an override): done.
  kPermanent,              ///< 400, 401, 403, 404, 405, 413, 422, other 4xx: stop, FAILED.
  kPreconditionFailed,     ///< 412, 428: the caller must change state first; stop, FAILED.
  kInProgress,             ///< 409 on a keyed request: the first attempt is still running; poll.
  kRetryableNotDelivered,  ///< Connection refused, DNS failure: safe to retry, even for POST.
  kRetryableTransient,     ///< 408, 421, 425, 429, a marked 503: not processed; retry.
  kAmbiguous,              ///< May have taken effect: timeout/reset after sending, 500/502/504.
  /// Answered, not proven: a 503 without `Idempotency-Key-State: rejected`.
  /// A gateway that forwarded the request may answer 503 after the origin
  /// committed, so the attempt may have taken effect. Resent only where doubt
  /// may be (idempotent requests; same key to a deduplicating server or after
  /// a status query's "not found"); a keyless write is never resent. Budgets
  /// and breakers count it as a failure of the host.
  kUnavailableUnproven,
};

/// The phases of one attempt, in the order they happen
/// (docs/operations.md, "Reading the phases").
enum class Phase {
  kNone,          ///< No phase: the attempt did not run out of time.
  kDns,           ///< Resolving the host name.
  kConnect,       ///< The TCP connect.
  kTls,           ///< The TLS handshake.
  kRequestWrite,  ///< Writing the request: its headers and body.
  kFirstByte,     ///< Waiting for the first byte of the response once the request was written.
  kTransfer,      ///< Reading the response, from its first byte to its last.
};

/// "dns", "connect", "tls", "request_write", "first_byte", "transfer", or
/// "" for `kNone`: the names of the trace, the CLI's `-v` and the metrics.
std::string_view PhaseName(Phase phase);

/// Curl's (or the fake's) per-phase timers for one attempt, each measured from
/// the attempt's start. Zero when the phase did not happen. The curl
/// transports report the phases that happened in order (dns <= connect <=
/// tls <= request_written <= first_byte <= total). A connection kept alive
/// from an earlier attempt has no dns, connect or tls stamp.
struct PhaseTimings {
  Duration dns{0};
  Duration connect{0};
  Duration tls{0};
  /// The whole request (headers and body) was written: measured by the
  /// transport itself, since libcurl 7.88 does not report it.
  Duration request_written{0};
  Duration first_byte{0};
  Duration total{0};
  /// The phase in which the attempt's time ran out (its timeout, the call's
  /// deadline, or a limit of the phase's own: `PhaseLimits`), or `kNone`
  /// when it did not.
  Phase timed_out = Phase::kNone;

  /// The time spent in `phase`: its stamp less the stamp before it, zero
  /// for a phase that was not reached (or not needed, such as the connect
  /// of a kept-alive connection); for `kTransfer`, total less first_byte;
  /// for `kNone`, zero.
  Duration Spent(Phase phase) const;
};

/// What the server said about the key, in the `Idempotency-Key-State`
/// response header (docs/server-contract.md).
enum class KeyState {
  kNone,        ///< Header absent or not understood.
  kCompleted,   ///< The key's intent finished (found, or a stored final error).
  kProcessing,  ///< Claimed and the lease is running.
  kAbandoned,   ///< Claimed, the lease expired, no effect yet: a resend takes over.
  kExpired,     ///< The record was reaped; the key cannot be replayed.
  kUnknown,     ///< The server never saw the key (not fenced: proves nothing yet).
  kFenced,      ///< Fenced: the key can never take effect (a definite "no effect").
  kRejected,    ///< This request was refused before any work: it had no effect.
  /// The key waits for a person's decision (`pending_confirmation`, answered
  /// 409): nothing automatic will settle it.
  kPendingConfirmation,
};

/// What the server said about retrying and about the key.
struct ServerHints {
  /// Parsed `Retry-After` (or `retry-after-ms` / `x-ms-retry-after-ms`),
  /// clamped to the configured maximum (`HintOptions::max_retry_after`).
  std::optional<Duration> retry_after;
  /// The hint was longer than that maximum (`retry_after` holds the
  /// maximum): the call stops with `kRetryAfterTooLong` rather than come
  /// back before the server's "not before".
  bool retry_after_above_max = false;
  /// The configured "do not retry" response header was present.
  bool do_not_retry = false;
  /// `Idempotency-Key-State`.
  KeyState key_state = KeyState::kNone;
  /// `Idempotent-Replayed: true`: the response is a stored final answer.
  bool replayed = false;
};

/// The evidence of one attempt or one status query.
struct AttemptEvidence {
  /// 1-based; requests and status queries are numbered separately.
  int number = 0;
  /// True for a status query, false for a send of the request.
  bool is_status_query = false;
  TimePoint start{};
  TimePoint end{};
  Delivery delivery = Delivery::kNotSent;
  /// OK when a complete response arrived; otherwise the transport failure
  /// (`kUnavailable` for connect failures, `kDeadlineExceeded` for timeouts,
  /// ...).
  absl::Status transport_status;
  /// The HTTP status, when a response arrived.
  std::optional<int> http_status;
  ServerHints hints;
  PhaseTimings timings;
  /// The classification of this attempt and a short static reason.
  AttemptClass classification = AttemptClass::kAmbiguous;
  std::string_view reason;
  /// The downstream request id, read from the configured response header
  /// (`RetryPolicyOptions::request_id_header`); empty when absent.
  std::string downstream_request_id;
  /// The shared budget's balance when the next step was decided.
  double budget_balance = 0;
  /// Deadline remaining when the attempt ended (`Duration::max()` if none).
  Duration deadline_remaining = Duration::max();
  /// The wait that followed this attempt, if any, and whether it came from a
  /// server hint.
  std::optional<Duration> delay_after;
  bool delay_from_server_hint = false;
  /// OpenTelemetry's `http.request.resend_count`: sends of the request
  /// before this attempt (for a status query: status queries before this
  /// one), the redirect hops the transport followed included. 0 on the
  /// first.
  int resend_count = 0;
  /// Redirect hops the transport followed within this attempt
  /// (`TransportResult::redirects`).
  int redirects = 0;
  /// The `traceparent` this attempt carried: its trace id, its parent id
  /// (the attempt's span when a tracer gave one, else the caller's) and its
  /// flags. All zeros when it carried none, or one that does not parse, or
  /// for a status query answered by the policy's callback.
  TraceId trace_id{};
  SpanId span_id{};
  std::uint8_t trace_flags = 0;
};

/// The evidence of a call, in order: a vector-like sequence that keeps its
/// first element inline.
using Evidence = absl::InlinedVector<AttemptEvidence, 1>;

/// The result of `Client::Execute`. Marked `[[nodiscard]]`: an ignored
/// `kUnknown` is how duplicate charges start.
struct [[nodiscard]] CallResult {
  Outcome outcome = Outcome::kFailed;
  StopReason stop_reason = StopReason::kInvalidArgument;
  /// When `stop_reason` is `kBudgetExhausted`: the refusing budget's name for
  /// why (`BudgetDecision::refusal`, e.g. "ratio_exhausted"; "refused" when
  /// the budget gave none). Empty otherwise.
  std::string budget_refusal;
  /// OK unless the call could not even start (bad request or options).
  absl::Status status;
  /// Sends of the request (refused connections included).
  int attempts = 0;
  /// Status queries sent, counted apart from attempts.
  int status_queries = 0;
  /// The last response to the request or, when `resolved_by_status_query`,
  /// the status answer that resolved it.
  std::optional<Response> last_response;
  /// The transport status of the last attempt or query.
  absl::Status last_transport_status;
  /// The idempotency key sent, if any.
  std::optional<std::string> idempotency_key;
  /// True when a status answer decided the outcome (found, a stored final
  /// error, or fenced "not found").
  bool resolved_by_status_query = false;
  /// What the outcome rests on: a response to the request, a status
  /// answer, or nothing (always nothing for UNKNOWN).
  ResolvedBy resolved_by = ResolvedBy::kNone;
  /// Every attempt and status query in order. The first is stored in the
  /// result itself: a call that succeeds at once allocates nothing for it.
  Evidence evidence;
  /// Steady-clock time from start to finish.
  Duration elapsed{0};
};

/// Stable lower-case names, as used by the CLI's JSON and the metrics:
/// "SUCCEEDED", "FAILED", "UNKNOWN"; "success", "permanent_error", ...
std::string_view OutcomeName(Outcome outcome);
std::string_view StopReasonName(StopReason reason);
std::string_view DeliveryName(Delivery delivery);
std::string_view AttemptClassName(AttemptClass cls);
/// "status_query", "response", or "" for `kNone`.
std::string_view ResolvedByName(ResolvedBy by);

}  // namespace saferetry

#endif  // SAFERETRY_RESULT_H_

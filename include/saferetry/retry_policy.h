// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The retry policy: what is the same for many calls, built and validated
// once, shared by pointer, never copied per call. A client has a default
// policy (`ClientOptions::policy`); a call may name another
// (`CallOptions::policy`). What differs per call (the timeout or deadline,
// the key, the cancellation, the listener, a status URL for this endpoint)
// stays in `CallOptions`.
//
// @code
//   saferetry::RetryPolicyOptions o;
//   o.max_attempts = 4;
//   o.status_query.url_template = "https://orders.internal/orders/by-key/{key}";
//   absl::StatusOr<std::shared_ptr<const saferetry::RetryPolicy>> orders =
//       saferetry::RetryPolicy::Create(o);
//   if (!orders.ok()) return orders.status();  // "policy.max_attempts: ..."
//
//   saferetry::CallOptions call;
//   call.policy = *orders;          // shared; nothing is copied or checked per call
//   call.timeout = std::chrono::seconds(2);
// @endcode
//
// The JSON reader (saferetry/config.h) produces `RetryPolicyOptions`; the
// dumper writes them back; `operator==` compares them. One place holds each
// knob: adding one is docs/design.md's "Adding a knob".

#ifndef SAFERETRY_RETRY_POLICY_H_
#define SAFERETRY_RETRY_POLICY_H_

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>

#include "absl/status/statusor.h"
#include "saferetry/backoff.h"
#include "saferetry/deadline.h"
#include "saferetry/idempotency.h"
#include "saferetry/response_predicate.h"
#include "saferetry/server_hints.h"
#include "saferetry/status_query.h"
#include "saferetry/transport.h"

namespace saferetry {

/// The hard cap on attempts per call; larger values are clamped.
inline constexpr int kMaxAttemptsHardCap = 10;
/// The hard cap on status queries (polls) per call; larger values are clamped.
inline constexpr int kMaxStatusQueriesHardCap = 1000;

/// The poll pacing: equal jitter from 50 ms, x1.5, up to 1 s.
BackoffParams DefaultPollBackoff();

/// Hedged requests: while an attempt is unanswered after `delay`, send
/// another copy; the first final answer wins and the others are cancelled
/// (docs/hedging.md). Only `AsyncClient` hedges; the blocking `Client`
/// ignores these options. A call is hedged only when its request is safe
/// to send twice: GET/HEAD (safe methods), a request declared idempotent
/// (PUT/DELETE by default), or a keyed request with `server_deduplicates`.
/// A POST without a deduplicating server is never hedged.
struct HedgingOptions {
  /// Default off.
  bool enabled = false;
  /// How long an attempt may stay unanswered before a hedge is sent, >= 0.
  /// Default 50 ms; the fallback when `delay_from_p95` has too few samples.
  Duration delay = std::chrono::milliseconds(50);
  /// Use the client's observed p95 attempt latency (of the last 512
  /// answered attempts; at least 20 needed) instead of `delay`.
  bool delay_from_p95 = false;
  /// Hedges per call, 0..3. Each is an attempt (it counts against
  /// `max_attempts`) paid for by the retry budget; hedges stop when the
  /// budget is empty. Default 1.
  int max_hedges = 1;
};

/// The knobs of a `RetryPolicy`. A plain struct to fill in; `RetryPolicy::
/// Create` validates it once. Defaults are the library's.
struct RetryPolicyOptions {
  /// Sends of the request, >= 1. Default 3; values above
  /// `kMaxAttemptsHardCap` are clamped.
  int max_attempts = 3;
  /// Polls per call: status queries, and resends answered 409 "in progress"
  /// (these count as polls, not as attempts). >= 0; 0 (the default) derives
  /// the cap from the deadline and the poll pacing
  /// (`DefaultMaxStatusQueries`: 17 for 5 s, 127 for 60 s, 20 without a
  /// deadline). Values above `kMaxStatusQueriesHardCap` are clamped.
  int max_status_queries = 0;
  /// The wait before a retry of the request: `ComputeBackoff` over these
  /// parameters. Default full jitter, 100 ms, x2, up to 10 s.
  BackoffParams backoff;
  /// Another curve (a table, a per-host schedule): when set it replaces
  /// `backoff`. Shared and thread-safe (saferetry/backoff.h). Either way the
  /// built policy holds one `BackoffPolicy` (`RetryPolicy::backoff()`), the
  /// only one the state machine knows.
  std::shared_ptr<const BackoffPolicy> backoff_policy;
  /// Pacing of polls (status queries, resends while in progress). Default
  /// `DefaultPollBackoff()`: equal jitter from 50 ms, x1.5, up to 1 s.
  BackoffParams poll_backoff = DefaultPollBackoff();
  /// The total time of a call that sets neither `CallOptions::timeout` nor
  /// `CallOptions::deadline`. > 0. Default 30 s.
  Duration timeout = std::chrono::seconds(30);
  /// Margin, minimum useful attempt, attempt timeout and resolution window
  /// of the call's time plan (`TimePlan`): a keyed write with a status
  /// query keeps 30 % of the call to resolve a hung attempt; a retryable
  /// request gives each attempt half of the call.
  DeadlineOptions deadline_options;
  /// How an ambiguous outcome is resolved: a URL template with `{key}` (or
  /// a callback). `CallOptions::status_url` replaces the template per call.
  /// Empty: no status query.
  StatusQuery status_query;
  /// The server deduplicates keys: after an ambiguous attempt with no status
  /// query, resending with the same key is safe. Default false.
  bool server_deduplicates = false;
  /// Whether a call sends an idempotency key. Default: for non-idempotent
  /// requests.
  KeyMode key_mode = KeyMode::kAuto;
  /// The key's header. Default "Idempotency-Key".
  std::string idempotency_header = std::string(kDefaultIdempotencyHeader);
  /// Default bare.
  KeyForm key_form = KeyForm::kBare;
  /// Carries the remaining time (ms) on every attempt. Default
  /// "X-Request-Timeout-Ms"; empty disables it.
  std::string deadline_header = std::string(kDefaultDeadlineHeader);
  /// Carries the attempt number on the wire ("attempt=2; max=3") so the
  /// server can see that an outer layer is already retrying and stand down
  /// its own retries (docs/operations.md). Default "X-Retry-Attempt"; empty
  /// disables it.
  std::string attempt_header = std::string(kDefaultAttemptHeader);
  /// A response header holding the server's request id, copied into the
  /// evidence. Default "X-Request-Id"; empty disables it.
  std::string request_id_header = std::string(kDefaultRequestIdHeader);
  /// Retry-After clamp and do-not-retry header.
  HintOptions hints;
  /// Hedging (`AsyncClient` only). Default off.
  HedgingOptions hedging;
  /// Limits per phase of every attempt and status query of the endpoint:
  /// connect, first byte after the request was written, low speed
  /// (saferetry/transport.h, docs/curl-transport.md). A field left at zero
  /// (the default) takes the transport's own
  /// (`CurlTransportOptions::phase_limits`). Each runs inside the attempt's
  /// timeout and the call's deadline.
  PhaseLimits phase_limits;
  /// Reads an answer's headers and body prefix to retry a "throttled" 200
  /// or a "not applied" 400 (saferetry/response_predicate.h, which says
  /// what it may and may not change). Default off: nothing asked.
  ResponsePredicateOptions response_predicate;
};

/// Field-by-field equality. User backoff policies compare by identity; a
/// status-query callback compares equal only when both are empty.
bool operator==(const RetryPolicyOptions& a, const RetryPolicyOptions& b);
inline bool operator!=(const RetryPolicyOptions& a, const RetryPolicyOptions& b) {
  return !(a == b);
}

struct CallPolicy;  // saferetry/call_state_machine.h

/// An immutable, validated policy. Create it once and share it: calls hold
/// a pointer to it, and nothing in it is validated or copied per call.
/// Thread-safe.
class RetryPolicy {
 public:
  /// InvalidArgument naming the field ("policy.max_attempts: must be >= 1,
  /// got 0"; "policy.backoff.cap: ..."; "policy.status_query.url_template:
  /// ...").
  static absl::StatusOr<std::shared_ptr<const RetryPolicy>> Create(RetryPolicyOptions options);

  /// The library's defaults (`RetryPolicyOptions{}`), made once per process.
  static const std::shared_ptr<const RetryPolicy>& Default();

  /// The options as validated: `max_attempts` and `max_status_queries`
  /// clamped to the hard caps.
  const RetryPolicyOptions& options() const { return options_; }
  /// The retry backoff (never null).
  const BackoffPolicy& backoff() const { return *backoff_; }
  /// The status query's template is set, or its callback.
  bool has_status_query() const { return has_status_query_; }
  /// The response predicate (the user's and the rules, built once), or null
  /// when none is configured.
  const ResponsePredicate* response_predicate() const { return response_predicate_.get(); }
  /// The state machine's policy as far as this policy decides it, made once
  /// when the policy is built: attempts, the status-query cap, the backoff,
  /// the poll pacing and the time plan's options (pointing into this
  /// policy), `server_deduplicates`, `fence_when_giving_up`, the response
  /// predicate. A driver copies it and completes what each call decides
  /// (the deadline, the request's traits, the key, the status query,
  /// hedging, the breakers).
  const CallPolicy& call_policy() const { return *call_policy_; }

  ~RetryPolicy();
  RetryPolicy(const RetryPolicy&) = delete;
  RetryPolicy& operator=(const RetryPolicy&) = delete;

 private:
  RetryPolicy(RetryPolicyOptions options, std::shared_ptr<const BackoffPolicy> backoff,
              std::shared_ptr<const ResponsePredicate> response_predicate);
  RetryPolicyOptions options_;
  std::shared_ptr<const BackoffPolicy> backoff_;
  std::shared_ptr<const ResponsePredicate> response_predicate_;
  std::unique_ptr<const CallPolicy> call_policy_;
  bool has_status_query_ = false;
};

}  // namespace saferetry

#endif  // SAFERETRY_RETRY_POLICY_H_

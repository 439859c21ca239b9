// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// What one call's state machine is given (saferetry/call_state_machine.h):
// the call's policy, built by a driver from the `RetryPolicy` and the call's
// options (its deadline, its request's traits, how it can be resolved), and
// the services every call of a client shares. A driver of its own, or a test
// of the machine, fills these in; `Client` and `AsyncClient` build them.
//
// @code
//   saferetry::CallPolicy policy;
//   policy.deadline = saferetry::Deadline::After(clock.Now(), std::chrono::seconds(2));
//   policy.traits.keyed = true;
//   policy.has_status_query = true;
//   saferetry::CallStateMachine machine(policy, budget, classifier, random);
// @endcode

#ifndef SAFERETRY_CALL_POLICY_H_
#define SAFERETRY_CALL_POLICY_H_

#include <cstdint>

#include "saferetry/backoff.h"
#include "saferetry/circuit_breaker.h"
#include "saferetry/classifier.h"
#include "saferetry/deadline.h"
#include "saferetry/random.h"
#include "saferetry/response_predicate.h"
#include "saferetry/retry_budget.h"

namespace saferetry {

/// Everything the machine needs to know about one call. Validated by the
/// client; the machine trusts it.
struct CallPolicy {
  /// Sends of the request, 1..kMaxAttemptsHardCap; 0 only with
  /// `start_with_status_query` (status queries only, never a send).
  int max_attempts = 3;
  /// Status queries and resends answered 409 (polls),
  /// 1..kMaxStatusQueriesHardCap; 0 = `DefaultMaxStatusQueries` of the
  /// deadline at `Start`, derived when the first poll is scheduled.
  int max_status_queries = 0;
  /// Waits before a retry of the request (non-owning; must outlive the
  /// call). Null (the default): the default policy's, filled in by `Start`.
  const BackoffPolicy* backoff = nullptr;
  /// Waits before a poll (status query, or resend while in progress)
  /// (non-owning; must outlive the call). Null (the default): the default
  /// policy's, filled in by `Start`. Like `deadline_options`, the same for
  /// every call of a policy: a call points at its policy's, never copies it.
  const BackoffParams* poll_backoff = nullptr;
  /// The time plan's margin, useful attempt, cap and resolution window
  /// (non-owning; must outlive the call). Null (the default): the default
  /// policy's, filled in by `Start`.
  const DeadlineOptions* deadline_options = nullptr;
  Deadline deadline;
  RequestTraits traits;
  /// A status query can be sent (the call is keyed and has one).
  bool has_status_query = false;
  /// A status query may carry the fence when giving up.
  bool fence_when_giving_up = false;
  /// The caller declares that the server deduplicates keys.
  bool server_deduplicates = false;
  /// The call minted its key: no one used it before. A key from the caller
  /// (the default, the cautious value) may have been used by an earlier
  /// process, so a 410 for it (`IsExpiredKeyAnswer`) means "may have taken
  /// effect".
  bool key_minted = false;
  /// An earlier call with this key (a journaled intent continued after a
  /// crash) may have taken effect: the history starts with that doubt, so
  /// the call can end FAILED only on a definite answer.
  bool earlier_attempt_may_have_taken_effect = false;
  /// The call resolves an earlier intent (`Client::Resolve`, the
  /// reconciler): it starts with a status query, not a send, with the doubt
  /// that the intent took effect in its history (set
  /// `earlier_attempt_may_have_taken_effect` too), and sends the request
  /// only as far as `max_attempts` allows after a "not found". The first
  /// query is not charged; later ones are paced, capped and charged as
  /// polls.
  bool start_with_status_query = false;
  /// More than one attempt may be in flight (`StartHedge`): only for
  /// requests that are safe to send twice (idempotent, or keyed with a
  /// deduplicating server). The driver checks; the machine trusts it.
  bool hedging = false;
  /// How much of the body `response_predicate` sees (at most
  /// `kMaxResponsePredicateBodyBytes` from a validated policy; 32 bits, in
  /// the flags' padding).
  std::uint32_t response_predicate_max_body_bytes = 0;
  /// Reads answers beyond their status (non-owning; must outlive the call):
  /// asked after the classifier, under `ApplyResponsePredicate`'s rules
  /// (saferetry/response_predicate.h). Null (the default): not asked.
  const ResponsePredicate* response_predicate = nullptr;
  /// The breaker of the request's host (non-owning; must outlive the call),
  /// asked before every send of the request and told how it ended. Null
  /// (the default): no breaker.
  CircuitBreaker* circuit_breaker = nullptr;
  /// The breaker of the status query's host when it differs from the
  /// request's; null: status queries use `circuit_breaker`.
  CircuitBreaker* status_query_circuit_breaker = nullptr;
};

/// What a call's decisions consult besides its policy, the same for every
/// call of a client: a driver builds it once and each machine points at it
/// (`CallStateMachine(CallPolicy*, const CallServices*, ...)`), rather than
/// holding the four pointers per call. The pointees must outlive the
/// machines.
struct CallServices {
  /// Pays for retries and hedges (never null).
  RetryBudget* budget = nullptr;
  /// Classifies each attempt's evidence (never null).
  const Classifier* classifier = nullptr;
  /// Draws the backoff's jitter samples (never null).
  Random* random = nullptr;
  /// The status-query allowance; null: polls are limited by their cap and
  /// the deadline only.
  RetryBudget* query_budget = nullptr;
};

/// The default status-query allowance: 50 % of calls + 20 per second over a
/// 10 s window (docs/adr/0006-status-query-allowance.md).
RatioBudgetOptions DefaultStatusQueryAllowance();

/// The time plan a call needs, from its traits and how it can be resolved:
/// kResolve for a keyed non-idempotent request with a status query or a
/// deduplicating server; kRetry for an idempotent (or safe) request with
/// more than one attempt; kSingle otherwise.
TimePlanKind ChooseTimePlanKind(const CallPolicy& policy);

/// The default status-query cap for a call of `total` (`Duration::max()`
/// when there is no deadline): how many polls fit at the pacing's shortest
/// waits (the jitter's lower bound), plus 2, at least 5, at most
/// `kMaxStatusQueriesHardCap`; 20 without a deadline. So the cap is never
/// reached before the deadline by an unlucky draw: a 1 s call gets 9, a 5 s
/// call 17, a 60 s call 127 (with the default pacing about 60 are sent in
/// 60 s). Derived when the call's first poll is scheduled.
int DefaultMaxStatusQueries(Duration total, const BackoffParams& poll_backoff);

}  // namespace saferetry

#endif  // SAFERETRY_CALL_POLICY_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The decisions of one call, with no I/O. A driver feeds events in and
// performs the actions that come out; the blocking `Client` and any event-loop
// driver share this machine, and so does the policy simulator.
//
//   events in                          actions out
//   Start(now)                         SendAttempt(number, timeout, remaining)
//     (a resolve starts with a query)
//   OnAttemptDone(evidence, response)  Wait(delay, from_server_hint)
//   OnWaitOver(now)                    SendStatusQuery(number, timeout, fence)
//   OnStatusAnswer(answer, evidence)   Finish  -> TakeResult()
//   OnCancelled(now)
//
// Order of checks after an attempt (docs/design.md; each rule is proved by a
// test in tests/unit/call_state_machine_test.cc):
//   1. classify (then the response predicate, when the policy has one:
//      saferetry/response_predicate.h); record whether the attempt may have
//      taken effect;
//   2. success -> Finish(SUCCEEDED);
//   3. a final answer (permanent / precondition; no charge): with nothing
//      in the history that may have taken effect, FAILED; a 410 not fenced
//      for a key the call did not mint puts that doubt in the history. Once
//      it is there only a definite answer (saferetry/settlement.h: a 410
//      fenced, a final 4xx the server marked as the key's stored answer)
//      ends FAILED; any other is settled by status queries (whose "not
//      found" never leads to a resend), else UNKNOWN with
//      kAnswerNotDefinite or kKeyExpired;
//   4. cancelled -> Finish; server says do-not-retry -> Finish, no charge;
//   5. ambiguous -> idempotent: retry | keyed + status query: query |
//      keyed + (server deduplicates or 409 seen): same-key resend |
//      else Finish(kAmbiguousUnresolved);
//      in progress (409) -> poll: query if configured, else same-key resend
//      (a resend answered 409 counts as a poll, not as an attempt);
//   6. next step: cap (attempts, or polls) -> delay (the backoff for
//      attempts or the poll pacing for polls, raised to the server's
//      Retry-After: a floor, docs/adr/0014) -> time: a Retry-After above
//      the maximum, or one that alone does not fit, ends the call; a delay
//      that does not fit is shortened (never below the hint) to the longest
//      that leaves a useful attempt ->
//      budget (retries) or status-query allowance (polls) is charged only
//      now, when the next send is certain -> Wait(delay).
//   7. after the wait: cancelled? (refund) -> send with the planned timeout.
//      A wait the machine scheduled leads to a send even when the clock
//      woke late: the useful-attempt check forgives the lateness, up to half
//      of `min_useful_attempt`.
// Before every send (the first attempt, a retry, a status query, a hedge)
// the circuit breaker, when the policy has one, is asked last, right before
// the send: a refusal ends the call with kCircuitOpen (refunding the wait's
// charge), outcome by history; a refused hedge is simply not sent. Every
// finished send is reported to it (docs/circuit-breaker.md).
// Copies still in flight (hedges) count as attempts that may have taken
// effect: a call that stops while they are (the driver cancels them) is
// never FAILED, and a final answer that is not definite waits for them.
// History decides the outcome: once any attempt may have taken effect, only a
// definite answer (saferetry/settlement.h: a success, a "found" status answer,
// a stored final error, a fenced answer) avoids kUnknown.

#ifndef SAFERETRY_CALL_STATE_MACHINE_H_
#define SAFERETRY_CALL_STATE_MACHINE_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "saferetry/backoff.h"
#include "saferetry/cancellation.h"
#include "saferetry/circuit_breaker.h"
#include "saferetry/classifier.h"
#include "saferetry/deadline.h"
#include "saferetry/random.h"
#include "saferetry/response_predicate.h"
#include "saferetry/result.h"
#include "saferetry/retry_budget.h"
#include "saferetry/retry_policy.h"
#include "saferetry/settlement.h"
#include "saferetry/status_query.h"

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

/// What the driver must do next.
struct CallAction {
  /// kNone: nothing to do until another attempt in flight ends (only with
  /// more than one attempt in flight, i.e. after `StartHedge`).
  enum class Kind { kSendAttempt, kWait, kSendStatusQuery, kFinish, kNone };
  Kind kind = Kind::kFinish;
  /// Attempt or status-query number, 1-based.
  int number = 0;
  /// For sends: the id the driver passes back with the answer; unique within
  /// the call across attempts and status queries (1, 2, ...).
  std::uint32_t attempt_id = 0;
  /// For sends: the attempt timeout.
  Duration timeout{0};
  /// For sends: deadline remaining when the send starts (`Duration::max()`
  /// when there is no deadline), for the propagation header.
  Duration remaining{0};
  /// For waits.
  Duration delay{0};
  bool delay_from_server_hint = false;
  /// For status queries: send the fence header (`kFenceHeader`).
  bool fence = false;
};

/// One call's decisions. Not thread-safe (one call, one thread at a time);
/// the budget it is given is. Movable, not copyable.
class CallStateMachine {
 public:
  /// Runs the call on a copy of `policy` (one allocation, which holds the
  /// services too). `budget`, `classifier` and `random` must outlive the
  /// machine; `query_budget` (the status-query allowance) and
  /// `cancellation` may be null (no allowance: polls are limited by their
  /// cap and the deadline).
  CallStateMachine(const CallPolicy& policy, RetryBudget* budget, const Classifier* classifier,
                   Random* random, const CancellationToken* cancellation = nullptr,
                   RetryBudget* query_budget = nullptr);
  /// Runs the call on `*policy` itself with the client's `*services`,
  /// neither copied nor allocated: the machine completes the policy in
  /// place (the defaults at `Start`, the derived poll cap at the first
  /// poll) and reads both until it is destroyed, so they must outlive the
  /// machine and the policy must not change meanwhile. What a driver uses:
  /// the call's policy is built once, in storage the call owns, and the
  /// services once per client. `cancellation` may be null.
  CallStateMachine(CallPolicy* policy, const CallServices* services,
                   const CancellationToken* cancellation = nullptr)
      : policy_(policy), services_(services), cancellation_(cancellation) {}
  CallStateMachine(CallStateMachine&&) noexcept = default;
  CallStateMachine& operator=(CallStateMachine&&) noexcept = default;
  CallStateMachine(const CallStateMachine&) = delete;
  CallStateMachine& operator=(const CallStateMachine&) = delete;
  ~CallStateMachine() = default;

  /// Starts the call in both budgets and returns the first send. Chooses the
  /// time plan (`plan()`) and completes the policy with the default
  /// policy's poll pacing and time-plan options where they are null.
  CallAction Start(TimePoint now);
  /// The attempt announced by the last kSendAttempt finished. `evidence`
  /// carries start/end, delivery, transport status, HTTP status and hints;
  /// the machine fills number and classification. With one attempt in
  /// flight (the default) this is the same as passing its id.
  CallAction OnAttemptDone(AttemptEvidence evidence, std::optional<Response> response,
                           TimePoint now);
  /// Attempt `attempt_id` finished. With other attempts still in flight a
  /// retryable or ambiguous answer returns kNone (wait for them); a success
  /// or a final answer finishes the call, and the driver cancels the others
  /// (`in_flight()`) without reporting them.
  CallAction OnAttemptDone(std::uint32_t attempt_id, AttemptEvidence evidence,
                           std::optional<Response> response, TimePoint now);
  /// Asks for one more attempt while others are in flight (a hedge). Allowed
  /// only when `CallPolicy::hedging` is set, the call is not finished, an
  /// attempt is in flight, fewer than `kMaxInFlight` are, the attempt cap is
  /// not reached and the retry budget pays for it (charged now; hedges stop
  /// when it is empty). Returns kSendAttempt, or kNone when refused.
  CallAction StartHedge(TimePoint now);
  /// Ids of the attempts in flight.
  int in_flight_count() const { return in_flight_count_; }
  std::uint32_t in_flight(int i) const { return Slot(i).id; }
  /// The hedges sent so far (`StartHedge`'s kSendAttempt actions).
  int hedges() const { return later().hedges_sent; }
  /// The most attempts in flight at once.
  static constexpr int kMaxInFlight = 4;
  CallAction OnWaitOver(TimePoint now);
  CallAction OnStatusAnswer(StatusAnswer answer, AttemptEvidence evidence,
                            std::optional<Response> response, TimePoint now);

  CallAction OnCancelled(TimePoint now);
  /// Cancels the call as its token would (for a driver that cancels calls
  /// itself, e.g. `AsyncClient::Cancel`, with no token of its own): from
  /// now on `cancelled()` is true and every decision that checks the token
  /// ends the call kCancelled. Reports nothing; a driver with nothing in
  /// flight calls `OnCancelled` (or ends its wait) to finish.
  void Cancel() { cancelled_ = true; }
  /// Whether the call is cancelled: `Cancel()`, or the token given to the
  /// constructor.
  bool cancelled() const {
    return cancelled_ || (cancellation_ != nullptr && cancellation_->IsCancelled());
  }

  bool finished() const { return finished_; }
  /// The call's start: the time `Start` was given.
  TimePoint start() const { return start_; }
  /// The call's time plan, chosen by `Start` from the traits and the
  /// deadline as it stood then (`ChooseTimePlanKind`, `MakeTimePlan`).
  /// Valid after `Start`. Derived when read, not kept: its kind is a byte of
  /// the machine, its durations follow from the deadline's remaining time
  /// at `Start` and the policy's time-plan options.
  TimePlan plan() const {
    return MakeTimePlan(static_cast<TimePlanKind>(plan_kind_), total_, *policy_->deadline_options);
  }
  /// The policy as completed by `Start` (the default policy's poll pacing
  /// and time-plan options where they were null) and by the first poll (the
  /// derived poll cap).
  const CallPolicy& policy() const { return *policy_; }
  /// The result; valid once an action of kind kFinish was returned.
  CallResult TakeResult() { return std::move(Synced()); }
  /// Read-only view of the result being built (evidence so far, and the
  /// sends counted). Without `BuildResultIn`, reading it before the first
  /// answer allocates the machine's result.
  const CallResult& result() const { return Synced(); }
  /// Builds the result in `*out` rather than in storage of its own, so that
  /// a driver returning the result by value never moves it: it passes its
  /// return object here and reads it once kFinish is returned. Call before
  /// `Start`, with a default-constructed `CallResult` that outlives the
  /// machine's use; `result()` and `TakeResult()` then refer to it.
  /// Without it the machine allocates its result when the first answer
  /// comes (or the call ends), so a call waiting for its first answer holds
  /// no result.
  void BuildResultIn(CallResult* out) {
    owned_result_.reset();
    result_ = out;
  }

 private:
  enum class Next : std::uint8_t { kAttempt, kStatusQuery };
  CallAction Finish(Outcome outcome, StopReason reason, TimePoint now);
  CallAction FinishFailure(StopReason reason, TimePoint now);
  // `poll`: the next send is a poll (a status query, or a resend while the
  // server says "in progress"), paced and capped as such.
  CallAction ScheduleNext(Next next, bool poll, AttemptClass cls, const ServerHints& hints,
                          TimePoint now);
  CallAction SendNow(TimePoint now);
  // Gives the pending wait's charge back to its budget, if there is one.
  void RefundPendingCharge(TimePoint now);
  CallAction OutOfTime(TimePoint now);
  // Completes the stored evidence of the answer being handled (deadline
  // left, budget balance); the caller writes the result's last transport
  // status.
  void CompleteEvidence(AttemptEvidence& evidence, TimePoint now);

  CallPolicy* policy_;            // `owned_->policy`, or the caller's
  const CallServices* services_;  // `owned_->services`, or the caller's
  const CancellationToken* cancellation_;
  // What the by-value constructor copied (one allocation).
  struct Owned {
    CallPolicy policy;
    CallServices services;
  };
  std::unique_ptr<Owned> owned_;

  // The result being built: `BuildResultIn`'s, else allocated on first use
  // (`out()`) and owned.
  CallResult& out() const;
  mutable CallResult* result_ = nullptr;
  mutable std::unique_ptr<CallResult> owned_result_;
  // `out()` with the counts the machine keeps until then written in.
  CallResult& Synced() const {
    CallResult& r = out();
    r.attempts = attempts_;
    r.status_queries = status_queries_;
    return r;
  }
  int attempts_ = 0;        // `CallResult::attempts`
  int status_queries_ = 0;  // `CallResult::status_queries`
  TimePoint start_{};
  Duration total_{0};  // the deadline's remaining time at Start
  // 16 bytes: the breaker's permit is held as its two fields, beside the
  // id and the attempt number (at most kMaxAttemptsHardCap).
  struct InFlight {
    InFlight() = default;
    InFlight(std::uint32_t attempt_id, int attempt_number, bool is_poll,
             const CircuitBreaker::Permit& p)
        : permit_generation(p.generation),
          id(attempt_id),
          number(static_cast<std::uint16_t>(attempt_number)),
          poll(is_poll),
          permit_allowed(p.allowed) {}
    // allowed = false without a breaker.
    CircuitBreaker::Permit permit() const { return {permit_allowed, permit_generation}; }
    std::uint64_t permit_generation = 0;
    std::uint32_t id = 0;
    std::uint16_t number = 0;  // its attempt number
    bool poll = false;
    bool permit_allowed = false;
  };
  CircuitBreaker* QueryBreaker() const;
  // Reports a finished send to `breaker` (if any): a host failure or not.
  void ReportToBreaker(CircuitBreaker* breaker, const CircuitBreaker::Permit& permit,
                       AttemptClass cls, const absl::Status& transport_status, TimePoint now);
  // The first send in flight; hedges beside it are in `Later::hedges`.
  InFlight in_flight0_{};
  std::uint32_t next_id_ = 0;
  std::uint8_t in_flight_count_ = 0;  // at most kMaxInFlight
  bool finished_ = false;
  bool maybe_effect_ = false;  // some attempt may have taken effect, unresolved
  Next pending_ = Next::kAttempt;
  std::uint8_t plan_kind_ = 0;  // `plan()`'s `TimePlanKind`, chosen by `Start`
  bool cancelled_ = false;      // `Cancel()`
  int attempts_counted_ = 0;    // sends that count against max_attempts

  // What a call needs only once it waits, polls, hedges or meets a final
  // answer it cannot trust, allocated then (`MutableLater`): a call whose
  // first answer settles it neither allocates nor carries it (about 180
  // bytes of every call in flight). `later()` reads the defaults while
  // there is none.
  struct Later {
    // Sends in flight beside `in_flight0_` (hedges): `Slot(1..)`.
    std::array<InFlight, kMaxInFlight - 1> hedges{};
    // A final answer that came while other copies were in flight, with no
    // doubt before it: it stands if they come back without doubt.
    std::optional<StopReason> held_final;
    // The end of the pending wait: a send after it forgives a late wake-up.
    std::optional<TimePoint> wake_due;
    Duration previous_delay{0};
    Duration previous_poll_delay{0};
    // The charge of the pending wait, refunded if the send never happens:
    // pending while `pending_charge_budget` (the budget charged) is set.
    BudgetReceipt pending_charge;
    RetryBudget* pending_charge_budget = nullptr;
    BudgetReceipt last_retry_receipt;
    // The permit of the status query in flight (allowed = false: none).
    CircuitBreaker::Permit query_permit;
    int polls = 0;        // status queries + resends answered 409
    int hedges_sent = 0;  // `hedges()`
    int retry_waits = 0;
    int poll_waits = 0;
    StopReason unsettled_reason = StopReason::kAnswerNotDefinite;
    // A final answer that was not definite (or a 410 for a used key) came
    // after that doubt: only status queries may settle it, never a resend.
    bool no_resend = false;
    bool pending_poll = false;   // the pending send is a poll
    bool pending_fence = false;  // the pending status query carries the fence
    bool fence_sent = false;
    bool seen_in_progress = false;
  };
  static const Later kNoLater;
  const Later& later() const { return later_ != nullptr ? *later_ : kNoLater; }
  Later& MutableLater();
  InFlight& Slot(int i) {
    return i == 0 ? in_flight0_ : later_->hedges[static_cast<std::size_t>(i - 1)];
  }
  const InFlight& Slot(int i) const {
    return i == 0 ? in_flight0_ : later_->hedges[static_cast<std::size_t>(i - 1)];
  }
  std::unique_ptr<Later> later_;
};

}  // namespace saferetry

#endif  // SAFERETRY_CALL_STATE_MACHINE_H_

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
// After each answer the machine applies a fixed order of rules, written out
// in docs/design.md ("Order of checks") and each proved by a test in
// tests/unit/call_state_machine_test.cc: classify; success ends the call; a
// final answer ends it FAILED only when nothing doubtful came before or the
// answer is definite (saferetry/settlement.h); doubt (a lost answer, an
// unmarked 503, "in progress") is resolved by a retry of an idempotent
// request, a status query, or a same-key resend to a deduplicating server,
// never by a fresh request; then caps, the delay (Retry-After is a floor),
// the deadline and, last, the budget, charged only when the send is
// certain. The circuit breaker, when the policy has one, is asked right
// before every send. History decides the outcome: once any attempt may have
// taken effect, only a definite answer avoids kUnknown.

#ifndef SAFERETRY_CALL_STATE_MACHINE_H_
#define SAFERETRY_CALL_STATE_MACHINE_H_

#include <cstdint>
#include <memory>
#include <optional>

#include "saferetry/call_policy.h"
#include "saferetry/cancellation.h"
#include "saferetry/circuit_breaker.h"
#include "saferetry/result.h"
#include "saferetry/retry_policy.h"
#include "saferetry/settlement.h"
#include "saferetry/status_query.h"

namespace saferetry {

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
                   const CancellationToken* cancellation = nullptr);
  CallStateMachine(CallStateMachine&&) noexcept;
  CallStateMachine& operator=(CallStateMachine&&) noexcept;
  CallStateMachine(const CallStateMachine&) = delete;
  CallStateMachine& operator=(const CallStateMachine&) = delete;
  ~CallStateMachine();

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
  std::uint32_t in_flight(int i) const;
  /// The hedges sent so far (`StartHedge`'s kSendAttempt actions).
  int hedges() const;
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
  // A send in flight: its id, its attempt number (at most
  // kMaxAttemptsHardCap), whether it is a poll, and the breaker's permit (not
  // allowed: no breaker), held as its two fields so that the record of every
  // call in flight stays 16 bytes.
  struct InFlight {
    InFlight() = default;
    InFlight(std::uint32_t attempt_id, int attempt_number, bool is_poll,
             const CircuitBreaker::Permit& p)
        : permit_generation(p.generation),
          id(attempt_id),
          number(static_cast<std::uint16_t>(attempt_number)),
          poll(is_poll),
          permit_allowed(p.allowed) {}
    CircuitBreaker::Permit permit() const { return {permit_allowed, permit_generation}; }
    std::uint64_t permit_generation = 0;
    std::uint32_t id = 0;
    std::uint16_t number = 0;
    bool poll = false;
    bool permit_allowed = false;
  };
  CircuitBreaker* QueryBreaker() const;
  // Reports a finished send to `breaker` (if any): a host failure or not.
  void ReportToBreaker(CircuitBreaker* breaker, const CircuitBreaker::Permit& permit,
                       AttemptClass cls, const absl::Status& transport_status, TimePoint now);
  // The first send in flight; hedges beside it are in the retry state.
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
  // answer it cannot trust (the retry state), created then: a call whose
  // first answer settles it never has one. Defined in the .cc file.
  struct Later;
  const Later& later() const;  // the defaults while there is none
  Later& MutableLater();
  InFlight& Slot(int i);  // 0: `in_flight0_`; 1..: the hedges'
  std::unique_ptr<Later> later_;
};

}  // namespace saferetry

#endif  // SAFERETRY_CALL_STATE_MACHINE_H_

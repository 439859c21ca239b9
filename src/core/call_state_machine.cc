// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/call_state_machine.h"

#include <algorithm>
#include <array>
#include <utility>

#include "core/call_state_machine_later.h"
#include "saferetry/cancellation.h"
#include "saferetry/retry_policy.h"
#include "saferetry/settlement.h"

namespace saferetry {

CallStateMachine::CallStateMachine(const CallPolicy& policy, RetryBudget* budget,
                                   const Classifier* classifier, Random* random,
                                   const CancellationToken* cancellation, RetryBudget* query_budget)
    : policy_(nullptr),
      services_(nullptr),
      cancellation_(cancellation),
      owned_(std::make_unique<Owned>(
          Owned{policy, CallServices{budget, classifier, random, query_budget}})) {
  policy_ = &owned_->policy;
  services_ = &owned_->services;
}

CallStateMachine::CallStateMachine(CallPolicy* policy, const CallServices* services,
                                   const CancellationToken* cancellation)
    : policy_(policy), services_(services), cancellation_(cancellation) {}
CallStateMachine::CallStateMachine(CallStateMachine&&) noexcept = default;
CallStateMachine& CallStateMachine::operator=(CallStateMachine&&) noexcept = default;
CallStateMachine::~CallStateMachine() = default;

const CallStateMachine::Later& CallStateMachine::later() const {
  static const Later kNoLater{};
  return later_ != nullptr ? *later_ : kNoLater;
}

CallStateMachine::InFlight& CallStateMachine::Slot(int i) {
  return i == 0 ? in_flight0_ : later_->hedges[static_cast<std::size_t>(i - 1)];
}

std::uint32_t CallStateMachine::in_flight(int i) const {
  return i == 0 ? in_flight0_.id : later_->hedges[static_cast<std::size_t>(i - 1)].id;
}

int CallStateMachine::hedges() const { return later().hedges_sent; }

CallStateMachine::Later& CallStateMachine::MutableLater() {
  if (later_ == nullptr) {
    later_ = std::make_unique<Later>();
  }
  return *later_;
}

CallResult& CallStateMachine::out() const {
  if (result_ == nullptr) {
    owned_result_ = std::make_unique<CallResult>();
    result_ = owned_result_.get();
  }
  return *result_;
}

CallAction CallStateMachine::Start(TimePoint now) {
  if (policy_->backoff == nullptr) {
    policy_->backoff = &RetryPolicy::Default()->backoff();
  }
  if (policy_->poll_backoff == nullptr) {
    policy_->poll_backoff = &RetryPolicy::Default()->options().poll_backoff;
  }
  if (policy_->deadline_options == nullptr) {
    policy_->deadline_options = &RetryPolicy::Default()->options().deadline_options;
  }
  start_ = now;
  // The call's setup that every driver shares: the poll cap and the time
  // plan follow from the deadline as it stands at the start.
  // The poll cap is derived only when a poll is first scheduled: most calls
  // never poll, and the derivation walks the pacing.
  total_ = policy_->deadline.Remaining(now);
  plan_kind_ = static_cast<std::uint8_t>(ChooseTimePlanKind(*policy_));
  services_->budget->OnCallStart(now);
  if (services_->query_budget != nullptr) {
    services_->query_budget->OnCallStart(now);
  }
  // A continued intent starts with its predecessor's doubt.
  maybe_effect_ = policy_->earlier_attempt_may_have_taken_effect && !policy_->traits.safe;
  // A resolve asks before it does anything else.
  pending_ = policy_->start_with_status_query && policy_->has_status_query ? Next::kStatusQuery
                                                                           : Next::kAttempt;
  return SendNow(now);
}

CallAction CallStateMachine::SendNow(TimePoint now) {
  if (cancelled()) {
    RefundPendingCharge(now);
    return FinishFailure(StopReason::kCancelled, now);
  }
  const Duration timeout =
      pending_ == Next::kAttempt
          ? PlannedAttemptTimeout(plan(), policy_->deadline, now, *policy_->deadline_options)
          : StatusQueryTimeout(policy_->deadline, now, *policy_->deadline_options);
  // No send starts that could not do useful work before the deadline (a
  // wait that overslept, or a deadline that was already too close at start).
  // A wait this machine scheduled left a useful attempt; a clock that woke
  // up late took some of it, and that lateness (up to half of a useful
  // attempt) is forgiven, so the wait still leads to its send.
  Duration needed = policy_->deadline_options->min_useful_attempt;
  if (later_ != nullptr && later_->wake_due.has_value()) {
    const Duration late = now - *later_->wake_due;
    if (late > Duration::zero()) needed -= std::min(late, needed / 2);
    later_->wake_due.reset();
  }
  if (!policy_->deadline.is_infinite() && timeout < needed) {
    RefundPendingCharge(now);
    return OutOfTime(now);
  }
  // The breaker is asked last, right before the send: a half-open breaker
  // hands out a probe slot with each permit, so a permit must lead to a send.
  CircuitBreaker::Permit permit;
  CircuitBreaker* breaker = pending_ == Next::kAttempt ? policy_->circuit_breaker : QueryBreaker();
  if (breaker != nullptr) {
    permit = breaker->Allow(now);
    if (!permit.allowed) {
      RefundPendingCharge(now);
      return FinishFailure(StopReason::kCircuitOpen, now);
    }
  }
  if (later_ != nullptr) later_->pending_charge_budget = nullptr;  // the send happens: it stands
  CallAction action;
  action.attempt_id = ++next_id_;
  if (pending_ == Next::kAttempt) {
    action.kind = CallAction::Kind::kSendAttempt;
    action.number = ++attempts_;
    ++attempts_counted_;
    const bool poll = later().pending_poll;
    if (poll) ++later_->polls;  // provisionally a poll; settled by the answer
    in_flight0_ = InFlight{action.attempt_id, action.number, poll, permit};
    in_flight_count_ = 1;
  } else {
    Later& later = MutableLater();  // a resolve's first query comes before any wait
    action.kind = CallAction::Kind::kSendStatusQuery;
    action.number = ++status_queries_;
    in_flight_count_ = 0;
    later.query_permit = permit;
    action.fence = later.pending_fence;
    if (later.pending_fence) later.fence_sent = true;
    ++later.polls;
  }
  action.timeout = timeout;
  // At the call's start (its first send) that is the total, read by `Start`.
  action.remaining = now == start_ ? total_ : policy_->deadline.Remaining(now);
  return action;
}

void CallStateMachine::CompleteEvidence(AttemptEvidence& evidence, TimePoint now) {
  evidence.deadline_remaining = policy_->deadline.Remaining(now);
  evidence.budget_balance = services_->budget->Balance(now);
}

CallAction CallStateMachine::StartHedge(TimePoint now) {
  CallAction none;
  none.kind = CallAction::Kind::kNone;
  if (!policy_->hedging || finished_ || in_flight_count_ == 0 || in_flight_count_ >= kMaxInFlight ||
      cancelled() || attempts_counted_ >= policy_->max_attempts) {
    return none;
  }
  const Duration timeout =
      PlannedAttemptTimeout(plan(), policy_->deadline, now, *policy_->deadline_options);
  if (!policy_->deadline.is_infinite() && timeout < policy_->deadline_options->min_useful_attempt) {
    return none;
  }
  // Every hedge is paid for by the shared budget, as a retry is.
  BudgetFailure hedge;
  hedge.use = BudgetUse::kHedge;
  const BudgetDecision decision = services_->budget->OnFailure(hedge, now);
  if (!decision.allowed) return none;
  // A refused hedge is not sent and does not end the call: the attempt in
  // flight may still answer.
  CircuitBreaker::Permit permit;
  if (policy_->circuit_breaker != nullptr) {
    permit = policy_->circuit_breaker->Allow(now);
    if (!permit.allowed) {
      services_->budget->Refund(decision.receipt, now);
      return none;
    }
  }
  Later& later = MutableLater();
  later.last_retry_receipt = decision.receipt;
  ++later.hedges_sent;
  CallAction action;
  action.kind = CallAction::Kind::kSendAttempt;
  action.attempt_id = ++next_id_;
  action.number = ++attempts_;
  ++attempts_counted_;
  action.timeout = timeout;
  action.remaining = policy_->deadline.Remaining(now);
  Slot(in_flight_count_++) = InFlight{action.attempt_id, action.number, false, permit};
  return action;
}

CallAction CallStateMachine::OnAttemptDone(AttemptEvidence evidence,
                                           std::optional<Response> response, TimePoint now) {
  return OnAttemptDone(in_flight_count_ > 0 ? in_flight0_.id : 0, std::move(evidence),
                       std::move(response), now);
}

CallAction CallStateMachine::OnAttemptDone(std::uint32_t attempt_id, AttemptEvidence reported,
                                           std::optional<Response> response, TimePoint now) {
  // A late answer (a copy the driver was to cancel): not recorded.
  if (finished_) return CallAction{};
  CallResult& result = Synced();
  // Recorded where it stays; nothing else is recorded until the next answer.
  AttemptEvidence& evidence = result.evidence.emplace_back(std::move(reported));
  // Which attempt this was; it is no longer in flight.
  InFlight done;
  int i = 0;
  // One attempt in flight (no hedge): the first slot is the one.
  while (i < in_flight_count_ && Slot(i).id != attempt_id) ++i;
  if (i < in_flight_count_) {
    done = Slot(i);
    // The last slot fills the freed one; the last one itself is just dropped.
    if (i != in_flight_count_ - 1) Slot(i) = Slot(in_flight_count_ - 1);
    --in_flight_count_;
  } else {
    done = InFlight{attempt_id, attempts_, later().pending_poll, CircuitBreaker::Permit{}};
  }
  const bool was_poll = done.poll;
  evidence.number = done.number;
  evidence.is_status_query = false;
  Classification c = services_->classifier->Classify(evidence, policy_->traits);
  // 1b. The response predicate, where the policy has one, may read the
  // answer and move a definite class towards a retry (never an ambiguous
  // one towards a retry, never a doubt away: ApplyResponsePredicate).
  if (policy_->response_predicate != nullptr && response.has_value()) {
    c = ApplyResponsePredicate(*policy_->response_predicate,
                               policy_->response_predicate_max_body_bytes, *response, evidence,
                               policy_->traits, c);
  }
  evidence.classification = c.cls;
  evidence.reason = c.reason;
  ReportToBreaker(policy_->circuit_breaker, done.permit(), c.cls, evidence.transport_status, now);

  // A resend sent as a poll counts against the attempts only if it was not
  // answered "in progress"; otherwise it stays a poll.
  if (was_poll) {  // a poll was scheduled: `later_` exists
    if (c.cls == AttemptClass::kInProgress) {
      --attempts_counted_;
    } else {
      --later_->polls;
    }
  }

  if (response.has_value()) result.last_response = std::move(response);
  result.last_transport_status = evidence.transport_status;
  CompleteEvidence(evidence, now);

  // A success settles the call: what it says of the history below cannot
  // change its outcome, so it is read only for the other classes.
  if (c.cls == AttemptClass::kSuccess) {
    services_->budget->OnSuccess(later().last_retry_receipt, now);
    if (maybe_effect_) result.resolved_by = ResolvedBy::kResponse;
    maybe_effect_ = false;  // this response (a replay, for a keyed request) settles it
    return Finish(Outcome::kSucceeded, StopReason::kSuccess, now);
  }

  // History: could this attempt have taken effect? The classifier says what
  // the evidence shows, whatever the request's idempotency; safe methods have
  // no effect at all.
  if (!policy_->traits.safe && MayHaveTakenEffect(c.cls)) maybe_effect_ = true;
  // The server holds the key for a person's decision: neither a poll nor a
  // resend can settle it.
  if (evidence.hints.key_state == KeyState::kPendingConfirmation && !policy_->traits.safe &&
      in_flight_count_ == 0) {
    maybe_effect_ = true;
    return FinishFailure(StopReason::kPendingConfirmation, now);
  }

  // A 410 for a key someone used before this call: its effect may exist.
  const bool expired_key = IsExpiredKeyAnswer(evidence);
  if (expired_key && policy_->traits.keyed && !policy_->key_minted && !policy_->traits.safe) {
    maybe_effect_ = true;
  }
  const ServerHints& hints = evidence.hints;

  switch (c.cls) {
    case AttemptClass::kPermanent:
    case AttemptClass::kPreconditionFailed: {
      // What the answer proves, read where a definite failure is settled.
      const Proof proof = ProofOfAnswer(evidence);
      const bool expired = expired_key && maybe_effect_;
      const StopReason reason =
          IsFencedAnswer(evidence) ? StopReason::kFenced : StopReason::kPermanentError;
      // Other copies in flight (hedges) were handed to the transport: they
      // may have taken effect, so this answer is final only once they are
      // back without doubt.
      const bool copies_in_flight = in_flight_count_ > 0 && !policy_->traits.safe;
      // Nothing before this answer may have taken effect: it is final.
      if (!maybe_effect_ && !copies_in_flight) return Finish(Outcome::kFailed, reason, now);
      if (proof == Proof::kNoEffect) {
        // The key's stored final answer (or its fence): the intent ended
        // without effect, whatever the earlier attempts left open.
        maybe_effect_ = false;
        result.resolved_by = ResolvedBy::kResponse;
        return Finish(Outcome::kFailed, reason, now);
      }
      // Not definite: the earlier doubt stands. Only status queries may
      // settle it from now on; a resend would get the same answer (or, after
      // `expired`, could execute the key a second time).
      Later& later = MutableLater();
      later.no_resend = true;
      if (!maybe_effect_) later.held_final = reason;  // only the copies in flight left doubt
      if (expired) later.unsettled_reason = StopReason::kKeyExpired;
      if (in_flight_count_ > 0 && !cancelled()) {
        CallAction none;
        none.kind = CallAction::Kind::kNone;
        return none;
      }
      if (cancelled()) return FinishFailure(StopReason::kCancelled, now);
      if (policy_->traits.keyed && policy_->has_status_query) {
        return ScheduleNext(Next::kStatusQuery, true, c.cls, hints, now);
      }
      return FinishFailure(later.unsettled_reason, now);
    }
    default:
      break;
  }
  // Another attempt is still in flight (a hedge): its answer may still
  // settle the call, so wait for it rather than retrying now.
  if (in_flight_count_ > 0 && !cancelled()) {
    CallAction none;
    none.kind = CallAction::Kind::kNone;
    return none;
  }
  // Cancelled while this attempt ran: stop before deciding how to go on. The
  // history (this attempt included) decides between FAILED and UNKNOWN.
  if (cancelled()) return FinishFailure(StopReason::kCancelled, now);
  if (hints.do_not_retry) return FinishFailure(StopReason::kServerDoNotRetry, now);

  switch (c.cls) {
    case AttemptClass::kAmbiguous:
    case AttemptClass::kUnavailableUnproven:
      // Doubt, whether the answer was lost or was an unmarked 503: an
      // idempotent request may simply be sent again (unless the classifier's
      // policy forbids it); the history keeps the doubt.
      if ((policy_->traits.idempotent || policy_->traits.safe) && !c.no_retry) {
        return ScheduleNext(Next::kAttempt, false, c.cls, hints, now);
      }
      if (policy_->traits.keyed && policy_->has_status_query) {
        return ScheduleNext(Next::kStatusQuery, true, c.cls, hints, now);
      }
      if (policy_->traits.keyed && (policy_->server_deduplicates || later().seen_in_progress)) {
        return ScheduleNext(Next::kAttempt, false, c.cls, hints, now);
      }
      return FinishFailure(c.cls == AttemptClass::kUnavailableUnproven
                               ? StopReason::kUnavailableUnresolved
                               : StopReason::kAmbiguousUnresolved,
                           now);
    case AttemptClass::kInProgress:
      MutableLater().seen_in_progress = true;
      return ScheduleNext(policy_->has_status_query ? Next::kStatusQuery : Next::kAttempt, true,
                          c.cls, hints, now);
    default:
      return ScheduleNext(Next::kAttempt, false, c.cls, hints, now);
  }
}

CallAction CallStateMachine::OnStatusAnswer(StatusAnswer answer, AttemptEvidence reported,
                                            std::optional<Response> response, TimePoint now) {
  if (finished_) return CallAction{};
  AttemptEvidence& evidence = Synced().evidence.emplace_back(std::move(reported));
  evidence.number = status_queries_;
  evidence.is_status_query = true;
  switch (answer) {
    case StatusAnswer::kFound:
      evidence.classification = AttemptClass::kSuccess;
      evidence.reason = "status query: found, the request took effect";
      break;
    case StatusAnswer::kNotFound:
      evidence.classification = AttemptClass::kRetryableNotDelivered;
      evidence.reason = "status query: not found (unfenced), no effect so far";
      break;
    case StatusAnswer::kProcessing:
      evidence.classification = AttemptClass::kInProgress;
      evidence.reason = "status query: still processing";
      break;
    case StatusAnswer::kStillUnknown:
      evidence.classification = AttemptClass::kAmbiguous;
      evidence.reason = "status query: no usable answer";
      break;
    case StatusAnswer::kCompletedWithError:
      evidence.classification = AttemptClass::kPermanent;
      evidence.reason = "status query: the key's stored final error, no effect";
      break;
    case StatusAnswer::kFenced:
      evidence.classification = AttemptClass::kPermanent;
      evidence.reason = "status query: fenced not found, no effect ever";
      break;
    case StatusAnswer::kExpired:
      evidence.classification = AttemptClass::kAmbiguous;
      evidence.reason = "status query: the key's record expired, the effect may exist";
      break;
    case StatusAnswer::kPendingConfirmation:
      evidence.classification = AttemptClass::kInProgress;
      evidence.reason = "status query: pending a person's decision";
      break;
  }
  if (later().query_permit.allowed) {
    // The host's health from the query's own exchange: an HTTP answer is
    // classified as a GET's would be (5xx, 408, 429: failure; any other
    // answer: the host is up); without one, a transport failure or "no
    // usable answer" is a failure.
    AttemptClass health = AttemptClass::kSuccess;
    if (evidence.http_status.has_value()) {
      RequestTraits get;
      get.safe = true;
      get.idempotent = true;
      health = services_->classifier->Classify(evidence, get).cls;
    } else if (answer == StatusAnswer::kStillUnknown) {
      health = AttemptClass::kAmbiguous;
    }
    ReportToBreaker(QueryBreaker(), later_->query_permit, health, evidence.transport_status, now);
    later_->query_permit = CircuitBreaker::Permit{};
  }
  // The stored evidence's: nothing is recorded after it until the next answer.
  out().last_transport_status = evidence.transport_status;
  CompleteEvidence(evidence, now);
  const ServerHints& hints = evidence.hints;

  switch (answer) {
    case StatusAnswer::kFound:
      services_->budget->OnSuccess(later().last_retry_receipt, now);
      maybe_effect_ = false;
      out().resolved_by_status_query = true;
      out().resolved_by = ResolvedBy::kStatusQuery;
      if (response.has_value()) out().last_response = std::move(response);
      return Finish(Outcome::kSucceeded, StopReason::kSuccess, now);
    case StatusAnswer::kCompletedWithError:
    case StatusAnswer::kFenced:
      // Definite: the intent has no effect and never will.
      maybe_effect_ = false;
      out().resolved_by_status_query = true;
      out().resolved_by = ResolvedBy::kStatusQuery;
      if (response.has_value()) out().last_response = std::move(response);
      return Finish(
          Outcome::kFailed,
          answer == StatusAnswer::kFenced ? StopReason::kFenced : StopReason::kPermanentError, now);
    case StatusAnswer::kNotFound:
      // The original never took effect (so far): resend it with the same key
      // through the ordinary checks. With no attempt left, or after a final
      // answer that a resend would only repeat, the original could still
      // arrive: fence the key if allowed, else the outcome stays unknown.
      if (later().no_resend || attempts_counted_ >= policy_->max_attempts) {
        if (policy_->fence_when_giving_up && !later().fence_sent && policy_->has_status_query) {
          MutableLater().pending_fence = true;
          return ScheduleNext(Next::kStatusQuery, true, AttemptClass::kAmbiguous, hints, now);
        }
        return FinishFailure(
            later().no_resend ? later().unsettled_reason : StopReason::kNotFoundNoAttemptsLeft,
            now);
      }
      return ScheduleNext(Next::kAttempt, false, AttemptClass::kRetryableNotDelivered, hints, now);
    case StatusAnswer::kExpired:
      // The server reaped the key's record: it cannot say whether the effect
      // happened, and it will not execute the key again. Never a resend.
      MutableLater().no_resend = true;
      later_->unsettled_reason = StopReason::kKeyExpired;
      return FinishFailure(StopReason::kKeyExpired, now);
    case StatusAnswer::kPendingConfirmation:
      // Only a person settles it now: polling would change nothing.
      maybe_effect_ = true;
      return FinishFailure(StopReason::kPendingConfirmation, now);
    case StatusAnswer::kProcessing:
      MutableLater().seen_in_progress = true;
      return ScheduleNext(Next::kStatusQuery, true, AttemptClass::kInProgress, hints, now);
    case StatusAnswer::kStillUnknown:
      return ScheduleNext(Next::kStatusQuery, true, AttemptClass::kAmbiguous, hints, now);
  }
  return FinishFailure(StopReason::kAmbiguousUnresolved, now);
}

}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/call_state_machine.h"

#include <utility>

#include "saferetry/cancellation.h"

namespace saferetry {

CallStateMachine::CallStateMachine(const CallPolicy& policy, RetryBudget* budget,
                                   const Classifier* classifier, Random* random,
                                   const CancellationToken* cancellation)
    : policy_(policy),
      budget_(budget),
      classifier_(classifier),
      random_(random),
      cancellation_(cancellation) {}

bool CallStateMachine::Cancelled() const {
  return cancellation_ != nullptr && cancellation_->IsCancelled();
}

CallAction CallStateMachine::Start(TimePoint now) {
  start_ = now;
  result_.status = absl::OkStatus();
  pending_ = Next::kAttempt;
  return SendNow(now);
}

CallAction CallStateMachine::SendNow(TimePoint now) {
  if (Cancelled()) return FinishFailure(StopReason::kCancelled, now);
  const Duration timeout = AttemptTimeout(policy_.deadline, now, policy_.deadline_options);
  // No attempt starts that could not do useful work before the deadline (a
  // wait that overslept, or a deadline that was already too close at start).
  if (!policy_.deadline.is_infinite() && timeout < policy_.deadline_options.min_useful_attempt) {
    return FinishFailure(StopReason::kDeadlineExceeded, now);
  }
  CallAction action;
  if (pending_ == Next::kAttempt) {
    action.kind = CallAction::Kind::kSendAttempt;
    action.number = ++result_.attempts;
  } else {
    action.kind = CallAction::Kind::kSendStatusQuery;
    action.number = ++result_.status_queries;
  }
  action.timeout = timeout;
  action.remaining = policy_.deadline.Remaining(now);
  return action;
}

CallAction CallStateMachine::OnAttemptDone(AttemptEvidence evidence,
                                           std::optional<Response> response, TimePoint now) {
  evidence.number = result_.attempts;
  evidence.is_status_query = false;
  const Classification c = classifier_->Classify(evidence, policy_.traits);
  evidence.classification = c.cls;
  evidence.reason = c.reason;

  // History: could this attempt have taken effect? Asked of the classifier as
  // if the request were not idempotent, because an idempotent request that
  // may have applied is retried as transient but still leaves an effect to be
  // unsure about. Safe methods have no effect at all.
  if (!policy_.traits.safe) {
    AttemptClass raw = c.cls;
    if (policy_.traits.idempotent) {
      RequestTraits as_unsafe = policy_.traits;
      as_unsafe.idempotent = false;
      raw = classifier_->Classify(evidence, as_unsafe).cls;
    }
    if (raw == AttemptClass::kAmbiguous || raw == AttemptClass::kInProgress) maybe_effect_ = true;
  }

  result_.last_transport_status = evidence.transport_status;
  if (response.has_value()) result_.last_response = std::move(response);
  evidence.deadline_remaining = policy_.deadline.Remaining(now);
  evidence.budget_balance = budget_->Balance(now);
  const ServerHints hints = evidence.hints;
  result_.evidence.push_back(std::move(evidence));

  switch (c.cls) {
    case AttemptClass::kSuccess:
      budget_->OnSuccess(last_retry_cost_, now);
      maybe_effect_ = false;  // this response (a replay, for a keyed request) settles it
      return Finish(Outcome::kSucceeded, StopReason::kSuccess, now);
    case AttemptClass::kPermanent:
    case AttemptClass::kPreconditionFailed:
      return FinishFailure(StopReason::kPermanentError, now);
    default:
      break;
  }
  // Cancelled while this attempt ran: stop before deciding how to go on. The
  // history (this attempt included) decides between FAILED and UNKNOWN.
  if (Cancelled()) return FinishFailure(StopReason::kCancelled, now);
  if (hints.do_not_retry) return FinishFailure(StopReason::kServerDoNotRetry, now);

  switch (c.cls) {
    case AttemptClass::kAmbiguous:
      if (policy_.traits.keyed && policy_.has_status_query) {
        return ScheduleNext(Next::kStatusQuery, c.cls, hints, now);
      }
      if (policy_.traits.keyed && (policy_.server_deduplicates || seen_in_progress_)) {
        return ScheduleNext(Next::kAttempt, c.cls, hints, now);
      }
      return FinishFailure(StopReason::kAmbiguousUnresolved, now);
    case AttemptClass::kInProgress:
      seen_in_progress_ = true;
      return ScheduleNext(policy_.has_status_query ? Next::kStatusQuery : Next::kAttempt, c.cls,
                          hints, now);
    default:
      return ScheduleNext(Next::kAttempt, c.cls, hints, now);
  }
}

CallAction CallStateMachine::OnStatusAnswer(StatusAnswer answer, AttemptEvidence evidence,
                                            std::optional<Response> response, TimePoint now) {
  evidence.number = result_.status_queries;
  evidence.is_status_query = true;
  switch (answer) {
    case StatusAnswer::kFound:
      evidence.classification = AttemptClass::kSuccess;
      evidence.reason = "status query: found, the request took effect";
      break;
    case StatusAnswer::kNotFound:
      evidence.classification = AttemptClass::kRetryableNotDelivered;
      evidence.reason = "status query: not found, the request never took effect";
      break;
    case StatusAnswer::kProcessing:
      evidence.classification = AttemptClass::kInProgress;
      evidence.reason = "status query: still processing";
      break;
    case StatusAnswer::kStillUnknown:
      evidence.classification = AttemptClass::kAmbiguous;
      evidence.reason = "status query: no usable answer";
      break;
  }
  result_.last_transport_status = evidence.transport_status;
  evidence.deadline_remaining = policy_.deadline.Remaining(now);
  evidence.budget_balance = budget_->Balance(now);
  const ServerHints hints = evidence.hints;
  result_.evidence.push_back(std::move(evidence));

  switch (answer) {
    case StatusAnswer::kFound:
      budget_->OnSuccess(last_retry_cost_, now);
      maybe_effect_ = false;
      result_.resolved_by_status_query = true;
      if (response.has_value()) result_.last_response = std::move(response);
      return Finish(Outcome::kSucceeded, StopReason::kSuccess, now);
    case StatusAnswer::kNotFound:
      // The original never took effect (so far): resend it with the same key
      // through the ordinary checks. With no attempt left the original could
      // still arrive, so the outcome stays unknown.
      if (result_.attempts >= policy_.max_attempts) {
        return Finish(Outcome::kUnknown, StopReason::kNotFoundNoAttemptsLeft, now);
      }
      return ScheduleNext(Next::kAttempt, AttemptClass::kRetryableNotDelivered, hints, now);
    case StatusAnswer::kProcessing:
      seen_in_progress_ = true;
      return ScheduleNext(Next::kStatusQuery, AttemptClass::kInProgress, hints, now);
    case StatusAnswer::kStillUnknown:
      return ScheduleNext(Next::kStatusQuery, AttemptClass::kAmbiguous, hints, now);
  }
  return FinishFailure(StopReason::kAmbiguousUnresolved, now);
}

CallAction CallStateMachine::ScheduleNext(Next next, AttemptClass cls, const ServerHints& hints,
                                          TimePoint now) {
  if (Cancelled()) return FinishFailure(StopReason::kCancelled, now);
  if (next == Next::kAttempt && result_.attempts >= policy_.max_attempts) {
    return FinishFailure(StopReason::kAttemptsExhausted, now);
  }
  if (next == Next::kStatusQuery && result_.status_queries >= policy_.max_status_queries) {
    return FinishFailure(StopReason::kAmbiguousUnresolved, now);
  }
  const BudgetDecision decision = budget_->OnFailureTryRetry(cls, now);
  if (!decision.allowed) return FinishFailure(StopReason::kBudgetExhausted, now);
  last_retry_cost_ = decision.cost;
  result_.evidence.back().budget_balance = budget_->Balance(now);

  ++waits_;
  Duration delay;
  bool from_hint = false;
  if (hints.retry_after.has_value()) {
    delay = *hints.retry_after;
    from_hint = true;
  } else {
    delay = ComputeBackoff(policy_.backoff, waits_, previous_delay_, random_->Uniform());
  }
  previous_delay_ = delay;
  // A wait that would leave no room for a useful attempt stops now rather
  // than sleeping into the deadline (this is also how a Retry-After past the
  // deadline ends the call at once).
  if (!WaitFits(policy_.deadline, now, delay, policy_.deadline_options)) {
    return FinishFailure(StopReason::kDeadlineExceeded, now);
  }
  pending_ = next;
  AttemptEvidence& last = result_.evidence.back();
  last.delay_after = delay;
  last.delay_from_server_hint = from_hint;
  CallAction action;
  action.kind = CallAction::Kind::kWait;
  action.delay = delay;
  action.delay_from_server_hint = from_hint;
  return action;
}

CallAction CallStateMachine::OnWaitOver(TimePoint now) { return SendNow(now); }

CallAction CallStateMachine::OnCancelled(TimePoint now) {
  if (finished_) return CallAction{};
  return FinishFailure(StopReason::kCancelled, now);
}

CallAction CallStateMachine::FinishFailure(StopReason reason, TimePoint now) {
  return Finish(maybe_effect_ ? Outcome::kUnknown : Outcome::kFailed, reason, now);
}

CallAction CallStateMachine::Finish(Outcome outcome, StopReason reason, TimePoint now) {
  finished_ = true;
  result_.outcome = outcome;
  result_.stop_reason = reason;
  result_.elapsed = now - start_;
  CallAction action;
  action.kind = CallAction::Kind::kFinish;
  return action;
}

}  // namespace saferetry

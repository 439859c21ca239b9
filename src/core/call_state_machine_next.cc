// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The state machine's next step after an answer (rule 6 of docs/design.md:
// the cap, the delay, the deadline, the budget) and how a call ends.

#include <algorithm>
#include <utility>

#include "core/call_state_machine_later.h"
#include "saferetry/call_state_machine.h"
#include "saferetry/retry_policy.h"

namespace saferetry {

CallAction CallStateMachine::OutOfTime(TimePoint now) {
  // Reached the deadline (or its margin) during an attempt, a query or a
  // wait, versus time left that is too short to be useful.
  if (!policy_->deadline.is_infinite() &&
      policy_->deadline.Remaining(now) <= policy_->deadline_options->margin) {
    return FinishFailure(StopReason::kDeadlineExceeded, now);
  }
  return FinishFailure(StopReason::kNoTimeForUsefulAttempt, now);
}

CallAction CallStateMachine::ScheduleNext(Next next, bool poll, AttemptClass cls,
                                          const ServerHints& hints, TimePoint now) {
  if (cancelled()) return FinishFailure(StopReason::kCancelled, now);
  // 0. After a final answer that was not definite only status queries may
  //    follow: a resend would repeat that answer, or execute an expired key.
  if (next == Next::kAttempt && later().no_resend) {
    // A final answer came while copies were in flight, and they came back
    // without doubt: that answer stands.
    if (later().held_final.has_value() && !maybe_effect_)
      return Finish(Outcome::kFailed, *later().held_final, now);
    if (!policy_->traits.keyed || !policy_->has_status_query) {
      return FinishFailure(later().unsettled_reason, now);
    }
    next = Next::kStatusQuery;
    poll = true;
  }
  // 1. Caps: a poll counts against the status-query cap, a send of the
  //    request against the attempts.
  if (poll) {
    if (policy_->max_status_queries <= 0) {
      policy_->max_status_queries = DefaultMaxStatusQueries(total_, *policy_->poll_backoff);
    }
    if (later().polls >= policy_->max_status_queries) {
      return FinishFailure(StopReason::kStatusQueriesExhausted, now);
    }
  } else if (attempts_counted_ >= policy_->max_attempts) {
    return FinishFailure(StopReason::kAttemptsExhausted, now);
  }

  // 2. The delay: the backoff (retries) or the poll pacing (polls), raised
  //    to the server's Retry-After, which is a floor (docs/adr/0014): the
  //    backoff's jitter survives above it. Drawing the sample does not commit
  //    to the retry. A hint longer than the configured maximum stops the
  //    call: coming back sooner would disregard the server's "not before".
  if (hints.retry_after_above_max) return FinishFailure(StopReason::kRetryAfterTooLong, now);
  // From here the call may wait: what a wait needs is kept apart.
  Later& later = MutableLater();
  Duration delay;
  if (poll) {
    delay = ComputeBackoff(*policy_->poll_backoff, ++later.poll_waits, later.previous_poll_delay,
                           services_->random->Uniform());
    later.previous_poll_delay = delay;
  } else {
    ++later.retry_waits;
    const double u = services_->random->Uniform();
    delay = std::max(Duration::zero(),
                     policy_->backoff->Delay(later.retry_waits, later.previous_delay, u));
    later.previous_delay = delay;
  }
  const bool from_hint = hints.retry_after.has_value();
  const Duration hint = hints.retry_after.value_or(Duration::zero());
  delay = std::max(delay, hint);

  // 3. Time. A wait that would leave no room for a useful send is shortened
  //    to the longest that does, never below the server's Retry-After: when
  //    the hint alone does not fit, the call ends.
  if (!WaitFits(policy_->deadline, now, delay, *policy_->deadline_options)) {
    if (from_hint && !WaitFits(policy_->deadline, now, hint, *policy_->deadline_options)) {
      return FinishFailure(StopReason::kRetryAfterBeyondDeadline, now);
    }
    if (!WaitFits(policy_->deadline, now, Duration::zero(), *policy_->deadline_options)) {
      return OutOfTime(now);
    }
    delay = std::max(hint, policy_->deadline.at() - now -
                               policy_->deadline_options->min_useful_attempt -
                               policy_->deadline_options->margin);
  }

  // 4. The budget, charged now that the send will happen (refunded if the
  //    call is cancelled during the wait). Polls draw from the status-query
  //    allowance, retries from the retry budget.
  RetryBudget* charged = services_->budget;
  if (poll) charged = services_->query_budget;
  if (charged != nullptr) {
    BudgetFailure failure;
    failure.cls = cls;
    failure.throttled = IsThrottling(out().evidence.back());
    failure.use = poll ? BudgetUse::kStatusQuery : BudgetUse::kRetry;
    const BudgetDecision decision = charged->OnFailure(failure, now);
    if (!decision.allowed) {
      // The budget's own name for the refusal; one that gives none is
      // recorded as "refused" so that traces and metrics always have a name.
      out().budget_refusal = decision.refusal.empty() ? "refused" : std::string(decision.refusal);
      return FinishFailure(StopReason::kBudgetExhausted, now);
    }
    if (charged == services_->budget) later.last_retry_receipt = decision.receipt;
    later.pending_charge = decision.receipt;
    later.pending_charge_budget = charged;
  }
  out().evidence.back().budget_balance = services_->budget->Balance(now);

  pending_ = next;
  later.pending_poll = poll && next == Next::kAttempt;
  if (next == Next::kAttempt) later.pending_fence = false;
  later.wake_due = now + delay;
  AttemptEvidence& last = out().evidence.back();
  last.delay_after = delay;
  last.delay_from_server_hint = from_hint;
  CallAction action;
  action.kind = CallAction::Kind::kWait;
  action.delay = delay;
  action.delay_from_server_hint = from_hint;
  return action;
}

CallAction CallStateMachine::OnWaitOver(TimePoint now) { return SendNow(now); }

void CallStateMachine::RefundPendingCharge(TimePoint now) {
  if (later_ == nullptr || later_->pending_charge_budget == nullptr) return;
  std::exchange(later_->pending_charge_budget, nullptr)->Refund(later_->pending_charge, now);
}

CallAction CallStateMachine::OnCancelled(TimePoint now) {
  if (finished_) return CallAction{};
  RefundPendingCharge(now);
  return FinishFailure(StopReason::kCancelled, now);
}

CallAction CallStateMachine::FinishFailure(StopReason reason, TimePoint now) {
  // Copies still in flight (hedges the driver will cancel) were handed to the
  // transport: they may have taken effect.
  const bool doubt = maybe_effect_ || (in_flight_count_ > 0 && !policy_->traits.safe);
  return Finish(doubt ? Outcome::kUnknown : Outcome::kFailed, reason, now);
}

CircuitBreaker* CallStateMachine::QueryBreaker() const {
  return policy_->status_query_circuit_breaker != nullptr ? policy_->status_query_circuit_breaker
                                                          : policy_->circuit_breaker;
}

void CallStateMachine::ReportToBreaker(CircuitBreaker* breaker,
                                       const CircuitBreaker::Permit& permit, AttemptClass cls,
                                       const absl::Status& transport_status, TimePoint now) {
  if (breaker == nullptr || !permit.allowed) return;
  if (absl::IsCancelled(transport_status)) {
    breaker->OnAbandoned(permit, now);  // the caller's doing, not the host's
    return;
  }
  breaker->Report(permit, IsHostFailure(cls, transport_status), now);
}

CallAction CallStateMachine::Finish(Outcome outcome, StopReason reason, TimePoint now) {
  // Sends still in flight (losing hedges, a send cut short by a
  // cancellation) will not be reported: free their half-open probe slots.
  for (int i = 0; i < in_flight_count_; ++i) {
    const InFlight& f = Slot(i);
    if (f.permit_allowed && policy_->circuit_breaker != nullptr) {
      policy_->circuit_breaker->OnAbandoned(f.permit(), now);
    }
  }
  if (later_ != nullptr) {
    if (later_->query_permit.allowed && QueryBreaker() != nullptr) {
      QueryBreaker()->OnAbandoned(later_->query_permit, now);
    }
    later_->query_permit = CircuitBreaker::Permit{};
  }
  CallResult& r = out();
  finished_ = true;
  r.attempts = attempts_;
  r.status_queries = status_queries_;
  r.outcome = outcome;
  r.stop_reason = reason;
  // What the outcome rests on (ResolvedBy): the status answer set it; else a
  // response to the request, when there is one; UNKNOWN rests on nothing.
  if (outcome == Outcome::kUnknown) {
    r.resolved_by = ResolvedBy::kNone;
  } else if (r.resolved_by == ResolvedBy::kNone && r.last_response.has_value()) {
    r.resolved_by = ResolvedBy::kResponse;
  }
  r.elapsed = now - start_;
  CallAction action;
  action.kind = CallAction::Kind::kFinish;
  return action;
}

}  // namespace saferetry

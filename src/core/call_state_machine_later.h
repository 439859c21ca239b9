// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Not API: the state machine's retry state, shared by its two source files
// (call_state_machine.cc: the events; call_state_machine_next.cc: the next
// step and how a call ends).

#ifndef SAFERETRY_SRC_CORE_CALL_STATE_MACHINE_LATER_H_
#define SAFERETRY_SRC_CORE_CALL_STATE_MACHINE_LATER_H_

#include <array>
#include <optional>

#include "saferetry/call_state_machine.h"

namespace saferetry {

// The retry state: what a call needs only once it waits, polls, hedges or
// meets a final answer it cannot trust.
struct CallStateMachine::Later {
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

}  // namespace saferetry

#endif  // SAFERETRY_SRC_CORE_CALL_STATE_MACHINE_LATER_H_

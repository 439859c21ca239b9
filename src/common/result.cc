// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/result.h"

namespace saferetry {

std::string_view OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kSucceeded:
      return "SUCCEEDED";
    case Outcome::kFailed:
      return "FAILED";
    case Outcome::kUnknown:
      return "UNKNOWN";
  }
  return "UNKNOWN";
}

std::string_view StopReasonName(StopReason reason) {
  switch (reason) {
    case StopReason::kSuccess:
      return "success";
    case StopReason::kPermanentError:
      return "permanent_error";
    case StopReason::kAttemptsExhausted:
      return "attempts_exhausted";
    case StopReason::kStatusQueriesExhausted:
      return "status_queries_exhausted";
    case StopReason::kDeadlineExceeded:
      return "deadline_exceeded";
    case StopReason::kNoTimeForUsefulAttempt:
      return "no_time_for_useful_attempt";
    case StopReason::kBudgetExhausted:
      return "budget_exhausted";
    case StopReason::kRetryAfterBeyondDeadline:
      return "retry_after_beyond_deadline";
    case StopReason::kAmbiguousUnresolved:
      return "ambiguous_unresolved";
    case StopReason::kUnavailableUnresolved:
      return "unavailable_unresolved";
    case StopReason::kNotFoundNoAttemptsLeft:
      return "not_found_no_attempts_left";
    case StopReason::kFenced:
      return "fenced";
    case StopReason::kKeyExpired:
      return "key_expired";
    case StopReason::kAnswerNotDefinite:
      return "answer_not_definite";
    case StopReason::kRetryAfterTooLong:
      return "retry_after_too_long";
    case StopReason::kPendingConfirmation:
      return "pending_confirmation";
    case StopReason::kCancelled:
      return "cancelled";
    case StopReason::kServerDoNotRetry:
      return "server_do_not_retry";
    case StopReason::kCircuitOpen:
      return "circuit_open";
    case StopReason::kTooManyCalls:
      return "too_many_calls";
    case StopReason::kJournalUnavailable:
      return "journal_unavailable";
    case StopReason::kInvalidArgument:
      return "invalid_argument";
  }
  return "invalid_argument";
}

std::string_view DeliveryName(Delivery delivery) {
  switch (delivery) {
    case Delivery::kNotSent:
      return "not_sent";
    case Delivery::kMaybeDelivered:
      return "maybe_delivered";
    case Delivery::kResponseReceived:
      return "response_received";
  }
  return "maybe_delivered";
}

std::string_view AttemptClassName(AttemptClass cls) {
  switch (cls) {
    case AttemptClass::kSuccess:
      return "success";
    case AttemptClass::kPermanent:
      return "permanent";
    case AttemptClass::kPreconditionFailed:
      return "precondition_failed";
    case AttemptClass::kInProgress:
      return "in_progress";
    case AttemptClass::kRetryableNotDelivered:
      return "retryable_not_delivered";
    case AttemptClass::kRetryableTransient:
      return "retryable_transient";
    case AttemptClass::kAmbiguous:
      return "ambiguous";
    case AttemptClass::kUnavailableUnproven:
      return "unavailable_unproven";
  }
  return "ambiguous";
}

std::string_view ResolvedByName(ResolvedBy by) {
  switch (by) {
    case ResolvedBy::kStatusQuery:
      return "status_query";
    case ResolvedBy::kResponse:
      return "response";
    case ResolvedBy::kNone:
      break;
  }
  return "";
}

std::string_view PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kNone:
      return "";
    case Phase::kDns:
      return "dns";
    case Phase::kConnect:
      return "connect";
    case Phase::kTls:
      return "tls";
    case Phase::kRequestWrite:
      return "request_write";
    case Phase::kFirstByte:
      return "first_byte";
    case Phase::kTransfer:
      return "transfer";
  }
  return "";
}

Duration PhaseTimings::Spent(Phase phase) const {
  // Each phase ends at its stamp and starts at the latest stamp before it
  // (a kept-alive connection has no dns, connect or tls stamp: its request
  // write starts at the attempt's start).
  const Duration stamps[] = {dns, connect, tls, request_written, first_byte};
  int index = 0;
  switch (phase) {
    case Phase::kNone:
      return Duration(0);
    case Phase::kTransfer:
      return first_byte > Duration(0) && total > first_byte ? total - first_byte : Duration(0);
    case Phase::kDns:
      index = 0;
      break;
    case Phase::kConnect:
      index = 1;
      break;
    case Phase::kTls:
      index = 2;
      break;
    case Phase::kRequestWrite:
      index = 3;
      break;
    case Phase::kFirstByte:
      index = 4;
      break;
  }
  const Duration end = stamps[index];
  if (end <= Duration(0)) return Duration(0);
  Duration start(0);
  for (int i = 0; i < index; ++i) {
    if (stamps[i] > start) start = stamps[i];
  }
  return end > start ? end - start : Duration(0);
}

}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The decisions of one call, with no I/O. A driver feeds events in and
// performs the actions that come out; the blocking `Client` and any event-loop
// driver share this machine, and so does the policy simulator.
//
//   events in                          actions out
//   Start(now)                         SendAttempt(number, timeout, remaining)
//   OnAttemptDone(evidence, response)  Wait(delay, from_server_hint)
//   OnWaitOver(now)                    SendStatusQuery(number, timeout, remaining)
//   OnStatusAnswer(answer, evidence)   Finish  -> TakeResult()
//   OnCancelled(now)
//
// Order of checks after an attempt (docs/design.md):
//   1. classify;
//   2. success -> refund the budget -> Finish(SUCCEEDED);
//   3. permanent / precondition -> Finish, no charge;
//      server says do-not-retry -> Finish, no charge;
//   4. ambiguous -> idempotent: retry | keyed + status query: query |
//      keyed + (server deduplicates or 409 seen): same-key resend |
//      else Finish(UNKNOWN, kAmbiguousUnresolved);
//   5. in progress (409) -> poll: query if configured, else same-key resend;
//   6. next step: cancelled? -> attempts (or queries) left? -> budget? ->
//      delay = server hint or backoff -> wait + minimum attempt fits the
//      deadline? -> Wait(delay) -> send with min(cap, remaining - margin).
// History decides the outcome: once any attempt may have taken effect, only a
// success or a "found" status answer avoids kUnknown.

#ifndef SAFERETRY_CALL_STATE_MACHINE_H_
#define SAFERETRY_CALL_STATE_MACHINE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "saferetry/backoff.h"
#include "saferetry/classifier.h"
#include "saferetry/deadline.h"
#include "saferetry/random.h"
#include "saferetry/result.h"
#include "saferetry/retry_budget.h"
#include "saferetry/status_query.h"

namespace saferetry {

class CancellationToken;

/// The hard cap on attempts (and on status queries) per call; larger values
/// are clamped.
inline constexpr int kMaxAttemptsHardCap = 10;

/// Everything the machine needs to know about one call. Validated by the
/// client; the machine trusts it.
struct CallPolicy {
  /// Sends of the request, 1..kMaxAttemptsHardCap.
  int max_attempts = 3;
  /// Status queries, 1..kMaxAttemptsHardCap.
  int max_status_queries = 5;
  BackoffParams backoff;
  DeadlineOptions deadline_options;
  Deadline deadline;
  RequestTraits traits;
  /// A status query can be sent (the call is keyed and has one).
  bool has_status_query = false;
  /// The caller declares that the server deduplicates keys.
  bool server_deduplicates = false;
};

/// What the driver must do next.
struct CallAction {
  enum class Kind { kSendAttempt, kWait, kSendStatusQuery, kFinish };
  Kind kind = Kind::kFinish;
  /// Attempt or status-query number, 1-based.
  int number = 0;
  /// For sends: the attempt timeout.
  Duration timeout{0};
  /// For sends: deadline remaining when the send starts (`Duration::max()`
  /// when there is no deadline), for the propagation header.
  Duration remaining{0};
  /// For waits.
  Duration delay{0};
  bool delay_from_server_hint = false;
};

/// One call's decisions. Not thread-safe (one call, one thread at a time);
/// the budget it is given is.
class CallStateMachine {
 public:
  /// `budget`, `classifier` and `random` must outlive the machine;
  /// `cancellation` may be null.
  CallStateMachine(const CallPolicy& policy, RetryBudget* budget, const Classifier* classifier,
                   Random* random, const CancellationToken* cancellation = nullptr);

  CallAction Start(TimePoint now);
  /// The attempt announced by the last kSendAttempt finished. `evidence`
  /// carries start/end, delivery, transport status, HTTP status and hints;
  /// the machine fills number and classification.
  CallAction OnAttemptDone(AttemptEvidence evidence, std::optional<Response> response,
                           TimePoint now);
  CallAction OnWaitOver(TimePoint now);
  CallAction OnStatusAnswer(StatusAnswer answer, AttemptEvidence evidence,
                            std::optional<Response> response, TimePoint now);
  CallAction OnCancelled(TimePoint now);

  bool finished() const { return finished_; }
  /// The result; valid once an action of kind kFinish was returned.
  CallResult TakeResult() { return std::move(result_); }
  /// Read-only view of the result being built (evidence so far).
  const CallResult& result() const { return result_; }

 private:
  enum class Next { kAttempt, kStatusQuery };
  CallAction Finish(Outcome outcome, StopReason reason, TimePoint now);
  CallAction FinishFailure(StopReason reason, TimePoint now);
  CallAction ScheduleNext(Next next, AttemptClass cls, const ServerHints& hints, TimePoint now);
  CallAction SendNow(TimePoint now);
  bool Cancelled() const;

  CallPolicy policy_;
  RetryBudget* budget_;
  const Classifier* classifier_;
  Random* random_;
  const CancellationToken* cancellation_;

  CallResult result_;
  TimePoint start_{};
  bool finished_ = false;
  bool maybe_effect_ = false;  // some attempt may have taken effect, unresolved
  bool seen_in_progress_ = false;
  Next pending_ = Next::kAttempt;
  int waits_ = 0;
  Duration previous_delay_{0};
  std::int64_t last_retry_cost_ = 0;
};

}  // namespace saferetry

#endif  // SAFERETRY_CALL_STATE_MACHINE_H_

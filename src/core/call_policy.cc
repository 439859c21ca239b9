// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/call_policy.h"

#include <algorithm>

#include "saferetry/retry_policy.h"

namespace saferetry {

RatioBudgetOptions DefaultStatusQueryAllowance() {
  RatioBudgetOptions o;
  o.percent = 0.5;
  o.min_per_second = 20;
  o.window = std::chrono::seconds(10);
  return o;
}

TimePlanKind ChooseTimePlanKind(const CallPolicy& policy) {
  if (policy.traits.keyed && !policy.traits.idempotent && !policy.traits.safe &&
      (policy.has_status_query || policy.server_deduplicates)) {
    return TimePlanKind::kResolve;
  }
  if ((policy.traits.idempotent || policy.traits.safe) && policy.max_attempts > 1) {
    return TimePlanKind::kRetry;
  }
  return TimePlanKind::kSingle;
}

int DefaultMaxStatusQueries(Duration total, const BackoffParams& poll_backoff) {
  constexpr int kWithoutDeadline = 20;
  constexpr int kMinimum = 5;
  constexpr int kSlack = 2;
  constexpr Duration kShortestCounted = std::chrono::milliseconds(1);
  if (total == Duration::max()) return kWithoutDeadline;
  // Counted at the pacing's shortest waits (the jitter's lower bound, u = 0),
  // so that however the samples fall the cap is not reached before the
  // deadline: polls are paced until the deadline, the cap only bounds them.
  int count = 0;
  Duration spent{0};
  Duration previous{0};
  while (count < kMaxStatusQueriesHardCap) {
    const Duration d =
        std::max(ComputeBackoff(poll_backoff, count + 1, previous, 0.0), kShortestCounted);
    if (spent + d > total) break;
    spent += d;
    previous = d;
    ++count;
  }
  return std::clamp(count + kSlack, kMinimum, kMaxStatusQueriesHardCap);
}

}  // namespace saferetry

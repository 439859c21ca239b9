// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Deadlines on the steady clock, per-attempt timeouts, and propagation of the
// remaining time to the next service in a header so deadlines chain:
//
//   caller (2 s) --[X-Request-Timeout-Ms: 1700]--> orders --[... 1400]--> stock
//
// @code
//   Deadline d = Deadline::After(clock->Now(), std::chrono::seconds(2));
//   Duration timeout = AttemptTimeout(d, clock->Now(), DeadlineOptions{});
// @endcode

#ifndef SAFERETRY_DEADLINE_H_
#define SAFERETRY_DEADLINE_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "saferetry/clock.h"

namespace saferetry {

/// The default header that carries the remaining time in milliseconds.
inline constexpr std::string_view kDefaultDeadlineHeader = "X-Request-Timeout-Ms";

/// A point on the steady clock after which no attempt may run. Infinite by
/// default. A deadline at `TimePoint::max()` (one that `After` saturated to
/// it) is the infinite one: no clock reaches it.
class Deadline {
 public:
  /// No deadline.
  Deadline() = default;
  static Deadline Infinite() { return Deadline(); }
  static Deadline At(TimePoint at) { return Deadline(at); }
  /// `now + timeout`, saturating.
  static Deadline After(TimePoint now, Duration timeout);

  bool is_infinite() const { return at_ == TimePoint::max(); }
  /// The expiry; `TimePoint::max()` when infinite.
  TimePoint at() const { return at_; }
  /// Time left at `now`, never negative; `Duration::max()` when infinite.
  Duration Remaining(TimePoint now) const {
    if (is_infinite()) return Duration::max();
    const Duration::rep at = at_.time_since_epoch().count();
    const Duration::rep n = now.time_since_epoch().count();
    if (n >= at) return Duration::zero();
    // Saturating: from a reading far before it, a deadline is all of time away.
    if (n < 0 && at > std::numeric_limits<Duration::rep>::max() + n) return Duration::max();
    return Duration(at - n);
  }
  bool Expired(TimePoint now) const { return !is_infinite() && now >= at_; }

 private:
  explicit Deadline(TimePoint at) : at_(at) {}
  // One word, not an optional: the infinite deadline is the end of time.
  TimePoint at_ = TimePoint::max();
};

/// How attempts are fitted under a deadline. Defaults: margin 10 ms, minimum
/// useful attempt 50 ms, attempt timeout and resolution window chosen by the
/// call's time plan (see `TimePlan`).
struct DeadlineOptions {
  /// Kept back from every attempt for the caller to handle the answer. >= 0.
  Duration margin = std::chrono::milliseconds(10);
  /// An attempt (or status query) shorter than this is not worth starting.
  /// > 0.
  Duration min_useful_attempt = std::chrono::milliseconds(50);
  /// The attempt timeout: when set, every attempt and status query gets at
  /// most this (and never more than remaining - margin). When unset, the
  /// time plan chooses: half of the call for retryable requests, the call
  /// less the resolution window for keyed writes that can be resolved.
  std::optional<Duration> attempt_cap;
  /// The time kept back after an attempt of a keyed, non-idempotent call to
  /// resolve it if it ends ambiguous (status queries or a deduplicated
  /// resend). When unset: 30 % of the call's time, at least
  /// `min_useful_attempt + margin`. Zero disables the reservation. >= 0.
  std::optional<Duration> resolution_window;
};

/// What a call must keep time for after an attempt that hangs.
enum class TimePlanKind {
  /// Nothing can follow a hung attempt (a single attempt, or an ambiguous
  /// write that cannot be resolved): the attempt may use all the time.
  kSingle,
  /// A retryable request (idempotent, more than one attempt): each attempt
  /// gets at most half of the call's time, so a hung one can be retried.
  kRetry,
  /// A keyed non-idempotent request that can be resolved: every attempt
  /// ends before the resolution window, which is kept for status queries or
  /// a same-key resend.
  kResolve,
};

/// The time plan of one call, fixed at its start (docs/adr/0005-time-plan.md).
///
/// With the defaults (margin m = 10 ms, minimum useful attempt u = 50 ms) and
/// a call of T:
///   kRetry:   per-attempt cap = max(u, (T - m) / 2)
///   kResolve: window W = max(30 % of T, u + m); every attempt ends by
///             deadline - W - m while that leaves at least u; later
///             attempts get what remains. Below T = 2u + 2m (120 ms) nothing
///             can be reserved and the attempt gets T - m.
/// A caller's `attempt_cap` replaces the kRetry cap and is applied on top of
/// the kResolve window; a caller's `resolution_window` replaces W.
struct TimePlan {
  TimePlanKind kind = TimePlanKind::kSingle;
  /// Upper bound of one attempt (`Duration::max()`: none).
  Duration attempt_cap = Duration::max();
  /// The resolution window (kResolve; zero otherwise or when it did not fit).
  Duration reserve{0};
};

/// The plan for a call of `total` (`Duration::max()` for no deadline: no
/// reservation and no cap beyond `options.attempt_cap`).
TimePlan MakeTimePlan(TimePlanKind kind, Duration total, const DeadlineOptions& options);

/// The timeout of an attempt sent at `now` under `plan`: remaining - margin,
/// capped by the plan and, for kResolve, ending before the window when at
/// least `min_useful_attempt` is left that way. Never negative.
Duration PlannedAttemptTimeout(const TimePlan& plan, const Deadline& deadline, TimePoint now,
                               const DeadlineOptions& options);

/// The timeout of a status query sent at `now`: half of remaining - margin
/// (at least `min_useful_attempt`, so a hung query leaves time for another),
/// or all of it when less than two useful attempts remain; capped by
/// `attempt_cap`. Never negative.
Duration StatusQueryTimeout(const Deadline& deadline, TimePoint now,
                            const DeadlineOptions& options);

/// InvalidArgument naming "margin", "min_useful_attempt", "attempt_cap" or
/// "resolution_window".
absl::Status ValidateDeadlineOptions(const DeadlineOptions& options);

/// min(attempt_cap, remaining - margin), never negative. With an infinite
/// deadline and no cap, `Duration::max()`.
Duration AttemptTimeout(const Deadline& deadline, TimePoint now, const DeadlineOptions& options);

/// Does "wait `delay`, then a minimum useful attempt" fit before the deadline?
/// True iff now + delay + min_useful_attempt + margin <= deadline.
bool WaitFits(const Deadline& deadline, TimePoint now, Duration delay,
              const DeadlineOptions& options);

/// The header value for `remaining`: whole milliseconds, rounded down,
/// never negative ("1500").
std::string EncodeDeadlineHeader(Duration remaining);
/// The number `EncodeDeadlineHeader` writes: `remaining` in whole
/// milliseconds, rounded down (never promise time that is not there), 0 when
/// none is left. For writers that format it into their own buffer.
std::int64_t DeadlineHeaderMillis(Duration remaining);

/// Parses an inbound deadline header ("1500": 1.5 s from `now`). Accepts 1 to
/// 18 ASCII digits; anything else is InvalidArgument naming `field`.
absl::StatusOr<Deadline> DeadlineFromHeader(std::string_view value, TimePoint now,
                                            std::string_view field = kDefaultDeadlineHeader);

}  // namespace saferetry

#endif  // SAFERETRY_DEADLINE_H_

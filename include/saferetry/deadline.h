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

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "saferetry/clock.h"

namespace saferetry {

/// The default header that carries the remaining time in milliseconds.
inline constexpr std::string_view kDefaultDeadlineHeader = "X-Request-Timeout-Ms";

/// A point on the steady clock after which no attempt may run. Infinite by
/// default.
class Deadline {
 public:
  /// No deadline.
  Deadline() = default;
  static Deadline Infinite() { return Deadline(); }
  static Deadline At(TimePoint at) { return Deadline(at); }
  /// `now + timeout`, saturating.
  static Deadline After(TimePoint now, Duration timeout);

  bool is_infinite() const { return !at_.has_value(); }
  /// The expiry; `TimePoint::max()` when infinite.
  TimePoint at() const { return at_.value_or(TimePoint::max()); }
  /// Time left at `now`, never negative; `Duration::max()` when infinite.
  Duration Remaining(TimePoint now) const;
  bool Expired(TimePoint now) const { return at_.has_value() && now >= *at_; }

 private:
  explicit Deadline(TimePoint at) : at_(at) {}
  std::optional<TimePoint> at_;
};

/// How attempts are fitted under a deadline. Defaults: margin 10 ms, minimum
/// useful attempt 50 ms, no per-attempt cap.
struct DeadlineOptions {
  /// Kept back from every attempt for the caller to handle the answer. >= 0.
  Duration margin = std::chrono::milliseconds(10);
  /// An attempt shorter than this is not worth starting. > 0.
  Duration min_useful_attempt = std::chrono::milliseconds(50);
  /// Per-attempt cap; none by default (an attempt may use all that remains).
  std::optional<Duration> attempt_cap;
};

/// InvalidArgument naming "margin", "min_useful_attempt" or "attempt_cap".
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

/// Parses an inbound deadline header ("1500": 1.5 s from `now`). Accepts 1 to
/// 18 ASCII digits; anything else is InvalidArgument naming `field`.
absl::StatusOr<Deadline> DeadlineFromHeader(std::string_view value, TimePoint now,
                                            std::string_view field = kDefaultDeadlineHeader);

}  // namespace saferetry

#endif  // SAFERETRY_DEADLINE_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License,
// Version 2.0.

#include "saferetry/deadline.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/saturating.h"

namespace saferetry {
namespace {

// The arithmetic below works on the raw counts of TimePoint and Duration, so
// both must count the same unit.
static_assert(std::is_same_v<TimePoint::duration, Duration>, "steady_clock must count nanoseconds");

using Rep = Duration::rep;
constexpr Rep kMaxRep = std::numeric_limits<Rep>::max();

using internal::SaturatingAdd;
using internal::SaturatingSub;

Rep Count(TimePoint t) { return t.time_since_epoch().count(); }

std::string Describe(Duration d) { return absl::FormatDuration(absl::FromChrono(d)); }

}  // namespace

Deadline Deadline::After(TimePoint now, Duration timeout) {
  return Deadline(TimePoint(Duration(SaturatingAdd(Count(now), timeout.count()))));
}

absl::Status ValidateDeadlineOptions(const DeadlineOptions& options) {
  if (options.margin < Duration::zero()) {
    return absl::InvalidArgumentError(
        absl::StrCat("margin: must be >= 0, got ", Describe(options.margin)));
  }
  if (options.min_useful_attempt <= Duration::zero()) {
    return absl::InvalidArgumentError(absl::StrCat("min_useful_attempt: must be > 0, got ",
                                                   Describe(options.min_useful_attempt)));
  }
  if (options.attempt_cap.has_value() && *options.attempt_cap <= Duration::zero()) {
    return absl::InvalidArgumentError(
        absl::StrCat("attempt_cap: must be > 0 when set, got ", Describe(*options.attempt_cap)));
  }
  if (options.resolution_window.has_value() && *options.resolution_window < Duration::zero()) {
    return absl::InvalidArgumentError(absl::StrCat("resolution_window: must be >= 0 when set, got ",
                                                   Describe(*options.resolution_window)));
  }
  return absl::OkStatus();
}

TimePlan MakeTimePlan(TimePlanKind kind, Duration total, const DeadlineOptions& options) {
  TimePlan plan;
  plan.kind = kind;
  if (options.attempt_cap.has_value()) plan.attempt_cap = *options.attempt_cap;
  if (total == Duration::max()) return plan;  // no deadline: nothing to share
  const Duration usable =
      std::max(Duration::zero(), Duration(SaturatingSub(total.count(), options.margin.count())));
  switch (kind) {
    case TimePlanKind::kSingle:
      break;
    case TimePlanKind::kRetry:
      if (!options.attempt_cap.has_value()) {
        plan.attempt_cap = std::max(options.min_useful_attempt, usable / 2);
      }
      break;
    case TimePlanKind::kResolve: {
      // 30 % of the call, computed without overflow for any duration.
      const Duration share = total / 10 * 3 + (total % 10) * 3 / 10;
      const Duration window = options.resolution_window.value_or(
          std::max(share, options.min_useful_attempt + options.margin));
      // Reserve only when the first attempt still gets a useful length.
      if (window > Duration::zero() && usable - window >= options.min_useful_attempt) {
        plan.reserve = window;
      }
      break;
    }
  }
  return plan;
}

Duration PlannedAttemptTimeout(const TimePlan& plan, const Deadline& deadline, TimePoint now,
                               const DeadlineOptions& options) {
  if (deadline.is_infinite()) return plan.attempt_cap;
  const Duration avail = Duration(
      std::max<Rep>(0, SaturatingSub(deadline.Remaining(now).count(), options.margin.count())));
  Duration timeout = std::min(avail, plan.attempt_cap);
  if (plan.reserve > Duration::zero() && avail - plan.reserve >= options.min_useful_attempt) {
    timeout = std::min(timeout, avail - plan.reserve);
  }
  return timeout;
}

Duration StatusQueryTimeout(const Deadline& deadline, TimePoint now,
                            const DeadlineOptions& options) {
  Duration timeout = Duration::max();
  if (!deadline.is_infinite()) {
    const Duration avail = Duration(
        std::max<Rep>(0, SaturatingSub(deadline.Remaining(now).count(), options.margin.count())));
    timeout = avail >= 2 * options.min_useful_attempt
                  ? std::max(options.min_useful_attempt, avail / 2)
                  : avail;
  }
  if (options.attempt_cap.has_value()) timeout = std::min(timeout, *options.attempt_cap);
  return timeout;
}

Duration AttemptTimeout(const Deadline& deadline, TimePoint now, const DeadlineOptions& options) {
  // An infinite deadline has no "remaining - margin": the margin only matters
  // when there is an end to keep it before.
  Duration timeout = Duration::max();
  if (!deadline.is_infinite()) {
    timeout = Duration(
        std::max<Rep>(0, SaturatingSub(deadline.Remaining(now).count(), options.margin.count())));
  }
  if (options.attempt_cap.has_value()) {
    timeout = std::min(timeout, std::max(Duration::zero(), *options.attempt_cap));
  }
  return timeout;
}

bool WaitFits(const Deadline& deadline, TimePoint now, Duration delay,
              const DeadlineOptions& options) {
  if (deadline.is_infinite()) return true;
  // A negative delay means "no wait", not "time travel".
  Rep needed = std::max<Rep>(0, delay.count());
  needed = SaturatingAdd(needed, options.min_useful_attempt.count());
  needed = SaturatingAdd(needed, options.margin.count());
  return SaturatingAdd(Count(now), needed) <= Count(deadline.at());
}

std::int64_t DeadlineHeaderMillis(Duration remaining) {
  if (remaining <= Duration::zero()) return 0;
  // duration_cast truncates toward zero, which for a positive value is the
  // "rounded down" the receiver must see: never promise time that is not there.
  return std::chrono::duration_cast<std::chrono::milliseconds>(remaining).count();
}

std::string EncodeDeadlineHeader(Duration remaining) {
  return absl::StrCat(DeadlineHeaderMillis(remaining));
}

absl::StatusOr<Deadline> DeadlineFromHeader(std::string_view value, TimePoint now,
                                            std::string_view field) {
  // 18 digits always fit in an int64 (< 9.22e18), so parsing cannot overflow;
  // only the conversion to nanoseconds needs to saturate.
  constexpr std::size_t kMaxDigits = 18;
  bool valid = !value.empty() && value.size() <= kMaxDigits;
  for (char c : value) {
    valid = valid && absl::ascii_isdigit(static_cast<unsigned char>(c));
  }
  if (!valid) {
    constexpr std::size_t kMaxShown = 32;
    auto const shown =
        absl::CHexEscape(absl::string_view(value.data(), std::min(value.size(), kMaxShown)));
    return absl::InvalidArgumentError(
        absl::StrCat(absl::string_view(field.data(), field.size()),
                     ": must be 1 to 18 ASCII digits (milliseconds), got \"", shown,
                     value.size() > kMaxShown ? "\"..." : "\""));
  }
  Rep millis = 0;
  for (char c : value) millis = millis * 10 + (c - '0');
  constexpr Rep kNanosPerMilli = 1000 * 1000;
  Duration timeout =
      millis > kMaxRep / kNanosPerMilli ? Duration::max() : Duration(millis * kNanosPerMilli);
  return Deadline::After(now, timeout);
}

}  // namespace saferetry

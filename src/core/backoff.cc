// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/backoff.h"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace saferetry {
namespace {

std::string DurationText(Duration d) { return absl::FormatDuration(absl::FromChrono(d)); }

// The largest double below 1.0: where a sample at or above 1 lands.
constexpr double kBelowOne = 1.0 - std::numeric_limits<double>::epsilon() / 2;

double ClampSample(double u) {
  if (!(u > 0.0)) return 0.0;  // also catches NaN
  if (u >= 1.0) return kBelowOne;
  return u;
}

// Truncates a non-negative value (in nanoseconds) toward zero and clamps it to
// `cap_ns`. The comparison comes first so the conversion never overflows.
std::int64_t TruncateToCap(long double value_ns, std::int64_t cap_ns) {
  if (!(value_ns > 0.0L)) return 0;
  if (value_ns >= static_cast<long double>(cap_ns)) return cap_ns;
  return static_cast<std::int64_t>(value_ns);  // truncation toward zero
}

// min(cap, trunc(base * multiplier^(retry-1))) in nanoseconds, with `base`
// already inside [0, cap]. pow() may return +inf for large exponents; the
// comparison with `cap` absorbs it, so no integer ever overflows.
std::int64_t CeilingNanos(std::int64_t base_ns, double multiplier, std::int64_t cap_ns, int retry) {
  if (retry <= 1 || multiplier == 1.0) return base_ns;
  // Doubling (the default) is a power of two: below 2^63 a shifted integer
  // (exact, and no call into libm, whose ldexp cost from 9 to 70 ns a delay
  // depending on where the linker placed the caller), above it ldexp. Both
  // give exactly what pow(2, n) gives, in a fraction of its time.
  const int doublings = retry - 1;
  const double growth = multiplier == 2.0
                            ? (doublings < 63 ? static_cast<double>(std::uint64_t{1} << doublings)
                                              : std::ldexp(1.0, doublings))
                            : std::pow(multiplier, static_cast<double>(doublings));
  long double ceiling = static_cast<long double>(base_ns) * growth;
  return TruncateToCap(ceiling, cap_ns);
}

}  // namespace

absl::Status ValidateBackoffParams(const BackoffParams& params) {
  if (params.base <= Duration::zero()) {
    return absl::InvalidArgumentError(
        absl::StrCat("base: must be > 0, got ", DurationText(params.base)));
  }
  if (!std::isfinite(params.multiplier)) {
    return absl::InvalidArgumentError(
        absl::StrCat("multiplier: must be finite, got ", params.multiplier));
  }
  if (params.multiplier < 1.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("multiplier: must be >= 1, got ", params.multiplier));
  }
  if (params.cap <= Duration::zero()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cap: must be > 0, got ", DurationText(params.cap)));
  }
  if (params.cap < params.base) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cap: must be >= base (", DurationText(params.base), "), got ", DurationText(params.cap)));
  }
  switch (params.jitter) {
    case JitterKind::kNone:
    case JitterKind::kFull:
    case JitterKind::kEqual:
    case JitterKind::kDecorrelated:
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("jitter: unknown kind ", static_cast<int>(params.jitter)));
}

Duration ComputeBackoff(const BackoffParams& params, int retry, Duration previous, double u) {
  // Defensive normalisation so invalid parameters still give a delay inside
  // [0, cap]; ValidateBackoffParams() is where they are reported.
  const std::int64_t cap_ns = params.cap.count();
  if (cap_ns <= 0) return Duration::zero();
  std::int64_t base_ns = params.base.count();
  if (base_ns < 0) base_ns = 0;
  if (base_ns > cap_ns) base_ns = cap_ns;
  const double multiplier = params.multiplier >= 1.0 ? params.multiplier : 1.0;  // NaN -> 1
  u = ClampSample(u);

  // The jitter is applied in long double (64-bit mantissa on x86-64), where
  // u * ceiling stays strictly below ceiling for u < 1, and then truncated to
  // whole nanoseconds: the upper bound of a jitter range is never reached.
  switch (params.jitter) {
    case JitterKind::kNone:
      return Duration(CeilingNanos(base_ns, multiplier, cap_ns, retry));
    case JitterKind::kFull: {
      long double ceiling = CeilingNanos(base_ns, multiplier, cap_ns, retry);
      return Duration(TruncateToCap(u * ceiling, cap_ns));
    }
    case JitterKind::kEqual: {
      long double half =
          static_cast<long double>(CeilingNanos(base_ns, multiplier, cap_ns, retry)) / 2;
      return Duration(TruncateToCap(half + u * half, cap_ns));
    }
    case JitterKind::kDecorrelated: {
      long double prev = previous.count() > 0 ? static_cast<long double>(previous.count())
                                              : static_cast<long double>(base_ns);
      long double base = static_cast<long double>(base_ns);
      long double span = prev * 3 - base;  // no int64 product: previous may be huge
      if (span < 0) span = 0;
      return Duration(TruncateToCap(base + u * span, cap_ns));
    }
  }
  return Duration(CeilingNanos(base_ns, multiplier, cap_ns, retry));
}

std::string_view JitterKindName(JitterKind kind) {
  switch (kind) {
    case JitterKind::kNone:
      return "none";
    case JitterKind::kFull:
      return "full";
    case JitterKind::kEqual:
      return "equal";
    case JitterKind::kDecorrelated:
      return "decorrelated";
  }
  return "unknown";
}

bool ParseJitterKind(std::string_view name, JitterKind* out) {
  for (JitterKind kind :
       {JitterKind::kNone, JitterKind::kFull, JitterKind::kEqual, JitterKind::kDecorrelated}) {
    if (name == JitterKindName(kind)) {
      if (out != nullptr) *out = kind;
      return true;
    }
  }
  return false;
}

absl::StatusOr<std::shared_ptr<const ExponentialBackoff>> ExponentialBackoff::Create(
    BackoffParams params) {
  absl::Status s = ValidateBackoffParams(params);
  if (!s.ok()) return s;
  return std::shared_ptr<const ExponentialBackoff>(new ExponentialBackoff(params));
}

absl::StatusOr<std::shared_ptr<const BackoffPolicy>> MakeExponentialBackoff(BackoffParams params) {
  auto made = ExponentialBackoff::Create(params);
  if (!made.ok()) return made.status();
  return std::shared_ptr<const BackoffPolicy>(*std::move(made));
}

}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Wait: how long to sleep before retry number n. A pure function of its
// inputs: it reads no clock and draws no random number, so tests pass the
// uniform sample and assert the exact delay.
//
//   ceiling(n)   = min(cap, base * multiplier^(n-1))
//   kNone        = ceiling(n)
//   kFull        = u * ceiling(n)
//   kEqual       = ceiling(n)/2 + u * ceiling(n)/2
//   kDecorrelated= min(cap, base + u * (previous * 3 - base)), previous = base
//                  for the first retry
//
// @code
//   BackoffParams p;  // full jitter, 100 ms, x2, 10 s cap
//   Duration d = ComputeBackoff(p, /*retry=*/3, /*previous=*/Duration{0}, 0.5);
//   // d == 200ms (half of the 400 ms ceiling)
// @endcode

#ifndef SAFERETRY_BACKOFF_H_
#define SAFERETRY_BACKOFF_H_

#include <memory>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "saferetry/clock.h"

namespace saferetry {

/// Jitter kinds, as in "Exponential Backoff And Jitter" (AWS Architecture
/// Blog). Full jitter spreads clients the most and is the default.
enum class JitterKind { kNone, kFull, kEqual, kDecorrelated };

/// Backoff parameters. Defaults: full jitter, base 100 ms, multiplier 2,
/// cap 10 s.
struct BackoffParams {
  Duration base = std::chrono::milliseconds(100);
  double multiplier = 2.0;
  Duration cap = std::chrono::seconds(10);
  JitterKind jitter = JitterKind::kFull;
};

/// InvalidArgument naming the field: base <= 0, cap <= 0, cap < base,
/// multiplier < 1 or not finite.
absl::Status ValidateBackoffParams(const BackoffParams& params);

/// The delay before retry `retry` (1 = the first retry; values below 1 act as
/// 1). `previous` is the previous delay (decorrelated jitter only; <= 0 means
/// "none yet" = base). `u` is a uniform sample in [0, 1), clamped into that
/// range (NaN and negatives become 0, 1 and above become the largest double
/// below 1). Exact and overflow-safe for any `retry` (n = 10000 gives `cap`).
/// Never negative, never above `cap`. Does not allocate.
///
/// Rounding: the ceiling is base * multiplier^(n-1) computed in floating
/// point and truncated toward zero to whole nanoseconds (then clamped to
/// `cap`); the jittered value is computed from that integer ceiling in long
/// double and truncated toward zero again. So a jitter's upper bound is never
/// reached: with a 100 ms ceiling, full jitter and u just below 1 give
/// 99'999'999 ns, equal jitter gives 99'999'999 ns, and decorrelated jitter
/// from previous = base gives 299'999'999 ns (when under `cap`).
///
/// Invalid parameters (see `ValidateBackoffParams`) are not reported here:
/// cap <= 0 gives 0, base is clamped into [0, cap], a multiplier below 1 or
/// NaN acts as 1.
Duration ComputeBackoff(const BackoffParams& params, int retry, Duration previous, double u);

/// Wait as a policy object: how long to sleep before a retry, for callers
/// who want another curve than `ComputeBackoff` (a table, a per-host
/// schedule, a server-driven one). Set per call with
/// `RetryPolicyOptions::backoff_policy`; the default is `ExponentialBackoff`
/// over `RetryPolicyOptions::backoff`. The built `RetryPolicy` holds one
/// `BackoffPolicy` either way.
///
/// Implementations must be thread-safe (the method is const and one policy
/// may serve many calls at once), must not allocate, must not read a clock
/// and must return a non-negative delay. The deadline check comes after the
/// policy: a delay that does not fit is shortened by the state machine.
///
/// @code
///   class FixedTable final : public saferetry::BackoffPolicy {
///    public:
///     saferetry::Duration Delay(int retry, saferetry::Duration, double) const override {
///       static constexpr std::chrono::milliseconds kTable[] = {
///           std::chrono::milliseconds(100), std::chrono::milliseconds(500),
///           std::chrono::milliseconds(2000)};
///       return kTable[std::min(retry, 3) - 1];
///     }
///   };
///   policy_options.backoff_policy = std::make_shared<FixedTable>();
/// @endcode
class BackoffPolicy {
 public:
  virtual ~BackoffPolicy() = default;
  /// The delay before retry `retry` (1 = the first retry of this kind in the
  /// call); `previous` is this policy's previous delay in the call (zero
  /// before the first); `u` is a uniform sample in [0, 1) from the call's
  /// `Random` seam.
  virtual Duration Delay(int retry, Duration previous, double u) const = 0;
};

/// `ComputeBackoff` over fixed, validated parameters.
class ExponentialBackoff final : public BackoffPolicy {
 public:
  /// InvalidArgument naming the field (see `ValidateBackoffParams`).
  static absl::StatusOr<std::shared_ptr<const ExponentialBackoff>> Create(BackoffParams params);
  Duration Delay(int retry, Duration previous, double u) const override {
    return ComputeBackoff(params_, retry, previous, u);
  }
  const BackoffParams& params() const { return params_; }

 private:
  explicit ExponentialBackoff(BackoffParams params) : params_(params) {}
  BackoffParams params_;
};

/// `ExponentialBackoff::Create` as a `BackoffPolicy`, the factory every
/// built-in seam has: InvalidArgument naming the field (see
/// `ValidateBackoffParams`).
absl::StatusOr<std::shared_ptr<const BackoffPolicy>> MakeExponentialBackoff(BackoffParams params);

/// "none", "full", "equal", "decorrelated".
std::string_view JitterKindName(JitterKind kind);
/// Parses a name as printed by `JitterKindName`; false when unknown.
bool ParseJitterKind(std::string_view name, JitterKind* out);

}  // namespace saferetry

#endif  // SAFERETRY_BACKOFF_H_

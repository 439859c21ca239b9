// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Admit: a retry budget shared by every call of a client (and across threads)
// caps how much extra load retries may add, so a brown-out does not become an
// outage. Three classic designs are provided:
//
//   - `TokenThrottle`: gRPC's retryThrottling. Tokens start at max_tokens;
//     each failed attempt costs 1 (floor 0), each success earns token_ratio
//     (cap max_tokens). A retry is allowed only while tokens > max_tokens / 2
//     after the failure's charge. Lock-free (atomic milli-tokens).
//   - `RatioBudget`: Finagle's RetryBudget. Each call deposits; each retry or
//     status query withdraws. Retries may be `percent` of calls (up to 1000,
//     i.e. ten retries per call) plus `min_per_second`, over a sliding
//     `window`. The library default (10 % + 10/s over 10 s).
//   - `CostQuota`: the AWS SDKs' retry quota. Capacity tokens; a retry costs
//     `retry_cost` (`timeout_cost` after a timeout-like failure,
//     `throttling_cost` after a throttling answer); a successful retry refunds
//     its cost; a first-try success adds `success_increment`. Capacity 0 means
//     "never retry". `CostQuotaOptions::Aws2026()` is the AWS SDKs' 2026
//     pricing (throttling 5, other transient failures 14).
//
// A retry whose charge was made but which was never sent (cancelled during
// the wait, or the wait would overshoot the deadline) is given back with
// `Refund`.
//
// @code
//   auto budget = saferetry::RatioBudget::Create({});  // 10% + 10/s over 10 s
//   if (!budget.ok()) return budget.status();
//   ClientOptions options;
//   options.budget = *std::move(budget);
// @endcode

#ifndef SAFERETRY_RETRY_BUDGET_H_
#define SAFERETRY_RETRY_BUDGET_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "saferetry/backoff.h"
#include "saferetry/clock.h"
#include "saferetry/result.h"

namespace saferetry {

/// Why a budget said no. `kNone` means allowed.
enum class BudgetRefusal {
  kNone,
  kThrottleAtOrBelowHalf,  ///< TokenThrottle: tokens <= max_tokens / 2.
  kRatioExhausted,         ///< RatioBudget: no balance left in the window.
  kQuotaExhausted,         ///< CostQuota: capacity below the retry cost.
};

/// The answer to "may this call retry?", and the receipt of what it charged
/// (so that `RetryBudget::Refund` can give exactly that back). Only the
/// budget that made a decision may be handed it back.
struct BudgetDecision {
  bool allowed = false;
  BudgetRefusal refusal = BudgetRefusal::kNone;
  /// What was withdrawn (CostQuota: to refund on success). 0 otherwise.
  std::int64_t cost = 0;
  /// TokenThrottle: the milli-tokens this failure took (1000, or less when
  /// the floor of 0 was reached). 0 for the other budgets.
  std::int64_t charged_milli_tokens = 0;
  /// RatioBudget: the second (`floor(now / 1 s)`, or the newest second seen)
  /// whose slot recorded the withdrawal. 0 for the other budgets.
  std::int64_t withdrawal_second = 0;
};

/// True when `evidence` is a throttling answer: HTTP 429, or HTTP 503 with a
/// delay hint (`Retry-After` or its millisecond variants, i.e.
/// `hints.retry_after` is set). A budget may price a retry after throttling
/// apart from other transient failures (`CostQuotaOptions::throttling_cost`).
/// Pure; thread-safe.
bool IsThrottling(const AttemptEvidence& evidence);

/// A retry budget shared by many calls and threads. All methods are
/// thread-safe and do not allocate.
class RetryBudget {
 public:
  virtual ~RetryBudget() = default;
  /// A logical call starts (RatioBudget deposits here).
  virtual void OnCallStart(TimePoint now) = 0;
  /// An attempt succeeded. `retry_cost` is the `cost` of the decision that
  /// allowed this attempt (0 for a first attempt).
  virtual void OnSuccess(std::int64_t retry_cost, TimePoint now) = 0;
  /// A retryable attempt failed with `cls`: charge for it and decide whether
  /// another attempt (or status query) may be sent. Non-retryable failures are
  /// never charged: the caller does not call this for them.
  virtual BudgetDecision OnFailureTryRetry(AttemptClass cls, TimePoint now) = 0;
  /// The same, telling the budget whether the failure was a throttling answer
  /// (`IsThrottling(evidence)`). Only `CostQuota` prices it apart; the default
  /// ignores `throttled` and calls the two-argument overload, so budgets
  /// written before this overload existed keep working unchanged.
  virtual BudgetDecision OnFailureTryRetry(AttemptClass cls, bool throttled, TimePoint now) {
    (void)throttled;
    return OnFailureTryRetry(cls, now);
  }
  /// The current balance, in the budget's own unit (tokens, retries, capacity).
  virtual double Balance(TimePoint now) const = 0;
  /// Undoes the charge of `decision`, an allowed decision of this budget whose
  /// retry was never sent (the call was cancelled during the wait, or the
  /// wait would overshoot the deadline). Call it at most once per decision.
  /// A refused decision is ignored: a refused retry is never sent anyway,
  /// and what the failure itself cost (TokenThrottle) stands. The default
  /// does nothing, for budgets that cannot undo. The built-in budgets:
  ///   - `TokenThrottle` gives back `charged_milli_tokens` (capped at
  ///     max_tokens);
  ///   - `RatioBudget` removes the withdrawal from the slot of
  ///     `withdrawal_second` if that second is still in the window at `now`,
  ///     else nothing (it has expired already);
  ///   - `CostQuota` gives back `cost` (capped at capacity);
  ///   - `UnlimitedBudget` does nothing.
  virtual void Refund(const BudgetDecision& /*decision*/, TimePoint /*now*/) {}
};

/// gRPC retryThrottling: {"maxTokens": 10, "tokenRatio": 0.1}.
///
/// Tokens are kept as integer milli-tokens (both options are truncated to
/// three decimal places: 0.1239 keeps 0.123). Trace with the defaults: 10
/// tokens; failures leave 9, 8, 7, 6 (each allowed: > 5), then 5 (refused:
/// not strictly above half), 4, ... 0 (floor, refused); each success adds 0.1.
struct TokenThrottleOptions {
  /// In (0, 1000]. Tokens start here.
  double max_tokens = 10;
  /// > 0; at most three decimal places are kept, as gRPC does.
  double token_ratio = 0.1;
};

class TokenThrottle final : public RetryBudget {
 public:
  /// InvalidArgument naming "max_tokens" or "token_ratio" on bad values.
  static absl::StatusOr<std::shared_ptr<TokenThrottle>> Create(TokenThrottleOptions options);
  void OnCallStart(TimePoint) override {}
  void OnSuccess(std::int64_t retry_cost, TimePoint now) override;
  using RetryBudget::OnFailureTryRetry;
  BudgetDecision OnFailureTryRetry(AttemptClass cls, TimePoint now) override;
  double Balance(TimePoint now) const override;
  void Refund(const BudgetDecision& decision, TimePoint now) override;


 private:
  explicit TokenThrottle(TokenThrottleOptions options);  // Create() validates
  std::int64_t max_milli_;
  std::int64_t ratio_milli_;
  std::atomic<std::int64_t> milli_tokens_;
};

/// Finagle-style ratio budget. Defaults: 10 % of calls + 10 per second over a
/// 10 s window.
///
/// Balance = min_per_second * N + percent * deposits - withdrawals, where N is
/// the window in whole seconds (a fractional second is dropped: 10.7 s acts as
/// 10 s) and deposits/withdrawals are those recorded in the window. A retry is
/// allowed when the balance is >= 1 and then withdraws 1.
///
/// Expiry is at slot granularity: `now` falls in second
/// floor(now.time_since_epoch() / 1 s), and the window at second E holds the
/// slots of seconds E-N+1 .. E. An event recorded at 12.3 s with N = 10 counts
/// up to 21.999... s and is gone at 22.0 s, so it lives between N-1 and N
/// seconds. Withdrawals expire like deposits, so the balance may be negative
/// for a while (an old deposit expired while a later withdrawal still counts).
/// A `now` older than the newest second seen (threads racing to report) is
/// treated as that newest second. `percent` and the reserve are kept in
/// millionths (rounded to nearest), so thresholds are exact integers; the
/// balance arithmetic saturates instead of overflowing.
struct RatioBudgetOptions {
  /// Retries allowed per call, in [0, 1000] (as Finagle accepts): 0.1 is one
  /// retry per ten calls, 5.0 is five retries per call.
  double percent = 0.10;
  /// Retries always allowed per second of window, >= 0.
  double min_per_second = 10;
  /// Sliding window, >= 1 s and <= 24 h (one slot per second is allocated
  /// at construction); deposits older than this expire.
  Duration window = std::chrono::seconds(10);
};

class RatioBudget final : public RetryBudget {
 public:
  /// InvalidArgument naming "percent", "min_per_second" or "window".
  static absl::StatusOr<std::shared_ptr<RatioBudget>> Create(RatioBudgetOptions options);
  void OnCallStart(TimePoint now) override;
  void OnSuccess(std::int64_t, TimePoint) override {}
  using RetryBudget::OnFailureTryRetry;
  BudgetDecision OnFailureTryRetry(AttemptClass cls, TimePoint now) override;
  /// Retries still available now.
  double Balance(TimePoint now) const override;
  void Refund(const BudgetDecision& decision, TimePoint now) override;


 private:
  explicit RatioBudget(RatioBudgetOptions options);  // Create() validates
  struct Slot {
    std::int64_t epoch = -1;  // which second this slot holds
    std::int64_t deposits = 0;
    std::int64_t withdrawals = 0;
  };
  // Balance in millionths of a retry at second `epoch`, from a scan of the
  // slots (used by the const query, which must not rotate slots).
  std::int64_t ScanBalanceMicrosLocked(std::int64_t epoch) const;
  // reserve + percent * deposits - withdrawals, in millionths, saturating.
  std::int64_t BalanceMicros(std::int64_t deposits, std::int64_t withdrawals) const;
  double BalanceLocked(std::int64_t epoch) const;
  // Rotates the window forward to `epoch` (if newer) and returns its slot.
  Slot& SlotFor(std::int64_t epoch);
  std::int64_t EpochOf(TimePoint now) const;
  std::int64_t EffectiveEpochLocked(TimePoint now) const;

  RatioBudgetOptions options_;
  std::int64_t window_slots_;     // N, whole seconds
  std::int64_t percent_micros_;   // percent * 1e6
  std::int64_t reserve_micros_;   // min_per_second * N * 1e6
  mutable std::mutex mu_;
  std::vector<Slot> slots_;       // one per second of the window
  std::int64_t newest_epoch_;     // guarded by mu_; the newest second seen
  std::int64_t window_deposits_ = 0;     // guarded by mu_; sum over slots_
  std::int64_t window_withdrawals_ = 0;  // guarded by mu_; sum over slots_
};

/// AWS SDK-style cost quota. Defaults as in the AWS SDKs' standard mode
/// (before 2026): capacity 500, retry 5, timeout 10, success +1, throttling
/// priced like any other retry.
///
/// Which cost a retry pays, first match wins:
///   1. the failure was a throttling answer (`IsThrottling`, passed to the
///      three-argument `OnFailureTryRetry`): `throttling_cost`;
///   2. the failed attempt was `AttemptClass::kAmbiguous`: `timeout_cost`;
///   3. otherwise: `retry_cost`.
struct CostQuotaOptions {
  /// The pool, >= 0. 0 is valid and means "never retry": every cost is > 0,
  /// so every retry is refused (`quota_exhausted`).
  std::int64_t capacity = 500;
  /// Cost of a retry after an ordinary failure, > 0.
  std::int64_t retry_cost = 5;
  /// Cost of a retry after a timeout-like (ambiguous) failure, > 0.
  std::int64_t timeout_cost = 10;
  /// Added on a first-try success, >= 0.
  std::int64_t success_increment = 1;
  /// Cost of a retry after a throttling answer (429, or 503 with a delay
  /// hint), >= 0. 0 (the default) means "the same as `retry_cost`", so
  /// today's pricing is unchanged unless this is set.
  std::int64_t throttling_cost = 0;

  /// The AWS SDKs' 2026 retry quota: capacity 500, throttling retry 5, every
  /// other transient retry 14, timeout retry 14, success +1. It goes with
  /// base delays of 1 s after throttling and 50 ms otherwise
  /// (`Aws2026ThrottlingBackoff()`, `Aws2026Backoff()`).
  static CostQuotaOptions Aws2026();
};

/// Backoff for the `CostQuotaOptions::Aws2026()` model after a throttling
/// answer: full jitter, base 1 s, multiplier 2, cap 20 s.
BackoffParams Aws2026ThrottlingBackoff();
/// Backoff for the `CostQuotaOptions::Aws2026()` model after any other
/// retryable failure: full jitter, base 50 ms, multiplier 2, cap 20 s.
BackoffParams Aws2026Backoff();

class CostQuota final : public RetryBudget {
 public:
  /// InvalidArgument naming the offending field ("capacity: must be >= 0,
  /// got -1").
  static absl::StatusOr<std::shared_ptr<CostQuota>> Create(CostQuotaOptions options);
  void OnCallStart(TimePoint) override {}
  void OnSuccess(std::int64_t retry_cost, TimePoint now) override;
  /// Prices the retry as a non-throttling failure.
  BudgetDecision OnFailureTryRetry(AttemptClass cls, TimePoint now) override;
  BudgetDecision OnFailureTryRetry(AttemptClass cls, bool throttled, TimePoint now) override;
  double Balance(TimePoint now) const override;
  void Refund(const BudgetDecision& decision, TimePoint now) override;


 private:
  explicit CostQuota(CostQuotaOptions options);  // Create() validates
  CostQuotaOptions options_;
  std::atomic<std::int64_t> available_;
};

/// A budget that always allows (for tests and for callers that budget
/// elsewhere).
class UnlimitedBudget final : public RetryBudget {
 public:
  void OnCallStart(TimePoint) override {}
  void OnSuccess(std::int64_t, TimePoint) override {}
  using RetryBudget::OnFailureTryRetry;
  BudgetDecision OnFailureTryRetry(AttemptClass, TimePoint) override { return {true, BudgetRefusal::kNone, 0}; }
  double Balance(TimePoint) const override { return 1e300; }
};

/// "none", "throttle_at_or_below_half", "ratio_exhausted", "quota_exhausted".
std::string_view BudgetRefusalName(BudgetRefusal refusal);

}  // namespace saferetry

#endif  // SAFERETRY_RETRY_BUDGET_H_

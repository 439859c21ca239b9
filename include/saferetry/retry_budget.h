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
//     status query withdraws. Retries may be `percent` of calls plus
//     `min_per_second`, over a sliding `window`. The library default
//     (10 % + 10/s over 10 s).
//   - `CostQuota`: the AWS SDKs' retry quota. Capacity tokens; a retry costs
//     `retry_cost` (`timeout_cost` after a timeout-like failure); a successful
//     retry refunds its cost; a first-try success adds `success_increment`.
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

/// The answer to "may this call retry?".
struct BudgetDecision {
  bool allowed = false;
  BudgetRefusal refusal = BudgetRefusal::kNone;
  /// What was withdrawn (CostQuota: to refund on success). 0 otherwise.
  std::int64_t cost = 0;
};

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
  /// The current balance, in the budget's own unit (tokens, retries, capacity).
  virtual double Balance(TimePoint now) const = 0;
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
  BudgetDecision OnFailureTryRetry(AttemptClass cls, TimePoint now) override;
  double Balance(TimePoint now) const override;

  explicit TokenThrottle(TokenThrottleOptions options);  // use Create()

 private:
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
/// millionths (rounded to nearest), so thresholds are exact integers.
struct RatioBudgetOptions {
  /// Fraction of calls that may be retried, in [0, 1].
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
  BudgetDecision OnFailureTryRetry(AttemptClass cls, TimePoint now) override;
  /// Retries still available now.
  double Balance(TimePoint now) const override;

  explicit RatioBudget(RatioBudgetOptions options);  // use Create()

 private:
  struct Slot {
    std::int64_t epoch = -1;  // which second this slot holds
    std::int64_t deposits = 0;
    std::int64_t withdrawals = 0;
  };
  // Balance in millionths of a retry at second `epoch`, from a scan of the
  // slots (used by the const query, which must not rotate slots).
  std::int64_t ScanBalanceMicrosLocked(std::int64_t epoch) const;
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

/// AWS SDK-style cost quota. Defaults as in the AWS SDKs' standard mode.
struct CostQuotaOptions {
  /// > 0.
  std::int64_t capacity = 500;
  /// Cost of a retry after an ordinary failure, > 0.
  std::int64_t retry_cost = 5;
  /// Cost of a retry after a timeout-like (ambiguous) failure, > 0.
  std::int64_t timeout_cost = 10;
  /// Added on a first-try success, >= 0.
  std::int64_t success_increment = 1;
};

class CostQuota final : public RetryBudget {
 public:
  /// InvalidArgument naming the offending field.
  static absl::StatusOr<std::shared_ptr<CostQuota>> Create(CostQuotaOptions options);
  void OnCallStart(TimePoint) override {}
  void OnSuccess(std::int64_t retry_cost, TimePoint now) override;
  BudgetDecision OnFailureTryRetry(AttemptClass cls, TimePoint now) override;
  double Balance(TimePoint now) const override;

  explicit CostQuota(CostQuotaOptions options);  // use Create()

 private:
  CostQuotaOptions options_;
  std::atomic<std::int64_t> available_;
};

/// A budget that always allows (for tests and for callers that budget
/// elsewhere).
class UnlimitedBudget final : public RetryBudget {
 public:
  void OnCallStart(TimePoint) override {}
  void OnSuccess(std::int64_t, TimePoint) override {}
  BudgetDecision OnFailureTryRetry(AttemptClass, TimePoint) override { return {true, BudgetRefusal::kNone, 0}; }
  double Balance(TimePoint) const override { return 1e300; }
};

/// "none", "throttle_at_or_below_half", "ratio_exhausted", "quota_exhausted".
std::string_view BudgetRefusalName(BudgetRefusal refusal);

}  // namespace saferetry

#endif  // SAFERETRY_RETRY_BUDGET_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Admit: a retry budget shared by every call of a client (and across threads)
// caps how much extra load retries may add, so a brown-out does not become an
// outage. `RetryBudget` is the interface, one entry point per event of a call
// (start, failure, success, refund); three classic designs are built in,
// each made by a factory:
//
//   - `MakeTokenThrottle`: gRPC's retryThrottling. Tokens start at
//     max_tokens; each failed attempt costs 1 (floor 0), each success earns
//     token_ratio (cap max_tokens). A retry is allowed only while
//     tokens > max_tokens / 2 after the failure's charge.
//   - `MakeRatioBudget`: Finagle's RetryBudget. Each call deposits; each retry
//     or status query withdraws. Retries may be `percent` of calls (up to
//     1000, i.e. a thousand retries per call) plus `min_per_second`, over a
//     sliding `window`. The library default (10 % + 10/s over 10 s).
//   - `MakeCostQuota`: the AWS SDKs' retry quota. Capacity tokens; a retry
//     costs `retry_cost` (`timeout_cost` after a timeout-like failure,
//     `throttling_cost` after a throttling answer); a successful retry
//     refunds its cost; a first-try success adds `success_increment`.
//     Capacity 0 means "never retry". `CostQuotaOptions::Aws2026()` is the
//     AWS SDKs' 2026 pricing (throttling 5, other transient failures 14).
//
// A decision carries an opaque `BudgetReceipt`: the caller hands it back to
// `Refund` when the send it paid for is never made, and to `OnSuccess` when
// that send succeeds. A refusal carries a name ("ratio_exhausted"), which
// the call's result, traces and metrics show. A policy file picks a budget by
// name from a `BudgetRegistry` (budget_registry.h), which a budget of your
// own can join.
//
// @code
//   auto budget = saferetry::MakeRatioBudget({});  // 10% + 10/s over 10 s
//   if (!budget.ok()) return budget.status();
//   ClientOptions options;
//   options.budget = *std::move(budget);
// @endcode

#ifndef SAFERETRY_RETRY_BUDGET_H_
#define SAFERETRY_RETRY_BUDGET_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "saferetry/backoff.h"
#include "saferetry/clock.h"
#include "saferetry/result.h"

namespace saferetry {

/// What a budget recorded when it charged for a retry, so that it can undo
/// exactly that charge later (`RetryBudget::Refund`) or credit it when the
/// retry succeeds (`RetryBudget::OnSuccess`). Two integers whose meaning
/// belongs to the budget that wrote them; every other reader only stores the
/// receipt and hands it back to that budget. A default-constructed receipt is
/// empty: nothing was charged (a first attempt, or a refusal). A plain value:
/// copying it allocates nothing.
class BudgetReceipt {
 public:
  /// Empty: nothing was charged.
  constexpr BudgetReceipt() = default;
  /// A receipt holding `first` and `second`, whatever the issuing budget
  /// means by them (a cost, a time slot, ...). Never empty, even when both
  /// are 0.
  static constexpr BudgetReceipt Of(std::int64_t first, std::int64_t second = 0) {
    BudgetReceipt r;
    r.first_ = first;
    r.second_ = second;
    r.set_ = true;
    return r;
  }
  /// True for a default-constructed receipt.
  constexpr bool empty() const { return !set_; }
  /// The values given to `Of`; 0 for an empty receipt. Meaningful only to
  /// the budget that issued the receipt.
  constexpr std::int64_t first() const { return first_; }
  constexpr std::int64_t second() const { return second_; }

  friend constexpr bool operator==(const BudgetReceipt& a, const BudgetReceipt& b) {
    return a.set_ == b.set_ && a.first_ == b.first_ && a.second_ == b.second_;
  }
  friend constexpr bool operator!=(const BudgetReceipt& a, const BudgetReceipt& b) {
    return !(a == b);
  }

 private:
  std::int64_t first_ = 0;
  std::int64_t second_ = 0;
  bool set_ = false;
};

/// What the budget is asked to pay for.
enum class BudgetUse {
  /// Another send of the request after a retryable failure.
  kRetry,
  /// A status query (or a same-key resend that counts as a poll) after an
  /// ambiguous or in-progress attempt, charged to the status-query allowance.
  kStatusQuery,
  /// A hedge: a second copy sent while the first is still in flight
  /// (`AsyncClient` only). No attempt has failed yet.
  kHedge,
};

/// The event a budget is charged for: one struct, so that a budget learns
/// more about a failure by new fields here, never by new overloads. Fields
/// added later get defaults that keep the meaning of older code.
struct BudgetFailure {
  /// How the failed attempt was classified (`kRetryableTransient` for a
  /// hedge, which follows no failure).
  AttemptClass cls = AttemptClass::kRetryableTransient;
  /// The failure was a throttling answer (`IsThrottling(evidence)`): 429, or
  /// 503 with a delay hint.
  bool throttled = false;
  /// What the charge pays for.
  BudgetUse use = BudgetUse::kRetry;
};

/// The answer to "may this call send once more?", and the receipt of what it
/// charged.
///
/// `refusal` is a short name saying why not, empty when allowed. It is a
/// view of a string with static storage duration (a literal), so a decision
/// allocates nothing; the call records it as `CallResult::budget_refusal`, and
/// traces and metrics show it. The built-in budgets' names:
/// "throttle_at_or_below_half" (token throttle), "ratio_exhausted" (ratio
/// budget), "quota_exhausted" (cost quota). A budget of your own picks its own
/// (lower_snake_case by convention).
struct BudgetDecision {
  bool allowed = false;
  std::string_view refusal;
  /// What was charged, for `Refund` and `OnSuccess`. Empty when nothing was.
  BudgetReceipt receipt;

  /// An allowed decision with `receipt`.
  static BudgetDecision Allow(BudgetReceipt receipt = BudgetReceipt()) {
    BudgetDecision d;
    d.allowed = true;
    d.receipt = receipt;
    return d;
  }
  /// A refusal named `reason` (a string literal).
  static BudgetDecision Refuse(std::string_view reason) {
    BudgetDecision d;
    d.refusal = reason;
    return d;
  }
};

/// True when `evidence` is a throttling answer: HTTP 429, or HTTP 503 with a
/// delay hint (`Retry-After` or its millisecond variants, i.e.
/// `hints.retry_after` is set). A budget may price a retry after throttling
/// apart from other transient failures (`CostQuotaOptions::throttling_cost`).
/// Pure; thread-safe.
bool IsThrottling(const AttemptEvidence& evidence);

/// A retry budget shared by many calls and threads: one entry point per
/// event of a call. Every method must be thread-safe, should not allocate,
/// and must not throw.
///
/// The caller (the call's state machine) promises:
///   - `OnCallStart` once per logical call, before anything else of it;
///   - `OnFailure` only when another send will really happen if allowed
///     (after the attempt cap and the deadline were checked); never for a
///     permanent failure;
///   - an allowed decision's receipt comes back at most once: to `Refund` when
///     the send was never made, or to `OnSuccess` when the send it paid for
///     succeeded;
///   - `OnSuccess` with an empty receipt for a success of a first attempt.
///
/// @code
///   // Allows `n` retries per call start, refuses with "per_call_exhausted".
///   class PerCall final : public saferetry::RetryBudget {
///    public:
///     void OnCallStart(TimePoint) override { credit_.fetch_add(1); }
///     BudgetDecision OnFailure(const BudgetFailure&, TimePoint) override {
///       if (credit_.fetch_sub(1) <= 0) {
///         credit_.fetch_add(1);
///         return BudgetDecision::Refuse("per_call_exhausted");
///       }
///       return BudgetDecision::Allow(BudgetReceipt::Of(1));
///     }
///     void Refund(const BudgetReceipt& r, TimePoint) override {
///       if (!r.empty()) credit_.fetch_add(1);
///     }
///     double Balance(TimePoint) const override { return credit_.load(); }
///    private:
///     std::atomic<std::int64_t> credit_{0};
///   };
/// @endcode
class RetryBudget {
 public:
  virtual ~RetryBudget() = default;
  /// A logical call starts (the ratio budget deposits here). Default: nothing.
  virtual void OnCallStart(TimePoint /*now*/) {}
  /// A retryable attempt failed (or a hedge is about to be sent): charge for
  /// the send that follows and decide whether it may happen. A refusal ends
  /// the call with `StopReason::kBudgetExhausted` (a refused hedge is simply
  /// not sent).
  virtual BudgetDecision OnFailure(const BudgetFailure& failure, TimePoint now) = 0;
  /// An attempt succeeded. `receipt` is the receipt of the decision that paid
  /// for this attempt, empty for a first attempt (the cost quota refunds a
  /// retry's cost and credits a first-try success). Default: nothing.
  virtual void OnSuccess(const BudgetReceipt& /*receipt*/, TimePoint /*now*/) {}
  /// Undoes the charge recorded in `receipt`, from an allowed decision of
  /// this budget whose send was never made (the call was cancelled during
  /// the wait, the wait would overshoot the deadline, or the circuit breaker
  /// refused). An empty receipt is ignored. Default: nothing, for budgets
  /// that cannot undo.
  virtual void Refund(const BudgetReceipt& /*receipt*/, TimePoint /*now*/) {}
  /// The current balance, in the budget's own unit (tokens, retries,
  /// capacity), for evidence and metrics only.
  virtual double Balance(TimePoint now) const = 0;
};

/// gRPC retryThrottling: {"maxTokens": 10, "tokenRatio": 0.1}.
///
/// Tokens start at max_tokens; each failure costs 1 (floor 0), each success
/// earns token_ratio (cap max_tokens). A retry is allowed only while tokens
/// are strictly above max_tokens / 2 after the failure's charge (refusal
/// "throttle_at_or_below_half"). Tokens are kept as integer milli-tokens
/// (both options are truncated to three decimal places: 0.1239 keeps
/// 0.123). Trace with the defaults: 10 tokens; failures leave 9, 8, 7, 6
/// (each allowed: > 5), then 5 (refused), 4, ... 0 (floor, refused); each
/// success adds 0.1. `Refund` gives back what the failure took (capped at
/// max_tokens). Lock-free (atomic milli-tokens).
struct TokenThrottleOptions {
  /// In (0, 1000]. Tokens start here.
  double max_tokens = 10;
  /// > 0; at most three decimal places are kept, as gRPC does.
  double token_ratio = 0.1;
};

/// A token throttle. InvalidArgument naming "max_tokens" or "token_ratio" on
/// bad values ("max_tokens: must be in (0, 1000], got 0").
absl::StatusOr<std::shared_ptr<RetryBudget>> MakeTokenThrottle(TokenThrottleOptions options);

/// Finagle-style ratio budget. Defaults: 10 % of calls + 10 per second over a
/// 10 s window. Each call deposits (`OnCallStart`); each retry or status query
/// withdraws one.
///
/// Balance = min_per_second * N + percent * deposits - withdrawals, where N is
/// the window in whole seconds (a fractional second is dropped: 10.7 s acts as
/// 10 s) and deposits/withdrawals are those recorded in the window. A retry is
/// allowed when the balance is >= 1 and then withdraws 1; else the refusal is
/// "ratio_exhausted".
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
/// balance arithmetic saturates instead of overflowing. `Refund` removes the
/// withdrawal if its second is still in the window, else nothing. A mutex
/// around a few integer updates; `Balance` scans the N slots.
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

/// A ratio budget. InvalidArgument naming "percent", "min_per_second" or
/// "window".
absl::StatusOr<std::shared_ptr<RetryBudget>> MakeRatioBudget(RatioBudgetOptions options);

/// AWS SDK-style cost quota. Defaults as in the AWS SDKs' standard mode
/// (before 2026): capacity 500, retry 5, timeout 10, success +1, throttling
/// priced like any other retry.
///
/// Which cost a retry pays, first match wins:
///   1. the failure was a throttling answer (`BudgetFailure::throttled`):
///      `throttling_cost`;
///   2. the failed attempt was `AttemptClass::kAmbiguous`: `timeout_cost`;
///   3. otherwise: `retry_cost`.
/// A pool holding less than the cost refuses ("quota_exhausted"). A
/// successful retry (`OnSuccess` with its receipt) gives its cost back; a
/// first-try success adds `success_increment`; `Refund` gives the cost back.
/// The pool never exceeds `capacity`. Lock-free (one atomic).
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

/// A cost quota. InvalidArgument naming the offending field ("capacity: must
/// be >= 0, got -1").
absl::StatusOr<std::shared_ptr<RetryBudget>> MakeCostQuota(CostQuotaOptions options);

/// Backoff for the `CostQuotaOptions::Aws2026()` model after a throttling
/// answer: full jitter, base 1 s, multiplier 2, cap 20 s.
BackoffParams Aws2026ThrottlingBackoff();
/// Backoff for the `CostQuotaOptions::Aws2026()` model after any other
/// retryable failure: full jitter, base 50 ms, multiplier 2, cap 20 s.
BackoffParams Aws2026Backoff();

/// A budget that always allows (for tests and for callers that budget
/// elsewhere). Its receipts are empty; `Balance` is 1e300.
std::shared_ptr<RetryBudget> MakeUnlimitedBudget();

}  // namespace saferetry

#endif  // SAFERETRY_RETRY_BUDGET_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/retry_budget.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/saturating.h"

namespace saferetry {
namespace {

using internal::SaturatingAdd;
using internal::SaturatingSub;

constexpr std::int64_t kMilli = 1000;
constexpr std::int64_t kMicro = 1000000;
// Above this many millionths a reserve is "unlimited"; it keeps every sum far
// from int64 overflow.
constexpr double kMaxReserveMicros = 1e18;
// Finagle accepts a percent up to 1000.0: ten retries per call.
constexpr double kMaxPercent = 1000.0;

// Truncates to three decimals, as gRPC does when it parses "0.1239". The tiny
// bias absorbs binary representation error (0.29 * 1000 == 289.99999...).
std::int64_t ToMilliTruncated(double value) {
  return static_cast<std::int64_t>(std::floor(value * kMilli + 1e-6));
}

// a * b for a, b >= 0, clamped to int64 max. With percent up to 1000 (1e9
// millionths) the credit of a busy window can pass int64: saturate instead.
std::int64_t SaturatingMulNonNegative(std::int64_t a, std::int64_t b) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  if (a <= 0 || b <= 0) return 0;
  // The overflow check of the multiplication itself: no division.
  std::int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return kMax;
  return product;
}

// Adds `add` (> 0) to `pool`, never above `cap` (pool <= cap always holds).
void AddCapped(std::atomic<std::int64_t>& pool, std::int64_t add, std::int64_t cap) {
  if (add <= 0) return;
  std::int64_t current = pool.load(std::memory_order_relaxed);
  std::int64_t next;
  do {
    // current <= cap, so cap - current never overflows.
    next = add >= cap - current ? cap : current + add;
  } while (!pool.compare_exchange_weak(current, next, std::memory_order_relaxed));
}

// ---------------------------------------------------------------------------
// The built-in budgets. Their state lives here, behind the factories; the
// meaning of their receipts (BudgetReceipt::first/second) is theirs:
//   TokenThrottle  first = milli-tokens this failure took
//   RatioBudget    first = 1 (one withdrawal), second = its second (slot)
//   CostQuota      first = the cost withdrawn

class TokenThrottle final : public RetryBudget {
 public:
  static absl::StatusOr<std::shared_ptr<RetryBudget>> Create(TokenThrottleOptions options);
  BudgetDecision OnFailure(const BudgetFailure& failure, TimePoint now) override;
  void OnSuccess(const BudgetReceipt& receipt, TimePoint now) override;
  void Refund(const BudgetReceipt& receipt, TimePoint now) override;
  double Balance(TimePoint now) const override;

  explicit TokenThrottle(TokenThrottleOptions options);  // Create() validates

 private:
  std::int64_t max_milli_;
  std::int64_t ratio_milli_;
  std::atomic<std::int64_t> milli_tokens_;
};

class RatioBudget final : public RetryBudget {
 public:
  static absl::StatusOr<std::shared_ptr<RetryBudget>> Create(RatioBudgetOptions options);
  void OnCallStart(TimePoint now) override;
  BudgetDecision OnFailure(const BudgetFailure& failure, TimePoint now) override;
  void Refund(const BudgetReceipt& receipt, TimePoint now) override;
  double Balance(TimePoint now) const override;

  explicit RatioBudget(RatioBudgetOptions options);  // Create() validates

 private:
  // One second of the window. Deposits and withdrawals are lock-free: they
  // add to the window's sum first and to the slot second, and a rotation
  // takes a slot's counts with one exchange each, so every count is in the
  // window sum once whatever the interleaving (one racing the rotation of
  // its slot lands in the newer second). Refunds and rotations (once a
  // second) hold `mu_`.
  struct Slot {
    std::atomic<std::int64_t> epoch{std::numeric_limits<std::int64_t>::min()};
    std::atomic<std::int64_t> deposits{0};
    std::atomic<std::int64_t> withdrawals{0};
  };
  // Balance in millionths of a retry at second `epoch`, from a scan of the
  // slots (used by the const query when a rotation is due, which it must not
  // do itself).
  std::int64_t ScanBalanceMicros(std::int64_t epoch) const;
  // reserve + percent * deposits - withdrawals, in millionths, saturating.
  std::int64_t BalanceMicros(std::int64_t deposits, std::int64_t withdrawals) const;
  // Rotates the window forward to `epoch` (if newer) and returns its slot.
  // Holds mu_.
  Slot& SlotFor(std::int64_t epoch);
  Slot& SlotOf(std::int64_t epoch) const;
  // The slot of `now`'s second and that second (the newest seen, when `now`
  // is older): the newest slot without a lock or a division while its
  // second lasts, else through `SlotFor` under `mu_`.
  Slot& CurrentSlot(TimePoint now, std::int64_t& epoch);
  std::int64_t EpochOf(TimePoint now) const;
  std::int64_t EffectiveEpoch(TimePoint now) const;

  RatioBudgetOptions options_;
  std::int64_t window_slots_;    // N, whole seconds
  std::int64_t percent_micros_;  // percent * 1e6
  std::int64_t reserve_micros_;  // min_per_second * N * 1e6
  std::mutex mu_;
  std::unique_ptr<Slot[]> slots_;  // one per second of the window
  std::atomic<std::int64_t> newest_epoch_{std::numeric_limits<std::int64_t>::min()};
  std::atomic<Slot*> current_{nullptr};              // the newest second's slot
  std::atomic<std::int64_t> window_deposits_{0};     // sum over slots_
  std::atomic<std::int64_t> window_withdrawals_{0};  // sum over slots_
};

class CostQuota final : public RetryBudget {
 public:
  static absl::StatusOr<std::shared_ptr<RetryBudget>> Create(CostQuotaOptions options);
  BudgetDecision OnFailure(const BudgetFailure& failure, TimePoint now) override;
  void OnSuccess(const BudgetReceipt& receipt, TimePoint now) override;
  void Refund(const BudgetReceipt& receipt, TimePoint now) override;
  double Balance(TimePoint now) const override;

  explicit CostQuota(CostQuotaOptions options);  // Create() validates

 private:
  CostQuotaOptions options_;
  std::atomic<std::int64_t> available_;
};

class UnlimitedBudget final : public RetryBudget {
 public:
  BudgetDecision OnFailure(const BudgetFailure&, TimePoint) override {
    return BudgetDecision::Allow();
  }
  double Balance(TimePoint) const override { return 1e300; }
};

// ---------------------------------------------------------------------------
// TokenThrottle

absl::StatusOr<std::shared_ptr<RetryBudget>> TokenThrottle::Create(TokenThrottleOptions options) {
  if (!(options.max_tokens > 0) || !(options.max_tokens <= 1000)) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens: must be in (0, 1000], got ", options.max_tokens));
  }
  if (ToMilliTruncated(options.max_tokens) <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_tokens: must be >= 0.001 (three decimals are kept), got ", options.max_tokens));
  }
  if (!(options.token_ratio > 0) || !std::isfinite(options.token_ratio)) {
    return absl::InvalidArgumentError(
        absl::StrCat("token_ratio: must be > 0 and finite, got ", options.token_ratio));
  }
  if (options.token_ratio > 1e12 || ToMilliTruncated(options.token_ratio) <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("token_ratio: must be in [0.001, 1e12] (three decimals are kept), got ",
                     options.token_ratio));
  }
  return std::shared_ptr<RetryBudget>(std::make_shared<TokenThrottle>(options));
}

TokenThrottle::TokenThrottle(TokenThrottleOptions options)
    : max_milli_(options.max_tokens > 0 && options.max_tokens <= 1000
                     ? std::max<std::int64_t>(1, ToMilliTruncated(options.max_tokens))
                     : 1000 * kMilli),
      ratio_milli_(options.token_ratio > 0 && options.token_ratio <= 1e12
                       ? std::max<std::int64_t>(0, ToMilliTruncated(options.token_ratio))
                       : 0),
      milli_tokens_(max_milli_) {}

BudgetDecision TokenThrottle::OnFailure(const BudgetFailure& /*failure*/, TimePoint /*now*/) {
  std::int64_t current = milli_tokens_.load(std::memory_order_relaxed);
  std::int64_t next;
  do {
    next = std::max<std::int64_t>(0, current - kMilli);
  } while (!milli_tokens_.compare_exchange_weak(current, next, std::memory_order_relaxed));
  // Strictly above half, decided on the value this failure left behind.
  // next * 2 > max avoids the rounding of max / 2 for odd milli counts. A
  // refusal keeps the charge for the failure itself, so it has no receipt.
  if (next * 2 > max_milli_) return BudgetDecision::Allow(BudgetReceipt::Of(current - next));
  return BudgetDecision::Refuse("throttle_at_or_below_half");
}

void TokenThrottle::Refund(const BudgetReceipt& receipt, TimePoint /*now*/) {
  if (receipt.empty()) return;
  AddCapped(milli_tokens_, receipt.first(), max_milli_);
}

void TokenThrottle::OnSuccess(const BudgetReceipt& /*receipt*/, TimePoint /*now*/) {
  std::int64_t current = milli_tokens_.load(std::memory_order_relaxed);
  std::int64_t next;
  do {
    next = std::min(max_milli_, current + ratio_milli_);
  } while (!milli_tokens_.compare_exchange_weak(current, next, std::memory_order_relaxed));
}

double TokenThrottle::Balance(TimePoint /*now*/) const {
  return static_cast<double>(milli_tokens_.load(std::memory_order_relaxed)) / kMilli;
}

// ---------------------------------------------------------------------------
// RatioBudget

absl::StatusOr<std::shared_ptr<RetryBudget>> RatioBudget::Create(RatioBudgetOptions options) {
  if (!(options.percent >= 0.0 && options.percent <= kMaxPercent)) {
    return absl::InvalidArgumentError(
        absl::StrCat("percent: must be in [0, 1000], got ", options.percent));
  }
  if (!(options.min_per_second >= 0.0) || !std::isfinite(options.min_per_second)) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_per_second: must be >= 0 and finite, got ", options.min_per_second));
  }
  if (options.window < std::chrono::seconds(1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "window: must be >= 1s, got ", absl::FormatDuration(absl::FromChrono(options.window))));
  }
  // One slot per second, allocated once: keep that allocation sane.
  if (options.window > std::chrono::hours(24)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "window: must be <= 24h, got ", absl::FormatDuration(absl::FromChrono(options.window))));
  }
  return std::shared_ptr<RetryBudget>(std::make_shared<RatioBudget>(options));
}

RatioBudget::RatioBudget(RatioBudgetOptions options)
    : options_(options),
      window_slots_(std::clamp<std::int64_t>(
          std::chrono::duration_cast<std::chrono::seconds>(options.window).count(), 1, 86400)),
      percent_micros_(options.percent >= 0.0 && options.percent <= kMaxPercent
                          ? std::llround(options.percent * kMicro)
                          : 0),
      reserve_micros_(0),
      slots_(new Slot[static_cast<std::size_t>(window_slots_)]) {
  double reserve = options.min_per_second * static_cast<double>(window_slots_) * kMicro;
  if (reserve >= kMaxReserveMicros) {
    reserve_micros_ = static_cast<std::int64_t>(kMaxReserveMicros);
  } else if (reserve > 0) {
    reserve_micros_ = std::llround(reserve);
  }
}

std::int64_t RatioBudget::EpochOf(TimePoint now) const {
  return std::chrono::floor<std::chrono::seconds>(now.time_since_epoch()).count();
}

std::int64_t RatioBudget::EffectiveEpoch(TimePoint now) const {
  return std::max(EpochOf(now), newest_epoch_.load(std::memory_order_acquire));
}

RatioBudget::Slot& RatioBudget::SlotOf(std::int64_t epoch) const {
  // One division (a steady clock's seconds are never negative in practice).
  std::int64_t index = epoch % window_slots_;
  if (index < 0) index += window_slots_;
  return slots_[static_cast<std::size_t>(index)];
}

RatioBudget::Slot& RatioBudget::SlotFor(std::int64_t epoch) {
  const std::int64_t newest = newest_epoch_.load(std::memory_order_relaxed);
  if (epoch > newest) {
    // Seconds newest+1 .. epoch take over the slots of the seconds that just
    // left the window; at most N slots need clearing however far we jump.
    std::int64_t first = epoch - window_slots_ + 1;
    if (newest != std::numeric_limits<std::int64_t>::min()) first = std::max(first, newest + 1);
    for (std::int64_t e = first; e <= epoch; ++e) {
      Slot& slot = SlotOf(e);
      window_deposits_.fetch_sub(slot.deposits.exchange(0, std::memory_order_relaxed),
                                 std::memory_order_relaxed);
      window_withdrawals_.fetch_sub(slot.withdrawals.exchange(0, std::memory_order_relaxed),
                                    std::memory_order_relaxed);
      slot.epoch.store(e, std::memory_order_release);
    }
    newest_epoch_.store(epoch, std::memory_order_release);
    current_.store(&SlotOf(epoch), std::memory_order_release);
  }
  return SlotOf(epoch);
}

RatioBudget::Slot& RatioBudget::CurrentSlot(TimePoint now, std::int64_t& epoch) {
  epoch = EpochOf(now);
  Slot* current = current_.load(std::memory_order_acquire);
  if (current != nullptr && current->epoch.load(std::memory_order_acquire) == epoch) {
    return *current;
  }
  // A new second (rotate), or a time older than the newest seen (its slot).
  std::lock_guard<std::mutex> lock(mu_);
  epoch = std::max(epoch, newest_epoch_.load(std::memory_order_relaxed));
  return SlotFor(epoch);
}

std::int64_t RatioBudget::ScanBalanceMicros(std::int64_t epoch) const {
  std::int64_t deposits = 0;
  std::int64_t withdrawals = 0;
  for (std::int64_t i = 0; i < window_slots_; ++i) {
    const Slot& slot = slots_[static_cast<std::size_t>(i)];
    const std::int64_t e = slot.epoch.load(std::memory_order_acquire);
    if (e > epoch - window_slots_ && e <= epoch) {
      deposits += slot.deposits.load(std::memory_order_relaxed);
      withdrawals += slot.withdrawals.load(std::memory_order_relaxed);
    }
  }
  return BalanceMicros(deposits, withdrawals);
}

std::int64_t RatioBudget::BalanceMicros(std::int64_t deposits, std::int64_t withdrawals) const {
  // reserve <= 1e18 and percent <= 1e9 millionths; deposits and withdrawals
  // are counts >= 0. Saturate each product and the sums so that no window is
  // busy enough to wrap the balance around.
  const std::int64_t credit =
      SaturatingAdd(reserve_micros_,
                    SaturatingMulNonNegative(percent_micros_, std::max<std::int64_t>(0, deposits)));
  return SaturatingSub(credit,
                       SaturatingMulNonNegative(kMicro, std::max<std::int64_t>(0, withdrawals)));
}

void RatioBudget::OnCallStart(TimePoint now) {
  std::int64_t epoch = 0;
  Slot* slot = &CurrentSlot(now, epoch);
  // The sum first, the slot second (see Slot).
  window_deposits_.fetch_add(1, std::memory_order_relaxed);
  slot->deposits.fetch_add(1, std::memory_order_relaxed);
}

BudgetDecision RatioBudget::OnFailure(const BudgetFailure& /*failure*/, TimePoint now) {
  std::int64_t epoch = 0;
  Slot* slot = &CurrentSlot(now, epoch);
  // Withdrawn only while a whole retry is left, decided and taken in one
  // compare-and-swap on the window's sum (the sum first, the slot second,
  // as deposits). A withdrawal racing the once-a-second rotation may be
  // judged against the deposits of the second that is leaving.
  const std::int64_t deposits = window_deposits_.load(std::memory_order_relaxed);
  std::int64_t withdrawals = window_withdrawals_.load(std::memory_order_relaxed);
  do {
    if (BalanceMicros(deposits, withdrawals) < kMicro) {
      return BudgetDecision::Refuse("ratio_exhausted");
    }
  } while (!window_withdrawals_.compare_exchange_weak(withdrawals, withdrawals + 1,
                                                      std::memory_order_relaxed));
  slot->withdrawals.fetch_add(1, std::memory_order_relaxed);
  return BudgetDecision::Allow(BudgetReceipt::Of(1, epoch));
}

void RatioBudget::Refund(const BudgetReceipt& receipt, TimePoint now) {
  if (receipt.empty() || receipt.first() != 1) return;
  std::lock_guard<std::mutex> lock(mu_);
  // Rotate first, so "still in the window" is judged at `now`.
  const std::int64_t epoch = EffectiveEpoch(now);
  (void)SlotFor(epoch);
  const std::int64_t second = receipt.second();
  if (second > epoch || second <= epoch - window_slots_) return;  // expired (or foreign)
  Slot& slot = SlotOf(second);
  if (slot.epoch.load(std::memory_order_relaxed) != second ||
      slot.withdrawals.load(std::memory_order_relaxed) <= 0) {
    return;
  }
  slot.withdrawals.fetch_sub(1, std::memory_order_relaxed);
  window_withdrawals_.fetch_sub(1, std::memory_order_relaxed);
}

double RatioBudget::Balance(TimePoint now) const {
  // Lock-free: the window sums while no rotation is due, else a scan that
  // leaves out the seconds that have left the window.
  const std::int64_t newest = newest_epoch_.load(std::memory_order_acquire);
  const std::int64_t epoch = EpochOf(now);
  const std::int64_t micros =
      epoch <= newest ? BalanceMicros(window_deposits_.load(std::memory_order_relaxed),
                                      window_withdrawals_.load(std::memory_order_relaxed))
                      : ScanBalanceMicros(epoch);
  return static_cast<double>(micros) / kMicro;
}

// ---------------------------------------------------------------------------
// CostQuota

absl::StatusOr<std::shared_ptr<RetryBudget>> CostQuota::Create(CostQuotaOptions options) {
  if (options.capacity < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("capacity: must be >= 0, got ", options.capacity));
  }
  if (options.retry_cost <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("retry_cost: must be > 0, got ", options.retry_cost));
  }
  if (options.timeout_cost <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeout_cost: must be > 0, got ", options.timeout_cost));
  }
  if (options.success_increment < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("success_increment: must be >= 0, got ", options.success_increment));
  }
  if (options.throttling_cost < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "throttling_cost: must be >= 0 (0 = retry_cost), got ", options.throttling_cost));
  }
  return std::shared_ptr<RetryBudget>(std::make_shared<CostQuota>(options));
}

CostQuota::CostQuota(CostQuotaOptions options)
    : options_(options), available_(std::max<std::int64_t>(0, options.capacity)) {}

BudgetDecision CostQuota::OnFailure(const BudgetFailure& failure, TimePoint /*now*/) {
  std::int64_t cost = options_.retry_cost;
  if (failure.throttled) {
    if (options_.throttling_cost > 0) cost = options_.throttling_cost;
  } else if (failure.cls == AttemptClass::kAmbiguous) {
    cost = options_.timeout_cost;
  }
  // A cost <= 0 only comes from options that skipped Create(): never let it
  // grow the pool.
  cost = std::max<std::int64_t>(cost, 1);
  std::int64_t current = available_.load(std::memory_order_relaxed);
  do {
    if (current < cost) return BudgetDecision::Refuse("quota_exhausted");
  } while (!available_.compare_exchange_weak(current, current - cost, std::memory_order_relaxed));
  return BudgetDecision::Allow(BudgetReceipt::Of(cost));
}

void CostQuota::OnSuccess(const BudgetReceipt& receipt, TimePoint /*now*/) {
  // A successful retry gives its cost back; a first-try success (no receipt)
  // earns the increment.
  const std::int64_t add = receipt.first() > 0 ? receipt.first() : options_.success_increment;
  AddCapped(available_, add, std::max<std::int64_t>(0, options_.capacity));
}

void CostQuota::Refund(const BudgetReceipt& receipt, TimePoint /*now*/) {
  if (receipt.empty()) return;
  AddCapped(available_, receipt.first(), std::max<std::int64_t>(0, options_.capacity));
}

double CostQuota::Balance(TimePoint /*now*/) const {
  return static_cast<double>(available_.load(std::memory_order_relaxed));
}

}  // namespace

bool IsThrottling(const AttemptEvidence& evidence) {
  if (!evidence.http_status.has_value()) return false;
  const int status = *evidence.http_status;
  return status == 429 || (status == 503 && evidence.hints.retry_after.has_value());
}

absl::StatusOr<std::shared_ptr<RetryBudget>> MakeTokenThrottle(TokenThrottleOptions options) {
  return TokenThrottle::Create(options);
}

absl::StatusOr<std::shared_ptr<RetryBudget>> MakeRatioBudget(RatioBudgetOptions options) {
  return RatioBudget::Create(options);
}

absl::StatusOr<std::shared_ptr<RetryBudget>> MakeCostQuota(CostQuotaOptions options) {
  return CostQuota::Create(options);
}

std::shared_ptr<RetryBudget> MakeUnlimitedBudget() { return std::make_shared<UnlimitedBudget>(); }

CostQuotaOptions CostQuotaOptions::Aws2026() {
  CostQuotaOptions options;
  options.capacity = 500;
  options.retry_cost = 14;
  options.timeout_cost = 14;
  options.success_increment = 1;
  options.throttling_cost = 5;
  return options;
}

BackoffParams Aws2026ThrottlingBackoff() {
  BackoffParams params;
  params.base = std::chrono::seconds(1);
  params.multiplier = 2.0;
  params.cap = std::chrono::seconds(20);
  params.jitter = JitterKind::kFull;
  return params;
}

BackoffParams Aws2026Backoff() {
  BackoffParams params;
  params.base = std::chrono::milliseconds(50);
  params.multiplier = 2.0;
  params.cap = std::chrono::seconds(20);
  params.jitter = JitterKind::kFull;
  return params;
}

}  // namespace saferetry

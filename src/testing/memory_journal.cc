// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/testing/memory_journal.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace saferetry {
namespace testkit {
namespace {

using internal::FromUnixMillis;
using internal::ToUnixMillis;

absl::Status NoIntent(std::string_view key) {
  return absl::NotFoundError(absl::StrCat("idempotency_key: no intent \"", std::string(key), "\""));
}

class MemoryJournal final : public IntentJournal {
 public:
  explicit MemoryJournal(const JournalOptions& options)
      : options_(options),
        owner_(internal::JournalOwner(options)),
        clock_(options.clock != nullptr ? options.clock : SystemClock()) {}

  std::string Owner() const override { return owner_; }

  absl::StatusOr<RecordResult> Record(const Intent& intent) override {
    absl::StatusOr<Intent> normal = internal::NormalizeIntent(intent, options_, owner_, Now());
    if (!normal.ok()) return normal.status();
    std::lock_guard<std::mutex> lock(mu_);
    auto it = intents_.find(normal->key);
    if (it != intents_.end()) {
      if (auto s = internal::CheckSameIntent(it->second, *normal); !s.ok()) return s;
      return RecordResult{it->second, false};
    }
    intents_.emplace(normal->key, *normal);
    return RecordResult{*std::move(normal), true};
  }

  absl::Status MarkSent(std::string_view key, int attempt) override {
    std::lock_guard<std::mutex> lock(mu_);
    Intent* intent = Find(key);
    if (intent == nullptr) return NoIntent(key);
    if (auto s = internal::CheckMarkSent(*intent, attempt); !s.ok()) return s;
    intent->state = IntentState::kSent;
    intent->attempt = attempt;
    intent->updated = Now();
    return absl::OkStatus();
  }

  absl::Status Finish(std::string_view key, IntentState outcome,
                      const IntentSummary& summary) override {
    std::lock_guard<std::mutex> lock(mu_);
    Intent* intent = Find(key);
    if (intent == nullptr) return NoIntent(key);
    if (auto s = internal::CheckFinish(*intent, outcome); !s.ok()) return s;
    intent->state = outcome;
    intent->summary = internal::RedactSummary(summary);
    intent->updated = Now();
    return absl::OkStatus();
  }

  absl::StatusOr<Intent> Get(std::string_view key) override {
    std::lock_guard<std::mutex> lock(mu_);
    Intent* intent = Find(key);
    if (intent == nullptr) return NoIntent(key);
    return *intent;
  }

  absl::StatusOr<std::vector<Intent>> ListUnfinished(const UnfinishedFilter& filter) override {
    if (filter.older_than.has_value() && filter.older_than->count() < 0) {
      return absl::InvalidArgumentError("older_than: must be >= 0");
    }
    const WallTime now = Now();
    const std::int64_t now_ms = ToUnixMillis(now);
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Intent> out;
    for (const auto& [key, intent] : intents_) {
      if (IsResolved(intent.state)) continue;
      if (filter.older_than.has_value() &&
          ToUnixMillis(intent.created) > now_ms - filter.older_than->count()) {
        continue;
      }
      if (filter.deadline_passed && intent.deadline > now) continue;
      if (filter.claim_expired && !intent.claim_owner.empty() && intent.claim_until > now) {
        continue;
      }
      out.push_back(intent);
    }
    std::sort(out.begin(), out.end(), [](const Intent& a, const Intent& b) {
      return std::tie(a.created, a.key) < std::tie(b.created, b.key);
    });
    if (filter.limit != 0 && out.size() > filter.limit) out.resize(filter.limit);
    return out;
  }

  absl::StatusOr<bool> Claim(std::string_view key, std::string_view owner,
                             WallTime until) override {
    if (owner.empty()) return absl::InvalidArgumentError("owner: must not be empty");
    const WallTime now = Now();
    std::lock_guard<std::mutex> lock(mu_);
    Intent* intent = Find(key);
    if (intent == nullptr) return NoIntent(key);
    if (IsResolved(intent->state)) return false;
    if (!intent->claim_owner.empty() && intent->claim_owner != owner && intent->claim_until > now) {
      return false;
    }
    intent->claim_owner = std::string(owner);
    intent->claim_until = FromUnixMillis(ToUnixMillis(until));
    intent->updated = now;
    return true;
  }

  absl::StatusOr<bool> Release(std::string_view key, std::string_view owner) override {
    std::lock_guard<std::mutex> lock(mu_);
    Intent* intent = Find(key);
    if (intent == nullptr) return NoIntent(key);
    if (owner.empty() || intent->claim_owner != owner) return false;
    intent->claim_owner.clear();
    intent->claim_until = WallTime{};
    intent->updated = Now();
    return true;
  }

  absl::StatusOr<PruneResult> Prune(WallTime now, std::chrono::milliseconds retention) override {
    if (retention.count() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("retention: must be >= 0, got ", retention.count(), "ms"));
    }
    const WallTime cutoff = FromUnixMillis(ToUnixMillis(now) - retention.count());
    std::lock_guard<std::mutex> lock(mu_);
    PruneResult result;
    for (auto it = intents_.begin(); it != intents_.end();) {
      const Intent& intent = it->second;
      if (IsResolved(intent.state) && intent.updated <= cutoff) {
        it = intents_.erase(it);
        ++result.pruned;
        continue;
      }
      if (!IsResolved(intent.state) && intent.created <= cutoff) ++result.kept_unresolved;
      ++it;
    }
    return result;
  }

  absl::StatusOr<std::optional<std::chrono::milliseconds>> OldestUnresolvedAge() override {
    const WallTime now = Now();
    std::lock_guard<std::mutex> lock(mu_);
    std::optional<WallTime> oldest;
    for (const auto& [key, intent] : intents_) {
      if (IsResolved(intent.state)) continue;
      if (!oldest.has_value() || intent.created < *oldest) oldest = intent.created;
    }
    if (!oldest.has_value()) return std::optional<std::chrono::milliseconds>();
    const std::int64_t age = ToUnixMillis(now) - ToUnixMillis(*oldest);
    return std::optional<std::chrono::milliseconds>(std::chrono::milliseconds(age > 0 ? age : 0));
  }

 private:
  // The journal's clock at millisecond precision, as the SQLite journal stores it.
  WallTime Now() { return FromUnixMillis(ToUnixMillis(clock_->WallNow())); }

  Intent* Find(std::string_view key) {
    auto it = intents_.find(std::string(key));
    return it == intents_.end() ? nullptr : &it->second;
  }

  const JournalOptions options_;
  const std::string owner_;
  const std::shared_ptr<Clock> clock_;
  std::mutex mu_;
  std::map<std::string, Intent> intents_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<IntentJournal>> MakeMemoryJournal(const JournalOptions& options) {
  if (auto s = internal::ValidateJournalOptions(options); !s.ok()) return s;
  return std::shared_ptr<IntentJournal>(std::make_shared<MemoryJournal>(options));
}

}  // namespace testkit
}  // namespace saferetry

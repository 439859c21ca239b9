// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/reconciler.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace saferetry {

absl::Status ValidateReconcilerOptions(const ReconcilerOptions& options) {
  if (options.older_than.has_value() && options.older_than->count() < 0) {
    return absl::InvalidArgumentError("reconciler.older_than: must be >= 0");
  }
  if (options.max_intents < 1) {
    return absl::InvalidArgumentError("reconciler.max_intents: must be >= 1, got 0");
  }
  if (options.time_limit <= Duration::zero()) {
    return absl::InvalidArgumentError("reconciler.time_limit: must be > 0");
  }
  if (options.wait_for_claims < Duration::zero()) {
    return absl::InvalidArgumentError("reconciler.wait_for_claims: must be >= 0");
  }
  if (options.prune_older_than.has_value() && options.prune_older_than->count() < 0) {
    return absl::InvalidArgumentError("reconciler.prune_older_than: must be >= 0");
  }
  absl::Status s = ValidateResolveOptions(options.resolve);
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("reconciler.", s.message()));
  return absl::OkStatus();
}

std::string_view SkipReasonName(SkipReason reason) {
  switch (reason) {
    case SkipReason::kClaimed:
      return "claimed";
    case SkipReason::kInFlight:
      return "in_flight";
    case SkipReason::kTooRecent:
      return "too_recent";
    case SkipReason::kNotReached:
      return "not_reached";
  }
  return "not_reached";
}

int ReconcileReport::CountSkipped(SkipReason why) const {
  return static_cast<int>(std::count_if(skipped.begin(), skipped.end(),
                                        [why](const SkippedIntent& s) { return s.why == why; }));
}

Reconciler::Reconciler(Client* client, ReconcilerOptions options)
    : client_(client), options_(std::move(options)) {}

namespace {

// Why an unfinished intent that is not eligible now was left alone.
SkipReason WhySkipped(const Intent& intent, WallTime now,
                      const std::optional<std::chrono::milliseconds>& older_than) {
  if (!intent.claim_owner.empty() && intent.claim_until > now) return SkipReason::kClaimed;
  if (older_than.has_value()) {
    if (intent.created > now - *older_than) return SkipReason::kTooRecent;
  } else if (intent.deadline > now) {
    return SkipReason::kInFlight;
  }
  return SkipReason::kNotReached;
}

}  // namespace

absl::StatusOr<ReconcileReport> Reconciler::RunOnce() {
  if (client_ == nullptr || client_->options().journal == nullptr) {
    return absl::InvalidArgumentError("journal: the client has none");
  }
  if (absl::Status s = ValidateReconcilerOptions(options_); !s.ok()) return s;
  IntentJournal& journal = *client_->options().journal;
  Clock& clock = *client_->options().clock;
  const TimePoint start = clock.Now();

  UnfinishedFilter filter;
  filter.claim_expired = true;
  filter.deadline_passed = !options_.older_than.has_value();
  filter.older_than = options_.older_than;
  filter.limit = options_.max_intents;
  absl::StatusOr<std::vector<Intent>> listed = journal.ListUnfinished(filter);
  if (!listed.ok()) return listed.status();

  ReconcileReport report;
  std::set<std::string> tried_keys;
  std::set<std::string> taken_keys;  // claimed by another owner during the run
  bool stop = false;
  // Tries each intent of `intents` not tried yet; false once the run must stop.
  auto walk = [&](std::vector<Intent>& intents) {
    for (Intent& intent : intents) {
      if (stop) return;
      if (tried_keys.count(intent.key) > 0 || taken_keys.count(intent.key) > 0) continue;
      const Duration left = options_.time_limit - (clock.Now() - start);
      if (left <= Duration::zero()) {
        report.stopped_early = true;
        stop = true;
        return;
      }
      ResolveOptions resolve = options_.resolve;
      resolve.timeout = std::min(resolve.timeout, left);
      CallResult r = client_->Resolve(intent.key, resolve);
      if (r.outcome == Outcome::kUnknown && r.stop_reason == StopReason::kAmbiguousUnresolved &&
          r.status.code() == absl::StatusCode::kFailedPrecondition && r.status_queries == 0) {
        ++report.skipped_claimed;  // another reconciler (or the call) took it
        taken_keys.insert(intent.key);
        continue;
      }
      if (r.outcome != Outcome::kUnknown && r.status_queries == 0 && r.attempts == 0 &&
          r.evidence.empty()) {
        // Resolved meanwhile by another owner (a reconciler, or the call
        // itself): its stored outcome, not this run's resolution. Not
        // counted, no hook: the resolver reports it.
        taken_keys.insert(intent.key);
        continue;
      }
      tried_keys.insert(intent.key);
      // Resolve reports a failed write-back as "journal: ..." in `status`.
      const bool journal_failed = r.stop_reason == StopReason::kJournalUnavailable ||
                                  absl::StartsWith(r.status.message(), "journal: ");
      switch (r.outcome) {
        case Outcome::kSucceeded:
          ++report.succeeded;
          break;
        case Outcome::kFailed:
          ++report.failed;
          break;
        case Outcome::kUnknown:
          ++report.unknown;
          break;
      }
      if (r.outcome != Outcome::kUnknown && !journal_failed && options_.on_resolved) {
        options_.on_resolved(intent, r);
      }
      const bool budget_stop = r.stop_reason == StopReason::kBudgetExhausted;
      if (journal_failed && report.journal_status.ok()) {
        report.journal_status =
            r.status.ok() ? absl::UnavailableError("journal: unavailable") : r.status;
      }
      report.tried.push_back(ReconciledIntent{std::move(intent), std::move(r)});
      if (journal_failed) {
        stop = true;
        return;
      }
      if (budget_stop) {
        report.stopped_early = true;
        stop = true;
        return;
      }
    }
  };
  // Every unfinished intent not tried, and why (bounded like the walk).
  auto list_skipped = [&]() -> absl::Status {
    UnfinishedFilter all;
    all.limit = options_.max_intents;
    absl::StatusOr<std::vector<Intent>> unfinished = journal.ListUnfinished(all);
    if (!unfinished.ok()) return unfinished.status();
    report.skipped.clear();
    const WallTime now = clock.WallNow();
    for (Intent& intent : *unfinished) {
      if (tried_keys.count(intent.key) > 0) continue;
      const SkipReason why = taken_keys.count(intent.key) > 0
                                 ? SkipReason::kClaimed
                                 : WhySkipped(intent, now, options_.older_than);
      report.skipped.push_back(SkippedIntent{std::move(intent), why});
    }
    return absl::OkStatus();
  };

  walk(*listed);
  if (absl::Status s = list_skipped(); !s.ok() && report.journal_status.ok()) {
    report.journal_status = s;
  }
  // Wait, within the bound, for claims to run out, then try those intents.
  const TimePoint wait_end =
      clock.Now() +
      std::min(options_.wait_for_claims,
               std::max(Duration::zero(), options_.time_limit - (clock.Now() - start)));
  while (!stop && report.journal_status.ok() && clock.Now() < wait_end) {
    const WallTime wall_now = clock.WallNow();
    const WallTime wall_end = wall_now + (wait_end - clock.Now());
    std::optional<WallTime> next;
    for (const SkippedIntent& s : report.skipped) {
      if (s.why != SkipReason::kClaimed || s.intent.claim_until > wall_end) continue;
      if (!next.has_value() || s.intent.claim_until < *next) next = s.intent.claim_until;
    }
    if (!next.has_value()) break;
    // A little past the expiry: the journal's clock decides, not ours.
    const Duration pause =
        std::max(Duration::zero(), *next - wall_now) + std::chrono::milliseconds(10);
    clock.SleepFor(std::min(pause, std::max(Duration::zero(), wait_end - clock.Now())));
    taken_keys.clear();  // a claim taken meanwhile may have run out too
    absl::StatusOr<std::vector<Intent>> again = journal.ListUnfinished(filter);
    if (!again.ok()) {
      report.journal_status = again.status();
      break;
    }
    walk(*again);
    if (absl::Status s = list_skipped(); !s.ok()) {
      report.journal_status = s;
      break;
    }
  }

  if (options_.prune_older_than.has_value() && report.journal_status.ok()) {
    absl::StatusOr<PruneResult> pruned = journal.Prune(clock.WallNow(), *options_.prune_older_than);
    if (pruned.ok()) {
      report.pruned = *pruned;
    } else {
      report.journal_status = pruned.status();
    }
  }
  absl::StatusOr<std::optional<std::chrono::milliseconds>> age = journal.OldestUnresolvedAge();
  if (age.ok()) {
    report.oldest_unresolved_age = *age;
  } else if (report.journal_status.ok()) {
    report.journal_status = age.status();
  }
  return report;
}

}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/reconciler.h"

#include <algorithm>
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
  if (options.prune_older_than.has_value() && options.prune_older_than->count() < 0) {
    return absl::InvalidArgumentError("reconciler.prune_older_than: must be >= 0");
  }
  absl::Status s = ValidateResolveOptions(options.resolve);
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("reconciler.", s.message()));
  return absl::OkStatus();
}

Reconciler::Reconciler(Client* client, ReconcilerOptions options)
    : client_(client), options_(std::move(options)) {}

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
  for (Intent& intent : *listed) {
    const Duration left = options_.time_limit - (clock.Now() - start);
    if (left <= Duration::zero()) {
      report.stopped_early = true;
      break;
    }
    ResolveOptions resolve = options_.resolve;
    resolve.timeout = std::min(resolve.timeout, left);
    CallResult r = client_->Resolve(intent.key, resolve);
    if (r.outcome == Outcome::kUnknown && r.stop_reason == StopReason::kAmbiguousUnresolved &&
        r.status.code() == absl::StatusCode::kFailedPrecondition && r.status_queries == 0) {
      ++report.skipped_claimed;  // another reconciler (or the call) took it
      continue;
    }
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
    if (journal_failed) break;
    if (budget_stop) {
      report.stopped_early = true;
      break;
    }
  }

  if (options_.prune_older_than.has_value() && report.journal_status.ok()) {
    absl::StatusOr<PruneResult> pruned =
        journal.Prune(clock.WallNow(), *options_.prune_older_than);
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

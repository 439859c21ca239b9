// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The reconciler: walks the journal's unfinished intents (PENDING, SENT,
// UNKNOWN) that are eligible, and settles each one with `Client::Resolve` —
// status queries only, "no effect" only from a definite or fenced answer —
// writing the outcome back. Run it periodically (docs/reconciliation.md):
// every UNKNOWN must end SUCCEEDED or FAILED, or someone must be told.
//
// Eligible, by default: the intent's deadline has passed (its call is over)
// and nobody holds a live claim on it (a process killed mid-call holds its
// claim until the deadline plus a short grace). `older_than` replaces the
// deadline rule: every intent created at least that long ago whose claim has
// expired, whatever its deadline.
//
// Nothing unresolved goes unmentioned: every unfinished intent a run does not
// try is in `ReconcileReport::skipped`, with the reason (claimed by whom until
// when, in flight, too recent, not reached); `wait_for_claims` lets a run wait
// a bounded time for claims to run out.
//
// Bounded: at most `max_intents` per run, no new intent after `time_limit`,
// and each intent's queries within `resolve.timeout` and the client's
// status-query allowance (the run stops when the allowance refuses).
//
// @code
//   saferetry::ReconcilerOptions options;
//   options.resolve.headers = {{"Authorization", token}};
//   options.on_resolved = [](const saferetry::Intent& intent, const saferetry::CallResult& r) {
//     orders_screen.Settle(intent.key, r.outcome);
//   };
//   saferetry::Reconciler reconciler(client.get(), options);
//   absl::StatusOr<saferetry::ReconcileReport> report = reconciler.RunOnce();
// @endcode

#ifndef SAFERETRY_RECONCILER_H_
#define SAFERETRY_RECONCILER_H_

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "saferetry/client.h"
#include "saferetry/journal.h"

namespace saferetry {

/// Options of a `Reconciler`. Plain struct; defaults per field.
struct ReconcilerOptions {
  /// nullopt (the default): intents whose deadline has passed and whose
  /// claim has expired. Set: intents created at least this long ago whose
  /// claim has expired, whatever their deadline (0 ms: every one). >= 0.
  std::optional<std::chrono::milliseconds> older_than;
  /// Intents tried per run, >= 1. Default 1000.
  std::size_t max_intents = 1000;
  /// No intent is started after this much time (the client's clock), > 0.
  /// Default 1 min. An intent's own queries are also bounded by
  /// `resolve.timeout`, shortened to what is left.
  Duration time_limit = std::chrono::minutes(1);
  /// How each intent is resolved: status URL override, credentials, fence.
  ResolveOptions resolve;
  /// Called on the reconciler's thread for each intent the run resolved
  /// (SUCCEEDED or FAILED), after the outcome is written. Must not throw.
  std::function<void(const Intent& intent, const CallResult& result)> on_resolved;
  /// After the walk, wait up to this long (within `time_limit`) for the
  /// claims of intents skipped as claimed to expire, and try each one whose
  /// claim ends in that time (a call killed mid-way holds its claim until its
  /// deadline plus the journal's grace). 0 (the default): do not wait.
  /// >= 0.
  Duration wait_for_claims{0};
  /// When set, after the walk: `Prune` resolved intents last updated at
  /// least this long ago. Unresolved intents are never pruned; how many were
  /// kept past the retention is reported (`PruneResult::kept_unresolved`).
  std::optional<std::chrono::milliseconds> prune_older_than;
};

/// InvalidArgument naming the field ("reconciler.max_intents: ...").
absl::Status ValidateReconcilerOptions(const ReconcilerOptions& options);

/// Why a run left an unfinished intent alone.
enum class SkipReason {
  /// Someone holds a live claim: `intent.claim_owner` until
  /// `intent.claim_until` (a call in flight, a process killed mid-call until
  /// its claim runs out, another reconciler).
  kClaimed,
  /// Nobody holds it, but its deadline has not passed: its call may still
  /// be running.
  kInFlight,
  /// Created less than `older_than` ago.
  kTooRecent,
  /// Eligible, but the run ended first (`max_intents`, `time_limit`, the
  /// status-query allowance, a journal error).
  kNotReached,
};

/// "claimed", "in_flight", "too_recent", "not_reached".
std::string_view SkipReasonName(SkipReason reason);

/// One unfinished intent a run did not try.
struct SkippedIntent {
  /// As listed (claim owner and expiry, created, updated, deadline, state).
  Intent intent;
  SkipReason why = SkipReason::kClaimed;
};

/// One intent a run tried.
struct ReconciledIntent {
  /// The intent as listed before it was resolved.
  Intent intent;
  /// What `Client::Resolve` returned.
  CallResult result;
};

/// What one run did.
struct ReconcileReport {
  /// Every intent tried, in the order tried (oldest first).
  std::vector<ReconciledIntent> tried;
  int succeeded = 0;
  int failed = 0;
  /// Still UNKNOWN after this run (including journal failures).
  int unknown = 0;
  /// Listed but taken by another owner before this run could claim them
  /// (also in `skipped`, as kClaimed).
  int skipped_claimed = 0;
  /// Every unfinished intent the run did not try, and why (at most
  /// `max_intents` of them, oldest first): nothing unresolved goes
  /// unmentioned. They do not count as `unknown`.
  std::vector<SkippedIntent> skipped;
  /// How many of `skipped` have `why`.
  int CountSkipped(SkipReason why) const;
  /// True when `time_limit` or the status-query allowance stopped the walk
  /// before every eligible intent was tried.
  bool stopped_early = false;
  /// The first journal error met while resolving or pruning (OK if none);
  /// the walk stops at it.
  absl::Status journal_status;
  /// Set when `prune_older_than` was given and the prune ran.
  std::optional<PruneResult> pruned;
  /// The age of the oldest unresolved intent after the run (nullopt: none);
  /// the gauge itself is exported with `AddJournalGauge` (metrics.h).
  std::optional<std::chrono::milliseconds> oldest_unresolved_age;
};

/// Runs reconciliation passes over `client`'s journal. Not thread-safe (one
/// run at a time per object); several reconcilers, in one process or many,
/// may share a journal: claims keep them off each other's intents.
class Reconciler {
 public:
  /// `client` must outlive the reconciler and have a journal.
  Reconciler(Client* client, ReconcilerOptions options);

  /// One pass. Errors: InvalidArgument naming the option or "journal" when
  /// the client has none; the journal's error when the unfinished intents
  /// cannot be listed. Everything after that is in the report.
  absl::StatusOr<ReconcileReport> RunOnce();

 private:
  Client* client_;
  ReconcilerOptions options_;
};

}  // namespace saferetry

#endif  // SAFERETRY_RECONCILER_H_

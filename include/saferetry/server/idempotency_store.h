// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The idempotency store: the server's half of the retry contract
// (docs/server-contract.md) as a durable record per key.
//
// A keyed write goes through three steps:
//
//   1. Begin(scope, digest)        short transaction; an atomic insert picks
//                                  one winner, which holds a lease and a
//                                  fencing version
//   2. the work                    outside any transaction (slow calls)
//   3. Complete(scope, version, effect)
//                                  one transaction: run the business effect
//                                  and mark the record COMPLETED with its
//                                  answer, only if the fencing version is
//                                  still `version`
//
// The invariant: the business effect exists if and only if the record says
// COMPLETED with it, because both commit together or not at all.
//
// A status query reads the record (`Read`) and may ask for a **fence**
// (`Fence`): a key whose fate is not settled (never seen, or PROCESSING with
// an expired lease) is settled as "no effect, ever" and every later request
// with it is refused.
//
// @code
//   saferetry::server::SqliteOptions db;
//   db.path = "orders.db";
//   auto store = saferetry::server::OpenSqliteStore(db, {});
//   auto begun = (*store)->Begin(scope, digest);
//   if (begun->outcome == BeginOutcome::kClaimed) {
//     auto done = (*store)->Complete(scope, begun->version, [&](Transaction& txn)
//         -> absl::StatusOr<StoredResponse> {
//       auto rows = txn.Execute("INSERT INTO orders (sku) VALUES ($1) RETURNING id", {sku});
//       if (!rows.ok()) return rows.status();
//       return StoredResponse{201, OrderJson((*rows)[0].Int(0))};
//     });
//   }
// @endcode

#ifndef SAFERETRY_SERVER_IDEMPOTENCY_STORE_H_
#define SAFERETRY_SERVER_IDEMPOTENCY_STORE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "saferetry/clock.h"
#include "saferetry/server/sql.h"

namespace saferetry {
namespace server {

/// Wall-clock milliseconds since the Unix epoch, as stored (leases and
/// retention outlive processes, so they use the wall clock).
using EpochMillis = std::int64_t;

/// Where a key lives: keys are unique per tenant and operation, never
/// globally. Each field is 1 to 255 bytes.
struct KeyScope {
  std::string tenant;
  std::string operation;
  std::string key;
};

/// A final answer kept for replay: every final answer, not only 2xx.
struct StoredResponse {
  int status = 0;
  std::string body;
};

/// The state of a key as stored.
enum class RecordState {
  /// Claimed; a worker holds (or held) the lease.
  kProcessing,
  /// The effect (or a final error) committed; the response replays.
  kCompleted,
  /// Settled by a fence: no effect happened and none ever will.
  kFenced,
  /// Completed long ago and reaped into a tombstone: the response is gone,
  /// the key is still refused.
  kExpired,
  /// A recovery could not tell whether the effect happened (the external
  /// system has no query, or recoveries kept failing): automatic work has
  /// stopped and a person decides (`IdempotencyStore::Decide`).
  kPendingConfirmation,
};

/// "PROCESSING", "COMPLETED", "FENCED", "EXPIRED" or "PENDING_CONFIRMATION".
std::string_view RecordStateName(RecordState state);

/// A recovery point: the work is about to call an external system (a
/// payment channel, a warehouse) as step `name`, with `external_id` as that
/// system's request id. Recorded in its own short transaction before the
/// call, so whoever takes the key over can ask the system "did you do
/// `external_id`?" instead of calling again.
struct RecoveryStep {
  /// 1 to 255 bytes, e.g. "charge".
  std::string name;
  /// 1 to 255 bytes; `DefaultExternalRequestId` derives it from the key.
  std::string external_id;
  /// Set by the store.
  EpochMillis recorded_ms = 0;
};

/// The external request id for `step` of the key in `scope`: "sr-" + the
/// first 40 hex digits of SHA-256(tenant "\n" operation "\n" key "\n" step).
/// The same for every worker and every takeover, so the business key crosses
/// the boundary and a repeated call is recognised by the external system.
std::string DefaultExternalRequestId(const KeyScope& scope, std::string_view step);

/// A person's decision on a record pending confirmation.
struct Decision {
  enum class Outcome { kSucceeded, kFailed };
  Outcome outcome = Outcome::kFailed;
  /// The final answer to store and replay: 2xx for kSucceeded (e.g. the
  /// channel's charge), 4xx for kFailed (e.g. 402 with the reason).
  StoredResponse response;
  /// Who decided: 1 to 255 bytes.
  std::string decided_by;
  /// Why: 1 to 4096 bytes (the evidence looked at).
  std::string reason;
  /// Set by the store.
  EpochMillis decided_ms = 0;
};

/// "succeeded" or "failed".
std::string_view DecisionOutcomeName(Decision::Outcome outcome);

/// A key's record (or its tombstone when `state == kExpired`).
struct KeyRecord {
  std::string request_digest;  // "" for a key fenced before it was ever seen
  RecordState state = RecordState::kProcessing;
  /// The fencing version: 1 at the claim, +1 at every takeover and fence.
  std::int64_t version = 0;
  EpochMillis lease_expires_ms = 0;
  /// PROCESSING only: the lease had run out when the record was read (by the
  /// store's clock).
  bool lease_expired = false;
  /// The stored answer (COMPLETED; for EXPIRED only the status survives).
  StoredResponse response;
  EpochMillis created_ms = 0;
  EpochMillis updated_ms = 0;
  std::optional<EpochMillis> completed_ms;
  /// The last recovery step recorded by a worker (kept after completion),
  /// or nullopt.
  std::optional<RecoveryStep> step;
  /// Recoveries by the sweeper that could not check the facts.
  int recovery_failures = 0;
  /// PENDING_CONFIRMATION: since when, and why.
  std::optional<EpochMillis> pending_since_ms;
  std::string pending_reason;
  /// The person's decision, once recorded (the record is then COMPLETED
  /// with the decision's answer).
  std::optional<Decision> decision;
};

/// A record with its scope, as listed for the sweeper and the
/// pending-confirmation queue.
struct ScopedRecord {
  KeyScope scope;
  KeyRecord record;
};

/// What `RecordStep` did.
struct StepResult {
  /// False when the version had moved on (a takeover or a fence): nothing
  /// was written, and the caller must not call the external system.
  bool recorded = false;
  RecoveryStep step;
};

/// What `Decide` did.
enum class DecideOutcome {
  /// The decision is now recorded; the record is COMPLETED with its answer.
  kRecorded,
  /// The same decision (outcome and answer) was recorded before: unchanged.
  kAlreadyRecorded,
  /// Another decision was recorded before: refused, unchanged.
  kConflictingDecision,
  /// The record is not pending confirmation (and was never decided).
  kNotPending,
  /// No record for the key.
  kNotFound,
};

struct DecideResult {
  DecideOutcome outcome = DecideOutcome::kNotFound;
  /// The record after the call (unset for kNotFound).
  KeyRecord record;
};

/// Point-in-time numbers for dashboards and alerts.
struct StoreGauges {
  /// PROCESSING records, and the age of the oldest (now - created), 0 when
  /// there is none.
  std::int64_t processing = 0;
  std::int64_t oldest_processing_age_ms = 0;
  /// PROCESSING records whose lease ran out (waiting for a resend or the
  /// sweeper).
  std::int64_t abandoned = 0;
  /// Records waiting for a person's decision.
  std::int64_t pending_confirmation = 0;
};

/// What step 1 found.
enum class BeginOutcome {
  /// A new record was inserted: the caller owns the key at version 1.
  kClaimed,
  /// The record was PROCESSING with an expired lease: the caller now owns it
  /// at the previous version + 1; the previous worker can no longer complete.
  /// `previous` holds the record as it was (for the takeover hook).
  kTakenOver,
  /// COMPLETED with the same digest: `response` is the answer to replay.
  kReplay,
  /// The key was used for a different request (digest differs).
  kConflictingPayload,
  /// PROCESSING, lease still running: someone else is working on it.
  kInProgress,
  /// The key completed before the retention window and was reaped.
  kExpired,
  /// The key was fenced by a status query: refused, whatever the digest.
  kFenced,
  /// The key waits for a person's decision: refused (same digest; another
  /// digest is kConflictingPayload). `previous` holds the record.
  kPendingConfirmation,
};

struct BeginResult {
  BeginOutcome outcome = BeginOutcome::kClaimed;
  /// The version the caller owns (kClaimed, kTakenOver) or the record's
  /// current version (others; 0 for kExpired).
  std::int64_t version = 0;
  /// The stored answer (kReplay).
  StoredResponse response;
  /// The record before the takeover (kTakenOver), or as it is
  /// (kPendingConfirmation).
  std::optional<KeyRecord> previous;
};

/// The business effect of step 3: runs inside the completing transaction and
/// returns the final answer to store. A non-OK status rolls everything back
/// (the record stays PROCESSING). An effect that decides on a final error
/// (e.g. a 400 for an invalid body) writes nothing and returns that answer.
using Effect = std::function<absl::StatusOr<StoredResponse>(Transaction& txn)>;

struct CompleteResult {
  /// False when the version had moved on (a takeover or a fence): nothing was
  /// written and the effect did not run.
  bool committed = false;
  /// The stored answer (committed).
  StoredResponse response;
  /// The record as it is now (not committed), to answer the stale worker.
  std::optional<KeyRecord> current;
};

/// What a fence did.
enum class FenceOutcome {
  /// The key is FENCED (now, or already before): no effect, ever.
  kFenced,
  /// PROCESSING with a running lease: not fenced.
  kProcessing,
  /// COMPLETED: its fate is settled; `record` holds the answer.
  kCompleted,
  /// Reaped: not fenced; `record` is the tombstone.
  kExpired,
  /// Pending confirmation: its fate is a person's to decide; not fenced.
  kPendingConfirmation,
};

struct FenceResult {
  FenceOutcome outcome = FenceOutcome::kFenced;
  /// The record after the fence (or as found).
  KeyRecord record;
  /// True when this call wrote the fence (false when it was already there).
  bool newly_fenced = false;
};

/// How long things last. Defaults: lease 30 s, retention 24 h.
struct StoreOptions {
  /// How long a claim protects a PROCESSING record from takeover. > 0.
  std::chrono::milliseconds lease = std::chrono::seconds(30);
  /// How long a COMPLETED record replays before `Reap` turns it into a
  /// tombstone. > 0.
  std::chrono::milliseconds retention = std::chrono::hours(24);
};

/// A durable store of idempotency records. Implementations are thread-safe
/// and safe across processes sharing one database. Every method returns an
/// error status (never throws) when the database fails; nothing is then
/// changed.
class IdempotencyStore {
 public:
  virtual ~IdempotencyStore() = default;

  /// Step 1: claims the key or reports what its record says. Never runs an
  /// effect. A takeover (lease expired, same digest) bumps the version in the
  /// same transaction, which fences off the previous worker.
  virtual absl::StatusOr<BeginResult> Begin(const KeyScope& scope,
                                            std::string_view request_digest) = 0;

  /// Step 3: in one transaction, checks the record is still PROCESSING at
  /// `version`, runs `effect`, and marks the record COMPLETED with its
  /// answer. A moved-on version returns `committed == false` without running
  /// the effect. An effect error is returned as is, and nothing commits.
  virtual absl::StatusOr<CompleteResult> Complete(const KeyScope& scope, std::int64_t version,
                                                  const Effect& effect) = 0;

  /// The record, its tombstone (state kExpired), or nullopt for a key never
  /// seen.
  virtual absl::StatusOr<std::optional<KeyRecord>> Read(const KeyScope& scope) = 0;

  /// Takes over a PROCESSING record whose lease expired, if its version is
  /// still `observed_version`: bumps the version and renews the lease.
  /// Returns the version now owned, or nullopt when the record is anything
  /// else (the caller re-reads). For recovery tasks and a fence that checks
  /// external facts first.
  virtual absl::StatusOr<std::optional<std::int64_t>> TakeOver(const KeyScope& scope,
                                                               std::int64_t observed_version) = 0;

  /// Fences the key if its fate is not settled, atomically:
  /// - never seen: records a FENCED record (version 1, no digest);
  /// - PROCESSING with an expired lease, or owned by the caller at
  ///   `owned_version` (after a `TakeOver`): version + 1, state FENCED;
  /// - FENCED already: unchanged (fencing is idempotent);
  /// - PROCESSING with a running lease, COMPLETED, expired: unchanged, and
  ///   the outcome says which.
  virtual absl::StatusOr<FenceResult> Fence(const KeyScope& scope,
                                            std::optional<std::int64_t> owned_version) = 0;

  /// Moves every COMPLETED record older than the retention into a tombstone,
  /// in one transaction. PROCESSING and FENCED records are never reaped:
  /// those are settled by takeover or are the proof of a fence. Returns how
  /// many records were reaped.
  virtual absl::StatusOr<int> Reap() = 0;

  /// Records recovery point `step` (its `recorded_ms` is set here) on a
  /// PROCESSING record owned at `version`, in its own short transaction,
  /// replacing the previous step. Nothing is written (`recorded == false`)
  /// when the version moved on: the caller must not call the external
  /// system. InvalidArgument naming "step.name" or "step.external_id".
  virtual absl::StatusOr<StepResult> RecordStep(const KeyScope& scope, std::int64_t version,
                                                RecoveryStep step) = 0;

  /// Up to `limit` PROCESSING records whose lease ran out, oldest lease
  /// first, of `operation` (every operation when empty). For the sweeper.
  virtual absl::StatusOr<std::vector<ScopedRecord>> ListAbandoned(std::string_view operation,
                                                                  int limit) = 0;

  /// Up to `limit` records pending confirmation, oldest first, of
  /// `operation` (every operation when empty).
  virtual absl::StatusOr<std::vector<ScopedRecord>> ListPendingConfirmation(
      std::string_view operation, int limit) = 0;

  /// Moves a PROCESSING record owned at `version` to PENDING_CONFIRMATION
  /// (version + 1, so a late completion of any worker is refused) with
  /// `reason`. Returns false when the version moved on (nothing written).
  virtual absl::StatusOr<bool> MarkPendingConfirmation(const KeyScope& scope, std::int64_t version,
                                                       std::string_view reason) = 0;

  /// Counts a recovery that could not check the facts on a PROCESSING record
  /// owned at `version`; returns the count now, or nullopt when the version
  /// moved on.
  virtual absl::StatusOr<std::optional<int>> RecordRecoveryFailure(const KeyScope& scope,
                                                                   std::int64_t version) = 0;

  /// Records a person's decision on a record pending confirmation, once: the
  /// record becomes COMPLETED with `decision.response` (replayed from then
  /// on) and keeps who, when and why. The same decision again is
  /// kAlreadyRecorded; another one kConflictingDecision. InvalidArgument
  /// naming "decision.decided_by", "decision.reason" or
  /// "decision.response.status" (2xx to succeed, 4xx to fail).
  virtual absl::StatusOr<DecideResult> Decide(const KeyScope& scope, Decision decision) = 0;

  /// The numbers of `StoreGauges`, by the store's clock.
  virtual absl::StatusOr<StoreGauges> Gauges() = 0;

  /// For message consumers (at-least-once delivery): in one transaction,
  /// records `message_id` as processed by `consumer` and runs `effect`.
  /// Returns true when it ran, false when the message had been processed
  /// before (nothing runs). An effect error rolls both back.
  virtual absl::StatusOr<bool> ProcessOnce(
      std::string_view consumer, std::string_view message_id,
      const std::function<absl::Status(Transaction& txn)>& effect) = 0;

  /// The database, for business transactions that are not keyed (reads,
  /// reports, an outbox relay). Never null.
  virtual SqlDatabase& database() = 0;

  virtual const StoreOptions& options() const = 0;
};

/// Checks `options`: InvalidArgument naming "lease" or "retention".
absl::Status ValidateStoreOptions(const StoreOptions& options);

/// The store on any `SqlDatabase`: migrates the schema (tables
/// `saferetry_idempotency_keys`, `saferetry_expired_keys`,
/// `saferetry_processed_events`, `saferetry_schema_version`; see
/// docs/server.md) and returns the store. `clock` (the system clock when
/// null) supplies `WallNow()` for leases and retention. Errors: invalid
/// options; the database's error when the migration fails; FailedPrecondition
/// when the schema is newer than this library.
absl::StatusOr<std::unique_ptr<IdempotencyStore>> MakeIdempotencyStore(
    std::shared_ptr<SqlDatabase> database, StoreOptions options,
    std::shared_ptr<Clock> clock = nullptr);

/// The schema version this library writes and reads (2: recovery steps,
/// pending confirmation and decisions).
inline constexpr int kStoreSchemaVersion = 2;

}  // namespace server
}  // namespace saferetry

#endif  // SAFERETRY_SERVER_IDEMPOTENCY_STORE_H_

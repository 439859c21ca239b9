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
};

/// "PROCESSING", "COMPLETED", "FENCED" or "EXPIRED".
std::string_view RecordStateName(RecordState state);

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
};

struct BeginResult {
  BeginOutcome outcome = BeginOutcome::kClaimed;
  /// The version the caller owns (kClaimed, kTakenOver) or the record's
  /// current version (others; 0 for kExpired).
  std::int64_t version = 0;
  /// The stored answer (kReplay).
  StoredResponse response;
  /// The record before the takeover (kTakenOver).
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

/// The schema version this library writes and reads.
inline constexpr int kStoreSchemaVersion = 1;

}  // namespace server
}  // namespace saferetry

#endif  // SAFERETRY_SERVER_IDEMPOTENCY_STORE_H_

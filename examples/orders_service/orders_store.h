// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The orders service's persistence: orders and idempotency records in one
// SQLite database, so that an order and the COMPLETED state of the key that
// created it are committed by the same transaction. See
// docs/server-contract.md for the rules this implements.
//
// A keyed request goes through three steps:
//
//   1. Claim(scope, digest)        short transaction; the PRIMARY KEY on
//                                  (tenant, operation, key) picks one winner,
//                                  which holds a lease and fencing version
//   2. the work                    outside any transaction
//   3. Complete(scope, version, …) one transaction: insert the order (if any)
//                                  and mark the record COMPLETED only if its
//                                  fencing version is still `version`
//
// @code
//   auto store = OrdersStore::Open(StoreOptions{"orders.db"}, RealServiceClock());
//   auto claim = (*store)->Claim(scope, digest);
//   if (claim->outcome == ClaimOutcome::kClaimed) {
//     auto done = (*store)->Complete(scope, claim->version, NewOrder{"sku-1", 2, ""}, {});
//   }
// @endcode

#ifndef SAFERETRY_EXAMPLES_ORDERS_SERVICE_ORDERS_STORE_H_
#define SAFERETRY_EXAMPLES_ORDERS_SERVICE_ORDERS_STORE_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "orders_service/service_clock.h"

struct sqlite3;

namespace saferetry {
namespace example {

/// Where a key lives: keys are unique per tenant and operation, never globally.
struct KeyScope {
  std::string tenant;
  std::string operation;
  std::string key;
};

/// A response kept for replay.
struct StoredResponse {
  int status = 0;
  std::string body;
};

/// How the database is opened and how long things last.
struct StoreOptions {
  /// The SQLite file; created with the schema when missing.
  std::string path;
  /// How long a claim protects a PROCESSING record from takeover. > 0.
  std::chrono::milliseconds lease = std::chrono::seconds(30);
  /// How long a COMPLETED record is kept for replay before the reaper turns
  /// it into a tombstone. > 0.
  std::chrono::milliseconds retention = std::chrono::hours(24);
  /// `PRAGMA synchronous=FULL` (durable against power loss) when true,
  /// NORMAL (durable against process crashes only) when false.
  bool synchronous_full = true;
  /// At most this many SQLite connections; callers wait for a free one. > 0.
  int max_connections = 8;
};

/// The result of step 1.
enum class ClaimOutcome {
  /// A new record was inserted: the caller owns the key at version 1.
  kClaimed,
  /// The record was PROCESSING with an expired lease: the caller now owns it
  /// at the previous version + 1; the previous worker can no longer complete.
  kTakenOver,
  /// COMPLETED with the same digest: `response` is the answer to replay.
  kReplay,
  /// The key was used for a different request (digest differs).
  kConflictingPayload,
  /// PROCESSING, lease still running: someone else is working on it.
  kInProgress,
  /// The key completed long ago and its record was reaped.
  kExpired,
};

struct ClaimResult {
  ClaimOutcome outcome = ClaimOutcome::kClaimed;
  /// The fencing version the caller owns (kClaimed, kTakenOver) or the
  /// record's current version (others; 0 for kExpired).
  std::int64_t version = 0;
  /// The stored response (kReplay only).
  StoredResponse response;
};

/// What a successful request creates.
struct NewOrder {
  std::string sku;
  std::int64_t quantity = 0;
  /// Optional caller reference, stored for reconciliation (a demo uses it to
  /// count duplicates of one intent).
  std::string client_reference;
};

struct CompleteResult {
  /// False when the fencing version had moved on: nothing was written.
  bool committed = false;
  /// The response stored with the record (when committed).
  StoredResponse response;
};

/// One order row.
struct OrderRow {
  std::int64_t id = 0;
  std::string tenant;
  std::string idempotency_key;
  std::string sku;
  std::int64_t quantity = 0;
  std::string client_reference;
  EpochMillis created_ms = 0;
};

/// The state of a record as stored.
enum class RecordState { kProcessing, kCompleted };

/// One idempotency record as stored.
struct KeyRecord {
  std::string request_digest;
  RecordState state = RecordState::kProcessing;
  std::int64_t version = 0;
  EpochMillis lease_expires_ms = 0;
  std::optional<std::int64_t> order_id;
  StoredResponse response;
  EpochMillis created_ms = 0;
  EpochMillis updated_ms = 0;
  std::optional<EpochMillis> completed_ms;
};

/// What a status query for a key can learn.
struct KeyStatus {
  enum Kind {
    /// An order exists for the key (even if the record has been reaped).
    kOrder,
    /// PROCESSING and the lease is running.
    kProcessing,
    /// PROCESSING, lease expired, no order: the worker is presumed dead; a
    /// resend with the same key takes over.
    kAbandoned,
    /// COMPLETED without an order (a stored final error).
    kCompletedWithoutOrder,
    /// Reaped, and it had produced no order.
    kExpired,
    /// Never seen.
    kUnknown,
  };
  Kind kind = kUnknown;
  OrderRow order;              // kOrder
  int final_status = 0;        // kCompletedWithoutOrder, kExpired
};

/// Counts for tests, monitoring and demos.
struct StoreCounts {
  std::int64_t orders = 0;
  /// Distinct non-empty client references among orders.
  std::int64_t distinct_references = 0;
  /// Orders whose non-empty client reference another, older order also has.
  std::int64_t duplicate_orders = 0;
  std::int64_t keys_processing = 0;
  std::int64_t keys_completed = 0;
  std::int64_t keys_expired = 0;
  /// COMPLETED records with a 2xx response but no order row, plus order rows
  /// whose key has a PROCESSING record or none at all (and no tombstone).
  /// Zero by construction; tests check it after crashes.
  std::int64_t inconsistencies = 0;
};

/// The order JSON the service answers with: {"order_id","tenant","sku",
/// "quantity","client_reference","status":"created"}.
std::string OrderJson(const OrderRow& order);

/// Thread-safe: each call borrows one connection from a bounded pool; write
/// transactions use BEGIN IMMEDIATE and WAL mode lets readers run alongside.
class OrdersStore {
 public:
  /// Opens (creating when missing) the database. InvalidArgument naming
  /// "path", "lease", "retention" or "max_connections" on bad options;
  /// Internal when SQLite fails.
  static absl::StatusOr<std::unique_ptr<OrdersStore>> Open(StoreOptions options,
                                                           std::shared_ptr<ServiceClock> clock);
  ~OrdersStore();
  OrdersStore(const OrdersStore&) = delete;
  OrdersStore& operator=(const OrdersStore&) = delete;

  /// Step 1. Inserts a PROCESSING record (version 1, lease now + lease) or
  /// reports what the existing record says. Never creates an order.
  absl::StatusOr<ClaimResult> Claim(const KeyScope& scope, const std::string& request_digest);

  /// Step 3. In one transaction: inserts `order` (when given; the response is
  /// then 201 with `OrderJson`), and marks the record COMPLETED with that
  /// response, or with `error` when `order` is empty, only if the record is
  /// still PROCESSING at `version`. Otherwise rolls back and returns
  /// `committed == false`.
  absl::StatusOr<CompleteResult> Complete(const KeyScope& scope, std::int64_t version,
                                          const std::optional<NewOrder>& order,
                                          const StoredResponse& error);

  /// The record for `scope`, or nullopt.
  absl::StatusOr<std::optional<KeyRecord>> ReadRecord(const KeyScope& scope);

  /// What a status query should say about `scope`.
  absl::StatusOr<KeyStatus> Lookup(const KeyScope& scope);

  /// Turns every COMPLETED record older than the retention into a tombstone
  /// (one transaction). PROCESSING records are never reaped. Returns how many.
  absl::StatusOr<int> ReapExpired();

  absl::StatusOr<StoreCounts> Counts();

  /// Every order, oldest first (tests and demos).
  absl::StatusOr<std::vector<OrderRow>> ListOrders();

  /// Completions refused because the fencing version had moved on.
  std::int64_t stale_writes_rejected() const;

  const StoreOptions& options() const { return options_; }

 private:
  class Connection;
  OrdersStore(StoreOptions options, std::shared_ptr<ServiceClock> clock);
  absl::StatusOr<sqlite3*> Acquire();
  void Release(sqlite3* db);

  StoreOptions options_;
  std::shared_ptr<ServiceClock> clock_;
  std::mutex mu_;
  std::condition_variable free_cv_;
  std::vector<sqlite3*> free_;
  int open_ = 0;
  std::atomic<std::int64_t> stale_writes_rejected_{0};
};

/// Opens `path` read-only and counts (for a demo reading a running or
/// finished service's database).
absl::StatusOr<StoreCounts> ReadStoreCounts(const std::string& path);

}  // namespace example
}  // namespace saferetry

#endif  // SAFERETRY_EXAMPLES_ORDERS_SERVICE_ORDERS_STORE_H_

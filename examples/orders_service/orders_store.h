// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The orders service's business data on top of saferetry::server's
// idempotency store: the orders table, the outbox (one OrderCreated message
// per order, written in the same transaction), and the shipments a consumer
// of those messages records. Keys, leases, fencing, replay and retention are
// the store's (docs/server-contract.md); this file only holds what is
// specific to orders.
//
// The database is SQLite (`path`) or PostgreSQL (`postgres_conninfo`, for
// several service instances sharing one database).
//
// @code
//   OrdersStoreOptions options;
//   options.path = "orders.db";
//   auto store = OrdersStore::Open(options, saferetry::SystemClock());
//   Effect create = (*store)->CreateOrderEffect(scope, NewOrder{"sku-1", 2, ""});
// @endcode

#ifndef SAFERETRY_EXAMPLES_ORDERS_SERVICE_ORDERS_STORE_H_
#define SAFERETRY_EXAMPLES_ORDERS_SERVICE_ORDERS_STORE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "saferetry/clock.h"
#include "saferetry/server/idempotency_store.h"

namespace saferetry {
namespace example {

using ::saferetry::server::EpochMillis;
using ::saferetry::server::KeyScope;
using ::saferetry::server::StoredResponse;

/// How the database is opened and how long things last.
struct OrdersStoreOptions {
  /// The SQLite file; created with the schema when missing. Exactly one of
  /// `path` and `postgres_conninfo` is set.
  std::string path;
  /// A libpq connection string: PostgreSQL instead of SQLite.
  std::string postgres_conninfo;
  /// The PostgreSQL schema of the tables (`server::PostgresOptions::schema`:
  /// set per transaction, so it works behind pgbouncer). Empty: the
  /// server's search_path.
  std::string postgres_schema;
  /// How long a claim protects a PROCESSING record from takeover. > 0.
  std::chrono::milliseconds lease = std::chrono::seconds(30);
  /// How long a COMPLETED record replays before it is reaped. > 0.
  std::chrono::milliseconds retention = std::chrono::hours(24);
  /// SQLite: `PRAGMA synchronous=FULL` when true, NORMAL when false.
  bool synchronous_full = true;
  /// At most this many database connections. > 0.
  int max_connections = 8;
};

/// What a successful request creates.
struct NewOrder {
  std::string sku;
  std::int64_t quantity = 0;
  /// Optional caller reference, stored for reconciliation (a demo uses it to
  /// count duplicates of one intent).
  std::string client_reference;
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

/// One outbox row: an OrderCreated message waiting for (or past) delivery.
struct OutboxMessage {
  std::int64_t id = 0;
  std::string message_id;  // "order-created-<order id>"
  std::string payload;     // the order JSON
  std::optional<EpochMillis> delivered_ms;
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
  std::int64_t keys_fenced = 0;
  std::int64_t keys_expired = 0;
  /// Orders without their outbox message, COMPLETED 2xx records without an
  /// order, and orders whose key has no COMPLETED record nor tombstone. Zero
  /// by construction; tests check it after crashes.
  std::int64_t inconsistencies = 0;
  std::int64_t outbox_pending = 0;
  std::int64_t shipments = 0;
};

/// The order JSON the service answers with: {"order_id","tenant","sku",
/// "quantity","client_reference","status":"created"}.
std::string OrderJson(const OrderRow& order);

/// Thread-safe.
class OrdersStore {
 public:
  /// Opens the database and creates the business tables. InvalidArgument
  /// naming "path", "lease", "retention" or "max_connections"; the
  /// database's error otherwise.
  static absl::StatusOr<std::unique_ptr<OrdersStore>> Open(const OrdersStoreOptions& options,
                                                           std::shared_ptr<Clock> clock);

  /// The effect of a valid order: inserts the order and its outbox message,
  /// answers 201 with `OrderJson`. Runs inside the store's completing
  /// transaction.
  server::Effect CreateOrderEffect(const KeyScope& scope, const NewOrder& order) const;

  /// The order created with `scope`'s key, if any (orders outlive keys).
  absl::StatusOr<std::optional<OrderRow>> FindOrder(const KeyScope& scope);

  /// The consumer side: records shipment of `order_id` once per message id.
  /// True when recorded now, false for a redelivery.
  absl::StatusOr<bool> RecordShipment(const std::string& message_id, std::int64_t order_id);

  /// Up to `limit` undelivered outbox messages, oldest first.
  absl::StatusOr<std::vector<OutboxMessage>> PendingOutbox(int limit);
  /// Marks one outbox message delivered.
  absl::Status MarkDelivered(std::int64_t outbox_id);

  absl::StatusOr<StoreCounts> Counts();
  /// Every order, oldest first (tests and demos).
  absl::StatusOr<std::vector<OrderRow>> ListOrders();

  server::IdempotencyStore& idempotency() { return *idempotency_; }
  std::shared_ptr<server::IdempotencyStore> shared_idempotency() { return idempotency_; }

 private:
  OrdersStore(std::shared_ptr<server::IdempotencyStore> idempotency, std::shared_ptr<Clock> clock)
      : idempotency_(std::move(idempotency)), clock_(std::move(clock)) {}
  EpochMillis NowMillis() const;

  std::shared_ptr<server::IdempotencyStore> idempotency_;
  std::shared_ptr<Clock> clock_;
};

/// Opens the SQLite file at `path` and counts (for a demo or test reading a
/// running or finished service's database).
absl::StatusOr<StoreCounts> ReadStoreCounts(const std::string& path);

}  // namespace example
}  // namespace saferetry

#endif  // SAFERETRY_EXAMPLES_ORDERS_SERVICE_ORDERS_STORE_H_

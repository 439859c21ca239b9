// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "orders_service/orders_store.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "nlohmann/json.hpp"
#include "saferetry/server/postgres_store.h"
#include "saferetry/server/sqlite_store.h"

namespace saferetry {
namespace example {

namespace {

using ::saferetry::server::SqlDialect;
using ::saferetry::server::SqlRow;
using ::saferetry::server::Transaction;
using ::saferetry::server::TransactionMode;

// Orders carry the key that created them, unique per tenant, as a second line
// of defence against duplicates. Shipments deliberately have no unique
// constraint: only the consumer's processed-message record keeps them single.
constexpr const char* kSchema[] = {
    R"sql(CREATE TABLE IF NOT EXISTS orders (
  id               @ID@,
  tenant           TEXT NOT NULL,
  idempotency_key  TEXT NOT NULL,
  sku              TEXT NOT NULL,
  quantity         BIGINT NOT NULL CHECK (quantity > 0),
  client_reference TEXT NOT NULL DEFAULT '',
  created_ms       BIGINT NOT NULL,
  UNIQUE (tenant, idempotency_key)
))sql",
    R"sql(CREATE TABLE IF NOT EXISTS outbox (
  id           @ID@,
  message_id   TEXT NOT NULL UNIQUE,
  payload      TEXT NOT NULL,
  created_ms   BIGINT NOT NULL,
  delivered_ms BIGINT
))sql",
    "CREATE INDEX IF NOT EXISTS outbox_pending ON outbox (delivered_ms, id)",
    R"sql(CREATE TABLE IF NOT EXISTS shipments (
  order_id   BIGINT NOT NULL,
  message_id TEXT NOT NULL,
  created_ms BIGINT NOT NULL
))sql",
};

constexpr char kOrderColumns[] =
    "id, tenant, idempotency_key, sku, quantity, client_reference, created_ms";

OrderRow OrderFromRow(const SqlRow& r) {
  return OrderRow{r.Int(0), r.Text(1), r.Text(2), r.Text(3), r.Int(4), r.Text(5), r.Int(6)};
}

}  // namespace

std::string OrderJson(const OrderRow& order) {
  nlohmann::json j = {{"order_id", absl::StrCat("ord-", order.id)},
                      {"tenant", order.tenant},
                      {"sku", order.sku},
                      {"quantity", order.quantity},
                      {"client_reference", order.client_reference},
                      {"status", "created"}};
  return j.dump();
}

absl::StatusOr<std::unique_ptr<OrdersStore>> OrdersStore::Open(const OrdersStoreOptions& options,
                                                               std::shared_ptr<Clock> clock) {
  if (options.path.empty() == options.postgres_conninfo.empty()) {
    return absl::InvalidArgumentError(
        "path: must not be empty (or set postgres_conninfo instead, not both)");
  }
  if (!clock) clock = SystemClock();
  server::StoreOptions store_options;
  store_options.lease = options.lease;
  store_options.retention = options.retention;
  absl::StatusOr<std::unique_ptr<server::IdempotencyStore>> idempotency;
  if (!options.path.empty()) {
    server::SqliteOptions sqlite;
    sqlite.path = options.path;
    sqlite.synchronous_full = options.synchronous_full;
    sqlite.max_connections = options.max_connections;
    idempotency = server::OpenSqliteStore(sqlite, store_options, clock);
  } else {
    server::PostgresOptions pg;
    pg.conninfo = options.postgres_conninfo;
    pg.schema = options.postgres_schema;
    pg.max_connections = options.max_connections;
    idempotency = server::OpenPostgresStore(pg, store_options, clock);
  }
  if (!idempotency.ok()) return idempotency.status();
  std::unique_ptr<OrdersStore> store(
      new OrdersStore(std::shared_ptr<server::IdempotencyStore>(*std::move(idempotency)), clock));
  absl::Status s = store->idempotency_->database().RunInTransaction(
      TransactionMode::kWrite, [](Transaction& txn) -> absl::Status {
        const bool pg = txn.dialect() == SqlDialect::kPostgres;
        if (pg) {
          // Instances starting together must not race on CREATE TABLE.
          if (auto r = txn.Execute("SELECT pg_advisory_xact_lock(7305210002)"); !r.ok()) {
            return r.status();
          }
        }
        for (const char* ddl : kSchema) {
          const std::string sql = absl::StrReplaceAll(
              ddl, {{"@ID@", pg ? "BIGSERIAL PRIMARY KEY" : "INTEGER PRIMARY KEY AUTOINCREMENT"}});
          if (auto r = txn.Execute(sql); !r.ok()) return r.status();
        }
        return absl::OkStatus();
      });
  if (!s.ok()) return s;
  return store;
}

EpochMillis OrdersStore::NowMillis() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(clock_->WallNow().time_since_epoch())
      .count();
}

server::Effect OrdersStore::CreateOrderEffect(const KeyScope& scope, const NewOrder& order) const {
  const EpochMillis now = NowMillis();
  return [scope, order, now](Transaction& txn) -> absl::StatusOr<StoredResponse> {
    auto inserted = txn.Execute(
        "INSERT INTO orders (tenant, idempotency_key, sku, quantity, client_reference, "
        "created_ms) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
        {scope.tenant, scope.key, order.sku, order.quantity, order.client_reference, now});
    if (!inserted.ok()) return inserted.status();
    OrderRow row{(*inserted)[0].Int(0), scope.tenant,           scope.key, order.sku,
                 order.quantity,        order.client_reference, now};
    const std::string json = OrderJson(row);
    // The message commits with the order or not at all: no lost events.
    auto queued =
        txn.Execute("INSERT INTO outbox (message_id, payload, created_ms) VALUES ($1, $2, $3)",
                    {absl::StrCat("order-created-", row.id), json, now});
    if (!queued.ok()) return queued.status();
    return StoredResponse{201, json};
  };
}

absl::StatusOr<std::optional<OrderRow>> OrdersStore::FindOrder(const KeyScope& scope) {
  std::optional<OrderRow> out;
  absl::Status s = idempotency_->database().RunInTransaction(
      TransactionMode::kRead, [&](Transaction& txn) -> absl::Status {
        auto rows = txn.Execute(absl::StrCat("SELECT ", kOrderColumns,
                                             " FROM orders WHERE tenant = $1 AND "
                                             "idempotency_key = $2"),
                                {scope.tenant, scope.key});
        if (!rows.ok()) return rows.status();
        if (!rows->empty()) out = OrderFromRow((*rows)[0]);
        return absl::OkStatus();
      });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<bool> OrdersStore::RecordShipment(const std::string& message_id,
                                                 std::int64_t order_id) {
  const EpochMillis now = NowMillis();
  return idempotency_->ProcessOnce("shipping", message_id, [&](Transaction& txn) {
    return txn
        .Execute("INSERT INTO shipments (order_id, message_id, created_ms) VALUES ($1, $2, $3)",
                 {order_id, message_id, now})
        .status();
  });
}

absl::StatusOr<std::vector<OutboxMessage>> OrdersStore::PendingOutbox(int limit) {
  std::vector<OutboxMessage> out;
  absl::Status s = idempotency_->database().RunInTransaction(
      TransactionMode::kRead, [&](Transaction& txn) -> absl::Status {
        auto rows = txn.Execute(
            "SELECT id, message_id, payload, delivered_ms FROM outbox WHERE delivered_ms IS NULL "
            "ORDER BY id LIMIT $1",
            {limit});
        if (!rows.ok()) return rows.status();
        for (const SqlRow& r : *rows) {
          out.push_back(OutboxMessage{r.Int(0), r.Text(1), r.Text(2), std::nullopt});
        }
        return absl::OkStatus();
      });
  if (!s.ok()) return s;
  return out;
}

absl::Status OrdersStore::MarkDelivered(std::int64_t outbox_id) {
  const EpochMillis now = NowMillis();
  return idempotency_->database().RunInTransaction(TransactionMode::kWrite, [&](Transaction& txn) {
    return txn
        .Execute("UPDATE outbox SET delivered_ms = $1 WHERE id = $2 AND delivered_ms IS NULL",
                 {now, outbox_id})
        .status();
  });
}

absl::StatusOr<StoreCounts> OrdersStore::Counts() {
  StoreCounts c;
  absl::Status s = idempotency_->database().RunInTransaction(
      TransactionMode::kRead, [&](Transaction& txn) -> absl::Status {
        std::int64_t with_reference = 0, orphan_records = 0, orphan_orders = 0,
                     orders_without_message = 0;
        struct Query {
          std::int64_t* out;
          const char* sql;
        };
        const Query queries[] = {
            {&c.orders, "SELECT COUNT(*) FROM orders"},
            {&c.distinct_references,
             "SELECT COUNT(DISTINCT client_reference) FROM orders WHERE client_reference <> ''"},
            {&with_reference, "SELECT COUNT(*) FROM orders WHERE client_reference <> ''"},
            {&c.keys_processing,
             "SELECT COUNT(*) FROM saferetry_idempotency_keys WHERE state = 'PROCESSING'"},
            {&c.keys_completed,
             "SELECT COUNT(*) FROM saferetry_idempotency_keys WHERE state = 'COMPLETED'"},
            {&c.keys_fenced,
             "SELECT COUNT(*) FROM saferetry_idempotency_keys WHERE state = 'FENCED'"},
            {&c.keys_expired, "SELECT COUNT(*) FROM saferetry_expired_keys"},
            {&c.outbox_pending, "SELECT COUNT(*) FROM outbox WHERE delivered_ms IS NULL"},
            {&c.shipments, "SELECT COUNT(*) FROM shipments"},
            // A successful record must have its order...
            {&orphan_records,
             "SELECT COUNT(*) FROM saferetry_idempotency_keys k WHERE "
             "k.operation = 'create_order' AND k.state = 'COMPLETED' AND "
             "k.response_status BETWEEN 200 AND 299 AND NOT EXISTS (SELECT 1 FROM orders o "
             "WHERE o.tenant = k.tenant AND o.idempotency_key = k.idem_key)"},
            // ...every order a COMPLETED record or a tombstone...
            {&orphan_orders,
             "SELECT COUNT(*) FROM orders o WHERE NOT EXISTS (SELECT 1 FROM "
             "saferetry_idempotency_keys k WHERE k.tenant = o.tenant AND "
             "k.operation = 'create_order' AND k.idem_key = o.idempotency_key AND "
             "k.state = 'COMPLETED') AND NOT EXISTS (SELECT 1 FROM saferetry_expired_keys e "
             "WHERE e.tenant = o.tenant AND e.operation = 'create_order' AND "
             "e.idem_key = o.idempotency_key)"},
            // ...and its outbox message.
            {&orders_without_message,
             "SELECT COUNT(*) FROM orders o WHERE NOT EXISTS (SELECT 1 FROM outbox b WHERE "
             "b.message_id = 'order-created-' || o.id)"},
        };
        for (const Query& q : queries) {
          auto rows = txn.Execute(q.sql);
          if (!rows.ok()) return rows.status();
          *q.out = (*rows)[0].Int(0);
        }
        c.duplicate_orders = with_reference - c.distinct_references;
        c.inconsistencies = orphan_records + orphan_orders + orders_without_message;
        return absl::OkStatus();
      });
  if (!s.ok()) return s;
  return c;
}

absl::StatusOr<std::vector<OrderRow>> OrdersStore::ListOrders() {
  std::vector<OrderRow> out;
  absl::Status s = idempotency_->database().RunInTransaction(
      TransactionMode::kRead, [&](Transaction& txn) -> absl::Status {
        auto rows = txn.Execute(absl::StrCat("SELECT ", kOrderColumns, " FROM orders ORDER BY id"));
        if (!rows.ok()) return rows.status();
        for (const SqlRow& r : *rows) out.push_back(OrderFromRow(r));
        return absl::OkStatus();
      });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<StoreCounts> ReadStoreCounts(const std::string& path) {
  OrdersStoreOptions options;
  options.path = path;
  options.max_connections = 1;
  auto store = OrdersStore::Open(options, SystemClock());
  if (!store.ok()) return store.status();
  return (*store)->Counts();
}

}  // namespace example
}  // namespace saferetry

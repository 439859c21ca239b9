// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "orders_service/orders_store.h"

#include <sqlite3.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace saferetry {
namespace example {

namespace {

// Orders and records reference each other: a COMPLETED record points at the
// order it created, and an order carries the key that created it, unique per
// tenant, as a second line of defence against duplicates.
constexpr char kSchema[] = R"sql(
CREATE TABLE IF NOT EXISTS orders (
  id               INTEGER PRIMARY KEY AUTOINCREMENT,
  tenant           TEXT NOT NULL,
  idempotency_key  TEXT NOT NULL,
  sku              TEXT NOT NULL,
  quantity         INTEGER NOT NULL CHECK (quantity > 0),
  client_reference TEXT NOT NULL DEFAULT '',
  created_ms       INTEGER NOT NULL,
  UNIQUE (tenant, idempotency_key)
);
CREATE TABLE IF NOT EXISTS idempotency_keys (
  tenant           TEXT NOT NULL,
  operation        TEXT NOT NULL,
  key              TEXT NOT NULL,
  request_digest   TEXT NOT NULL,
  state            TEXT NOT NULL CHECK (state IN ('PROCESSING', 'COMPLETED')),
  fencing_version  INTEGER NOT NULL,
  lease_expires_ms INTEGER NOT NULL,
  order_id         INTEGER REFERENCES orders(id),
  response_status  INTEGER,
  response_body    TEXT,
  created_ms       INTEGER NOT NULL,
  updated_ms       INTEGER NOT NULL,
  completed_ms     INTEGER,
  PRIMARY KEY (tenant, operation, key)
);
CREATE INDEX IF NOT EXISTS idempotency_keys_by_completion
  ON idempotency_keys (state, completed_ms);
CREATE TABLE IF NOT EXISTS expired_keys (
  tenant          TEXT NOT NULL,
  operation       TEXT NOT NULL,
  key             TEXT NOT NULL,
  request_digest  TEXT NOT NULL,
  order_id        INTEGER,
  response_status INTEGER,
  completed_ms    INTEGER,
  expired_ms      INTEGER NOT NULL,
  PRIMARY KEY (tenant, operation, key)
);
)sql";

absl::Status SqliteError(sqlite3* db, std::string_view what) {
  return absl::InternalError(absl::StrCat(std::string(what), ": ", db ? sqlite3_errmsg(db) : "no connection"));
}

// A prepared statement, finalized on destruction.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Stmt() { sqlite3_finalize(stmt_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  bool ok() const { return rc_ == SQLITE_OK; }
  Stmt& Bind(int i, std::int64_t v) {
    sqlite3_bind_int64(stmt_, i, v);
    return *this;
  }
  Stmt& Bind(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& BindNull(int i) {
    sqlite3_bind_null(stmt_, i);
    return *this;
  }
  Stmt& BindScope(int first, const KeyScope& s) {
    return Bind(first, s.tenant).Bind(first + 1, s.operation).Bind(first + 2, s.key);
  }
  // SQLITE_ROW, SQLITE_DONE or an error code.
  int Step() { return sqlite3_step(stmt_); }

  std::int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  bool IsNull(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
  std::string Text(int col) const {
    const unsigned char* p = sqlite3_column_text(stmt_, col);
    return p ? std::string(reinterpret_cast<const char*>(p),
                           static_cast<std::size_t>(sqlite3_column_bytes(stmt_, col)))
             : std::string();
  }

 private:
  sqlite3_stmt* stmt_ = nullptr;
  int rc_;
};

absl::Status Exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    absl::Status s = absl::InternalError(absl::StrCat(sql, ": ", err ? err : "unknown error"));
    sqlite3_free(err);
    return s;
  }
  return absl::OkStatus();
}

// Rolls back on destruction unless committed.
class Transaction {
 public:
  Transaction(sqlite3* db, bool immediate) : db_(db) {
    status_ = Exec(db, immediate ? "BEGIN IMMEDIATE" : "BEGIN");
    open_ = status_.ok();
  }
  ~Transaction() {
    if (open_) (void)Exec(db_, "ROLLBACK");
  }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  const absl::Status& status() const { return status_; }
  absl::Status Commit() {
    open_ = false;
    return Exec(db_, "COMMIT");
  }
  void Rollback() {
    if (open_) (void)Exec(db_, "ROLLBACK");
    open_ = false;
  }

 private:
  sqlite3* db_;
  absl::Status status_;
  bool open_ = false;
};

bool IsConstraint(int rc) { return (rc & 0xff) == SQLITE_CONSTRAINT; }

constexpr char kRecordColumns[] =
    "request_digest, state, fencing_version, lease_expires_ms, order_id, response_status, "
    "response_body, created_ms, updated_ms, completed_ms";

KeyRecord RecordFromRow(const Stmt& s) {
  KeyRecord r;
  r.request_digest = s.Text(0);
  r.state = s.Text(1) == "COMPLETED" ? RecordState::kCompleted : RecordState::kProcessing;
  r.version = s.Int(2);
  r.lease_expires_ms = s.Int(3);
  if (!s.IsNull(4)) r.order_id = s.Int(4);
  r.response.status = static_cast<int>(s.Int(5));
  r.response.body = s.Text(6);
  r.created_ms = s.Int(7);
  r.updated_ms = s.Int(8);
  if (!s.IsNull(9)) r.completed_ms = s.Int(9);
  return r;
}

absl::StatusOr<std::optional<KeyRecord>> ReadRecordWith(sqlite3* db, const KeyScope& scope) {
  Stmt s(db, absl::StrCat("SELECT ", kRecordColumns,
                          " FROM idempotency_keys WHERE tenant = ? AND operation = ? AND key = ?")
                 .c_str());
  if (!s.ok()) return SqliteError(db, "read record");
  s.BindScope(1, scope);
  int rc = s.Step();
  if (rc == SQLITE_DONE) return std::optional<KeyRecord>();
  if (rc != SQLITE_ROW) return SqliteError(db, "read record");
  return std::optional<KeyRecord>(RecordFromRow(s));
}

constexpr char kOrderColumns[] =
    "id, tenant, idempotency_key, sku, quantity, client_reference, created_ms";

OrderRow OrderFromRow(const Stmt& s) {
  OrderRow o;
  o.id = s.Int(0);
  o.tenant = s.Text(1);
  o.idempotency_key = s.Text(2);
  o.sku = s.Text(3);
  o.quantity = s.Int(4);
  o.client_reference = s.Text(5);
  o.created_ms = s.Int(6);
  return o;
}

absl::StatusOr<std::int64_t> CountWith(sqlite3* db, const char* sql) {
  Stmt s(db, sql);
  if (!s.ok() || s.Step() != SQLITE_ROW) return SqliteError(db, sql);
  return s.Int(0);
}

absl::StatusOr<StoreCounts> CountsWith(sqlite3* db) {
  Transaction txn(db, /*immediate=*/false);  // one snapshot for every count
  if (!txn.status().ok()) return txn.status();
  StoreCounts c;
  struct Query {
    std::int64_t* out;
    const char* sql;
  };
  std::int64_t with_reference = 0;
  std::int64_t orphan_records = 0;
  std::int64_t orphan_orders = 0;
  const Query queries[] = {
      {&c.orders, "SELECT COUNT(*) FROM orders"},
      {&c.distinct_references,
       "SELECT COUNT(DISTINCT client_reference) FROM orders WHERE client_reference <> ''"},
      {&with_reference, "SELECT COUNT(*) FROM orders WHERE client_reference <> ''"},
      {&c.keys_processing, "SELECT COUNT(*) FROM idempotency_keys WHERE state = 'PROCESSING'"},
      {&c.keys_completed, "SELECT COUNT(*) FROM idempotency_keys WHERE state = 'COMPLETED'"},
      {&c.keys_expired, "SELECT COUNT(*) FROM expired_keys"},
      // A successful record must point at an existing order...
      {&orphan_records,
       "SELECT COUNT(*) FROM idempotency_keys k WHERE k.state = 'COMPLETED' AND "
       "k.response_status BETWEEN 200 AND 299 AND "
       "NOT EXISTS (SELECT 1 FROM orders o WHERE o.id = k.order_id)"},
      // ...and every order must be owned by a COMPLETED record or a tombstone.
      {&orphan_orders,
       "SELECT COUNT(*) FROM orders o WHERE NOT EXISTS (SELECT 1 FROM idempotency_keys k "
       "WHERE k.tenant = o.tenant AND k.operation = 'create_order' AND "
       "k.key = o.idempotency_key AND k.state = 'COMPLETED' AND k.order_id = o.id) AND "
       "NOT EXISTS (SELECT 1 FROM expired_keys e WHERE e.order_id = o.id)"},
  };
  for (const Query& q : queries) {
    auto n = CountWith(db, q.sql);
    if (!n.ok()) return n.status();
    *q.out = *n;
  }
  c.duplicate_orders = with_reference - c.distinct_references;
  c.inconsistencies = orphan_records + orphan_orders;
  return c;
}

absl::Status Configure(sqlite3* db, bool synchronous_full) {
  sqlite3_busy_timeout(db, 5000);
  for (const char* pragma :
       {"PRAGMA journal_mode=WAL", "PRAGMA foreign_keys=ON",
        synchronous_full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL"}) {
    if (auto s = Exec(db, pragma); !s.ok()) return s;
  }
  return absl::OkStatus();
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

// Borrows a pooled connection for the scope of one store call.
class OrdersStore::Connection {
 public:
  explicit Connection(OrdersStore* store) : store_(store) {
    auto db = store->Acquire();
    if (db.ok()) {
      db_ = *db;
    } else {
      status_ = db.status();
    }
  }
  ~Connection() {
    if (db_) store_->Release(db_);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  const absl::Status& status() const { return status_; }
  sqlite3* get() const { return db_; }

 private:
  OrdersStore* store_;
  sqlite3* db_ = nullptr;
  absl::Status status_;
};

OrdersStore::OrdersStore(StoreOptions options, std::shared_ptr<ServiceClock> clock)
    : options_(std::move(options)), clock_(std::move(clock)) {}

OrdersStore::~OrdersStore() {
  for (sqlite3* db : free_) sqlite3_close(db);
}

absl::StatusOr<std::unique_ptr<OrdersStore>> OrdersStore::Open(
    StoreOptions options, std::shared_ptr<ServiceClock> clock) {
  if (options.path.empty()) return absl::InvalidArgumentError("path: must not be empty");
  if (options.lease.count() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("lease: must be > 0, got ", options.lease.count(), "ms"));
  }
  if (options.retention.count() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("retention: must be > 0, got ", options.retention.count(), "ms"));
  }
  if (options.max_connections <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_connections: must be > 0, got ", options.max_connections));
  }
  if (!clock) clock = RealServiceClock();
  std::unique_ptr<OrdersStore> store(new OrdersStore(std::move(options), std::move(clock)));
  Connection c(store.get());
  if (!c.status().ok()) return c.status();
  if (auto s = Exec(c.get(), kSchema); !s.ok()) return s;
  return store;
}

absl::StatusOr<sqlite3*> OrdersStore::Acquire() {
  std::unique_lock<std::mutex> lock(mu_);
  free_cv_.wait(lock, [&] { return !free_.empty() || open_ < options_.max_connections; });
  if (!free_.empty()) {
    sqlite3* db = free_.back();
    free_.pop_back();
    return db;
  }
  ++open_;
  lock.unlock();
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(options_.path.c_str(), &db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                           nullptr);
  absl::Status status =
      rc == SQLITE_OK ? Configure(db, options_.synchronous_full) : SqliteError(db, "open");
  if (!status.ok()) {
    sqlite3_close(db);
    lock.lock();
    --open_;
    free_cv_.notify_one();
    return status;
  }
  return db;
}

void OrdersStore::Release(sqlite3* db) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(db);
  free_cv_.notify_one();
}

absl::StatusOr<ClaimResult> OrdersStore::Claim(const KeyScope& scope,
                                               const std::string& request_digest) {
  Connection c(this);
  if (!c.status().ok()) return c.status();
  sqlite3* db = c.get();
  // IMMEDIATE takes the write lock now, so the tombstone check, the insert
  // and a takeover see one consistent state.
  Transaction txn(db, /*immediate=*/true);
  if (!txn.status().ok()) return txn.status();
  const EpochMillis now = clock_->NowMillis();

  {
    Stmt s(db, "SELECT 1 FROM expired_keys WHERE tenant = ? AND operation = ? AND key = ?");
    if (!s.ok()) return SqliteError(db, "claim");
    s.BindScope(1, scope);
    int rc = s.Step();
    if (rc == SQLITE_ROW) return ClaimResult{ClaimOutcome::kExpired, 0, {}};
    if (rc != SQLITE_DONE) return SqliteError(db, "claim");
  }

  // The winner is whoever inserts first: the PRIMARY KEY refuses the rest.
  {
    Stmt s(db,
           "INSERT INTO idempotency_keys (tenant, operation, key, request_digest, state, "
           "fencing_version, lease_expires_ms, created_ms, updated_ms) "
           "VALUES (?, ?, ?, ?, 'PROCESSING', 1, ?, ?, ?)");
    if (!s.ok()) return SqliteError(db, "claim");
    s.BindScope(1, scope)
        .Bind(4, request_digest)
        .Bind(5, now + options_.lease.count())
        .Bind(6, now)
        .Bind(7, now);
    int rc = s.Step();
    if (rc == SQLITE_DONE) {
      if (auto st = txn.Commit(); !st.ok()) return st;
      return ClaimResult{ClaimOutcome::kClaimed, 1, {}};
    }
    if (!IsConstraint(rc)) return SqliteError(db, "claim insert");
  }

  auto existing = ReadRecordWith(db, scope);
  if (!existing.ok()) return existing.status();
  if (!existing->has_value()) return absl::InternalError("claim: record vanished");
  const KeyRecord& r = **existing;
  if (r.request_digest != request_digest) {
    return ClaimResult{ClaimOutcome::kConflictingPayload, r.version, {}};
  }
  if (r.state == RecordState::kCompleted) {
    return ClaimResult{ClaimOutcome::kReplay, r.version, r.response};
  }
  if (r.lease_expires_ms > now) return ClaimResult{ClaimOutcome::kInProgress, r.version, {}};

  // The previous worker's lease ran out: take over with a higher version, so
  // that worker's Complete() can no longer match.
  Stmt s(db,
         "UPDATE idempotency_keys SET fencing_version = ?, lease_expires_ms = ?, updated_ms = ? "
         "WHERE tenant = ? AND operation = ? AND key = ? AND fencing_version = ? "
         "AND state = 'PROCESSING'");
  if (!s.ok()) return SqliteError(db, "takeover");
  s.Bind(1, r.version + 1)
      .Bind(2, now + options_.lease.count())
      .Bind(3, now)
      .BindScope(4, scope)
      .Bind(7, r.version);
  if (s.Step() != SQLITE_DONE || sqlite3_changes(db) != 1) return SqliteError(db, "takeover");
  if (auto st = txn.Commit(); !st.ok()) return st;
  return ClaimResult{ClaimOutcome::kTakenOver, r.version + 1, {}};
}

absl::StatusOr<CompleteResult> OrdersStore::Complete(const KeyScope& scope, std::int64_t version,
                                                     const std::optional<NewOrder>& order,
                                                     const StoredResponse& error) {
  Connection c(this);
  if (!c.status().ok()) return c.status();
  sqlite3* db = c.get();
  Transaction txn(db, /*immediate=*/true);
  if (!txn.status().ok()) return txn.status();
  const EpochMillis now = clock_->NowMillis();

  auto reject = [&] {
    txn.Rollback();
    stale_writes_rejected_.fetch_add(1);
    return CompleteResult{};
  };

  StoredResponse response = error;
  std::optional<std::int64_t> order_id;
  if (order.has_value()) {
    Stmt s(db,
           "INSERT INTO orders (tenant, idempotency_key, sku, quantity, client_reference, "
           "created_ms) VALUES (?, ?, ?, ?, ?, ?)");
    if (!s.ok()) return SqliteError(db, "insert order");
    s.Bind(1, scope.tenant)
        .Bind(2, scope.key)
        .Bind(3, order->sku)
        .Bind(4, order->quantity)
        .Bind(5, order->client_reference)
        .Bind(6, now);
    int rc = s.Step();
    // Another worker already created the order for this key: this one is stale.
    if (IsConstraint(rc)) return reject();
    if (rc != SQLITE_DONE) return SqliteError(db, "insert order");
    OrderRow row{sqlite3_last_insert_rowid(db), scope.tenant, scope.key,        order->sku,
                 order->quantity,               order->client_reference, now};
    order_id = row.id;
    response = StoredResponse{201, OrderJson(row)};
  }

  // The fence: only the holder of the current version may complete.
  Stmt s(db,
         "UPDATE idempotency_keys SET state = 'COMPLETED', order_id = ?, response_status = ?, "
         "response_body = ?, updated_ms = ?, completed_ms = ? "
         "WHERE tenant = ? AND operation = ? AND key = ? AND fencing_version = ? "
         "AND state = 'PROCESSING'");
  if (!s.ok()) return SqliteError(db, "complete");
  if (order_id) {
    s.Bind(1, *order_id);
  } else {
    s.BindNull(1);
  }
  s.Bind(2, response.status)
      .Bind(3, response.body)
      .Bind(4, now)
      .Bind(5, now)
      .BindScope(6, scope)
      .Bind(9, version);
  if (s.Step() != SQLITE_DONE) return SqliteError(db, "complete");
  if (sqlite3_changes(db) != 1) return reject();
  if (auto st = txn.Commit(); !st.ok()) return st;
  return CompleteResult{true, std::move(response)};
}

absl::StatusOr<std::optional<KeyRecord>> OrdersStore::ReadRecord(const KeyScope& scope) {
  Connection c(this);
  if (!c.status().ok()) return c.status();
  return ReadRecordWith(c.get(), scope);
}

absl::StatusOr<KeyStatus> OrdersStore::Lookup(const KeyScope& scope) {
  Connection c(this);
  if (!c.status().ok()) return c.status();
  sqlite3* db = c.get();
  Transaction txn(db, /*immediate=*/false);
  if (!txn.status().ok()) return txn.status();
  KeyStatus out;
  {
    Stmt s(db, absl::StrCat("SELECT ", kOrderColumns,
                            " FROM orders WHERE tenant = ? AND idempotency_key = ?")
                   .c_str());
    if (!s.ok()) return SqliteError(db, "lookup");
    s.Bind(1, scope.tenant).Bind(2, scope.key);
    int rc = s.Step();
    if (rc == SQLITE_ROW) {
      out.kind = KeyStatus::kOrder;
      out.order = OrderFromRow(s);
      return out;
    }
    if (rc != SQLITE_DONE) return SqliteError(db, "lookup");
  }
  auto record = ReadRecordWith(db, scope);
  if (!record.ok()) return record.status();
  if (record->has_value()) {
    const KeyRecord& r = **record;
    if (r.state == RecordState::kCompleted) {
      out.kind = KeyStatus::kCompletedWithoutOrder;
      out.final_status = r.response.status;
    } else {
      out.kind = r.lease_expires_ms > clock_->NowMillis() ? KeyStatus::kProcessing
                                                          : KeyStatus::kAbandoned;
    }
    return out;
  }
  Stmt s(db,
         "SELECT response_status FROM expired_keys WHERE tenant = ? AND operation = ? AND key = ?");
  if (!s.ok()) return SqliteError(db, "lookup");
  s.BindScope(1, scope);
  int rc = s.Step();
  if (rc == SQLITE_ROW) {
    out.kind = KeyStatus::kExpired;
    out.final_status = static_cast<int>(s.Int(0));
  } else if (rc != SQLITE_DONE) {
    return SqliteError(db, "lookup");
  }
  return out;
}

absl::StatusOr<int> OrdersStore::ReapExpired() {
  Connection c(this);
  if (!c.status().ok()) return c.status();
  sqlite3* db = c.get();
  Transaction txn(db, /*immediate=*/true);
  if (!txn.status().ok()) return txn.status();
  const EpochMillis now = clock_->NowMillis();
  const EpochMillis cutoff = now - options_.retention.count();
  Stmt move(db,
            "INSERT OR REPLACE INTO expired_keys (tenant, operation, key, request_digest, "
            "order_id, response_status, completed_ms, expired_ms) "
            "SELECT tenant, operation, key, request_digest, order_id, response_status, "
            "completed_ms, ? FROM idempotency_keys "
            "WHERE state = 'COMPLETED' AND completed_ms <= ?");
  if (!move.ok()) return SqliteError(db, "reap");
  move.Bind(1, now).Bind(2, cutoff);
  if (move.Step() != SQLITE_DONE) return SqliteError(db, "reap");
  Stmt del(db, "DELETE FROM idempotency_keys WHERE state = 'COMPLETED' AND completed_ms <= ?");
  if (!del.ok()) return SqliteError(db, "reap");
  del.Bind(1, cutoff);
  if (del.Step() != SQLITE_DONE) return SqliteError(db, "reap");
  int reaped = sqlite3_changes(db);
  if (auto st = txn.Commit(); !st.ok()) return st;
  return reaped;
}

absl::StatusOr<StoreCounts> OrdersStore::Counts() {
  Connection c(this);
  if (!c.status().ok()) return c.status();
  return CountsWith(c.get());
}

absl::StatusOr<std::vector<OrderRow>> OrdersStore::ListOrders() {
  Connection c(this);
  if (!c.status().ok()) return c.status();
  sqlite3* db = c.get();
  Stmt s(db, absl::StrCat("SELECT ", kOrderColumns, " FROM orders ORDER BY id").c_str());
  if (!s.ok()) return SqliteError(db, "list orders");
  std::vector<OrderRow> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) out.push_back(OrderFromRow(s));
  if (rc != SQLITE_DONE) return SqliteError(db, "list orders");
  return out;
}

std::int64_t OrdersStore::stale_writes_rejected() const {
  return stale_writes_rejected_.load();
}

absl::StatusOr<StoreCounts> ReadStoreCounts(const std::string& path) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  if (rc != SQLITE_OK) {
    absl::Status s = SqliteError(db, absl::StrCat("open ", path));
    sqlite3_close(db);
    return s;
  }
  sqlite3_busy_timeout(db, 5000);
  auto counts = CountsWith(db);
  sqlite3_close(db);
  return counts;
}

}  // namespace example
}  // namespace saferetry

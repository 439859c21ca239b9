// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The embedded store: SQLite in WAL mode, for a service with one instance (or
// several processes on one host sharing the file). For many instances, use
// the PostgreSQL store (saferetry/server/postgres_store.h).
//
// @code
//   saferetry::server::SqliteOptions db;
//   db.path = "/var/lib/orders/orders.db";
//   auto store = saferetry::server::OpenSqliteStore(db, {});
//   if (!store.ok()) return store.status();
// @endcode

#ifndef SAFERETRY_SERVER_SQLITE_STORE_H_
#define SAFERETRY_SERVER_SQLITE_STORE_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "saferetry/clock.h"
#include "saferetry/server/idempotency_store.h"
#include "saferetry/server/sql.h"

namespace saferetry {
namespace server {

/// How the SQLite file is opened. Defaults: synchronous FULL, 8 connections,
/// 5 s busy timeout.
struct SqliteOptions {
  /// The database file; created when missing. Required.
  std::string path;
  /// `PRAGMA synchronous=FULL` (durable against power loss) when true,
  /// NORMAL (durable against process crashes only) when false.
  bool synchronous_full = true;
  /// At most this many connections; callers wait for a free one. > 0.
  int max_connections = 8;
  /// How long a statement waits for another connection's write lock before
  /// failing with Unavailable. >= 0.
  std::chrono::milliseconds busy_timeout = std::chrono::seconds(5);
};

/// Opens (creating when missing) the file. InvalidArgument naming "path",
/// "max_connections" or "busy_timeout"; Unavailable when the file cannot be
/// opened. Thread-safe result.
absl::StatusOr<std::shared_ptr<SqlDatabase>> OpenSqliteDatabase(const SqliteOptions& options);

/// `OpenSqliteDatabase` + `MakeIdempotencyStore`.
absl::StatusOr<std::unique_ptr<IdempotencyStore>> OpenSqliteStore(
    const SqliteOptions& sqlite, StoreOptions options, std::shared_ptr<Clock> clock = nullptr);

}  // namespace server
}  // namespace saferetry

#endif  // SAFERETRY_SERVER_SQLITE_STORE_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The idempotency store on PostgreSQL (through libpq), for many service
// instances sharing one database: the atomic winner is an
// `INSERT ... ON CONFLICT DO NOTHING` on the key's primary key, records are
// locked with `SELECT ... FOR UPDATE` while a decision is taken, and
// transactions run at READ COMMITTED. Link `saferetry::server_postgres`.
//
// @code
//   saferetry::server::PostgresOptions pg;
//   pg.conninfo = "host=127.0.0.1 port=5432 dbname=orders user=orders";
//   auto store = saferetry::server::OpenPostgresStore(pg, {});
//   if (!store.ok()) return store.status();
// @endcode

#ifndef SAFERETRY_SERVER_POSTGRES_STORE_H_
#define SAFERETRY_SERVER_POSTGRES_STORE_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "saferetry/clock.h"
#include "saferetry/server/idempotency_store.h"
#include "saferetry/server/sql.h"

namespace saferetry {
namespace server {

/// How to reach the database. Defaults: 8 connections, 5 s connect timeout.
struct PostgresOptions {
  /// A libpq connection string ("host=... dbname=...") or URI
  /// ("postgresql://..."). Required.
  std::string conninfo;
  /// At most this many connections; callers wait for a free one. > 0.
  int max_connections = 8;
  /// Passed as libpq's connect_timeout (whole seconds, at least 1). > 0.
  std::chrono::milliseconds connect_timeout = std::chrono::seconds(5);
  /// The schema the store's tables live in (it must exist). Empty (the
  /// default): the server's `search_path`. Set per transaction
  /// (`SET LOCAL search_path`), so it holds behind pgbouncer in transaction
  /// pooling, which refuses the `options='-c search_path=...'` startup
  /// parameter (and, with `ignore_startup_parameters`, silently drops it).
  /// 1 to 63 characters: lower-case letters, digits and `_`, not starting
  /// with a digit.
  std::string schema;
};

/// Connects once (so a bad conninfo fails here). InvalidArgument naming
/// "conninfo", "max_connections", "connect_timeout" or "schema"; Unavailable when the
/// server cannot be reached. A pooled connection that broke while idle (a
/// server restart) is found at the next transaction's BEGIN; nothing of that
/// transaction reached the database, so it runs again on another connection
/// (at most once per pooled connection, then on a fresh one). A connection
/// that breaks after BEGIN fails its transaction with Unavailable, never
/// retried: its statements may have reached the database.
absl::StatusOr<std::shared_ptr<SqlDatabase>> OpenPostgresDatabase(const PostgresOptions& options);

/// `OpenPostgresDatabase` + `MakeIdempotencyStore`.
absl::StatusOr<std::unique_ptr<IdempotencyStore>> OpenPostgresStore(
    const PostgresOptions& postgres, StoreOptions options, std::shared_ptr<Clock> clock = nullptr);

}  // namespace server
}  // namespace saferetry

#endif  // SAFERETRY_SERVER_POSTGRES_STORE_H_

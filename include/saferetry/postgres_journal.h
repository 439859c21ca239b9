// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The intent journal on PostgreSQL (through libpq), for a fleet: every
// process of every host records its intents in one database, so that an
// intent whose process (or pod, with its disk) is gone is still there for a
// reconciler on any other host. Target saferetry::journal_postgres; the core
// and the SQLite journal never link libpq.
//
// Layout. One table, `saferetry_intents`, and a version table,
// `saferetry_journal_schema_version`, in `schema` (or the server's
// `search_path`). They can share a schema with the server's idempotency
// store: the names differ. Migrations run in one transaction under a
// transaction-scoped advisory lock (`pg_advisory_xact_lock`), so processes
// starting together do not race on `CREATE TABLE`.
//
// Durability. Every write transaction sets `synchronous_commit` to `on` for
// itself (`SET LOCAL`, whatever the server's or the role's default), so a
// `Record` that returned OK survives a crash of the database server: its
// commit record was flushed to the primary's disk — and, with synchronous
// replication configured (`synchronous_standby_names`), to a standby. With
// asynchronous standbys only, a failover may lose the last commits: see
// docs/journal-postgres.md. A commit whose answer is lost (the connection
// breaks after COMMIT was sent) is reported as kUnavailable, so the caller
// sends nothing; the row may have been written, and a retry of the same
// `Record` by the same owner finds it (`created == false`, claimed by that
// owner) and continues it.
//
// Time. By default (`PostgresJournalClock::kDatabase`) every decision that
// compares times — a claim's expiry, a passed deadline, the age filters and
// gauge, retention — is taken on the database's clock (`now()` of the
// transaction), so hosts whose clocks disagree still agree on whether a
// claim has expired. Instants the caller passes (`Intent::created` and
// `deadline`, `Claim`'s `until`, `Prune`'s `now`) are measured against the
// caller's clock (`JournalOptions::clock`) and stored at the same distance
// from the database's now; stored and returned times are on the database's
// clock; give the journal the client's clock (both default to the system
// clock). `kJournalClock` uses `JournalOptions::clock` throughout, as the
// other journals do (tests with a fake clock; one host). docs/adr/0015.
//
// Connections. A small pool (`max_connections`); a connection found broken
// (the server restarted, the backend was terminated) is closed and a new one
// opened on the next operation. When a connection breaks before anything of
// an operation was executed (an idle pooled connection that died), the
// operation is run again on a fresh connection, so the first operation after
// a database restart succeeds once the database is back. Nothing throws;
// every error is a status (see `IntentJournal`), and a lost connection is
// kUnavailable.
//
// Claims coordinate work across processes and hosts (of concurrent `Claim`s
// exactly one wins: a conditional `UPDATE` under the row lock); as in every
// journal they do not fence writes (journal.h).
//
// Text. PostgreSQL text holds neither NUL nor invalid UTF-8: `Record` refuses
// such a method, URL or status-query template (kInvalidArgument naming the
// field), `Claim` such an owner, and `Finish` stores the summary's strings
// with each offending byte replaced by '?'. Headers and bodies are stored as
// bytes (`bytea`).
//
// @code
//   saferetry::PostgresJournalOptions options;
//   options.dsn = "postgresql://orders@db.internal/orders";
//   options.schema = "saferetry";   // must exist
//   absl::StatusOr<std::shared_ptr<saferetry::IntentJournal>> journal =
//       saferetry::OpenPostgresJournal(options);
//   if (!journal.ok()) return journal.status();
// @endcode

#ifndef SAFERETRY_POSTGRES_JOURNAL_H_
#define SAFERETRY_POSTGRES_JOURNAL_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "saferetry/journal.h"
#include "saferetry/server/sql.h"

namespace saferetry {

/// Which clock the PostgreSQL journal takes its "now" from.
enum class PostgresJournalClock {
  /// The database's `now()`: one clock for the whole fleet (the default).
  kDatabase,
  /// `JournalOptions::clock`, like the SQLite and in-memory journals.
  kJournalClock,
};

/// Options of `OpenPostgresJournal`; the shared ones are in `JournalOptions`.
struct PostgresJournalOptions : JournalOptions {
  /// A libpq connection string ("host=... dbname=...") or URI
  /// ("postgresql://..."). Required.
  std::string dsn;
  /// The schema the journal's tables live in; it must exist. Empty (the
  /// default): the server's `search_path`. Set per transaction (`SET LOCAL
  /// search_path`), which holds behind pgbouncer in transaction pooling (the
  /// `options=-c search_path=...` startup parameter does not). 1 to 63
  /// lower-case letters, digits and `_`, not starting with a digit.
  std::string schema;
  /// At most this many connections; callers wait for a free one. From 1 to
  /// 64; default 4.
  int max_connections = 4;
  /// libpq's connect_timeout (whole seconds, at least 1). > 0; default 5 s.
  std::chrono::milliseconds connect_timeout = std::chrono::seconds(5);
  /// How long a statement waits for a row another transaction holds
  /// (`SET LOCAL lock_timeout`) before the operation fails with
  /// kUnavailable. From 1 ms to 24 h; default 5 s.
  std::chrono::milliseconds busy_timeout = std::chrono::seconds(5);
  /// See `PostgresJournalClock`. Default kDatabase.
  PostgresJournalClock clock_source = PostgresJournalClock::kDatabase;
};

/// Connects, brings the schema to the current version, and returns the
/// journal. Thread-safe result: one instance serves every thread of a
/// process, and any number of processes on any hosts may share the database.
///
/// Errors: kInvalidArgument naming the option (dsn, schema, max_connections,
/// connect_timeout, busy_timeout, claim_grace); kUnavailable "dsn: cannot
/// connect: ..." when the server cannot be reached; kFailedPrecondition
/// "schema: ..." when the database was written by a newer version of the
/// journal; kInternal for other database errors (e.g. the schema does not
/// exist, or the role may not create tables in it).
absl::StatusOr<std::shared_ptr<IntentJournal>> OpenPostgresJournal(
    const PostgresJournalOptions& options);

/// The same on a database the caller opened (e.g. with
/// `server::OpenPostgresDatabase`, to share its pool with the server's
/// store), which must be PostgreSQL. `dsn`, `schema`, `max_connections` and
/// `connect_timeout` of `options` are then ignored: they are the database's.
/// Errors as above; kInvalidArgument "database: ..." when it is null or not
/// PostgreSQL.
absl::StatusOr<std::shared_ptr<IntentJournal>> OpenPostgresJournal(
    std::shared_ptr<server::SqlDatabase> database, const PostgresJournalOptions& options);

}  // namespace saferetry

#endif  // SAFERETRY_POSTGRES_JOURNAL_H_

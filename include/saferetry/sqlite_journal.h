// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The SQLite intent journal: the embedded default behind `IntentJournal`
// (target saferetry::journal; the core library never links SQLite).
//
// Durability. The file is in WAL mode and `Record` returns only after its
// transaction has committed, so an intent survives `kill -9` of the process
// from the moment `Record` returns. Whether it also survives a power loss
// or an operating-system crash depends on `synchronous`: FULL syncs the WAL
// at every commit; NORMAL (the default, see docs/adr/0012) syncs only at
// checkpoints, so the last commits before a power loss may be lost (a
// process crash loses nothing).
//
// Concurrency. One journal object serves every thread of a process: writes go
// through one connection and a queue, and concurrent writes are committed
// together in one transaction (group commit: one WAL write, one sync, many
// intents); reads use a second connection and never wait for a sync. Several
// processes may open the same file: every write transaction starts with
// BEGIN IMMEDIATE (so a claim's read and write are one atomic step), and a
// process that finds the file locked waits up to `busy_timeout`.
//
// Permissions. The file is created with mode 0600 (whatever the umask), and
// an existing file that group or others may access is refused, as is a
// symbolic link. SQLite gives its -wal and -shm files the mode of the
// database file; the journal checks them too.
//
// @code
//   saferetry::SqliteJournalOptions options;
//   options.path = "/var/lib/orders/intents.db";
//   absl::StatusOr<std::shared_ptr<saferetry::IntentJournal>> journal =
//       saferetry::OpenSqliteJournal(options);
//   if (!journal.ok()) return journal.status();
// @endcode

#ifndef SAFERETRY_SQLITE_JOURNAL_H_
#define SAFERETRY_SQLITE_JOURNAL_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "saferetry/journal.h"

namespace saferetry {

/// SQLite's `PRAGMA synchronous` in WAL mode.
enum class SqliteSynchronous {
  /// The WAL is synced at checkpoints only. Survives a process crash; a power
  /// loss may lose the last commits. The default (docs/adr/0012).
  kNormal,
  /// The WAL is synced at every commit. Survives a power loss too; costs one
  /// sync per commit (per group of concurrent writes).
  kFull,
};

/// Options of `OpenSqliteJournal`; the shared ones are in `JournalOptions`.
struct SqliteJournalOptions : JournalOptions {
  /// The database file. Created (mode 0600) when missing; its directory must
  /// exist. Required.
  std::string path;
  /// See `SqliteSynchronous`. Default kNormal.
  SqliteSynchronous synchronous = SqliteSynchronous::kNormal;
  /// How long a write waits for another process's lock before failing with
  /// kUnavailable. From 0 to 24 h; default 5 s.
  std::chrono::milliseconds busy_timeout = std::chrono::seconds(5);
  /// Commit concurrent writes of this process together (default). false: one
  /// transaction per write (for comparison in benchmarks).
  bool group_commit = true;
};

/// Opens (creating it if needed) the journal at `options.path` and brings its
/// schema to the current version. Thread-safe result; see the top of this
/// file for threads and processes.
///
/// Errors: kInvalidArgument naming the option (path, busy_timeout,
/// claim_grace); kFailedPrecondition "path: ..." when the file is a symbolic
/// link, not a regular file, or accessible by group or others, and "schema:
/// ..." when the file was written by a newer version of the journal;
/// kPermissionDenied / kNotFound / kUnavailable "path: ..." when it cannot
/// be created or opened; kUnavailable when another process keeps it locked
/// past `busy_timeout`.
absl::StatusOr<std::shared_ptr<IntentJournal>> OpenSqliteJournal(
    const SqliteJournalOptions& options);

}  // namespace saferetry

#endif  // SAFERETRY_SQLITE_JOURNAL_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Not API: the SQLite plumbing of the intent journal — errors mapped to
// absl::Status, one connection with its prepared statements, a statement in
// use, and the journal file's permissions (0600, never a symbolic link).
#ifndef SAFERETRY_SRC_JOURNAL_SQLITE_SUPPORT_H_
#define SAFERETRY_SRC_JOURNAL_SQLITE_SUPPORT_H_

#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace saferetry {
namespace internal {

/// `what: <sqlite message>` with a code by kind: busy, locked, I/O, full,
/// read-only -> Unavailable; corrupt or not a database -> DataLoss; else
/// Internal.
absl::Status SqliteError(sqlite3* db, int rc, std::string_view what);

// One connection and its prepared statements (keyed by the address of the
// SQL literal: every statement text is a constant of this file).
class Connection {
 public:
  Connection() = default;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection() {
    for (auto& [sql, stmt] : statements_) sqlite3_finalize(stmt);
    if (db_ != nullptr) sqlite3_close_v2(db_);
  }

  absl::Status Open(const std::string& path, std::chrono::milliseconds busy_timeout) {
    const int rc =
        sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
    if (rc != SQLITE_OK) return SqliteError(db_, rc, absl::StrCat("path: ", path));
    sqlite3_extended_result_codes(db_, 1);
    sqlite3_busy_timeout(db_, static_cast<int>(busy_timeout.count()));
    return absl::OkStatus();
  }

  sqlite3* db() const { return db_; }

  /// Finalizes the statements and closes the connection; `Open` may follow.
  void Close() {
    for (auto& [sql, stmt] : statements_) sqlite3_finalize(stmt);
    statements_.clear();
    if (db_ != nullptr) sqlite3_close_v2(db_);
    db_ = nullptr;
  }

  /// The last error on this connection was SQLITE_BUSY or SQLITE_LOCKED.
  bool LastErrorWasBusy() const {
    if (db_ == nullptr) return false;
    const int code = sqlite3_extended_errcode(db_) & 0xff;
    return code == SQLITE_BUSY || code == SQLITE_LOCKED;
  }

  absl::Status Exec(const char* sql) {
    const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
    return rc == SQLITE_OK ? absl::OkStatus() : SqliteError(db_, rc, sql);
  }

  absl::StatusOr<sqlite3_stmt*> Prepare(const char* sql) {
    auto it = statements_.find(sql);
    if (it != statements_.end()) return it->second;
    sqlite3_stmt* stmt = nullptr;
    const int rc = sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
    if (rc != SQLITE_OK) return SqliteError(db_, rc, "prepare");
    statements_.emplace(sql, stmt);
    return stmt;
  }

 private:
  sqlite3* db_ = nullptr;
  std::map<const char*, sqlite3_stmt*> statements_;
};

// A prepared statement in use: binds by position, steps, and resets itself.
class Statement {
 public:
  Statement(Connection& conn, sqlite3_stmt* stmt) : conn_(conn), stmt_(stmt) {}
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }

  Statement& Bind(std::string_view text) {
    Check(sqlite3_bind_text(stmt_, ++index_, text.data(), static_cast<int>(text.size()),
                            SQLITE_STATIC));
    return *this;
  }
  Statement& BindBlob(const std::optional<std::string>& blob) {
    if (!blob.has_value()) {
      Check(sqlite3_bind_null(stmt_, ++index_));
    } else {
      Check(sqlite3_bind_blob(stmt_, ++index_, blob->data(), static_cast<int>(blob->size()),
                              SQLITE_STATIC));
    }
    return *this;
  }
  Statement& BindBlob(std::string_view blob) {
    Check(sqlite3_bind_blob(stmt_, ++index_, blob.data(), static_cast<int>(blob.size()),
                            SQLITE_STATIC));
    return *this;
  }
  Statement& Bind(std::int64_t n) {
    Check(sqlite3_bind_int64(stmt_, ++index_, n));
    return *this;
  }

  // True when a row is ready; false when done.
  absl::StatusOr<bool> Step() {
    if (bind_rc_ != SQLITE_OK) return SqliteError(conn_.db(), bind_rc_, "bind");
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return SqliteError(conn_.db(), rc, "step");
  }
  absl::Status Run() {
    absl::StatusOr<bool> row = Step();
    return row.ok() ? absl::OkStatus() : row.status();
  }

  std::int64_t Int(int column) const { return sqlite3_column_int64(stmt_, column); }
  bool IsNull(int column) const { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }
  std::string Text(int column) const {
    const void* p = sqlite3_column_blob(stmt_, column);
    const int n = sqlite3_column_bytes(stmt_, column);
    return p == nullptr ? std::string()
                        : std::string(static_cast<const char*>(p), static_cast<std::size_t>(n));
  }

 private:
  void Check(int rc) {
    if (rc != SQLITE_OK && bind_rc_ == SQLITE_OK) bind_rc_ = rc;
  }

  Connection& conn_;
  sqlite3_stmt* stmt_;
  int index_ = 0;
  int bind_rc_ = SQLITE_OK;
};

/// Creates the file with mode 0600 or checks an existing one: never a
/// symbolic link, never accessible by group or others.
absl::Status PrepareFile(const std::string& path);

/// Refuses stale -wal / -shm files that are not regular files of mode 0600.
absl::Status CheckCompanionFiles(const std::string& path);

}  // namespace internal
}  // namespace saferetry

#endif  // SAFERETRY_SRC_JOURNAL_SQLITE_SUPPORT_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/server/sqlite_store.h"

#include <sqlite3.h>

#include <condition_variable>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace saferetry {
namespace server {
namespace {

absl::Status SqliteStatus(sqlite3* db, int rc, std::string_view what) {
  std::string message = absl::StrCat(std::string(what), ": ",
                                     db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  switch (rc & 0xff) {
    case SQLITE_CONSTRAINT: {
      const int extended = db != nullptr ? sqlite3_extended_errcode(db) : rc;
      if (extended == SQLITE_CONSTRAINT_UNIQUE || extended == SQLITE_CONSTRAINT_PRIMARYKEY) {
        return absl::AlreadyExistsError(message);
      }
      return absl::FailedPreconditionError(message);
    }
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
    case SQLITE_FULL:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status Exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err);
  if (rc == SQLITE_OK) return absl::OkStatus();
  sqlite3_free(err);
  return SqliteStatus(db, rc, sql);
}

class SqliteTransaction final : public Transaction {
 public:
  explicit SqliteTransaction(sqlite3* db) : db_(db) {}

  absl::StatusOr<std::vector<SqlRow>> Execute(std::string_view sql,
                                              const std::vector<SqlValue>& params) override {
    rows_affected_ = 0;
    sqlite3_stmt* stmt = nullptr;
    int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr);
    if (rc != SQLITE_OK) return Fail(SqliteStatus(db_, rc, "prepare"));
    struct Finalizer {
      sqlite3_stmt* s;
      ~Finalizer() { sqlite3_finalize(s); }
    } finalizer{stmt};
    // `$N` placeholders are named parameters in SQLite: bind by name so that
    // their order in the text does not matter.
    for (std::size_t i = 0; i < params.size(); ++i) {
      const std::string name = absl::StrCat("$", i + 1);
      const int index = sqlite3_bind_parameter_index(stmt, name.c_str());
      if (index == 0) continue;  // a parameter the statement does not use
      const SqlValue& v = params[i];
      if (const std::int64_t* n = v.as_int()) {
        rc = sqlite3_bind_int64(stmt, index, *n);
      } else if (const std::string* t = v.as_text()) {
        rc = sqlite3_bind_text(stmt, index, t->data(), static_cast<int>(t->size()),
                               SQLITE_TRANSIENT);
      } else {
        rc = sqlite3_bind_null(stmt, index);
      }
      if (rc != SQLITE_OK) return Fail(SqliteStatus(db_, rc, "bind"));
    }
    std::vector<SqlRow> rows;
    const int columns = sqlite3_column_count(stmt);
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
      SqlRow row;
      row.columns.reserve(static_cast<std::size_t>(columns));
      for (int c = 0; c < columns; ++c) {
        if (sqlite3_column_type(stmt, c) == SQLITE_NULL) {
          row.columns.emplace_back(std::nullopt);
          continue;
        }
        const unsigned char* p = sqlite3_column_text(stmt, c);
        row.columns.emplace_back(
            std::string(reinterpret_cast<const char*>(p),
                        static_cast<std::size_t>(sqlite3_column_bytes(stmt, c))));
      }
      rows.push_back(std::move(row));
    }
    if (rc != SQLITE_DONE) return Fail(SqliteStatus(db_, rc, "step"));
    rows_affected_ = sqlite3_changes(db_);
    return rows;
  }

  std::int64_t rows_affected() const override { return rows_affected_; }
  SqlDialect dialect() const override { return SqlDialect::kSqlite; }
  bool failed() const { return failed_; }

 private:
  absl::Status Fail(absl::Status s) {
    failed_ = true;
    return s;
  }

  sqlite3* db_;
  std::int64_t rows_affected_ = 0;
  bool failed_ = false;
};

class SqliteDatabase final : public SqlDatabase {
 public:
  explicit SqliteDatabase(SqliteOptions options) : options_(std::move(options)) {}
  ~SqliteDatabase() override {
    for (sqlite3* db : free_) sqlite3_close(db);
  }

  absl::Status RunInTransaction(TransactionMode mode,
                                const std::function<absl::Status(Transaction&)>& body) override {
    auto db = Acquire();
    if (!db.ok()) return db.status();
    absl::Status status = RunWith(*db, mode, body);
    Release(*db);
    return status;
  }

  SqlDialect dialect() const override { return SqlDialect::kSqlite; }

  absl::StatusOr<sqlite3*> Acquire() {
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
    const int rc =
        sqlite3_open_v2(options_.path.c_str(), &db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
    absl::Status status = rc == SQLITE_OK ? Configure(db) : SqliteStatus(db, rc, "open");
    if (!status.ok()) {
      sqlite3_close(db);
      lock.lock();
      --open_;
      free_cv_.notify_one();
      return absl::UnavailableError(absl::StrCat(options_.path, ": ", status.message()));
    }
    return db;
  }

  void Release(sqlite3* db) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(db);
    free_cv_.notify_one();
  }

 private:
  absl::Status Configure(sqlite3* db) {
    sqlite3_busy_timeout(db, static_cast<int>(options_.busy_timeout.count()));
    for (const char* pragma :
         {"PRAGMA journal_mode=WAL", "PRAGMA foreign_keys=ON",
          options_.synchronous_full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL"}) {
      if (auto s = Exec(db, pragma); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  static absl::Status RunWith(sqlite3* db, TransactionMode mode,
                              const std::function<absl::Status(Transaction&)>& body) {
    // IMMEDIATE takes the write lock at BEGIN, so a read-then-write inside
    // the transaction can never be refused half-way for a lock upgrade.
    if (auto s = Exec(db, mode == TransactionMode::kWrite ? "BEGIN IMMEDIATE" : "BEGIN"); !s.ok()) {
      return s;
    }
    SqliteTransaction txn(db);
    absl::Status status = body(txn);
    if (status.ok() && !txn.failed()) {
      status = Exec(db, "COMMIT");
      if (status.ok()) return status;
    }
    (void)Exec(db, "ROLLBACK");
    if (status.ok()) status = absl::InternalError("transaction: a statement failed");
    return status;
  }

  const SqliteOptions options_;
  std::mutex mu_;
  std::condition_variable free_cv_;
  std::vector<sqlite3*> free_;
  int open_ = 0;
};

}  // namespace

absl::StatusOr<std::shared_ptr<SqlDatabase>> OpenSqliteDatabase(const SqliteOptions& options) {
  if (options.path.empty()) return absl::InvalidArgumentError("path: must not be empty");
  if (options.max_connections <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_connections: must be > 0, got ", options.max_connections));
  }
  if (options.busy_timeout.count() < 0 || options.busy_timeout > std::chrono::hours(24)) {
    return absl::InvalidArgumentError(absl::StrCat("busy_timeout: must be from 0 to 24h, got ",
                                                   options.busy_timeout.count(), "ms"));
  }
  auto database = std::make_shared<SqliteDatabase>(options);
  // Open one connection now so that a bad path fails here, not on first use.
  auto db = database->Acquire();
  if (!db.ok()) return db.status();
  database->Release(*db);
  return std::shared_ptr<SqlDatabase>(std::move(database));
}

absl::StatusOr<std::unique_ptr<IdempotencyStore>> OpenSqliteStore(const SqliteOptions& sqlite,
                                                                  StoreOptions options,
                                                                  std::shared_ptr<Clock> clock) {
  if (auto s = ValidateStoreOptions(options); !s.ok()) return s;
  auto database = OpenSqliteDatabase(sqlite);
  if (!database.ok()) return database.status();
  return MakeIdempotencyStore(*std::move(database), options, std::move(clock));
}

}  // namespace server
}  // namespace saferetry

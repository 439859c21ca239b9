// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/server/postgres_store.h"

#include <libpq-fe.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace saferetry {
namespace server {
namespace {

constexpr unsigned kInt8Oid = 20;  // pg_type.h: INT8OID

std::string Trimmed(const char* message) {
  std::string s = message != nullptr ? message : "unknown error";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Maps a failed result (or a failed connection) to the Transaction error codes.
absl::Status PgStatus(PGconn* conn, const PGresult* res, std::string_view what) {
  if (PQstatus(conn) != CONNECTION_OK) {
    return absl::UnavailableError(
        absl::StrCat(std::string(what), ": ", Trimmed(PQerrorMessage(conn))));
  }
  const char* state = res != nullptr ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : nullptr;
  const std::string message =
      absl::StrCat(std::string(what), ": ",
                   Trimmed(res != nullptr ? PQresultErrorMessage(res) : PQerrorMessage(conn)));
  const std::string sqlstate = state != nullptr ? state : "";
  if (sqlstate == "23505") return absl::AlreadyExistsError(message);
  if (sqlstate.rfind("23", 0) == 0) return absl::FailedPreconditionError(message);
  // Serialization failures, deadlocks, lock timeouts, shutdowns, too many
  // connections: worth another try later.
  if (sqlstate == "40001" || sqlstate == "40P01" || sqlstate == "55P03" ||
      sqlstate.rfind("08", 0) == 0 || sqlstate.rfind("57P", 0) == 0 || sqlstate == "53300") {
    return absl::UnavailableError(message);
  }
  return absl::InternalError(message);
}

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using Result = std::unique_ptr<PGresult, ResultDeleter>;

absl::Status Command(PGconn* conn, const char* sql) {
  Result res(PQexec(conn, sql));
  if (res == nullptr || PQresultStatus(res.get()) != PGRES_COMMAND_OK) {
    return PgStatus(conn, res.get(), sql);
  }
  return absl::OkStatus();
}

class PostgresTransaction final : public Transaction {
 public:
  explicit PostgresTransaction(PGconn* conn) : conn_(conn) {}

  absl::StatusOr<std::vector<SqlRow>> Execute(std::string_view sql,
                                              const std::vector<SqlValue>& params) override {
    rows_affected_ = 0;
    if (failed_) {
      return absl::FailedPreconditionError(
          "transaction: an earlier statement failed; the transaction will be rolled back");
    }
    std::vector<std::string> text(params.size());
    std::vector<const char*> values(params.size(), nullptr);
    std::vector<unsigned> types(params.size(), 0);  // 0: let the server infer
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (const std::int64_t* n = params[i].as_int()) {
        text[i] = absl::StrCat(*n);
        values[i] = text[i].c_str();
        types[i] = kInt8Oid;
      } else if (const std::string* t = params[i].as_text()) {
        values[i] = t->c_str();
      }
    }
    const std::string statement(sql);
    Result res(PQexecParams(conn_, statement.c_str(), static_cast<int>(params.size()), types.data(),
                            values.data(), nullptr, nullptr, 0));
    const ExecStatusType status = res != nullptr ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
      failed_ = true;
      return PgStatus(conn_, res.get(), "statement");
    }
    const char* affected = PQcmdTuples(res.get());
    rows_affected_ = affected != nullptr && *affected != '\0' ? std::atoll(affected) : 0;
    std::vector<SqlRow> rows;
    const int n = PQntuples(res.get());
    const int columns = PQnfields(res.get());
    rows.reserve(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
      SqlRow row;
      row.columns.reserve(static_cast<std::size_t>(columns));
      for (int c = 0; c < columns; ++c) {
        if (PQgetisnull(res.get(), r, c)) {
          row.columns.emplace_back(std::nullopt);
        } else {
          row.columns.emplace_back(std::string(
              PQgetvalue(res.get(), r, c), static_cast<std::size_t>(PQgetlength(res.get(), r, c))));
        }
      }
      rows.push_back(std::move(row));
    }
    return rows;
  }

  std::int64_t rows_affected() const override { return rows_affected_; }
  SqlDialect dialect() const override { return SqlDialect::kPostgres; }
  bool failed() const { return failed_; }

 private:
  PGconn* conn_;
  std::int64_t rows_affected_ = 0;
  bool failed_ = false;
};

class PostgresDatabase final : public SqlDatabase {
 public:
  explicit PostgresDatabase(PostgresOptions options) : options_(std::move(options)) {
    const long long seconds = std::max<long long>(
        1, std::chrono::duration_cast<std::chrono::seconds>(options_.connect_timeout).count());
    connect_timeout_ = absl::StrCat(seconds);
    // Validated to [a-z_][a-z0-9_]*: quoting is exact.
    if (!options_.schema.empty()) {
      set_schema_ = absl::StrCat("SET LOCAL search_path TO \"", options_.schema, "\"");
    }
  }
  ~PostgresDatabase() override {
    for (PGconn* c : free_) PQfinish(c);
  }

  absl::Status RunInTransaction(TransactionMode mode,
                                const std::function<absl::Status(Transaction&)>& body) override {
    // A pooled connection can break while idle (the server restarted, a
    // proxy dropped it); that shows only at its next BEGIN. Nothing of the
    // transaction reached the database then, so it runs again on another
    // connection: at most once per pooled connection, then on a fresh one,
    // whose failure is final.
    for (int attempt = 0;; ++attempt) {
      bool fresh = false;
      auto conn = Acquire(&fresh);
      if (!conn.ok()) return conn.status();
      bool began = false;
      absl::Status status = RunWith(*conn, mode, body, &began);
      const bool broken = PQstatus(*conn) != CONNECTION_OK;
      Release(*conn);
      if (began || !broken || fresh || attempt >= options_.max_connections) return status;
    }
  }

  SqlDialect dialect() const override { return SqlDialect::kPostgres; }

  absl::StatusOr<PGconn*> Acquire(bool* fresh = nullptr) {
    std::unique_lock<std::mutex> lock(mu_);
    free_cv_.wait(lock, [&] { return !free_.empty() || open_ < options_.max_connections; });
    if (!free_.empty()) {
      PGconn* conn = free_.back();
      free_.pop_back();
      return conn;
    }
    if (fresh != nullptr) *fresh = true;
    ++open_;
    lock.unlock();
    const char* keys[] = {"dbname", "connect_timeout", "application_name", nullptr};
    const char* values[] = {options_.conninfo.c_str(), connect_timeout_.c_str(), "saferetry",
                            nullptr};
    PGconn* conn = PQconnectdbParams(keys, values, /*expand_dbname=*/1);
    if (conn == nullptr || PQstatus(conn) != CONNECTION_OK) {
      absl::Status s = absl::UnavailableError(absl::StrCat(
          "conninfo: cannot connect: ", Trimmed(conn != nullptr ? PQerrorMessage(conn) : nullptr)));
      PQfinish(conn);
      lock.lock();
      --open_;
      free_cv_.notify_one();
      return s;
    }
    // NOTICEs ("relation already exists, skipping") are not errors: keep
    // them off the service's stderr.
    PQsetNoticeProcessor(
        conn, [](void*, const char*) {}, nullptr);
    return conn;
  }

  void Release(PGconn* conn) {
    std::lock_guard<std::mutex> lock(mu_);
    if (PQstatus(conn) != CONNECTION_OK || PQtransactionStatus(conn) != PQTRANS_IDLE) {
      // Broken or left inside a transaction: never hand it out again.
      PQfinish(conn);
      --open_;
    } else {
      free_.push_back(conn);
    }
    free_cv_.notify_one();
  }

 private:
  absl::Status RunWith(PGconn* conn, TransactionMode mode,
                       const std::function<absl::Status(Transaction&)>& body, bool* began) {
    if (auto s = Command(conn, mode == TransactionMode::kRead
                                   ? "BEGIN ISOLATION LEVEL READ COMMITTED READ ONLY"
                                   : "BEGIN ISOLATION LEVEL READ COMMITTED");
        !s.ok()) {
      return s;
    }
    *began = true;
    // Per transaction, not per connection: behind a transaction-pooling
    // proxy the next transaction may run on another server connection.
    if (!set_schema_.empty()) {
      if (auto s = Command(conn, set_schema_.c_str()); !s.ok()) {
        (void)Command(conn, "ROLLBACK");
        return s;
      }
    }
    PostgresTransaction txn(conn);
    absl::Status status = body(txn);
    if (status.ok() && !txn.failed()) {
      status = Command(conn, "COMMIT");
      if (status.ok()) return status;
      // A failed COMMIT leaves an unknown outcome only when the connection
      // broke; the caller sees Unavailable and the record decides later.
    }
    (void)Command(conn, "ROLLBACK");
    if (status.ok()) status = absl::InternalError("transaction: a statement failed");
    return status;
  }

  const PostgresOptions options_;
  std::string connect_timeout_;
  std::string set_schema_;
  std::mutex mu_;
  std::condition_variable free_cv_;
  std::vector<PGconn*> free_;
  int open_ = 0;
};

}  // namespace

absl::StatusOr<std::shared_ptr<SqlDatabase>> OpenPostgresDatabase(const PostgresOptions& options) {
  if (options.conninfo.empty()) return absl::InvalidArgumentError("conninfo: must not be empty");
  if (options.max_connections <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_connections: must be > 0, got ", options.max_connections));
  }
  if (!options.schema.empty()) {
    bool ok = options.schema.size() <= 63 &&
              !absl::ascii_isdigit(static_cast<unsigned char>(options.schema[0]));
    for (char c : options.schema) {
      ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
    }
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "schema: must be 1 to 63 lower-case letters, digits and _, not starting with a digit, "
          "got \"",
          options.schema, "\""));
    }
  }
  if (options.connect_timeout.count() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("connect_timeout: must be > 0, got ", options.connect_timeout.count(), "ms"));
  }
  auto database = std::make_shared<PostgresDatabase>(options);
  auto conn = database->Acquire();
  if (!conn.ok()) return conn.status();
  database->Release(*conn);
  return std::shared_ptr<SqlDatabase>(std::move(database));
}

absl::StatusOr<std::unique_ptr<IdempotencyStore>> OpenPostgresStore(const PostgresOptions& postgres,
                                                                    StoreOptions options,
                                                                    std::shared_ptr<Clock> clock) {
  if (auto s = ValidateStoreOptions(options); !s.ok()) return s;
  auto database = OpenPostgresDatabase(postgres);
  if (!database.ok()) return database.status();
  return MakeIdempotencyStore(*std::move(database), options, std::move(clock));
}

}  // namespace server
}  // namespace saferetry

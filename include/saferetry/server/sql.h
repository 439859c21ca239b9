// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The small SQL seam the idempotency store runs on, and the handle a business
// effect receives so that it writes in the same transaction as the record.
//
// One placeholder syntax works on every database: `$1`, `$2`, ... (PostgreSQL
// natively; SQLite binds them by name). Values are 64-bit integers, text or
// NULL; every column comes back as text (or NULL), which is how both SQLite
// and PostgreSQL's text protocol render them.
//
// @code
//   absl::StatusOr<std::vector<SqlRow>> rows = txn.Execute(
//       "INSERT INTO orders (tenant, sku) VALUES ($1, $2) RETURNING id", {tenant, sku});
//   if (!rows.ok()) return rows.status();
//   std::int64_t id = (*rows)[0].Int(0);
// @endcode

#ifndef SAFERETRY_SERVER_SQL_H_
#define SAFERETRY_SERVER_SQL_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace saferetry {
namespace server {

/// A bound parameter: NULL, a 64-bit integer or text.
class SqlValue {
 public:
  SqlValue() = default;                                      // NULL
  SqlValue(std::int64_t v) : value_(v) {}                    // NOLINT: implicit on purpose
  SqlValue(int v) : value_(static_cast<std::int64_t>(v)) {}  // NOLINT
  SqlValue(std::string v) : value_(std::move(v)) {}          // NOLINT
  SqlValue(std::string_view v) : value_(std::string(v)) {}   // NOLINT
  SqlValue(const char* v) : value_(std::string(v)) {}        // NOLINT

  bool is_null() const { return std::holds_alternative<std::monostate>(value_); }
  const std::int64_t* as_int() const { return std::get_if<std::int64_t>(&value_); }
  const std::string* as_text() const { return std::get_if<std::string>(&value_); }

 private:
  std::variant<std::monostate, std::int64_t, std::string> value_;
};

/// One result row; columns in SELECT order, each text or NULL.
struct SqlRow {
  std::vector<std::optional<std::string>> columns;

  bool IsNull(std::size_t i) const { return i >= columns.size() || !columns[i].has_value(); }
  /// The column as text; "" for NULL.
  std::string Text(std::size_t i) const { return IsNull(i) ? std::string() : *columns[i]; }
  /// The column as an integer; 0 for NULL or non-numeric text.
  std::int64_t Int(std::size_t i) const;
};

/// The SQL dialect behind a database, for the few statements that differ
/// (schema definitions, row locks).
enum class SqlDialect { kSqlite, kPostgres };

/// One open database transaction. Valid only inside the callback it is given
/// to; not thread-safe (one thread uses it at a time).
///
/// Errors: a unique or primary-key violation is `AlreadyExists`; other
/// constraint violations `FailedPrecondition`; a busy or lost database
/// `Unavailable`; anything else `Internal`. After any error the transaction
/// is rolled back when the callback returns, whatever it returns (PostgreSQL
/// refuses further statements in a failed transaction).
class Transaction {
 public:
  virtual ~Transaction() = default;
  /// Runs one statement with `$1`.. parameters; returns its rows (none for
  /// statements without a result). `rows_affected()` then holds the count of
  /// rows an INSERT/UPDATE/DELETE changed.
  virtual absl::StatusOr<std::vector<SqlRow>> Execute(std::string_view sql,
                                                      const std::vector<SqlValue>& params = {}) = 0;
  /// Rows changed by the last `Execute`.
  virtual std::int64_t rows_affected() const = 0;
  virtual SqlDialect dialect() const = 0;
};

/// Read transactions may run alongside others; write transactions take the
/// write lock first (SQLite `BEGIN IMMEDIATE`; PostgreSQL row locks are taken
/// by the statements themselves).
enum class TransactionMode { kRead, kWrite };

/// A pool of connections to one database. Thread-safe: every call borrows a
/// connection for its duration (waiting when all are in use).
class SqlDatabase {
 public:
  virtual ~SqlDatabase() = default;
  /// Opens a transaction, runs `body` in it, and commits when `body` returns
  /// OK (rolls back otherwise, and after any statement error). Returns
  /// `body`'s status, or the error of BEGIN/COMMIT.
  virtual absl::Status RunInTransaction(TransactionMode mode,
                                        const std::function<absl::Status(Transaction&)>& body) = 0;
  virtual SqlDialect dialect() const = 0;
};

}  // namespace server
}  // namespace saferetry

#endif  // SAFERETRY_SERVER_SQL_H_

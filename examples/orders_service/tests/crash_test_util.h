// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// What the crash tests (journal_crash_test, journal_fleet_crash_test) share:
// how a child died, and the oracle's view of the orders database.

#ifndef SAFERETRY_EXAMPLES_ORDERS_SERVICE_TESTS_CRASH_TEST_UTIL_H_
#define SAFERETRY_EXAMPLES_ORDERS_SERVICE_TESTS_CRASH_TEST_UTIL_H_

#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>

#include <map>
#include <string>

#include "gtest/gtest.h"

namespace saferetry {
namespace example {
namespace testkit {

inline bool KilledBySigkill(int status) {
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

// Orders per idempotency key, read from the service's database file.
inline std::map<std::string, int> OrdersByKey(const std::string& db) {
  std::map<std::string, int> out;
  sqlite3* conn = nullptr;
  if (sqlite3_open_v2(db.c_str(), &conn, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    ADD_FAILURE() << "cannot open " << db;
    sqlite3_close(conn);
    return out;
  }
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(conn, "SELECT idempotency_key, COUNT(*) FROM orders GROUP BY 1", -1, &stmt,
                         nullptr) == SQLITE_OK) {
    while (sqlite3_step(stmt) == SQLITE_ROW) {
      out[reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0))] =
          sqlite3_column_int(stmt, 1);
    }
  } else {
    ADD_FAILURE() << sqlite3_errmsg(conn);
  }
  sqlite3_finalize(stmt);
  sqlite3_close(conn);
  return out;
}

}  // namespace testkit
}  // namespace example
}  // namespace saferetry

#endif  // SAFERETRY_EXAMPLES_ORDERS_SERVICE_TESTS_CRASH_TEST_UTIL_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The conformance suite on the SQLite store, plus its own options checks.

#include "saferetry/server/sqlite_store.h"

#include <stdlib.h>

#include <cstdlib>

#include "gtest/gtest.h"
#include "store_conformance.h"

namespace saferetry {
namespace server {
namespace testkit {
namespace {

StoreFactory SqliteFactory() {
  return {"Sqlite",
          [](std::shared_ptr<saferetry::testkit::FakeClock> clock, StoreOptions options,
             std::string*) -> absl::StatusOr<StoreUnderTest> {
            char tmpl[] = "/tmp/saferetry-server-test-XXXXXX";
            const char* dir = mkdtemp(tmpl);
            if (dir == nullptr) return absl::InternalError("mkdtemp failed");
            const std::string path = std::string(dir) + "/store.db";
            SqliteOptions sqlite;
            sqlite.path = path;
            sqlite.synchronous_full = false;
            auto store = OpenSqliteStore(sqlite, options, clock);
            if (!store.ok()) return store.status();
            StoreUnderTest out;
            out.store = *std::move(store);
            const std::string to_remove(dir);
            out.cleanup = [to_remove] { std::system(("rm -rf '" + to_remove + "'").c_str()); };
            out.open_again = [sqlite, options,
                              clock]() -> absl::StatusOr<std::shared_ptr<IdempotencyStore>> {
              auto again = OpenSqliteStore(sqlite, options, clock);
              if (!again.ok()) return again.status();
              return std::shared_ptr<IdempotencyStore>(*std::move(again));
            };
            return out;
          }};
}

INSTANTIATE_TEST_SUITE_P(Store, StoreConformanceTest, ::testing::Values(SqliteFactory()),
                         FactoryName);

TEST(SqliteStoreTest, OptionsNameTheField) {
  SqliteOptions sqlite;
  EXPECT_EQ(OpenSqliteStore(sqlite, {}).status().message(), "path: must not be empty");
  sqlite.path = "/tmp/never-created.db";
  sqlite.max_connections = 0;
  EXPECT_EQ(OpenSqliteStore(sqlite, {}).status().message(), "max_connections: must be > 0, got 0");
  sqlite.max_connections = 1;
  StoreOptions options;
  options.lease = std::chrono::milliseconds(0);
  EXPECT_EQ(OpenSqliteStore(sqlite, options).status().message(), "lease: must be > 0, got 0ms");
  options = {};
  options.retention = std::chrono::milliseconds(-1);
  EXPECT_EQ(OpenSqliteStore(sqlite, options).status().message(),
            "retention: must be > 0, got -1ms");
}

TEST(SqliteStoreTest, AnUnopenableFileIsUnavailable) {
  SqliteOptions sqlite;
  sqlite.path = "/nonexistent-dir/store.db";
  auto store = OpenSqliteStore(sqlite, {});
  EXPECT_EQ(store.status().code(), absl::StatusCode::kUnavailable) << store.status();
}

TEST(RequestDigestTest, IsSha256OfMethodPathAndBody) {
  EXPECT_EQ(RequestDigest("", "", ""),
            "75a11da44c802486bc6f65640aa48a730f0f684c5c07a42ba3cd1735eb3fb070");  // sha256("\n\n")
  // sha256("POST\n/orders\n" + 100 x 'a'), which spans two blocks.
  EXPECT_EQ(RequestDigest("POST", "/orders", std::string(100, 'a')).size(), 64u);
  EXPECT_NE(RequestDigest("POST", "/orders", "{}"), RequestDigest("POST", "/orders", "{} "));
}

}  // namespace
}  // namespace testkit
}  // namespace server
}  // namespace saferetry

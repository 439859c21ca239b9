// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The conformance suite on the PostgreSQL store. Needs SAFERETRY_PG_DSN (a
// key=value libpq connection string); every test runs in a schema of its own,
// dropped afterwards. Without the variable the tests are skipped (ctest
// reports them as skipped), unless SAFERETRY_REQUIRE_POSTGRES=1 (CI), which
// makes a missing database a failure.

#include "saferetry/server/postgres_store.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "pg_dsn.h"
#include "store_conformance.h"

namespace saferetry {
namespace server {
namespace testkit {
namespace {

using ::saferetry::pg_test::Dsn;
using ::saferetry::pg_test::Required;

absl::Status Admin(const std::string& sql) {
  PostgresOptions pg;
  pg.conninfo = Dsn();
  pg.max_connections = 1;
  auto db = OpenPostgresDatabase(pg);
  if (!db.ok()) return db.status();
  return (*db)->RunInTransaction(TransactionMode::kWrite,
                                 [&](Transaction& t) { return t.Execute(sql).status(); });
}

StoreFactory PostgresFactory() {
  return {"Postgres",
          [](std::shared_ptr<saferetry::testkit::FakeClock> clock, StoreOptions options,
             std::string* skip) -> absl::StatusOr<StoreUnderTest> {
            if (Dsn().empty()) {
              if (Required()) {
                return absl::FailedPreconditionError(
                    "SAFERETRY_REQUIRE_POSTGRES=1 but SAFERETRY_PG_DSN is not set");
              }
              *skip = ::saferetry::pg_test::SkipReason();
              return StoreUnderTest{};
            }
            static std::atomic<int> counter{0};
            const std::string schema =
                absl::StrCat("conformance_", getpid(), "_", counter.fetch_add(1));
            if (auto s = Admin(absl::StrCat("CREATE SCHEMA ", schema)); !s.ok()) return s;
            PostgresOptions pg;
            pg.conninfo = Dsn();
            pg.schema = schema;  // per transaction: what pgbouncer accepts
            auto store = OpenPostgresStore(pg, options, clock);
            if (!store.ok()) return store.status();
            StoreUnderTest out;
            out.store = *std::move(store);
            out.cleanup = [schema] {
              (void)Admin(absl::StrCat("DROP SCHEMA ", schema, " CASCADE"));
            };
            out.open_again = [pg, options,
                              clock]() -> absl::StatusOr<std::shared_ptr<IdempotencyStore>> {
              auto again = OpenPostgresStore(pg, options, clock);
              if (!again.ok()) return again.status();
              return std::shared_ptr<IdempotencyStore>(*std::move(again));
            };
            return out;
          }};
}

INSTANTIATE_TEST_SUITE_P(Store, StoreConformanceTest, ::testing::Values(PostgresFactory()),
                         FactoryName);

TEST(PostgresStoreTest, OptionsNameTheFieldAndAnUnreachableServerIsUnavailable) {
  PostgresOptions pg;
  EXPECT_EQ(OpenPostgresStore(pg, {}).status().message(), "conninfo: must not be empty");
  pg.conninfo = "host=127.0.0.1 port=1 dbname=none connect_timeout=1";
  pg.max_connections = 0;
  EXPECT_EQ(OpenPostgresStore(pg, {}).status().message(), "max_connections: must be > 0, got 0");
  pg.max_connections = 1;
  auto store = OpenPostgresStore(pg, {});
  EXPECT_EQ(store.status().code(), absl::StatusCode::kUnavailable) << store.status();
  EXPECT_TRUE(absl::StartsWith(store.status().message(), "conninfo: cannot connect"))
      << store.status();
  for (const char* bad : {"Orders", "1orders", "orders-v2", "a\"; DROP TABLE x; --"}) {
    pg.schema = bad;
    EXPECT_TRUE(absl::StartsWith(OpenPostgresStore(pg, {}).status().message(), "schema: ")) << bad;
  }
}

// The schema option puts the store's tables in that schema, not in public,
// and holds for every transaction (it is set per transaction, as pgbouncer in
// transaction pooling needs).
TEST(PostgresStoreTest, TheSchemaOptionHoldsTheTables) {
  if (Dsn().empty()) {
    if (Required()) FAIL() << "SAFERETRY_REQUIRE_POSTGRES=1 but no database";
    GTEST_SKIP() << ::saferetry::pg_test::SkipReason();
  }
  const std::string schema = absl::StrCat("schema_option_", getpid());
  ASSERT_TRUE(Admin(absl::StrCat("CREATE SCHEMA ", schema)).ok());
  PostgresOptions admin;
  admin.conninfo = Dsn();
  admin.max_connections = 1;
  auto db = OpenPostgresDatabase(admin);
  ASSERT_TRUE(db.ok());
  auto count_tables = [&](const std::string& in) {
    std::int64_t n = -1;
    absl::Status s = (*db)->RunInTransaction(TransactionMode::kRead, [&](Transaction& t) {
      auto rows = t.Execute(absl::StrCat(
          "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = '", in, "'"));
      if (!rows.ok()) return rows.status();
      n = std::stoll((*rows)[0].Text(0));
      return absl::OkStatus();
    });
    EXPECT_TRUE(s.ok()) << s;
    return n;
  };
  const std::int64_t public_before = count_tables("public");
  PostgresOptions pg;
  pg.conninfo = Dsn();
  pg.schema = schema;
  pg.max_connections = 2;
  auto store = OpenPostgresStore(pg, {});
  ASSERT_TRUE(store.ok()) << store.status();
  const KeyScope scope{"t", "op", "k-schema"};
  auto begun = (*store)->Begin(scope, "digest");
  ASSERT_TRUE(begun.ok()) << begun.status();
  EXPECT_GT(count_tables(schema), 0);
  EXPECT_EQ(count_tables("public"), public_before);
  (void)Admin(absl::StrCat("DROP SCHEMA ", schema, " CASCADE"));
}

// A server restart breaks every idle pooled connection. The next
// transaction finds its connection broken at BEGIN, before anything reached
// the database, and runs on a fresh one: no error for a connection that
// broke while idle. A connection that breaks inside a transaction is not
// retried (its statements may have run).
TEST(PostgresStoreTest, APooledConnectionBrokenWhileIdleIsReplacedWithoutAnError) {
  if (Dsn().empty()) {
    if (Required()) FAIL() << "SAFERETRY_REQUIRE_POSTGRES=1 but no database";
    GTEST_SKIP() << ::saferetry::pg_test::SkipReason();
  }
  PostgresOptions pg;
  pg.conninfo = Dsn();
  pg.max_connections = 3;
  auto db = OpenPostgresDatabase(pg);
  ASSERT_TRUE(db.ok()) << db.status();
  // Three pooled connections, each used once, then all terminated.
  std::vector<std::string> pids;
  {
    std::vector<std::thread> threads;
    std::mutex mu;
    std::atomic<int> inside{0};
    for (int i = 0; i < 3; ++i) {
      threads.emplace_back([&] {
        absl::Status s = (*db)->RunInTransaction(TransactionMode::kRead, [&](Transaction& t) {
          auto rows = t.Execute("SELECT pg_backend_pid()");
          if (!rows.ok()) return rows.status();
          {
            std::lock_guard<std::mutex> lock(mu);
            pids.push_back((*rows)[0].Text(0));
          }
          inside++;
          // Hold the connection until all three are open (bounded).
          for (int w = 0; w < 2000 && inside.load() < 3; ++w) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          return absl::OkStatus();
        });
        EXPECT_TRUE(s.ok()) << s;
      });
    }
    for (auto& t : threads) t.join();
  }
  ASSERT_EQ(pids.size(), 3u);
  for (const std::string& pid : pids) {
    ASSERT_TRUE(Admin(absl::StrCat("SELECT pg_terminate_backend(", pid, ")")).ok());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  int runs = 0;
  absl::Status s = (*db)->RunInTransaction(TransactionMode::kRead, [&](Transaction& t) {
    ++runs;
    return t.Execute("SELECT 1").status();
  });
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(runs, 1);

  // Broken inside the transaction: Unavailable, and the body ran once.
  runs = 0;
  s = (*db)->RunInTransaction(TransactionMode::kWrite, [&](Transaction& t) -> absl::Status {
    ++runs;
    auto pid = t.Execute("SELECT pg_backend_pid()");
    if (!pid.ok()) return pid.status();
    if (auto k = Admin(absl::StrCat("SELECT pg_terminate_backend(", (*pid)[0].Text(0), ")"));
        !k.ok()) {
      return k;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return t.Execute("SELECT 1").status();
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_EQ(runs, 1);
}

}  // namespace
}  // namespace testkit
}  // namespace server
}  // namespace saferetry

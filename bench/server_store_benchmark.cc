// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Keyed POSTs per second through saferetry::server (IdempotentHandler over an
// IdempotencyStore), without HTTP: a new key (claim + completing transaction
// with one business insert) and the replay of a stored key (one transaction),
// on SQLite (synchronous=NORMAL, a file under /tmp) and, when SAFERETRY_PG_DSN
// is set, on PostgreSQL; 1 and 8 client threads.

#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>

#include "benchmark/benchmark.h"
#include "saferetry/server/handler.h"
#include "saferetry/server/postgres_store.h"
#include "saferetry/server/sqlite_store.h"

namespace {

namespace srv = ::saferetry::server;

struct Fixture {
  std::shared_ptr<srv::IdempotencyStore> store;
  std::unique_ptr<srv::IdempotentHandler> handler;
  std::string cleanup;
};

std::unique_ptr<Fixture> Open(bool postgres) {
  auto f = std::make_unique<Fixture>();
  absl::StatusOr<std::unique_ptr<srv::IdempotencyStore>> store;
  if (postgres) {
    srv::PostgresOptions pg;
    pg.conninfo = std::getenv("SAFERETRY_PG_DSN");
    pg.max_connections = 8;
    store = srv::OpenPostgresStore(pg, {});
  } else {
    char tmpl[] = "/tmp/saferetry-bench-XXXXXX";
    f->cleanup = mkdtemp(tmpl);
    srv::SqliteOptions sqlite;
    sqlite.path = f->cleanup + "/store.db";
    sqlite.synchronous_full = false;
    store = srv::OpenSqliteStore(sqlite, {});
  }
  if (!store.ok()) return nullptr;
  f->store = *std::move(store);
  absl::Status s =
      f->store->database().RunInTransaction(srv::TransactionMode::kWrite, [](srv::Transaction& t) {
        return t.Execute("CREATE TABLE IF NOT EXISTS bench_orders (k TEXT PRIMARY KEY, body TEXT)")
            .status();
      });
  if (!s.ok()) return nullptr;
  srv::HandlerOptions options;
  options.operation = "bench_create";
  f->handler = *srv::IdempotentHandler::Create(f->store, options);
  return f;
}

Fixture* shared_fixture = nullptr;
std::atomic<long> key_counter{0};

void KeyedPost(benchmark::State& state, bool postgres, bool replay) {
  if (state.thread_index() == 0) {
    if (postgres && std::getenv("SAFERETRY_PG_DSN") == nullptr) {
      state.SkipWithError("SAFERETRY_PG_DSN not set");
    } else {
      shared_fixture = Open(postgres).release();
      if (shared_fixture == nullptr) state.SkipWithError("cannot open the store");
    }
  }
  // Benchmark threads start the loop together; every thread sees the fixture.
  const std::string run =
      std::to_string(getpid()) + "-" + std::to_string(key_counter.fetch_add(1000000));
  long i = 0;
  for (auto _ : state) {
    if (shared_fixture == nullptr) break;
    srv::WriteRequest w;
    w.method = "POST";
    w.path = "/orders";
    w.body = R"({"sku":"sku-42","quantity":1})";
    w.idempotency_key = replay ? "replayed-key-" + std::to_string(state.thread_index())
                               : "k-" + run + "-" + std::to_string(state.thread_index()) + "-" +
                                     std::to_string(i++);
    srv::Work work;
    const std::string key = *w.idempotency_key;
    work.effect = [&key, &w](srv::Transaction& t) -> absl::StatusOr<srv::StoredResponse> {
      auto r = t.Execute("INSERT INTO bench_orders (k, body) VALUES ($1, $2)", {key, w.body});
      if (!r.ok()) return r.status();
      return srv::StoredResponse{201, R"({"order_id":"ord-1"})"};
    };
    srv::Answer a = shared_fixture->handler->HandleWrite(w, work);
    if (a.status != 201) {
      state.SkipWithError(("unexpected status " + std::to_string(a.status) + " " + a.body).c_str());
      break;
    }
  }
  state.SetItemsProcessed(state.iterations());
  if (state.thread_index() == 0 && shared_fixture != nullptr) {
    if (!shared_fixture->cleanup.empty()) {
      std::system(("rm -rf '" + shared_fixture->cleanup + "'").c_str());
    }
    delete shared_fixture;
    shared_fixture = nullptr;
  }
}

void BM_SqliteNewKey(benchmark::State& s) { KeyedPost(s, false, false); }
void BM_SqliteReplay(benchmark::State& s) { KeyedPost(s, false, true); }
void BM_PostgresNewKey(benchmark::State& s) { KeyedPost(s, true, false); }
void BM_PostgresReplay(benchmark::State& s) { KeyedPost(s, true, true); }

BENCHMARK(BM_SqliteNewKey)->Threads(1)->Threads(8)->UseRealTime();
BENCHMARK(BM_SqliteReplay)->Threads(1)->Threads(8)->UseRealTime();
BENCHMARK(BM_PostgresNewKey)->Threads(1)->Threads(8)->UseRealTime();
BENCHMARK(BM_PostgresReplay)->Threads(1)->Threads(8)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// What the intent journal adds to one keyed call: Record + MarkSent + Finish
// (three write transactions) on the SQLite journal in WAL mode, with
// synchronous NORMAL and FULL, from 1 thread and from 8 threads (with group
// commit, and for comparison without), each on a fresh file in a directory
// on the real disk ($SAFERETRY_BENCH_DIR, default /var/tmp: /tmp may be a
// tmpfs, where a sync costs nothing and the figures would lie).
//
// With SAFERETRY_PG_DSN set (and saferetry::journal_postgres built), the
// PostgreSQL journal too, each configuration in a fresh schema: 1 and 8
// threads, each call either Record + MarkSent + Finish or Record with attempt
// 1 marked + Finish (two commits, one before the first byte).
//
// Prints, per configuration:
//   journal_us_per_call{sync=NORMAL,threads=8,group_commit=on}=<wall time / calls>
//   journal_latency_us{sync=NORMAL,threads=8,group_commit=on,q=p50}=<one call, as its thread saw
//   it> journal_latency_us{...,q=p99}=...
//   journal_us_per_call{journal=postgres,threads=8,record_marks_attempt=on}=...
// "us per call" is throughput (elapsed wall time divided by all calls of all
// threads); latency is what one caller waits. Usage: journal_benchmark
// [calls per thread, default 400].

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "saferetry/journal.h"
#include "saferetry/sqlite_journal.h"
#ifdef SAFERETRY_BENCH_POSTGRES
#include "saferetry/postgres_journal.h"
#include "saferetry/server/postgres_store.h"
#endif

namespace {

using Clock = std::chrono::steady_clock;

struct Config {
  saferetry::SqliteSynchronous sync;
  int threads;
  bool group_commit;
};

std::string Label(const Config& c) {
  return std::string("sync=") +
         (c.sync == saferetry::SqliteSynchronous::kFull ? "FULL" : "NORMAL") +
         ",threads=" + std::to_string(c.threads) +
         ",group_commit=" + (c.group_commit ? "on" : "off");
}

// Runs `calls_per_thread` journaled calls from each of `threads` threads and
// prints the figures under `label`. `record_marks_attempt`: Record with
// attempt 1 marked, then Finish (no MarkSent).
bool Measure(saferetry::IntentJournal& journal, int threads_n, int calls_per_thread,
             bool record_marks_attempt, const std::string& label) {
  const std::string body = R"({"sku":"sku-42","quantity":1})";
  saferetry::Request request{
      "POST", "https://orders.internal/orders", {{"Content-Type", "application/json"}}, body};
  std::vector<std::vector<double>> latencies(static_cast<std::size_t>(threads_n));
  std::atomic<int> failures{0};
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  Clock::time_point start;
  for (int t = 0; t < threads_n; ++t) {
    threads.emplace_back([&, t] {
      std::vector<double>& mine = latencies[static_cast<std::size_t>(t)];
      mine.reserve(static_cast<std::size_t>(calls_per_thread));
      ready.fetch_add(1);
      while (ready.load() < threads_n) std::this_thread::yield();
      for (int n = 0; n < calls_per_thread; ++n) {
        const std::string key = "bench-" + std::to_string(t) + "-" + std::to_string(n);
        const auto wall = std::chrono::system_clock::now();
        saferetry::Intent intent =
            saferetry::MakeIntent(request, key, "", wall, wall + std::chrono::seconds(2));
        if (record_marks_attempt) intent.attempt = 1;
        const Clock::time_point t0 = Clock::now();
        absl::StatusOr<saferetry::RecordResult> recorded = journal.Record(intent);
        const bool marked = recorded.ok() && recorded->created &&
                            recorded->intent.state == saferetry::IntentState::kSent;
        const bool good =
            recorded.ok() && (marked || journal.MarkSent(key, 1).ok()) &&
            journal
                .Finish(key, saferetry::IntentState::kSucceeded, {201, "succeeded", "response", ""})
                .ok();
        mine.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        if (!good || marked != record_marks_attempt) failures.fetch_add(1);
      }
    });
  }
  while (ready.load() < threads_n) std::this_thread::yield();
  start = Clock::now();
  for (std::thread& th : threads) th.join();
  const double elapsed_us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  std::vector<double> all;
  for (const auto& v : latencies) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  const auto quantile = [&](double q) {
    return all[std::min(all.size() - 1,
                        static_cast<std::size_t>(q * static_cast<double>(all.size())))];
  };
  std::printf("journal_us_per_call{%s}=%.1f\n", label.c_str(),
              elapsed_us / static_cast<double>(all.size()));
  std::printf("journal_latency_us{%s,q=p50}=%.1f\n", label.c_str(), quantile(0.50));
  std::printf("journal_latency_us{%s,q=p99}=%.1f\n", label.c_str(), quantile(0.99));
  if (failures.load() != 0) {
    std::fprintf(stderr, "%s: %d calls failed\n", label.c_str(), failures.load());
    return false;
  }
  return true;
}

bool Run(const Config& config, const std::string& base, int calls_per_thread) {
  std::string dir = base + "/saferetry-journal-bench-XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) {
    std::perror("mkdtemp");
    return false;
  }
  bool ok = true;
  {
    saferetry::SqliteJournalOptions options;
    options.path = dir + "/intents.db";
    options.synchronous = config.sync;
    options.group_commit = config.group_commit;
    options.owner = "bench";
    absl::StatusOr<std::shared_ptr<saferetry::IntentJournal>> journal =
        saferetry::OpenSqliteJournal(options);
    if (!journal.ok()) {
      std::fprintf(stderr, "open: %s\n", std::string(journal.status().message()).c_str());
      return false;
    }
    ok = Measure(**journal, config.threads, calls_per_thread, false, Label(config));
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return ok;
}

#ifdef SAFERETRY_BENCH_POSTGRES
absl::Status Admin(const std::string& dsn, const std::string& sql) {
  saferetry::server::PostgresOptions pg;
  pg.conninfo = dsn;
  pg.max_connections = 1;
  auto db = saferetry::server::OpenPostgresDatabase(pg);
  if (!db.ok()) return db.status();
  return (*db)->RunInTransaction(
      saferetry::server::TransactionMode::kWrite,
      [&](saferetry::server::Transaction& t) { return t.Execute(sql).status(); });
}

// The PostgreSQL journal (8 connections) in a fresh schema, dropped after.
bool RunPostgres(const std::string& dsn, int threads, bool record_marks_attempt,
                 int calls_per_thread) {
  const std::string schema = "journal_bench_" + std::to_string(getpid()) + "_" +
                             std::to_string(threads) + (record_marks_attempt ? "_marked" : "");
  if (absl::Status s = Admin(dsn, "CREATE SCHEMA " + schema); !s.ok()) {
    std::fprintf(stderr, "postgres: %s\n", std::string(s.message()).c_str());
    return false;
  }
  bool ok = true;
  {
    saferetry::PostgresJournalOptions options;
    options.dsn = dsn;
    options.schema = schema;
    options.max_connections = 8;
    options.owner = "bench";
    absl::StatusOr<std::shared_ptr<saferetry::IntentJournal>> journal =
        saferetry::OpenPostgresJournal(options);
    if (!journal.ok()) {
      std::fprintf(stderr, "open: %s\n", std::string(journal.status().message()).c_str());
      ok = false;
    } else {
      ok = Measure(**journal, threads, calls_per_thread, record_marks_attempt,
                   "journal=postgres,threads=" + std::to_string(threads) +
                       ",record_marks_attempt=" + (record_marks_attempt ? "on" : "off"));
    }
  }
  (void)Admin(dsn, "DROP SCHEMA " + schema + " CASCADE");
  return ok;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  const int calls = argc > 1 ? std::max(1, std::atoi(argv[1])) : 400;
  const char* env = std::getenv("SAFERETRY_BENCH_DIR");
  const std::string base = env != nullptr && *env != '\0' ? env : "/var/tmp";
  std::printf("# %d calls per thread; each call = Record + MarkSent + Finish; files in %s\n", calls,
              base.c_str());
  bool ok = true;
  for (saferetry::SqliteSynchronous sync :
       {saferetry::SqliteSynchronous::kNormal, saferetry::SqliteSynchronous::kFull}) {
    for (const Config& c : {Config{sync, 1, true}, Config{sync, 8, true}, Config{sync, 8, false}}) {
      ok = Run(c, base, calls) && ok;
    }
  }
#ifdef SAFERETRY_BENCH_POSTGRES
  const char* dsn = std::getenv("SAFERETRY_PG_DSN");
  if (dsn != nullptr && *dsn != '\0') {
    std::printf("# PostgreSQL journal (SAFERETRY_PG_DSN); check the server's fsync setting\n");
    for (int threads : {1, 8}) {
      for (bool marked : {false, true}) ok = RunPostgres(dsn, threads, marked, calls) && ok;
    }
  }
#endif
  return ok ? 0 : 1;
}

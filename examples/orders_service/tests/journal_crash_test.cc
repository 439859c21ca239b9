// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The intent journal under kill -9. A child process (journal_crash_client)
// makes keyed order calls through the SQLite journal against the example
// orders service (its real executable, on loopback) and is killed: at chosen
// points by the call setup's test-only crash hooks — before sending (the
// attempt marked, nothing on the wire), after sending (the answer not yet
// processed), after the answer (the outcome known, not yet written) — and at
// random moments by SIGKILL from this test (seeded). Then the reconciler,
// with the fence, settles every intent, and for every intent the test
// checks: exactly one order, or none proven by a definite or fenced answer;
// the journal agrees with the service's database; no order without its
// intent.

#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "orders_service/orders_store.h"
#include "orders_service/tests/crash_test_util.h"
#include "orders_service/tests/service_test_util.h"
#include "saferetry/client.h"
#include "saferetry/curl_transport.h"
#include "saferetry/reconciler.h"
#include "saferetry/retry_budget.h"
#include "saferetry/sqlite_journal.h"

extern char** environ;

namespace saferetry {
namespace example {
namespace {

using ::saferetry::example::testkit::KilledBySigkill;
using ::saferetry::example::testkit::OrdersByKey;
using ::saferetry::example::testkit::TempDir;
using SteadyClock = std::chrono::steady_clock;

// The service as a child process; SIGKILLed on destruction.
class ServiceProcess {
 public:
  explicit ServiceProcess(std::vector<std::string> args) {
    pid_ = ::saferetry::example::testkit::SpawnServiceProcess(ORDERS_SERVICE_BIN, std::move(args),
                                                              &port_);
  }
  ~ServiceProcess() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
  int port() const { return port_; }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

// Starts the crash client with `extra_env` added to the environment
// (proxies removed: everything goes to loopback).
// `crash_at` ("" for none) and `crash_call` tell the client where to kill
// itself (see journal_crash_client.cc).
pid_t SpawnClient(const std::string& journal, const std::string& base, const std::string& prefix,
                  int count, const std::string& crash_at = "", int crash_call = 0) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string v(*e);
    std::string name = v.substr(0, v.find('='));
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (name.find("proxy") != std::string::npos) continue;
    env.push_back(std::move(v));
  }
  std::vector<std::string> args = {JOURNAL_CRASH_CLIENT_BIN, journal, base, prefix,
                                   std::to_string(count)};
  if (!crash_at.empty()) {
    args.push_back(crash_at);
    args.push_back(std::to_string(crash_call));
  }
  const pid_t pid = fork();
  if (pid == 0) {
    const int null_fd = ::open("/dev/null", O_WRONLY);
    if (null_fd >= 0) dup2(null_fd, STDOUT_FILENO);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    execve(args[0].c_str(), argv.data(), envp.data());
    _exit(127);
  }
  return pid;
}

TEST(JournalCrashTest, KilledCallersLoseNoIntentAndDuplicateNoOrder) {
  TempDir dir;
  const std::string db = dir.File("orders.db");
  const std::string journal_path = dir.File("intents.db");
  ServiceProcess service({"--db", db, "--port", "0", "--processing-delay", "3ms", "--fast-sync"});
  ASSERT_GT(service.port(), 0);
  const std::string base = "http://127.0.0.1:" + std::to_string(service.port());
  const auto started = SteadyClock::now();

  // prefix -> how many keys its run may have recorded
  std::map<std::string, int> runs;
  int hook_kills = 0;
  int random_kills = 0;

  // Deterministic kill points: each hook at the 1st, 2nd and 3rd call of a
  // run (so earlier calls of the run finished normally).
  const char* const kPoints[] = {"before_send", "after_send", "after_answer"};
  for (int i = 0; i < 150; ++i) {
    const std::string point = kPoints[i % 3];
    const int call = 1 + (i / 3) % 3;
    const std::string prefix = "hook" + std::to_string(i);
    runs[prefix] = call;
    const pid_t pid = SpawnClient(journal_path, base, prefix, call, point, call);
    ASSERT_GT(pid, 0);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(KilledBySigkill(status))
        << point << " at call " << call << ": the hook did not fire (status " << status << ")";
    ++hook_kills;
  }

  // Random kill points: SIGKILL after a seeded delay, wherever the child is
  // (opening the journal, recording, on the wire, writing the outcome).
  std::mt19937 rng(20261201);
  std::uniform_int_distribution<int> delay_us(1000, 60000);
  for (int i = 0; random_kills < 100 && i < 300; ++i) {
    const std::string prefix = "rand" + std::to_string(i);
    constexpr int kCalls = 30;
    runs[prefix] = kCalls;
    const pid_t pid = SpawnClient(journal_path, base, prefix, kCalls);
    ASSERT_GT(pid, 0);
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us(rng)));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    if (KilledBySigkill(status)) ++random_kills;  // else it finished first
  }
  const int kill_points = hook_kills + random_kills;
  EXPECT_GE(kill_points, 200);

  // Reconcile until nothing is unfinished: the killed children's claims
  // expire at their deadlines (1.5 s) plus the grace (0.2 s).
  SqliteJournalOptions journal_options;
  journal_options.path = journal_path;
  std::shared_ptr<IntentJournal> journal = OpenSqliteJournal(journal_options).value();
  ClientOptions client_options;
  client_options.transport = MakeCurlTransport({}).value();
  client_options.journal = journal;
  client_options.status_query_budget = MakeUnlimitedBudget();
  std::unique_ptr<Client> client = Client::Create(std::move(client_options)).value();
  ReconcilerOptions reconcile;
  reconcile.older_than = std::chrono::milliseconds(0);
  reconcile.resolve.fence = true;
  reconcile.resolve.timeout = std::chrono::seconds(5);
  reconcile.max_intents = 100000;
  int resolved_by_reconciler = 0;
  reconcile.on_resolved = [&](const Intent&, const CallResult&) { ++resolved_by_reconciler; };
  Reconciler reconciler(client.get(), reconcile);
  const auto give_up = SteadyClock::now() + std::chrono::seconds(20);
  std::size_t unfinished = 0;
  for (;;) {
    absl::StatusOr<ReconcileReport> report = reconciler.RunOnce();
    ASSERT_TRUE(report.ok()) << report.status();
    ASSERT_TRUE(report->journal_status.ok()) << report->journal_status;
    UnfinishedFilter all;
    all.limit = 0;
    unfinished = journal->ListUnfinished(all).value().size();
    if (unfinished == 0 || SteadyClock::now() > give_up) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(unfinished, 0u) << "intents still unresolved";

  // Every intent against the database.
  const std::map<std::string, int> orders = OrdersByKey(db);
  int intents = 0, succeeded = 0, failed = 0, duplicates = 0, lost = 0;
  std::map<std::string, int> accounted;
  for (const auto& [prefix, count] : runs) {
    for (int i = 0; i < count; ++i) {
      const std::string key = prefix + "-" + std::to_string(i);
      const auto it = orders.find(key);
      const int n = it == orders.end() ? 0 : it->second;
      if (n > 1) ++duplicates;
      absl::StatusOr<Intent> intent = journal->Get(key);
      if (!intent.ok()) {
        // Never recorded, so never sent: no order may exist.
        ASSERT_EQ(intent.status().code(), absl::StatusCode::kNotFound) << intent.status();
        if (n != 0) ++lost;
        EXPECT_EQ(n, 0) << key << ": an order without its intent";
        continue;
      }
      ++intents;
      accounted[key] = n;
      if (intent->state == IntentState::kSucceeded) {
        ++succeeded;
        EXPECT_EQ(n, 1) << key << " SUCCEEDED in the journal";
      } else if (intent->state == IntentState::kFailed) {
        ++failed;
        EXPECT_EQ(n, 0) << key << " FAILED in the journal";
        // "No effect" only from a definite or fenced answer.
        EXPECT_TRUE(intent->summary.stop_reason == "fenced" ||
                    intent->summary.stop_reason == "permanent_error")
            << key << ": " << intent->summary.stop_reason;
      } else {
        ++lost;
        ADD_FAILURE() << key << " left " << IntentStateName(intent->state);
      }
    }
  }
  for (const auto& [key, n] : orders) {
    if (accounted.count(key) == 0) {
      ++lost;
      ADD_FAILURE() << "order " << key << " has no journaled intent";
    }
  }
  StoreCounts counts = ReadStoreCounts(db).value();
  EXPECT_EQ(counts.duplicate_orders, 0);
  EXPECT_EQ(counts.inconsistencies, 0);
  EXPECT_EQ(counts.orders, succeeded);
  EXPECT_EQ(duplicates, 0);
  EXPECT_EQ(lost, 0);
  const auto seconds =
      std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - started).count() /
      1000.0;
  std::printf(
      "journal_crash: kill_points=%d (hooks=%d random=%d) intents=%d succeeded=%d failed=%d "
      "resolved_by_reconciler=%d duplicates=%d lost=%d seconds=%.1f\n",
      kill_points, hook_kills, random_kills, intents, succeeded, failed, resolved_by_reconciler,
      duplicates, lost, seconds);
}

}  // namespace
}  // namespace example
}  // namespace saferetry

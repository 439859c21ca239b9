// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// A fleet's intents on one PostgreSQL journal, under kill -9. Several client
// processes (journal_crash_client) at once make keyed order calls through
// one PostgreSQL journal (a schema of its own) against the example orders
// service behind the fault proxy (loopback only). Clients are killed with
// SIGKILL at random moments (seeded) and at the call setup's crash points,
// and whatever each kept locally (its working directory) is deleted, as a
// pod's disk goes with the pod. Midway, the database is restarted
// (immediate shutdown) while clients are running: a private cluster of this
// test (tests/server/pg_cluster.sh on a port of its own), so the `postgres`
// fixture's cluster that other tests share is never disturbed. Then two
// `saferetry reconcile` processes at once settle everything, and the oracle
// is taken from the orders database: at most one order per key; every
// journaled intent resolved, SUCCEEDED exactly when its order exists; no
// intent resolved twice; no order for a key that was never journaled.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "orders_service/fault_proxy.h"
#include "orders_service/orders_store.h"
#include "orders_service/tests/crash_test_util.h"
#include "orders_service/tests/service_test_util.h"
#include "saferetry/journal.h"
#include "saferetry/postgres_journal.h"
#include "saferetry/server/postgres_store.h"
#include "tests/server/pg_dsn.h"

extern char** environ;

namespace saferetry {
namespace example {
namespace {

using ::saferetry::example::testkit::KilledBySigkill;
using ::saferetry::example::testkit::OrdersByKey;
using ::saferetry::example::testkit::TempDir;
using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Runs `command` with /bin/sh; its stdout, and whether it exited 0.
struct ShellResult {
  bool ok = false;
  std::string out;
};

ShellResult Shell(const std::string& command) {
  ShellResult r;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return r;
  char buf[512];
  std::size_t n = 0;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  while (!r.out.empty() && (r.out.back() == '\n' || r.out.back() == '\r')) r.out.pop_back();
  return r;
}

std::string Quote(const std::string& s) { return "'" + s + "'"; }

// The Debian server binaries pg_cluster.sh uses.
constexpr char kBindir[] =
    "bindir=${SAFERETRY_PG_BINDIR:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | "
    "tail -1)}; ";

bool ServerBinariesInstalled() {
  return Shell(std::string(kBindir) + "test -x \"$bindir/initdb\" -a -x \"$bindir/pg_ctl\"").ok;
}

bool PortFree(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool free = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return free;
}

// A throwaway cluster of this test alone, so that restarting it disturbs no
// other test; stopped and removed on destruction.
class PrivateCluster {
 public:
  // The cluster, or null and `*error` says why.
  static std::unique_ptr<PrivateCluster> Start(std::string* error) {
    char dir_template[] = "/tmp/saferetry-pg-fleet.XXXXXX";
    if (mkdtemp(dir_template) == nullptr) {
      *error = "mkdtemp failed";
      return nullptr;
    }
    std::unique_ptr<PrivateCluster> cluster(new PrivateCluster(dir_template));
    // A port of its own, beside the fixture's range (25432-25491) and below
    // Linux's ephemeral ports (32768-60999), so that no client socket of the
    // run can take it while the cluster restarts.
    std::mt19937 rng(static_cast<unsigned>(getpid()));
    for (int i = 0; i < 100 && cluster->dsn_.empty(); ++i) {
      const int port = 25500 + static_cast<int>(rng() % 100);
      if (!PortFree(port)) continue;
      ShellResult r = Shell(std::string(PG_CLUSTER_SCRIPT) + " start " + Quote(cluster->dir_) +
                            " " + std::to_string(port) + " 2>" + Quote(cluster->dir_ + ".err"));
      if (r.ok && !r.out.empty()) {
        cluster->dsn_ = r.out;
        break;
      }
      std::ifstream err(cluster->dir_ + ".err");
      std::stringstream text;
      text << err.rdbuf();
      *error = "pg_cluster.sh start failed on port " + std::to_string(port) + ": " + text.str();
      Shell(std::string(PG_CLUSTER_SCRIPT) + " stop " + Quote(cluster->dir_));
      if (text.str().find("already in use") == std::string::npos) return nullptr;
    }
    if (cluster->dsn_.empty()) return nullptr;
    return cluster;
  }
  ~PrivateCluster() {
    Shell(std::string(PG_CLUSTER_SCRIPT) + " stop " + Quote(dir_) + " >/dev/null 2>&1");
    std::remove((dir_ + ".err").c_str());
  }
  const std::string& dsn() const { return dsn_; }

  // Stops the server the way a crash does (immediate: no checkpoint, every
  // connection cut) and starts it again with the same options.
  absl::Status Restart() {
    const std::string pg_ctl = "\"$bindir/pg_ctl\" -D " + Quote(dir_ + "/data") + " -l " +
                               Quote(dir_ + "/server.log") +
                               " -m immediate -w -t 30 restart >/dev/null 2>&1";
    ShellResult r = Shell(std::string(kBindir) + "if [ \"$(id -u)\" = 0 ]; then runuser -u " +
                          "saferetry-ci -- " + pg_ctl + "; else " + pg_ctl + "; fi");
    return r.ok ? absl::OkStatus() : absl::InternalError("pg_ctl restart failed in " + dir_);
  }

 private:
  explicit PrivateCluster(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
  std::string dsn_;
};

absl::Status PgAdmin(const std::string& dsn, const std::string& sql) {
  server::PostgresOptions pg;
  pg.conninfo = dsn;
  pg.max_connections = 1;
  auto db = server::OpenPostgresDatabase(pg);
  if (!db.ok()) return db.status();
  return (*db)->RunInTransaction(server::TransactionMode::kWrite,
                                 [&](server::Transaction& t) { return t.Execute(sql).status(); });
}

// Starts `args` with the environment minus proxies (everything is on
// loopback), in `cwd`, its stdout to `out`.
pid_t Spawn(const std::vector<std::string>& args, const std::string& cwd, const std::string& out) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string v(*e);
    std::string name = v.substr(0, v.find('='));
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (name.find("proxy") != std::string::npos) continue;
    env.push_back(std::move(v));
  }
  const pid_t pid = fork();
  if (pid == 0) {
    if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(126);
    const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) dup2(fd, STDOUT_FILENO);
    const int null_fd = ::open("/dev/null", O_WRONLY);
    if (null_fd >= 0) dup2(null_fd, STDERR_FILENO);
    std::vector<std::string> copy = args;
    std::vector<char*> argv;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    execve(copy[0].c_str(), argv.data(), envp.data());
    _exit(127);
  }
  return pid;
}

// What the oracle looks at.
struct Observed {
  // Every key a client may have used.
  std::vector<std::string> keys;
  // Orders per key, from the orders database.
  std::map<std::string, int> orders;
  // The journal's final state of every key it holds.
  std::map<std::string, IntentState> intents;
  // Outcomes the reconcilers resolved ("SUCCEEDED", "FAILED") by a status
  // query (an HTTP status in the report), per key.
  std::map<std::string, std::vector<std::string>> reconciled;
  // Outcomes reported without a query: the intent was found resolved already
  // (by the other reconciler) once claimed.
  std::map<std::string, std::vector<std::string>> found_resolved;
};

// Everything wrong with `o`, one line each (empty: the oracle holds).
std::vector<std::string> OracleViolations(const Observed& o) {
  std::vector<std::string> v;
  for (const auto& [key, n] : o.orders) {
    if (n > 1) v.push_back(key + ": " + std::to_string(n) + " orders");
    if (o.intents.count(key) == 0) v.push_back(key + ": an order without its intent");
  }
  for (const std::string& key : o.keys) {
    const auto order = o.orders.find(key);
    const int n = order == o.orders.end() ? 0 : order->second;
    const auto intent = o.intents.find(key);
    if (intent == o.intents.end()) continue;  // never recorded: checked above
    if (intent->second == IntentState::kSucceeded) {
      if (n != 1) v.push_back(key + ": SUCCEEDED with " + std::to_string(n) + " orders");
    } else if (intent->second == IntentState::kFailed) {
      if (n != 0) v.push_back(key + ": FAILED with " + std::to_string(n) + " orders");
    } else {
      v.push_back(key + ": left " + std::string(IntentStateName(intent->second)));
    }
  }
  for (const auto& [key, outcomes] : o.reconciled) {
    if (outcomes.size() > 1) {
      v.push_back(key + ": resolved " + std::to_string(outcomes.size()) + " times");
    }
    const auto intent = o.intents.find(key);
    const std::string state =
        intent == o.intents.end() ? "absent" : std::string(IntentStateName(intent->second));
    for (const std::string& outcome : outcomes) {
      if (outcome != state) v.push_back(key + ": reconciled " + outcome + ", journal " + state);
    }
  }
  for (const auto& [key, outcomes] : o.found_resolved) {
    const auto intent = o.intents.find(key);
    const std::string state =
        intent == o.intents.end() ? "absent" : std::string(IntentStateName(intent->second));
    for (const std::string& outcome : outcomes) {
      if (outcome != state) v.push_back(key + ": reported " + outcome + ", journal " + state);
    }
  }
  return v;
}

// The oracle catches what it is meant to catch.
TEST(JournalFleetCrashOracleTest, CatchesDuplicatesOrphansAndDoubleResolution) {
  Observed good;
  good.keys = {"a", "b", "c"};
  good.orders = {{"a", 1}};
  good.intents = {{"a", IntentState::kSucceeded}, {"b", IntentState::kFailed}};
  good.reconciled = {{"b", {"FAILED"}}};
  EXPECT_TRUE(OracleViolations(good).empty());

  Observed duplicate = good;
  duplicate.orders["a"] = 2;
  EXPECT_EQ(OracleViolations(duplicate),
            (std::vector<std::string>{"a: 2 orders", "a: SUCCEEDED with 2 orders"}));
  Observed orphan = good;
  orphan.orders["c"] = 1;
  EXPECT_EQ(OracleViolations(orphan), std::vector<std::string>{"c: an order without its intent"});
  Observed twice = good;
  twice.reconciled["b"].push_back("FAILED");
  EXPECT_EQ(OracleViolations(twice), std::vector<std::string>{"b: resolved 2 times"});
  Observed seen = good;
  seen.found_resolved["b"].push_back("FAILED");
  EXPECT_TRUE(OracleViolations(seen).empty());
  seen.found_resolved["a"].push_back("FAILED");
  EXPECT_EQ(OracleViolations(seen),
            std::vector<std::string>{"a: reported FAILED, journal SUCCEEDED"});
  Observed disagree = good;
  disagree.intents["a"] = IntentState::kFailed;
  EXPECT_EQ(OracleViolations(disagree), std::vector<std::string>{"a: FAILED with 1 orders"});
  Observed open = good;
  open.intents["b"] = IntentState::kUnknown;
  EXPECT_EQ(OracleViolations(open),
            (std::vector<std::string>{"b: left UNKNOWN", "b: reconciled FAILED, journal UNKNOWN"}));
}

// One client process.
struct ClientRun {
  pid_t pid = -1;
  std::string prefix;
  int count = 0;
  std::string point;  // a crash point, or "" for a random kill
  SteadyClock::time_point kill_at;
  std::string dir;  // what it keeps locally, deleted once it is dead
};

TEST(JournalFleetCrashTest, KilledClientsOfOneJournalAcrossARestartLoseNoIntent) {
  const std::string fixture_dsn = pg_test::Dsn();
  if (fixture_dsn.empty()) {
    if (pg_test::Required()) FAIL() << "SAFERETRY_REQUIRE_POSTGRES=1 but no database";
    GTEST_SKIP() << pg_test::SkipReason();
  }
  const auto started = SteadyClock::now();
  // The database to restart is a private cluster; without the server
  // binaries (a database given by SAFERETRY_PG_DSN only) the run goes on
  // the given database, without the restart.
  std::unique_ptr<PrivateCluster> cluster;
  std::string dsn = fixture_dsn;
  if (ServerBinariesInstalled()) {
    std::string error;
    cluster = PrivateCluster::Start(&error);
    ASSERT_NE(cluster, nullptr) << error;
    dsn = cluster->dsn();
  } else {
    std::printf("journal_fleet_crash: no PostgreSQL server binaries, no restart\n");
  }
  const std::string schema = "fleet_crash_" + std::to_string(getpid());
  ASSERT_TRUE(PgAdmin(dsn, "CREATE SCHEMA " + schema).ok());
  const std::string uri = pg_test::PostgresUri(dsn);

  TempDir dir;
  const std::string db = dir.File("orders.db");
  int service_port = 0;
  const pid_t service = testkit::SpawnServiceProcess(
      ORDERS_SERVICE_BIN,
      {"--db", db, "--port", "0", "--processing-delay", "3ms", "--fast-sync", "--threads", "8"},
      &service_port);
  ASSERT_GT(service_port, 0);
  struct Reaper {
    pid_t pid;
    ~Reaper() {
      kill(pid, SIGKILL);
      int status = 0;
      waitpid(pid, &status, 0);
    }
  } reap_service{service};
  ProxyOptions proxy_options;
  proxy_options.upstream_port = service_port;
  proxy_options.faults.reset_before_commit = 0.05;
  proxy_options.faults.unavailable = 0.05;
  proxy_options.faults.drop_after_commit = 0.05;
  proxy_options.faults.hang_after_commit = 0.03;
  proxy_options.faults.hang_limit = milliseconds(2000);
  proxy_options.faults.seed = 20261225;
  auto proxy = FaultProxy::Start(proxy_options);
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  const std::string base = "http://127.0.0.1:" + std::to_string((*proxy)->port());

  // The fleet: kSlots clients at once, kRuns in all; a quarter die at a
  // crash point, the rest by SIGKILL after a seeded delay (or finish first).
  constexpr int kSlots = 4;
  constexpr int kRuns = 48;
  constexpr int kCalls = 12;
  const char* const kPoints[] = {"before_send", "after_send", "after_answer"};
  std::mt19937 rng(20261225);
  std::uniform_int_distribution<int> delay_ms(40, 400);
  std::map<std::string, int> runs;  // prefix -> calls it may have made
  std::vector<ClientRun> running;
  int spawned = 0, hook_runs = 0, hook_kills = 0, random_kills = 0, finished = 0;
  int no_journal = 0;  // exit 3: the journal could not be opened (the restart)
  std::thread restart;
  absl::Status restart_status;
  bool restarted = false;
  // While the database restarts, the clients running meet it and no new
  // one starts: a client started then cannot open its journal and exits at
  // once, and on a host where the restart is slow such clients would use up
  // the runs meant for kills.
  std::atomic<bool> restarting{false};
  auto reap = [&](ClientRun& c, int status) {
    if (KilledBySigkill(status)) {
      ++(c.point.empty() ? random_kills : hook_kills);
    } else if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      ++finished;
    } else if (WIFEXITED(status) && WEXITSTATUS(status) == 3) {
      ++no_journal;
    } else {
      ADD_FAILURE() << c.prefix << ": client status " << status;
    }
    std::filesystem::remove_all(c.dir);  // the pod's disk goes with the pod
  };
  while (spawned < kRuns || !running.empty()) {
    while (spawned < kRuns && static_cast<int>(running.size()) < kSlots && !restarting.load()) {
      ClientRun c;
      c.prefix = "fleet" + std::to_string(spawned);
      c.dir = dir.File(c.prefix);
      std::filesystem::create_directory(c.dir);
      std::vector<std::string> args = {
          JOURNAL_CRASH_CLIENT_BIN, "--journal-schema", schema, uri, base, c.prefix};
      if (spawned % 4 == 3) {
        c.point = kPoints[hook_runs % 3];
        const int call = 1 + (hook_runs / 3) % 3;
        c.count = call;
        args.push_back(std::to_string(call));
        args.push_back(c.point);
        args.push_back(std::to_string(call));
        c.kill_at = SteadyClock::now() + std::chrono::seconds(15);  // a hook that never fires
        ++hook_runs;
      } else {
        c.count = kCalls;
        args.push_back(std::to_string(kCalls));
        c.kill_at = SteadyClock::now() + milliseconds(delay_ms(rng));
      }
      runs[c.prefix] = c.count;
      c.pid = Spawn(args, c.dir, c.dir + "/outcomes.txt");
      ASSERT_GT(c.pid, 0);
      running.push_back(std::move(c));
      ++spawned;
    }
    // Midway, with clients running, the database goes down and comes back.
    if (cluster != nullptr && !restarted && spawned >= kRuns / 2) {
      restarted = true;
      restarting.store(true);
      restart = std::thread([&] {
        restart_status = cluster->Restart();
        restarting.store(false);
      });
    }
    std::this_thread::sleep_for(milliseconds(2));
    for (auto it = running.begin(); it != running.end();) {
      int status = 0;
      if (SteadyClock::now() >= it->kill_at) kill(it->pid, SIGKILL);
      if (waitpid(it->pid, &status, WNOHANG) == it->pid) {
        reap(*it, status);
        it = running.erase(it);
      } else {
        ++it;
      }
    }
  }
  if (restart.joinable()) restart.join();
  EXPECT_TRUE(restart_status.ok()) << restart_status;
  const auto clients_done = SteadyClock::now();

  // Two reconcilers in other processes, at once, until nothing is unfinished.
  PostgresJournalOptions journal_options;
  journal_options.dsn = uri;
  journal_options.schema = schema;
  journal_options.max_connections = 1;
  absl::StatusOr<std::shared_ptr<IntentJournal>> journal = OpenPostgresJournal(journal_options);
  ASSERT_TRUE(journal.ok()) << journal.status();
  Observed observed;
  std::map<std::string, std::vector<std::string>> reported_by;  // key -> "round/reconciler"
  int reconcile_rounds = 0;
  std::size_t unfinished = 0;
  for (; reconcile_rounds < 4; ++reconcile_rounds) {
    std::vector<std::pair<pid_t, std::string>> reconcilers;
    for (int r = 0; r < 2; ++r) {
      const std::string out =
          dir.File("reconcile-" + std::to_string(reconcile_rounds) + "-" + std::to_string(r));
      reconcilers.emplace_back(
          Spawn({SAFERETRY_CLI_BIN, "reconcile", "--journal", uri, "--journal-schema", schema,
                 "--older-than", "0s", "--fence", "--wait-for-claims", "3s", "--timeout", "3s",
                 "--max-intents", "100000", "--proxy", ""},
                "", out),
          out);
    }
    for (std::size_t r = 0; r < reconcilers.size(); ++r) {
      const auto& [pid, out] = reconcilers[r];
      int status = 0;
      waitpid(pid, &status, 0);
      // 0: all tried resolved; 2: some still UNKNOWN (tried again next round).
      EXPECT_TRUE(WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 2))
          << "saferetry reconcile: status " << status;
      std::ifstream in(out);
      for (std::string line; std::getline(in, line);) {
        nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
        ASSERT_FALSE(j.is_discarded()) << line;
        if (!j.contains("outcome") || !j["idempotency_key"].is_string()) continue;
        const std::string outcome = j["outcome"].get<std::string>();
        if (outcome == "SUCCEEDED" || outcome == "FAILED") {
          const std::string key = j["idempotency_key"].get<std::string>();
          const bool queried = j.contains("http_status") && !j["http_status"].is_null();
          (queried ? observed.reconciled : observed.found_resolved)[key].push_back(outcome);
          reported_by[key].push_back(std::to_string(reconcile_rounds) + "/" + std::to_string(r) +
                                     " " + line);
        }
      }
    }
    UnfinishedFilter all;
    all.limit = 0;
    absl::StatusOr<std::vector<Intent>> left = (*journal)->ListUnfinished(all);
    ASSERT_TRUE(left.ok()) << left.status();
    unfinished = left->size();
    if (unfinished == 0) {
      ++reconcile_rounds;
      break;
    }
  }
  EXPECT_EQ(unfinished, 0u) << "intents still unresolved";

  // The oracle, from the orders database and the journal.
  observed.orders = OrdersByKey(db);
  int succeeded = 0, failed = 0;
  for (const auto& [prefix, count] : runs) {
    for (int i = 0; i < count; ++i) observed.keys.push_back(prefix + "-" + std::to_string(i));
  }
  std::vector<std::string> lookups = observed.keys;
  for (const auto& [key, n] : observed.orders) lookups.push_back(key);
  for (const std::string& key : lookups) {
    absl::StatusOr<Intent> intent = (*journal)->Get(key);
    if (!intent.ok()) {
      ASSERT_EQ(intent.status().code(), absl::StatusCode::kNotFound) << intent.status();
      continue;
    }
    if (observed.intents.emplace(key, intent->state).second) {
      succeeded += intent->state == IntentState::kSucceeded;
      failed += intent->state == IntentState::kFailed;
    }
  }
  const std::vector<std::string> violations = OracleViolations(observed);
  for (const std::string& v : violations) {
    const std::string key = v.substr(0, v.find(':'));
    std::string reports;
    for (const std::string& by : reported_by[key]) reports += "\n  reconcile " + by;
    ADD_FAILURE() << v << reports;
  }
  EXPECT_TRUE(violations.empty());
  StoreCounts counts = ReadStoreCounts(db).value();
  EXPECT_EQ(counts.duplicate_orders, 0);
  EXPECT_EQ(counts.inconsistencies, 0);
  EXPECT_EQ(counts.orders, succeeded);
  // The run did what it is for: kills on both paths, a restart, work left
  // for the reconcilers, and orders made.
  EXPECT_EQ(hook_runs, kRuns / 4);
  EXPECT_GE(hook_kills + random_kills, kRuns / 2);
  EXPECT_GE(random_kills, kRuns / 4);
  EXPECT_EQ(restarted, cluster != nullptr);
  EXPECT_FALSE(observed.reconciled.empty());
  EXPECT_GT(succeeded, 0);

  std::size_t resolved_by_reconcilers = 0;
  for (const auto& [key, outcomes] : observed.reconciled)
    resolved_by_reconcilers += outcomes.size();
  const auto secs = [](SteadyClock::duration d) {
    return std::chrono::duration_cast<milliseconds>(d).count() / 1000.0;
  };
  ProxyCounters proxied = (*proxy)->counters();
  std::printf(
      "journal_fleet_crash: clients=%d (at once %d) kills=%d (random=%d crash_points=%d of %d) "
      "finished=%d journal_unavailable=%d restart=%s intents=%zu succeeded=%d failed=%d "
      "orders=%lld resolved_by_reconcilers=%zu found_resolved=%zu reconcile_rounds=%d "
      "faults(reset=%lld 503=%lld "
      "drop=%lld hang=%lld) clients_s=%.1f total_s=%.1f\n",
      spawned, kSlots, hook_kills + random_kills, random_kills, hook_kills, hook_runs, finished,
      no_journal, restarted ? "yes" : "no", observed.intents.size(), succeeded, failed,
      static_cast<long long>(counts.orders), resolved_by_reconcilers,
      observed.found_resolved.size(), reconcile_rounds,
      static_cast<long long>(proxied.reset_before_commit),
      static_cast<long long>(proxied.unavailable),
      static_cast<long long>(proxied.drop_after_commit),
      static_cast<long long>(proxied.hang_after_commit), secs(clients_done - started),
      secs(SteadyClock::now() - started));
  if (cluster == nullptr) (void)PgAdmin(dsn, "DROP SCHEMA " + schema + " CASCADE");
}

}  // namespace
}  // namespace example
}  // namespace saferetry

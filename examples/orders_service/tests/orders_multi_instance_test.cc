// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Several instances of the orders service on one PostgreSQL database: three
// processes of the real service executable, a round-robin fault proxy in
// front that loses answers after the order is committed (dropped or held
// until the client gives up), and 50 clients running saferetry::Client over
// libcurl at once. Some clients all send the same key and body, the others a
// key each per call. Afterwards the database is the judge: exactly one order
// per key, every SUCCEEDED call has its key's order (and was answered with
// that order), no FAILED call has one.
//
// Needs SAFERETRY_PG_DSN (a key=value libpq connection string); the test runs
// in a schema of its own, dropped afterwards. Without the variable it is
// skipped (ctest reports it as skipped), unless SAFERETRY_REQUIRE_POSTGRES=1
// (CI), which makes a missing database a failure.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "orders_service/fake_payment_channel.h"
#include "orders_service/fault_proxy.h"
#include "orders_service/orders_store.h"
#include "orders_service/tests/service_test_util.h"
#include "saferetry/client.h"
#include "saferetry/curl_transport.h"
#include "saferetry/server/postgres_store.h"
#include "tests/server/pg_dsn.h"

namespace saferetry {
namespace example {
namespace {

using ::saferetry::example::testkit::ClientFor;
using Clock = std::chrono::steady_clock;

constexpr int kInstances = 3;
constexpr int kSameKeyClients = 20;
constexpr int kSameKeyCallsEach = 3;
constexpr int kOwnKeyClients = 30;
constexpr int kOwnKeyCallsEach = 4;
constexpr char kTenant[] = "multi";

using ::saferetry::pg_test::Dsn;
using ::saferetry::pg_test::Required;

absl::Status Admin(const std::string& sql) {
  server::PostgresOptions pg;
  pg.conninfo = Dsn();
  pg.max_connections = 1;
  auto db = server::OpenPostgresDatabase(pg);
  if (!db.ok()) return db.status();
  return (*db)->RunInTransaction(server::TransactionMode::kWrite,
                                 [&](server::Transaction& t) { return t.Execute(sql).status(); });
}

// A schema of its own for one run, dropped on destruction.
class Schema {
 public:
  Schema()
      : name_(absl::StrCat(
            "multi_instance_", getpid(), "_",
            std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
                .count())) {
    status_ = Admin(absl::StrCat("CREATE SCHEMA ", name_));
  }
  ~Schema() {
    if (status_.ok()) (void)Admin(absl::StrCat("DROP SCHEMA ", name_, " CASCADE"));
  }
  const absl::Status& status() const { return status_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  absl::Status status_;
};

// The service executable as a child process: SIGTERM on destruction (so it
// closes its database connections), SIGKILL if it has not exited in 5 s.
class ServiceProcess {
 public:
  explicit ServiceProcess(std::vector<std::string> args) {
    pid_ = ::saferetry::example::testkit::SpawnServiceProcess(ORDERS_SERVICE_BIN, std::move(args),
                                                              &port_);
  }
  ~ServiceProcess() { Stop(); }
  ServiceProcess(const ServiceProcess&) = delete;
  ServiceProcess& operator=(const ServiceProcess&) = delete;

  int port() const { return port_; }
  /// kill -9: no cleanup, connections left to the database to notice.
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  void Stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    int status = 0;
    for (int i = 0; i < 500; ++i) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

// Lets every client thread start its first call at the same moment.
class StartLine {
 public:
  explicit StartLine(int count) : waiting_(count) {}
  void ArriveAndWait() {
    std::unique_lock<std::mutex> lock(mu_);
    if (--waiting_ == 0) cv_.notify_all();
    cv_.wait_for(lock, std::chrono::seconds(10), [&] { return waiting_ <= 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int waiting_;
};

struct CallRecord {
  std::string key;
  Outcome outcome = Outcome::kFailed;
  StopReason stop_reason = StopReason::kInvalidArgument;
  int attempts = 0;
  int status_queries = 0;
  bool resolved_by_status_query = false;
  int final_status = 0;
  /// "order_id" of the final answer (a response, a replay or a status answer).
  std::string order_id;
};

std::string Body(const std::string& key) {
  return absl::StrCat(R"({"sku":"sku-42","quantity":1,"client_reference":")", key, R"("})");
}

CallRecord Call(Client& client, const CallOptions& base, const std::string& url,
                const std::string& key) {
  Request request;
  request.method = "POST";
  request.url = url;
  request.headers = {{"Content-Type", "application/json"}, {"X-Tenant-Id", kTenant}};
  request.body = Body(key);
  CallOptions call = base;
  call.idempotency_key = key;
  CallResult r = client.Execute(request, call);
  CallRecord out;
  out.key = key;
  out.outcome = r.outcome;
  out.stop_reason = r.stop_reason;
  out.attempts = r.attempts;
  out.status_queries = r.status_queries;
  out.resolved_by_status_query = r.resolved_by_status_query;
  if (r.last_response.has_value()) {
    out.final_status = r.last_response->status_code;
    nlohmann::json j =
        nlohmann::json::parse(r.last_response->body, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("order_id") && j["order_id"].is_string()) {
      out.order_id = j["order_id"].get<std::string>();
    }
  }
  return out;
}

TEST(OrdersMultiInstanceTest, ThreeProcessesOnePostgresDatabaseOneOrderPerKey) {
  if (Dsn().empty()) {
    if (Required()) FAIL() << "SAFERETRY_REQUIRE_POSTGRES=1 but SAFERETRY_PG_DSN is not set";
    GTEST_SKIP() << ::saferetry::pg_test::SkipReason();
  }
  const auto started = Clock::now();
  Schema schema;
  ASSERT_TRUE(schema.status().ok()) << schema.status();

  // Three processes, one database. 30 ms of work per order widens the window
  // in which same-key requests on different instances overlap.
  std::vector<std::unique_ptr<ServiceProcess>> instances;
  std::vector<int> ports;
  for (int i = 0; i < kInstances; ++i) {
    instances.push_back(std::make_unique<ServiceProcess>(std::vector<std::string>{
        "--pg", Dsn(), "--pg-schema", schema.name(), "--port", "0", "--processing-delay", "30ms",
        "--reap-interval", "0s", "--threads", "24"}));
    ASSERT_GT(instances.back()->port(), 0) << "instance " << i << " did not start";
    ports.push_back(instances.back()->port());
  }

  // Answers are lost only after the service committed; status queries (GET)
  // pass untouched. The script makes sure both faults happen early.
  ProxyOptions proxy_options;
  proxy_options.upstream_ports = ports;
  proxy_options.max_connections = 256;
  proxy_options.faults.drop_after_commit = 0.2;
  proxy_options.faults.hang_after_commit = 0.05;
  proxy_options.faults.hang_limit = std::chrono::seconds(5);
  proxy_options.faults.seed = 20260515;
  proxy_options.faults.script = {FaultKind::kDropAfterCommit, FaultKind::kHangAfterCommit,
                                 FaultKind::kDropAfterCommit, FaultKind::kNone,
                                 FaultKind::kHangAfterCommit, FaultKind::kDropAfterCommit};
  auto proxy = FaultProxy::Start(proxy_options);
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  const std::string base_url = absl::StrCat("http://127.0.0.1:", (*proxy)->port());

  CallOptions call;
  call.timeout = std::chrono::seconds(20);
  saferetry::RetryPolicyOptions call_policy;
  call_policy.max_attempts = 4;
  call_policy.deadline_options.attempt_cap = std::chrono::seconds(1);
  call_policy.backoff.base = std::chrono::milliseconds(20);
  call_policy.backoff.cap = std::chrono::milliseconds(300);
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  call.status_url = base_url + "/orders/by-key/{key}";

  // One saferetry::Client (and libcurl transport) per client thread.
  constexpr int kClients = kSameKeyClients + kOwnKeyClients;
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kClients; ++i) {
    auto transport = MakeCurlTransport({});
    ASSERT_TRUE(transport.ok()) << transport.status();
    ClientOptions options;
    options.transport = *transport;
    auto client = Client::Create(std::move(options));
    ASSERT_TRUE(client.ok()) << client.status();
    clients.push_back(*std::move(client));
  }

  const std::string shared_key = "shared-order";
  std::vector<std::vector<CallRecord>> records(kClients);
  StartLine start_line(kClients);
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      start_line.ArriveAndWait();
      const bool same = c < kSameKeyClients;
      const int calls = same ? kSameKeyCallsEach : kOwnKeyCallsEach;
      for (int i = 0; i < calls; ++i) {
        const std::string key = same ? shared_key : absl::StrCat("own-", c, "-", i);
        records[c].push_back(Call(*clients[c], call, base_url + "/orders", key));
      }
    });
  }
  for (auto& t : threads) t.join();
  const auto clients_done = Clock::now();

  // What each instance did, asked directly (not through the proxy).
  std::int64_t created = 0, replayed = 0, in_progress = 0, takeovers = 0, stale = 0;
  std::vector<std::int64_t> created_per_instance;
  for (int port : ports) {
    auto http = ClientFor(port);
    auto stats = http->Get("/stats");
    ASSERT_TRUE(stats);
    ASSERT_EQ(stats->status, 200);
    const auto j = nlohmann::json::parse(stats->body);
    const auto& req = j.at("requests");
    created_per_instance.push_back(req.at("created").get<std::int64_t>());
    created += created_per_instance.back();
    replayed += req.at("replayed").get<std::int64_t>();
    in_progress += req.at("in_progress").get<std::int64_t>();
    takeovers += req.at("takeovers").get<std::int64_t>();
    stale += req.at("stale_writes_rejected").get<std::int64_t>();
  }
  (*proxy)->Stop();
  for (auto& instance : instances) instance->Stop();

  // The database is the judge.
  OrdersStoreOptions store_options;
  store_options.postgres_conninfo = Dsn();
  store_options.postgres_schema = schema.name();
  store_options.max_connections = 1;
  auto store = OrdersStore::Open(store_options, nullptr);
  ASSERT_TRUE(store.ok()) << store.status();
  auto rows = (*store)->ListOrders();
  ASSERT_TRUE(rows.ok()) << rows.status();
  auto counts = (*store)->Counts();
  ASSERT_TRUE(counts.ok()) << counts.status();
  std::map<std::string, std::vector<OrderRow>> orders_by_key;
  for (const OrderRow& row : *rows) {
    EXPECT_EQ(row.tenant, kTenant);
    EXPECT_EQ(row.client_reference, row.idempotency_key);
    orders_by_key[row.idempotency_key].push_back(row);
  }

  std::map<std::string, int> calls_by_key;
  int succeeded = 0, failed = 0, unknown = 0, by_query = 0, attempts = 0, queries = 0;
  for (const auto& per_client : records) {
    for (const CallRecord& r : per_client) {
      ++calls_by_key[r.key];
      attempts += r.attempts;
      queries += r.status_queries;
      auto it = orders_by_key.find(r.key);
      const bool has_order = it != orders_by_key.end();
      switch (r.outcome) {
        case Outcome::kSucceeded:
          ++succeeded;
          if (r.resolved_by_status_query) ++by_query;
          ASSERT_TRUE(has_order) << "SUCCEEDED without an order: " << r.key;
          // The answer names the one order of the key, whichever instance
          // created it and whichever answered.
          EXPECT_EQ(r.order_id, absl::StrCat("ord-", it->second.front().id)) << r.key;
          break;
        case Outcome::kFailed:
          ++failed;
          EXPECT_FALSE(has_order) << "FAILED but the order exists: " << r.key << " ("
                                  << StopReasonName(r.stop_reason) << ")";
          break;
        case Outcome::kUnknown:
          ++unknown;  // either way is consistent; counted below
          break;
      }
    }
  }
  int duplicates = 0;
  for (const auto& [key, orders] : orders_by_key) {
    duplicates += static_cast<int>(orders.size()) - 1;
    EXPECT_EQ(orders.size(), 1u) << key;
    EXPECT_EQ(calls_by_key.count(key), 1u) << "an order nobody asked for: " << key;
  }

  const ProxyCounters pc = (*proxy)->counters();
  const auto duration = [](Clock::duration d) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  };
  std::ostringstream summary;
  summary << "clients " << records.size() << ", keys " << calls_by_key.size() << ", calls "
          << (kSameKeyClients * kSameKeyCallsEach + kOwnKeyClients * kOwnKeyCallsEach)
          << ": SUCCEEDED " << succeeded << " (" << by_query << " by status query), FAILED "
          << failed << ", UNKNOWN " << unknown << "; orders " << rows->size() << ", duplicates "
          << duplicates << "; attempts " << attempts << ", status queries " << queries
          << "; proxy dropped " << pc.drop_after_commit << ", held " << pc.hang_after_commit
          << ", sent per instance";
  for (std::int64_t n : pc.sent_per_upstream) summary << " " << n;
  summary << "; created per instance";
  for (std::int64_t n : created_per_instance) summary << " " << n;
  summary << ", replayed " << replayed << ", in progress " << in_progress << "; clients "
          << duration(clients_done - started) << " ms, total " << duration(Clock::now() - started)
          << " ms";
  std::cout << summary.str() << std::endl;
  RecordProperty("summary", summary.str());

  const std::size_t keys = 1 + kOwnKeyClients * kOwnKeyCallsEach;
  EXPECT_EQ(calls_by_key.size(), keys);
  EXPECT_EQ(duplicates, 0);
  EXPECT_EQ(counts->duplicate_orders, 0);
  EXPECT_EQ(counts->inconsistencies, 0);
  EXPECT_EQ(counts->keys_processing, 0);
  // Only answers were lost, never requests, and every loss can be resolved
  // by a status query: every call ends SUCCEEDED with its key's one order.
  EXPECT_EQ(unknown, 0);
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(rows->size(), keys);
  // Each order was created by exactly one execution on one instance; no
  // lease ran out on the way.
  EXPECT_EQ(created, static_cast<std::int64_t>(rows->size()));
  EXPECT_EQ(takeovers, 0);
  EXPECT_EQ(stale, 0);
  // The faults happened, and every instance took its turn (round-robin per
  // request over instances that all accept: counts differ by at most one).
  EXPECT_GT(pc.drop_after_commit, 0);
  EXPECT_GT(pc.hang_after_commit, 0);
  EXPECT_GT(by_query, 0);
  ASSERT_EQ(pc.sent_per_upstream.size(), static_cast<std::size_t>(kInstances));
  const auto [low, high] =
      std::minmax_element(pc.sent_per_upstream.begin(), pc.sent_per_upstream.end());
  EXPECT_LE(*high - *low, 1);
  EXPECT_GT(*low, 0);
  EXPECT_LT(duration(Clock::now() - started), 60000);
}

// An instance is killed mid-step: after the payment channel charged and
// before the record completed, with no client coming back. A second instance
// (its sweeper every 50 ms) and the admin command (in a loop, as from cron)
// sweep the same database at once: each record is recovered exactly once, by
// the channel's request id, so every key has one charge and one order.
TEST(OrdersMultiInstanceTest, AnInstanceKilledMidStepIsSweptOnceByConcurrentSweepers) {
  if (Dsn().empty()) {
    if (Required()) FAIL() << "SAFERETRY_REQUIRE_POSTGRES=1 but SAFERETRY_PG_DSN is not set";
    GTEST_SKIP() << ::saferetry::pg_test::SkipReason();
  }
  constexpr int kKeys = 6;
  Schema schema;
  ASSERT_TRUE(schema.status().ok()) << schema.status();
  FakePaymentChannel channel;
  auto channel_port = channel.Start();
  ASSERT_TRUE(channel_port.ok()) << channel_port.status();
  const std::string pay = std::to_string(*channel_port);
  auto args = [&](std::vector<std::string> more) {
    std::vector<std::string> a = {"--pg",
                                  Dsn(),
                                  "--pg-schema",
                                  schema.name(),
                                  "--port",
                                  "0",
                                  "--lease",
                                  "300ms",
                                  "--payment-channel-port",
                                  pay,
                                  "--payment-timeout",
                                  "10s"};
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  auto victim = std::make_unique<ServiceProcess>(args({}));
  ASSERT_GT(victim->port(), 0);
  channel.LoseNextAnswers(kKeys, std::chrono::seconds(1));  // charged; answers late
  std::vector<std::thread> clients;
  for (int i = 0; i < kKeys; ++i) {
    clients.emplace_back([port = victim->port(), i] {
      auto c = ClientFor(port);
      (void)c->Post("/orders", {{"Idempotency-Key", "mid-step-" + std::to_string(i)}},
                    R"({"sku":"sku-42","quantity":1})", "application/json");
    });
  }
  for (int i = 0; i < 1000 && channel.charges() < kKeys; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(channel.charges(), kKeys);
  victim->Kill();
  for (auto& t : clients) t.join();

  ServiceProcess survivor(args({"--sweep-interval", "50ms"}));
  ASSERT_GT(survivor.port(), 0);
  const std::string admin = absl::StrCat(ORDERS_ADMIN_BIN, " --pg '", Dsn(), "' --pg-schema ",
                                         schema.name(), " --payment-channel-port ", pay, " sweep");
  int admin_completed = 0;
  OrdersStoreOptions store_options;
  store_options.postgres_conninfo = Dsn();
  store_options.postgres_schema = schema.name();
  store_options.max_connections = 1;
  auto store = OrdersStore::Open(store_options, nullptr);
  ASSERT_TRUE(store.ok()) << store.status();
  StoreCounts counts;
  for (int round = 0; round < 100; ++round) {  // bounded: ~10 s
    FILE* p = popen(admin.c_str(), "r");
    ASSERT_NE(p, nullptr);
    char buf[1024];
    std::string out;
    std::size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    ASSERT_EQ(pclose(p), 0) << out;
    admin_completed += nlohmann::json::parse(out).value("completed", 0);
    counts = *(*store)->Counts();
    if (counts.keys_completed == kKeys) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(counts.keys_completed, kKeys);
  EXPECT_EQ(counts.keys_processing, 0);
  EXPECT_EQ(counts.orders, kKeys);
  EXPECT_EQ(counts.inconsistencies, 0);
  EXPECT_EQ(channel.charges(), kKeys);  // never charged twice

  auto c = ClientFor(survivor.port());
  auto stats = nlohmann::json::parse(c->Get("/stats")->body);
  const int service_completed = stats["requests"]["swept_completed"].get<int>();
  EXPECT_EQ(service_completed + admin_completed, kKeys)
      << "service " << service_completed << ", admin " << admin_completed;
  auto replay = c->Post("/orders", {{"Idempotency-Key", "mid-step-0"}},
                        R"({"sku":"sku-42","quantity":1})", "application/json");
  ASSERT_TRUE(replay);
  EXPECT_EQ(replay->status, 201);
  EXPECT_EQ(replay->get_header_value("Idempotent-Replayed"), "true");
  EXPECT_NE(replay->body.find("\"charge_id\":\"ch_"), std::string::npos) << replay->body;
  std::cout << "mid-step recovery: service swept " << service_completed << ", admin swept "
            << admin_completed << ", charges " << channel.charges() << std::endl;
}

}  // namespace
}  // namespace example
}  // namespace saferetry

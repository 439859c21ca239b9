// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Kills the real service executable mid-request with SIGKILL and inspects the
// database: an order and the COMPLETED state of its key are committed by one
// transaction, so no kill can separate them.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "orders_service/fake_payment_channel.h"
#include "orders_service/orders_store.h"
#include "orders_service/tests/service_test_util.h"

namespace saferetry {
namespace example {
namespace {

using ::saferetry::example::testkit::ClientFor;
using ::saferetry::example::testkit::kBody;
using ::saferetry::example::testkit::KeyHeaders;
using ::saferetry::example::testkit::PostOrder;
using ::saferetry::example::testkit::TempDir;

// The service as a child process; SIGKILLed on destruction if still running.
class ServiceProcess {
 public:
  explicit ServiceProcess(std::vector<std::string> args) {
    pid_ = ::saferetry::example::testkit::SpawnServiceProcess(ORDERS_SERVICE_BIN, std::move(args),
                                                              &port_);
  }
  ~ServiceProcess() { Kill(); }
  int port() const { return port_; }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

StoreCounts Counts(const std::string& db) {
  auto counts = ReadStoreCounts(db);
  EXPECT_TRUE(counts.ok()) << counts.status();
  return counts.ok() ? *counts : StoreCounts{};
}

TEST(OrdersCrashTest, KillDuringTheWorkLeavesAProcessingRecordAndNoOrder) {
  TempDir dir;
  const std::string db = dir.File("orders.db");
  std::optional<ServiceProcess> service;
  service.emplace(std::vector<std::string>{"--db", db, "--port", "0", "--processing-delay", "5s",
                                           "--lease", "200ms"});
  ASSERT_GT(service->port(), 0);

  std::thread client([port = service->port()] {
    auto c = ClientFor(port);
    auto r = PostOrder(*c, KeyHeaders("k-crash"), kBody);
    EXPECT_FALSE(r);  // the process dies before answering
  });
  // Bounded wait until the claim is committed, then kill during the work.
  StoreCounts before;
  for (int i = 0; i < 400; ++i) {
    before = Counts(db);
    if (before.keys_processing == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(before.keys_processing, 1);
  service->Kill();
  client.join();

  StoreCounts after = Counts(db);
  EXPECT_EQ(after.orders, 0);
  EXPECT_EQ(after.keys_processing, 1);
  EXPECT_EQ(after.keys_completed, 0);
  EXPECT_EQ(after.inconsistencies, 0);

  // A restarted service lets the same key take over once the lease is out,
  // and creates exactly one order.
  service.emplace(std::vector<std::string>{"--db", db, "--port", "0", "--lease", "200ms"});
  ASSERT_GT(service->port(), 0);
  auto c = ClientFor(service->port());
  int status = 0;
  for (int i = 0; i < 100; ++i) {  // 409 until the 200 ms lease runs out
    auto r = PostOrder(*c, KeyHeaders("k-crash"), kBody);
    ASSERT_TRUE(r);
    status = r->status;
    if (status != 409) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(status, 201);
  auto stats = c->Get("/stats");
  ASSERT_TRUE(stats);
  EXPECT_NE(stats->body.find("\"takeovers\":1"), std::string::npos) << stats->body;
  service->Kill();

  StoreCounts final_counts = Counts(db);
  EXPECT_EQ(final_counts.orders, 1);
  EXPECT_EQ(final_counts.keys_completed, 1);
  EXPECT_EQ(final_counts.keys_processing, 0);
  EXPECT_EQ(final_counts.inconsistencies, 0);
}

std::string RunAdmin(const std::string& args, int* exit_code) {
  std::string out;
  FILE* p = popen((std::string(ORDERS_ADMIN_BIN) + " " + args).c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

// kill -9 after the payment channel charged and before the record completed;
// no client comes back. The sweeper (the admin command, from cron) asks the
// channel by the step's request id: one charge, the order created with it,
// and a later same-key request replays that answer.
TEST(OrdersCrashTest, KillAfterTheChargeIsRecoveredBySweepingByTheChannelsRequestId) {
  FakePaymentChannel channel;
  auto channel_port = channel.Start();
  ASSERT_TRUE(channel_port.ok()) << channel_port.status();
  channel.LoseNextAnswers(1, std::chrono::seconds(1));  // charged; the answer is late
  TempDir dir;
  const std::string db = dir.File("orders.db");
  const std::string pay = std::to_string(*channel_port);
  std::optional<ServiceProcess> service;
  service.emplace(std::vector<std::string>{"--db", db, "--port", "0", "--lease", "200ms",
                                           "--payment-channel-port", pay, "--payment-timeout",
                                           "10s"});
  ASSERT_GT(service->port(), 0);
  std::thread client([port = service->port()] {
    auto c = ClientFor(port);
    EXPECT_FALSE(PostOrder(*c, KeyHeaders("k-paid"), kBody));  // dies before answering
  });
  for (int i = 0; i < 400 && channel.charges() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(channel.charges(), 1);
  service->Kill();
  client.join();
  EXPECT_EQ(Counts(db).orders, 0);
  EXPECT_EQ(Counts(db).keys_processing, 1);

  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the lease runs out
  int code = -1;
  const std::string report =
      RunAdmin("--db '" + db + "' --payment-channel-port " + pay + " sweep", &code);
  ASSERT_EQ(code, 0) << report;
  EXPECT_NE(report.find("\"completed\":1"), std::string::npos) << report;
  StoreCounts counts = Counts(db);
  EXPECT_EQ(counts.orders, 1);
  EXPECT_EQ(counts.keys_completed, 1);
  EXPECT_EQ(counts.inconsistencies, 0);

  service.emplace(
      std::vector<std::string>{"--db", db, "--port", "0", "--payment-channel-port", pay});
  ASSERT_GT(service->port(), 0);
  auto c = ClientFor(service->port());
  auto replay = PostOrder(*c, KeyHeaders("k-paid"), kBody);
  ASSERT_TRUE(replay);
  EXPECT_EQ(replay->status, 201);
  EXPECT_EQ(replay->get_header_value("Idempotent-Replayed"), "true");
  EXPECT_NE(replay->body.find("\"charge_id\":\"ch_1\""), std::string::npos) << replay->body;
  EXPECT_EQ(channel.charges(), 1);
  service->Kill();
}

// Kills at arbitrary points of a stream of requests, including inside the
// completing transaction; the invariant holds after every kill.
TEST(OrdersCrashTest, KillsAtArbitraryPointsNeverSeparateOrderAndRecord) {
  TempDir dir;
  const std::string db = dir.File("orders.db");
  int next_key = 0;
  for (int round = 0; round < 3; ++round) {
    ServiceProcess service({"--db", db, "--port", "0"});
    ASSERT_GT(service.port(), 0);
    std::atomic<bool> stop{false};
    std::thread client([&, port = service.port()] {
      auto c = ClientFor(port, std::chrono::seconds(2));
      for (int i = 0; i < 2000 && !stop.load(); ++i) {
        if (!PostOrder(*c, KeyHeaders("k-" + std::to_string(next_key++)), kBody)) break;
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100 + 70 * round));
    service.Kill();
    stop = true;
    client.join();

    StoreCounts counts = Counts(db);
    EXPECT_EQ(counts.inconsistencies, 0) << "round " << round;
    // Every completed key made exactly one order; at most the key in flight
    // at the kill is left PROCESSING.
    EXPECT_EQ(counts.orders, counts.keys_completed) << "round " << round;
    EXPECT_LE(counts.keys_processing, round + 1) << "round " << round;
    EXPECT_GT(counts.orders, 0);
  }
}

}  // namespace
}  // namespace example
}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Each fault of the proxy in front of the real orders service on loopback.

#include "orders_service/fault_proxy.h"

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "orders_service/tests/service_test_util.h"

namespace saferetry {
namespace example {
namespace {

using ::saferetry::example::testkit::ClientFor;
using ::saferetry::example::testkit::kBody;
using ::saferetry::example::testkit::KeyHeaders;
using ::saferetry::example::testkit::PostOrder;
using ::saferetry::example::testkit::StartService;
using ::saferetry::example::testkit::TempDir;
using ::testing::ElementsAre;
using Ms = std::chrono::milliseconds;

class FaultProxyTest : public ::testing::Test {
 protected:
  void SetUp() override { service_ = StartService(dir_, ServiceOptions{}); }

  void StartProxy(FaultOptions faults) {
    ProxyOptions options;
    options.upstream_port = service_->port();
    options.faults = std::move(faults);
    auto proxy = FaultProxy::Start(options);
    ASSERT_TRUE(proxy.ok()) << proxy.status();
    proxy_ = *std::move(proxy);
  }

  std::int64_t Orders() { return service_->store().Counts()->orders; }

  TempDir dir_;
  std::unique_ptr<OrdersService> service_;
  std::unique_ptr<FaultProxy> proxy_;
};

FaultOptions Script(std::vector<FaultKind> script) {
  FaultOptions f;
  f.script = std::move(script);
  return f;
}

TEST_F(FaultProxyTest, PassesRequestsThroughUntouched) {
  StartProxy(Script({FaultKind::kNone}));
  auto client = ClientFor(proxy_->port());
  auto r = PostOrder(*client, KeyHeaders("p-1"), kBody);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 201);
  EXPECT_EQ(Orders(), 1);
  ProxyCounters c = proxy_->counters();
  EXPECT_EQ(c.requests_seen, 1);
  EXPECT_EQ(c.requests_matched, 1);
  EXPECT_EQ(c.forwarded, 1);
  EXPECT_THAT(proxy_->history(), ElementsAre(FaultKind::kNone));
}

TEST_F(FaultProxyTest, ResetBeforeCommitNeverReachesTheService) {
  StartProxy(Script({FaultKind::kResetBeforeCommit}));
  auto client = ClientFor(proxy_->port());
  auto r = PostOrder(*client, KeyHeaders("p-2"), kBody);
  EXPECT_FALSE(r);
  EXPECT_EQ(Orders(), 0);
  EXPECT_EQ(service_->metrics().created + service_->metrics().replayed, 0);
  auto status = client->Get("/orders/by-key/p-2");
  ASSERT_TRUE(status);
  EXPECT_EQ(status->status, 404);
  EXPECT_EQ(proxy_->counters().reset_before_commit, 1);
  EXPECT_EQ(proxy_->counters().forwarded, 1);  // only the GET
}

TEST_F(FaultProxyTest, UnavailableAnswers503RejectedWithRetryAfterWithoutForwarding) {
  FaultOptions f = Script({FaultKind::kUnavailable});
  f.retry_after_seconds = 3;
  StartProxy(f);
  auto client = ClientFor(proxy_->port());
  auto r = PostOrder(*client, KeyHeaders("p-3"), kBody);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->get_header_value("Retry-After"), "3");
  // Not forwarded: the proxy's own 503 says this attempt had no effect.
  EXPECT_EQ(r->get_header_value("Idempotency-Key-State"), "rejected");
  EXPECT_EQ(Orders(), 0);
  EXPECT_EQ(proxy_->counters().unavailable, 1);
  EXPECT_EQ(proxy_->counters().forwarded, 0);
}

TEST_F(FaultProxyTest, DropAfterCommitLosesTheAnswerButNotTheOrder) {
  StartProxy(Script({FaultKind::kDropAfterCommit}));
  auto client = ClientFor(proxy_->port());
  auto r = PostOrder(*client, KeyHeaders("p-4"), kBody);
  EXPECT_FALSE(r);
  EXPECT_EQ(Orders(), 1);
  // Status queries (GET) are not faulted: they tell the truth.
  auto status = client->Get("/orders/by-key/p-4");
  ASSERT_TRUE(status);
  EXPECT_EQ(status->status, 200);
  // A resend with the same key is replayed, not executed again.
  auto again = PostOrder(*client, KeyHeaders("p-4"), kBody);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 201);
  EXPECT_EQ(again->get_header_value("Idempotent-Replayed"), "true");
  EXPECT_EQ(Orders(), 1);
  EXPECT_EQ(proxy_->counters().drop_after_commit, 1);
}

TEST_F(FaultProxyTest, HangAfterCommitHoldsTheAnswerUntilTheClientGivesUp) {
  StartProxy(Script({FaultKind::kHangAfterCommit}));
  auto client = ClientFor(proxy_->port(), Ms(300));
  const auto start = std::chrono::steady_clock::now();
  auto r = PostOrder(*client, KeyHeaders("p-5"), kBody);
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_FALSE(r);
  EXPECT_EQ(r.error(), httplib::Error::Read);
  EXPECT_GE(waited, Ms(300));
  EXPECT_LT(waited, Ms(5000));
  EXPECT_EQ(Orders(), 1);
  EXPECT_EQ(proxy_->counters().hang_after_commit, 1);
  const auto stop_start = std::chrono::steady_clock::now();
  proxy_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - stop_start, Ms(2000));
}

TEST_F(FaultProxyTest, DelayForwardsLate) {
  FaultOptions f = Script({FaultKind::kDelay});
  f.delay_duration = Ms(150);
  StartProxy(f);
  auto client = ClientFor(proxy_->port());
  const auto start = std::chrono::steady_clock::now();
  auto r = PostOrder(*client, KeyHeaders("p-6"), kBody);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 201);
  EXPECT_GE(std::chrono::steady_clock::now() - start, Ms(150));
  EXPECT_EQ(proxy_->counters().delayed, 1);
}

TEST_F(FaultProxyTest, FilterLeavesOtherMethodsAlone) {
  FaultOptions f;
  f.drop_after_commit = 1.0;  // every POST
  StartProxy(f);
  auto client = ClientFor(proxy_->port());
  for (int i = 0; i < 3; ++i) {
    auto status = client->Get("/orders/by-key/nothing");
    ASSERT_TRUE(status);
    EXPECT_EQ(status->status, 404);
  }
  EXPECT_FALSE(PostOrder(*client, KeyHeaders("p-7"), kBody));
  ProxyCounters c = proxy_->counters();
  EXPECT_EQ(c.requests_seen, 4);
  EXPECT_EQ(c.requests_matched, 1);
  EXPECT_EQ(c.drop_after_commit, 1);
}

TEST_F(FaultProxyTest, PathPrefixAndAllMethodsFilter) {
  FaultOptions f;
  f.unavailable = 1.0;
  f.methods.clear();  // every method
  f.path_prefix = "/stats";
  StartProxy(f);
  auto client = ClientFor(proxy_->port());
  EXPECT_EQ(client->Get("/stats")->status, 503);
  EXPECT_EQ(client->Get("/healthz")->status, 200);
  EXPECT_EQ(PostOrder(*client, KeyHeaders("p-8"), kBody)->status, 201);
}

TEST_F(FaultProxyTest, KeepAliveConnectionCarriesManyRequests) {
  StartProxy(FaultOptions{});
  auto client = ClientFor(proxy_->port());
  client->set_keep_alive(true);
  for (int i = 0; i < 5; ++i) {
    auto r = PostOrder(*client, KeyHeaders("ka-" + std::to_string(i)), kBody);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 201);
  }
  EXPECT_EQ(proxy_->counters().connections, 1);
  EXPECT_EQ(proxy_->counters().forwarded, 5);
  EXPECT_EQ(Orders(), 5);
}

TEST_F(FaultProxyTest, UnreachableUpstreamIs502) {
  ProxyOptions options;
  options.upstream_port = service_->port();
  service_->Stop();
  auto proxy = FaultProxy::Start(options);
  ASSERT_TRUE(proxy.ok());
  auto client = ClientFor((*proxy)->port());
  auto r = client->Get("/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 502);
  EXPECT_EQ((*proxy)->counters().upstream_errors, 1);
}

// Three instances (each on its own SQLite file, so the orders show where each
// request went) behind one proxy, and one keep-alive client connection.
TEST(FaultProxyRoundRobinTest, SpreadsRequestsOverInstancesAndSkipsARefusedOne) {
  TempDir dir;
  std::vector<std::unique_ptr<OrdersService>> services;
  std::vector<int> ports;
  for (int i = 0; i < 3; ++i) {
    ServiceOptions options;
    options.store.path = dir.File("orders-" + std::to_string(i) + ".db");
    services.push_back(StartService(dir, options));
    ASSERT_NE(services.back(), nullptr);
    ports.push_back(services.back()->port());
  }
  ProxyOptions options;
  options.upstream_ports = ports;
  auto proxy = FaultProxy::Start(options);
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  auto client = ClientFor((*proxy)->port());
  client->set_keep_alive(true);
  auto post = [&](int i) {
    auto r = PostOrder(*client, KeyHeaders("rr-" + std::to_string(i)), kBody);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 201);
  };
  for (int i = 0; i < 6; ++i) post(i);
  EXPECT_EQ((*proxy)->counters().connections, 1);
  EXPECT_THAT((*proxy)->counters().sent_per_upstream, ElementsAre(2, 2, 2));
  for (const auto& s : services) EXPECT_EQ(s->store().Counts()->orders, 2);

  // The second instance goes away: its turns pass to the next instance.
  services[1]->Stop();
  for (int i = 6; i < 9; ++i) post(i);
  EXPECT_THAT((*proxy)->counters().sent_per_upstream, ElementsAre(3, 2, 4));
  EXPECT_EQ((*proxy)->counters().upstream_errors, 0);
  EXPECT_EQ(services[0]->store().Counts()->orders, 3);
  EXPECT_EQ(services[2]->store().Counts()->orders, 4);
}

TEST(FaultProxyRoundRobinTest, ValidationNamesTheField) {
  ProxyOptions options;
  options.upstream_port = 8080;
  options.upstream_ports = {8081, 8082};
  EXPECT_EQ(FaultProxy::Start(options).status().message(),
            "upstream_ports: set either upstream_port or upstream_ports, not both");
  options.upstream_port = 0;
  options.upstream_ports = {8081, 70000};
  EXPECT_EQ(FaultProxy::Start(options).status().message(),
            "upstream_ports[1]: need an IPv4 host and a port in 1..65535, got 127.0.0.1:70000");
  options.upstream_ports = {};
  EXPECT_EQ(FaultProxy::Start(options).status().message(),
            "upstream_port: need an IPv4 host and a port in 1..65535, got 127.0.0.1:0");
}

TEST(FaultDeciderTest, SameSeedSameFaultsInTheSameOrder) {
  FaultOptions f;
  f.drop_after_commit = 0.25;
  f.reset_before_commit = 0.25;
  f.seed = 42;
  FaultDecider a(f), b(f);
  f.seed = 43;
  FaultDecider c(f);
  std::vector<FaultKind> from_a, from_b, from_c;
  std::map<FaultKind, int> counts;
  for (int i = 0; i < 1000; ++i) {
    from_a.push_back(a.Next());
    from_b.push_back(b.Next());
    from_c.push_back(c.Next());
    counts[from_a.back()]++;
  }
  EXPECT_EQ(from_a, from_b);
  EXPECT_NE(from_a, from_c);
  // std::mt19937_64 is fully specified, so these counts are the same everywhere.
  EXPECT_EQ(counts[FaultKind::kResetBeforeCommit], 252);
  EXPECT_EQ(counts[FaultKind::kDropAfterCommit], 262);
  EXPECT_EQ(counts[FaultKind::kNone], 486);
}

TEST(FaultDeciderTest, ScriptComesFirstThenCertainties) {
  FaultOptions f;
  f.hang_after_commit = 1.0;
  f.script = {FaultKind::kNone, FaultKind::kUnavailable};
  FaultDecider d(f);
  EXPECT_EQ(d.Next(), FaultKind::kNone);
  EXPECT_EQ(d.Next(), FaultKind::kUnavailable);
  EXPECT_EQ(d.Next(), FaultKind::kHangAfterCommit);
  EXPECT_EQ(d.Next(), FaultKind::kHangAfterCommit);
  EXPECT_TRUE(d.Matches("post", "/orders"));
  EXPECT_FALSE(d.Matches("GET", "/orders"));
}

TEST(FaultDeciderTest, ValidationNamesTheField) {
  FaultOptions f;
  f.drop_after_commit = 2;
  EXPECT_EQ(ValidateFaultOptions(f).message(),
            "faults.drop_after_commit: must be in [0, 1], got 2");
  f.drop_after_commit = 0.6;
  f.hang_after_commit = 0.6;
  EXPECT_EQ(ValidateFaultOptions(f).message(), "faults: probabilities sum to 1.2, must be <= 1");
  f = FaultOptions{};
  f.hang_limit = Ms(0);
  EXPECT_EQ(ValidateFaultOptions(f).message(), "faults.hang_limit: must be > 0, got 0ms");
  EXPECT_EQ(ParseFaultKind("drop").value(), FaultKind::kDropAfterCommit);
  EXPECT_EQ(ParseFaultKind("boom").status().message(),
            "fault: expected none, delay, 503, reset, drop or hang, got \"boom\"");
}

}  // namespace
}  // namespace example
}  // namespace saferetry

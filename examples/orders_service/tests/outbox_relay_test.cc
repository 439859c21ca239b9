// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The outbox relay delivers at least once; the consumer's processed-message
// record (saferetry::server ProcessOnce) keeps redeliveries without effect.

#include "orders_service/outbox_relay.h"

#include <set>

#include "gtest/gtest.h"
#include "orders_service/orders_service.h"
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

constexpr int kOrders = 6;

std::unique_ptr<OrdersService> ServiceWithOrders(const TempDir& dir) {
  auto service = StartService(dir, ServiceOptions{});
  if (!service) return nullptr;
  auto client = ClientFor(service->port());
  for (int i = 0; i < kOrders; ++i) {
    auto r = PostOrder(*client, KeyHeaders("o-" + std::to_string(i)), kBody);
    EXPECT_TRUE(r && r->status == 201);
  }
  return service;
}

StoreCounts CountsOf(OrdersService& service) {
  auto c = service.store().Counts();
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : StoreCounts{};
}

TEST(OutboxRelayTest, EveryOrderQueuesOneMessageInItsTransactionAndOnePassDeliversAll) {
  TempDir dir;
  auto service = ServiceWithOrders(dir);
  ASSERT_NE(service, nullptr);
  EXPECT_EQ(CountsOf(*service).outbox_pending, kOrders);
  EXPECT_EQ(CountsOf(*service).inconsistencies, 0);

  RelayOptions options;
  options.port = service->port();
  OutboxRelay relay(&service->store(), options);
  auto pass = relay.RunOnce();
  ASSERT_TRUE(pass.ok()) << pass.status();
  EXPECT_EQ(pass->delivered, kOrders);
  EXPECT_EQ(pass->marked, kOrders);
  StoreCounts counts = CountsOf(*service);
  EXPECT_EQ(counts.outbox_pending, 0);
  EXPECT_EQ(counts.shipments, kOrders);
  EXPECT_EQ(relay.RunOnce()->delivered, 0);  // nothing left
}

// A crash after every single delivery, before the message is marked: each
// restart delivers that message again, and the consumer absorbs it.
TEST(OutboxRelayTest, ACrashBetweenDeliveryAndMarkingRedeliversWithoutASecondEffect) {
  TempDir dir;
  auto service = ServiceWithOrders(dir);
  ASSERT_NE(service, nullptr);
  std::set<std::string> crashed_once;
  RelayOptions options;
  options.port = service->port();
  options.crash_after_delivery = [&](const OutboxMessage& m) {
    return crashed_once.insert(m.message_id).second;  // crash the first time only
  };
  int passes = 0, delivered = 0;
  for (; passes < 3 * kOrders && CountsOf(*service).outbox_pending > 0; ++passes) {
    OutboxRelay relay(&service->store(), options);  // a "restarted" relay
    auto pass = relay.RunOnce();
    ASSERT_TRUE(pass.ok()) << pass.status();
    delivered += pass->delivered;
  }
  EXPECT_EQ(crashed_once.size(), static_cast<std::size_t>(kOrders));
  EXPECT_EQ(delivered, 2 * kOrders);  // every message delivered twice
  EXPECT_EQ(passes, kOrders + 1);
  StoreCounts counts = CountsOf(*service);
  EXPECT_EQ(counts.outbox_pending, 0);
  EXPECT_EQ(counts.shipments, kOrders);  // one effect per message
  EXPECT_EQ(service->metrics().messages_processed, kOrders);
  EXPECT_EQ(service->metrics().messages_redelivered, kOrders);
}

// A crash before delivering loses nothing: the message stays pending.
TEST(OutboxRelayTest, ACrashBeforeDeliveryLeavesTheMessagePending) {
  TempDir dir;
  auto service = ServiceWithOrders(dir);
  ASSERT_NE(service, nullptr);
  RelayOptions options;
  options.port = service->port();
  int seen = 0;
  options.crash_before_delivery = [&](const OutboxMessage&) { return ++seen == 3; };
  OutboxRelay crashing(&service->store(), options);
  auto first = crashing.RunOnce();
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(first->crashed);
  EXPECT_EQ(first->marked, 2);
  EXPECT_EQ(CountsOf(*service).outbox_pending, kOrders - 2);

  options.crash_before_delivery = nullptr;
  OutboxRelay restarted(&service->store(), options);
  EXPECT_EQ(restarted.RunOnce()->marked, kOrders - 2);
  EXPECT_EQ(CountsOf(*service).shipments, kOrders);
}

// Every message delivered twice in a row (a broker redelivering everything).
TEST(OutboxRelayTest, RedeliveringEveryMessageHasNoSecondEffect) {
  TempDir dir;
  auto service = ServiceWithOrders(dir);
  ASSERT_NE(service, nullptr);
  auto pending = service->store().PendingOutbox(100);
  ASSERT_TRUE(pending.ok());
  auto client = ClientFor(service->port());
  for (int round = 0; round < 2; ++round) {
    for (const OutboxMessage& m : *pending) {
      auto r = client->Post("/events/order-created", {{"Message-Id", m.message_id}}, m.payload,
                            "application/json");
      ASSERT_TRUE(r);
      EXPECT_EQ(r->status, 200);
      EXPECT_EQ(r->body, round == 0 ? R"({"processed":true})" : R"({"processed":false})");
    }
  }
  EXPECT_EQ(CountsOf(*service).shipments, kOrders);
  auto missing = client->Post("/events/order-created", "{}", "application/json");
  EXPECT_EQ(missing->status, 400);
}

}  // namespace
}  // namespace example
}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Each rule of docs/server-contract.md against the real service over loopback.

#include "orders_service/orders_service.h"

#include <sys/wait.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "orders_service/fake_payment_channel.h"
#include "orders_service/tests/service_test_util.h"
#include "saferetry/testing/fake_clock.h"

namespace saferetry {
namespace example {
namespace {

using ::saferetry::example::testkit::ClientFor;
using ::saferetry::example::testkit::Gate;
using ::saferetry::example::testkit::kBody;
using ::saferetry::example::testkit::KeyHeaders;
using ::saferetry::example::testkit::kOtherBody;
using ::saferetry::example::testkit::PostOrder;
using ::saferetry::example::testkit::StartService;
using ::saferetry::example::testkit::TempDir;
using ::testing::HasSubstr;

StoreCounts CountsOf(OrdersService& service) {
  auto counts = service.store().Counts();
  EXPECT_TRUE(counts.ok()) << counts.status();
  return counts.ok() ? *counts : StoreCounts{};
}

std::string ErrorCode(const httplib::Result& r) {
  return nlohmann::json::parse(r->body).value("error", "");
}

TEST(OrdersServiceTest, FirstRequestCreatesAndSameRequestReplays201) {
  TempDir dir;
  auto service = StartService(dir, ServiceOptions{});
  auto client = ClientFor(service->port());

  auto first = PostOrder(*client, KeyHeaders("k-1"), kBody);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 201);
  EXPECT_FALSE(first->has_header("Idempotent-Replayed"));
  auto order = nlohmann::json::parse(first->body);
  EXPECT_EQ(order["order_id"], "ord-1");
  EXPECT_EQ(order["sku"], "sku-42");
  EXPECT_EQ(order["quantity"], 1);
  EXPECT_EQ(order["tenant"], "default");

  auto again = PostOrder(*client, KeyHeaders("k-1"), kBody);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 201);
  EXPECT_EQ(again->get_header_value("Idempotent-Replayed"), "true");
  EXPECT_EQ(again->body, first->body);

  StoreCounts counts = CountsOf(*service);
  EXPECT_EQ(counts.orders, 1);
  EXPECT_EQ(counts.keys_completed, 1);
  EXPECT_EQ(counts.inconsistencies, 0);
  EXPECT_EQ(service->metrics().created, 1);
  EXPECT_EQ(service->metrics().replayed, 1);
}

TEST(OrdersServiceTest, InvalidBodyIsAFinal400ThatIsReplayed) {
  TempDir dir;
  auto service = StartService(dir, ServiceOptions{});
  auto client = ClientFor(service->port());
  const std::string bad = R"({"sku":"sku-42","quantity":0})";

  auto first = PostOrder(*client, KeyHeaders("k-bad"), bad);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 400);
  EXPECT_EQ(ErrorCode(first), "invalid_order");
  EXPECT_THAT(first->body, HasSubstr("quantity: must be an integer"));

  auto again = PostOrder(*client, KeyHeaders("k-bad"), bad);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 400);
  EXPECT_EQ(again->get_header_value("Idempotent-Replayed"), "true");
  EXPECT_EQ(again->body, first->body);

  // The status query says no order exists and names the stored answer.
  auto status = client->Get("/orders/by-key/k-bad");
  ASSERT_TRUE(status);
  EXPECT_EQ(status->status, 404);
  EXPECT_EQ(status->get_header_value("Idempotency-Key-State"), "completed");
  EXPECT_EQ(nlohmann::json::parse(status->body)["final_status"], 400);

  StoreCounts counts = CountsOf(*service);
  EXPECT_EQ(counts.orders, 0);
  EXPECT_EQ(counts.keys_completed, 1);
  EXPECT_EQ(service->metrics().invalid_body, 1);
}

TEST(OrdersServiceTest, BodyValidationNamesTheField) {
  TempDir dir;
  auto service = StartService(dir, ServiceOptions{});
  auto client = ClientFor(service->port());
  const std::pair<std::string, std::string> cases[] = {
      {"not json", "body: must be a JSON object"},
      {R"({"quantity":1})", "sku: must be a string"},
      {R"({"sku":"a","quantity":1.5})", "quantity: must be an integer"},
      {R"({"sku":"a","quantity":"1"})", "quantity: must be an integer"},
      {R"({"sku":"a","quantity":1,"client_reference":7})", "client_reference: must be a string"},
  };
  int i = 0;
  for (const auto& [body, message] : cases) {
    auto r = PostOrder(*client, KeyHeaders("v-" + std::to_string(i++)), body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << body;
    EXPECT_THAT(r->body, HasSubstr(message)) << body;
  }
  EXPECT_EQ(CountsOf(*service).orders, 0);
}

TEST(OrdersServiceTest, SameKeyOtherBodyIs422AndCreatesNothing) {
  TempDir dir;
  auto service = StartService(dir, ServiceOptions{});
  auto client = ClientFor(service->port());

  ASSERT_EQ(PostOrder(*client, KeyHeaders("k-2"), kBody)->status, 201);
  auto other = PostOrder(*client, KeyHeaders("k-2"), kOtherBody);
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 422);
  EXPECT_EQ(ErrorCode(other), "idempotency_key_reused");
  EXPECT_FALSE(other->has_header("Idempotent-Replayed"));
  EXPECT_EQ(CountsOf(*service).orders, 1);
  EXPECT_EQ(service->metrics().conflicting_payload, 1);
}

TEST(OrdersServiceTest, MissingOrInvalidKeyIs400AndRecordsNothing) {
  TempDir dir;
  auto service = StartService(dir, ServiceOptions{});
  auto client = ClientFor(service->port());

  auto missing = PostOrder(*client, KeyHeaders(""), kBody);
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 400);
  EXPECT_EQ(ErrorCode(missing), "missing_idempotency_key");

  auto invalid = PostOrder(*client, KeyHeaders(std::string(256, 'k')), kBody);
  ASSERT_TRUE(invalid);
  EXPECT_EQ(invalid->status, 400);
  EXPECT_EQ(ErrorCode(invalid), "invalid_idempotency_key");

  StoreCounts counts = CountsOf(*service);
  EXPECT_EQ(counts.orders, 0);
  EXPECT_EQ(counts.keys_processing + counts.keys_completed, 0);
  EXPECT_EQ(service->metrics().rejected_bad_request, 2);
}

TEST(OrdersServiceTest, WhileProcessingPostAndStatusAnswer409ThenTheOrder) {
  TempDir dir;
  Gate gate;
  ServiceOptions options;
  options.after_claim = [&](const KeyScope&, std::int64_t) { gate.ArriveAndWait(); };
  auto service = StartService(dir, options);

  std::optional<httplib::Result> first;
  std::thread worker([&] {
    auto c = ClientFor(service->port());
    first = PostOrder(*c, KeyHeaders("k-3"), kBody);
  });
  ASSERT_TRUE(gate.WaitArrived());

  auto client = ClientFor(service->port());
  auto concurrent = PostOrder(*client, KeyHeaders("k-3"), kBody);
  ASSERT_TRUE(concurrent);
  EXPECT_EQ(concurrent->status, 409);
  EXPECT_EQ(ErrorCode(concurrent), "request_in_progress");

  auto status = client->Get("/orders/by-key/k-3");
  ASSERT_TRUE(status);
  EXPECT_EQ(status->status, 409);
  EXPECT_EQ(status->get_header_value("Idempotency-Key-State"), "processing");
  EXPECT_EQ(CountsOf(*service).keys_processing, 1);

  gate.Open();
  worker.join();
  ASSERT_TRUE(first && *first);
  EXPECT_EQ((*first)->status, 201);

  auto done = client->Get("/orders/by-key/k-3");
  ASSERT_TRUE(done);
  EXPECT_EQ(done->status, 200);
  EXPECT_EQ(done->body, (*first)->body);
  EXPECT_EQ(CountsOf(*service).orders, 1);
}

TEST(OrdersServiceTest, ArtificialDelayKeepsTheKeyProcessing) {
  TempDir dir;
  ServiceOptions options;
  options.processing_delay = std::chrono::milliseconds(300);
  auto service = StartService(dir, options);

  std::optional<httplib::Result> first;
  std::thread worker([&] {
    auto c = ClientFor(service->port());
    first = PostOrder(*c, KeyHeaders("k-slow"), kBody);
  });
  // Bounded wait until the claim is visible.
  for (int i = 0; i < 200 && CountsOf(*service).keys_processing == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  auto client = ClientFor(service->port());
  auto concurrent = PostOrder(*client, KeyHeaders("k-slow"), kBody);
  ASSERT_TRUE(concurrent);
  EXPECT_EQ(concurrent->status, 409);
  worker.join();
  ASSERT_TRUE(first && *first);
  EXPECT_EQ((*first)->status, 201);
}

TEST(OrdersServiceTest, StatusQueryAnswers404ForUnknownAnd200ForOrders) {
  TempDir dir;
  auto service = StartService(dir, ServiceOptions{});
  auto client = ClientFor(service->port());

  auto unknown = client->Get("/orders/by-key/never-sent");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  EXPECT_EQ(unknown->get_header_value("Idempotency-Key-State"), "unknown");

  auto created = PostOrder(*client, KeyHeaders("k/4:x"), kBody);  // needs percent-encoding
  ASSERT_EQ(created->status, 201);
  auto found = client->Get("/orders/by-key/k%2F4%3Ax");
  ASSERT_TRUE(found);
  EXPECT_EQ(found->status, 200);
  EXPECT_EQ(found->body, created->body);
  EXPECT_EQ(service->metrics().status_queries, 2);
}

TEST(OrdersServiceTest, KeysAreScopedPerTenant) {
  TempDir dir;
  auto service = StartService(dir, ServiceOptions{});
  auto client = ClientFor(service->port());

  auto a = PostOrder(*client, KeyHeaders("order-1", "tenant-a"), kBody);
  auto b = PostOrder(*client, KeyHeaders("order-1", "tenant-b"), kBody);
  ASSERT_TRUE(a);
  ASSERT_TRUE(b);
  EXPECT_EQ(a->status, 201);
  EXPECT_EQ(b->status, 201);
  EXPECT_FALSE(b->has_header("Idempotent-Replayed"));
  EXPECT_NE(nlohmann::json::parse(a->body)["order_id"], nlohmann::json::parse(b->body)["order_id"]);
  EXPECT_EQ(nlohmann::json::parse(b->body)["tenant"], "tenant-b");
  EXPECT_EQ(CountsOf(*service).orders, 2);

  auto as_a = client->Get("/orders/by-key/order-1", KeyHeaders("", "tenant-a"));
  ASSERT_TRUE(as_a);
  EXPECT_EQ(as_a->status, 200);
  EXPECT_EQ(as_a->body, a->body);
  auto as_default = client->Get("/orders/by-key/order-1");
  ASSERT_TRUE(as_default);
  EXPECT_EQ(as_default->status, 404);
}

TEST(OrdersServiceTest, CompletedKeysExpireIntoTombstonesNeverIntoNewOrders) {
  TempDir dir;
  auto clock = std::make_shared<saferetry::testkit::FakeClock>();
  ServiceOptions options;
  options.clock = clock;
  options.reap_interval = std::chrono::milliseconds(0);  // the test reaps
  options.store.retention = std::chrono::hours(1);
  auto service = StartService(dir, options);
  auto client = ClientFor(service->port());

  ASSERT_EQ(PostOrder(*client, KeyHeaders("k-old"), kBody)->status, 201);
  ASSERT_EQ(PostOrder(*client, KeyHeaders("k-bad"), "{}")->status, 400);
  // A PROCESSING record is never reaped, however old.
  KeyScope held{"default", "create_order", "k-held"};
  ASSERT_EQ(service->store().idempotency().Begin(held, "digest")->outcome,
            server::BeginOutcome::kClaimed);

  clock->Advance(std::chrono::minutes(59));
  EXPECT_EQ(*service->store().idempotency().Reap(), 0);
  auto still = PostOrder(*client, KeyHeaders("k-old"), kBody);
  EXPECT_EQ(still->status, 201);
  EXPECT_EQ(still->get_header_value("Idempotent-Replayed"), "true");

  clock->Advance(std::chrono::minutes(1));
  EXPECT_EQ(*service->store().idempotency().Reap(), 2);
  StoreCounts counts = CountsOf(*service);
  EXPECT_EQ(counts.keys_expired, 2);
  EXPECT_EQ(counts.keys_processing, 1);
  EXPECT_EQ(counts.keys_completed, 0);

  for (const char* key : {"k-old", "k-bad"}) {
    auto late = PostOrder(*client, KeyHeaders(key), kBody);
    ASSERT_TRUE(late);
    EXPECT_EQ(late->status, 410) << key;
    EXPECT_EQ(ErrorCode(late), "idempotency_key_expired");
  }
  counts = CountsOf(*service);
  EXPECT_EQ(counts.orders, 1);
  EXPECT_EQ(counts.inconsistencies, 0);

  // The order outlives its key: the status query still finds it.
  auto status = client->Get("/orders/by-key/k-old");
  EXPECT_EQ(status->status, 200);
  auto expired = client->Get("/orders/by-key/k-bad");
  EXPECT_EQ(expired->status, 404);
  EXPECT_EQ(expired->get_header_value("Idempotency-Key-State"), "expired");
  EXPECT_EQ(service->metrics().expired_key, 2);
}

TEST(OrdersServiceTest, DeadlineHeaderRejectsBeforeAnyWork) {
  TempDir dir;
  ServiceOptions options;
  options.processing_delay = std::chrono::milliseconds(100);
  auto service = StartService(dir, options);
  auto client = ClientFor(service->port());

  auto headers = [](const std::string& key, const std::string& ms) {
    httplib::Headers h = KeyHeaders(key);
    h.emplace("X-Request-Timeout-Ms", ms);
    return h;
  };
  auto passed = PostOrder(*client, headers("d-1", "0"), kBody);
  EXPECT_EQ(passed->status, 503);
  EXPECT_EQ(passed->get_header_value("Idempotency-Key-State"), "rejected");
  EXPECT_EQ(ErrorCode(passed), "deadline_too_short");
  auto too_short = PostOrder(*client, headers("d-2", "99"), kBody);
  EXPECT_EQ(too_short->status, 503);
  EXPECT_EQ(too_short->get_header_value("Idempotency-Key-State"), "rejected");
  auto garbage = PostOrder(*client, headers("d-3", "soon"), kBody);
  EXPECT_EQ(garbage->status, 400);
  EXPECT_EQ(ErrorCode(garbage), "invalid_deadline");

  StoreCounts counts = CountsOf(*service);
  EXPECT_EQ(counts.keys_processing + counts.keys_completed, 0);
  EXPECT_EQ(service->metrics().deadline_rejected, 2);

  // Nothing was recorded, so the same key works once there is time.
  auto enough = PostOrder(*client, headers("d-2", "100"), kBody);
  EXPECT_EQ(enough->status, 201);
}

TEST(OrdersServiceTest, TwentyConcurrentSameKeyClientsCreateOneOrder) {
  TempDir dir;
  ServiceOptions options;
  options.processing_delay = std::chrono::milliseconds(50);
  options.threads = 24;
  auto service = StartService(dir, options);

  constexpr int kClients = 20;
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<int> statuses(kClients, 0);
  std::vector<std::string> bodies(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      auto c = ClientFor(service->port());
      ready++;
      while (!go.load()) std::this_thread::yield();
      // httplib's listen backlog is 5: a burst of 20 connects can lose a
      // few at the transport level. Like any careful client, resend with
      // the same key (bounded).
      auto r = PostOrder(*c, KeyHeaders("same-key"), kBody);
      for (int attempt = 1; attempt < 5 && !r; ++attempt) {
        r = PostOrder(*c, KeyHeaders("same-key"), kBody);
      }
      if (r) {
        statuses[i] = r->status;
        bodies[i] = r->body;
      } else {
        statuses[i] = -static_cast<int>(r.error());
      }
    });
  }
  while (ready.load() < kClients) std::this_thread::yield();
  go = true;
  for (auto& t : threads) t.join();

  int created = 0, busy = 0;
  std::string order_body;
  for (int i = 0; i < kClients; ++i) {
    if (statuses[i] == 201) {
      ++created;
      if (order_body.empty()) order_body = bodies[i];
      EXPECT_EQ(bodies[i], order_body);  // replays carry the same order
    } else if (statuses[i] == 409) {
      ++busy;
    }
  }
  EXPECT_EQ(created + busy, kClients) << ::testing::PrintToString(statuses) << bodies[0];
  EXPECT_GE(created, 1);
  StoreCounts counts = CountsOf(*service);
  EXPECT_EQ(counts.orders, 1);
  EXPECT_EQ(counts.inconsistencies, 0);
  EXPECT_EQ(service->metrics().created, 1);
}

// Both workers are paused after their claims. The first one's lease runs out
// while it is paused; the second takes over. The first resumes before the
// second finishes: its write is fenced off and only the second commits.
TEST(OrdersServiceTest, LeaseTakeoverFencesOffTheStaleWorker) {
  TempDir dir;
  auto clock = std::make_shared<saferetry::testkit::FakeClock>();
  Gate first_gate, second_gate;
  ServiceOptions options;
  options.clock = clock;
  options.store.lease = std::chrono::seconds(1);
  options.after_claim = [&](const KeyScope&, std::int64_t version) {
    (version == 1 ? first_gate : second_gate).ArriveAndWait();
  };
  auto service = StartService(dir, options);

  std::optional<httplib::Result> stale, fresh;
  std::thread first([&] {
    auto c = ClientFor(service->port());
    stale = PostOrder(*c, KeyHeaders("k-lease"), kBody);
  });
  ASSERT_TRUE(first_gate.WaitArrived());

  auto client = ClientFor(service->port());
  // Lease still running: no takeover.
  EXPECT_EQ(PostOrder(*client, KeyHeaders("k-lease"), kBody)->status, 409);
  clock->Advance(std::chrono::milliseconds(1000));
  auto abandoned = client->Get("/orders/by-key/k-lease");
  EXPECT_EQ(abandoned->status, 404);
  EXPECT_EQ(abandoned->get_header_value("Idempotency-Key-State"), "abandoned");

  std::thread second([&] {
    auto c = ClientFor(service->port());
    fresh = PostOrder(*c, KeyHeaders("k-lease"), kBody);
  });
  ASSERT_TRUE(second_gate.WaitArrived());
  EXPECT_EQ((*service->store().idempotency().Read({"default", "create_order", "k-lease"}))->version,
            2);

  first_gate.Open();
  first.join();
  ASSERT_TRUE(stale && *stale);
  EXPECT_EQ((*stale)->status, 409);
  EXPECT_EQ(service->metrics().stale_writes_rejected, 1);
  EXPECT_EQ(CountsOf(*service).orders, 0);

  second_gate.Open();
  second.join();
  ASSERT_TRUE(fresh && *fresh);
  EXPECT_EQ((*fresh)->status, 201);
  StoreCounts counts = CountsOf(*service);
  EXPECT_EQ(counts.orders, 1);
  EXPECT_EQ(counts.inconsistencies, 0);
  auto record = *service->store().idempotency().Read({"default", "create_order", "k-lease"});
  EXPECT_EQ(record->version, 2);
  EXPECT_EQ(record->state, server::RecordState::kCompleted);
  EXPECT_EQ(service->metrics().takeovers, 1);
}

// The same, but the new worker finishes first: the stale one is fenced off and
// answers with the stored result.
TEST(OrdersServiceTest, StaleWorkerFinishingLastReplaysTheTakeoversResult) {
  TempDir dir;
  auto clock = std::make_shared<saferetry::testkit::FakeClock>();
  Gate first_gate;
  ServiceOptions options;
  options.clock = clock;
  options.store.lease = std::chrono::seconds(1);
  options.after_claim = [&](const KeyScope&, std::int64_t version) {
    if (version == 1) first_gate.ArriveAndWait();
  };
  auto service = StartService(dir, options);

  std::optional<httplib::Result> stale;
  std::thread first([&] {
    auto c = ClientFor(service->port());
    stale = PostOrder(*c, KeyHeaders("k-late"), kBody);
  });
  ASSERT_TRUE(first_gate.WaitArrived());
  clock->Advance(std::chrono::seconds(2));
  auto client = ClientFor(service->port());
  auto fresh = PostOrder(*client, KeyHeaders("k-late"), kBody);
  ASSERT_TRUE(fresh);
  EXPECT_EQ(fresh->status, 201);

  first_gate.Open();
  first.join();
  ASSERT_TRUE(stale && *stale);
  EXPECT_EQ((*stale)->status, 201);
  EXPECT_EQ((*stale)->get_header_value("Idempotent-Replayed"), "true");
  EXPECT_EQ((*stale)->body, fresh->body);
  EXPECT_EQ(service->metrics().stale_writes_rejected, 1);
  EXPECT_EQ(CountsOf(*service).orders, 1);
}

TEST(OrdersServiceTest, StatsReportsDuplicatesByClientReference) {
  TempDir dir;
  auto service = StartService(dir, ServiceOptions{});
  auto client = ClientFor(service->port());
  const std::string body = R"({"sku":"a","quantity":1,"client_reference":"intent-1"})";
  // A careless client: a new key for every retry of the same intent.
  for (const char* key : {"x-1", "x-2", "x-3"}) {
    ASSERT_EQ(PostOrder(*client, KeyHeaders(key), body)->status, 201);
  }
  auto stats = client->Get("/stats");
  ASSERT_TRUE(stats);
  auto j = nlohmann::json::parse(stats->body);
  EXPECT_EQ(j["orders"], 3);
  EXPECT_EQ(j["distinct_references"], 1);
  EXPECT_EQ(j["duplicate_orders"], 2);
  EXPECT_EQ(j["requests"]["created"], 3);
  auto from_file = ReadStoreCounts(dir.File("orders.db"));
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  EXPECT_EQ(from_file->duplicate_orders, 2);
}

TEST(OrdersServiceTest, CreateValidatesOptions) {
  ServiceOptions options;
  options.threads = 0;
  EXPECT_EQ(OrdersService::Create(options).status().message(), "threads: must be > 0, got 0");
  options = ServiceOptions{};
  EXPECT_EQ(OrdersService::Create(options).status().message(),
            "path: must not be empty (or set postgres_conninfo instead, not both)");
  options.store.path = "/tmp/unused.db";
  options.store.lease = std::chrono::milliseconds(0);
  EXPECT_EQ(OrdersService::Create(options).status().message(), "lease: must be > 0, got 0ms");
}

TEST(OrdersServiceTest, FencedStatusQuerySettlesAnUnknownKeyAndTheKeyIsRefusedLater) {
  TempDir dir;
  auto service = StartService(dir, ServiceOptions{});
  auto client = ClientFor(service->port());
  httplib::Headers fence{{"Idempotency-Key-Fence", "true"}};

  auto fenced = client->Get("/orders/by-key/k-lost", fence);
  ASSERT_TRUE(fenced);
  EXPECT_EQ(fenced->status, 404);
  EXPECT_EQ(fenced->get_header_value("Idempotency-Key-State"), "fenced");
  auto again = client->Get("/orders/by-key/k-lost", fence);
  EXPECT_EQ(again->get_header_value("Idempotency-Key-State"), "fenced");

  auto late = PostOrder(*client, KeyHeaders("k-lost"), kBody);
  ASSERT_TRUE(late);
  EXPECT_EQ(late->status, 410);
  EXPECT_EQ(late->get_header_value("Idempotency-Key-State"), "fenced");
  EXPECT_EQ(ErrorCode(late), "idempotency_key_fenced");
  StoreCounts counts = CountsOf(*service);
  EXPECT_EQ(counts.orders, 0);
  EXPECT_EQ(counts.keys_fenced, 1);
  EXPECT_EQ(service->metrics().fences, 1);
  EXPECT_EQ(service->metrics().fenced_refused, 1);

  // A completed key is never fenced: the fence header changes nothing.
  ASSERT_EQ(PostOrder(*client, KeyHeaders("k-done"), kBody)->status, 201);
  auto found = client->Get("/orders/by-key/k-done", fence);
  EXPECT_EQ(found->status, 200);
  EXPECT_EQ(found->get_header_value("Idempotency-Key-State"), "completed");
}

// The worker stalls after its claim; its lease runs out and a fencing status
// query settles the key: the worker's late completion is refused with 410.
TEST(OrdersServiceTest, FenceOfAnAbandonedClaimRefusesTheStaleWorker) {
  TempDir dir;
  auto clock = std::make_shared<saferetry::testkit::FakeClock>();
  Gate gate;
  ServiceOptions options;
  options.clock = clock;
  options.store.lease = std::chrono::seconds(1);
  options.after_claim = [&](const KeyScope&, std::int64_t) { gate.ArriveAndWait(); };
  auto service = StartService(dir, options);

  std::optional<httplib::Result> stale;
  std::thread worker([&] {
    auto c = ClientFor(service->port());
    stale = PostOrder(*c, KeyHeaders("k-stuck"), kBody);
  });
  ASSERT_TRUE(gate.WaitArrived());
  auto client = ClientFor(service->port());
  httplib::Headers fence{{"Idempotency-Key-Fence", "true"}};
  auto running = client->Get("/orders/by-key/k-stuck", fence);
  EXPECT_EQ(running->status, 409);
  EXPECT_EQ(running->get_header_value("Idempotency-Key-State"), "processing");
  clock->Advance(std::chrono::seconds(1));
  auto fenced = client->Get("/orders/by-key/k-stuck", fence);
  EXPECT_EQ(fenced->status, 404);
  EXPECT_EQ(fenced->get_header_value("Idempotency-Key-State"), "fenced");

  gate.Open();
  worker.join();
  ASSERT_TRUE(stale && *stale);
  EXPECT_EQ((*stale)->status, 410);
  EXPECT_EQ((*stale)->get_header_value("Idempotency-Key-State"), "fenced");
  EXPECT_EQ(CountsOf(*service).orders, 0);
  EXPECT_EQ(service->metrics().stale_writes_rejected, 1);
}

TEST(RequestDigestTest, IsSha256OfMethodPathAndBody) {
  // sha256("POST\n/orders\n{}")
  EXPECT_EQ(RequestDigest("POST", "/orders", "{}").size(), 64u);
  EXPECT_EQ(RequestDigest("POST", "/orders", "{}"), RequestDigest("POST", "/orders", "{}"));
  EXPECT_NE(RequestDigest("POST", "/orders", "{}"), RequestDigest("POST", "/orders", "{} "));
  EXPECT_EQ(RequestDigest("", "", ""),
            // sha256("\n\n")
            "75a11da44c802486bc6f65640aa48a730f0f684c5c07a42ba3cd1735eb3fb070");
}

// The database is not there at start (a directory that does not exist yet
// stands for a server that is down): the service starts anyway, answers 503
// `rejected` and records nothing, then serves once the database is reached.
TEST(OrdersServiceTest, ADatabaseDownAtStartIsRiddenOutWith503Rejected) {
  TempDir dir;
  ServiceOptions options;
  options.store.path = dir.File("later/orders.db");
  options.database_retry_interval = std::chrono::milliseconds(20);
  auto service = StartService(dir, options);
  ASSERT_NE(service, nullptr);
  EXPECT_FALSE(service->ready());
  auto client = ClientFor(service->port());
  auto refused = PostOrder(*client, KeyHeaders("k-down"), kBody);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503);
  EXPECT_EQ(refused->get_header_value("Idempotency-Key-State"), "rejected");
  EXPECT_EQ(ErrorCode(refused), "storage_unavailable");
  auto query = client->Get("/orders/by-key/k-down");
  ASSERT_TRUE(query);
  EXPECT_EQ(query->status, 503);
  EXPECT_EQ(query->get_header_value("Idempotency-Key-State"), "rejected");
  EXPECT_EQ(client->Get("/healthz")->status, 200);
  EXPECT_EQ(service->metrics().storage_unavailable, 2);

  ASSERT_EQ(std::system(("mkdir -p '" + dir.File("later") + "'").c_str()), 0);
  for (int i = 0; i < 500 && !service->ready(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(service->ready());
  auto created = PostOrder(*client, KeyHeaders("k-down"), kBody);
  ASSERT_TRUE(created);
  EXPECT_EQ(created->status, 201);
  EXPECT_EQ(CountsOf(*service).orders, 1);
  // Without the retry interval a database that cannot be opened fails Create.
  ServiceOptions strict;
  strict.store.path = dir.File("never/orders.db");
  EXPECT_EQ(OrdersService::Create(strict).status().code(), absl::StatusCode::kUnavailable);
}

// The service's sweeper fences a record nobody came back for (an order
// commits with its record, so PROCESSING proves no order exists).
TEST(OrdersServiceTest, SweepIntervalFencesAbandonedRecords) {
  TempDir dir;
  ServiceOptions options;
  options.store.lease = std::chrono::milliseconds(100);
  options.sweep_interval = std::chrono::milliseconds(20);
  auto service = StartService(dir, options);
  const KeyScope scope{"default", std::string(kCreateOrderOperation), "k-abandoned"};
  ASSERT_EQ(
      service->store().idempotency().Begin(scope, RequestDigest("POST", "/orders", kBody))->outcome,
      server::BeginOutcome::kClaimed);
  for (int i = 0; i < 500 && service->metrics().swept_fenced == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(service->metrics().swept_fenced, 1);
  auto client = ClientFor(service->port());
  auto query = client->Get("/orders/by-key/k-abandoned");
  ASSERT_TRUE(query);
  EXPECT_EQ(query->status, 404);
  EXPECT_EQ(query->get_header_value("Idempotency-Key-State"), "fenced");
  EXPECT_EQ(PostOrder(*client, KeyHeaders("k-abandoned"), kBody)->status, 410);
  EXPECT_EQ(CountsOf(*service).orders, 0);
}

struct CommandResult {
  int exit_code = -1;
  std::string out;
};

CommandResult RunCommand(const std::string& command) {
  CommandResult r;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The admin binary, as a person runs it: the pending queue, a decision recorded
// once (the same command again is accepted, another answer refused), and the
// decided answer replayed to the client.
TEST(OrdersServiceTest, PendingConfirmationIsListedAndDecidedOnceByTheAdminCommand) {
  TempDir dir;
  auto service = StartService(dir, ServiceOptions{});
  server::IdempotencyStore& store = service->store().idempotency();
  const KeyScope scope{"default", std::string(kCreateOrderOperation), "k-pending"};
  ASSERT_EQ(store.Begin(scope, RequestDigest("POST", "/orders", kBody))->outcome,
            server::BeginOutcome::kClaimed);
  ASSERT_TRUE(*store.MarkPendingConfirmation(scope, 1, "the warehouse cannot be asked"));
  auto client = ClientFor(service->port());
  auto held = PostOrder(*client, KeyHeaders("k-pending"), kBody);
  EXPECT_EQ(held->status, 409);
  EXPECT_EQ(held->get_header_value("Idempotency-Key-State"), "pending_confirmation");

  const std::string admin =
      std::string(ORDERS_ADMIN_BIN) + " --db '" + dir.File("orders.db") + "' ";
  CommandResult listed = RunCommand(admin + "pending");
  ASSERT_EQ(listed.exit_code, 0) << listed.out;
  auto queue = nlohmann::json::parse(listed.out);
  ASSERT_EQ(queue.size(), 1u);
  EXPECT_EQ(queue[0]["key"], "k-pending");
  EXPECT_EQ(queue[0]["pending_reason"], "the warehouse cannot be asked");

  const std::string decide =
      admin +
      "decide --key k-pending --outcome failed --status 409 "
      "--body '{\"error\":\"not_created\"}' --by alice --reason 'no order row' ";
  CommandResult first = RunCommand(decide);
  ASSERT_EQ(first.exit_code, 0) << first.out;
  auto recorded = nlohmann::json::parse(first.out);
  EXPECT_EQ(recorded["outcome"], "recorded");
  EXPECT_EQ(recorded["decision"]["decided_by"], "alice");
  EXPECT_EQ(recorded["decision"]["reason"], "no order row");
  EXPECT_EQ(nlohmann::json::parse(RunCommand(decide).out)["outcome"], "already_recorded");
  CommandResult other =
      RunCommand(admin +
                 "decide --key k-pending --outcome succeeded --status 201 --body '{}' --by bob "
                 "--reason 'found it'");
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_EQ(nlohmann::json::parse(other.out)["outcome"], "conflicting_decision");
  EXPECT_EQ(RunCommand(admin + "pending").out, "[]\n");

  auto replay = PostOrder(*client, KeyHeaders("k-pending"), kBody);
  EXPECT_EQ(replay->status, 409);
  EXPECT_EQ(replay->get_header_value("Idempotency-Key-State"), "completed");
  EXPECT_EQ(replay->get_header_value("Idempotent-Replayed"), "true");
  EXPECT_EQ(replay->body, R"({"error":"not_created"})");
  CommandResult swept = RunCommand(admin + "sweep");
  ASSERT_EQ(swept.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(swept.out)["examined"], 0);
}

// The walkthrough of docs/server.md: the channel charged, its answer was lost
// (the worker never completed the record), and no client came back. The
// sweeper asks the channel by the step's request id: one charge, the order
// created with it, and a later same-key request replays that answer.
TEST(OrdersServiceTest, SweepRecoversALostPaymentAnswerByTheChannelsRequestId) {
  FakePaymentChannel channel;
  auto channel_port = channel.Start();
  ASSERT_TRUE(channel_port.ok()) << channel_port.status();
  TempDir dir;
  ServiceOptions options;
  options.payment_channel_port = *channel_port;
  options.payment_timeout = std::chrono::milliseconds(200);
  options.store.lease = std::chrono::milliseconds(300);
  auto service = StartService(dir, options);
  auto client = ClientFor(service->port());

  channel.LoseNextAnswers(1, std::chrono::milliseconds(600));
  auto lost = PostOrder(*client, KeyHeaders("k-paid"), kBody);
  ASSERT_TRUE(lost);
  EXPECT_EQ(lost->status, 500);  // after the charge: not "rejected"
  EXPECT_EQ(channel.charges(), 1);
  const KeyScope scope{"default", std::string(kCreateOrderOperation), "k-paid"};
  auto record = *service->store().idempotency().Read(scope);
  ASSERT_TRUE(record.has_value() && record->step.has_value());
  EXPECT_EQ(record->state, server::RecordState::kProcessing);
  EXPECT_EQ(record->step->external_id, server::DefaultExternalRequestId(scope, "charge"));

  std::this_thread::sleep_for(std::chrono::milliseconds(700));  // the lease runs out
  auto swept = service->handler().RunSweep();
  ASSERT_TRUE(swept.ok()) << swept.status();
  EXPECT_EQ(swept->completed, 1);
  EXPECT_EQ(channel.charges(), 1);
  auto replay = PostOrder(*client, KeyHeaders("k-paid"), kBody);
  ASSERT_TRUE(replay);
  EXPECT_EQ(replay->status, 201);
  EXPECT_EQ(replay->get_header_value("Idempotent-Replayed"), "true");
  EXPECT_EQ(nlohmann::json::parse(replay->body)["charge_id"], "ch_1");
  StoreCounts counts = CountsOf(*service);
  EXPECT_EQ(counts.orders, 1);
  EXPECT_EQ(counts.inconsistencies, 0);
  EXPECT_EQ(channel.charges(), 1);
}

// The same with a channel that cannot answer for the request any more: the
// record waits for a person, who decides once; a second, different decision
// is refused, and the decided answer is replayed.
TEST(OrdersServiceTest, PendingConfirmationWhenThePaymentChannelCannotTell) {
  FakePaymentChannel channel;
  auto channel_port = channel.Start();
  ASSERT_TRUE(channel_port.ok());
  TempDir dir;
  ServiceOptions options;
  options.payment_channel_port = *channel_port;
  options.payment_timeout = std::chrono::milliseconds(200);
  options.store.lease = std::chrono::milliseconds(300);
  auto service = StartService(dir, options);
  auto client = ClientFor(service->port());

  channel.LoseNextAnswers(1, std::chrono::milliseconds(600));
  ASSERT_EQ(PostOrder(*client, KeyHeaders("k-lost"), kBody)->status, 500);
  const KeyScope scope{"default", std::string(kCreateOrderOperation), "k-lost"};
  channel.Forget(server::DefaultExternalRequestId(scope, "charge"));
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  auto swept = service->handler().RunSweep();
  ASSERT_TRUE(swept.ok());
  EXPECT_EQ(swept->pending_confirmation, 1);
  auto held = PostOrder(*client, KeyHeaders("k-lost"), kBody);
  EXPECT_EQ(held->status, 409);
  EXPECT_EQ(held->get_header_value("Idempotency-Key-State"), "pending_confirmation");
  EXPECT_EQ(channel.charges(), 1);  // never charged again

  server::Decision d;
  d.outcome = server::Decision::Outcome::kSucceeded;
  d.response = StoredResponse{201, R"({"order_id":"manual-1","charge_id":"ch_1"})"};
  d.decided_by = "alice";
  d.reason = "the channel's settlement file lists ch_1 for this request";
  EXPECT_EQ(service->handler().Decide("k-lost", std::nullopt, d)->outcome,
            server::DecideOutcome::kRecorded);
  server::Decision other = d;
  other.outcome = server::Decision::Outcome::kFailed;
  other.response = StoredResponse{402, R"({"error":"not_charged"})"};
  EXPECT_EQ(service->handler().Decide("k-lost", std::nullopt, other)->outcome,
            server::DecideOutcome::kConflictingDecision);
  auto replay = PostOrder(*client, KeyHeaders("k-lost"), kBody);
  EXPECT_EQ(replay->status, 201);
  EXPECT_EQ(replay->body, R"({"order_id":"manual-1","charge_id":"ch_1"})");
  EXPECT_EQ(channel.charges(), 1);
}

}  // namespace
}  // namespace example
}  // namespace saferetry

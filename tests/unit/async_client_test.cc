// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// What only the event-loop driver does: back-pressure, cancellation by id
// (on the fake loop, and from other threads on the real one), hedging.

#include "saferetry/async_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "saferetry/config.h"
#include "saferetry/testing/async_fake_transport.h"
#include "saferetry/testing/counting_budget.h"
#include "saferetry/testing/fake_clock.h"
#include "saferetry/testing/fake_random.h"

namespace saferetry {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::ElementsAre;
using testkit::AsyncFakeTransport;
using testkit::CountingBudget;
using testkit::FakeClock;
using testkit::FakeEventLoop;
using testkit::ScriptedRandom;
using testkit::Step;

constexpr char kOrders[] = "http://127.0.0.1:8080/orders";
constexpr char kStatus[] = "http://127.0.0.1:8080/orders/by-key/{key}";

Request Post() {
  return Request{
      "POST", kOrders, {{"Content-Type", "application/json"}}, R"({"sku":"sku-42","quantity":1})"};
}

Request Get() {
  Request r;
  r.url = "http://127.0.0.1:8080/orders/1";
  return r;
}

class AsyncClientTest : public ::testing::Test {
 protected:
  std::unique_ptr<AsyncClient> Make(std::shared_ptr<RetryBudget> budget = nullptr,
                                    std::size_t max_in_flight = 10000) {
    AsyncClientOptions o;
    o.client.clock = clock_;
    o.client.random = random_;
    o.client.budget = budget ? budget : MakeUnlimitedBudget();
    o.client.status_query_budget = MakeUnlimitedBudget();
    o.loop = loop_;
    o.transport = transport_;
    o.run_loop_thread = false;
    o.max_in_flight = max_in_flight;
    auto c = AsyncClient::Create(std::move(o));
    EXPECT_TRUE(c.ok()) << c.status();
    return *std::move(c);
  }

  static RetryPolicyOptions HedgedPolicy(Duration delay, int max_hedges = 1) {
    RetryPolicyOptions p;
    p.hedging.enabled = true;
    p.hedging.delay = delay;
    p.hedging.max_hedges = max_hedges;
    return p;
  }
  static CallOptions Hedged(Duration delay, int max_hedges = 1) {
    CallOptions call;
    call.policy = RetryPolicy::Create(HedgedPolicy(delay, max_hedges)).value();
    return call;
  }

  std::shared_ptr<FakeClock> clock_ = std::make_shared<FakeClock>();
  std::shared_ptr<ScriptedRandom> random_ = std::make_shared<ScriptedRandom>();
  std::shared_ptr<FakeEventLoop> loop_ = std::make_shared<FakeEventLoop>(clock_);
  std::shared_ptr<AsyncFakeTransport> transport_ =
      std::make_shared<AsyncFakeTransport>(loop_, clock_);
};

TEST_F(AsyncClientTest, CreateNamesTheMissingField) {
  AsyncClientOptions o;
  o.transport = transport_;
  EXPECT_THAT(std::string(AsyncClient::Create(o).status().message()), ::testing::HasSubstr("loop"));
  o.loop = loop_;
  // The fake loop cannot run on the client's own thread.
  EXPECT_THAT(std::string(AsyncClient::Create(o).status().message()),
              ::testing::HasSubstr("run_loop_thread"));
  o.run_loop_thread = false;
  o.max_in_flight = 0;
  EXPECT_THAT(std::string(AsyncClient::Create(o).status().message()),
              ::testing::HasSubstr("max_in_flight"));
}

TEST_F(AsyncClientTest, OverTheCapIsRefusedAtOnce) {
  auto client = Make(nullptr, /*max_in_flight=*/2);
  transport_->Push(Step::Respond(200)).Push(Step::Respond(200)).Push(Step::Respond(200));
  auto a = client->Execute(Get(), CallOptions{});
  auto b = client->Execute(Get(), CallOptions{});
  AsyncClient::CallId id = 7;
  auto c = client->Execute(Get(), CallOptions{}, &id);
  // Refused before Execute returned, nothing queued or sent.
  EXPECT_EQ(id, 0u);
  ASSERT_EQ(c.wait_for(seconds(0)), std::future_status::ready);
  CallResult refused = c.get();
  EXPECT_EQ(refused.outcome, Outcome::kFailed);
  EXPECT_EQ(refused.stop_reason, StopReason::kTooManyCalls);
  EXPECT_EQ(refused.attempts, 0);
  EXPECT_EQ(client->in_flight(), 2u);
  loop_->RunUntilIdle();
  EXPECT_EQ(a.get().outcome, Outcome::kSucceeded);
  EXPECT_EQ(b.get().outcome, Outcome::kSucceeded);
  EXPECT_EQ(transport_->send_count(), 2);
  EXPECT_EQ(client->in_flight(), 0u);
  // Room again.
  auto d = client->Execute(Get(), CallOptions{});
  loop_->RunUntilIdle();
  EXPECT_EQ(d.get().outcome, Outcome::kSucceeded);
}

TEST_F(AsyncClientTest, BackoffIsATimerNotASleep) {
  auto client = Make();
  transport_->Push(Step::Respond(503)).Push(Step::Respond(200));
  auto f = client->Execute(Get(), CallOptions{});
  loop_->RunUntilIdle();
  CallResult r = f.get();
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.elapsed, milliseconds(52));
  EXPECT_TRUE(clock_->sleeps().empty());  // nothing slept; the loop's clock moved
}

TEST_F(AsyncClientTest, CancelDuringAnAttemptThatMayHaveBeenDeliveredIsUnknown) {
  auto client = Make();
  transport_->Push(Step::Respond(201).After(seconds(10)));
  CallOptions call;
  call.status_url = kStatus;
  AsyncClient::CallId id = 0;
  auto f = client->Execute(Post(), call, &id);
  loop_->RunUntil(clock_->Now() + milliseconds(5));
  client->Cancel(id);
  loop_->RunUntilIdle();
  CallResult r = f.get();
  EXPECT_EQ(r.stop_reason, StopReason::kCancelled);
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.status_queries, 0);
  EXPECT_EQ(transport_->cancelled_count(), 1);
  EXPECT_EQ(r.elapsed, milliseconds(5));
}

// A call's own status URL is read when its status query goes out, long after
// the loop dropped the call's options: the call keeps the URL, a short one
// held inside the string object as well. Two calls that begin meanwhile
// reuse the storage the first call's options were queued in.
TEST_F(AsyncClientTest, ACallsOwnShortStatusUrlOutlivesItsOptions) {
  auto client = Make();
  transport_->Push(Step::CommitThenLost().After(milliseconds(100)));  // a's attempt
  transport_->Push(Step::Respond(201));                               // b
  transport_->Push(Step::Respond(201));                               // c
  transport_->Push(Step::Respond(200, {}, "order a"));                // a's status query
  auto with_status_url = [](const char* url) {
    CallOptions call;
    call.status_url = url;  // 14 characters: no heap buffer of its own
    return call;
  };
  auto a = client->Execute(Post(), with_status_url("http://a/{key}"));
  loop_->RunUntil(clock_->Now() + milliseconds(1));
  auto b = client->Execute(Post(), with_status_url("http://b/{key}"));
  loop_->RunUntil(clock_->Now() + milliseconds(1));
  auto c = client->Execute(Post(), with_status_url("http://c/{key}"));
  loop_->RunUntilIdle();
  const CallResult ra = a.get();
  EXPECT_EQ(b.get().outcome, Outcome::kSucceeded);
  EXPECT_EQ(c.get().outcome, Outcome::kSucceeded);
  EXPECT_EQ(ra.outcome, Outcome::kSucceeded);
  EXPECT_EQ(ra.attempts, 1);
  EXPECT_EQ(ra.status_queries, 1);
  const std::vector<testkit::SentRequest> sent = transport_->sent();
  ASSERT_EQ(sent.size(), 4u);
  ASSERT_TRUE(ra.idempotency_key.has_value());
  EXPECT_EQ(sent[3].request.method, "GET");
  EXPECT_EQ(sent[3].request.url, "http://a/" + *ra.idempotency_key);
}

TEST_F(AsyncClientTest, CancelDuringAWaitEndsTheWaitAtOnce) {
  auto client = Make();
  transport_->Push(Step::Respond(503)).Push(Step::Respond(200));
  AsyncClient::CallId id = 0;
  auto f = client->Execute(Get(), CallOptions{}, &id);
  loop_->RunUntil(clock_->Now() + milliseconds(2));  // the attempt ended at 1 ms; waiting 50 ms
  client->Cancel(id);
  loop_->RunUntilIdle();
  CallResult r = f.get();
  EXPECT_EQ(r.stop_reason, StopReason::kCancelled);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.elapsed, milliseconds(2));
  EXPECT_EQ(transport_->send_count(), 1);
}

// Hedging.

TEST_F(AsyncClientTest, HedgeFirstAnswerWinsAndTheLoserIsCancelled) {
  auto budget = std::make_shared<CountingBudget>(10);
  auto client = Make(budget);
  transport_->Push(Step::Respond(200, {}, "slow").After(milliseconds(100)));
  transport_->Push(Step::Respond(200, {}, "hedge").After(milliseconds(5)));
  auto f = client->Execute(Get(), Hedged(milliseconds(10)));
  loop_->RunUntilIdle();
  CallResult r = f.get();
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  ASSERT_TRUE(r.last_response.has_value());
  EXPECT_EQ(r.last_response->body, "hedge");
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(r.elapsed, milliseconds(15));
  EXPECT_EQ(transport_->send_count(), 2);
  EXPECT_EQ(transport_->cancelled_count(), 1);
  EXPECT_EQ(transport_->in_flight(), 0);
  EXPECT_EQ(budget->charges(), 1);  // the hedge was paid for
  auto sent = transport_->sent();
  EXPECT_EQ(sent[1].at - sent[0].at, milliseconds(10));
  EXPECT_EQ(FindHeader(sent[1].request.headers, "X-Retry-Attempt"), "attempt=2; max=3");
}

// Overlapping attempts each carry their own span, and each one's evidence
// the span it was sent with.
TEST_F(AsyncClientTest, HedgesGetTheirOwnSpans) {
  struct Tracer final : AttemptTracer {
    std::optional<AttemptSpan> OnAttemptStart(const AttemptSpanStart& start) override {
      AttemptSpan span;
      span.traceparent = *start.caller;
      span.traceparent.parent_id[7] = static_cast<std::uint8_t>(start.number);
      resends.push_back(start.resend_count);
      return span;
    }
    void OnAttemptEnd(const AttemptEvidence& ev) override {
      ended.push_back(std::to_string(ev.number) + ":" + SpanIdHex(ev.span_id));
    }
    void OnCallEnd() override { ++call_ends; }
    std::vector<int> resends;
    std::vector<std::string> ended;
    int call_ends = 0;
  } tracer;
  auto client = Make();
  transport_->Push(Step::Respond(200, {}, "first").After(milliseconds(100)));
  transport_->Push(Step::Respond(200, {}, "hedge 1").After(milliseconds(100)));
  transport_->Push(Step::Respond(200, {}, "hedge 2").After(milliseconds(5)));
  saferetry::RetryPolicyOptions call_policy = HedgedPolicy(milliseconds(10), /*max_hedges=*/3);
  call_policy.max_attempts = 4;
  CallOptions call;
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  call.trace_context = TraceContext{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba90000-01", ""};
  call.tracer = &tracer;
  auto f = client->Execute(Get(), call);
  loop_->RunUntilIdle();
  CallResult r = f.get();
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.last_response->body, "hedge 2");
  const auto sent = transport_->sent();
  ASSERT_EQ(sent.size(), 3u);
  for (std::size_t i = 0; i < sent.size(); ++i) {
    EXPECT_EQ(
        FindHeader(sent[i].request.headers, "traceparent"),
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba9000" + std::to_string(i + 1) + "-01");
  }
  EXPECT_THAT(tracer.resends, ElementsAre(0, 1, 2));
  // Every attempt reported carries its own span.
  ASSERT_FALSE(tracer.ended.empty());
  for (const AttemptEvidence& ev : r.evidence) {
    EXPECT_EQ(SpanIdHex(ev.span_id), "00f067aa0ba9000" + std::to_string(ev.number));
    EXPECT_EQ(ev.resend_count, ev.number - 1);
  }
  for (const std::string& e : tracer.ended) {
    EXPECT_EQ(e.substr(0, 1), e.substr(e.size() - 1)) << e;
  }
  EXPECT_EQ(tracer.call_ends, 1);
}

TEST_F(AsyncClientTest, HedgeNotSentWhenTheFirstAnswersInTime) {
  auto client = Make();
  transport_->Push(Step::Respond(200).After(milliseconds(9)));
  auto f = client->Execute(Get(), Hedged(milliseconds(10)));
  loop_->RunUntilIdle();
  EXPECT_EQ(f.get().attempts, 1);
  EXPECT_EQ(transport_->send_count(), 1);
  EXPECT_EQ(loop_->pending_timers(), 0u);
}

TEST_F(AsyncClientTest, EveryHedgeIsChargedAndHedgesStopWhenTheBudgetIsEmpty) {
  auto budget = std::make_shared<CountingBudget>(1);
  auto client = Make(budget);
  transport_->Push(Step::Respond(200, {}, "first").After(milliseconds(100)));
  transport_->Push(Step::Respond(200, {}, "hedge 1").After(milliseconds(100)));
  saferetry::RetryPolicyOptions call_policy = HedgedPolicy(milliseconds(10), /*max_hedges=*/3);
  CallOptions call;
  call_policy.max_attempts = 4;
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  auto f = client->Execute(Get(), call);
  loop_->RunUntilIdle();
  CallResult r = f.get();
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.last_response->body, "first");
  EXPECT_EQ(budget->charges(), 1);
  EXPECT_EQ(transport_->send_count(), 2);  // the second hedge was refused by the budget
  EXPECT_EQ(transport_->cancelled_count(), 1);
}

TEST_F(AsyncClientTest, HedgesCountAgainstMaxAttempts) {
  auto client = Make();
  for (int i = 0; i < 4; ++i) transport_->Push(Step::Respond(200).After(milliseconds(100)));
  saferetry::RetryPolicyOptions call_policy = HedgedPolicy(milliseconds(10), /*max_hedges=*/3);
  CallOptions call;
  call_policy.max_attempts = 2;
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  auto f = client->Execute(Get(), call);
  loop_->RunUntilIdle();
  EXPECT_EQ(f.get().attempts, 2);
  EXPECT_EQ(transport_->send_count(), 2);
}

TEST_F(AsyncClientTest, NonDeduplicatedPostIsNeverHedged) {
  auto client = Make();
  transport_->Push(Step::Respond(201).After(seconds(1)));
  CallOptions call = Hedged(milliseconds(10), 3);
  call.status_url = kStatus;  // keyed, but the server does not deduplicate
  auto f = client->Execute(Post(), call);
  loop_->RunUntilIdle();
  CallResult r = f.get();
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(transport_->send_count(), 1);
}

TEST_F(AsyncClientTest, UndeclaredPutIsHedgedOnlyWhenIdempotent) {
  auto client = Make();
  transport_->Push(Step::Respond(200).After(milliseconds(100)));
  transport_->Push(Step::Respond(200).After(milliseconds(100)));
  Request put{"PUT", "http://127.0.0.1:8080/orders/1", {}, "{}"};
  put.idempotency = Idempotency::kNonIdempotent;
  auto f = client->Execute(put, Hedged(milliseconds(10)));
  loop_->RunUntilIdle();
  EXPECT_EQ(f.get().attempts, 1);
  EXPECT_EQ(transport_->send_count(), 1);
}

// A hedged keyed POST answered 409 (the first is still being processed):
// the hedge cannot help; the call waits for the first.
TEST_F(AsyncClientTest, HedgedKeyedPostAnswered409WaitsForTheFirst) {
  auto client = Make();
  transport_->Push(Step::Respond(201, {}, "order 1").After(milliseconds(50)));
  transport_->Push(Step::Respond(409).After(milliseconds(5)));
  saferetry::RetryPolicyOptions call_policy = HedgedPolicy(milliseconds(10));
  CallOptions call;
  call_policy.server_deduplicates = true;
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  auto f = client->Execute(Post(), call);
  loop_->RunUntilIdle();
  CallResult r = f.get();
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.last_response->body, "order 1");
  EXPECT_EQ(r.elapsed, milliseconds(50));
  EXPECT_EQ(transport_->send_count(), 2);
  auto sent = transport_->sent();
  // The same key on both copies.
  EXPECT_EQ(FindHeader(sent[0].request.headers, "Idempotency-Key"),
            FindHeader(sent[1].request.headers, "Idempotency-Key"));
  ASSERT_EQ(r.evidence.size(), 2u);
  EXPECT_EQ(r.evidence[0].classification, AttemptClass::kInProgress);
}

TEST_F(AsyncClientTest, HedgeDelayFromTheObservedP95) {
  auto client = Make();
  // 20 answered calls of 1..20 ms: the p95 (nearest rank) is 19 ms.
  for (int i = 1; i <= 20; ++i) transport_->Push(Step::Respond(200).After(milliseconds(i)));
  for (int i = 0; i < 20; ++i) {
    auto f = client->Execute(Get(), CallOptions{});
    loop_->RunUntilIdle();
    ASSERT_EQ(f.get().outcome, Outcome::kSucceeded);
  }
  transport_->Push(Step::Respond(200).After(milliseconds(100)));
  transport_->Push(Step::Respond(200).After(milliseconds(1)));
  saferetry::RetryPolicyOptions call_policy = HedgedPolicy(milliseconds(500));
  CallOptions call;
  call_policy.hedging.delay_from_p95 = true;
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  auto f = client->Execute(Get(), call);
  loop_->RunUntilIdle();
  CallResult r = f.get();
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(r.elapsed, milliseconds(20));  // hedge at 19 ms, answered 1 ms later
}

TEST_F(AsyncClientTest, ALoserCutShortByAHedgeStillCountsInTheP95) {
  auto client = Make();
  // 20 answered calls of 1..20 ms: the p95 (nearest rank) is 19 ms.
  for (int i = 1; i <= 20; ++i) transport_->Push(Step::Respond(200).After(milliseconds(i)));
  for (int i = 0; i < 20; ++i) {
    auto f = client->Execute(Get(), CallOptions{});
    loop_->RunUntilIdle();
    ASSERT_EQ(f.get().outcome, Outcome::kSucceeded);
  }
  saferetry::RetryPolicyOptions call_policy = HedgedPolicy(milliseconds(500));
  CallOptions call;
  call_policy.hedging.delay_from_p95 = true;
  // A slow first copy, hedged at 19 ms; the hedge answers 1 ms later. The
  // window gains the winner (1 ms) and the loser's wait (20 ms, a lower
  // bound): 1, 1, 2, ..., 19, 20, 20 has its p95 at 20 ms. Without the loser
  // it would have fallen to 19 ms, and kept falling as hedging hid the tail.
  for (int expected_elapsed : {20, 21}) {
    transport_->Push(Step::Respond(200).After(milliseconds(1000)));
    transport_->Push(Step::Respond(200).After(milliseconds(1)));
    call.policy = saferetry::RetryPolicy::Create(call_policy).value();
    auto f = client->Execute(Get(), call);
    loop_->RunUntilIdle();
    CallResult r = f.get();
    EXPECT_EQ(r.attempts, 2);
    EXPECT_EQ(r.elapsed, milliseconds(expected_elapsed));
  }
}

// Bad hedging options are refused when the policy is built, naming the
// field; a call never sees them.
TEST_F(AsyncClientTest, BadHedgingOptionsNameTheField) {
  EXPECT_EQ(
      RetryPolicy::Create(HedgedPolicy(milliseconds(10), /*max_hedges=*/9)).status().message(),
      "policy.hedging.max_hedges: must be in 0..3, got 9");
  EXPECT_EQ(RetryPolicy::Create(HedgedPolicy(milliseconds(-1))).status().message(),
            "policy.hedging.delay: must be >= 0");
  EXPECT_EQ(transport_->send_count(), 0);
}

// gRPC's hedgingPolicy from JSON drives the same hedging: `hedgingDelay` is
// the delay, and `nonFatalStatusCodes` decide which answers let the other
// copy run on (listed) and which end the call at once (the rest).
class JsonHedgingTest : public AsyncClientTest {
 protected:
  std::unique_ptr<AsyncClient> FromPolicy(const Policy& policy) {
    AsyncClientOptions o;
    EXPECT_TRUE(ApplyToClientOptions(policy, &o.client).ok());
    o.client.clock = clock_;
    o.client.random = random_;
    o.client.budget = MakeUnlimitedBudget();
    o.loop = loop_;
    o.transport = transport_;
    o.run_loop_thread = false;
    auto c = AsyncClient::Create(std::move(o));
    EXPECT_TRUE(c.ok()) << c.status();
    return *std::move(c);
  }
  Policy policy_ = LoadPolicy(R"({"hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0.010s",
                                                    "nonFatalStatusCodes": ["UNAVAILABLE"]}})")
                       .value();
};

TEST_F(JsonHedgingTest, NonFatalAnswerLetsTheOtherCopyRunOn) {
  auto client = FromPolicy(policy_);
  transport_->Push(Step::Respond(200, {}, "first").After(milliseconds(100)));
  transport_->Push(Step::Respond(503, {}, "busy").After(milliseconds(5)));
  auto f = client->Execute(Get(), CallOptions{});
  loop_->RunUntilIdle();
  CallResult r = f.get();
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.last_response->body, "first");
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(r.elapsed, milliseconds(100));
  auto sent = transport_->sent();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[1].at - sent[0].at, milliseconds(10));
  EXPECT_EQ(transport_->cancelled_count(), 0);
}

TEST_F(JsonHedgingTest, FatalAnswerEndsTheCallAndCancelsTheOtherCopy) {
  auto client = FromPolicy(policy_);
  transport_->Push(Step::Respond(200, {}, "first").After(milliseconds(100)));
  transport_->Push(Step::Respond(429, {}, "quota").After(milliseconds(5)));  // RESOURCE_EXHAUSTED
  auto f = client->Execute(Get(), CallOptions{});
  loop_->RunUntilIdle();
  CallResult r = f.get();
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kPermanentError);
  EXPECT_EQ(r.last_response->body, "quota");
  EXPECT_EQ(r.elapsed, milliseconds(15));
  EXPECT_EQ(transport_->cancelled_count(), 1);
  EXPECT_EQ(transport_->in_flight(), 0);
}

TEST_F(JsonHedgingTest, ZeroDelaySendsEveryCopyAtOnce) {
  Policy p = LoadPolicy(R"({"hedgingPolicy": {"maxAttempts": 3}})").value();
  auto client = FromPolicy(p);
  for (int i = 0; i < 3; ++i) transport_->Push(Step::Respond(200).After(milliseconds(30 - i)));
  auto f = client->Execute(Get(), CallOptions{});
  loop_->RunUntilIdle();
  CallResult r = f.get();
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.attempts, 3);
  EXPECT_EQ(r.elapsed, milliseconds(28));
  auto sent = transport_->sent();
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(sent[2].at, sent[0].at);
  EXPECT_EQ(transport_->cancelled_count(), 2);
}

// On the real loop, from other threads (the ThreadSanitizer stage runs
// these).

std::unique_ptr<AsyncClient> RealLoopClient(std::shared_ptr<AsyncFakeTransport>* transport) {
  auto loop = MakeEpollEventLoop();
  EXPECT_TRUE(loop.ok()) << loop.status();
  *transport = std::make_shared<AsyncFakeTransport>(*loop, SystemClock());
  AsyncClientOptions o;
  o.client.budget = MakeUnlimitedBudget();
  o.loop = *loop;
  o.transport = *transport;
  auto c = AsyncClient::Create(std::move(o));
  EXPECT_TRUE(c.ok()) << c.status();
  return *std::move(c);
}

TEST(AsyncClientThreadTest, ConcurrentExecuteFromManyThreads) {
  std::shared_ptr<AsyncFakeTransport> transport;
  auto client = RealLoopClient(&transport);
  transport->SetHandler([](const Request&, const AttemptOptions&) {
    return Step::Respond(200).After(milliseconds(1));
  });
  std::atomic<int> succeeded{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      std::vector<std::future<CallResult>> futures;
      for (int i = 0; i < 50; ++i) futures.push_back(client->Execute(Get(), CallOptions{}));
      for (auto& f : futures) {
        if (f.get().outcome == Outcome::kSucceeded) ++succeeded;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(succeeded.load(), 200);
  EXPECT_EQ(transport->send_count(), 200);
  EXPECT_EQ(client->in_flight(), 0u);
}

TEST(AsyncClientThreadTest, ConcurrentCancelFromAnotherThread) {
  std::shared_ptr<AsyncFakeTransport> transport;
  auto client = RealLoopClient(&transport);
  transport->SetHandler([](const Request&, const AttemptOptions&) {
    return Step::Respond(200).After(seconds(20));  // never in time
  });
  AsyncClient::CallId id = 0;
  CallOptions call;
  call.timeout = seconds(30);
  auto f = client->Execute(Get(), call, &id);
  std::thread canceller([&] { client->Cancel(id); });
  canceller.join();
  ASSERT_EQ(f.wait_for(seconds(10)), std::future_status::ready);
  CallResult r = f.get();
  EXPECT_EQ(r.stop_reason, StopReason::kCancelled);
  EXPECT_EQ(r.outcome, Outcome::kFailed);  // a GET has no effect
}

TEST(AsyncClientThreadTest, DestructionCancelsCallsInFlight) {
  std::shared_ptr<AsyncFakeTransport> transport;
  auto client = RealLoopClient(&transport);
  transport->SetHandler(
      [](const Request&, const AttemptOptions&) { return Step::Respond(200).After(seconds(20)); });
  std::vector<std::future<CallResult>> futures;
  for (int i = 0; i < 10; ++i) futures.push_back(client->Execute(Get(), CallOptions{}));
  while (transport->send_count() < 10) std::this_thread::sleep_for(milliseconds(1));
  client.reset();
  for (auto& f : futures) {
    ASSERT_EQ(f.wait_for(seconds(0)), std::future_status::ready);
    EXPECT_EQ(f.get().stop_reason, StopReason::kCancelled);
  }
}

// The built-in loop keeps a descriptor's callback in its table, not behind a
// pointer of its own: a callback that gives its descriptor a new callback,
// or unwatches it, while it runs must still be whole until it returns. Each
// callback here reads its captures (one of them on the heap) after it did
// so; the sanitizer stages would report a callback destroyed under itself.
// Then the new callback runs on the next readiness, the old one never again,
// and nothing runs once the descriptor is unwatched.
TEST(EpollEventLoopThreadTest, ACallbackReplacesThenUnwatchesItsOwnDescriptorWhileItRuns) {
  absl::StatusOr<std::shared_ptr<RunnableEventLoop>> made = MakeEpollEventLoop();
  ASSERT_TRUE(made.ok()) << made.status();
  std::shared_ptr<RunnableEventLoop> loop = *made;
  const int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  auto signal = [fd] {
    const std::uint64_t one = 1;
    ASSERT_EQ(write(fd, &one, sizeof(one)), static_cast<ssize_t>(sizeof(one)));
  };
  auto drain = [fd] {
    std::uint64_t count = 0;
    ASSERT_EQ(read(fd, &count, sizeof(count)), static_cast<ssize_t>(sizeof(count)));
  };
  std::vector<std::string> log;  // the loop thread's, read after it stopped
  auto first_name =
      std::make_shared<std::string>("first, on the heap and longer than a short string");
  auto second_name =
      std::make_shared<std::string>("second, on the heap and longer than a short string");
  std::thread runner([&] { loop->Run(); });
  loop->Post([&] {
    const absl::Status watched = loop->WatchFd(fd, EventLoop::kReadable, [&, first_name](int) {
      drain();
      const absl::Status replaced = loop->WatchFd(fd, EventLoop::kReadable, [&, second_name](int) {
        drain();
        EXPECT_TRUE(loop->WatchFd(fd, 0, nullptr).ok());
        log.push_back(*second_name);  // after the unwatch
        // Readable again: nothing may run for it any more.
        signal();
        loop->AddTimer(std::chrono::milliseconds(50), [&] { loop->Stop(); });
      });
      EXPECT_TRUE(replaced.ok()) << replaced;
      log.push_back(*first_name);  // after the replacement
      signal();
    });
    EXPECT_TRUE(watched.ok()) << watched;
    signal();
  });
  runner.join();
  close(fd);
  EXPECT_THAT(log, ElementsAre(*first_name, *second_name));
}

// The built-in loop's watches are a table indexed by descriptor. A callback
// that watches descriptors past the table's end while it runs makes the table
// grow, and the running callback must not move with it. This one is a single
// pointer, which `std::function` holds inside itself (in the table), and it
// reads that pointer again after the growth: the sanitizer stages report the
// read of the freed table if the callback ran from it. Then it, and each new
// watch, still run on the next readiness.
TEST(EpollEventLoopThreadTest, ACallbackThatGrowsTheWatchTableKeepsRunningWhole) {
  absl::StatusOr<std::shared_ptr<RunnableEventLoop>> made = MakeEpollEventLoop();
  ASSERT_TRUE(made.ok()) << made.status();
  constexpr int kMore = 300;  // past the table's room above the first descriptor
  struct State {
    std::shared_ptr<RunnableEventLoop> loop;
    int first = -1;
    std::vector<int> more;  // the loop thread's, read after it stopped
    int more_runs = 0;
    int first_runs = 0;
    int reads_after_growth = 0;
    static void Signal(int fd) {
      const std::uint64_t one = 1;
      ASSERT_EQ(write(fd, &one, sizeof(one)), static_cast<ssize_t>(sizeof(one)));
    }
    static void Drain(int fd) {
      std::uint64_t count = 0;
      ASSERT_EQ(read(fd, &count, sizeof(count)), static_cast<ssize_t>(sizeof(count)));
    }
  } state;
  state.loop = *made;
  state.first = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ASSERT_GE(state.first, 0);
  std::thread runner([&] { state.loop->Run(); });
  State* const st = &state;
  state.loop->Post([st] {
    const absl::Status watched = st->loop->WatchFd(st->first, EventLoop::kReadable, [st](int) {
      State::Drain(st->first);
      ++st->first_runs;
      if (st->more.empty()) {
        for (int i = 0; i < kMore; ++i) {
          const int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
          ASSERT_GE(fd, 0);
          st->more.push_back(fd);
          const absl::Status w = st->loop->WatchFd(fd, EventLoop::kReadable, [st, fd](int) {
            State::Drain(fd);
            EXPECT_TRUE(st->loop->WatchFd(fd, 0, nullptr).ok());
            if (++st->more_runs == kMore) State::Signal(st->first);
          });
          ASSERT_TRUE(w.ok()) << w;
        }
        ++st->reads_after_growth;  // `st`, read from the callable after the growth
        for (int fd : st->more) State::Signal(fd);
      } else {
        EXPECT_TRUE(st->loop->WatchFd(st->first, 0, nullptr).ok());
        st->loop->Stop();
      }
    });
    EXPECT_TRUE(watched.ok()) << watched;
    State::Signal(st->first);
  });
  runner.join();
  close(state.first);
  for (int fd : state.more) close(fd);
  EXPECT_EQ(state.more_runs, kMore);
  EXPECT_EQ(state.first_runs, 2);
  EXPECT_EQ(state.reads_after_growth, 1);
}

// The built-in loop's timers against a model, on fake time that a posted
// task moves 1 ms per turn of the loop: seeded runs where the timers' own
// tasks add timers (some due at once) and cancel timers that are queued,
// held back for the next turn, already run, already cancelled, or never
// existed. Every timer not cancelled before it ran runs exactly once, in
// (due, order added) order, within 1 ms of its due time (one turn late at
// most: a timer due at once that a timer task added waits for the next
// turn); no cancelled timer runs.
TEST(EpollEventLoopThreadTest, TimersRunByDueThenOrderAddedUnderRandomAddsAndCancels) {
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE(seed);
    auto clock = std::make_shared<FakeClock>();
    absl::StatusOr<std::shared_ptr<RunnableEventLoop>> made = MakeEpollEventLoop(clock);
    ASSERT_TRUE(made.ok()) << made.status();
    std::shared_ptr<RunnableEventLoop> loop = *made;
    const TimePoint origin = clock->Now();
    struct Modeled {
      EventLoop::TimerId id = 0;
      Duration due{};
      bool cancelled = false;
      int runs = 0;
      Duration ran_at{};
    };
    // All touched on the loop thread only, read after it stopped.
    std::vector<Modeled> timers;
    std::vector<std::size_t> ran;  // indexes into `timers`, in the order run
    std::mt19937_64 rng(seed);
    constexpr std::size_t kTimers = 300;
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    std::function<void(int, int)> add = [&](int min_delay_ms, int max_delay_ms) {
      if (timers.size() >= kTimers) return;
      const std::size_t index = timers.size();
      const Duration delay = milliseconds(pick(min_delay_ms, max_delay_ms));
      timers.push_back(Modeled{});
      timers[index].due = clock->Now() - origin + std::max(delay, Duration::zero());
      timers[index].id = loop->AddTimer(delay, [&, index] {
        Modeled& t = timers[index];
        ++t.runs;
        t.ran_at = clock->Now() - origin;
        ran.push_back(index);
        for (int n = pick(0, 2); n > 0; --n) add(-1, 6);
        for (int n = pick(0, 2); n > 0; --n) {
          const std::size_t victim =
              static_cast<std::size_t>(pick(0, static_cast<int>(timers.size())));
          if (victim == timers.size()) {
            loop->CancelTimer(EventLoop::TimerId{0xdead} << 32 | 7);  // never issued
            continue;
          }
          loop->CancelTimer(timers[victim].id);
          if (timers[victim].runs == 0) timers[victim].cancelled = true;
        }
      });
    };
    int turns = 0;
    std::function<void()> tick = [&] {
      clock->Advance(milliseconds(1));
      const bool pending = std::any_of(timers.begin(), timers.end(), [](const Modeled& t) {
        return !t.cancelled && t.runs == 0;
      });
      if ((timers.size() >= kTimers && !pending) || ++turns > 10000) {
        loop->Stop();
      } else {
        if (!pending) add(0, 3);  // keep the run going until kTimers were added
        loop->Post(tick);
      }
    };
    loop->Post([&] {
      for (int i = 0; i < 40; ++i) add(-2, 20);
      loop->Post(tick);
    });
    loop->Run();
    ASSERT_LE(turns, 10000) << "the timers never drained";
    ASSERT_EQ(timers.size(), kTimers);
    for (std::size_t i = 0; i < timers.size(); ++i) {
      const Modeled& t = timers[i];
      SCOPED_TRACE(i);
      EXPECT_EQ(t.runs, t.cancelled ? 0 : 1);
      if (t.runs == 1) {
        EXPECT_GE(t.ran_at, t.due);
        EXPECT_LE(t.ran_at, t.due + milliseconds(1));
      }
    }
    for (std::size_t k = 1; k < ran.size(); ++k) {
      const Modeled& a = timers[ran[k - 1]];
      const Modeled& b = timers[ran[k]];
      EXPECT_TRUE(a.due < b.due || (a.due == b.due && ran[k - 1] < ran[k]))
          << "timer " << ran[k - 1] << " (due " << a.due.count() << ") ran before timer " << ran[k]
          << " (due " << b.due.count() << ")";
    }
  }
}

// A burst of timers' storage is given back once none is queued, and the ids
// of that burst stay stale: cancelling them leaves the timers added after it
// (in slots made again) alone.
TEST(EpollEventLoopThreadTest, IdsOfABurstOfTimersStayStaleAfterItsStorageIsGivenBack) {
  absl::StatusOr<std::shared_ptr<RunnableEventLoop>> made = MakeEpollEventLoop();
  ASSERT_TRUE(made.ok()) << made.status();
  std::shared_ptr<RunnableEventLoop> loop = *made;
  constexpr int kBurst = 1000;  // more than the loop keeps storage for
  std::vector<EventLoop::TimerId> first_ids;
  int first_ran = 0;
  int second_ran = 0;
  loop->Post([&] {
    for (int i = 0; i < kBurst; ++i) {
      first_ids.push_back(loop->AddTimer(Duration::zero(), [&] { ++first_ran; }));
    }
    // Runs at the next turn, after the burst ran and its storage went.
    loop->Post([&] {
      for (int i = 0; i < kBurst; ++i) {
        loop->AddTimer(Duration::zero(), [&] {
          if (++second_ran == kBurst) loop->Stop();
        });
      }
      for (EventLoop::TimerId id : first_ids) loop->CancelTimer(id);
      // Stops the run should a cancel have hit one of the new timers.
      loop->AddTimer(std::chrono::milliseconds(500), [&] { loop->Stop(); });
    });
  });
  loop->Run();
  EXPECT_EQ(first_ran, kBurst);
  EXPECT_EQ(second_ran, kBurst);
}

}  // namespace
}  // namespace saferetry

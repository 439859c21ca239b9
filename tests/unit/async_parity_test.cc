// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// One behaviour, two drivers: every case runs against the blocking `Client`
// (FakeTransport / SimulatedOrderServer on a FakeClock) and the `AsyncClient`
// (AsyncFakeTransport on a FakeEventLoop over the same kind of clock), with
// the same expectations: outcome, stop reason, attempts, queries, exact
// waits, exact times and effects per key. When saferetry::asio is built, the
// `AsyncClient` also runs on the Asio adapter (an io_context polled on the
// test thread, its timers on the same FakeClock), with the same
// expectations.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <tuple>

#include "saferetry/async_client.h"
#include "saferetry/client.h"
#include "saferetry/testing/async_fake_transport.h"
#include "saferetry/testing/fake_clock.h"
#include "saferetry/testing/fake_random.h"
#include "saferetry/testing/fake_transport.h"
#include "saferetry/testing/memory_journal.h"
#include "saferetry/testing/simulated_order_server.h"
#if SAFERETRY_TEST_ASIO
#include "saferetry/testing/asio_fake_clock.h"
#endif

namespace saferetry {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::ElementsAre;
using testkit::AsyncFakeTransport;
using testkit::FakeClock;
using testkit::FakeEventLoop;
using testkit::FakeTransport;
using testkit::OrderFault;
using testkit::ScriptedRandom;
using testkit::SimulatedOrderServer;
using testkit::Step;

constexpr char kOrders[] = "http://127.0.0.1:8080/orders";
constexpr char kStatus[] = "http://127.0.0.1:8080/orders/by-key/{key}";

enum class Driver { kBlocking, kAsync, kAsio };

std::string DriverName(Driver d) {
  switch (d) {
    case Driver::kBlocking:
      return "Blocking";
    case Driver::kAsync:
      return "Async";
    case Driver::kAsio:
      return "Asio";
  }
  return "?";
}

// The drivers built here: the Asio adapter's only with saferetry::asio.
#if SAFERETRY_TEST_ASIO
#define SAFERETRY_PARITY_DRIVERS Driver::kBlocking, Driver::kAsync, Driver::kAsio
#else
#define SAFERETRY_PARITY_DRIVERS Driver::kBlocking, Driver::kAsync
#endif

Request Post() {
  return Request{
      "POST", kOrders, {{"Content-Type", "application/json"}}, R"({"sku":"sku-42","quantity":1})"};
}

Request Get() {
  Request r;
  r.url = "http://127.0.0.1:8080/orders/1";
  return r;
}

// The waits a call scheduled, from its evidence (the same for both drivers;
// the blocking one also records them as sleeps on the fake clock).
std::vector<Duration> Waits(const CallResult& r) {
  std::vector<Duration> waits;
  for (const auto& e : r.evidence) {
    if (e.delay_after.has_value()) waits.push_back(*e.delay_after);
  }
  return waits;
}

// Runs calls through either driver with the same seams.
class Harness {
 public:
  explicit Harness(Driver driver) : driver_(driver) {
#if SAFERETRY_TEST_ASIO
    if (driver_ == Driver::kAsio) testkit::FakeAsioClock::Use(clock_);
#endif
  }
#if SAFERETRY_TEST_ASIO
  ~Harness() {
    if (driver_ == Driver::kAsio) testkit::FakeAsioClock::Use(nullptr);
  }
#endif

  // Scripted steps for the next attempts.
  void Push(Step step) {
    if (driver_ == Driver::kBlocking) {
      fake_->Push(std::move(step));
#if SAFERETRY_TEST_ASIO
    } else if (driver_ == Driver::kAsio) {
      asio_transport_->Push(std::move(step));
#endif
    } else {
      async_->Push(std::move(step));
    }
  }
  // The simulated order server answers every attempt.
  void UseServer(std::shared_ptr<SimulatedOrderServer> server) { server_ = std::move(server); }
  // Client-wide seams. `defaults`: only the clock is set (what a new user
  // gets); else the scripted random (u = 0.5) and unlimited budgets.
  void SetBudget(std::shared_ptr<RetryBudget> budget) { budget_ = std::move(budget); }
  // Every jitter sample is `u`.
  void SetUniform(double u) { random_ = std::make_shared<ScriptedRandom>(std::vector<double>{u}); }
  void UseDefaults() { defaults_ = true; }

  // The intent journal of the next clients.
  void UseJournal(std::shared_ptr<IntentJournal> journal) { journal_ = std::move(journal); }

  CallResult Run(const Request& request, const CallOptions& call) {
    return Drive([&](Client& c) { return c.Execute(request, call); },
                 [&](AsyncClient& c) { return c.Execute(request, call); });
  }
  // Resolves journaled intent `key` (`Client::Resolve` or
  // `AsyncClient::Resolve`).
  CallResult Resolve(const std::string& key, const ResolveOptions& options) {
    return Drive([&](Client& c) { return c.Resolve(key, options); },
                 [&](AsyncClient& c) { return c.Resolve(key, options); });
  }

  template <typename Blocking, typename Async>
  CallResult Drive(Blocking blocking, Async async) {
    ClientOptions o;
    o.clock = clock_;
    o.journal = journal_;
    if (!defaults_) {
      o.random = random_;
      o.budget = budget_ ? budget_ : MakeUnlimitedBudget();
      o.status_query_budget = MakeUnlimitedBudget();
    }
    if (driver_ == Driver::kBlocking) {
      o.transport = server_ ? std::shared_ptr<Transport>(server_) : fake_;
      auto c = Client::Create(std::move(o));
      EXPECT_TRUE(c.ok()) << c.status();
      return blocking(**c);
    }
    if (server_) async_->SetBackend(server_);
    AsyncClientOptions ao;
    ao.client = std::move(o);
    ao.loop = loop_;
    ao.transport = async_;
    ao.run_loop_thread = false;
#if SAFERETRY_TEST_ASIO
    if (driver_ == Driver::kAsio) {
      ao.loop = asio_loop_;
      ao.transport = asio_transport_;
      if (server_) asio_transport_->SetBackend(server_);
    }
#endif
    auto c = AsyncClient::Create(std::move(ao));
    EXPECT_TRUE(c.ok()) << c.status();
    std::future<CallResult> f = async(**c);
#if SAFERETRY_TEST_ASIO
    if (driver_ == Driver::kAsio) {
      testkit::RunFakeAsio(io_, *asio_loop_, *clock_, [&] {
        return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
      });
    } else {
      loop_->RunUntilIdle();
    }
#else
    loop_->RunUntilIdle();
#endif
    EXPECT_EQ(f.wait_for(std::chrono::seconds(0)), std::future_status::ready);
    return f.get();
  }

  int sends() const {
    if (server_) return -1;
#if SAFERETRY_TEST_ASIO
    if (driver_ == Driver::kAsio) return asio_transport_->send_count();
#endif
    return driver_ == Driver::kBlocking ? fake_->send_count() : async_->send_count();
  }
  // Every request the transport saw, with its extra headers.
  std::vector<testkit::SentRequest> sent() const {
#if SAFERETRY_TEST_ASIO
    if (driver_ == Driver::kAsio) return asio_transport_->sent();
#endif
    return driver_ == Driver::kBlocking ? fake_->sent() : async_->sent();
  }
  FakeClock& clock() { return *clock_; }
  std::shared_ptr<FakeClock> shared_clock() { return clock_; }

 private:
  Driver driver_;
  bool defaults_ = false;
  std::shared_ptr<FakeClock> clock_ = std::make_shared<FakeClock>();
  std::shared_ptr<ScriptedRandom> random_ = std::make_shared<ScriptedRandom>();  // u = 0.5
  std::shared_ptr<RetryBudget> budget_;
  std::shared_ptr<IntentJournal> journal_;
  std::shared_ptr<SimulatedOrderServer> server_;
  std::shared_ptr<FakeTransport> fake_ = std::make_shared<FakeTransport>(clock_);
  std::shared_ptr<FakeEventLoop> loop_ = std::make_shared<FakeEventLoop>(clock_);
  std::shared_ptr<AsyncFakeTransport> async_ = std::make_shared<AsyncFakeTransport>(loop_, clock_);
#if SAFERETRY_TEST_ASIO
  asio::io_context io_;
  std::shared_ptr<testkit::FakeAsioEventLoop> asio_loop_ =
      std::make_shared<testkit::FakeAsioEventLoop>(io_);
  std::shared_ptr<AsyncFakeTransport> asio_transport_ =
      std::make_shared<AsyncFakeTransport>(asio_loop_, clock_);
#endif
};

class ParityTest : public ::testing::TestWithParam<Driver> {
 protected:
  Harness h_{GetParam()};
};

INSTANTIATE_TEST_SUITE_P(Drivers, ParityTest, ::testing::Values(SAFERETRY_PARITY_DRIVERS),
                         [](const auto& p) { return DriverName(p.param); });

TEST_P(ParityTest, Success) {
  h_.Push(Step::Respond(200, {}, "order 1").After(milliseconds(7)));
  const TimePoint start = h_.clock().Now();
  CallResult r = h_.Run(Get(), CallOptions{});
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.stop_reason, StopReason::kSuccess);
  EXPECT_EQ(r.attempts, 1);
  ASSERT_TRUE(r.last_response.has_value());
  EXPECT_EQ(r.last_response->body, "order 1");
  ASSERT_EQ(r.evidence.size(), 1u);
  EXPECT_EQ(r.evidence[0].start, start);
  EXPECT_EQ(r.evidence[0].end, start + milliseconds(7));
  EXPECT_EQ(r.elapsed, milliseconds(7));
}

// A tracer's span on every attempt and status query, the caller's trace
// context replacing the request's own, and the same evidence on every driver.
// The trace headers each send carried, one line per send.
std::vector<std::string> TraceHeadersOnTheWire(const std::vector<testkit::SentRequest>& sent) {
  std::vector<std::string> wire;
  for (const testkit::SentRequest& s : sent) {
    std::string line;
    for (const Header& hd : s.request.headers) {
      if (hd.first == "traceparent" || hd.first == "tracestate") line += hd.second + " ";
    }
    wire.push_back(line);
  }
  return wire;
}

TEST_P(ParityTest, TraceContextAndTracerSpansOnEveryAttemptAndQuery) {
  struct Tracer final : AttemptTracer {
    std::optional<AttemptSpan> OnAttemptStart(const AttemptSpanStart& start) override {
      AttemptSpan span;
      span.traceparent = *start.caller;
      span.traceparent.parent_id[7] = static_cast<std::uint8_t>(start.number);
      span.traceparent.parent_id[6] = start.is_status_query ? 0xbb : 0xaa;
      starts += std::to_string(start.number) + (start.is_status_query ? "q" : "a") +
                std::to_string(start.resend_count) + " ";
      return span;
    }
    void OnAttemptEnd(const AttemptEvidence& ev) override { ends += SpanIdHex(ev.span_id) + " "; }
    void OnCallEnd() override { ++call_ends; }
    std::string starts, ends;
    int call_ends = 0;
  } tracer;
  h_.Push(Step::RespondRejected());
  h_.Push(Step::CommitThenLost());
  h_.Push(Step::Respond(202));
  h_.Push(Step::Respond(200));
  CallOptions call;
  call.status_url = kStatus;
  call.trace_context =
      TraceContext{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "congo=t61"};
  call.tracer = &tracer;
  Request post = Post();
  post.headers.emplace_back("traceparent",
                            "00-11111111111111111111111111111111-2222222222222222-00");
  CallResult r = h_.Run(post, call);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(tracer.starts, "1a0 2a1 1q0 2q1 ");
  EXPECT_EQ(tracer.ends, "00f067aa0ba9aa01 00f067aa0ba9aa02 00f067aa0ba9bb01 00f067aa0ba9bb02 ");
  EXPECT_EQ(tracer.call_ends, 1);
  EXPECT_THAT(TraceHeadersOnTheWire(h_.sent()),
              ElementsAre("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba9aa01-01 congo=t61 ",
                          "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba9aa02-01 congo=t61 ",
                          "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba9bb01-01 congo=t61 ",
                          "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba9bb02-01 congo=t61 "));
  std::vector<int> resends;
  for (const AttemptEvidence& ev : r.evidence) resends.push_back(ev.resend_count);
  EXPECT_THAT(resends, ElementsAre(0, 1, 0, 1));
}

// Full jitter on a 100 ms ceiling, x2, u = 0.5: 50 ms then 100 ms.
TEST_P(ParityTest, UnavailableThenSuccessWaitsExactly) {
  h_.Push(Step::Respond(503));
  h_.Push(Step::Respond(503));
  h_.Push(Step::Respond(200));
  CallResult r = h_.Run(Get(), CallOptions{});
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.attempts, 3);
  EXPECT_THAT(Waits(r), ElementsAre(milliseconds(50), milliseconds(100)));
  EXPECT_EQ(r.elapsed, milliseconds(153));
  EXPECT_EQ(h_.sends(), 3);
}

// The default policy with a response predicate: a JSON body whose "error" is
// "throttled" was not applied.
std::shared_ptr<const RetryPolicy> ThrottledIsNotApplied() {
  RetryPolicyOptions o;
  ResponseRule throttled;
  throttled.json_pointer = "/error";
  throttled.json_value = "throttled";
  throttled.verdict = ResponseVerdict::kNotApplied;
  o.response_predicate.rules = {throttled};
  return RetryPolicy::Create(o).value();
}

// A response predicate reads the answer: a keyed POST's "throttled" 200 is
// "not applied" and resent with the same key after the exact backoff.
TEST_P(ParityTest, AThrottledAnswerIsResentByTheResponsePredicate) {
  const std::shared_ptr<const RetryPolicy> policy = ThrottledIsNotApplied();
  h_.Push(Step::Respond(200, {}, R"({"error":"throttled"})"));
  h_.Push(Step::Respond(201, {}, R"({"order_id":7})"));
  CallOptions call;
  call.policy = policy;
  call.status_url = kStatus;
  CallResult r = h_.Run(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(r.status_queries, 0);
  ASSERT_EQ(r.evidence.size(), 2u);
  EXPECT_EQ(r.evidence[0].classification, AttemptClass::kRetryableTransient);
  EXPECT_THAT(Waits(r), ElementsAre(milliseconds(50)));
  EXPECT_EQ(r.elapsed, milliseconds(52));
  ASSERT_TRUE(r.last_response.has_value());
  EXPECT_EQ(r.last_response->body, R"({"order_id":7})");
  EXPECT_EQ(h_.sends(), 2);
}

// As a user would run it: the client's defaults (real budgets and jitter), a
// clock that wakes up to 5 ms late, the default policy plus a predicate; a
// slow "throttled" answer, then an attempt that hangs until its timeout, a
// status query that finds nothing, and the same-key resend's order.
TEST_P(ParityTest, DefaultsOnALateClockRideOutASlowThrottleAndAHang) {
  const std::shared_ptr<const RetryPolicy> policy = ThrottledIsNotApplied();
  h_.UseDefaults();
  h_.clock().SetWakeLateness(milliseconds(5), /*seed=*/7);
  h_.Push(Step::Respond(200, {}, R"({"error":"throttled"})").After(milliseconds(400)));
  h_.Push(Step::TimeoutAfterSend());
  h_.Push(Step::Respond(404, {{"Idempotency-Key-State", "unknown"}}));
  h_.Push(Step::Respond(201, {}, R"({"order_id":7})"));
  CallOptions call;
  call.policy = policy;
  call.status_url = kStatus;
  const TimePoint start = h_.clock().Now();
  CallResult r = h_.Run(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.attempts, 3);
  EXPECT_EQ(r.status_queries, 1);
  ASSERT_EQ(r.evidence.size(), 4u);
  EXPECT_EQ(r.evidence[0].classification, AttemptClass::kRetryableTransient);
  EXPECT_EQ(r.evidence[1].classification, AttemptClass::kAmbiguous);
  EXPECT_TRUE(r.evidence[2].is_status_query);
  EXPECT_EQ(r.evidence[3].classification, AttemptClass::kSuccess);
  EXPECT_EQ(h_.sends(), 4);
  EXPECT_LE(h_.clock().Now(), start + seconds(30));  // the policy's default timeout
}

// As a user would run it behind a gateway: the client's defaults, a clock that
// wakes up to 5 ms late; a POST that hangs until its timeout, a status query
// that finds nothing, a same-key resend the gateway answers 503 itself after
// 400 ms (unmarked), then the key "in progress" and at last found. Never a
// fresh request, never FAILED.
TEST_P(ParityTest, DefaultsOnALateClockSettleAHangAndAGateways503ByStatusQueries) {
  h_.UseDefaults();
  h_.clock().SetWakeLateness(milliseconds(5), /*seed=*/11);
  h_.Push(Step::TimeoutAfterSend());
  h_.Push(Step::Respond(404, {{"Idempotency-Key-State", "unknown"}}));
  h_.Push(Step::Respond(503, {}, "upstream connect error or disconnect/reset before headers")
              .After(milliseconds(400)));
  h_.Push(Step::Respond(409, {{"Idempotency-Key-State", "processing"}}));
  h_.Push(Step::Respond(200, {{"Idempotency-Key-State", "completed"}}, R"({"order_id":7})"));
  CallOptions call;
  call.status_url = kStatus;
  const TimePoint start = h_.clock().Now();
  CallResult r = h_.Run(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kStatusQuery);
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(r.status_queries, 3);
  ASSERT_EQ(r.evidence.size(), 5u);
  EXPECT_EQ(r.evidence[0].classification, AttemptClass::kAmbiguous);
  EXPECT_EQ(r.evidence[2].classification, AttemptClass::kUnavailableUnproven);
  EXPECT_TRUE(r.evidence[3].is_status_query);
  EXPECT_EQ(h_.sends(), 5);
  std::set<std::string> keys;
  for (const testkit::SentRequest& sent : h_.sent()) {
    for (const Header& hd : sent.request.headers) {
      if (hd.first == "Idempotency-Key") keys.insert(hd.second);
    }
  }
  EXPECT_EQ(keys.size(), 1u);  // one intent, one key
  EXPECT_LE(h_.clock().Now(), start + seconds(30));
}

// As a user would run it, on what 0.3.0 changed in the call's hot path: the
// client's defaults, a clock that wakes up to 5 ms late, a keyed POST whose
// attempt hangs until its timeout, two "in progress" answers, a 503 whose
// Retry-After is a date measured against the server's Date, then the order.
// Every send carries the key, the deadline of its own timeout and (the
// attempt only) its attempt number, written by the call in place; nothing is
// resent and the outcome rests on the status answer.
TEST_P(ParityTest, DefaultsOnALateClockCarryTheAddedHeadersThroughAHangAndADatedRetryAfter) {
  h_.UseDefaults();
  h_.clock().SetWakeLateness(milliseconds(5), /*seed=*/11);
  h_.Push(Step::TimeoutAfterSend());
  h_.Push(Step::Respond(409, {}, "processing"));
  h_.Push(Step::Respond(409, {}, "processing"));
  h_.Push(Step::Respond(503, {{"Date", "Thu, 01 Jan 2026 00:00:00 GMT"},
                              {"Retry-After", "Thu, 01 Jan 2026 00:00:02 GMT"}}));
  h_.Push(Step::Respond(200, {}, R"({"order_id":7})"));
  CallOptions call;
  call.status_url = kStatus;
  const TimePoint start = h_.clock().Now();
  CallResult r = h_.Run(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kStatusQuery);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.status_queries, 4);
  ASSERT_EQ(r.evidence.size(), 5u);
  EXPECT_EQ(r.evidence[0].classification, AttemptClass::kAmbiguous);
  // The dated hint, measured against the server's Date: exactly 2 s.
  ASSERT_TRUE(r.evidence[3].delay_after.has_value());
  EXPECT_EQ(*r.evidence[3].delay_after, seconds(2));
  EXPECT_TRUE(r.evidence[3].delay_from_server_hint);
  EXPECT_LE(h_.clock().Now(), start + seconds(30));

  const std::vector<testkit::SentRequest> sent = h_.sent();
  ASSERT_EQ(sent.size(), 5u);
  ASSERT_TRUE(r.idempotency_key.has_value());
  for (std::size_t i = 0; i < sent.size(); ++i) {
    SCOPED_TRACE(i);
    const Headers& headers = sent[i].request.headers;
    EXPECT_EQ(FindHeader(headers, "Idempotency-Key"), *r.idempotency_key);
    EXPECT_EQ(FindHeader(headers, "X-Request-Timeout-Ms"), EncodeDeadlineHeader(sent[i].timeout));
    if (i == 0) {
      EXPECT_EQ(sent[i].request.method, "POST");
      EXPECT_EQ(FindHeader(headers, "X-Retry-Attempt"), "attempt=1; max=3");
    } else {
      EXPECT_EQ(sent[i].request.method, "GET");
      EXPECT_EQ(FindHeader(headers, "X-Retry-Attempt"), std::nullopt);
    }
  }
}

TEST_P(ParityTest, CommitThenLostIsResolvedByStatusQuery) {
  auto server = std::make_shared<SimulatedOrderServer>(h_.shared_clock());
  server->ScriptFaults({OrderFault::kCommitThenLoseResponse});
  h_.UseServer(server);
  CallOptions call;
  call.status_url = kStatus;
  CallResult r = h_.Run(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kStatusQuery);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.status_queries, 1);
  ASSERT_TRUE(r.idempotency_key.has_value());
  EXPECT_EQ(server->effects(*r.idempotency_key), 1);
  EXPECT_EQ(server->total_effects(), 1);
  EXPECT_THAT(Waits(r), ElementsAre(microseconds(37500)));
}

// A gateway in front of the server answers 503 itself, unmarked, after the
// origin committed (or before it did: the client cannot tell). On every
// driver: doubt, settled by a status query where there is one, never a
// fresh request, never FAILED without proof (docs/adr/0031).
std::shared_ptr<const RetryPolicy> KeylessPolicy() {
  RetryPolicyOptions o;
  o.key_mode = KeyMode::kNever;
  return RetryPolicy::Create(o).value();
}

std::shared_ptr<const RetryPolicy> FencingPolicy() {
  RetryPolicyOptions o;
  o.status_query.fence_when_giving_up = true;
  return RetryPolicy::Create(o).value();
}

TEST_P(ParityTest, GatewayUnavailableAfterCommitIsSettledByTheStatusQuery) {
  auto server = std::make_shared<SimulatedOrderServer>(h_.shared_clock());
  server->ScriptFaults({OrderFault::kCommitThenGatewayUnavailable});
  h_.UseServer(server);
  h_.UseDefaults();
  CallOptions call;
  call.status_url = kStatus;
  CallResult r = h_.Run(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kStatusQuery);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.status_queries, 1);
  ASSERT_FALSE(r.evidence.empty());
  EXPECT_EQ(r.evidence[0].classification, AttemptClass::kUnavailableUnproven);
  ASSERT_TRUE(r.idempotency_key.has_value());
  EXPECT_EQ(server->effects(*r.idempotency_key), 1);
  EXPECT_EQ(server->total_effects(), 1);
  EXPECT_EQ(server->posts_received(), 1);
}

TEST_P(ParityTest, GatewayUnavailableAfterCommitWithoutAStatusQueryIsUnknown) {
  auto server = std::make_shared<SimulatedOrderServer>(h_.shared_clock());
  server->ScriptFaults({OrderFault::kCommitThenGatewayUnavailable,
                        OrderFault::kCommitThenGatewayUnavailable,
                        OrderFault::kCommitThenGatewayUnavailable});
  h_.UseServer(server);
  h_.UseDefaults();
  CallResult r = h_.Run(Post(), CallOptions{});
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kUnavailableUnresolved);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.status_queries, 0);
  EXPECT_EQ(server->posts_received(), 1);
  EXPECT_EQ(server->total_effects(), 1);
}

TEST_P(ParityTest, GatewayUnavailableKeylessPostIsSentOnceAndEndsUnknown) {
  auto server = std::make_shared<SimulatedOrderServer>(h_.shared_clock());
  server->ScriptFaults({OrderFault::kCommitThenGatewayUnavailable,
                        OrderFault::kCommitThenGatewayUnavailable,
                        OrderFault::kCommitThenGatewayUnavailable});
  h_.UseServer(server);
  h_.UseDefaults();
  CallOptions call;
  call.policy = KeylessPolicy();
  CallResult r = h_.Run(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kUnavailableUnresolved);
  EXPECT_FALSE(r.idempotency_key.has_value());
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(server->posts_received(), 1);
  EXPECT_EQ(server->total_effects(), 1);
}

// Not committed: the status query's plain "not found" proves nothing, so
// the same key is resent and the order is created once.
TEST_P(ParityTest, UnmarkedUnavailableNotCommittedIsQueriedThenResentWithTheSameKey) {
  auto server = std::make_shared<SimulatedOrderServer>(h_.shared_clock());
  server->ScriptFaults({OrderFault::kUnavailable});
  h_.UseServer(server);
  h_.UseDefaults();
  CallOptions call;
  call.status_url = kStatus;
  CallResult r = h_.Run(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kResponse);
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(r.status_queries, 1);
  ASSERT_TRUE(r.idempotency_key.has_value());
  EXPECT_EQ(server->effects(*r.idempotency_key), 1);
  EXPECT_EQ(server->total_effects(), 1);
}

// Never committed, three unmarked 503s: the plain "not found" answers leave
// it UNKNOWN; with the fence the last query proves it absent: FAILED.
TEST_P(ParityTest, UnmarkedUnavailableEveryTimeIsFailedOnlyWhenTheFenceProvesIt) {
  for (const bool fence : {false, true}) {
    SCOPED_TRACE(fence);
    Harness h(GetParam());
    auto server = std::make_shared<SimulatedOrderServer>(h.shared_clock());
    server->ScriptFaults(
        {OrderFault::kUnavailable, OrderFault::kUnavailable, OrderFault::kUnavailable});
    h.UseServer(server);
    h.SetBudget(MakeUnlimitedBudget());
    CallOptions call;
    call.status_url = kStatus;
    call.timeout = seconds(30);
    if (fence) call.policy = FencingPolicy();
    CallResult r = h.Run(Post(), call);
    EXPECT_EQ(r.attempts, 3);
    EXPECT_EQ(server->total_effects(), 0);
    if (fence) {
      EXPECT_EQ(r.outcome, Outcome::kFailed);
      EXPECT_EQ(r.stop_reason, StopReason::kFenced);
      EXPECT_EQ(r.status_queries, 4);
    } else {
      EXPECT_EQ(r.outcome, Outcome::kUnknown);
      EXPECT_EQ(r.stop_reason, StopReason::kNotFoundNoAttemptsLeft);
      EXPECT_EQ(r.status_queries, 3);
    }
  }
}

// `Idempotency-Key-State: rejected` proves the 503 was not processed: retried
// as transient, and FAILED at the cap with nothing sent but the attempts.
TEST_P(ParityTest, MarkedUnavailableIsRetriedAndFailsWithoutAQuery) {
  auto server = std::make_shared<SimulatedOrderServer>(h_.shared_clock());
  server->ScriptFaults({OrderFault::kRejectBeforeWork, OrderFault::kRejectBeforeWork,
                        OrderFault::kRejectBeforeWork});
  h_.UseServer(server);
  CallOptions call;
  call.status_url = kStatus;
  CallResult r = h_.Run(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kAttemptsExhausted);
  EXPECT_EQ(r.attempts, 3);
  EXPECT_EQ(r.status_queries, 0);
  EXPECT_EQ(server->total_effects(), 0);
}

TEST_P(ParityTest, InProgressPollsWithTheSameKey) {
  auto server = std::make_shared<SimulatedOrderServer>(h_.shared_clock());
  server->ScriptFaults({OrderFault::kInProgressThenCommit});
  h_.UseServer(server);
  CallResult r = h_.Run(Post(), CallOptions{});
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(r.status_queries, 0);
  EXPECT_EQ(r.evidence[0].classification, AttemptClass::kInProgress);
  EXPECT_EQ(server->effects(*r.idempotency_key), 1);
  EXPECT_THAT(Waits(r), ElementsAre(microseconds(37500)));
}

TEST_P(ParityTest, InProgressPollsByStatusQueryWhenConfigured) {
  h_.Push(Step::Respond(409));
  h_.Push(Step::Respond(409));
  h_.Push(Step::Respond(200, {}, "done"));
  CallOptions call;
  call.status_url = kStatus;
  CallResult r = h_.Run(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_TRUE(r.resolved_by_status_query);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.status_queries, 2);
  EXPECT_THAT(Waits(r), ElementsAre(microseconds(37500), microseconds(56250)));
}

// The key's stored final error (404 `completed`) is definite: FAILED.
TEST_P(ParityTest, StoredFinalErrorFoundByStatusQueryIsFailed) {
  auto server = std::make_shared<SimulatedOrderServer>(h_.shared_clock());
  server->ScriptFaults({OrderFault::kStoredFinalErrorThenLose});
  h_.UseServer(server);
  h_.UseDefaults();
  CallOptions call;
  call.timeout = seconds(5);
  call.status_url = kStatus;
  CallResult r = h_.Run(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kPermanentError);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kStatusQuery);
  ASSERT_TRUE(r.last_response.has_value());
  EXPECT_EQ(r.last_response->status_code, 404);
  EXPECT_EQ(server->total_effects(), 0);
}

// Rule 1 on both drivers: an attempt reset before it reached the service, a
// status query "not found", a same-key resend answered with the service's
// first-time stored 400 (marked `completed`): definite, FAILED.
TEST_P(ParityTest, ResetThenFirstTimeStoredErrorIsFailed) {
  auto server = std::make_shared<SimulatedOrderServer>(h_.shared_clock());
  server->ScriptFaults({OrderFault::kDropBeforeCommit, OrderFault::kStoredFinalError});
  h_.UseServer(server);
  h_.UseDefaults();
  CallOptions call;
  call.timeout = seconds(3);
  call.status_url = kStatus;
  CallResult r = h_.Run(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kPermanentError);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kResponse);
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(r.status_queries, 1);
  EXPECT_EQ(server->total_effects(), 0);
}

// The same sequence with a 400 that nobody marked (a gateway's): one
// settling status query, whose "not found" does not lead to a resend.
TEST_P(ParityTest, ResetThenUnmarkedClientErrorIsSettledOrUnknown) {
  auto server = std::make_shared<SimulatedOrderServer>(h_.shared_clock());
  server->ScriptFaults({OrderFault::kDropBeforeCommit, OrderFault::kUnmarkedClientError});
  h_.UseServer(server);
  CallOptions call;
  call.timeout = seconds(3);
  call.status_url = kStatus;
  CallResult r = h_.Run(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kAnswerNotDefinite);
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(r.status_queries, 2);
  EXPECT_EQ(server->posts_received(), 2);
  EXPECT_EQ(server->total_effects(), 0);
}

// Rule 2 on both drivers: the caller's key ran before and its record was
// reaped; the 410 `expired` is asked about, never resent, never FAILED.
TEST_P(ParityTest, ExpiredKeyOfAnEarlierOrderIsFoundByTheStatusQuery) {
  auto server = std::make_shared<SimulatedOrderServer>(h_.shared_clock());
  h_.UseServer(server);
  h_.UseDefaults();
  CallOptions call;
  call.timeout = seconds(3);
  call.idempotency_key = "order-2026-0001";
  call.status_url = kStatus;
  CallResult first = h_.Run(Post(), call);
  ASSERT_EQ(first.outcome, Outcome::kSucceeded);
  server->Expire("order-2026-0001");
  CallResult r = h_.Run(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kStatusQuery);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.status_queries, 1);
  ASSERT_TRUE(r.last_response.has_value());
  EXPECT_EQ(r.last_response->status_code, 201);
  EXPECT_EQ(server->posts_received(), 2);
  EXPECT_EQ(server->total_effects(), 1);

  // Without a status query: UNKNOWN with a reason of its own, no resend.
  CallOptions blind = call;
  blind.status_url.clear();
  CallResult u = h_.Run(Post(), blind);
  EXPECT_EQ(u.outcome, Outcome::kUnknown);
  EXPECT_EQ(u.stop_reason, StopReason::kKeyExpired);
  EXPECT_EQ(u.attempts, 1);
  EXPECT_EQ(server->posts_received(), 3);
}

TEST_P(ParityTest, BudgetRefusalStops) {
  auto throttle = MakeTokenThrottle({/*max_tokens=*/2, /*token_ratio=*/0.1});
  ASSERT_TRUE(throttle.ok());
  h_.SetBudget(*throttle);
  h_.Push(Step::Respond(503));
  h_.Push(Step::Respond(503));
  CallResult r = h_.Run(Get(), CallOptions{});
  EXPECT_EQ(r.stop_reason, StopReason::kBudgetExhausted);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(h_.sends(), 1);
}

// Hung attempts of a GET: each gets half of the call, the next one fits,
// and the call stops by the deadline, never past it.
TEST_P(ParityTest, DeadlineStopsHungGets) {
  for (int i = 0; i < 5; ++i) h_.Push(Step::TimeoutAfterSend());
  CallOptions call;
  call.timeout = seconds(1);
  saferetry::RetryPolicyOptions call_policy;
  call_policy.max_attempts = 5;
  const TimePoint start = h_.clock().Now();
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  CallResult r = h_.Run(Get(), call);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_TRUE(r.stop_reason == StopReason::kDeadlineExceeded ||
              r.stop_reason == StopReason::kNoTimeForUsefulAttempt)
      << StopReasonName(r.stop_reason);
  EXPECT_LE(h_.clock().Now(), start + seconds(1));
  EXPECT_GE(r.attempts, 2);
}

TEST_P(ParityTest, CancelledDuringAWaitStopsBeforeTheNextAttempt) {
  CancellationToken token;
  struct CancelOnWait : CallListener {
    CancellationToken* token = nullptr;
    void OnWaitScheduled(Duration, bool) override { token->Cancel(); }
  } listener;
  listener.token = &token;
  h_.Push(Step::RespondRejected());
  h_.Push(Step::Respond(201));
  CallOptions call;
  call.cancellation = &token;
  call.listener = &listener;
  CallResult r = h_.Run(Post(), call);
  EXPECT_EQ(r.stop_reason, StopReason::kCancelled);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(h_.sends(), 1);
  EXPECT_EQ(r.elapsed, milliseconds(1));
}

TEST_P(ParityTest, CancelledBeforeStartSendsNothing) {
  CancellationToken token;
  token.Cancel();
  CallOptions call;
  call.cancellation = &token;
  CallResult r = h_.Run(Post(), call);
  EXPECT_EQ(r.stop_reason, StopReason::kCancelled);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(h_.sends(), 0);
}

TEST_P(ParityTest, BadInputNamesTheField) {
  // The policy is checked once, when it is built; a call checks its own
  // fields only.
  RetryPolicyOptions p;
  p.max_attempts = 0;
  EXPECT_THAT(std::string(RetryPolicy::Create(p).status().message()),
              ::testing::StartsWith("policy.max_attempts:"));
  CallOptions call;
  call.status_url = "http://h/orders/by-key/";
  CallResult r = h_.Run(Post(), call);
  EXPECT_EQ(r.stop_reason, StopReason::kInvalidArgument);
  EXPECT_THAT(std::string(r.status.message()), ::testing::StartsWith("call.status_url:"));
  call = CallOptions{};
  call.timeout = Duration::zero();
  r = h_.Run(Post(), call);
  EXPECT_EQ(r.stop_reason, StopReason::kInvalidArgument);
  EXPECT_THAT(std::string(r.status.message()), ::testing::StartsWith("call.timeout:"));
  EXPECT_EQ(h_.sends(), 0);
}

TEST_P(ParityTest, ListenerSeesEveryStepInOrder) {
  struct Recorder : CallListener {
    std::vector<std::string> events;
    void OnAttemptStart(int n, bool q) override { events.push_back(absl_like("start", n, q)); }
    void OnAttemptEnd(const AttemptEvidence& e) override {
      events.push_back(absl_like("end", e.number, e.is_status_query));
    }
    void OnWaitScheduled(Duration, bool) override { events.push_back("wait"); }
    void OnFinish(const CallResult&) override { events.push_back("finish"); }
    static std::string absl_like(const char* what, int n, bool q) {
      return std::string(what) + (q ? " query " : " attempt ") + std::to_string(n);
    }
  } listener;
  h_.Push(Step::CommitThenLost());
  h_.Push(Step::Respond(200, {}, "found"));
  CallOptions call;
  call.status_url = kStatus;
  call.listener = &listener;
  CallResult r = h_.Run(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_THAT(listener.events, ElementsAre("start attempt 1", "end attempt 1", "wait",
                                           "start query 1", "end query 1", "finish"));
}

// The defaults on a couple of deadlines: the server commits, then hangs;
// the planned attempt timeout leaves time for a status query that finds
// the order.
class ParityDeadlineGrid : public ::testing::TestWithParam<std::tuple<Driver, Duration>> {};

INSTANTIATE_TEST_SUITE_P(
    DriversAndDeadlines, ParityDeadlineGrid,
    ::testing::Combine(::testing::Values(SAFERETRY_PARITY_DRIVERS),
                       ::testing::Values(Duration(seconds(1)), Duration(seconds(5)))),
    [](const auto& p) {
      return DriverName(std::get<0>(p.param)) + "_" +
             std::to_string(
                 std::chrono::duration_cast<milliseconds>(std::get<1>(p.param)).count()) +
             "ms";
    });

TEST_P(ParityDeadlineGrid, CommitThenHangSucceedsThroughAStatusQuery) {
  Harness h(std::get<0>(GetParam()));
  const Duration t = std::get<1>(GetParam());
  auto server = std::make_shared<SimulatedOrderServer>(h.shared_clock());
  server->ScriptFaults({OrderFault::kCommitThenHang});
  h.UseServer(server);
  h.UseDefaults();
  CallOptions call;
  call.timeout = t;
  call.status_url = kStatus;
  const TimePoint start = h.clock().Now();
  CallResult r = h.Run(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded) << StopReasonName(r.stop_reason);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kStatusQuery);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(server->posts_received(), 1);
  EXPECT_EQ(server->total_effects(), 1);
  // T - 30 % of T - 10 ms margin.
  const Duration planned = t - t / 10 * 3 - milliseconds(10);
  ASSERT_GE(r.evidence.size(), 2u);
  EXPECT_EQ(r.evidence[0].end - r.evidence[0].start, planned);
  EXPECT_LE(h.clock().Now(), start + t);
}

// Rule 5 on both drivers: a wait the machine scheduled always leads to a
// send, on a clock that wakes 0-5 ms late. Always-503, a grid of deadlines,
// attempt timeouts and jitter draws: no call ends no_time_for_useful_attempt
// right after a wait it chose, and the last send leaves no room for another.
class LateClockGrid
    : public ::testing::TestWithParam<std::tuple<Driver, Duration, Duration, double>> {};

INSTANTIATE_TEST_SUITE_P(
    DriversDeadlinesTimeoutsDraws, LateClockGrid,
    ::testing::Combine(::testing::Values(SAFERETRY_PARITY_DRIVERS),
                       ::testing::Values(Duration(milliseconds(300)), Duration(seconds(1)),
                                         Duration(milliseconds(1500)), Duration(seconds(3))),
                       ::testing::Values(Duration(milliseconds(100)), Duration(seconds(1))),
                       ::testing::Values(0.0, 0.5, testkit::kJustBelowOne)),
    [](const auto& p) {
      return DriverName(std::get<0>(p.param)) + "_" +
             std::to_string(
                 std::chrono::duration_cast<milliseconds>(std::get<1>(p.param)).count()) +
             "ms_cap" +
             std::to_string(
                 std::chrono::duration_cast<milliseconds>(std::get<2>(p.param)).count()) +
             "ms_u" + std::to_string(static_cast<int>(std::get<3>(p.param) * 100));
    });

TEST_P(LateClockGrid, AScheduledWaitAlwaysLeadsToASend) {
  const auto [driver, timeout, cap, u] = GetParam();
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    SCOPED_TRACE(seed);
    Harness h(driver);
    h.clock().SetWakeLateness(milliseconds(5), seed);
    h.SetUniform(u);
    for (int i = 0; i < kMaxAttemptsHardCap; ++i) h.Push(Step::Respond(503));
    CallOptions call;
    call.timeout = timeout;
    saferetry::RetryPolicyOptions call_policy;
    call_policy.max_attempts = kMaxAttemptsHardCap;
    call_policy.deadline_options.attempt_cap = cap;
    const TimePoint start = h.clock().Now();
    call.policy = saferetry::RetryPolicy::Create(call_policy).value();
    CallResult r = h.Run(Get(), call);
    ASSERT_FALSE(r.evidence.empty());
    if (r.stop_reason == StopReason::kNoTimeForUsefulAttempt) {
      EXPECT_FALSE(r.evidence.back().delay_after.has_value())
          << "no send after a wait the machine chose";
    }
    if (r.stop_reason != StopReason::kAttemptsExhausted) {
      // Out of time: the last send started when no other useful attempt
      // (50 ms + 10 ms margin + a 1 ms answer) could follow it.
      const TimePoint last = r.evidence.back().start;
      EXPECT_GT(last + milliseconds(50) + milliseconds(10) + milliseconds(1),
                start + timeout - milliseconds(50) - milliseconds(10))
          << "last send at " << std::chrono::duration_cast<milliseconds>(last - start).count()
          << " ms, stop " << StopReasonName(r.stop_reason);
    }
    EXPECT_LE(h.clock().Now(), start + timeout);
  }
}

// --- Resolve: one engine on both drivers ---------------------------------

class ResolveParityTest : public ParityTest {
 protected:
  // "k-1" as a killed process left it: recorded, attempt 1 marked sent.
  // With `body_cap`, the journal keeps the body (a same-key resend is
  // possible).
  void LeaveSent(std::size_t body_cap = 0, const Request& original = Post()) {
    JournalOptions jo;
    jo.clock = h_.shared_clock();
    jo.owner = "parity";
    jo.body_cap = body_cap;
    journal_ = saferetry::testkit::MakeMemoryJournal(jo).value();
    const WallTime now = h_.clock().WallNow();
    ASSERT_TRUE(journal_->Record(MakeIntent(original, "k-1", kStatus, now, now + seconds(1))).ok());
    ASSERT_TRUE(journal_->MarkSent("k-1", 1).ok());
    h_.clock().Advance(seconds(10));  // its claim ran out with it
    h_.UseJournal(journal_);
  }
  IntentState Stored() { return journal_->Get("k-1").value().state; }
  std::shared_ptr<IntentJournal> journal_;
};

INSTANTIATE_TEST_SUITE_P(Drivers, ResolveParityTest, ::testing::Values(SAFERETRY_PARITY_DRIVERS),
                         [](const auto& p) { return DriverName(p.param); });

// As a user would run it: default options, the client's defaults (real
// budgets and jitter), a clock that wakes up to 5 ms late, a status query
// that hangs until its timeout, a long "in progress", then the order.
TEST_P(ResolveParityTest, DefaultsOnALateClockRideOutAHangAndALongInProgress) {
  LeaveSent();
  h_.UseDefaults();
  h_.clock().SetWakeLateness(milliseconds(5), /*seed=*/3);
  h_.Push(Step::TimeoutAfterSend());
  for (int i = 0; i < 6; ++i) h_.Push(Step::Respond(409, {}, "processing"));
  h_.Push(Step::Respond(200, {}, R"({"id":7})"));
  const TimePoint start = h_.clock().Now();
  CallResult r = h_.Resolve("k-1", ResolveOptions{});  // 10 s, 5 queries by default
  // The default cap (5 queries) ends it before the order shows: UNKNOWN,
  // never FAILED, nothing resent.
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kStatusQueriesExhausted);
  EXPECT_EQ(r.status_queries, 5);
  EXPECT_EQ(r.attempts, 0);
  EXPECT_LE(h_.clock().Now(), start + seconds(10));
  EXPECT_EQ(Stored(), IntentState::kUnknown);

  // A second run (the reconciler's next round) with room for more queries
  // finds it; it carries the reconciler's trace context on each query.
  ResolveOptions more;
  more.max_status_queries = 20;
  more.trace_context = TraceContext{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ""};
  CallResult found = h_.Resolve("k-1", more);
  EXPECT_EQ(found.outcome, Outcome::kSucceeded);
  EXPECT_EQ(found.resolved_by, ResolvedBy::kStatusQuery);
  EXPECT_EQ(found.status_queries, 3);  // two more "in progress", then the order
  EXPECT_EQ(found.attempts, 0);
  EXPECT_EQ(Stored(), IntentState::kSucceeded);
  const std::string mine = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 ";
  EXPECT_THAT(TraceHeadersOnTheWire(h_.sent()), ElementsAre("", "", "", "", "", mine, mine, mine));
}

// The journaled request carried the original call's traceparent.
Request TracedPost() {
  Request post = Post();
  post.headers.emplace_back("traceparent",
                            "00-11111111111111111111111111111111-2222222222222222-01");
  return post;
}

// A resolver's trace context goes on each of its status queries in place of
// the one the journaled request carried, and into the evidence.
TEST_P(ResolveParityTest, TheResolversTraceContextReplacesTheJournaledOne) {
  LeaveSent(0, TracedPost());
  h_.Push(Step::Respond(409, {}, "processing"));
  h_.Push(Step::Respond(200, {}, R"({"id":7})"));
  ResolveOptions options;
  options.trace_context =
      TraceContext{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "congo=t61"};
  CallResult r = h_.Resolve("k-1", options);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.status_queries, 2);
  EXPECT_EQ(r.attempts, 0);
  EXPECT_THAT(TraceHeadersOnTheWire(h_.sent()),
              ElementsAre("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 congo=t61 ",
                          "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 congo=t61 "));
  ASSERT_EQ(r.evidence.size(), 2u);
  for (const AttemptEvidence& ev : r.evidence) {
    EXPECT_EQ(TraceIdHex(ev.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
    EXPECT_EQ(SpanIdHex(ev.span_id), "00f067aa0ba902b7");
  }
  EXPECT_EQ(Stored(), IntentState::kSucceeded);
}

// Without one (and without a tracer), the journaled traceparent goes as it is.
TEST_P(ResolveParityTest, WithoutATraceContextTheJournaledTraceparentGoesAsItIs) {
  LeaveSent(0, TracedPost());
  h_.Push(Step::Respond(200, {}, R"({"id":7})"));
  CallResult r = h_.Resolve("k-1", ResolveOptions{});
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_THAT(TraceHeadersOnTheWire(h_.sent()),
              ElementsAre("00-11111111111111111111111111111111-2222222222222222-01 "));
  ASSERT_EQ(r.evidence.size(), 1u);
  EXPECT_EQ(TraceIdHex(r.evidence[0].trace_id), "11111111111111111111111111111111");
}

TEST_P(ResolveParityTest, FoundIsSucceededByOneStatusQuery) {
  LeaveSent();
  h_.Push(Step::Respond(200, {}, R"({"id":7})"));
  CallResult r = h_.Resolve("k-1", ResolveOptions{});
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kStatusQuery);
  EXPECT_EQ(r.status_queries, 1);
  EXPECT_EQ(r.attempts, 0);
  EXPECT_EQ(h_.sends(), 1);
  EXPECT_EQ(Stored(), IntentState::kSucceeded);
}

TEST_P(ResolveParityTest, RetryAfterIsWaitedOutAndTheQueryCapHolds) {
  LeaveSent();
  h_.Push(Step::RespondRetryAfter(503, "1"));
  h_.Push(Step::Respond(503));
  h_.Push(Step::Respond(503));
  ResolveOptions ro;
  ro.max_status_queries = 3;
  CallResult r = h_.Resolve("k-1", ro);
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kStatusQueriesExhausted);
  EXPECT_EQ(r.status_queries, 3);
  EXPECT_EQ(r.attempts, 0);
  // The hint is a floor under the pacing (equal jitter, u = 0.5: 37.5 ms,
  // then 56.25 ms).
  EXPECT_THAT(Waits(r), ElementsAre(seconds(1), microseconds(56250)));
  EXPECT_EQ(Stored(), IntentState::kUnknown);
}

TEST_P(ResolveParityTest, UnfencedNotFoundStaysUnknownAndNothingIsResent) {
  LeaveSent(/*body_cap=*/1024);
  h_.Push(Step::Respond(404));
  CallResult r = h_.Resolve("k-1", ResolveOptions{});
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kNotFoundNoAttemptsLeft);
  EXPECT_EQ(r.attempts, 0);
  EXPECT_EQ(h_.sends(), 1);
  EXPECT_EQ(Stored(), IntentState::kUnknown);
}

TEST_P(ResolveParityTest, AllowedResendAfterNotFoundSettlesIt) {
  LeaveSent(/*body_cap=*/1024);
  h_.Push(Step::Respond(404));
  h_.Push(Step::Respond(201, {}, R"({"id":8})"));
  ResolveOptions ro;
  ro.resend_if_server_deduplicates = true;
  CallResult r = h_.Resolve("k-1", ro);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kResponse);
  EXPECT_EQ(r.status_queries, 1);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(journal_->Get("k-1").value().attempt, 2);  // marked before it was sent
  EXPECT_EQ(Stored(), IntentState::kSucceeded);
}

}  // namespace
}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Metrics: exact counts after a scripted run, nothing lost under 8 threads,
// the exact Prometheus text of a tiny case, and the listener fan-out;
// endpoint labels, the server cap, hedges and the retry delay, and no
// allocation when recording a call on a registered endpoint.

#include "saferetry/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <thread>
#include <vector>

#include "saferetry/client.h"
#include "saferetry/testing/fake_clock.h"
#include "saferetry/testing/fake_random.h"
#include "saferetry/testing/fake_transport.h"
#include "saferetry/trace.h"

// Counts operator new while `g_count_allocations` is set. GCC flags free()
// of memory from a replaced operator new as mismatched; both sides are ours.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
std::atomic<bool> g_count_allocations{false};
std::atomic<long> g_allocations{0};

void* operator new(std::size_t n) {
  if (g_count_allocations.load(std::memory_order_relaxed)) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace saferetry {
namespace {

using std::chrono::milliseconds;
using ::testing::ElementsAre;
using testkit::FakeClock;
using testkit::FakeTransport;
using testkit::ScriptedRandom;
using testkit::Step;

Request Get() {
  Request r;
  r.url = "http://127.0.0.1:8080/orders/1";
  return r;
}

Request Post() {
  Request r;
  r.method = "POST";
  r.url = "http://127.0.0.1:8080/orders";
  r.body = "{}";
  return r;
}

class MetricsRunTest : public ::testing::Test {
 protected:
  std::unique_ptr<Client> Make(std::shared_ptr<RetryBudget> budget) {
    ClientOptions o;
    o.transport = transport_;
    o.clock = clock_;
    o.random = std::make_shared<ScriptedRandom>();  // u = 0.5
    o.budget = std::move(budget);
    auto c = Client::Create(std::move(o));
    EXPECT_TRUE(c.ok()) << c.status();
    return *std::move(c);
  }

  std::shared_ptr<FakeClock> clock_ = std::make_shared<FakeClock>();
  std::shared_ptr<FakeTransport> transport_ = std::make_shared<FakeTransport>(clock_);
  std::shared_ptr<Metrics> metrics_ = std::make_shared<Metrics>();
};

TEST_F(MetricsRunTest, CountsAfterAScriptedRunAreExact) {
  auto client = Make(MakeUnlimitedBudget());
  auto stingy = Make(*MakeTokenThrottle({1, 0.1}));  // refuses the first retry
  MetricsListener listener(metrics_);
  TraceRecorder trace;
  ListenerChain chain({&listener, nullptr, &trace});
  CallOptions call;
  call.listener = &chain;
  saferetry::RetryPolicyOptions call_policy;
  call_policy.max_attempts = 2;
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  CallOptions with_query = call;
  with_query.status_url = "http://127.0.0.1:8080/orders/by-key/{key}";

  transport_->Push(Step::Respond(200));  // A: success
  EXPECT_EQ(client->Execute(Get(), call).stop_reason, StopReason::kSuccess);
  transport_->Push(Step::Respond(503)).Push(Step::Respond(503));  // B: attempts exhausted
  EXPECT_EQ(client->Execute(Get(), call).stop_reason, StopReason::kAttemptsExhausted);
  transport_->Push(Step::CommitThenLost()).Push(Step::Respond(200));  // C: resolved by query
  CallResult c = client->Execute(Post(), with_query);
  EXPECT_TRUE(c.resolved_by_status_query);
  transport_->Push(Step::CommitThenLost());  // D: unknown
  EXPECT_EQ(client->Execute(Post(), call).outcome, Outcome::kUnknown);
  transport_->Push(Step::Respond(503));  // E: budget refuses
  EXPECT_EQ(stingy->Execute(Get(), call).stop_reason, StopReason::kBudgetExhausted);
  transport_->Push(Step::RespondRetryAfter(503, "1")).Push(Step::Respond(200));  // F: hint
  EXPECT_EQ(client->Execute(Get(), call).outcome, Outcome::kSucceeded);
  Request bad = Get();
  bad.url = "ftp://127.0.0.1/x";  // G: invalid, nothing sent, no listener hook
  EXPECT_EQ(client->Execute(bad, call).stop_reason, StopReason::kInvalidArgument);
  EXPECT_EQ(transport_->remaining_steps(), 0u);
  EXPECT_FALSE(trace.json().empty());  // the chain reached the recorder too

  const MetricsSnapshot s = metrics_->Snapshot();
  EXPECT_EQ(s.calls, 6);  // G never reached the listener
  EXPECT_EQ(s.calls_started, 6);
  EXPECT_EQ(s.attempts, 8);
  EXPECT_EQ(s.retries, 2);
  EXPECT_DOUBLE_EQ(s.amplification, 8.0 / 6.0);
  EXPECT_EQ(s.status_queries, 1);
  EXPECT_EQ(s.waits_backoff, 2);
  EXPECT_EQ(s.waits_server_hint, 1);
  EXPECT_EQ(s.unknown_resolved_by_status_query, 1);
  EXPECT_EQ(s.budget_refusals, 1);
  EXPECT_EQ(s.unknown_outcomes, 1);
  EXPECT_EQ(s.attempts_by_resend_count, (std::map<int, std::int64_t>{{0, 6}, {1, 2}}));
  using Key = std::pair<Outcome, StopReason>;
  EXPECT_EQ(
      s.calls_by_outcome_and_stop,
      (std::map<Key, std::int64_t>{{{Outcome::kSucceeded, StopReason::kSuccess}, 3},
                                   {{Outcome::kFailed, StopReason::kAttemptsExhausted}, 1},
                                   {{Outcome::kFailed, StopReason::kBudgetExhausted}, 1},
                                   {{Outcome::kUnknown, StopReason::kAmbiguousUnresolved}, 1}}));
  EXPECT_EQ(s.calls_by_outcome,
            (std::map<Outcome, std::int64_t>{
                {Outcome::kSucceeded, 3}, {Outcome::kFailed, 2}, {Outcome::kUnknown, 1}}));
  EXPECT_EQ(s.stops_by_reason.at(StopReason::kSuccess), 3);

  ASSERT_EQ(s.request_duration_by_status.size(), 3u);
  const HistogramSnapshot& ok = s.request_duration_by_status.at("200");
  EXPECT_EQ(ok.count, 3);
  EXPECT_EQ(ok.sum_nanos, 3000000);
  EXPECT_EQ(ok.counts[0], 3);  // 1 ms <= 5 ms
  EXPECT_EQ(s.request_duration_by_status.at("503").count, 4);
  EXPECT_EQ(s.request_duration_by_status.at("UNAVAILABLE").count, 2);

  // Whole calls: SUCCEEDED took 1 ms, 39.5 ms (1 + 37.5 ms poll pacing + 1)
  // and 1002 ms (1 + 1 s Retry-After + 1).
  const HistogramSnapshot& succeeded = s.call_duration_by_outcome.at(Outcome::kSucceeded);
  EXPECT_EQ(succeeded.count, 3);
  EXPECT_EQ(succeeded.sum_nanos, 1042500000);
  EXPECT_THAT(succeeded.counts, ElementsAre(1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0));
  const HistogramSnapshot& failed = s.call_duration_by_outcome.at(Outcome::kFailed);
  EXPECT_EQ(failed.count, 2);
  EXPECT_EQ(failed.sum_nanos, 53000000);  // 52 ms + 1 ms
}

CallResult TwoAttemptsAndAQuery() {
  CallResult r;
  r.outcome = Outcome::kSucceeded;
  r.stop_reason = StopReason::kSuccess;
  r.attempts = 2;
  r.status_queries = 1;
  r.resolved_by_status_query = true;
  r.elapsed = milliseconds(30);
  for (int i = 0; i < 3; ++i) {
    AttemptEvidence ev;
    ev.number = i == 2 ? 1 : i + 1;
    ev.is_status_query = i == 2;
    ev.delivery = Delivery::kResponseReceived;
    ev.http_status = i == 0 ? 503 : 200;
    ev.end = ev.start + milliseconds(10);
    if (i < 2) ev.delay_after = milliseconds(5);
    r.evidence.push_back(ev);
  }
  return r;
}

TEST(MetricsTest, EightThreadsLoseNothing) {
  Metrics metrics;
  MetricsListener listener(std::shared_ptr<Metrics>(&metrics, [](Metrics*) {}));
  const CallResult r = TwoAttemptsAndAQuery();
  constexpr int kThreads = 8;
  constexpr int kCalls = 5000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kCalls; ++i) listener.OnFinish(r);
    });
  }
  // A reader racing the writers must see only whole numbers, never garbage.
  std::thread reader([&] {
    for (int i = 0; i < 50; ++i) {
      const MetricsSnapshot s = metrics.Snapshot();
      EXPECT_LE(s.calls, kThreads * kCalls);
    }
  });
  for (auto& t : threads) t.join();
  reader.join();

  const std::int64_t n = kThreads * kCalls;
  const MetricsSnapshot s = metrics.Snapshot();
  EXPECT_EQ(s.calls, n);
  EXPECT_EQ(s.attempts, 2 * n);
  EXPECT_EQ(s.retries, n);
  EXPECT_DOUBLE_EQ(s.amplification, 2.0);
  EXPECT_EQ(s.status_queries, n);
  EXPECT_EQ(s.waits_backoff, 2 * n);
  EXPECT_EQ(s.unknown_resolved_by_status_query, n);
  EXPECT_EQ(s.request_duration_by_status.at("503").count, n);
  EXPECT_EQ(s.request_duration_by_status.at("200").count, 2 * n);
  EXPECT_EQ(s.request_duration_by_status.at("200").sum_nanos, 2 * n * 10000000);
  EXPECT_EQ(s.request_duration_by_status.at("200").counts[1], 2 * n);          // (5 ms, 10 ms]
  EXPECT_EQ(s.call_duration_by_outcome.at(Outcome::kSucceeded).counts[3], n);  // (25, 50] ms
}

TEST(MetricsTest, PrometheusTextOfATinyCase) {
  Metrics metrics;
  CallResult r;
  r.outcome = Outcome::kSucceeded;
  r.stop_reason = StopReason::kSuccess;
  r.attempts = 2;
  r.elapsed = std::chrono::microseconds(106500);
  AttemptEvidence first;
  first.number = 1;
  first.delivery = Delivery::kNotSent;
  first.transport_status = absl::UnavailableError("refused");
  first.end = first.start + milliseconds(5);  // exactly on the first bound
  first.delay_after = milliseconds(100);
  AttemptEvidence second;
  second.number = 2;
  second.delivery = Delivery::kResponseReceived;
  second.http_status = 201;
  second.start = first.end + milliseconds(100);  // after the wait: a retry, not a hedge
  second.end = second.start + std::chrono::microseconds(1500);
  r.evidence = {first, second};
  metrics.RecordCall(r);

  EXPECT_EQ(ToPrometheusText(metrics.Snapshot()),
            R"(# HELP saferetry_calls_total Logical calls finished, by outcome and stop reason.
# TYPE saferetry_calls_total counter
saferetry_calls_total{saferetry_outcome="SUCCEEDED",saferetry_stop_reason="success"} 1
# HELP saferetry_attempts_total Sends of the request (status queries excluded), by resend count (0 = first send).
# TYPE saferetry_attempts_total counter
saferetry_attempts_total{http_request_resend_count="0"} 1
saferetry_attempts_total{http_request_resend_count="1"} 1
# HELP saferetry_retries_total Sends of the request after the first.
# TYPE saferetry_retries_total counter
saferetry_retries_total 1
# HELP saferetry_waits_total Waits before a retry or status query, by source of the delay.
# TYPE saferetry_waits_total counter
saferetry_waits_total{saferetry_delay_source="backoff"} 1
# HELP http_client_request_duration_seconds Duration of HTTP client requests (every attempt and status query).
# TYPE http_client_request_duration_seconds histogram
http_client_request_duration_seconds_bucket{http_response_status_code="201",le="0.005"} 1
http_client_request_duration_seconds_bucket{http_response_status_code="201",le="0.01"} 1
http_client_request_duration_seconds_bucket{http_response_status_code="201",le="0.025"} 1
http_client_request_duration_seconds_bucket{http_response_status_code="201",le="0.05"} 1
http_client_request_duration_seconds_bucket{http_response_status_code="201",le="0.075"} 1
http_client_request_duration_seconds_bucket{http_response_status_code="201",le="0.1"} 1
http_client_request_duration_seconds_bucket{http_response_status_code="201",le="0.25"} 1
http_client_request_duration_seconds_bucket{http_response_status_code="201",le="0.5"} 1
http_client_request_duration_seconds_bucket{http_response_status_code="201",le="0.75"} 1
http_client_request_duration_seconds_bucket{http_response_status_code="201",le="1"} 1
http_client_request_duration_seconds_bucket{http_response_status_code="201",le="2.5"} 1
http_client_request_duration_seconds_bucket{http_response_status_code="201",le="5"} 1
http_client_request_duration_seconds_bucket{http_response_status_code="201",le="7.5"} 1
http_client_request_duration_seconds_bucket{http_response_status_code="201",le="10"} 1
http_client_request_duration_seconds_bucket{http_response_status_code="201",le="+Inf"} 1
http_client_request_duration_seconds_sum{http_response_status_code="201"} 0.0015
http_client_request_duration_seconds_count{http_response_status_code="201"} 1
http_client_request_duration_seconds_bucket{error_type="UNAVAILABLE",le="0.005"} 1
http_client_request_duration_seconds_bucket{error_type="UNAVAILABLE",le="0.01"} 1
http_client_request_duration_seconds_bucket{error_type="UNAVAILABLE",le="0.025"} 1
http_client_request_duration_seconds_bucket{error_type="UNAVAILABLE",le="0.05"} 1
http_client_request_duration_seconds_bucket{error_type="UNAVAILABLE",le="0.075"} 1
http_client_request_duration_seconds_bucket{error_type="UNAVAILABLE",le="0.1"} 1
http_client_request_duration_seconds_bucket{error_type="UNAVAILABLE",le="0.25"} 1
http_client_request_duration_seconds_bucket{error_type="UNAVAILABLE",le="0.5"} 1
http_client_request_duration_seconds_bucket{error_type="UNAVAILABLE",le="0.75"} 1
http_client_request_duration_seconds_bucket{error_type="UNAVAILABLE",le="1"} 1
http_client_request_duration_seconds_bucket{error_type="UNAVAILABLE",le="2.5"} 1
http_client_request_duration_seconds_bucket{error_type="UNAVAILABLE",le="5"} 1
http_client_request_duration_seconds_bucket{error_type="UNAVAILABLE",le="7.5"} 1
http_client_request_duration_seconds_bucket{error_type="UNAVAILABLE",le="10"} 1
http_client_request_duration_seconds_bucket{error_type="UNAVAILABLE",le="+Inf"} 1
http_client_request_duration_seconds_sum{error_type="UNAVAILABLE"} 0.005
http_client_request_duration_seconds_count{error_type="UNAVAILABLE"} 1
# HELP saferetry_call_duration_seconds Duration of logical calls, retries and waits included.
# TYPE saferetry_call_duration_seconds histogram
saferetry_call_duration_seconds_bucket{saferetry_outcome="SUCCEEDED",le="0.005"} 0
saferetry_call_duration_seconds_bucket{saferetry_outcome="SUCCEEDED",le="0.01"} 0
saferetry_call_duration_seconds_bucket{saferetry_outcome="SUCCEEDED",le="0.025"} 0
saferetry_call_duration_seconds_bucket{saferetry_outcome="SUCCEEDED",le="0.05"} 0
saferetry_call_duration_seconds_bucket{saferetry_outcome="SUCCEEDED",le="0.075"} 0
saferetry_call_duration_seconds_bucket{saferetry_outcome="SUCCEEDED",le="0.1"} 0
saferetry_call_duration_seconds_bucket{saferetry_outcome="SUCCEEDED",le="0.25"} 1
saferetry_call_duration_seconds_bucket{saferetry_outcome="SUCCEEDED",le="0.5"} 1
saferetry_call_duration_seconds_bucket{saferetry_outcome="SUCCEEDED",le="0.75"} 1
saferetry_call_duration_seconds_bucket{saferetry_outcome="SUCCEEDED",le="1"} 1
saferetry_call_duration_seconds_bucket{saferetry_outcome="SUCCEEDED",le="2.5"} 1
saferetry_call_duration_seconds_bucket{saferetry_outcome="SUCCEEDED",le="5"} 1
saferetry_call_duration_seconds_bucket{saferetry_outcome="SUCCEEDED",le="7.5"} 1
saferetry_call_duration_seconds_bucket{saferetry_outcome="SUCCEEDED",le="10"} 1
saferetry_call_duration_seconds_bucket{saferetry_outcome="SUCCEEDED",le="+Inf"} 1
saferetry_call_duration_seconds_sum{saferetry_outcome="SUCCEEDED"} 0.1065
saferetry_call_duration_seconds_count{saferetry_outcome="SUCCEEDED"} 1
# HELP saferetry_client_attempt_started_total Sends of the request by attempt type (original, retry, hedge).
# TYPE saferetry_client_attempt_started_total counter
saferetry_client_attempt_started_total{saferetry_attempt_type="original"} 1
saferetry_client_attempt_started_total{saferetry_attempt_type="retry"} 1
# HELP saferetry_call_attempts Sends of the request per call.
# TYPE saferetry_call_attempts histogram
saferetry_call_attempts_bucket{le="0"} 0
saferetry_call_attempts_bucket{le="1"} 0
saferetry_call_attempts_bucket{le="2"} 1
saferetry_call_attempts_bucket{le="3"} 1
saferetry_call_attempts_bucket{le="4"} 1
saferetry_call_attempts_bucket{le="5"} 1
saferetry_call_attempts_bucket{le="10"} 1
saferetry_call_attempts_bucket{le="+Inf"} 1
saferetry_call_attempts_sum 2
saferetry_call_attempts_count 1
# HELP saferetry_call_retries Sends after an earlier one ended, per call.
# TYPE saferetry_call_retries histogram
saferetry_call_retries_bucket{le="0"} 0
saferetry_call_retries_bucket{le="1"} 1
saferetry_call_retries_bucket{le="2"} 1
saferetry_call_retries_bucket{le="3"} 1
saferetry_call_retries_bucket{le="4"} 1
saferetry_call_retries_bucket{le="5"} 1
saferetry_call_retries_bucket{le="10"} 1
saferetry_call_retries_bucket{le="+Inf"} 1
saferetry_call_retries_sum 1
saferetry_call_retries_count 1
# HELP saferetry_call_hedges Sends while an earlier one was in flight, per call.
# TYPE saferetry_call_hedges histogram
saferetry_call_hedges_bucket{le="0"} 1
saferetry_call_hedges_bucket{le="1"} 1
saferetry_call_hedges_bucket{le="2"} 1
saferetry_call_hedges_bucket{le="3"} 1
saferetry_call_hedges_bucket{le="4"} 1
saferetry_call_hedges_bucket{le="5"} 1
saferetry_call_hedges_bucket{le="10"} 1
saferetry_call_hedges_bucket{le="+Inf"} 1
saferetry_call_hedges_sum 0
saferetry_call_hedges_count 1
# HELP saferetry_call_retry_delay_seconds Time per call during which no attempt or status query was in flight.
# TYPE saferetry_call_retry_delay_seconds histogram
saferetry_call_retry_delay_seconds_bucket{le="0.005"} 0
saferetry_call_retry_delay_seconds_bucket{le="0.01"} 0
saferetry_call_retry_delay_seconds_bucket{le="0.025"} 0
saferetry_call_retry_delay_seconds_bucket{le="0.05"} 0
saferetry_call_retry_delay_seconds_bucket{le="0.075"} 0
saferetry_call_retry_delay_seconds_bucket{le="0.1"} 1
saferetry_call_retry_delay_seconds_bucket{le="0.25"} 1
saferetry_call_retry_delay_seconds_bucket{le="0.5"} 1
saferetry_call_retry_delay_seconds_bucket{le="0.75"} 1
saferetry_call_retry_delay_seconds_bucket{le="1"} 1
saferetry_call_retry_delay_seconds_bucket{le="2.5"} 1
saferetry_call_retry_delay_seconds_bucket{le="5"} 1
saferetry_call_retry_delay_seconds_bucket{le="7.5"} 1
saferetry_call_retry_delay_seconds_bucket{le="10"} 1
saferetry_call_retry_delay_seconds_bucket{le="+Inf"} 1
saferetry_call_retry_delay_seconds_sum 0.1
saferetry_call_retry_delay_seconds_count 1
)");
  EXPECT_EQ(ToPrometheusText(MetricsSnapshot{}), "");
}

class Recording final : public CallListener {
 public:
  explicit Recording(std::vector<std::string>* log, std::string name)
      : log_(log), name_(std::move(name)) {}
  void OnAttemptStart(int n, bool q) override {
    log_->push_back(name_ + ":start" + std::to_string(n) + (q ? "q" : ""));
  }
  void OnAttemptEnd(const AttemptEvidence& e) override {
    log_->push_back(name_ + ":end" + std::to_string(e.number));
  }
  void OnWaitScheduled(Duration d, bool hint) override {
    log_->push_back(name_ + ":wait" + std::to_string(d.count() / 1000000) + (hint ? "h" : ""));
  }
  void OnFinish(const CallResult& r) override {
    log_->push_back(name_ + ":finish" + std::string(OutcomeName(r.outcome)));
  }

 private:
  std::vector<std::string>* log_;
  std::string name_;
};

TEST_F(MetricsRunTest, ListenerChainFansOutInOrder) {
  std::vector<std::string> log;
  Recording a(&log, "a");
  Recording b(&log, "b");
  ListenerChain chain({&a, nullptr});
  chain.Add(&b);
  CallOptions call;
  call.listener = &chain;
  transport_->Push(Step::RespondRetryAfter(503, "1")).Push(Step::Respond(200));
  auto client = Make(MakeUnlimitedBudget());
  EXPECT_EQ(client->Execute(Get(), call).outcome, Outcome::kSucceeded);
  EXPECT_THAT(log, ElementsAre("a:start1", "b:start1", "a:end1", "b:end1", "a:wait1000h",
                               "b:wait1000h", "a:start2", "b:start2", "a:end2", "b:end2",
                               "a:finishSUCCEEDED", "b:finishSUCCEEDED"));
}

TEST(MetricsTest, EndpointOfUrlKeepsHostAndPortOnly) {
  EXPECT_EQ(EndpointOfUrl("GET", "http://Orders.Internal:8080/orders/1?card=4111#x"),
            (MetricsEndpoint{"GET", "orders.internal", 8080}));
  EXPECT_EQ(EndpointOfUrl("POST", "https://user:pw@pay.example/charge"),
            (MetricsEndpoint{"POST", "pay.example", 443}));
  EXPECT_EQ(EndpointOfUrl("GET", "http://[::1]/x"), (MetricsEndpoint{"GET", "[::1]", 80}));
  EXPECT_EQ(EndpointOfUrl("GET", "ftp://h/x"), (MetricsEndpoint{"GET", "", 0}));
  EXPECT_EQ(EndpointOfUrl("GET", "http://h:99999/x"), (MetricsEndpoint{"GET", "", 0}));
}

TEST_F(MetricsRunTest, EndpointLabelsAndPerCallSeriesAreExact) {
  auto client = Make(MakeUnlimitedBudget());
  MetricsListener get(metrics_, EndpointOfUrl("GET", Get().url));
  MetricsListener post(metrics_, EndpointOfUrl("POST", Post().url));
  MetricsListener odd(metrics_,
                      EndpointOfUrl("get", "http://other.internal/x"));  // not a known method
  CallOptions get_call;
  get_call.listener = &get;
  transport_->Push(Step::Respond(503)).Push(Step::Respond(503)).Push(Step::Respond(200));
  EXPECT_EQ(client->Execute(Get(), get_call).outcome, Outcome::kSucceeded);
  transport_->Push(Step::Respond(200));
  EXPECT_EQ(client->Execute(Get(), get_call).outcome, Outcome::kSucceeded);
  CallOptions post_call;
  post_call.listener = &post;
  post_call.status_url = "http://127.0.0.1:8080/orders/by-key/{key}";
  transport_->Push(Step::CommitThenLost()).Push(Step::Respond(200));
  EXPECT_TRUE(client->Execute(Post(), post_call).resolved_by_status_query);
  EXPECT_EQ(transport_->remaining_steps(), 0u);

  const MetricsSnapshot s = metrics_->Snapshot();
  EXPECT_EQ(s.servers_folded, 0);
  const MetricsEndpoint get_ep{"GET", "127.0.0.1", 8080};
  const MetricsEndpoint post_ep{"POST", "127.0.0.1", 8080};
  // GET: 503, 503, 200 then 200; POST: a lost attempt, then the query's 200.
  ASSERT_EQ(s.request_duration.size(), 4u);
  EXPECT_EQ(s.request_duration[0].endpoint, get_ep);
  EXPECT_EQ(s.request_duration[0].status_code, 200);
  EXPECT_EQ(s.request_duration[0].error_type, "");
  EXPECT_EQ(s.request_duration[0].histogram.count, 2);
  EXPECT_EQ(s.request_duration[1].endpoint, get_ep);
  EXPECT_EQ(s.request_duration[1].status_code, 503);
  EXPECT_EQ(s.request_duration[1].error_type, "503");
  EXPECT_EQ(s.request_duration[1].histogram.count, 2);
  EXPECT_EQ(s.request_duration[2].endpoint, post_ep);
  EXPECT_EQ(s.request_duration[2].status_code, 200);
  EXPECT_EQ(s.request_duration[3].endpoint, post_ep);
  EXPECT_EQ(s.request_duration[3].status_code, std::nullopt);
  EXPECT_EQ(s.request_duration[3].error_type, "UNAVAILABLE");
  EXPECT_EQ(s.request_duration_by_status.at("200").count, 3);

  // The unregistered-method endpoint has no call: left out.
  ASSERT_EQ(s.call_series.size(), 2u);
  const EndpointCallSeries& g = s.call_series[0];
  EXPECT_EQ(g.endpoint, get_ep);
  EXPECT_EQ(g.attempts_original, 2);
  EXPECT_EQ(g.attempts_retry, 2);
  EXPECT_EQ(g.attempts_hedge, 0);
  EXPECT_THAT(g.attempts_per_call.counts, ElementsAre(0, 1, 0, 1, 0, 0, 0, 0));  // 1 and 3
  EXPECT_EQ(g.attempts_per_call.sum, 4);
  EXPECT_THAT(g.retries_per_call.counts, ElementsAre(1, 0, 1, 0, 0, 0, 0, 0));  // 0 and 2
  EXPECT_THAT(g.hedges_per_call.counts, ElementsAre(2, 0, 0, 0, 0, 0, 0, 0));
  // Only the retried call has a retry delay: two backoff waits.
  EXPECT_EQ(g.retry_delay.count, 1);
  const CallResult probe = [&] {
    transport_->Push(Step::Respond(503)).Push(Step::Respond(503)).Push(Step::Respond(200));
    return client->Execute(Get(), CallOptions{});
  }();
  Duration waits(0);
  for (const AttemptEvidence& ev : probe.evidence) waits += ev.delay_after.value_or(Duration(0));
  EXPECT_GT(waits.count(), 0);
  EXPECT_EQ(g.retry_delay.sum_nanos, waits.count());
  const EndpointCallSeries& p = s.call_series[1];
  EXPECT_EQ(p.endpoint, post_ep);
  EXPECT_EQ(p.attempts_original, 1);
  EXPECT_EQ(p.attempts_retry + p.attempts_hedge, 0);
  EXPECT_EQ(p.retry_delay.count, 1);  // an attempt and a status query

  const std::string text = ToPrometheusText(s);
  EXPECT_THAT(text, ::testing::HasSubstr(
                        "http_client_request_duration_seconds_count{http_request_method=\"GET\","
                        "server_address=\"127.0.0.1\",server_port=\"8080\","
                        "http_response_status_code=\"503\",error_type=\"503\"} 2\n"));
  EXPECT_THAT(text, ::testing::HasSubstr(
                        "saferetry_client_attempt_started_total{http_request_method=\"GET\","
                        "server_address=\"127.0.0.1\",server_port=\"8080\","
                        "saferetry_attempt_type=\"retry\"} 2\n"));
  EXPECT_THAT(text, ::testing::Not(::testing::HasSubstr("/orders")));
}

// One histogram per phase, from each exchange's timings, and the timeouts
// by the phase they ran out in. Phases not reached are not observed.
TEST(MetricsTest, PhasesAreObservedPerExchangeAndTimeoutsByPhase) {
  using std::chrono::microseconds;
  auto metrics = std::make_shared<Metrics>();
  MetricsListener listener(metrics, {"POST", "orders.internal", 443});
  CallResult r;
  r.outcome = Outcome::kUnknown;
  r.stop_reason = StopReason::kAmbiguousUnresolved;
  AttemptEvidence answered;  // a fresh TLS connection, answered
  answered.number = 1;
  answered.http_status = 503;
  answered.timings.dns = microseconds(1000);
  answered.timings.connect = microseconds(3000);
  answered.timings.tls = microseconds(10000);
  answered.timings.request_written = microseconds(10500);
  answered.timings.first_byte = microseconds(60500);
  answered.timings.total = microseconds(61000);
  AttemptEvidence hung;  // a kept-alive connection; no first byte in time
  hung.number = 2;
  hung.delivery = Delivery::kMaybeDelivered;
  hung.transport_status = absl::DeadlineExceededError("first-byte limit");
  hung.timings.request_written = microseconds(200);
  hung.timings.total = milliseconds(300);
  hung.timings.timed_out = Phase::kFirstByte;
  r.evidence = {answered, hung};
  listener.OnFinish(r);

  const MetricsSnapshot s = metrics->Snapshot();
  ASSERT_EQ(s.call_series.size(), 1u);
  const EndpointCallSeries& c = s.call_series[0];
  const auto at = [&](Phase p) -> const HistogramSnapshot& {
    return c.phase_duration[static_cast<std::size_t>(p) - 1];
  };
  EXPECT_EQ(at(Phase::kDns).count, 1);
  EXPECT_EQ(at(Phase::kDns).sum_nanos, 1000000);
  EXPECT_EQ(at(Phase::kConnect).sum_nanos, 2000000);
  EXPECT_EQ(at(Phase::kTls).sum_nanos, 7000000);
  EXPECT_EQ(at(Phase::kRequestWrite).count, 2);
  EXPECT_EQ(at(Phase::kRequestWrite).sum_nanos, 500000 + 200000);
  EXPECT_EQ(at(Phase::kFirstByte).count, 1);  // the hung one never had a first byte
  EXPECT_EQ(at(Phase::kFirstByte).sum_nanos, 50000000);
  EXPECT_EQ(at(Phase::kTransfer).sum_nanos, 500000);
  EXPECT_THAT(c.timeouts_by_phase, ElementsAre(0, 0, 0, 0, 1, 0));

  const std::string text = ToPrometheusText(s);
  EXPECT_THAT(text, ::testing::HasSubstr(
                        "saferetry_client_attempt_phase_duration_seconds_count{http_request_method="
                        "\"POST\",server_address=\"orders.internal\",server_port=\"443\","
                        "saferetry_phase=\"tls\"} 1\n"));
  EXPECT_THAT(text, ::testing::HasSubstr(
                        "saferetry_client_attempt_timeouts_total{http_request_method=\"POST\","
                        "server_address=\"orders.internal\",server_port=\"443\","
                        "saferetry_phase=\"first_byte\"} 1\n"));
}

TEST(PhaseTimingsTest, SpentIsEachPhaseLessTheStampBeforeIt) {
  using std::chrono::microseconds;
  PhaseTimings t;
  EXPECT_EQ(t.Spent(Phase::kConnect), Duration(0));
  t.dns = microseconds(5);
  t.connect = microseconds(25);
  t.request_written = microseconds(40);  // no TLS: the write follows the connect
  t.first_byte = microseconds(100);
  t.total = microseconds(180);
  EXPECT_EQ(t.Spent(Phase::kDns), microseconds(5));
  EXPECT_EQ(t.Spent(Phase::kConnect), microseconds(20));
  EXPECT_EQ(t.Spent(Phase::kTls), Duration(0));
  EXPECT_EQ(t.Spent(Phase::kRequestWrite), microseconds(15));
  EXPECT_EQ(t.Spent(Phase::kFirstByte), microseconds(60));
  EXPECT_EQ(t.Spent(Phase::kTransfer), microseconds(80));
  EXPECT_EQ(t.Spent(Phase::kNone), Duration(0));
  EXPECT_EQ(PhaseName(Phase::kRequestWrite), "request_write");
  EXPECT_EQ(PhaseName(Phase::kNone), "");
}

TEST(MetricsTest, ServersPastTheCapFoldIntoOther) {
  auto metrics = std::make_shared<Metrics>(MetricsOptions{2});
  MetricsListener a(metrics, {"GET", "a.internal", 80});
  MetricsListener a_post(metrics, {"POST", "a.internal", 80});  // same server: no new slot
  MetricsListener b(metrics, {"GET", "b.internal", 80});
  MetricsListener c(metrics, {"GET", "c.internal", 80});  // third server: folded
  MetricsListener d(metrics, {"GET", "a.internal", 81});  // another port is another server
  CallResult r;
  r.outcome = Outcome::kSucceeded;
  r.stop_reason = StopReason::kSuccess;
  AttemptEvidence ev;
  ev.number = 1;
  ev.http_status = 200;
  r.evidence = {ev};
  for (CallListener* l : std::initializer_list<CallListener*>{&a, &a_post, &b, &c, &d}) {
    l->OnFinish(r);
  }
  const MetricsSnapshot s = metrics->Snapshot();
  EXPECT_EQ(s.servers_folded, 2);
  ASSERT_EQ(s.call_series.size(), 4u);
  EXPECT_EQ(s.call_series[0].endpoint, (MetricsEndpoint{"GET", "a.internal", 80}));
  EXPECT_EQ(s.call_series[1].endpoint, (MetricsEndpoint{"POST", "a.internal", 80}));
  EXPECT_EQ(s.call_series[2].endpoint, (MetricsEndpoint{"GET", "b.internal", 80}));
  EXPECT_EQ(s.call_series[3].endpoint, (MetricsEndpoint{"GET", "_other", 0}));
  EXPECT_EQ(s.call_series[3].attempts_original, 2);
  EXPECT_THAT(ToPrometheusText(s),
              ::testing::HasSubstr("saferetry_metrics_servers_folded_total 2\n"));
}

TEST(MetricsTest, OverlappingSendsAreHedgesAndOnlyIdleTimeIsDelay) {
  Metrics metrics;
  const MetricsRoute route = metrics.Register({"GET", "h", 80});
  CallResult r;
  r.outcome = Outcome::kSucceeded;
  r.stop_reason = StopReason::kSuccess;
  const TimePoint t0{};
  AttemptEvidence first;  // 0-100 ms, lost to the hedge
  first.number = 1;
  first.start = t0;
  first.end = t0 + milliseconds(100);
  AttemptEvidence hedge;  // 30-60 ms, answered first
  hedge.number = 2;
  hedge.start = t0 + milliseconds(30);
  hedge.end = t0 + milliseconds(60);
  hedge.http_status = 200;
  AttemptEvidence retry;  // 150-160 ms: 50 ms idle before it
  retry.number = 3;
  retry.start = t0 + milliseconds(150);
  retry.end = t0 + milliseconds(160);
  retry.http_status = 200;
  r.evidence = {hedge, first, retry};  // in order of ending
  metrics.RecordCall(route, r);
  const MetricsSnapshot s = metrics.Snapshot();
  ASSERT_EQ(s.call_series.size(), 1u);
  EXPECT_EQ(s.call_series[0].attempts_original, 1);
  EXPECT_EQ(s.call_series[0].attempts_hedge, 1);
  EXPECT_EQ(s.call_series[0].attempts_retry, 1);
  EXPECT_EQ(s.call_series[0].hedges_per_call.sum, 1);
  EXPECT_EQ(s.call_series[0].retries_per_call.sum, 1);
  EXPECT_EQ(s.call_series[0].retry_delay.sum_nanos, 50000000);
  EXPECT_EQ(s.hedges, 1);
  EXPECT_EQ(s.retries, 2);
}

TEST(MetricsTest, RecordingOnARegisteredEndpointDoesNotAllocate) {
  Metrics metrics;
  MetricsListener listener(std::shared_ptr<Metrics>(&metrics, [](Metrics*) {}),
                           EndpointOfUrl("POST", "http://127.0.0.1:8080/orders"));
  const CallResult r = TwoAttemptsAndAQuery();
  listener.OnFinish(r);  // the first sight of each status allocates its series
  g_allocations.store(0);
  g_count_allocations.store(true);
  for (int i = 0; i < 100; ++i) listener.OnFinish(r);
  g_count_allocations.store(false);
  EXPECT_EQ(g_allocations.load(), 0);
  EXPECT_EQ(metrics.Snapshot().call_series.at(0).attempts_per_call.count, 101);
}

}  // namespace
}  // namespace saferetry

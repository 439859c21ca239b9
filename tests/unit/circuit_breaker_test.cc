// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The circuit breaker: every transition exact on the fake clock, the host
// key, the options; then through the blocking Client with the fake
// transport: refusals before any send, the history rule, refunds; and a
// registry shared by several threads.

#include "saferetry/circuit_breaker.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "saferetry/client.h"
#include "saferetry/config.h"
#include "saferetry/metrics.h"
#include "saferetry/testing/counting_budget.h"
#include "saferetry/testing/fake_clock.h"
#include "saferetry/testing/fake_random.h"
#include "saferetry/testing/fake_transport.h"

namespace saferetry {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::seconds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testkit::CountingBudget;
using testkit::FakeClock;
using testkit::FakeTransport;
using testkit::ScriptedRandom;
using testkit::Step;

constexpr char kOrders[] = "http://127.0.0.1:8080/orders";
constexpr char kStatus[] = "http://127.0.0.1:8080/orders/by-key/{key}";
constexpr char kHost[] = "http://127.0.0.1:8080";

CircuitBreakerOptions Options() {
  CircuitBreakerOptions o;
  o.failure_ratio = 0.5;
  o.window = seconds(10);
  o.minimum_calls = 20;
  o.open_duration = seconds(5);
  o.half_open_probes = 3;
  return o;
}

// --- Options and keys ---------------------------------------------------------

TEST(CircuitBreakerOptionsTest, DefaultsAreValid) {
  EXPECT_TRUE(ValidateCircuitBreakerOptions(CircuitBreakerOptions{}).ok());
  CircuitBreakerOptions d;
  EXPECT_EQ(d.failure_ratio, 0.5);
  EXPECT_EQ(d.window, seconds(10));
  EXPECT_EQ(d.minimum_calls, 20);
  EXPECT_EQ(d.open_duration, seconds(5));
  EXPECT_EQ(d.half_open_probes, 3);
}

TEST(CircuitBreakerOptionsTest, ErrorsNameTheField) {
  const auto error = [](auto mutate) {
    CircuitBreakerOptions o;
    mutate(o);
    return std::string(ValidateCircuitBreakerOptions(o).message());
  };
  EXPECT_THAT(error([](auto& o) { o.failure_ratio = 0; }),
              HasSubstr("circuit_breaker.failure_ratio"));
  EXPECT_THAT(error([](auto& o) { o.failure_ratio = 1.5; }),
              HasSubstr("circuit_breaker.failure_ratio"));
  EXPECT_THAT(error([](auto& o) { o.window = Duration::zero(); }),
              HasSubstr("circuit_breaker.window"));
  EXPECT_THAT(error([](auto& o) { o.minimum_calls = 0; }),
              HasSubstr("circuit_breaker.minimum_calls"));
  EXPECT_THAT(error([](auto& o) { o.open_duration = -seconds(1); }),
              HasSubstr("circuit_breaker.open_duration"));
  EXPECT_THAT(error([](auto& o) { o.half_open_probes = 0; }),
              HasSubstr("circuit_breaker.half_open_probes"));
  EXPECT_THAT(error([](auto& o) { o.half_open_probes = 1001; }),
              HasSubstr("circuit_breaker.half_open_probes"));
  CircuitBreakerOptions bad;
  bad.minimum_calls = -1;
  EXPECT_FALSE(CircuitBreaker::Create(bad).ok());
  EXPECT_FALSE(CircuitBreakerRegistry::Create(bad).ok());
}

TEST(CircuitBreakerKeyTest, SchemeHostAndPort) {
  EXPECT_EQ(CircuitBreakerKey("http://127.0.0.1:8080/orders?x=1"), "http://127.0.0.1:8080");
  EXPECT_EQ(CircuitBreakerKey("HTTPS://User:pw@Orders.Internal/a#f"),
            "https://orders.internal:443");
  EXPECT_EQ(CircuitBreakerKey("http://orders.internal"), "http://orders.internal:80");
  EXPECT_EQ(CircuitBreakerKey("http://[::1]:9000/x"), "http://[::1]:9000");
  EXPECT_EQ(CircuitBreakerKey("https://[::1]/x"), "https://[::1]:443");
  EXPECT_EQ(CircuitBreakerKey("ftp://host/x"), "");
  EXPECT_EQ(CircuitBreakerKey("/relative"), "");
  EXPECT_EQ(CircuitBreakerKey("http:///nohost"), "");
}

TEST(CircuitBreakerKeyTest, RegistryGivesOneBreakerPerHost) {
  auto registry = CircuitBreakerRegistry::Create(Options()).value();
  CircuitBreaker* a = registry->ForUrl("http://127.0.0.1:8080/orders");
  EXPECT_EQ(registry->ForUrl("http://127.0.0.1:8080/orders/by-key/k"), a);
  EXPECT_NE(registry->ForUrl("http://127.0.0.1:8081/orders"), a);
  EXPECT_EQ(registry->ForUrl("not a url"), nullptr);
  EXPECT_EQ(registry->Snapshot(TimePoint{}).size(), 2u);
}

TEST(HostFailureTest, CountsWhatTheHostFailed) {
  const absl::Status ok;
  EXPECT_TRUE(IsHostFailure(AttemptClass::kRetryableTransient, ok));
  EXPECT_TRUE(IsHostFailure(AttemptClass::kRetryableNotDelivered, ok));
  EXPECT_TRUE(IsHostFailure(AttemptClass::kAmbiguous, ok));
  EXPECT_FALSE(IsHostFailure(AttemptClass::kSuccess, ok));
  EXPECT_FALSE(IsHostFailure(AttemptClass::kPermanent, ok));
  EXPECT_FALSE(IsHostFailure(AttemptClass::kPreconditionFailed, ok));
  EXPECT_FALSE(IsHostFailure(AttemptClass::kInProgress, ok));
  // A TLS certificate rejection is classified permanent, but the host did
  // not answer.
  EXPECT_TRUE(IsHostFailure(AttemptClass::kPermanent, absl::UnavailableError("tls")));
  EXPECT_FALSE(IsHostFailure(AttemptClass::kAmbiguous, absl::CancelledError("caller")));
}

// --- Transitions, exact on the fake clock ----------------------------------------

class CircuitBreakerTest : public ::testing::Test {
 protected:
  // One allowed send that ends at once with `failure`.
  void Send(bool failure) {
    const CircuitBreaker::Permit p = breaker_.Allow(clock_.Now());
    ASSERT_TRUE(p.allowed);
    breaker_.Report(p, failure, clock_.Now());
  }
  // Drives the breaker open: 20 failures at the same instant.
  void Open() {
    for (int i = 0; i < 20; ++i) Send(true);
    ASSERT_EQ(breaker_.State(clock_.Now()), CircuitState::kOpen);
  }

  FakeClock clock_;
  CircuitBreaker breaker_{Options()};
};

TEST_F(CircuitBreakerTest, StaysClosedBeforeTheMinimumCalls) {
  for (int i = 0; i < 19; ++i) Send(true);
  EXPECT_EQ(breaker_.State(clock_.Now()), CircuitState::kClosed);
  EXPECT_EQ(breaker_.Snapshot(clock_.Now()).window_failures, 19);
  Send(true);  // the 20th outcome: 20 of 20 failed
  EXPECT_EQ(breaker_.State(clock_.Now()), CircuitState::kOpen);
  EXPECT_EQ(breaker_.Snapshot(clock_.Now()).opened, 1);
}

TEST_F(CircuitBreakerTest, OpensExactlyAtTheRatio) {
  for (int i = 0; i < 11; ++i) Send(false);
  for (int i = 0; i < 10; ++i) Send(true);  // 10 of 21 < 50 %
  EXPECT_EQ(breaker_.State(clock_.Now()), CircuitState::kClosed);
  Send(true);  // 11 of 22 = 50 %
  EXPECT_EQ(breaker_.State(clock_.Now()), CircuitState::kOpen);
}

TEST_F(CircuitBreakerTest, SuccessesAndClientErrorsKeepItClosed) {
  for (int i = 0; i < 100; ++i) Send(false);
  for (int i = 0; i < 99; ++i) Send(true);  // 99 of 199
  EXPECT_EQ(breaker_.State(clock_.Now()), CircuitState::kClosed);
}

TEST_F(CircuitBreakerTest, OldOutcomesLeaveTheWindow) {
  for (int i = 0; i < 19; ++i) Send(true);
  clock_.Advance(seconds(10));  // a whole window later: all 19 have expired
  Send(true);
  EXPECT_EQ(breaker_.State(clock_.Now()), CircuitState::kClosed);
  EXPECT_EQ(breaker_.Snapshot(clock_.Now()).window_calls, 1);
}

TEST_F(CircuitBreakerTest, OpenRefusesUntilExactlyTheOpenDuration) {
  Open();
  const TimePoint opened = clock_.Now();
  EXPECT_FALSE(breaker_.Allow(opened).allowed);
  EXPECT_FALSE(breaker_.Allow(opened + seconds(5) - nanoseconds(1)).allowed);
  EXPECT_EQ(breaker_.State(opened + seconds(5) - nanoseconds(1)), CircuitState::kOpen);
  EXPECT_EQ(breaker_.State(opened + seconds(5)), CircuitState::kHalfOpen);
  EXPECT_TRUE(breaker_.Allow(opened + seconds(5)).allowed);
  EXPECT_EQ(breaker_.Snapshot(opened + seconds(5)).refusals, 2);
}

TEST_F(CircuitBreakerTest, HalfOpenClosesAfterAllProbesSucceed) {
  Open();
  clock_.Advance(seconds(5));
  const TimePoint now = clock_.Now();
  const auto p1 = breaker_.Allow(now);
  const auto p2 = breaker_.Allow(now);
  const auto p3 = breaker_.Allow(now);
  ASSERT_TRUE(p1.allowed && p2.allowed && p3.allowed);
  breaker_.OnSuccess(p1, now);
  breaker_.OnSuccess(p2, now);
  EXPECT_EQ(breaker_.State(now), CircuitState::kHalfOpen);
  breaker_.OnSuccess(p3, now);
  EXPECT_EQ(breaker_.State(now), CircuitState::kClosed);
  // Closed with an empty window: 19 failures do not reopen it.
  EXPECT_EQ(breaker_.Snapshot(now).window_calls, 0);
  for (int i = 0; i < 19; ++i) Send(true);
  EXPECT_EQ(breaker_.State(now), CircuitState::kClosed);
}

TEST_F(CircuitBreakerTest, HalfOpenProbeFailureReopens) {
  Open();
  clock_.Advance(seconds(5));
  const auto p1 = breaker_.Allow(clock_.Now());
  const auto p2 = breaker_.Allow(clock_.Now());
  breaker_.OnSuccess(p1, clock_.Now());
  clock_.Advance(milliseconds(30));
  breaker_.OnFailure(p2, clock_.Now());
  const TimePoint reopened = clock_.Now();
  EXPECT_EQ(breaker_.State(reopened), CircuitState::kOpen);
  EXPECT_EQ(breaker_.Snapshot(reopened).opened, 2);
  // A new open duration from the probe's failure.
  EXPECT_FALSE(breaker_.Allow(reopened + seconds(5) - nanoseconds(1)).allowed);
  EXPECT_TRUE(breaker_.Allow(reopened + seconds(5)).allowed);
}

TEST_F(CircuitBreakerTest, ProbesBeyondTheCountAreRefused) {
  Open();
  clock_.Advance(seconds(5));
  const TimePoint now = clock_.Now();
  std::vector<CircuitBreaker::Permit> probes;
  for (int i = 0; i < 3; ++i) probes.push_back(breaker_.Allow(now));
  for (const auto& p : probes) EXPECT_TRUE(p.allowed);
  const std::int64_t refused_before = breaker_.Snapshot(now).refusals;
  EXPECT_FALSE(breaker_.Allow(now).allowed);
  EXPECT_FALSE(breaker_.Allow(now).allowed);
  EXPECT_EQ(breaker_.Snapshot(now).refusals, refused_before + 2);
  // An abandoned probe frees its slot for one more.
  breaker_.OnAbandoned(probes[0], now);
  EXPECT_TRUE(breaker_.Allow(now).allowed);
  EXPECT_FALSE(breaker_.Allow(now).allowed);
}

TEST_F(CircuitBreakerTest, ReportsFromBeforeATransitionAreIgnored) {
  const auto slow = breaker_.Allow(clock_.Now());  // still running when it opens
  Open();
  clock_.Advance(seconds(5));
  const auto p1 = breaker_.Allow(clock_.Now());
  const auto p2 = breaker_.Allow(clock_.Now());
  const auto p3 = breaker_.Allow(clock_.Now());
  breaker_.OnSuccess(slow, clock_.Now());  // not a probe: ignored
  breaker_.OnSuccess(p1, clock_.Now());
  breaker_.OnSuccess(p2, clock_.Now());
  EXPECT_EQ(breaker_.State(clock_.Now()), CircuitState::kHalfOpen);
  breaker_.OnSuccess(p3, clock_.Now());
  EXPECT_EQ(breaker_.State(clock_.Now()), CircuitState::kClosed);
}

TEST(CircuitStateTest, Names) {
  EXPECT_EQ(CircuitStateName(CircuitState::kClosed), "closed");
  EXPECT_EQ(CircuitStateName(CircuitState::kHalfOpen), "half_open");
  EXPECT_EQ(CircuitStateName(CircuitState::kOpen), "open");
  EXPECT_EQ(static_cast<int>(CircuitState::kClosed), 0);
  EXPECT_EQ(static_cast<int>(CircuitState::kHalfOpen), 1);
  EXPECT_EQ(static_cast<int>(CircuitState::kOpen), 2);
}

// --- Through the blocking Client ---------------------------------------------------

class CircuitBreakerClientTest : public ::testing::Test {
 protected:
  std::unique_ptr<Client> Make(CircuitBreakerOptions breaker_options) {
    registry_ = CircuitBreakerRegistry::Create(breaker_options).value();
    ClientOptions o;
    o.transport = fake_;
    o.clock = clock_;
    o.random = random_;
    o.budget = budget_;
    o.status_query_budget = query_budget_;
    o.circuit_breakers = registry_;
    auto c = Client::Create(std::move(o));
    EXPECT_TRUE(c.ok()) << c.status();
    return *std::move(c);
  }
  static Request Post() {
    return Request{"POST", kOrders, {{"Content-Type", "application/json"}}, R"({"sku":"a"})"};
  }
  static Request Get() { return Request{"GET", "http://127.0.0.1:8080/orders/1", {}, ""}; }
  CircuitBreaker& Breaker() { return *registry_->ForUrl(kOrders); }

  std::shared_ptr<FakeClock> clock_ = std::make_shared<FakeClock>();
  std::shared_ptr<ScriptedRandom> random_ = std::make_shared<ScriptedRandom>();  // u = 0.5
  std::shared_ptr<FakeTransport> fake_ = std::make_shared<FakeTransport>(clock_);
  std::shared_ptr<CountingBudget> budget_ = std::make_shared<CountingBudget>();
  std::shared_ptr<CountingBudget> query_budget_ = std::make_shared<CountingBudget>();
  std::shared_ptr<CircuitBreakerRegistry> registry_;
};

TEST_F(CircuitBreakerClientTest, RefusedBeforeAnyAttemptFailsWithNothingSent) {
  CircuitBreakerOptions o = Options();
  o.minimum_calls = 2;
  auto client = Make(o);
  fake_->Push(Step::Respond(503)).Push(Step::Respond(503));
  CallOptions call;
  saferetry::RetryPolicyOptions call_policy;
  call_policy.max_attempts = 2;
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  CallResult first = client->Execute(Get(), call);
  EXPECT_EQ(first.stop_reason, StopReason::kAttemptsExhausted);
  EXPECT_EQ(Breaker().State(clock_->Now()), CircuitState::kOpen);

  CallResult r = client->Execute(Post(), CallOptions{});
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kCircuitOpen);
  EXPECT_EQ(r.attempts, 0);
  EXPECT_EQ(r.status_queries, 0);
  EXPECT_TRUE(r.evidence.empty());
  EXPECT_TRUE(r.status.ok());
  EXPECT_EQ(fake_->send_count(), 2);  // the first call's two sends only
  EXPECT_EQ(Breaker().Snapshot(clock_->Now()).refusals, 1);
}

TEST_F(CircuitBreakerClientTest, StatusQueryRefusedByTheOpenBreakerEndsUnknown) {
  CircuitBreakerOptions o = Options();
  o.minimum_calls = 1;  // the ambiguous first attempt opens it
  auto client = Make(o);
  fake_->Push(Step::CommitThenLost());
  CallOptions call;
  call.status_url = kStatus;
  CallResult r = client->Execute(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kUnknown);  // the first attempt may have committed
  EXPECT_EQ(r.stop_reason, StopReason::kCircuitOpen);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.status_queries, 0);
  EXPECT_EQ(fake_->send_count(), 1);
  // The poll's wait was charged to the allowance, then refunded.
  EXPECT_THAT(clock_->sleeps(), ElementsAre(microseconds(37500)));
  EXPECT_EQ(query_budget_->charges(), 1);
  EXPECT_EQ(query_budget_->refunds(), 1);
  EXPECT_EQ(budget_->refunds(), 0);
}

TEST_F(CircuitBreakerClientTest, RetryRefusedAfterTheBreakerOpensIsRefunded) {
  CircuitBreakerOptions o = Options();
  o.minimum_calls = 1;
  auto client = Make(o);
  fake_->Push(Step::Respond(503));
  CallResult r = client->Execute(Get(), CallOptions{});
  EXPECT_EQ(r.outcome, Outcome::kFailed);  // a GET never ends UNKNOWN
  EXPECT_EQ(r.stop_reason, StopReason::kCircuitOpen);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(budget_->charges(), 1);
  EXPECT_EQ(budget_->refunds(), 1);
}

TEST_F(CircuitBreakerClientTest, HalfOpenProbeThroughTheClientCloses) {
  CircuitBreakerOptions o = Options();
  o.minimum_calls = 1;
  o.half_open_probes = 1;
  auto client = Make(o);
  fake_->Push(Step::Respond(503));
  CallOptions once;
  saferetry::RetryPolicyOptions once_policy;
  once_policy.max_attempts = 1;
  once.policy = saferetry::RetryPolicy::Create(once_policy).value();
  EXPECT_EQ(client->Execute(Get(), once).stop_reason, StopReason::kAttemptsExhausted);
  EXPECT_EQ(Breaker().State(clock_->Now()), CircuitState::kOpen);
  clock_->Advance(seconds(5));
  fake_->Push(Step::Respond(200, {}, "ok"));
  CallResult r = client->Execute(Get(), once);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(Breaker().State(clock_->Now()), CircuitState::kClosed);
}

TEST_F(CircuitBreakerClientTest, ClientErrorsDoNotOpenTheBreaker) {
  CircuitBreakerOptions o = Options();
  o.minimum_calls = 1;
  auto client = Make(o);
  fake_->Push(Step::Respond(404)).Push(Step::Respond(400)).Push(Step::Respond(200));
  for (int i = 0; i < 3; ++i) (void)client->Execute(Get(), CallOptions{});
  EXPECT_EQ(Breaker().State(clock_->Now()), CircuitState::kClosed);
  EXPECT_EQ(Breaker().Snapshot(clock_->Now()).window_calls, 3);
}

TEST_F(CircuitBreakerClientTest, WithoutARegistryNothingChanges) {
  ClientOptions opts;
  opts.transport = fake_;
  opts.clock = clock_;
  opts.random = random_;
  opts.budget = budget_;
  auto client = Client::Create(std::move(opts)).value();
  fake_->Push(Step::Respond(503)).Push(Step::Respond(503)).Push(Step::Respond(200));
  CallResult r = client->Execute(Get(), CallOptions{});
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.attempts, 3);
}

// --- Metrics ---------------------------------------------------------------------

TEST_F(CircuitBreakerClientTest, StatePerHostInTheMetrics) {
  CircuitBreakerOptions o = Options();
  o.minimum_calls = 1;
  auto client = Make(o);
  (void)registry_->ForUrl("https://other.internal/x");  // a closed breaker
  fake_->Push(Step::Respond(503));
  auto metrics = std::make_shared<Metrics>();
  MetricsListener listener(metrics);
  CallOptions call;
  call.listener = &listener;
  EXPECT_EQ(client->Execute(Get(), call).stop_reason, StopReason::kCircuitOpen);
  EXPECT_EQ(client->Execute(Get(), call).stop_reason, StopReason::kCircuitOpen);

  MetricsSnapshot s = metrics->Snapshot();
  EXPECT_TRUE(s.circuit_breakers.empty());
  AddCircuitBreakers(*registry_, clock_->Now(), &s);
  ASSERT_EQ(s.circuit_breakers.size(), 2u);
  const CircuitBreakerSnapshot& b = s.circuit_breakers.at(kHost);
  EXPECT_EQ(b.state, CircuitState::kOpen);
  EXPECT_EQ(b.refusals, 2);  // the first call's retry, the second call
  EXPECT_EQ(b.opened, 1);
  EXPECT_EQ(s.stops_by_reason[StopReason::kCircuitOpen], 2);
  const std::string text = ToPrometheusText(s);
  EXPECT_THAT(text, HasSubstr("# TYPE saferetry_circuit_state gauge\n"
                              "saferetry_circuit_state{host=\"http://127.0.0.1:8080\"} 2\n"
                              "saferetry_circuit_state{host=\"https://other.internal:443\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE saferetry_circuit_refusals_total counter\n"
                              "saferetry_circuit_refusals_total{host=\"http://127.0.0.1:8080\"} 2\n"
                              "# HELP saferetry_circuit_opened_total"));
  EXPECT_THAT(text,
              HasSubstr("saferetry_circuit_opened_total{host=\"http://127.0.0.1:8080\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("saferetry_stop_reason=\"circuit_open\"} 2\n"));
  // An open breaker reads half-open once its open duration has passed.
  MetricsSnapshot later;
  AddCircuitBreakers(*registry_, clock_->Now() + seconds(5), &later);
  EXPECT_EQ(later.circuit_breakers.at(kHost).state, CircuitState::kHalfOpen);
}

// --- JSON policy ------------------------------------------------------------------

TEST(CircuitBreakerConfigTest, ReadDumpedAndApplied) {
  absl::StatusOr<Policy> p = LoadPolicy(R"({"saferetry": {"circuitBreaker": {
      "failureRatio": 0.25, "window": "30s", "minimumCalls": 50, "openFor": "2.5s",
      "halfOpenProbes": 5}}})");
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(p->circuit_breaker.has_value());
  EXPECT_EQ(p->circuit_breaker->failure_ratio, 0.25);
  EXPECT_EQ(p->circuit_breaker->window, seconds(30));
  EXPECT_EQ(p->circuit_breaker->minimum_calls, 50);
  EXPECT_EQ(p->circuit_breaker->open_duration, milliseconds(2500));
  EXPECT_EQ(p->circuit_breaker->half_open_probes, 5);

  const std::string dump = DumpPolicy(*p);
  EXPECT_THAT(dump, HasSubstr(R"("circuitBreaker": {)"));
  EXPECT_THAT(dump, HasSubstr(R"("openFor": "2.500s")"));
  absl::StatusOr<Policy> back = LoadPolicy(dump);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, *p);
  EXPECT_FALSE(Policy{} == *p);

  ClientOptions options;
  ASSERT_TRUE(ApplyToClientOptions(*p, &options).ok());
  ASSERT_NE(options.circuit_breakers, nullptr);
  EXPECT_EQ(options.circuit_breakers->options().minimum_calls, 50);
  EXPECT_EQ(options.circuit_breakers->options().open_duration, milliseconds(2500));
}

TEST(CircuitBreakerConfigTest, AbsentOrNullMeansNoBreaker) {
  absl::StatusOr<Policy> none = LoadPolicy("{}");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->circuit_breaker.has_value());
  EXPECT_THAT(DumpPolicy(*none), ::testing::Not(HasSubstr("circuitBreaker")));
  absl::StatusOr<Policy> null = LoadPolicy(R"({"saferetry": {"circuitBreaker": null}})");
  ASSERT_TRUE(null.ok());
  EXPECT_FALSE(null->circuit_breaker.has_value());
  // An empty object turns the breaker on with the defaults.
  absl::StatusOr<Policy> defaults = LoadPolicy(R"({"saferetry": {"circuitBreaker": {}}})");
  ASSERT_TRUE(defaults.ok());
  ASSERT_TRUE(defaults->circuit_breaker.has_value());
  EXPECT_EQ(defaults->circuit_breaker->minimum_calls, 20);
  ClientOptions options;
  ASSERT_TRUE(ApplyToClientOptions(*none, &options).ok());
  EXPECT_EQ(options.circuit_breakers, nullptr);
}

TEST(CircuitBreakerConfigTest, ErrorsNameTheJsonPath) {
  const auto error = [](std::string_view breaker) {
    absl::StatusOr<Policy> p = LoadPolicy(std::string(R"({"saferetry": {"circuitBreaker": )") +
                                          std::string(breaker) + "}}");
    return p.ok() ? std::string("ok") : std::string(p.status().message());
  };
  EXPECT_EQ(error(R"({"failureRatio": 0})"),
            "$.saferetry.circuitBreaker.failureRatio: expected a number in (0, 1], got 0");
  EXPECT_THAT(error(R"({"failureRatio": 1.5})"),
              HasSubstr("$.saferetry.circuitBreaker.failureRatio: expected"));
  EXPECT_THAT(error(R"({"window": "0s"})"),
              HasSubstr("$.saferetry.circuitBreaker.window: expected"));
  EXPECT_THAT(error(R"({"openFor": "ten"})"),
              HasSubstr("$.saferetry.circuitBreaker.openFor: expected"));
  EXPECT_THAT(error(R"({"minimumCalls": 0})"),
              HasSubstr("$.saferetry.circuitBreaker.minimumCalls: expected an integer in [1, "));
  EXPECT_THAT(
      error(R"({"halfOpenProbes": 1001})"),
      HasSubstr("$.saferetry.circuitBreaker.halfOpenProbes: expected an integer in [1, 1000]"));
  EXPECT_THAT(error(R"({"probes": 3})"), HasSubstr("$.saferetry.circuitBreaker"));
  EXPECT_THAT(error(R"("on")"), HasSubstr("$.saferetry.circuitBreaker: expected"));
  // A policy built by hand is validated when applied.
  Policy bad;
  bad.circuit_breaker = CircuitBreakerOptions{};
  bad.circuit_breaker->half_open_probes = 0;
  ClientOptions options;
  const absl::Status s = ApplyToClientOptions(bad, &options);
  EXPECT_THAT(std::string(s.message()), HasSubstr("circuit_breaker.half_open_probes"));
}

// --- Threads ---------------------------------------------------------------------

TEST(CircuitBreakerConcurrentTest, ThreadsHammeringOneRegistry) {
  CircuitBreakerOptions o = Options();
  o.minimum_calls = 10;
  o.half_open_probes = 2;
  auto registry = CircuitBreakerRegistry::Create(o).value();
  auto clock = std::make_shared<FakeClock>();
  constexpr int kThreads = 8;
  constexpr int kRounds = 2000;
  std::atomic<std::int64_t> allowed{0};
  std::atomic<std::int64_t> refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        const std::string url = (i % 2 == 0) ? "http://a.internal/x" : "http://b.internal/y";
        CircuitBreaker* b = registry->ForUrl(url);
        clock->Advance(milliseconds(1));
        const TimePoint now = clock->Now();
        const CircuitBreaker::Permit p = b->Allow(now);
        if (!p.allowed) {
          refused.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        allowed.fetch_add(1, std::memory_order_relaxed);
        if ((i + t) % 7 == 0) {
          b->OnAbandoned(p, now);
        } else {
          b->Report(p, (i / 100 + t) % 3 != 0, now);
        }
        (void)registry->Snapshot(now);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(allowed.load() + refused.load(), kThreads * kRounds);
  const auto snapshot = registry->Snapshot(clock->Now());
  ASSERT_EQ(snapshot.size(), 2u);
  std::int64_t refusals = 0;
  for (const auto& [host, s] : snapshot) refusals += s.refusals;
  EXPECT_EQ(refusals, refused.load());
}

TEST(CircuitBreakerConcurrentTest, ThreadsSharingOneClient) {
  auto clock = std::make_shared<FakeClock>();
  auto fake = std::make_shared<FakeTransport>(clock);
  std::atomic<int> n{0};
  fake->SetHandler([&n](const Request&, const AttemptOptions&) {
    TransportResult r;
    r.delivery = Delivery::kResponseReceived;
    r.response = Response{};
    r.response->status_code = (n.fetch_add(1) % 2 == 0) ? 503 : 200;
    return r;
  });
  CircuitBreakerOptions bo = Options();
  bo.minimum_calls = 5;
  ClientOptions o;
  o.transport = fake;
  o.clock = clock;
  o.random = std::make_shared<ScriptedRandom>();
  o.budget = MakeUnlimitedBudget();
  o.circuit_breakers = CircuitBreakerRegistry::Create(bo).value();
  auto client = Client::Create(std::move(o)).value();
  std::vector<std::thread> threads;
  std::atomic<int> circuit_open{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        CallResult r = client->Execute(Request{"GET", std::string(kHost) + "/x", {}, ""});
        EXPECT_NE(r.outcome, Outcome::kUnknown);
        if (r.stop_reason == StopReason::kCircuitOpen) circuit_open.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(client->options().circuit_breakers->Snapshot(clock->Now()).size(), 1u);
}

}  // namespace
}  // namespace saferetry

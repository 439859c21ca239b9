// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// JSON policy loading: every field, every error path with its exact message,
// the dump round trip, gRPC service configs, and what retryableStatusCodes
// means for classification.

#include "saferetry/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <memory>

#include "nlohmann/json.hpp"
#include "saferetry/grpc_codes_classifier.h"
#include "saferetry/testing/fake_clock.h"
#include "saferetry/testing/fake_random.h"
#include "saferetry/testing/fake_transport.h"

namespace saferetry {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

Policy MustLoad(std::string_view json, const LoadOptions& options = {}) {
  absl::StatusOr<Policy> p = LoadPolicy(json, options);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *std::move(p) : Policy{};
}

std::string ErrorOf(std::string_view json, const LoadOptions& options = {}) {
  absl::StatusOr<Policy> p = LoadPolicy(json, options);
  if (p.ok()) return "OK";
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(p.status().message());
}

TEST(ConfigTest, EmptyDocumentIsTheLibraryDefault) {
  Policy p = MustLoad("{}");
  EXPECT_EQ(p, Policy{});
  EXPECT_THAT(p.warnings, IsEmpty());
  EXPECT_EQ(p.max_attempts, 3);
  EXPECT_EQ(p.backoff.base, milliseconds(100));
  EXPECT_EQ(p.budget, "ratio");
}

constexpr char kFull[] = R"({
  "retryPolicy": {
    "maxAttempts": 5,
    "initialBackoff": "0.25s",
    "maxBackoff": "4s",
    "backoffMultiplier": 1.5,
    "retryableStatusCodes": ["UNAVAILABLE", "resource_exhausted", 4, 502]
  },
  "saferetry": {
    "jitter": "decorrelated",
    "deadline": "2.5s",
    "attemptTimeout": "0.8s",
    "deadlineMargin": "0.005s",
    "minUsefulAttempt": "0.02s",
    "maxStatusQueries": 3,
    "statusQuery": {"urlTemplate": "https://api.example/orders/by-key/{key}"},
    "serverDeduplicates": true,
    "idempotency": {"header": "X-Idem", "form": "quotedString", "mode": "always"},
    "deadlineHeader": "X-Deadline-Ms",
    "attemptHeader": "",
    "requestIdHeader": "X-Trace-Id",
    "maxRetryAfter": "7s",
    "doNotRetryHeader": "X-No-Retry",
    "budget": "costQuota",
    "costQuota": {"capacity": 100, "retryCost": 3, "timeoutCost": 7, "successIncrement": 2},
    "classification": {"503": "ambiguous", "418": "retryable_transient"}
  }
})";

TEST(ConfigTest, EveryFieldIsParsed) {
  Policy p = MustLoad(kFull);
  EXPECT_THAT(p.warnings, IsEmpty());
  EXPECT_EQ(p.max_attempts, 5);
  EXPECT_EQ(p.backoff.base, milliseconds(250));
  EXPECT_EQ(p.backoff.cap, seconds(4));
  EXPECT_EQ(p.backoff.multiplier, 1.5);
  EXPECT_EQ(p.backoff.jitter, JitterKind::kDecorrelated);
  EXPECT_EQ(p.retryable_codes,
            (std::set<std::string>{"DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "UNAVAILABLE"}));
  EXPECT_EQ(p.retryable_http_statuses, (std::set<int>{502}));
  EXPECT_EQ(p.timeout, milliseconds(2500));
  EXPECT_EQ(p.deadline_options.attempt_cap, milliseconds(800));
  EXPECT_EQ(p.deadline_options.margin, milliseconds(5));
  EXPECT_EQ(p.deadline_options.min_useful_attempt, milliseconds(20));
  EXPECT_EQ(p.max_status_queries, 3);
  EXPECT_EQ(p.status_query.url_template, "https://api.example/orders/by-key/{key}");
  EXPECT_TRUE(p.server_deduplicates);
  EXPECT_EQ(p.idempotency_header, "X-Idem");
  EXPECT_EQ(p.key_form, KeyForm::kQuotedString);
  EXPECT_EQ(p.key_mode, KeyMode::kAlways);
  EXPECT_EQ(p.deadline_header, "X-Deadline-Ms");
  EXPECT_EQ(p.attempt_header, "");
  EXPECT_EQ(p.request_id_header, "X-Trace-Id");
  EXPECT_EQ(p.hints.max_retry_after, seconds(7));
  EXPECT_EQ(p.hints.do_not_retry_header, "X-No-Retry");
  EXPECT_EQ(p.budget, "costQuota");
  EXPECT_EQ(p.cost_quota.capacity, 100);
  EXPECT_EQ(p.cost_quota.retry_cost, 3);
  EXPECT_EQ(p.cost_quota.timeout_cost, 7);
  EXPECT_EQ(p.cost_quota.success_increment, 2);
  EXPECT_EQ(p.status_overrides,
            (std::map<int, AttemptClass>{{418, AttemptClass::kRetryableTransient},
                                         {503, AttemptClass::kAmbiguous}}));
}

TEST(ConfigTest, BudgetObjectsAreParsedAndImplyTheirKind) {
  Policy t = MustLoad(R"({"retryThrottling": {"maxTokens": 20, "tokenRatio": 0.5}})");
  EXPECT_EQ(t.budget, "tokenThrottle");
  EXPECT_EQ(t.token_throttle.max_tokens, 20);
  EXPECT_EQ(t.token_throttle.token_ratio, 0.5);

  Policy r = MustLoad(
      R"({"saferetry": {"ratioBudget": {"percent": 0.2, "minPerSecond": 3, "window": "30s"}}})");
  EXPECT_EQ(r.budget, "ratio");
  EXPECT_EQ(r.ratio_budget.percent, 0.2);
  EXPECT_EQ(r.ratio_budget.min_per_second, 3);
  EXPECT_EQ(r.ratio_budget.window, seconds(30));

  Policy q = MustLoad(R"({"saferetry": {"costQuota": {"capacity": 9}}})");
  EXPECT_EQ(q.budget, "costQuota");
  EXPECT_EQ(q.cost_quota.capacity, 9);
  EXPECT_EQ(q.cost_quota.retry_cost, 5);

  Policy n = MustLoad(R"({"saferetry": {"budget": "none"}})");
  EXPECT_EQ(n.budget, "none");

  Policy a =
      MustLoad(R"({"saferetry": {"attemptTimeout": null, "idempotency": {"mode": "never"}}})");
  EXPECT_FALSE(a.deadline_options.attempt_cap.has_value());
  EXPECT_EQ(a.key_mode, KeyMode::kNever);
}

TEST(ConfigTest, MaxAttemptsAboveTheHardCapIsClampedWithAWarning) {
  Policy p =
      MustLoad(R"({"retryPolicy": {"maxAttempts": 25}, "saferetry": {"maxStatusQueries": 1001}})");
  EXPECT_EQ(p.max_attempts, kMaxAttemptsHardCap);
  EXPECT_EQ(p.max_status_queries, kMaxStatusQueriesHardCap);
  EXPECT_THAT(
      p.warnings,
      ElementsAre(
          "$.retryPolicy.maxAttempts: 25 is above the hard cap of 10; clamped to 10",
          "$.saferetry.maxStatusQueries: 1001 is above the hard cap of 1000; clamped to 1000"));
}

struct ErrorCase {
  const char* json;
  const char* message;
};

TEST(ConfigTest, EveryErrorNamesThePathAndWhatWasExpected) {
  const ErrorCase cases[] = {
      {R"([])", "$: expected an object, got an array"},
      {R"({"retryPolicy": {"maxAttempts": "three"}})",
       R"($.retryPolicy.maxAttempts: expected an integer >= 1, got "three")"},
      {R"({"retryPolicy": {"maxAttempts": 0}})",
       "$.retryPolicy.maxAttempts: expected an integer >= 1, got 0"},
      {R"({"retryPolicy": {"maxAttempts": 2.5}})",
       "$.retryPolicy.maxAttempts: expected an integer >= 1, got 2.5"},
      {R"({"retryPolicy": 7})", "$.retryPolicy: expected an object, got 7"},
      {R"({"retryPolicy": {"initialBackoff": "100ms"}})",
       R"($.retryPolicy.initialBackoff: expected a duration > 0 like "0.1s" (decimal seconds, "s" suffix), got "100ms")"},
      {R"({"retryPolicy": {"initialBackoff": 0.1}})",
       R"($.retryPolicy.initialBackoff: expected a duration > 0 like "0.1s" (decimal seconds, "s" suffix), got 0.1)"},
      {R"({"retryPolicy": {"initialBackoff": "0s"}})",
       R"($.retryPolicy.initialBackoff: expected a duration > 0 like "0.1s" (decimal seconds, "s" suffix), got "0s")"},
      {R"({"retryPolicy": {"initialBackoff": "-1s"}})",
       R"($.retryPolicy.initialBackoff: expected a duration > 0 like "0.1s" (decimal seconds, "s" suffix), got "-1s")"},
      {R"({"retryPolicy": {"initialBackoff": "0.0000000001s"}})",
       R"($.retryPolicy.initialBackoff: expected a duration > 0 like "0.1s" (decimal seconds, "s" suffix), got "0.0000000001s")"},
      {R"({"retryPolicy": {"initialBackoff": "2s", "maxBackoff": "1s"}})",
       R"($.retryPolicy.maxBackoff: expected a duration >= initialBackoff (2s), got "1s")"},
      {R"({"retryPolicy": {"backoffMultiplier": 0.5}})",
       "$.retryPolicy.backoffMultiplier: expected a number >= 1, got 0.5"},
      {R"({"retryPolicy": {"backoffMultiplier": "2"}})",
       R"($.retryPolicy.backoffMultiplier: expected a number >= 1, got "2")"},
      {R"({"retryPolicy": {"retryableStatusCodes": []}})",
       "$.retryPolicy.retryableStatusCodes: expected a non-empty array, got an array"},
      {R"({"retryPolicy": {"retryableStatusCodes": ["UNAVAILABLE", "BROKEN"]}})",
       R"($.retryPolicy.retryableStatusCodes[1]: expected a gRPC status code name other than OK ("UNAVAILABLE"), a code number 1..16, or an HTTP status 400..599, got "BROKEN")"},
      {R"({"retryPolicy": {"retryableStatusCodes": ["OK"]}})",
       R"($.retryPolicy.retryableStatusCodes[0]: expected a gRPC status code name other than OK ("UNAVAILABLE"), a code number 1..16, or an HTTP status 400..599, got "OK")"},
      {R"({"retryPolicy": {"retryableStatusCodes": [200]}})",
       R"($.retryPolicy.retryableStatusCodes[0]: expected a gRPC status code name other than OK ("UNAVAILABLE"), a code number 1..16, or an HTTP status 400..599, got 200)"},
      {R"({"retryPolicy": {"maxAttempt": 3}})",
       "$.retryPolicy.maxAttempt: unknown field (expected one of maxAttempts, initialBackoff, "
       "maxBackoff, backoffMultiplier, retryableStatusCodes, perAttemptRecvTimeout)"},
      {R"({"retrypolicy": {}})",
       "$.retrypolicy: unknown field (expected one of retryPolicy, hedgingPolicy, retryThrottling, "
       "saferetry)"},
      {R"({"retryThrottling": {"maxTokens": 10}})", "$.retryThrottling.tokenRatio: required"},
      {R"({"retryThrottling": {"maxTokens": 0, "tokenRatio": 0.1}})",
       "$.retryThrottling.maxTokens: expected a number in [0.001, 1000], got 0"},
      {R"({"retryThrottling": {"maxTokens": 10, "tokenRatio": -1}})",
       "$.retryThrottling.tokenRatio: expected a number in [0.001, 1e+12], got -1"},
      {R"({"saferetry": {"jitter": "gaussian"}})",
       R"($.saferetry.jitter: expected one of "none", "full", "equal", "decorrelated", got "gaussian")"},
      {R"({"saferetry": {"deadline": "soon"}})",
       R"($.saferetry.deadline: expected a duration > 0 like "0.1s" (decimal seconds, "s" suffix), got "soon")"},
      {R"({"saferetry": {"attemptTimeout": 5}})",
       R"($.saferetry.attemptTimeout: expected a duration > 0 like "0.1s" (decimal seconds, "s" suffix) or null, got 5)"},
      {R"({"saferetry": {"deadlineMargin": "-0.1s"}})",
       R"($.saferetry.deadlineMargin: expected a duration >= 0 like "0.1s" (decimal seconds, "s" suffix), got "-0.1s")"},
      {R"({"saferetry": {"maxStatusQueries": -2}})",
       "$.saferetry.maxStatusQueries: expected an integer >= 0, got -2"},
      {R"({"saferetry": {"statusQuery": {"urlTemplate": "https://api.example/orders/by-key"}}})",
       R"($.saferetry.statusQuery.urlTemplate: expected an absolute http(s) URL containing {key}, or "", got "https://api.example/orders/by-key")"},
      {R"({"saferetry": {"statusQuery": {"urlTemplate": "ftp://x/{key}"}}})",
       R"($.saferetry.statusQuery.urlTemplate: expected an absolute http(s) URL containing {key}, or "", got "ftp://x/{key}")"},
      {R"({"saferetry": {"statusQuery": {"url": "x"}}})",
       "$.saferetry.statusQuery.url: unknown field (expected one of urlTemplate)"},
      {R"({"saferetry": {"serverDeduplicates": "yes"}})",
       R"($.saferetry.serverDeduplicates: expected true or false, got "yes")"},
      {R"({"saferetry": {"idempotency": {"header": "Bad Header"}}})",
       R"($.saferetry.idempotency.header: expected a header name (a token), got "Bad Header")"},
      {R"({"saferetry": {"idempotency": {"header": ""}}})",
       R"($.saferetry.idempotency.header: expected a header name (a token), got "")"},
      {R"({"saferetry": {"idempotency": {"form": "quoted"}}})",
       R"($.saferetry.idempotency.form: expected one of "bare", "quotedString", got "quoted")"},
      {R"({"saferetry": {"idempotency": {"mode": true}}})",
       R"($.saferetry.idempotency.mode: expected one of "auto", "always", "never", got true)"},
      {R"({"saferetry": {"deadlineHeader": "X:Y"}})",
       R"($.saferetry.deadlineHeader: expected a header name (a token) or "" to disable, got "X:Y")"},
      {R"({"saferetry": {"maxRetryAfter": "0s"}})",
       R"($.saferetry.maxRetryAfter: expected a duration > 0 like "0.1s" (decimal seconds, "s" suffix), got "0s")"},
      {R"({"saferetry": {"budget": "leaky"}})",
       R"($.saferetry.budget: expected one of "ratio", "tokenThrottle", "costQuota", "none", got "leaky")"},
      {R"({"saferetry": {"budget": "ratio", "costQuota": {}}})",
       R"($.saferetry.budget: expected "costQuota" to match the budget object given, got "ratio")"},
      {R"({"retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}, "saferetry": {"ratioBudget": {}}})",
       "$.saferetry.budget: retryThrottling, saferetry.ratioBudget and saferetry.costQuota are "
       "alternatives; give at most one"},
      {R"({"saferetry": {"ratioBudget": {"percent": 1000.5}}})",
       "$.saferetry.ratioBudget.percent: expected a number in [0, 1000], got 1000.5"},
      {R"({"saferetry": {"ratioBudget": {"window": "0.5s"}}})",
       R"($.saferetry.ratioBudget.window: expected a duration in [1s, 86400s] like "10s", got "0.5s")"},
      {R"({"saferetry": {"costQuota": {"retryCost": 0}}})",
       "$.saferetry.costQuota.retryCost: expected an integer in [1, 1099511627776], got 0"},
      {R"({"saferetry": {"classification": {"5xx": "ambiguous"}}})",
       R"($.saferetry.classification["5xx"]: expected an HTTP status 100..599 as the field name)"},
      {R"({"saferetry": {"classification": {"503": "maybe"}}})",
       R"($.saferetry.classification["503"]: expected one of "success", "permanent", "precondition_failed", "in_progress", "retryable_transient", "ambiguous", "unavailable_unproven", got "maybe")"},
      {R"({"saferetry": {"classification": {"503": "retryable_not_delivered"}}})",
       R"($.saferetry.classification["503"]: expected one of "success", "permanent", "precondition_failed", "in_progress", "retryable_transient", "ambiguous", "unavailable_unproven", got "retryable_not_delivered")"},
      {R"({"saferetry": {"colour": "blue"}})",
       "$.saferetry.colour: unknown field (expected one of jitter, deadline, attemptTimeout, "
       "deadlineMargin, minUsefulAttempt, maxStatusQueries, statusQuery, serverDeduplicates, "
       "idempotency, deadlineHeader, attemptHeader, requestIdHeader, maxRetryAfter, "
       "doNotRetryHeader, budget, budgetOptions, ratioBudget, costQuota, classification, "
       "circuitBreaker, hedging, responsePredicate, phaseLimits)"},
      {R"({"retryPolicy": {"perAttemptRecvTimeout": "1s"}, "saferetry": {"attemptTimeout": "2s"}})",
       "$.saferetry.attemptTimeout: conflicts with retryPolicy.perAttemptRecvTimeout"},
  };
  for (const ErrorCase& c : cases) {
    EXPECT_EQ(ErrorOf(c.json), c.message) << c.json;
  }
}

TEST(ConfigTest, MalformedJsonReportsLineAndColumn) {
  EXPECT_EQ(ErrorOf("{\n  \"retryPolicy\": {,}\n}"),
            "$: malformed JSON: line 2, column 19: syntax error while parsing object key - "
            "unexpected ','; expected string literal");
  EXPECT_EQ(ErrorOf(""),
            "$: malformed JSON: line 1, column 1: syntax error while parsing value - unexpected "
            "end of input; expected '[', '{', or a literal");
}

TEST(ConfigTest, HostileInputNeverCrashes) {
  const std::string deep(100000, '[');
  EXPECT_THAT(ErrorOf(deep), ::testing::StartsWith("$: malformed JSON: "));
  EXPECT_EQ(ErrorOf(R"({"retryPolicy": {"maxAttempts": 99999999999999999999999}})"),
            "$.retryPolicy.maxAttempts: expected an integer >= 1, got 9.999999999999999e+22");
  EXPECT_EQ(ErrorOf(R"({"retryPolicy": {"maxAttempts": 18446744073709551615}})"),
            "$.retryPolicy.maxAttempts: expected an integer >= 1, got 18446744073709551615");
  EXPECT_EQ(
      ErrorOf(R"({"saferetry": {"deadline": "99999999999s"}})"),
      R"($.saferetry.deadline: expected a duration > 0 like "0.1s" (decimal seconds, "s" suffix), got "99999999999s")");
  EXPECT_EQ(ErrorOf(std::string(2 << 20, ' ')),
            "$: document too large (2097152 bytes; the limit is 1048576)");
  EXPECT_THAT(ErrorOf("{\"saferetry\": {\"jitter\": \"\xff\"}}"),
              ::testing::StartsWith("$: malformed JSON: line 1, column "));
}

TEST(ConfigTest, RoundTripDumpLoadGivesAnEqualPolicy) {
  std::vector<Policy> policies = {
      Policy{},
      MustLoad(kFull),
      MustLoad(R"({"retryThrottling": {"maxTokens": 3.5, "tokenRatio": 0.125},
                   "saferetry": {"jitter": "none", "attemptTimeout": "0.000001s"}})"),
      MustLoad(R"({"saferetry": {"budget": "none", "deadlineMargin": "0s"}})"),
      MustLoad(
          R"({"saferetry": {"ratioBudget": {"percent": 0.05, "minPerSecond": 0.5, "window": "60s"}}})"),
  };
  for (const Policy& p : policies) {
    const std::string dump = DumpPolicy(p);
    absl::StatusOr<Policy> back = LoadPolicy(dump);
    ASSERT_TRUE(back.ok()) << back.status() << "\n" << dump;
    EXPECT_EQ(*back, p) << dump;
    EXPECT_EQ(DumpPolicy(*back), dump);
  }
}

TEST(ConfigTest, DumpWritesEveryFieldInTheDocumentFormat) {
  const nlohmann::json dump = nlohmann::json::parse(DumpPolicy(Policy{}));
  const nlohmann::json expected = nlohmann::json::parse(R"({
    "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.100s", "maxBackoff": "10s",
                    "backoffMultiplier": 2.0},
    "saferetry": {
      "jitter": "full", "deadline": "30s", "attemptTimeout": null, "deadlineMargin": "0.010s",
      "minUsefulAttempt": "0.050s", "maxStatusQueries": 0, "statusQuery": {"urlTemplate": ""},
      "serverDeduplicates": false,
      "idempotency": {"header": "Idempotency-Key", "form": "bare", "mode": "auto"},
      "deadlineHeader": "X-Request-Timeout-Ms", "attemptHeader": "X-Retry-Attempt",
      "requestIdHeader": "X-Request-Id", "maxRetryAfter": "60s", "doNotRetryHeader": "",
      "budget": "ratio", "classification": {},
      "ratioBudget": {"percent": 0.1, "minPerSecond": 10.0, "window": "10s"}
    }
  })");
  EXPECT_EQ(dump, expected);
}

// The retryPolicy example from gRPC's retry guide, inside a service config.
constexpr char kGrpcExample[] = R"({
  "methodConfig": [{
    "name": [{"service": "grpc.examples.echo.Echo"}],
    "retryPolicy": {
      "maxAttempts": 4,
      "initialBackoff": "0.1s",
      "maxBackoff": "1s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE"]
    }
  }]
})";

TEST(ConfigTest, GrpcGuideExampleLoadsAndMeansTheSameThing) {
  Policy p = MustLoad(kGrpcExample);
  EXPECT_THAT(p.warnings, IsEmpty());
  EXPECT_EQ(p.max_attempts, 4);
  EXPECT_EQ(p.backoff.base, milliseconds(100));
  EXPECT_EQ(p.backoff.cap, seconds(1));
  EXPECT_EQ(p.backoff.multiplier, 2.0);
  EXPECT_EQ(p.backoff.jitter, JitterKind::kFull);  // gRPC: random(0, min(initial*mult^(n-1), max))
  EXPECT_EQ(p.retryable_codes, (std::set<std::string>{"UNAVAILABLE"}));

  // And it behaves that way: a GET that gets 503 three times, then 200, is
  // sent 4 times with full-jitter waits (u = 0.5) of 50, 100, 200 ms.
  auto clock = std::make_shared<testkit::FakeClock>();
  auto transport = std::make_shared<testkit::FakeTransport>(clock);
  transport->Push(testkit::Step::Respond(503))
      .Push(testkit::Step::Respond(503))
      .Push(testkit::Step::Respond(503))
      .Push(testkit::Step::Respond(200));
  ClientOptions o;
  o.transport = transport;
  o.clock = clock;
  o.random = std::make_shared<testkit::ScriptedRandom>();
  ASSERT_TRUE(ApplyToClientOptions(p, &o).ok());
  auto client = Client::Create(std::move(o));
  ASSERT_TRUE(client.ok());
  Request get;
  get.url = "http://127.0.0.1:1/echo";
  CallResult r = (*client)->Execute(get);  // the client's policy is p's
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.attempts, 4);
  EXPECT_THAT(clock->sleeps(), ElementsAre(milliseconds(50), milliseconds(100), milliseconds(200)));

  // 429 (RESOURCE_EXHAUSTED) is not listed: not retried, FAILED.
  transport->Push(testkit::Step::Respond(429));
  CallResult r2 = (*client)->Execute(get);
  EXPECT_EQ(r2.outcome, Outcome::kFailed);
  EXPECT_EQ(r2.stop_reason, StopReason::kPermanentError);
  EXPECT_EQ(r2.attempts, 1);
}

TEST(ConfigTest, ServiceConfigPicksTheNamedMethodAndWarnsAboutIgnoredFields) {
  constexpr char kConfig[] = R"({
    "loadBalancingConfig": [{"round_robin": {}}],
    "retryThrottling": {"maxTokens": 6, "tokenRatio": 0.2},
    "methodConfig": [
      {"name": [{}], "timeout": "9s"},
      {"name": [{"service": "shop.Orders"}], "timeout": "3s", "waitForReady": true,
       "retryPolicy": {"maxAttempts": 2, "initialBackoff": "0.2s", "maxBackoff": "2s",
                       "backoffMultiplier": 3, "retryableStatusCodes": ["UNAVAILABLE"]}},
      {"name": [{"service": "shop.Orders", "method": "Create"}], "timeout": "1.5s",
       "maxRequestMessageBytes": 1024,
       "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.05s", "maxBackoff": "0.5s",
                       "backoffMultiplier": 2, "retryableStatusCodes": [14, "INTERNAL"],
                       "perAttemptRecvTimeout": "0.4s"}}
    ]
  })";
  LoadOptions create{"/shop.Orders/Create"};
  Policy p = MustLoad(kConfig, create);
  EXPECT_EQ(p.max_attempts, 5);
  EXPECT_EQ(p.timeout, milliseconds(1500));
  EXPECT_EQ(p.deadline_options.attempt_cap, milliseconds(400));
  EXPECT_EQ(p.retryable_codes, (std::set<std::string>{"INTERNAL", "UNAVAILABLE"}));
  EXPECT_EQ(p.budget, "tokenThrottle");
  EXPECT_EQ(p.token_throttle.max_tokens, 6);
  EXPECT_EQ(p.token_throttle.token_ratio, 0.2);
  EXPECT_THAT(p.warnings,
              ElementsAre("$.loadBalancingConfig: ignored (no HTTP meaning)",
                          "$.methodConfig[2].maxRequestMessageBytes: ignored (no HTTP meaning)"));

  Policy list = MustLoad(kConfig, LoadOptions{"shop.Orders/List"});
  EXPECT_EQ(list.max_attempts, 2);
  EXPECT_EQ(list.timeout, seconds(3));
  EXPECT_EQ(list.backoff.multiplier, 3.0);
  EXPECT_THAT(list.warnings,
              ElementsAre("$.loadBalancingConfig: ignored (no HTTP meaning)",
                          "$.methodConfig[1].waitForReady: ignored (no HTTP meaning)"));

  // The default (empty) name has no retryPolicy: gRPC sends once.
  Policy other = MustLoad(kConfig, LoadOptions{"shop.Payments/Pay"});
  EXPECT_EQ(other.max_attempts, 1);
  EXPECT_EQ(other.timeout, seconds(9));

  EXPECT_EQ(ErrorOf(kConfig),
            "$.methodConfig: expected exactly one method config when no method is named, got 3 "
            "(set LoadOptions::method)");
  EXPECT_EQ(ErrorOf(R"({"methodConfig": [{"name": [{"service": "a.B"}]}]})", LoadOptions{"c.D/E"}),
            R"($.methodConfig: no method config matches "c.D/E")");
  EXPECT_EQ(
      ErrorOf(
          R"({"methodConfig": [{"name": [{"service": "a.B"}], "retryPolicy": {"maxAttempts": 3}}]})"),
      "$.methodConfig[0].retryPolicy.initialBackoff: required in a gRPC retryPolicy");
  EXPECT_EQ(ErrorOf(R"({"methodConfig": [{"nmae": []}]})"),
            "$.methodConfig[0].nmae: unknown field (expected one of name, waitForReady, timeout, "
            "maxRequestMessageBytes, maxResponseMessageBytes, retryPolicy, hedgingPolicy)");
  EXPECT_EQ(ErrorOf(R"({"methodConfig": [{"timeout": "1s"}], "saferetry": {"deadline": "2s"}})"),
            "$.saferetry.deadline: conflicts with $.methodConfig[0].timeout");
  EXPECT_EQ(ErrorOf(R"({"methodConfig": {}})"), "$.methodConfig: expected an array, got an object");
  EXPECT_EQ(ErrorOf(R"({"saferetry": {"budget": "none", "ratioBudget": {}}})"),
            R"($.saferetry.budget: expected "ratio" to match the budget object given, got "none")");
}

TEST(ConfigTest, LoadPolicyFileNamesThePath) {
  const std::string missing = ::testing::TempDir() + "/no-such-policy.json";
  absl::StatusOr<Policy> p = LoadPolicyFile(missing);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(), missing + ": cannot open: No such file or directory");

  const std::string bad = ::testing::TempDir() + "/bad-policy.json";
  {
    std::ofstream out(bad);
    out << R"({"retryPolicy": {"maxAttempts": "three"}})";
  }
  p = LoadPolicyFile(bad);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(),
            bad + R"(: $.retryPolicy.maxAttempts: expected an integer >= 1, got "three")");

  const std::string good = ::testing::TempDir() + "/good-policy.json";
  {
    std::ofstream out(good);
    out << kFull;
  }
  p = LoadPolicyFile(good);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, MustLoad(kFull));
  std::remove(bad.c_str());
  std::remove(good.c_str());
}

TEST(ConfigTest, ExampleFileLoadsWithoutWarnings) {
  // The source tree, from this file's own (absolute) path.
  std::string root = __FILE__;
  root.resize(root.size() - std::string_view("tests/unit/config_test.cc").size());
  absl::StatusOr<Policy> p = LoadPolicyFile(root + "examples/policy.json");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->warnings, IsEmpty());
  EXPECT_EQ(p->max_attempts, 4);
}

TEST(ConfigTest, ToRetryPolicyAndApplyToClientOptions) {
  Policy p = MustLoad(kFull);
  std::shared_ptr<const RetryPolicy> built = ToRetryPolicy(p).value();
  const RetryPolicyOptions& c = built->options();
  EXPECT_EQ(c.timeout, milliseconds(2500));
  EXPECT_EQ(c.max_attempts, 5);
  EXPECT_EQ(c.max_status_queries, 3);
  EXPECT_EQ(c.backoff.base, milliseconds(250));
  EXPECT_EQ(c.backoff.jitter, JitterKind::kDecorrelated);
  EXPECT_EQ(c.deadline_options.attempt_cap, milliseconds(800));
  EXPECT_EQ(c.deadline_options.margin, milliseconds(5));
  EXPECT_EQ(c.key_mode, KeyMode::kAlways);
  EXPECT_EQ(c.status_query.url_template, "https://api.example/orders/by-key/{key}");
  EXPECT_TRUE(c.server_deduplicates);
  EXPECT_EQ(c.idempotency_header, "X-Idem");
  EXPECT_EQ(c.key_form, KeyForm::kQuotedString);
  EXPECT_EQ(c.deadline_header, "X-Deadline-Ms");
  EXPECT_EQ(c.attempt_header, "");
  EXPECT_EQ(c.request_id_header, "X-Trace-Id");
  EXPECT_EQ(c.hints.max_retry_after, seconds(7));
  EXPECT_EQ(c.hints.do_not_retry_header, "X-No-Retry");
  EXPECT_TRUE(c == static_cast<const RetryPolicyOptions&>(p));

  ClientOptions o;
  ASSERT_TRUE(ApplyToClientOptions(p, &o).ok());
  ASSERT_NE(o.policy, nullptr);
  EXPECT_TRUE(o.policy->options() == static_cast<const RetryPolicyOptions&>(p));
  ASSERT_NE(o.budget, nullptr);
  EXPECT_EQ(o.budget->Balance(TimePoint{}), 100);
  // A cost quota with the document's prices: a timeout-like failure costs 7.
  EXPECT_TRUE(o.budget->OnFailure({AttemptClass::kAmbiguous}, TimePoint{}).allowed);
  EXPECT_EQ(o.budget->Balance(TimePoint{}), 93);

  Policy t = MustLoad(R"({"retryThrottling": {"maxTokens": 4, "tokenRatio": 0.5}})");
  ASSERT_TRUE(ApplyToClientOptions(t, &o).ok());
  ASSERT_NE(o.budget, nullptr);
  EXPECT_EQ(o.budget->Balance(TimePoint{}), 4);
  // A token throttle: 4 -> 3 is above half, 3 -> 2 is not.
  EXPECT_TRUE(o.budget->OnFailure({}, TimePoint{}).allowed);
  EXPECT_EQ(o.budget->OnFailure({}, TimePoint{}).refusal, "throttle_at_or_below_half");
  EXPECT_EQ(o.classifier, DefaultClassifierInstance());

  Policy bad;
  bad.budget = "costQuota";
  bad.cost_quota.capacity = -1;  // 0 is valid: "never retry"
  EXPECT_EQ(ApplyToClientOptions(bad, &o).message(), "cost_quota: capacity: must be >= 0, got -1");
  EXPECT_EQ(ApplyToClientOptions(Policy{}, nullptr).message(), "options: must not be null");
}

// gRPC's hedgingPolicy, in a service config and in saferetry's own document.
TEST(ConfigTest, GrpcHedgingPolicyBecomesTheHedgingOptions) {
  constexpr char kConfig[] = R"({"methodConfig": [{
    "name": [{"service": "shop.Catalog"}], "timeout": "2s",
    "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.050s",
                      "nonFatalStatusCodes": ["UNAVAILABLE", 503]}}]})";
  Policy p = MustLoad(kConfig);
  EXPECT_THAT(p.warnings, IsEmpty());
  EXPECT_TRUE(p.hedging.enabled);
  EXPECT_EQ(p.hedging.delay, milliseconds(50));
  EXPECT_FALSE(p.hedging.delay_from_p95);
  EXPECT_EQ(p.hedging.max_hedges, 2);
  EXPECT_EQ(p.max_attempts, 3);
  EXPECT_EQ(p.timeout, seconds(2));
  EXPECT_EQ(p.retryable_codes, (std::set<std::string>{"UNAVAILABLE"}));
  EXPECT_EQ(p.retryable_http_statuses, (std::set<int>{503}));
  const RetryPolicyOptions c = ToRetryPolicy(p).value()->options();
  EXPECT_TRUE(c.hedging.enabled);
  EXPECT_EQ(c.hedging.delay, milliseconds(50));
  EXPECT_EQ(c.hedging.max_hedges, 2);
  EXPECT_EQ(c.max_attempts, 3);

  // gRPC's defaults: no delay (every copy at once), no non-fatal codes (the
  // default classification applies).
  Policy d = MustLoad(R"({"hedgingPolicy": {"maxAttempts": 2}})");
  EXPECT_TRUE(d.hedging.enabled);
  EXPECT_EQ(d.hedging.delay, Duration::zero());
  EXPECT_EQ(d.hedging.max_hedges, 1);
  EXPECT_EQ(d.max_attempts, 2);
  EXPECT_THAT(d.retryable_codes, IsEmpty());
  EXPECT_THAT(MustLoad(R"({"hedgingPolicy": {"maxAttempts": 2, "nonFatalStatusCodes": []}})")
                  .retryable_codes,
              IsEmpty());

  // At most four copies in flight; the rest of maxAttempts are retries.
  Policy five = MustLoad(R"({"hedgingPolicy": {"maxAttempts": 5, "hedgingDelay": "0s"}})");
  EXPECT_EQ(five.max_attempts, 5);
  EXPECT_EQ(five.hedging.max_hedges, 3);
  EXPECT_THAT(five.warnings,
              ElementsAre("$.hedgingPolicy.maxAttempts: at most 4 copies are in flight at once; "
                          "the other 1 attempt(s) are sent only after copies fail"));

  // saferetry's own names, read after hedgingPolicy.
  Policy own = MustLoad(R"({"hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.2s"},
                            "saferetry": {"hedging": {"delayFromP95": true, "maxHedges": 1}}})");
  EXPECT_TRUE(own.hedging.enabled);
  EXPECT_EQ(own.hedging.delay, milliseconds(200));
  EXPECT_TRUE(own.hedging.delay_from_p95);
  EXPECT_EQ(own.hedging.max_hedges, 1);
  EXPECT_EQ(own.max_attempts, 3);
  Policy ext = MustLoad(R"({"saferetry": {"hedging": {"enabled": true, "delay": "0.01s"}}})");
  EXPECT_TRUE(ext.hedging.enabled);
  EXPECT_EQ(ext.hedging.delay, milliseconds(10));
  EXPECT_EQ(ext.hedging.max_hedges, 1);
  EXPECT_EQ(ext.max_attempts, 3);  // retries after the copies fail, with backoff
}

TEST(ConfigTest, HedgingErrorsNameThePath) {
  const ErrorCase cases[] = {
      {R"({"methodConfig": [{"hedgingPolicy": {"hedgingDelay": "1s"}}]})",
       "$.methodConfig[0].hedgingPolicy.maxAttempts: required in a gRPC hedgingPolicy"},
      {R"({"methodConfig": [{"hedgingPolicy": {"maxAttempts": 2},
                             "retryPolicy": {"maxAttempts": 2, "initialBackoff": "1s",
                                             "maxBackoff": "1s", "backoffMultiplier": 2,
                                             "retryableStatusCodes": [14]}}]})",
       "$.methodConfig[0].hedgingPolicy: cannot be combined with $.methodConfig[0].retryPolicy "
       "(one or the other, as in gRPC)"},
      {R"({"retryPolicy": {}, "hedgingPolicy": {"maxAttempts": 2}})",
       "$.hedgingPolicy: cannot be combined with $.retryPolicy (one or the other, as in gRPC)"},
      {R"({"hedgingPolicy": {"maxAttempts": 1}})",
       "$.hedgingPolicy.maxAttempts: expected an integer >= 2, got 1"},
      {R"({"hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "-1s"}})",
       R"($.hedgingPolicy.hedgingDelay: expected a duration >= 0 like "0.1s" (decimal seconds, "s" suffix), got "-1s")"},
      {R"({"hedgingPolicy": {"maxAttempts": 2, "nonFatalStatusCodes": ["NOPE"]}})",
       R"($.hedgingPolicy.nonFatalStatusCodes[0]: expected a gRPC status code name other than OK ("UNAVAILABLE"), a code number 1..16, or an HTTP status 400..599, got "NOPE")"},
      {R"({"hedgingPolicy": {"maxAttempts": 2, "nonFatalStatusCodes": "UNAVAILABLE"}})",
       R"($.hedgingPolicy.nonFatalStatusCodes: expected an array, got "UNAVAILABLE")"},
      {R"({"hedgingPolicy": {"maxAttempts": 2, "hedgeDelay": "1s"}})",
       "$.hedgingPolicy.hedgeDelay: unknown field (expected one of maxAttempts, hedgingDelay, "
       "nonFatalStatusCodes)"},
      {R"({"saferetry": {"hedging": {"maxHedges": 4}}})",
       "$.saferetry.hedging.maxHedges: expected an integer in [0, 3], got 4"},
      {R"({"saferetry": {"hedging": {"enabled": "yes"}}})",
       R"($.saferetry.hedging.enabled: expected true or false, got "yes")"},
      {R"({"saferetry": {"hedging": {"delayFromP95s": true}}})",
       "$.saferetry.hedging.delayFromP95s: unknown field (expected one of enabled, delay, "
       "delayFromP95, maxHedges)"},
  };
  for (const ErrorCase& c : cases) {
    EXPECT_EQ(ErrorOf(c.json), c.message) << c.json;
  }
}

TEST(ConfigTest, HedgingRoundTripsThroughTheDump) {
  for (const char* doc : {R"({"hedgingPolicy": {"maxAttempts": 4, "hedgingDelay": "0.025s",
                                                   "nonFatalStatusCodes": [14]}})",
                          R"({"saferetry": {"hedging": {"enabled": false, "delay": "0.3s"}}})",
                          R"({"saferetry": {"hedging": {"enabled": true, "delayFromP95": true,
                                                        "maxHedges": 0}}})"}) {
    const Policy p = MustLoad(doc);
    const std::string dump = DumpPolicy(p);
    EXPECT_THAT(dump, ::testing::HasSubstr(R"("hedging": {)"));
    absl::StatusOr<Policy> back = LoadPolicy(dump);
    ASSERT_TRUE(back.ok()) << back.status() << "\n" << dump;
    EXPECT_EQ(*back, p) << dump;
  }
  EXPECT_THAT(DumpPolicy(Policy{}), ::testing::Not(::testing::HasSubstr("hedging")));
}

// Limits per phase: read, validated with the path, dumped and read back.
TEST(ConfigTest, PhaseLimitsAreReadAndRoundTripThroughTheDump) {
  const Policy p = MustLoad(R"({"saferetry": {"phaseLimits": {
      "connect": "0.3s", "firstByte": "2s", "speedLimit": 1000, "speedTime": "5s"}}})");
  EXPECT_EQ(p.phase_limits.connect, milliseconds(300));
  EXPECT_EQ(p.phase_limits.first_byte, milliseconds(2000));
  EXPECT_EQ(p.phase_limits.speed_limit, 1000);
  EXPECT_EQ(p.phase_limits.speed_time, milliseconds(5000));
  const std::string dump = DumpPolicy(p);
  EXPECT_THAT(dump, ::testing::HasSubstr(R"("phaseLimits": {)"));
  absl::StatusOr<Policy> back = LoadPolicy(dump);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << dump;
  EXPECT_EQ(*back, p) << dump;
  EXPECT_THAT(DumpPolicy(Policy{}), ::testing::Not(::testing::HasSubstr("phaseLimits")));
  // The built policy carries them to every attempt.
  absl::StatusOr<std::shared_ptr<const RetryPolicy>> built = RetryPolicy::Create(p);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ((*built)->options().phase_limits, p.phase_limits);

  const ErrorCase cases[] = {
      {R"({"saferetry": {"phaseLimits": {"firstByte": "-1s"}}})",
       R"($.saferetry.phaseLimits.firstByte: expected a duration >= 0 like "0.1s" (decimal seconds, "s" suffix), got "-1s")"},
      {R"({"saferetry": {"phaseLimits": {"speedTime": "1.5s", "speedLimit": 1}}})",
       R"($.saferetry.phaseLimits.speedTime: libcurl counts whole seconds, got "1.500s")"},
      {R"({"saferetry": {"phaseLimits": {"connect": "31536001s"}}})",
       R"($.saferetry.phaseLimits.connect: must be at most a year, got "31536001s")"},
      {R"({"saferetry": {"phaseLimits": {"speedLimit": 10}}})",
       "$.saferetry.phaseLimits.speedLimit: given without speedTime"},
      {R"({"saferetry": {"phaseLimits": {"read": "1s"}}})",
       "$.saferetry.phaseLimits.read: unknown field (expected one of connect, firstByte, "
       "speedLimit, speedTime)"},
  };
  for (const ErrorCase& c : cases) {
    EXPECT_EQ(ErrorOf(c.json), c.message) << c.json;
  }
  RetryPolicyOptions bad;
  bad.phase_limits.connect = milliseconds(-5);
  EXPECT_EQ(RetryPolicy::Create(bad).status().message(),
            "policy.phase_limits.connect: must be >= 0, got -5000000ns");
}

// What retryableStatusCodes does to classification.
class RetryableCodesTest : public ::testing::Test {
 protected:
  Classification Classify(const char* json, AttemptEvidence ev, bool idempotent,
                          bool keyed = false) {
    Policy p = MustLoad(json);
    ClientOptions o;
    EXPECT_TRUE(ApplyToClientOptions(p, &o).ok());
    RequestTraits traits;
    traits.idempotent = idempotent;
    traits.keyed = keyed;
    return o.classifier->Classify(ev, traits);
  }
  static AttemptEvidence Status(int code) {
    AttemptEvidence ev;
    ev.delivery = Delivery::kResponseReceived;
    ev.http_status = code;
    return ev;
  }
  // A 503 marked `Idempotency-Key-State: rejected`: refused before any work.
  static AttemptEvidence Rejected503() {
    AttemptEvidence ev = Status(503);
    ev.hints.key_state = KeyState::kRejected;
    return ev;
  }
  static AttemptEvidence NoResponse(absl::Status s) {
    AttemptEvidence ev;
    ev.delivery = Delivery::kMaybeDelivered;
    ev.transport_status = std::move(s);
    return ev;
  }
  static AttemptEvidence Refused() {
    AttemptEvidence ev;
    ev.delivery = Delivery::kNotSent;
    ev.transport_status = absl::UnavailableError("refused");
    return ev;
  }
};

constexpr char kUnavailableOnly[] = R"({"retryPolicy": {"retryableStatusCodes": ["UNAVAILABLE"]}})";
constexpr char kInternal[] =
    R"({"retryPolicy": {"retryableStatusCodes": ["INTERNAL", "DEADLINE_EXCEEDED", "ABORTED", "NOT_FOUND"]}})";

TEST_F(RetryableCodesTest, AListedCodeNeverMakesAnAmbiguousNonIdempotentAttemptRetryable) {
  for (const char* json : {kUnavailableOnly, kInternal}) {
    for (int status : {500, 502, 504, 501, 599}) {
      EXPECT_EQ(Classify(json, Status(status), false).cls, AttemptClass::kAmbiguous) << status;
    }
    EXPECT_EQ(Classify(json, NoResponse(absl::DeadlineExceededError("t")), false).cls,
              AttemptClass::kAmbiguous);
    EXPECT_EQ(Classify(json, NoResponse(absl::UnavailableError("reset")), false).cls,
              AttemptClass::kAmbiguous);
  }
}

// The class is what the evidence says (ambiguous); whether an idempotent
// request may be resent is the list's to say, through `no_retry`.
TEST_F(RetryableCodesTest, IdempotentRequestsRetryAmbiguousStatusesOnlyWhenListed) {
  for (const Classification& listed :
       {Classify(kInternal, Status(500), true), Classify(kInternal, Status(504), true),
        Classify(kInternal, NoResponse(absl::DeadlineExceededError("t")), true),
        Classify(kUnavailableOnly, Status(502), true),
        Classify(kUnavailableOnly, NoResponse(absl::UnavailableError("reset")), true)}) {
    EXPECT_EQ(listed.cls, AttemptClass::kAmbiguous);
    EXPECT_FALSE(listed.no_retry) << listed.reason;
  }
  const Classification c = Classify(kInternal, NoResponse(absl::UnavailableError("reset")), true);
  EXPECT_EQ(c.cls, AttemptClass::kAmbiguous);
  EXPECT_TRUE(c.no_retry);
  EXPECT_EQ(c.reason, "no complete response; its code is not in retryableStatusCodes");

  const Classification d = Classify(kUnavailableOnly, Status(500), true);
  EXPECT_EQ(d.cls, AttemptClass::kAmbiguous);
  EXPECT_TRUE(d.no_retry);
  EXPECT_EQ(d.reason, "may have taken effect; its code is not in retryableStatusCodes");
}

TEST_F(RetryableCodesTest, NotProcessedStatusesAreRetriedOnlyWhenListed) {
  EXPECT_EQ(Classify(kUnavailableOnly, Rejected503(), false).cls,
            AttemptClass::kRetryableTransient);
  const Classification c = Classify(kUnavailableOnly, Status(429), false);
  EXPECT_EQ(c.cls, AttemptClass::kPermanent);
  EXPECT_EQ(c.reason, "not processed; its code is not in retryableStatusCodes");
  EXPECT_EQ(Classify(kInternal, Rejected503(), false).cls, AttemptClass::kPermanent);
  // An unmarked 503 is doubt (docs/adr/0031): listed, an idempotent request
  // may be resent; not listed, nothing is, and a write is settled or UNKNOWN.
  const Classification listed = Classify(kUnavailableOnly, Status(503), true);
  EXPECT_EQ(listed.cls, AttemptClass::kUnavailableUnproven);
  EXPECT_FALSE(listed.no_retry);
  const Classification not_listed = Classify(kInternal, Status(503), true);
  EXPECT_EQ(not_listed.cls, AttemptClass::kUnavailableUnproven);
  EXPECT_TRUE(not_listed.no_retry);
  // Statuses no code names keep their default class.
  EXPECT_EQ(Classify(kInternal, Status(408), false).cls, AttemptClass::kRetryableTransient);
  EXPECT_EQ(Classify(kInternal, Status(422), false).cls, AttemptClass::kPermanent);
  // Listed 4xx: the server refused it, so resending is safe.
  EXPECT_EQ(Classify(kInternal, Status(404), false).cls, AttemptClass::kRetryableTransient);
  EXPECT_EQ(Classify(kInternal, Status(409), false).cls, AttemptClass::kRetryableTransient);
  // ...but a 409 on a keyed request stays "in progress": the first request may commit.
  EXPECT_EQ(Classify(kInternal, Status(409), false, true).cls, AttemptClass::kInProgress);
  EXPECT_EQ(Classify(kUnavailableOnly, Status(404), false).cls, AttemptClass::kPermanent);
  EXPECT_EQ(Classify(kUnavailableOnly, Status(201), false).cls, AttemptClass::kSuccess);
}

TEST_F(RetryableCodesTest, NotDeliveredIsAlwaysRetryableAndOverridesWin) {
  EXPECT_EQ(Classify(kInternal, Refused(), false).cls, AttemptClass::kRetryableNotDelivered);
  constexpr char kWithOverride[] =
      R"({"retryPolicy": {"retryableStatusCodes": ["UNAVAILABLE", 418]},
          "saferetry": {"classification": {"503": "ambiguous"}}})";
  EXPECT_EQ(Classify(kWithOverride, Status(503), false).cls, AttemptClass::kAmbiguous);
  // The override holds for every request; resending an idempotent one is the
  // state machine's decision, allowed because 503's code is listed.
  EXPECT_EQ(Classify(kWithOverride, Status(503), true).cls, AttemptClass::kAmbiguous);
  EXPECT_FALSE(Classify(kWithOverride, Status(503), true).no_retry);
  EXPECT_EQ(Classify(kWithOverride, Status(418), false).cls, AttemptClass::kRetryableTransient);
  EXPECT_EQ(Classify(kWithOverride, Status(417), false).cls, AttemptClass::kPermanent);
}

// The same classifier without JSON.
TEST(GrpcCodesClassifierTest, ClassifiesLikeTheJsonPolicy) {
  GrpcCodesClassifierOptions codes;
  codes.retryable_codes = {"UNAVAILABLE"};
  codes.retryable_http_statuses = {418};
  auto classifier = GrpcCodesClassifier::Create(codes);
  ASSERT_TRUE(classifier.ok()) << classifier.status();
  RequestTraits unsafe;
  RequestTraits idempotent;
  idempotent.idempotent = true;
  auto status = [](int code) {
    AttemptEvidence ev;
    ev.delivery = Delivery::kResponseReceived;
    ev.http_status = code;
    return ev;
  };
  AttemptEvidence rejected = status(503);
  rejected.hints.key_state = KeyState::kRejected;
  EXPECT_EQ((*classifier)->Classify(rejected, unsafe).cls, AttemptClass::kRetryableTransient);
  EXPECT_EQ((*classifier)->Classify(status(503), unsafe).cls, AttemptClass::kUnavailableUnproven);
  EXPECT_EQ((*classifier)->Classify(status(502), unsafe).cls, AttemptClass::kAmbiguous);
  EXPECT_EQ((*classifier)->Classify(status(502), idempotent).cls, AttemptClass::kAmbiguous);
  EXPECT_FALSE((*classifier)->Classify(status(502), idempotent).no_retry);
  const Classification not_listed = (*classifier)->Classify(status(429), unsafe);
  EXPECT_EQ(not_listed.cls, AttemptClass::kPermanent);
  EXPECT_EQ(not_listed.reason, "not processed; its code is not in retryableStatusCodes");
  EXPECT_EQ((*classifier)->Classify(status(418), unsafe).cls, AttemptClass::kRetryableTransient);
  EXPECT_EQ((*classifier)->Classify(status(500), idempotent).cls, AttemptClass::kAmbiguous);
  EXPECT_TRUE((*classifier)->Classify(status(500), idempotent).no_retry);

  AttemptEvidence reset;
  reset.delivery = Delivery::kMaybeDelivered;
  reset.transport_status = absl::UnavailableError("reset");
  EXPECT_EQ((*classifier)->Classify(reset, idempotent).cls, AttemptClass::kAmbiguous);
  EXPECT_FALSE((*classifier)->Classify(reset, idempotent).no_retry);
  EXPECT_EQ((*classifier)->Classify(reset, unsafe).cls, AttemptClass::kAmbiguous);

  // Every (evidence, traits) pair classifies as the JSON policy's classifier does.
  Policy p = MustLoad(R"({"retryPolicy": {"retryableStatusCodes": ["UNAVAILABLE", 418]}})");
  ClientOptions o;
  ASSERT_TRUE(ApplyToClientOptions(p, &o).ok());
  for (int code = 100; code < 600; ++code) {
    for (const RequestTraits& traits : {unsafe, idempotent}) {
      EXPECT_EQ((*classifier)->Classify(status(code), traits).cls,
                o.classifier->Classify(status(code), traits).cls)
          << code;
    }
  }
}

TEST(GrpcCodesClassifierTest, CreateRefusesUnknownCodesAndStatuses) {
  GrpcCodesClassifierOptions lower;
  lower.retryable_codes = {"unavailable"};
  EXPECT_EQ(GrpcCodesClassifier::Create(lower).status().message(),
            "retryable_codes: \"unavailable\" is not a gRPC status code name other than OK "
            "(\"UNAVAILABLE\")");
  GrpcCodesClassifierOptions ok;
  ok.retryable_codes = {"OK"};
  EXPECT_EQ(GrpcCodesClassifier::Create(ok).status().code(), absl::StatusCode::kInvalidArgument);
  GrpcCodesClassifierOptions http;
  http.retryable_http_statuses = {399};
  EXPECT_EQ(GrpcCodesClassifier::Create(http).status().message(),
            "retryable_http_statuses: expected HTTP statuses 400..599, got 399");
  http.retryable_http_statuses = {400, 599};
  EXPECT_TRUE(GrpcCodesClassifier::Create(http).ok());
  EXPECT_TRUE(GrpcCodesClassifier::Create({}).ok());

  // A hand-built policy with a bad code name is refused by ApplyToClientOptions.
  Policy p;
  p.retryable_codes = {"Unavailable"};
  ClientOptions o;
  EXPECT_EQ(ApplyToClientOptions(p, &o).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ConfigTest, GrpcCodeMappingTable) {
  EXPECT_EQ(GrpcCodeNames().size(), 17u);
  EXPECT_EQ(GrpcCodeNames()[14], "UNAVAILABLE");
  EXPECT_THAT(HttpStatusesForGrpcCode("UNAVAILABLE"), ElementsAre(502, 503));
  EXPECT_THAT(HttpStatusesForGrpcCode("RESOURCE_EXHAUSTED"), ElementsAre(429));
  EXPECT_THAT(HttpStatusesForGrpcCode("DEADLINE_EXCEEDED"), ElementsAre(504));
  EXPECT_THAT(HttpStatusesForGrpcCode("ABORTED"), ElementsAre(409));
  EXPECT_THAT(HttpStatusesForGrpcCode("INTERNAL"), ElementsAre(500));
  EXPECT_THAT(HttpStatusesForGrpcCode("NOPE"), IsEmpty());
}

}  // namespace
}  // namespace saferetry

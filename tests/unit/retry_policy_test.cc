// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// What a RetryPolicy makes once, when it is built, for every call of it: the
// machine's policy part, the first attempt's header value and its deadline
// header values; and that a call sends them as they are.

#include "saferetry/retry_policy.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "saferetry/call_state_machine.h"
#include "saferetry/client.h"
#include "saferetry/testing/fake_clock.h"
#include "saferetry/testing/fake_random.h"
#include "saferetry/testing/fake_transport.h"

namespace saferetry {
namespace {

TEST(RetryPolicyTest, TheMachinesPolicyIsMadeOnceFromTheOptions) {
  RetryPolicyOptions o;
  o.max_attempts = 5;
  o.max_status_queries = 7;
  o.server_deduplicates = true;
  o.status_query.url_template = "http://127.0.0.1:1/orders/{key}";
  o.status_query.fence_when_giving_up = true;
  ResponseRule rule;
  rule.statuses = {200};
  rule.body_contains = "\"applied\":false";
  rule.verdict = ResponseVerdict::kNotApplied;
  o.response_predicate.rules.push_back(rule);
  o.response_predicate.max_body_bytes = 1000;
  auto policy = RetryPolicy::Create(o);
  ASSERT_TRUE(policy.ok()) << policy.status();
  const CallPolicy& p = (*policy)->call_policy();
  EXPECT_EQ(p.max_attempts, 5);
  EXPECT_EQ(p.max_status_queries, 7);
  EXPECT_EQ(p.backoff, &(*policy)->backoff());
  EXPECT_EQ(p.poll_backoff, &(*policy)->options().poll_backoff);
  EXPECT_EQ(p.deadline_options, &(*policy)->options().deadline_options);
  EXPECT_TRUE(p.server_deduplicates);
  EXPECT_TRUE(p.fence_when_giving_up);
  EXPECT_EQ(p.response_predicate, (*policy)->response_predicate());
  EXPECT_NE(p.response_predicate, nullptr);
  EXPECT_EQ(p.response_predicate_max_body_bytes, 1000u);
  // What each call decides is left at the defaults, for the call to write.
  EXPECT_TRUE(p.deadline.is_infinite());
  EXPECT_FALSE(p.traits.keyed);
  EXPECT_FALSE(p.has_status_query);
  EXPECT_FALSE(p.key_minted);
  EXPECT_FALSE(p.hedging);
  EXPECT_FALSE(p.start_with_status_query);
  EXPECT_FALSE(p.earlier_attempt_may_have_taken_effect);
  EXPECT_EQ(p.circuit_breaker, nullptr);
  EXPECT_EQ(p.status_query_circuit_breaker, nullptr);
}

TEST(RetryPolicyTest, TheAttemptCountIsClampedToTheHardCap) {
  RetryPolicyOptions o;
  o.max_attempts = kMaxAttemptsHardCap + 5;
  auto policy = RetryPolicy::Create(o);
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ((*policy)->options().max_attempts, kMaxAttemptsHardCap);
  EXPECT_EQ((*policy)->call_policy().max_attempts, kMaxAttemptsHardCap);
}

// A call of a policy numbers each send against the policy's attempt count:
// 503, 503, 200 on a GET with four attempts.
TEST(RetryPolicyTest, ACallNumbersEachSendAgainstThePoliciesAttemptCount) {
  RetryPolicyOptions o;
  o.max_attempts = 4;
  auto policy = RetryPolicy::Create(o);
  ASSERT_TRUE(policy.ok()) << policy.status();
  auto transport = std::make_shared<testkit::FakeTransport>();
  transport->Push(testkit::Step::Respond(503));
  transport->Push(testkit::Step::Respond(503));
  transport->Push(testkit::Step::Respond(200));
  ClientOptions co;
  co.transport = transport;
  co.clock = std::make_shared<testkit::FakeClock>();
  co.random = std::make_shared<testkit::ScriptedRandom>();
  co.policy = *policy;
  auto client = Client::Create(std::move(co));
  ASSERT_TRUE(client.ok()) << client.status();
  const CallResult r = (*client)->Execute({"GET", "http://127.0.0.1:1/orders/1", {}, "", {}}, {});
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  ASSERT_EQ(transport->send_count(), 3);
  const std::vector<testkit::SentRequest> sent = transport->sent();
  const char* const kWant[] = {"attempt=1; max=4", "attempt=2; max=4", "attempt=3; max=4"};
  for (std::size_t i = 0; i < 3; ++i) {
    const std::optional<std::string_view> got =
        FindHeader(sent[i].request.headers, kDefaultAttemptHeader);
    ASSERT_TRUE(got.has_value()) << i;
    EXPECT_EQ(*got, kWant[i]);
  }
}

// A GET answered 503 then 200 with the default policy: its first send carries
// its attempt's timeout (14995 ms); its retry, after a wait, still has the
// retry plan's cap and the same value; a call with its own timeout (2 s)
// carries 995.
TEST(RetryPolicyTest, EachSendCarriesItsAttemptsTimeoutInTheDeadlineHeader) {
  auto transport = std::make_shared<testkit::FakeTransport>();
  transport->Push(testkit::Step::Respond(503));
  transport->Push(testkit::Step::Respond(200));
  transport->Push(testkit::Step::Respond(200));
  auto clock = std::make_shared<testkit::FakeClock>();
  ClientOptions co;
  co.transport = transport;
  co.clock = clock;
  co.random = std::make_shared<testkit::ScriptedRandom>(std::vector<double>{0.5});
  auto client = Client::Create(std::move(co));
  ASSERT_TRUE(client.ok()) << client.status();
  const Request get{"GET", "http://127.0.0.1:1/orders/1", {}, "", {}};
  EXPECT_EQ((*client)->Execute(get, {}).outcome, Outcome::kSucceeded);
  CallOptions own;
  own.timeout = std::chrono::seconds(2);
  EXPECT_EQ((*client)->Execute(get, own).outcome, Outcome::kSucceeded);
  ASSERT_EQ(transport->send_count(), 3);
  const std::vector<testkit::SentRequest> sent = transport->sent();
  std::vector<std::string> got;
  for (const testkit::SentRequest& s : sent) {
    got.emplace_back(FindHeader(s.request.headers, kDefaultDeadlineHeader).value_or("-"));
  }
  // The retry waits 50 ms (full jitter of 100 ms at 0.5): 29.94 s are left,
  // and the cap of (30 s - 10 ms) / 2 still holds.
  EXPECT_EQ(got[0], "14995");
  EXPECT_EQ(sent[0].timeout, std::chrono::milliseconds(14995));
  EXPECT_EQ(got[1], "14995");
  EXPECT_EQ(sent[1].timeout, std::chrono::milliseconds(14995));
  EXPECT_EQ(got[2], "995");
  EXPECT_EQ(sent[2].timeout, std::chrono::milliseconds(995));
}

}  // namespace
}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// A breaker that never opens changes no decision. This test runs every
// sequence of three answers, for a GET and for a keyed POST whose status
// queries answer too, through a client without breakers and through one
// whose breakers never open, and asserts that both decide the same: outcome,
// reason, sends, status queries, evidence, waits and the requests on the
// wire.

#include <gtest/gtest.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "saferetry/circuit_breaker.h"
#include "saferetry/client.h"
#include "saferetry/retry_policy.h"
#include "saferetry/testing/fake_clock.h"
#include "saferetry/testing/fake_random.h"
#include "saferetry/testing/fake_transport.h"

namespace saferetry {
namespace {

using testkit::Step;

// The answers each position of a sequence takes.
std::vector<std::function<Step()>> Answers() {
  return {
      [] { return Step::NotSent(); },
      [] { return Step::TimeoutAfterSend(); },
      [] { return Step::CommitThenLost(); },
      [] { return Step::Respond(200, {}, R"({"state":"succeeded"})"); },
      [] { return Step::Respond(503); },
      [] { return Step::RespondRetryAfter(503, "1"); },
      [] {
        return Step::Respond(409, {{"Idempotency-Key-State", "processing"}});
      },
      [] { return Step::Respond(404); },
      [] { return Step::Respond(422); },
  };
}

struct CallRun {
  CallResult result;
  std::vector<testkit::SentRequest> sent;
  std::vector<Duration> sleeps;
};

CallRun RunOnce(bool with_breakers, bool post, const std::vector<int>& sequence) {
  auto clock = std::make_shared<testkit::FakeClock>();
  auto transport = std::make_shared<testkit::FakeTransport>(clock);
  const std::vector<std::function<Step()>> answers = Answers();
  for (int i : sequence) transport->Push(answers[static_cast<std::size_t>(i)]());
  ClientOptions o;
  o.transport = transport;
  o.clock = clock;
  o.random = std::make_shared<testkit::ScriptedRandom>();
  if (with_breakers) {
    CircuitBreakerOptions b;
    b.minimum_calls = 1000000;  // never opens: only the path differs
    o.circuit_breakers = CircuitBreakerRegistry::Create(b).value();
  }
  auto client = Client::Create(std::move(o)).value();
  CallOptions call;
  call.timeout = std::chrono::seconds(10);
  Request request{"GET", "http://127.0.0.1:1/orders/1", {}, "", {}};
  if (post) {
    request = {"POST", "http://127.0.0.1:1/orders", {}, R"({"sku":"a"})", {}};
    call.idempotency_key = "k-plain-path";
    call.status_url = "http://127.0.0.1:1/orders/by-key/{key}";
  }
  CallRun run;
  run.result = client->Execute(request, call);
  run.sent = transport->sent();
  run.sleeps = clock->sleeps();
  return run;
}

void ExpectSame(const CallRun& plain, const CallRun& full, const std::string& what) {
  const CallResult& a = plain.result;
  const CallResult& b = full.result;
  EXPECT_EQ(a.outcome, b.outcome) << what;
  EXPECT_EQ(a.stop_reason, b.stop_reason) << what;
  EXPECT_EQ(a.resolved_by, b.resolved_by) << what;
  EXPECT_EQ(a.attempts, b.attempts) << what;
  EXPECT_EQ(a.status_queries, b.status_queries) << what;
  EXPECT_EQ(a.elapsed, b.elapsed) << what;
  EXPECT_EQ(a.status, b.status) << what;
  EXPECT_EQ(a.last_transport_status, b.last_transport_status) << what;
  EXPECT_EQ(a.last_response.has_value(), b.last_response.has_value()) << what;
  ASSERT_EQ(a.evidence.size(), b.evidence.size()) << what;
  for (std::size_t i = 0; i < a.evidence.size(); ++i) {
    const AttemptEvidence& x = a.evidence[i];
    const AttemptEvidence& y = b.evidence[i];
    EXPECT_EQ(x.number, y.number) << what << " evidence " << i;
    EXPECT_EQ(x.is_status_query, y.is_status_query) << what << " evidence " << i;
    EXPECT_EQ(x.classification, y.classification) << what << " evidence " << i;
    EXPECT_EQ(x.reason, y.reason) << what << " evidence " << i;
    EXPECT_EQ(x.start, y.start) << what << " evidence " << i;
    EXPECT_EQ(x.end, y.end) << what << " evidence " << i;
    EXPECT_EQ(x.deadline_remaining, y.deadline_remaining) << what << " evidence " << i;
    EXPECT_EQ(x.budget_balance, y.budget_balance) << what << " evidence " << i;
    EXPECT_EQ(x.delay_after, y.delay_after) << what << " evidence " << i;
    EXPECT_EQ(x.resend_count, y.resend_count) << what << " evidence " << i;
  }
  EXPECT_EQ(plain.sleeps, full.sleeps) << what;
  ASSERT_EQ(plain.sent.size(), full.sent.size()) << what;
  for (std::size_t i = 0; i < plain.sent.size(); ++i) {
    EXPECT_EQ(plain.sent[i].request.method, full.sent[i].request.method) << what << " send " << i;
    EXPECT_EQ(plain.sent[i].request.url, full.sent[i].request.url) << what << " send " << i;
    EXPECT_EQ(plain.sent[i].request.headers, full.sent[i].request.headers) << what << " send " << i;
    EXPECT_EQ(plain.sent[i].timeout, full.sent[i].timeout) << what << " send " << i;
  }
}

TEST(PlainPathTest, EverySequenceOfThreeAnswersDecidesTheSameWithAndWithoutBreakers) {
  const int kinds = static_cast<int>(Answers().size());
  int runs = 0;
  int retried = 0;  // runs that went past the plain path (a wait, a poll)
  for (const bool post : {false, true}) {
    for (int a = 0; a < kinds; ++a) {
      for (int b = 0; b < kinds; ++b) {
        for (int c = 0; c < kinds; ++c) {
          const std::vector<int> sequence = {a, b, c};
          const std::string what = std::string(post ? "POST" : "GET") + " " + std::to_string(a) +
                                   "," + std::to_string(b) + "," + std::to_string(c);
          const CallRun plain = RunOnce(false, post, sequence);
          const CallRun full = RunOnce(true, post, sequence);
          ExpectSame(plain, full, what);
          ++runs;
          if (plain.sent.size() > 1) ++retried;
        }
      }
    }
  }
  EXPECT_EQ(runs, 2 * kinds * kinds * kinds);
  // The sequences reach both the first answer's decision and the later ones.
  EXPECT_GT(retried, runs / 2);
}

}  // namespace
}  // namespace saferetry

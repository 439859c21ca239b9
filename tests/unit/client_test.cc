// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The call, end to end on the fake clock, the scripted random and the fake
// transport / simulated order server: exact attempts, waits and effects.

#include "saferetry/client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "saferetry/testing/fake_clock.h"
#include "saferetry/testing/fake_random.h"
#include "saferetry/testing/fake_transport.h"
#include "saferetry/testing/simulated_order_server.h"

namespace saferetry {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using testkit::FakeClock;
using testkit::FakeTransport;
using testkit::OrderFault;
using testkit::ScriptedRandom;
using testkit::SimulatedOrderServer;
using testkit::Step;

constexpr char kOrders[] = "http://127.0.0.1:8080/orders";
constexpr char kStatus[] = "http://127.0.0.1:8080/orders/by-key/{key}";

Request Post(std::string body = R"({"sku":"sku-42","quantity":1})") {
  Request r;
  r.method = "POST";
  r.url = kOrders;
  r.headers = {{"Content-Type", "application/json"}};
  r.body = std::move(body);
  return r;
}

Request Get() {
  Request r;
  r.url = "http://127.0.0.1:8080/orders/1";
  return r;
}

std::optional<std::string> HeaderOf(const Request& r, std::string_view name) {
  auto v = FindHeader(r.headers, name);
  if (!v) return std::nullopt;
  return std::string(*v);
}

class ClientTest : public ::testing::Test {
 protected:
  std::unique_ptr<Client> Make(std::shared_ptr<Transport> transport,
                               std::shared_ptr<RetryBudget> budget = nullptr) {
    ClientOptions o;
    o.transport = std::move(transport);
    o.clock = clock_;
    o.random = random_;
    o.budget = budget ? budget : MakeUnlimitedBudget();
    o.status_query_budget = MakeUnlimitedBudget();
    auto c = Client::Create(std::move(o));
    EXPECT_TRUE(c.ok()) << c.status();
    return *std::move(c);
  }

  std::shared_ptr<FakeClock> clock_ = std::make_shared<FakeClock>();
  std::shared_ptr<ScriptedRandom> random_ = std::make_shared<ScriptedRandom>();  // u = 0.5
  std::shared_ptr<FakeTransport> fake_ = std::make_shared<FakeTransport>(clock_);
  std::shared_ptr<SimulatedOrderServer> server_ = std::make_shared<SimulatedOrderServer>(clock_);
};

// Seed 000 §七: the order commits, the response is lost, a status query with
// the same key finds it.
TEST_F(ClientTest, CommitThenLostIsResolvedByStatusQuery) {
  server_->ScriptFaults({OrderFault::kCommitThenLoseResponse});
  CallOptions call;
  call.status_url = kStatus;
  CallResult r = Make(server_)->Execute(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.stop_reason, StopReason::kSuccess);
  EXPECT_TRUE(r.resolved_by_status_query);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.status_queries, 1);
  ASSERT_TRUE(r.idempotency_key.has_value());
  EXPECT_EQ(server_->effects(*r.idempotency_key), 1);
  EXPECT_EQ(server_->total_effects(), 1);
  ASSERT_TRUE(r.last_response.has_value());
  EXPECT_EQ(r.last_response->status_code, 201);
  EXPECT_EQ(r.last_response->body, R"({"order_id":1})");
  // The poll pacing: equal jitter on a 50 ms ceiling, u = 0.5.
  EXPECT_THAT(clock_->sleeps(), ElementsAre(microseconds(37500)));
  ASSERT_EQ(r.evidence.size(), 2u);
  EXPECT_EQ(r.evidence[0].delivery, Delivery::kMaybeDelivered);
  EXPECT_EQ(r.evidence[0].classification, AttemptClass::kAmbiguous);
  EXPECT_TRUE(r.evidence[1].is_status_query);
}

TEST_F(ClientTest, SameKeyOnEveryAttemptAndQuery) {
  fake_->Push(Step::NotSent()).Push(Step::CommitThenLost()).Push(Step::Respond(404));
  fake_->Push(Step::Respond(201, {}, "ok"));
  CallOptions call;
  call.status_url = kStatus;
  call.idempotency_key = "order/o-1+x";
  CallResult r = Make(fake_)->Execute(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.attempts, 3);
  EXPECT_EQ(r.status_queries, 1);
  auto sent = fake_->sent();
  ASSERT_EQ(sent.size(), 4u);
  for (const auto& s : sent) EXPECT_EQ(HeaderOf(s.request, "Idempotency-Key"), "order/o-1+x");
  EXPECT_EQ(sent[2].request.method, "GET");
  EXPECT_EQ(sent[2].request.url, "http://127.0.0.1:8080/orders/by-key/order%2Fo-1%2Bx");
  // The status query drops headers that describe the body.
  EXPECT_EQ(HeaderOf(sent[2].request, "Content-Type"), std::nullopt);
  EXPECT_EQ(sent[2].request.body, "");
  // Retry backoff (full jitter, 100 ms ceiling) | poll pacing (37.5 ms) |
  // retry backoff (200 ms ceiling).
  EXPECT_THAT(clock_->sleeps(),
              ElementsAre(milliseconds(50), microseconds(37500), milliseconds(100)));
}

TEST_F(ClientTest, InProgressPollsWithTheSameKey) {
  server_->ScriptFaults({OrderFault::kInProgressThenCommit});
  CallResult r = Make(server_)->Execute(Post(), CallOptions{});
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(r.status_queries, 0);
  EXPECT_EQ(server_->effects(*r.idempotency_key), 1);
  EXPECT_EQ(r.evidence[0].classification, AttemptClass::kInProgress);
  EXPECT_THAT(clock_->sleeps(), ElementsAre(microseconds(37500)));  // a poll
}

TEST_F(ClientTest, InProgressPollsByStatusQueryWhenConfigured) {
  fake_->Push(Step::Respond(409)).Push(Step::Respond(409)).Push(Step::Respond(200, {}, "done"));
  CallOptions call;
  call.status_url = kStatus;
  CallResult r = Make(fake_)->Execute(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_TRUE(r.resolved_by_status_query);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.status_queries, 2);
  EXPECT_THAT(clock_->sleeps(), ElementsAre(microseconds(37500), microseconds(56250)));
}

TEST_F(ClientTest, KeyReusedWithAnotherPayloadFailsAfterOneAttempt) {
  fake_->Push(Step::Respond(422, {}, "key reused"));
  CallResult r = Make(fake_)->Execute(Post(), CallOptions{});
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kPermanentError);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_NE(r.evidence[0].reason.find("idempotency key reused"), std::string_view::npos);
  EXPECT_THAT(clock_->sleeps(), IsEmpty());
}

TEST_F(ClientTest, NoKeyAndAmbiguousEndsUnknownAfterExactlyOnePost) {
  server_->ScriptFaults({OrderFault::kCommitThenLoseResponse});
  CallOptions call;
  saferetry::RetryPolicyOptions call_policy;
  call_policy.key_mode = KeyMode::kNever;
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  CallResult r = Make(server_)->Execute(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kAmbiguousUnresolved);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(server_->posts_received(), 1);
  EXPECT_EQ(server_->total_effects(), 1);
  EXPECT_FALSE(r.idempotency_key.has_value());
}

TEST_F(ClientTest, KeyedAmbiguousWithoutQueryOrDedupEndsUnknown) {
  server_->ScriptFaults({OrderFault::kCommitThenHang});
  CallResult r = Make(server_)->Execute(Post(), CallOptions{});
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kAmbiguousUnresolved);
  EXPECT_EQ(server_->posts_received(), 1);
}

TEST_F(ClientTest, ConnectionRefusedIsRetriedEvenForPost) {
  server_->ScriptFaults({OrderFault::kRefuse, OrderFault::kRefuse});
  CallResult r = Make(server_)->Execute(Post(), CallOptions{});
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.attempts, 3);
  EXPECT_EQ(server_->total_effects(), 1);
  EXPECT_THAT(clock_->sleeps(), ElementsAre(milliseconds(50), milliseconds(100)));
}

TEST_F(ClientTest, StatusNotFoundResendsWithSameKeyAndCreatesOneOrder) {
  server_->ScriptFaults({OrderFault::kDropBeforeCommit});
  CallOptions call;
  call.status_url = kStatus;
  CallResult r = Make(server_)->Execute(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_FALSE(r.resolved_by_status_query);
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(r.status_queries, 1);
  EXPECT_EQ(server_->effects(*r.idempotency_key), 1);
  EXPECT_EQ(server_->total_effects(), 1);
}

TEST_F(ClientTest, AmbiguousThenUnavailableEndsUnknown) {
  server_->ScriptFaults(
      {OrderFault::kCommitThenLoseResponse, OrderFault::kUnavailable, OrderFault::kUnavailable});
  CallOptions call;
  saferetry::RetryPolicyOptions call_policy;
  call_policy.server_deduplicates = true;
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  CallResult r = Make(server_)->Execute(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kAttemptsExhausted);
  EXPECT_EQ(r.attempts, 3);
  EXPECT_EQ(server_->effects(*r.idempotency_key), 1);  // the order exists
  // Retry-After: 1 from the 503 is a floor above the backoff.
  EXPECT_THAT(clock_->sleeps(), ElementsAre(milliseconds(50), seconds(1)));
  EXPECT_FALSE(r.evidence[0].delay_from_server_hint);
  EXPECT_TRUE(r.evidence[1].delay_from_server_hint);
  EXPECT_EQ(r.evidence[1].delay_after, seconds(1));
}

TEST_F(ClientTest, AmbiguousThenCleanClientErrorStillUnknown) {
  fake_->Push(Step::CommitThenLost()).Push(Step::Respond(400));
  CallOptions call;
  saferetry::RetryPolicyOptions call_policy;
  call_policy.server_deduplicates = true;
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  CallResult r = Make(fake_)->Execute(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kAnswerNotDefinite);
}

TEST_F(ClientTest, DedupResendReplaysTheStoredResponse) {
  server_->ScriptFaults({OrderFault::kCommitThenLoseResponse});
  CallOptions call;
  saferetry::RetryPolicyOptions call_policy;
  call_policy.server_deduplicates = true;
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  CallResult r = Make(server_)->Execute(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(server_->posts_received(), 2);
  EXPECT_EQ(server_->effects(*r.idempotency_key), 1);
}

TEST_F(ClientTest, NotFoundWithNoAttemptLeftIsUnknown) {
  fake_->Push(Step::CommitThenLost()).Push(Step::Respond(404));
  CallOptions call;
  saferetry::RetryPolicyOptions call_policy;
  call_policy.max_attempts = 1;
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  call.status_url = kStatus;
  CallResult r = Make(fake_)->Execute(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kNotFoundNoAttemptsLeft);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.status_queries, 1);
}

TEST_F(ClientTest, StatusQueryStillUnknownQueriesAgainThenGivesUp) {
  fake_->Push(Step::CommitThenLost());
  for (int i = 0; i < 3; ++i) fake_->Push(Step::Respond(500));
  CallOptions call;
  saferetry::RetryPolicyOptions call_policy;
  call_policy.max_status_queries = 3;
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  call.status_url = kStatus;
  CallResult r = Make(fake_)->Execute(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kStatusQueriesExhausted);
  EXPECT_EQ(r.attempts, 1);  // never a resend
  EXPECT_EQ(r.status_queries, 3);
  EXPECT_THAT(clock_->sleeps(),
              ElementsAre(microseconds(37500), microseconds(56250), microseconds(84375)));
}

TEST_F(ClientTest, StatusQueryCallback) {
  fake_->Push(Step::CommitThenLost());
  CallOptions call;
  call.idempotency_key = "k-1";
  std::vector<std::string> asked;
  saferetry::RetryPolicyOptions call_policy;
  call_policy.status_query.callback = [&](std::string_view key, Duration) {
    asked.emplace_back(key);
    StatusQueryReply reply;
    reply.answer = StatusAnswer::kFound;
    reply.result.delivery = Delivery::kResponseReceived;
    reply.result.response = Response{200, {}, "found", false};
    return reply;
  };
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  CallResult r = Make(fake_)->Execute(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_TRUE(r.resolved_by_status_query);
  EXPECT_THAT(asked, ElementsAre("k-1"));
  EXPECT_EQ(r.last_response->body, "found");
}

TEST_F(ClientTest, TransientErrorsExhaustAttemptsAndFail) {
  fake_->Push(Step::RespondRejected()).Push(Step::Respond(429)).Push(Step::RespondRejected());
  CallResult r = Make(fake_)->Execute(Post(), CallOptions{});
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kAttemptsExhausted);
  EXPECT_EQ(r.attempts, 3);
  EXPECT_EQ(r.last_response->status_code, 503);
}

TEST_F(ClientTest, MaxAttemptsIsClampedToTheHardCap) {
  for (int i = 0; i < 20; ++i) fake_->Push(Step::Respond(503));
  CallOptions call;
  saferetry::RetryPolicyOptions call_policy;
  call_policy.max_attempts = 50;
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  call.timeout = std::chrono::hours(10);
  call_policy.backoff.jitter = JitterKind::kNone;
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  CallResult r = Make(fake_)->Execute(Get(), call);
  EXPECT_EQ(r.attempts, kMaxAttemptsHardCap);
  EXPECT_EQ(r.stop_reason, StopReason::kAttemptsExhausted);
}

TEST_F(ClientTest, SafeMethodNeverEndsUnknown) {
  fake_->Push(Step::TimeoutAfterSend()).Push(Step::Respond(500)).Push(Step::CommitThenLost());
  CallOptions call;
  saferetry::RetryPolicyOptions call_policy;
  call_policy.deadline_options.attempt_cap = seconds(1);
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  CallResult r = Make(fake_)->Execute(Get(), call);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kAttemptsExhausted);
  EXPECT_EQ(r.attempts, 3);
  EXPECT_FALSE(r.idempotency_key.has_value());
}

TEST_F(ClientTest, IdempotentPutThatMayHaveAppliedEndsUnknown) {
  fake_->Push(Step::CommitThenLost()).Push(Step::Respond(503)).Push(Step::Respond(503));
  Request put = Post();
  put.method = "PUT";
  CallResult r = Make(fake_)->Execute(put, CallOptions{});
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.attempts, 3);
}

TEST_F(ClientTest, BudgetRefusalStops) {
  auto throttle = MakeTokenThrottle({/*max_tokens=*/2, /*token_ratio=*/0.1});
  ASSERT_TRUE(throttle.ok());
  fake_->Push(Step::Respond(503)).Push(Step::Respond(503));
  CallResult r = Make(fake_, *throttle)->Execute(Get(), CallOptions{});
  // 2 tokens: the first failure leaves 1, which is not > 2/2.
  EXPECT_EQ(r.stop_reason, StopReason::kBudgetExhausted);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.attempts, 1);
}

TEST_F(ClientTest, ServerDoNotRetryHeaderStops) {
  ClientOptions o;
  o.transport = fake_;
  o.clock = clock_;
  o.random = random_;
  saferetry::RetryPolicyOptions o_policy;
  o_policy.hints.do_not_retry_header = "X-Do-Not-Retry";
  o.policy = saferetry::RetryPolicy::Create(o_policy).value();
  auto client = Client::Create(std::move(o));
  ASSERT_TRUE(client.ok());
  fake_->Push(Step::Respond(503, {{"X-Do-Not-Retry", "1"}}));
  CallResult r = (*client)->Execute(Get(), CallOptions{});
  EXPECT_EQ(r.stop_reason, StopReason::kServerDoNotRetry);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.attempts, 1);
}

TEST_F(ClientTest, RetryAfterPastTheDeadlineStopsAtOnce) {
  fake_->Push(Step::RespondRejected(503, {{"Retry-After", "5"}}));
  CallOptions call;
  call.timeout = seconds(2);
  CallResult r = Make(fake_)->Execute(Post(), call);
  EXPECT_EQ(r.stop_reason, StopReason::kRetryAfterBeyondDeadline);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_THAT(clock_->sleeps(), IsEmpty());
}

// Finding 6 (ADR 14): a hint shorter than the backoff no longer shortens
// the wait. Full jitter at u = 0.5: 50 ms, then 100 ms; `Retry-After: 0`
// changes neither.
TEST_F(ClientTest, RetryAfterShorterThanTheBackoffIsAFloorNotAReplacement) {
  fake_->Push(Step::RespondRetryAfter(503, "0"))
      .Push(Step::RespondRetryAfter(503, "0"))
      .Push(Step::Respond(200));
  CallResult r = Make(fake_)->Execute(Get(), CallOptions{});
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_THAT(clock_->sleeps(), ElementsAre(milliseconds(50), milliseconds(100)));
  EXPECT_TRUE(r.evidence[0].delay_from_server_hint);
}

// A hint above `hints.max_retry_after` (60 s) stops the call rather than
// come back before the server's "not before".
TEST_F(ClientTest, RetryAfterAboveTheMaximumStops) {
  fake_->Push(Step::RespondRetryAfter(503, "120")).Push(Step::Respond(200));
  CallOptions call;
  call.timeout = std::chrono::minutes(10);
  CallResult r = Make(fake_)->Execute(Get(), call);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kRetryAfterTooLong);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_THAT(clock_->sleeps(), IsEmpty());
  ASSERT_EQ(r.evidence.size(), 1u);
  EXPECT_EQ(r.evidence[0].hints.retry_after, seconds(60));
  EXPECT_TRUE(r.evidence[0].hints.retry_after_above_max);
}

TEST_F(ClientTest, RetryAfterIsHonouredExactly) {
  fake_->Push(Step::RespondRetryAfter(429, "3")).Push(Step::Respond(201));
  CallResult r = Make(fake_)->Execute(Post(), CallOptions{});
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_THAT(clock_->sleeps(), ElementsAre(seconds(3)));
  EXPECT_TRUE(r.evidence[0].delay_from_server_hint);
}

TEST_F(ClientTest, NoAttemptOrWaitRunsPastTheDeadline) {
  for (int i = 0; i < 10; ++i) fake_->Push(Step::TimeoutAfterSend());
  CallOptions call;
  call.timeout = milliseconds(1000);
  saferetry::RetryPolicyOptions call_policy;
  call_policy.max_attempts = 10;
  call_policy.backoff.jitter = JitterKind::kNone;
  call_policy.deadline_options.attempt_cap = milliseconds(300);
  const TimePoint start = clock_->Now();
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  CallResult r = Make(fake_)->Execute(Get(), call);
  EXPECT_EQ(r.stop_reason, StopReason::kDeadlineExceeded);
  // 300 | wait 100 | 300 | wait 200 | 90 (what remains less the margin)
  // => at 990 ms a 400 ms wait no longer fits.
  EXPECT_EQ(r.attempts, 3);
  EXPECT_THAT(clock_->sleeps(), ElementsAre(milliseconds(100), milliseconds(200)));
  auto sent = fake_->sent();
  for (const auto& s : sent) EXPECT_LE(s.at + s.timeout, start + milliseconds(1000));
  EXPECT_EQ(sent[0].timeout, milliseconds(300));
  EXPECT_EQ(HeaderOf(sent[0].request, "X-Request-Timeout-Ms"), "300");
  EXPECT_EQ(HeaderOf(sent[2].request, "X-Request-Timeout-Ms"), "90");
  EXPECT_EQ(sent[2].timeout, milliseconds(90));
  EXPECT_LE(clock_->Now(), start + milliseconds(1000));
}

TEST_F(ClientTest, DeadlineHeaderDecreasesAcrossAttempts) {
  fake_->Push(Step::NotSent().After(milliseconds(200))).Push(Step::Respond(200));
  CallOptions call;
  call.timeout = seconds(2);
  saferetry::RetryPolicyOptions call_policy;
  call_policy.backoff.jitter = JitterKind::kNone;
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  CallResult r = Make(fake_)->Execute(Get(), call);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  auto sent = fake_->sent();
  ASSERT_EQ(sent.size(), 2u);
  // A GET's time plan gives each attempt half of the call: (2000 - 10) / 2.
  EXPECT_EQ(HeaderOf(sent[0].request, "X-Request-Timeout-Ms"), "995");
  EXPECT_EQ(HeaderOf(sent[1].request, "X-Request-Timeout-Ms"), "995");
  EXPECT_EQ(HeaderOf(sent[0].request, "X-Retry-Attempt"), "attempt=1; max=3");
  EXPECT_EQ(HeaderOf(sent[1].request, "X-Retry-Attempt"), "attempt=2; max=3");
  EXPECT_EQ(r.evidence[1].deadline_remaining, milliseconds(1699));
}

TEST_F(ClientTest, DownstreamRequestIdIsRecorded) {
  fake_->Push(Step::Respond(503, {{"x-request-id", "srv-7"}})).Push(Step::Respond(200));
  CallResult r = Make(fake_)->Execute(Get(), CallOptions{});
  EXPECT_EQ(r.evidence[0].downstream_request_id, "srv-7");
  EXPECT_EQ(r.evidence[1].downstream_request_id, "");
}

TEST_F(ClientTest, DeadlineTooCloseAtStartSendsNothing) {
  CallOptions call;
  call.timeout = milliseconds(40);
  CallResult r = Make(fake_)->Execute(Post(), call);
  EXPECT_EQ(r.stop_reason, StopReason::kNoTimeForUsefulAttempt);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.attempts, 0);
  EXPECT_EQ(fake_->send_count(), 0);
}

TEST_F(ClientTest, CancelledBeforeStartSendsNothing) {
  CancellationToken token;
  token.Cancel();
  CallOptions call;
  call.cancellation = &token;
  CallResult r = Make(fake_)->Execute(Post(), call);
  EXPECT_EQ(r.stop_reason, StopReason::kCancelled);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(fake_->send_count(), 0);
}

TEST_F(ClientTest, CancelledDuringAnAttemptThatMayHaveBeenSentIsUnknown) {
  CancellationToken token;
  fake_->SetHandler([&](const Request&, const AttemptOptions&) {
    token.Cancel();
    return Step::CommitThenLost().result;
  });
  CallOptions call;
  call.cancellation = &token;
  saferetry::RetryPolicyOptions call_policy;
  call_policy.server_deduplicates = true;
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  CallResult r = Make(fake_)->Execute(Post(), call);
  EXPECT_EQ(r.stop_reason, StopReason::kCancelled);
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.attempts, 1);
}

TEST_F(ClientTest, CancelledDuringAnAmbiguousAttemptWithoutResolutionStopsAsCancelled) {
  CancellationToken token;
  fake_->SetHandler([&](const Request&, const AttemptOptions&) {
    token.Cancel();
    return Step::TimeoutAfterSend().result;
  });
  CallOptions call;
  call.cancellation = &token;
  CallResult r = Make(fake_)->Execute(Post(), call);
  EXPECT_EQ(r.stop_reason, StopReason::kCancelled);
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.attempts, 1);
}

TEST_F(ClientTest, CancelledAfterARefusedAttemptFails) {
  CancellationToken token;
  fake_->SetHandler([&](const Request&, const AttemptOptions&) {
    token.Cancel();
    return Step::NotSent().result;
  });
  CallOptions call;
  call.cancellation = &token;
  CallResult r = Make(fake_)->Execute(Post(), call);
  EXPECT_EQ(r.stop_reason, StopReason::kCancelled);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_THAT(clock_->sleeps(), IsEmpty());
}

TEST_F(ClientTest, CancelledDuringAWaitStopsBeforeTheNextAttempt) {
  CancellationToken token;
  struct CancelOnWait : CallListener {
    CancellationToken* token;
    void OnWaitScheduled(Duration, bool) override { token->Cancel(); }
  } listener;
  listener.token = &token;
  fake_->Push(Step::RespondRejected()).Push(Step::Respond(201));
  CallOptions call;
  call.cancellation = &token;
  call.listener = &listener;
  CallResult r = Make(fake_)->Execute(Post(), call);
  EXPECT_EQ(r.stop_reason, StopReason::kCancelled);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(fake_->send_count(), 1);
}

TEST_F(ClientTest, KeyIsAUuidV4FromTheOperatingSystemByDefault) {
  fake_->Push(Step::Respond(201)).Push(Step::Respond(201));
  auto client = Make(fake_);
  CallResult a = client->Execute(Post(), CallOptions{});
  CallResult b = client->Execute(Post(), CallOptions{});
  ASSERT_TRUE(a.idempotency_key.has_value());
  ASSERT_TRUE(b.idempotency_key.has_value());
  EXPECT_THAT(*a.idempotency_key,
              ::testing::MatchesRegex(
                  "[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"));
  EXPECT_NE(*a.idempotency_key, *b.idempotency_key);
  // Not drawn from the injected random seam (which would repeat the seed's key).
  EXPECT_NE(*a.idempotency_key, GenerateUuidV4(*std::make_shared<ScriptedRandom>()));
}

TEST_F(ClientTest, KeyIsAUuidV4FromTheRandomSeamWhenAsked) {
  fake_->Push(Step::Respond(201));
  ClientOptions o;
  o.transport = fake_;
  o.clock = clock_;
  o.random = random_;
  o.key_source = ClientOptions::KeySource::kRandomSeam;
  auto client = Client::Create(std::move(o));
  ASSERT_TRUE(client.ok());
  CallResult r = (*client)->Execute(Post(), CallOptions{});
  ASSERT_TRUE(r.idempotency_key.has_value());
  EXPECT_THAT(*r.idempotency_key,
              ::testing::MatchesRegex(
                  "[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"));
  // The same seed gives the same key.
  EXPECT_EQ(*r.idempotency_key, GenerateUuidV4(*std::make_shared<ScriptedRandom>()));
}

TEST_F(ClientTest, QuotedKeyForm) {
  ClientOptions o;
  o.transport = fake_;
  o.clock = clock_;
  saferetry::RetryPolicyOptions o_policy;
  o_policy.key_form = KeyForm::kQuotedString;
  o_policy.idempotency_header = "X-Idem";
  o.policy = saferetry::RetryPolicy::Create(o_policy).value();
  auto client = Client::Create(std::move(o));
  ASSERT_TRUE(client.ok());
  fake_->Push(Step::Respond(201));
  CallOptions call;
  call.idempotency_key = "abc";
  CallResult r = (*client)->Execute(Post(), call);
  EXPECT_EQ(HeaderOf(fake_->sent()[0].request, "X-Idem"), "\"abc\"");
}

TEST_F(ClientTest, KeyReusedForAnotherBodyIsRefusedBeforeSending) {
  fake_->Push(Step::Respond(201));
  auto client = Make(fake_);
  CallOptions call;
  call.idempotency_key = "o-1";
  EXPECT_EQ(client->Execute(Post(), call).outcome, Outcome::kSucceeded);
  CallResult r = client->Execute(Post(R"({"sku":"other"})"), call);
  EXPECT_EQ(r.stop_reason, StopReason::kInvalidArgument);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status.message()), ::testing::StartsWith("idempotency_key:"));
  EXPECT_EQ(fake_->send_count(), 1);
}

TEST_F(ClientTest, BadInputNamesTheField) {
  auto client = Make(fake_);
  Request bad = Post();
  bad.headers.push_back({"X-Evil", "a\r\nInjected: 1"});
  CallResult r = client->Execute(bad, CallOptions{});
  EXPECT_EQ(r.stop_reason, StopReason::kInvalidArgument);
  EXPECT_THAT(std::string(r.status.message()), ::testing::HasSubstr("request.headers[1]"));

  // The policy is validated once, when it is built.
  RetryPolicyOptions p;
  p.max_attempts = 0;
  EXPECT_THAT(std::string(RetryPolicy::Create(p).status().message()),
              ::testing::StartsWith("policy.max_attempts:"));
  p = RetryPolicyOptions{};
  p.backoff.multiplier = 0.5;
  EXPECT_THAT(std::string(RetryPolicy::Create(p).status().message()),
              ::testing::StartsWith("policy.backoff.multiplier"));
  p = RetryPolicyOptions{};
  p.status_query.url_template = "http://h/orders/";
  EXPECT_THAT(std::string(RetryPolicy::Create(p).status().message()),
              ::testing::StartsWith("policy.status_query.url_template:"));
  p = RetryPolicyOptions{};
  p.idempotency_header = "Bad Header";
  EXPECT_THAT(std::string(RetryPolicy::Create(p).status().message()),
              ::testing::StartsWith("policy.idempotency_header"));

  CallOptions call;
  call.status_url = "http://h/orders/by-key/";
  r = client->Execute(Post(), call);
  EXPECT_THAT(std::string(r.status.message()), ::testing::StartsWith("call.status_url:"));

  call = CallOptions{};
  call.idempotency_key = std::string(256, 'k');
  r = client->Execute(Post(), call);
  EXPECT_THAT(std::string(r.status.message()), ::testing::StartsWith("call.idempotency_key:"));

  call = CallOptions{};
  call.timeout = -std::chrono::seconds(1);
  r = client->Execute(Post(), call);
  EXPECT_THAT(std::string(r.status.message()), ::testing::StartsWith("call.timeout:"));
  EXPECT_EQ(fake_->send_count(), 0);

  EXPECT_FALSE(Client::Create(ClientOptions{}).ok());
  EXPECT_THAT(std::string(Client::Create(ClientOptions{}).status().message()),
              ::testing::StartsWith("transport:"));
}

TEST_F(ClientTest, ListenerSeesEveryStep) {
  struct Recorder : CallListener {
    std::vector<std::string> events;
    void OnAttemptStart(int n, bool q) override {
      events.push_back((q ? "query " : "attempt ") + std::to_string(n));
    }
    void OnAttemptEnd(const AttemptEvidence& e) override {
      events.push_back("end " + std::string(AttemptClassName(e.classification)));
    }
    void OnWaitScheduled(Duration d, bool) override {
      events.push_back("wait " +
                       std::to_string(std::chrono::duration_cast<milliseconds>(d).count()));
    }
    void OnFinish(const CallResult& r) override {
      events.push_back("finish " + std::string(OutcomeName(r.outcome)));
    }
  } rec;
  fake_->Push(Step::CommitThenLost()).Push(Step::Respond(200));
  CallOptions call;
  call.listener = &rec;
  call.status_url = kStatus;
  CallResult r = Make(fake_)->Execute(Post(), call);
  EXPECT_THAT(rec.events, ElementsAre("attempt 1", "end ambiguous", "wait 37", "query 1",
                                      "end success", "finish SUCCEEDED"));
}

// What a service's own test looks like: an ambiguous fault, exactly one order.
TEST(UserStyleTest, AmbiguousFaultCreatesExactlyOneOrder) {
  auto clock = std::make_shared<testkit::FakeClock>();
  auto server = std::make_shared<testkit::SimulatedOrderServer>(clock);
  server->ScriptFaults({testkit::OrderFault::kCommitThenLoseResponse});
  ClientOptions options;
  options.transport = server;
  options.clock = clock;
  auto client = Client::Create(std::move(options)).value();
  CallOptions call;
  call.status_url = "http://orders.test/orders/by-key/{key}";
  CallResult r = client->Execute({"POST", "http://orders.test/orders", {}, "{}"}, call);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(server->effects(*r.idempotency_key), 1);
}

}  // namespace
}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The promise with default options: only a timeout and a status URL, against
// faults that take time (a hang until the attempt times out, a slow commit, a
// long "in progress"), on a grid of deadlines. What a new user gets.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "saferetry/client.h"
#include "saferetry/testing/counting_budget.h"
#include "saferetry/testing/fake_clock.h"
#include "saferetry/testing/fake_transport.h"
#include "saferetry/testing/simulated_order_server.h"

namespace saferetry {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testkit::CountingBudget;
using testkit::FakeClock;
using testkit::FakeTransport;
using testkit::OrderFault;
using testkit::SimulatedOrderServer;
using testkit::Step;

constexpr char kOrders[] = "http://127.0.0.1:8080/orders";
constexpr char kStatus[] = "http://127.0.0.1:8080/orders/by-key/{key}";

Request Post() {
  return Request{
      "POST", kOrders, {{"Content-Type", "application/json"}}, R"({"sku":"sku-42","quantity":1})"};
}

// A client as a new user builds it: a transport and (for the test) a fake
// clock. Everything else is the library's default.
std::unique_ptr<Client> DefaultClient(std::shared_ptr<Transport> transport,
                                      std::shared_ptr<FakeClock> clock) {
  ClientOptions o;
  o.transport = std::move(transport);
  o.clock = std::move(clock);
  auto c = Client::Create(std::move(o));
  EXPECT_TRUE(c.ok()) << c.status();
  return *std::move(c);
}

CallOptions OnlyTimeoutAndStatusUrl(Duration timeout) {
  CallOptions call;
  call.timeout = timeout;
  call.status_url = kStatus;
  return call;
}

// The attempt timeout the time plan gives a keyed POST with a status query:
// T - max(30 % of T, 60 ms) - 10 ms (docs/adr/0005-time-plan.md).
Duration PlannedFirstAttempt(Duration t) {
  const Duration window = std::max<Duration>(t / 10 * 3, milliseconds(60));
  return t - window - milliseconds(10);
}

class DeadlineGrid : public ::testing::TestWithParam<Duration> {
 protected:
  std::shared_ptr<FakeClock> clock_ = std::make_shared<FakeClock>();
  std::shared_ptr<SimulatedOrderServer> server_ = std::make_shared<SimulatedOrderServer>(clock_);
};

std::string GridName(const ::testing::TestParamInfo<Duration>& info) {
  return std::to_string(std::chrono::duration_cast<milliseconds>(info.param).count()) + "ms";
}

INSTANTIATE_TEST_SUITE_P(Deadlines, DeadlineGrid,
                         ::testing::Values(milliseconds(300), seconds(1), seconds(5), seconds(30),
                                           seconds(60)),
                         GridName);

// The server commits, then never answers: the attempt times out before the
// resolution window, and a status query finds the order.
TEST_P(DeadlineGrid, CommitThenHangSucceedsThroughAStatusQuery) {
  const Duration t = GetParam();
  server_->ScriptFaults({OrderFault::kCommitThenHang});
  const TimePoint start = clock_->Now();
  CallResult r = DefaultClient(server_, clock_)->Execute(Post(), OnlyTimeoutAndStatusUrl(t));
  EXPECT_EQ(r.outcome, Outcome::kSucceeded) << StopReasonName(r.stop_reason);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kStatusQuery);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(server_->posts_received(), 1);
  EXPECT_EQ(server_->effects(*r.idempotency_key), 1);
  EXPECT_EQ(server_->total_effects(), 1);
  ASSERT_GE(r.evidence.size(), 2u);
  EXPECT_EQ(r.evidence[0].end - r.evidence[0].start, PlannedFirstAttempt(t));
  EXPECT_LE(clock_->Now(), start + t);
}

// A healthy but slow server answers after 60 % of the deadline: the planned
// attempt timeout (70 % less the margin) still covers it.
TEST_P(DeadlineGrid, SlowHealthyPostSucceedsWithOneEffect) {
  const Duration t = GetParam();
  server_->SetProcessingTime(t * 6 / 10);
  CallResult r = DefaultClient(server_, clock_)->Execute(Post(), OnlyTimeoutAndStatusUrl(t));
  EXPECT_EQ(r.outcome, Outcome::kSucceeded) << StopReasonName(r.stop_reason);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kResponse);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.status_queries, 0);
  EXPECT_EQ(server_->effects(*r.idempotency_key), 1);
}

// A slow commit that outlasts the attempt: the server commits at 80 % of the
// deadline; status queries see "processing", then find it. The commit must
// land before the last query that still has a useful attempt left (deadline
// - 50 ms - 10 ms margin); on a 300 ms deadline 80 % is past it, and whether
// a query catches it depends on the jitter draws, so the commit lands 80 ms
// before the deadline there.
TEST_P(DeadlineGrid, CommitSlowerThanTheAttemptIsFoundByPolling) {
  const Duration t = GetParam();
  server_->SetProcessingTime(std::min<Duration>(t * 8 / 10, t - milliseconds(80)));
  const TimePoint start = clock_->Now();
  CallResult r = DefaultClient(server_, clock_)->Execute(Post(), OnlyTimeoutAndStatusUrl(t));
  EXPECT_EQ(r.outcome, Outcome::kSucceeded) << StopReasonName(r.stop_reason);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kStatusQuery);
  EXPECT_EQ(server_->posts_received(), 1);
  EXPECT_EQ(server_->effects(*r.idempotency_key), 1);
  EXPECT_LE(clock_->Now(), start + t);
}

// Below the floor (2 x minimum useful attempt + 2 x margin = 120 ms) nothing
// can be reserved: the single attempt gets everything and a hang stays
// UNKNOWN, named by the limit that ended it.
TEST(TimePlanFloor, BelowTheFloorTheAttemptGetsEverything) {
  auto clock = std::make_shared<FakeClock>();
  auto server = std::make_shared<SimulatedOrderServer>(clock);
  server->ScriptFaults({OrderFault::kCommitThenHang});
  CallResult r =
      DefaultClient(server, clock)->Execute(Post(), OnlyTimeoutAndStatusUrl(milliseconds(110)));
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kDeadlineExceeded);
  EXPECT_EQ(r.evidence[0].end - r.evidence[0].start, milliseconds(100));
  EXPECT_EQ(r.status_queries, 0);
}

// In progress for 2.5 s of a 5 s deadline: the first attempt's connection
// drops while the server works on; paced status queries find the order.
TEST(PacedPolling, InProgressForHalfTheDeadlineSucceedsWithFewRequests) {
  auto clock = std::make_shared<FakeClock>();
  auto server = std::make_shared<SimulatedOrderServer>(clock);
  server->SetProcessingTime(milliseconds(2500));
  server->ScriptFaults({OrderFault::kDisconnectWhileProcessing});
  const TimePoint start = clock->Now();
  CallResult r = DefaultClient(server, clock)->Execute(Post(), OnlyTimeoutAndStatusUrl(seconds(5)));
  EXPECT_EQ(r.outcome, Outcome::kSucceeded) << StopReasonName(r.stop_reason);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kStatusQuery);
  EXPECT_EQ(server->posts_received(), 1);
  EXPECT_EQ(server->effects(*r.idempotency_key), 1);
  EXPECT_LE(server->posts_received() + server->queries_received(), 40);
  EXPECT_GE(clock->Now(), start + milliseconds(2500));
  EXPECT_LE(clock->Now(), start + seconds(5));
}

// The same without a status URL, the server declared deduplicating: resends
// answered 409 count as polls (not attempts), paced the same way.
TEST(PacedPolling, InProgressResendsCountAsPolls) {
  auto clock = std::make_shared<FakeClock>();
  auto server = std::make_shared<SimulatedOrderServer>(clock);
  server->SetProcessingTime(milliseconds(2500));
  server->ScriptFaults({OrderFault::kDisconnectWhileProcessing});
  CallOptions call;
  call.timeout = seconds(5);
  saferetry::RetryPolicyOptions call_policy;
  call_policy.server_deduplicates = true;
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  CallResult r = DefaultClient(server, clock)->Execute(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded) << StopReasonName(r.stop_reason);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kResponse);
  EXPECT_EQ(server->effects(*r.idempotency_key), 1);
  EXPECT_GT(r.attempts, RetryPolicyOptions{}.max_attempts);  // 409s did not use up the attempts
  EXPECT_LE(server->posts_received(), 40);
}

// A hung GET is retried inside the deadline (each attempt gets half of it).
TEST(TimePlanRetry, HungGetIsRetried) {
  auto clock = std::make_shared<FakeClock>();
  auto fake = std::make_shared<FakeTransport>(clock);
  fake->Push(Step::TimeoutAfterSend()).Push(Step::Respond(200, {}, "ok"));
  CallOptions call;
  call.timeout = seconds(2);
  const TimePoint start = clock->Now();
  CallResult r = DefaultClient(fake, clock)->Execute(Request{"GET", kOrders, {}, ""}, call);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(fake->sent()[0].timeout, milliseconds(995));
  EXPECT_LE(clock->Now(), start + seconds(2));
}

// Always 503 under 1.5 s with 50 attempts asked for (clamped to 10): drawn
// waits that do not fit are shortened, so the call uses its deadline instead
// of stopping half-way on an unlucky draw.
TEST(WaitsThatFit, AlwaysUnavailableUsesTheWholeDeadline) {
  auto clock = std::make_shared<FakeClock>();
  auto fake = std::make_shared<FakeTransport>(clock);
  fake->SetHandler([](const Request&, const AttemptOptions&) {
    TransportResult tr;
    tr.delivery = Delivery::kResponseReceived;
    tr.response = Response{503, {}, ""};
    return tr;
  });
  ClientOptions o;
  o.transport = fake;
  o.clock = clock;
  o.budget = MakeUnlimitedBudget();
  auto client = Client::Create(std::move(o));
  ASSERT_TRUE(client.ok());
  CallOptions call;
  call.timeout = milliseconds(1500);
  saferetry::RetryPolicyOptions call_policy;
  call_policy.max_attempts = 50;
  const TimePoint start = clock->Now();
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  CallResult r = (*client)->Execute(Request{"GET", kOrders, {}, ""}, call);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  // Either all ten attempts were made, or the last wait was cut to leave
  // exactly one minimum useful attempt plus the margin.
  if (r.stop_reason == StopReason::kAttemptsExhausted) {
    EXPECT_EQ(r.attempts, kMaxAttemptsHardCap);
  } else {
    EXPECT_EQ(r.stop_reason, StopReason::kNoTimeForUsefulAttempt);
    EXPECT_GE(clock->Now(), start + milliseconds(1500) - milliseconds(60));
  }
  EXPECT_LE(clock->Now(), start + milliseconds(1500));
}

// A stored final error for the key is definite: after an ambiguous attempt,
// the status answer 404 `completed` ends the call FAILED with it.
TEST(DefiniteAnswers, StoredFinalErrorFoundByStatusQueryIsFailed) {
  auto clock = std::make_shared<FakeClock>();
  auto server = std::make_shared<SimulatedOrderServer>(clock);
  server->ScriptFaults({OrderFault::kStoredFinalErrorThenLose});
  CallResult r = DefaultClient(server, clock)->Execute(Post(), OnlyTimeoutAndStatusUrl(seconds(5)));
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kPermanentError);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kStatusQuery);
  ASSERT_TRUE(r.last_response.has_value());
  EXPECT_EQ(r.last_response->status_code, 404);
  EXPECT_EQ(server->total_effects(), 0);
}

// The same resolved by a same-key resend: the replayed final 400 is definite.
TEST(DefiniteAnswers, ReplayedFinalErrorOnAResendIsFailed) {
  auto clock = std::make_shared<FakeClock>();
  auto server = std::make_shared<SimulatedOrderServer>(clock);
  server->ScriptFaults({OrderFault::kStoredFinalErrorThenLose});
  CallOptions call;
  call.timeout = seconds(5);
  saferetry::RetryPolicyOptions call_policy;
  call_policy.server_deduplicates = true;
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  CallResult r = DefaultClient(server, clock)->Execute(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kPermanentError);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kResponse);
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(server->total_effects(), 0);
}

// A clean 400 that is not a replay proves nothing about the earlier attempt.
TEST(DefiniteAnswers, UnreplayedClientErrorAfterAmbiguityStaysUnknown) {
  auto clock = std::make_shared<FakeClock>();
  auto fake = std::make_shared<FakeTransport>(clock);
  fake->Push(Step::CommitThenLost()).Push(Step::Respond(400));
  CallOptions call;
  call.timeout = seconds(5);
  saferetry::RetryPolicyOptions call_policy;
  call_policy.server_deduplicates = true;
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  CallResult r = DefaultClient(fake, clock)->Execute(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kAnswerNotDefinite);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kNone);
}

// 404 for a key the server never saw is not definite; with the fence asked
// for, the last query fences the key: no effect, ever, and a late original
// is refused.
TEST(Fence, FencedNotFoundEndsFailedAndTheKeyIsRefusedLater) {
  auto clock = std::make_shared<FakeClock>();
  auto server = std::make_shared<SimulatedOrderServer>(clock);
  server->ScriptFaults({OrderFault::kDropBeforeCommit});
  CallOptions call = OnlyTimeoutAndStatusUrl(seconds(5));
  saferetry::RetryPolicyOptions call_policy;
  call_policy.max_attempts = 1;
  call_policy.status_query.fence_when_giving_up = true;
  auto client = DefaultClient(server, clock);
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  CallResult r = client->Execute(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kFenced);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kStatusQuery);
  EXPECT_EQ(r.status_queries, 2);  // unfenced "not found", then the fence

  // The original arriving late (a resend with the same key) is refused.
  CallOptions again;
  again.idempotency_key = *r.idempotency_key;
  CallResult late = client->Execute(Post(), again);
  EXPECT_EQ(late.outcome, Outcome::kFailed);
  ASSERT_TRUE(late.last_response.has_value());
  EXPECT_EQ(late.last_response->status_code, 410);
  EXPECT_EQ(server->total_effects(), 0);
}

TEST(Fence, WithoutTheFenceNotFoundStaysUnknown) {
  auto clock = std::make_shared<FakeClock>();
  auto server = std::make_shared<SimulatedOrderServer>(clock);
  server->ScriptFaults({OrderFault::kDropBeforeCommit});
  CallOptions call = OnlyTimeoutAndStatusUrl(seconds(5));
  saferetry::RetryPolicyOptions call_policy;
  call_policy.max_attempts = 1;
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  CallResult r = DefaultClient(server, clock)->Execute(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kNotFoundNoAttemptsLeft);
  EXPECT_EQ(r.status_queries, 1);
}

// "Rejected before any work" is not an effect: retried, one order.
TEST(RejectedBeforeWork, IsRetriedAndCreatesOneOrder) {
  auto clock = std::make_shared<FakeClock>();
  auto server = std::make_shared<SimulatedOrderServer>(clock);
  server->ScriptFaults({OrderFault::kRejectBeforeWork});
  CallResult r = DefaultClient(server, clock)->Execute(Post(), OnlyTimeoutAndStatusUrl(seconds(5)));
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(r.evidence[0].classification, AttemptClass::kRetryableTransient);
  EXPECT_EQ(server->total_effects(), 1);
}

// A retry the deadline refuses is never charged (docs/design.md).
TEST(BudgetHonesty, RetryRefusedByTheDeadlineIsNotCharged) {
  auto clock = std::make_shared<FakeClock>();
  auto fake = std::make_shared<FakeTransport>(clock);
  fake->Push(Step::RespondRejected(503, {{"Retry-After", "5"}}));
  auto budget = std::make_shared<CountingBudget>();
  ClientOptions o;
  o.transport = fake;
  o.clock = clock;
  o.budget = budget;
  auto client = Client::Create(std::move(o));
  ASSERT_TRUE(client.ok());
  CallOptions call;
  call.timeout = seconds(2);
  CallResult r = (*client)->Execute(Post(), call);
  EXPECT_EQ(r.stop_reason, StopReason::kRetryAfterBeyondDeadline);
  EXPECT_EQ(budget->call_starts(), 1);
  EXPECT_EQ(budget->charges(), 0);
}

// Status queries draw from their own allowance, not from the retry budget.
TEST(BudgetHonesty, StatusQueriesDrawFromTheirOwnAllowance) {
  auto clock = std::make_shared<FakeClock>();
  auto server = std::make_shared<SimulatedOrderServer>(clock);
  server->ScriptFaults({OrderFault::kCommitThenHang});
  auto budget = std::make_shared<CountingBudget>();
  auto allowance = std::make_shared<CountingBudget>();
  ClientOptions o;
  o.transport = server;
  o.clock = clock;
  o.budget = budget;
  o.status_query_budget = allowance;
  auto client = Client::Create(std::move(o));
  ASSERT_TRUE(client.ok());
  CallResult r = (*client)->Execute(Post(), OnlyTimeoutAndStatusUrl(seconds(2)));
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(budget->charges(), 0);
  EXPECT_EQ(allowance->charges(), 1);
  EXPECT_EQ(allowance->call_starts(), 1);
}

}  // namespace
}  // namespace saferetry

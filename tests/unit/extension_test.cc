// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The seams a user plugs into: a backoff policy, a classifier, a budget, and
// the state machine with two attempts in flight (what a hedging driver does).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>

#include "saferetry/call_state_machine.h"
#include "saferetry/client.h"
#include "saferetry/grpc_codes_classifier.h"
#include "saferetry/testing/fake_clock.h"
#include "saferetry/testing/fake_random.h"
#include "saferetry/testing/fake_transport.h"

namespace saferetry {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::ElementsAre;
using testkit::FakeClock;
using testkit::FakeTransport;
using testkit::ScriptedRandom;
using testkit::Step;

Request Get() { return Request{"GET", "http://127.0.0.1:8080/stock/1", {}, ""}; }

// A table of delays, the way a team with a measured recovery curve writes it.
class TableBackoff final : public BackoffPolicy {
 public:
  Duration Delay(int retry, Duration previous, double u) const override {
    seen_previous_.store(previous.count());
    seen_u_.store(u);
    static constexpr Duration kTable[] = {milliseconds(70), milliseconds(300), seconds(1)};
    return kTable[std::min(retry, 3) - 1];
  }
  mutable std::atomic<Duration::rep> seen_previous_{-1};
  mutable std::atomic<double> seen_u_{-1};
};

// A classifier for an API that answers 418 when it sheds load.
class TeapotSheds final : public Classifier {
 public:
  Classification Classify(const AttemptEvidence& evidence,
                          const RequestTraits& traits) const override {
    if (evidence.http_status == 418) {
      return {AttemptClass::kRetryableTransient, "418: shed before any work"};
    }
    return inner_.Classify(evidence, traits);
  }

 private:
  DefaultClassifier inner_;
};

// "At most N retries in flight per client, ever": a budget with its own
// bookkeeping (docs/budgets.md walks through it).
class FixedRetries final : public RetryBudget {
 public:
  explicit FixedRetries(int n) : left_(n) {}
  void OnCallStart(TimePoint) override { calls_.fetch_add(1); }
  BudgetDecision OnFailure(const BudgetFailure&, TimePoint) override {
    int left = left_.load();
    while (left > 0 && !left_.compare_exchange_weak(left, left - 1)) {
    }
    if (left <= 0) return BudgetDecision::Refuse("fixed_retries_spent");
    return BudgetDecision::Allow(BudgetReceipt::Of(1));
  }
  void Refund(const BudgetReceipt& receipt, TimePoint) override {
    if (!receipt.empty()) left_.fetch_add(1);
  }
  double Balance(TimePoint) const override { return left_.load(); }
  std::atomic<int> left_;
  std::atomic<int> calls_{0};
};

class ExtensionTest : public ::testing::Test {
 protected:
  std::unique_ptr<Client> Make(std::shared_ptr<RetryBudget> budget,
                               std::shared_ptr<const Classifier> classifier = nullptr) {
    ClientOptions o;
    o.transport = fake_;
    o.clock = clock_;
    o.random = random_;
    o.budget = std::move(budget);
    o.classifier = std::move(classifier);
    auto c = Client::Create(std::move(o));
    EXPECT_TRUE(c.ok()) << c.status();
    return *std::move(c);
  }
  std::shared_ptr<FakeClock> clock_ = std::make_shared<FakeClock>();
  std::shared_ptr<ScriptedRandom> random_ = std::make_shared<ScriptedRandom>();  // u = 0.5
  std::shared_ptr<FakeTransport> fake_ = std::make_shared<FakeTransport>(clock_);
};

TEST_F(ExtensionTest, UserBackoffPolicyDecidesTheExactSleeps) {
  fake_->Push(Step::Respond(503)).Push(Step::Respond(503)).Push(Step::Respond(200));
  auto table = std::make_shared<TableBackoff>();
  CallOptions call;
  saferetry::RetryPolicyOptions call_policy;
  call_policy.backoff_policy = table;
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  CallResult r = Make(MakeUnlimitedBudget())->Execute(Get(), call);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_THAT(clock_->sleeps(), ElementsAre(milliseconds(70), milliseconds(300)));
  EXPECT_EQ(table->seen_previous_.load(), Duration(milliseconds(70)).count());
  EXPECT_EQ(table->seen_u_.load(), 0.5);  // the call's Random seam
}

TEST_F(ExtensionTest, ExponentialBackoffIsTheDefaultPolicyObject) {
  BackoffParams p;
  p.jitter = JitterKind::kNone;
  auto policy = ExponentialBackoff::Create(p);
  ASSERT_TRUE(policy.ok());
  EXPECT_EQ((*policy)->Delay(3, Duration{0}, 0.9), milliseconds(400));
  p.multiplier = 0.5;
  EXPECT_EQ(ExponentialBackoff::Create(p).status().message(), "multiplier: must be >= 1, got 0.5");
}

TEST_F(ExtensionTest, UserClassifierMakesA418Retryable) {
  fake_->Push(Step::Respond(418)).Push(Step::Respond(200));
  CallResult r =
      Make(MakeUnlimitedBudget(), std::make_shared<TeapotSheds>())
          ->Execute(Request{"POST", "http://127.0.0.1:8080/orders", {}, "x"}, CallOptions{});
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(r.evidence[0].reason, "418: shed before any work");
  EXPECT_THAT(clock_->sleeps(), ElementsAre(milliseconds(50)));
}

TEST_F(ExtensionTest, UserBudgetIsStartedChargedAndRefusesByName) {
  auto budget = std::make_shared<FixedRetries>(1);
  fake_->Push(Step::Respond(503)).Push(Step::Respond(503));
  CallResult r = Make(budget)->Execute(Get(), CallOptions{});
  EXPECT_EQ(r.stop_reason, StopReason::kBudgetExhausted);
  EXPECT_EQ(r.budget_refusal, "fixed_retries_spent");
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(budget->calls_.load(), 1);
  EXPECT_EQ(budget->left_.load(), 0);
}

TEST_F(ExtensionTest, UserBudgetIsRefundedWhenTheCallIsCancelledDuringTheWait) {
  auto budget = std::make_shared<FixedRetries>(1);
  CancellationToken token;
  fake_->SetHandler([&token](const Request&, const AttemptOptions&) {
    token.Cancel();  // the caller gives up while the answer is on its way
    TransportResult tr;
    tr.delivery = Delivery::kResponseReceived;
    tr.response = Response{503, {}, ""};
    return tr;
  });
  CallOptions call;
  call.cancellation = &token;
  CallResult r = Make(budget)->Execute(Get(), call);
  EXPECT_EQ(r.stop_reason, StopReason::kCancelled);
  EXPECT_EQ(budget->left_.load(), 1);  // never charged, or refunded
}

// Every built-in seam has a factory that validates and returns the
// interface: the user replaces an interface, never a concrete class.
TEST(SeamFactoriesTest, EachBuiltInIsMadeByAFactoryThatValidates) {
  absl::StatusOr<std::shared_ptr<const BackoffPolicy>> backoff = MakeExponentialBackoff({});
  ASSERT_TRUE(backoff.ok()) << backoff.status();
  EXPECT_EQ((*backoff)->Delay(1, Duration{0}, 0.5), milliseconds(50));  // full jitter of 100 ms
  BackoffParams zero;
  zero.base = Duration{0};
  EXPECT_EQ(MakeExponentialBackoff(zero).status().code(), absl::StatusCode::kInvalidArgument);

  absl::StatusOr<std::shared_ptr<const Classifier>> classifier =
      MakeDefaultClassifier({{{418, AttemptClass::kRetryableTransient}}});
  ASSERT_TRUE(classifier.ok()) << classifier.status();
  AttemptEvidence teapot;
  teapot.delivery = Delivery::kResponseReceived;
  teapot.http_status = 418;
  EXPECT_EQ((*classifier)->Classify(teapot, RequestTraits{true, true, false}).cls,
            AttemptClass::kRetryableTransient);
  EXPECT_EQ(MakeDefaultClassifier({{{42, AttemptClass::kPermanent}}}).status().message(),
            "status_overrides[42]: must be an HTTP status in 100..599");

  GrpcCodesClassifierOptions codes;
  codes.retryable_codes = {"UNAVAILABLE"};
  EXPECT_TRUE(MakeGrpcCodesClassifier(codes).ok());
  codes.retryable_codes = {"NOT_A_CODE"};
  EXPECT_EQ(MakeGrpcCodesClassifier(codes).status().code(), absl::StatusCode::kInvalidArgument);
}

// Two attempts in flight on the machine, as a hedging driver runs it.
class TwoInFlight : public ::testing::Test {
 protected:
  TwoInFlight() {
    policy_.max_attempts = 3;
    policy_.traits = RequestTraits{/*idempotent=*/true, /*safe=*/true, /*keyed=*/false};
    policy_.deadline = Deadline::After(t0_, seconds(2));
    policy_.hedging = true;
  }
  AttemptEvidence Answer(int status, TimePoint at) {
    AttemptEvidence ev;
    ev.start = t0_;
    ev.end = at;
    ev.delivery = Delivery::kResponseReceived;
    ev.http_status = status;
    return ev;
  }
  TimePoint t0_ = TimePoint{} + seconds(100);
  CallPolicy policy_;
  FixedRetries budget_{5};
  DefaultClassifier classifier_;
  ScriptedRandom random_;
};

TEST_F(TwoInFlight, TheFirstFinalAnswerWinsAndTheHedgeIsCharged) {
  CallStateMachine m(policy_, &budget_, &classifier_, &random_);
  const CallAction first = m.Start(t0_);
  ASSERT_EQ(first.kind, CallAction::Kind::kSendAttempt);
  const CallAction hedge = m.StartHedge(t0_ + milliseconds(100));
  ASSERT_EQ(hedge.kind, CallAction::Kind::kSendAttempt);
  EXPECT_NE(hedge.attempt_id, first.attempt_id);
  EXPECT_EQ(hedge.number, 2);
  EXPECT_EQ(budget_.left_.load(), 4);  // the hedge was paid for
  EXPECT_EQ(m.in_flight_count(), 2);

  // The hedge answers first and wins; the driver cancels the first.
  const CallAction done = m.OnAttemptDone(hedge.attempt_id, Answer(200, t0_ + milliseconds(120)),
                                          Response{200, {}, "ok"}, t0_ + milliseconds(120));
  EXPECT_EQ(done.kind, CallAction::Kind::kFinish);
  EXPECT_EQ(m.in_flight_count(), 1);
  EXPECT_EQ(m.in_flight(0), first.attempt_id);
  CallResult r = m.TakeResult();
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.attempts, 2);
  ASSERT_EQ(r.evidence.size(), 1u);
  EXPECT_EQ(r.evidence[0].number, 2);
}

TEST_F(TwoInFlight, ARetryableAnswerWaitsForTheOtherAttempt) {
  CallStateMachine m(policy_, &budget_, &classifier_, &random_);
  const CallAction first = m.Start(t0_);
  const CallAction hedge = m.StartHedge(t0_ + milliseconds(100));
  // The first answers 503: the hedge is still out, so nothing to do yet.
  const CallAction wait = m.OnAttemptDone(first.attempt_id, Answer(503, t0_ + milliseconds(150)),
                                          std::nullopt, t0_ + milliseconds(150));
  EXPECT_EQ(wait.kind, CallAction::Kind::kNone);
  // Then the hedge answers 503 too: now the ordinary next step (a retry).
  const CallAction next = m.OnAttemptDone(hedge.attempt_id, Answer(503, t0_ + milliseconds(160)),
                                          std::nullopt, t0_ + milliseconds(160));
  EXPECT_EQ(next.kind, CallAction::Kind::kWait);
}

TEST_F(TwoInFlight, HedgesAreRefusedWithoutHedgingTheCapOrTheBudget) {
  policy_.hedging = false;
  CallStateMachine off(policy_, &budget_, &classifier_, &random_);
  off.Start(t0_);
  EXPECT_EQ(off.StartHedge(t0_).kind, CallAction::Kind::kNone);

  policy_.hedging = true;
  policy_.max_attempts = 2;
  CallStateMachine capped(policy_, &budget_, &classifier_, &random_);
  capped.Start(t0_);
  EXPECT_EQ(capped.StartHedge(t0_).kind, CallAction::Kind::kSendAttempt);
  EXPECT_EQ(capped.StartHedge(t0_).kind, CallAction::Kind::kNone);  // attempts cap

  FixedRetries empty(0);
  policy_.max_attempts = 3;
  CallStateMachine broke(policy_, &empty, &classifier_, &random_);
  broke.Start(t0_);
  EXPECT_EQ(broke.StartHedge(t0_).kind, CallAction::Kind::kNone);  // budget empty
}

}  // namespace
}  // namespace saferetry

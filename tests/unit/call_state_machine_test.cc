// Copyright 2026 The saferetry Authors. Licensed under the Apache License,
// Version 2.0.
//
// The call's state machine driven through its events, with hand-built
// evidence, scripted jitter samples and fake times: one test per stop reason,
// named after the rule that reaches it, and tests that prove the order of
// checks listed in include/saferetry/call_state_machine.h. Every action is
// asserted exactly (kind, number, timeout, delay), as are the outcome, the
// counts and what each budget was charged and refunded.

#include "saferetry/call_state_machine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "saferetry/cancellation.h"
#include "saferetry/classifier.h"
#include "saferetry/retry_budget.h"
#include "saferetry/testing/fake_random.h"

namespace saferetry {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::ElementsAre;
using testkit::ScriptedRandom;
using Kind = CallAction::Kind;

// Every call starts at this fixed point of the steady clock.
const TimePoint kT0 = TimePoint(seconds(1000));

TimePoint At(Duration since_start) { return kT0 + since_start; }

// ---------------------------------------------------------------------------
// Evidence, as a driver would hand it in.

AttemptEvidence Answered(int status, ServerHints hints = {}) {
  AttemptEvidence ev;
  ev.delivery = Delivery::kResponseReceived;
  ev.transport_status = absl::OkStatus();
  ev.http_status = status;
  ev.hints = hints;
  return ev;
}

// `Idempotency-Key-State: rejected`: refused before any work.
ServerHints Rejected() {
  ServerHints h;
  h.key_state = KeyState::kRejected;
  return h;
}

ServerHints RetryAfter(Duration d) {
  ServerHints h;
  h.retry_after = d;
  return h;
}

ServerHints Replayed() {
  ServerHints h;
  h.replayed = true;
  h.key_state = KeyState::kCompleted;
  return h;
}

ServerHints DoNotRetry() {
  ServerHints h;
  h.do_not_retry = true;
  return h;
}

// Sent, then the connection was reset: may have taken effect.
AttemptEvidence Lost() {
  AttemptEvidence ev;
  ev.delivery = Delivery::kMaybeDelivered;
  ev.transport_status = absl::UnavailableError("connection reset");
  return ev;
}

// Sent, then no answer within the attempt timeout: may have taken effect.
AttemptEvidence TimedOut() {
  AttemptEvidence ev;
  ev.delivery = Delivery::kMaybeDelivered;
  ev.transport_status = absl::DeadlineExceededError("attempt timed out");
  return ev;
}

std::optional<Response> ResponseOf(int status) {
  Response r;
  r.status_code = status;
  return r;
}

// ---------------------------------------------------------------------------
// Policies.

// A keyed POST with a status query: the time plan keeps a resolution window.
CallPolicy KeyedPost(Duration timeout) {
  CallPolicy p;
  p.traits.idempotent = false;
  p.traits.safe = false;
  p.traits.keyed = true;
  p.has_status_query = true;
  p.deadline = Deadline::After(kT0, timeout);
  return p;
}

// A keyed POST with no status query and no deduplication declared.
CallPolicy KeyedPostWithoutQuery(Duration timeout) {
  CallPolicy p = KeyedPost(timeout);
  p.has_status_query = false;
  return p;
}

CallPolicy UnkeyedPost(Duration timeout) {
  CallPolicy p = KeyedPost(timeout);
  p.traits.keyed = false;
  p.has_status_query = false;
  return p;
}

// A GET: safe and idempotent, no key.
CallPolicy Get(Duration timeout) {
  CallPolicy p;
  p.traits.idempotent = true;
  p.traits.safe = true;
  p.traits.keyed = false;
  p.deadline = Deadline::After(kT0, timeout);
  return p;
}

// A PUT: idempotent but not safe, no key.
CallPolicy Put(Duration timeout) {
  CallPolicy p = Get(timeout);
  p.traits.safe = false;
  return p;
}

// ---------------------------------------------------------------------------
// A budget that records every charge and refund. Each allowed decision
// carries a distinct cost (1, 2, 3, ...) so a refund names the charge it
// gives back.

class CountingBudget final : public RetryBudget {
 public:
  explicit CountingBudget(bool allow = true) : allow_(allow) {}

  void OnCallStart(TimePoint) override { ++starts_; }
  // An empty receipt (a first attempt's success) records 0.
  void OnSuccess(const BudgetReceipt& receipt, TimePoint) override {
    success_costs_.push_back(receipt.first());
  }
  BudgetDecision OnFailure(const BudgetFailure& failure, TimePoint now) override {
    charges_.push_back(failure.cls);
    throttled_.push_back(failure.throttled);
    uses_.push_back(failure.use);
    charge_times_.push_back(now);
    if (!allow_) return BudgetDecision::Refuse("test_budget_refused");
    return BudgetDecision::Allow(BudgetReceipt::Of(static_cast<std::int64_t>(charges_.size())));
  }
  double Balance(TimePoint) const override { return 42; }
  void Refund(const BudgetReceipt& receipt, TimePoint) override {
    refunds_.push_back(receipt.first());
  }

  int starts() const { return starts_; }
  int charges() const { return static_cast<int>(charges_.size()); }
  const std::vector<AttemptClass>& charged_classes() const { return charges_; }
  const std::vector<bool>& throttled() const { return throttled_; }
  const std::vector<BudgetUse>& uses() const { return uses_; }
  const std::vector<TimePoint>& charge_times() const { return charge_times_; }
  const std::vector<std::int64_t>& refunds() const { return refunds_; }
  const std::vector<std::int64_t>& success_costs() const { return success_costs_; }

 private:
  bool allow_;
  int starts_ = 0;
  std::vector<AttemptClass> charges_;
  std::vector<bool> throttled_;
  std::vector<BudgetUse> uses_;
  std::vector<TimePoint> charge_times_;
  std::vector<std::int64_t> refunds_;
  std::vector<std::int64_t> success_costs_;
};

// ---------------------------------------------------------------------------
// Exact action checks.

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kSendAttempt:
      return "SendAttempt";
    case Kind::kWait:
      return "Wait";
    case Kind::kSendStatusQuery:
      return "SendStatusQuery";
    case Kind::kFinish:
      return "Finish";
    case Kind::kNone:
      return "None";
  }
  return "?";
}

::testing::AssertionResult IsKind(const CallAction& a, Kind kind) {
  if (a.kind != kind) {
    return ::testing::AssertionFailure()
           << "expected " << KindName(kind) << ", got " << KindName(a.kind);
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult IsSend(const CallAction& a, int number, Duration timeout) {
  if (auto k = IsKind(a, Kind::kSendAttempt); !k) return k;
  if (a.number != number || a.timeout != timeout) {
    return ::testing::AssertionFailure()
           << "SendAttempt(" << a.number << ", " << a.timeout.count() << " ns), expected ("
           << number << ", " << timeout.count() << " ns)";
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult IsQuery(const CallAction& a, int number, Duration timeout,
                                   bool fence = false) {
  if (auto k = IsKind(a, Kind::kSendStatusQuery); !k) return k;
  if (a.number != number || a.timeout != timeout || a.fence != fence) {
    return ::testing::AssertionFailure()
           << "SendStatusQuery(" << a.number << ", " << a.timeout.count()
           << " ns, fence=" << a.fence << "), expected (" << number << ", " << timeout.count()
           << " ns, fence=" << fence << ")";
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult IsWait(const CallAction& a, Duration delay, bool from_hint = false) {
  if (auto k = IsKind(a, Kind::kWait); !k) return k;
  if (a.delay != delay || a.delay_from_server_hint != from_hint) {
    return ::testing::AssertionFailure()
           << "Wait(" << a.delay.count() << " ns, hint=" << a.delay_from_server_hint
           << "), expected (" << delay.count() << " ns, hint=" << from_hint << ")";
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult IsFinish(const CallAction& a) { return IsKind(a, Kind::kFinish); }

// ---------------------------------------------------------------------------
// The fixture: one machine per test, with a counting retry budget and a
// counting status-query allowance unless a test says otherwise.

class CallStateMachineTest : public ::testing::Test {
 protected:
  // A backoff without jitter from `base` (x2, 10 s cap), kept alive by the
  // fixture as a RetryPolicy keeps its own.
  const BackoffPolicy* Fixed(Duration base) {
    BackoffParams params;
    params.base = base;
    params.jitter = JitterKind::kNone;
    curves_.push_back(ExponentialBackoff::Create(params).value());
    return curves_.back().get();
  }
  std::vector<std::shared_ptr<const BackoffPolicy>> curves_;

  CallStateMachine& Make(const CallPolicy& policy, std::vector<double> uniforms = {0.5},
                         RetryBudget* budget = nullptr, RetryBudget* query_budget = nullptr) {
    random_ = std::make_unique<ScriptedRandom>(std::move(uniforms));
    machine_ = std::make_unique<CallStateMachine>(
        policy, budget != nullptr ? budget : &budget_, &classifier_, random_.get(), &token_,
        query_budget != nullptr ? query_budget : &allowance_);
    return *machine_;
  }
  CallResult Result() { return machine_->TakeResult(); }

  DefaultClassifier classifier_;
  CountingBudget budget_;
  CountingBudget allowance_;
  CancellationToken token_;
  std::unique_ptr<ScriptedRandom> random_;
  std::unique_ptr<CallStateMachine> machine_;
};

// ===========================================================================
// The time plan, fixed by Start.

struct GridPoint {
  Duration total;
  Duration resolve_first_attempt;  // T - max(0.3 T, 60 ms) - 10 ms
  Duration retry_attempt;          // (T - 10 ms) / 2
};

const GridPoint kGrid[] = {
    {milliseconds(300), milliseconds(200), milliseconds(145)},
    {seconds(1), milliseconds(690), milliseconds(495)},
    {seconds(5), milliseconds(3490), milliseconds(2495)},
    {seconds(30), milliseconds(20990), milliseconds(14995)},
    {seconds(60), milliseconds(41990), milliseconds(29995)},
};

TEST_F(CallStateMachineTest, ResolvableWriteFirstAttemptEndsBeforeTheResolutionWindow) {
  for (const GridPoint& g : kGrid) {
    SCOPED_TRACE(g.total.count());
    CallStateMachine& m = Make(KeyedPost(g.total));
    const CallAction a = m.Start(kT0);
    EXPECT_TRUE(IsSend(a, 1, g.resolve_first_attempt));
    EXPECT_EQ(a.remaining, g.total);
    // The formula of the header comment, on the same grid.
    const Duration window = std::max<Duration>(g.total / 10 * 3, milliseconds(60));
    EXPECT_EQ(a.timeout, g.total - window - milliseconds(10));
    EXPECT_EQ(m.plan().kind, TimePlanKind::kResolve);
    EXPECT_EQ(m.plan().reserve, window);
    EXPECT_EQ(m.plan().attempt_cap, Duration::max());
  }
}

TEST_F(CallStateMachineTest, ResolvableWriteBelowTheFloorReservesNothing) {
  // Floor: 2 * (min useful attempt 50 ms + margin 10 ms) = 120 ms.
  CallStateMachine& below = Make(KeyedPost(milliseconds(119)));
  EXPECT_TRUE(IsSend(below.Start(kT0), 1, milliseconds(109)));
  EXPECT_EQ(below.plan().reserve, Duration::zero());

  CallStateMachine& tiny = Make(KeyedPost(milliseconds(100)));
  EXPECT_TRUE(IsSend(tiny.Start(kT0), 1, milliseconds(90)));
  EXPECT_EQ(tiny.plan().reserve, Duration::zero());

  CallStateMachine& at = Make(KeyedPost(milliseconds(120)));
  EXPECT_TRUE(IsSend(at.Start(kT0), 1, milliseconds(50)));
  EXPECT_EQ(at.plan().reserve, milliseconds(60));
}

TEST_F(CallStateMachineTest, RetryableRequestAttemptGetsHalfOfTheCall) {
  for (const GridPoint& g : kGrid) {
    SCOPED_TRACE(g.total.count());
    CallStateMachine& m = Make(Get(g.total));
    EXPECT_TRUE(IsSend(m.Start(kT0), 1, g.retry_attempt));
    EXPECT_EQ(m.plan().kind, TimePlanKind::kRetry);
    EXPECT_EQ(m.plan().attempt_cap, (g.total - milliseconds(10)) / 2);
    EXPECT_EQ(m.plan().reserve, Duration::zero());
  }
}

TEST_F(CallStateMachineTest, SingleAttemptOrUnresolvableWriteGetsTheWholeCall) {
  CallPolicy one_get = Get(seconds(1));
  one_get.max_attempts = 1;
  CallStateMachine& g = Make(one_get);
  EXPECT_TRUE(IsSend(g.Start(kT0), 1, milliseconds(990)));
  EXPECT_EQ(g.plan().kind, TimePlanKind::kSingle);

  CallStateMachine& p = Make(UnkeyedPost(seconds(1)));
  EXPECT_TRUE(IsSend(p.Start(kT0), 1, milliseconds(990)));
  EXPECT_EQ(p.plan().kind, TimePlanKind::kSingle);

  CallStateMachine& k = Make(KeyedPostWithoutQuery(seconds(1)));
  EXPECT_TRUE(IsSend(k.Start(kT0), 1, milliseconds(990)));
  EXPECT_EQ(k.plan().kind, TimePlanKind::kSingle);

  // A deduplicating server makes the keyed write resolvable.
  CallPolicy dedup = KeyedPostWithoutQuery(seconds(1));
  dedup.server_deduplicates = true;
  CallStateMachine& d = Make(dedup);
  EXPECT_TRUE(IsSend(d.Start(kT0), 1, milliseconds(690)));
  EXPECT_EQ(d.plan().kind, TimePlanKind::kResolve);
}

// The rule: how many polls fit at the pacing's shortest waits (equal jitter
// with u = 0: 25, 37.5, 56.25, 84.4, 126.6, 189.8, 284.8, 427.1 ms, then
// 500 ms each), plus 2, at least 5; 20 without a deadline.
//   1 s: 7 fit (804.7 ms; an eighth ends at 1231.9 ms)          -> 9
//   5 s: 15 fit (4731.9 ms)                                       -> 17
//   60 s: 125 fit (59731.9 ms)                                    -> 127
// Derived when the first poll is scheduled (most calls never poll).
TEST_F(CallStateMachineTest, StatusQueryCapDefaultsFromTheDeadline) {
  const BackoffParams pacing = DefaultPollBackoff();
  EXPECT_EQ(DefaultMaxStatusQueries(seconds(1), pacing), 9);
  EXPECT_EQ(DefaultMaxStatusQueries(seconds(5), pacing), 17);
  EXPECT_EQ(DefaultMaxStatusQueries(seconds(60), pacing), 127);
  EXPECT_EQ(DefaultMaxStatusQueries(milliseconds(100), pacing), 5);  // 2 fit + 2, raised
  EXPECT_EQ(DefaultMaxStatusQueries(Duration::max(), pacing), 20);

  CallStateMachine& five = Make(KeyedPost(seconds(5)));
  five.Start(kT0);
  EXPECT_EQ(five.policy().max_status_queries, 0);                  // not yet needed
  five.OnAttemptDone(Lost(), std::nullopt, At(milliseconds(10)));  // ambiguous: a poll
  EXPECT_EQ(five.policy().max_status_queries, 17);
  // A caller's cap is kept.
  CallPolicy three = KeyedPost(seconds(60));
  three.max_status_queries = 3;
  CallStateMachine& capped = Make(three);
  capped.Start(kT0);
  capped.OnAttemptDone(Lost(), std::nullopt, At(milliseconds(10)));
  EXPECT_EQ(capped.policy().max_status_queries, 3);
}

// A driver's machine runs on the call's policy itself: completed in place,
// never copied, and the same decisions as a machine given a copy.
TEST_F(CallStateMachineTest, APolicyGivenByPointerIsCompletedInPlace) {
  CallPolicy policy = KeyedPost(seconds(5));
  random_ = std::make_unique<ScriptedRandom>(std::vector<double>{0.5});
  const CallServices services{&budget_, &classifier_, random_.get(), &allowance_};
  CallStateMachine m(&policy, &services, &token_);
  EXPECT_EQ(&m.policy(), &policy);
  EXPECT_TRUE(IsSend(m.Start(kT0), 1, milliseconds(3490)));
  EXPECT_EQ(m.plan().kind, TimePlanKind::kResolve);
  EXPECT_EQ(m.plan().reserve, milliseconds(1500));
  EXPECT_EQ(policy.max_status_queries, 0);  // not yet needed
  const CallAction next = m.OnAttemptDone(Lost(), std::nullopt, At(milliseconds(10)));
  EXPECT_EQ(next.kind, CallAction::Kind::kWait);
  EXPECT_EQ(policy.max_status_queries, 17);

  // The same call on a copy: the same action, the caller's policy untouched.
  const CallPolicy original = KeyedPost(seconds(5));
  CallStateMachine& copy = Make(original);
  copy.Start(kT0);
  const CallAction copied = copy.OnAttemptDone(Lost(), std::nullopt, At(milliseconds(10)));
  EXPECT_EQ(copied.kind, next.kind);
  EXPECT_EQ(copied.delay, next.delay);
  EXPECT_EQ(original.max_status_queries, 0);
  EXPECT_EQ(copy.policy().max_status_queries, 17);
}

// The counts are the machine's until the first answer; the result read
// meanwhile shows them, and a machine moved mid-call keeps its result.
TEST_F(CallStateMachineTest, TheResultShowsTheSendsBeforeAnyAnswerAndSurvivesAMove) {
  CallStateMachine& first = Make(KeyedPost(seconds(1)));
  ASSERT_TRUE(IsSend(first.Start(kT0), 1, milliseconds(690)));
  EXPECT_EQ(first.result().attempts, 1);
  EXPECT_TRUE(first.result().evidence.empty());
  CallStateMachine moved = std::move(first);
  EXPECT_TRUE(IsFinish(moved.OnAttemptDone(Answered(201), ResponseOf(201), At(milliseconds(5)))));
  const CallResult r = moved.TakeResult();
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.attempts, 1);
  ASSERT_EQ(r.evidence.size(), 1u);
  EXPECT_EQ(r.evidence[0].number, 1);
}

TEST_F(CallStateMachineTest, StartDepositsInBothBudgets) {
  CallStateMachine& m = Make(KeyedPost(seconds(1)));
  m.Start(kT0);
  EXPECT_EQ(budget_.starts(), 1);
  EXPECT_EQ(allowance_.starts(), 1);
}

// ===========================================================================
// One test per stop reason, named after the rule that reaches it.

// kSuccess: rule 2.
TEST_F(CallStateMachineTest, SuccessResponseFinishesSucceeded) {
  CallStateMachine& m = Make(KeyedPost(seconds(1)));
  EXPECT_TRUE(IsSend(m.Start(kT0), 1, milliseconds(690)));
  EXPECT_TRUE(IsFinish(m.OnAttemptDone(Answered(201), ResponseOf(201), At(milliseconds(5)))));
  EXPECT_TRUE(m.finished());
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.stop_reason, StopReason::kSuccess);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.status_queries, 0);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kResponse);  // the outcome rests on it
  EXPECT_EQ(r.elapsed, milliseconds(5));
  ASSERT_TRUE(r.last_response.has_value());
  EXPECT_EQ(r.last_response->status_code, 201);
  ASSERT_EQ(r.evidence.size(), 1u);
  EXPECT_EQ(r.evidence[0].number, 1);
  EXPECT_EQ(r.evidence[0].classification, AttemptClass::kSuccess);
  EXPECT_EQ(r.evidence[0].deadline_remaining, milliseconds(995));
  EXPECT_EQ(budget_.charges(), 0);
  EXPECT_THAT(budget_.success_costs(), ElementsAre(0));
}

// kPermanentError: rule 3 (permanent / precondition -> Finish, no charge).
TEST_F(CallStateMachineTest, PermanentAnswerFinishesFailedWithoutCharge) {
  for (int status : {400, 412, 422}) {
    SCOPED_TRACE(status);
    CountingBudget budget;
    CallStateMachine& m = Make(KeyedPost(seconds(1)), {0.5}, &budget);
    m.Start(kT0);
    EXPECT_TRUE(
        IsFinish(m.OnAttemptDone(Answered(status), ResponseOf(status), At(milliseconds(5)))));
    const CallResult r = Result();
    EXPECT_EQ(r.outcome, Outcome::kFailed);
    EXPECT_EQ(r.stop_reason, StopReason::kPermanentError);
    EXPECT_EQ(r.attempts, 1);
    EXPECT_EQ(budget.charges(), 0);
    EXPECT_EQ(random_->uniform_draws(), 0);
  }
}

// kAttemptsExhausted: rule 6, the cap on sends of the request.
TEST_F(CallStateMachineTest, RetryableFailureOnTheLastAttemptStopsAttemptsExhausted) {
  CallPolicy p = Get(seconds(1));
  p.max_attempts = 2;
  CallStateMachine& m = Make(p, {0.5});
  EXPECT_TRUE(IsSend(m.Start(kT0), 1, milliseconds(495)));
  // Full jitter, 100 ms ceiling, u = 0.5: 50 ms.
  EXPECT_TRUE(IsWait(m.OnAttemptDone(Answered(503), ResponseOf(503), At(milliseconds(10))),
                     milliseconds(50)));
  EXPECT_TRUE(IsSend(m.OnWaitOver(At(milliseconds(60))), 2, milliseconds(495)));
  EXPECT_TRUE(IsFinish(m.OnAttemptDone(Answered(503), ResponseOf(503), At(milliseconds(70)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kAttemptsExhausted);
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(r.status_queries, 0);
  EXPECT_EQ(budget_.charges(), 1);
  EXPECT_EQ(allowance_.charges(), 0);
  EXPECT_EQ(random_->uniform_draws(), 1);
  ASSERT_EQ(r.evidence.size(), 2u);
  EXPECT_EQ(r.evidence[0].delay_after, milliseconds(50));
  EXPECT_FALSE(r.evidence[1].delay_after.has_value());
}

// kStatusQueriesExhausted: rule 6, the cap on polls.
TEST_F(CallStateMachineTest, PollCapReachedWhileUnresolvedStopsStatusQueriesExhausted) {
  CallPolicy p = KeyedPost(seconds(1));
  p.max_status_queries = 2;
  CallStateMachine& m = Make(p, {0.0});
  EXPECT_TRUE(IsSend(m.Start(kT0), 1, milliseconds(690)));
  // Poll pacing: equal jitter from 50 ms, x1.5; u = 0 gives 25 ms, 37.5 ms.
  EXPECT_TRUE(
      IsWait(m.OnAttemptDone(Lost(), std::nullopt, At(milliseconds(100))), milliseconds(25)));
  // A status query gets half of what remains less the margin: (875 - 10) / 2.
  EXPECT_TRUE(IsQuery(m.OnWaitOver(At(milliseconds(125))), 1, microseconds(432500)));
  EXPECT_TRUE(IsWait(m.OnStatusAnswer(StatusAnswer::kStillUnknown, Answered(503), ResponseOf(503),
                                      At(milliseconds(135))),
                     microseconds(37500)));
  EXPECT_TRUE(IsQuery(m.OnWaitOver(At(microseconds(172500))), 2, microseconds(408750)));
  EXPECT_TRUE(IsFinish(m.OnStatusAnswer(StatusAnswer::kStillUnknown, TimedOut(), std::nullopt,
                                        At(milliseconds(600)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kStatusQueriesExhausted);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.status_queries, 2);
  EXPECT_EQ(allowance_.charges(), 2);
  EXPECT_THAT(allowance_.uses(), ElementsAre(BudgetUse::kStatusQuery, BudgetUse::kStatusQuery));
  EXPECT_EQ(budget_.charges(), 0);
  ASSERT_EQ(r.evidence.size(), 3u);
  EXPECT_FALSE(r.evidence[0].is_status_query);
  EXPECT_TRUE(r.evidence[1].is_status_query);
  EXPECT_EQ(r.evidence[1].number, 1);
  EXPECT_EQ(r.evidence[2].number, 2);
  EXPECT_EQ(r.evidence[2].classification, AttemptClass::kAmbiguous);
}

// kDeadlineExceeded: the deadline (less the margin) was reached during an
// attempt; the delay is drawn, the time check stops the call, uncharged.
TEST_F(CallStateMachineTest, RetryableFailureAtTheDeadlineStopsDeadlineExceeded) {
  CallPolicy p = KeyedPostWithoutQuery(seconds(1));  // single plan: 990 ms
  CallStateMachine& m = Make(p, {0.5});
  EXPECT_TRUE(IsSend(m.Start(kT0), 1, milliseconds(990)));
  EXPECT_TRUE(
      IsFinish(m.OnAttemptDone(Answered(503, Rejected()), ResponseOf(503), At(milliseconds(990)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kDeadlineExceeded);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(budget_.charges(), 0);
  EXPECT_EQ(random_->uniform_draws(), 1);
}

// kDeadlineExceeded: reached during a wait (the wait overslept); the charge
// made for the send that will not happen is refunded.
TEST_F(CallStateMachineTest, WaitOversleptPastTheDeadlineStopsDeadlineExceededAndRefunds) {
  CallStateMachine& m = Make(Get(seconds(1)), {0.5});
  m.Start(kT0);
  EXPECT_TRUE(IsWait(m.OnAttemptDone(Answered(503), ResponseOf(503), At(milliseconds(10))),
                     milliseconds(50)));
  EXPECT_EQ(budget_.charges(), 1);
  EXPECT_TRUE(IsFinish(m.OnWaitOver(At(milliseconds(995)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kDeadlineExceeded);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_THAT(budget_.refunds(), ElementsAre(1));
  EXPECT_EQ(r.elapsed, milliseconds(995));
}

// kNoTimeForUsefulAttempt: time is left (more than the margin) but not
// enough for a minimum useful attempt plus the margin, even with no wait.
TEST_F(CallStateMachineTest, TooLittleTimeForAUsefulAttemptStopsNoTimeForUsefulAttempt) {
  CallStateMachine& m = Make(Get(seconds(1)), {0.5});
  m.Start(kT0);
  // 50 ms left: 0 + 50 ms + 10 ms does not fit.
  EXPECT_TRUE(IsFinish(m.OnAttemptDone(Answered(503), ResponseOf(503), At(milliseconds(950)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kNoTimeForUsefulAttempt);
  EXPECT_EQ(budget_.charges(), 0);
}

// kNoTimeForUsefulAttempt at Start: a deadline too short for one useful
// attempt sends nothing.
TEST_F(CallStateMachineTest, DeadlineTooShortAtStartSendsNothing) {
  CallStateMachine& m = Make(Get(milliseconds(55)));
  EXPECT_TRUE(IsFinish(m.Start(kT0)));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kNoTimeForUsefulAttempt);
  EXPECT_EQ(r.attempts, 0);
  EXPECT_TRUE(r.evidence.empty());
}

// kBudgetExhausted: the retry budget refuses a retry.
TEST_F(CallStateMachineTest, RetryBudgetRefusalStopsBudgetExhausted) {
  CostQuotaOptions never;
  never.capacity = 0;  // "never retry"
  auto quota = MakeCostQuota(never).value();
  CallStateMachine& m = Make(Get(seconds(1)), {0.5}, quota.get());
  m.Start(kT0);
  EXPECT_TRUE(IsFinish(m.OnAttemptDone(Answered(503), ResponseOf(503), At(milliseconds(10)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kBudgetExhausted);
  EXPECT_EQ(r.budget_refusal, "quota_exhausted");
  EXPECT_EQ(r.attempts, 1);
}

// The refusing budget's own name is the call's `budget_refusal`; a call that
// stops otherwise has none.
TEST_F(CallStateMachineTest, RefusalNameOfAUserBudgetIsRecorded) {
  CountingBudget refusing(/*allow=*/false);
  CallStateMachine& m = Make(Get(seconds(1)), {0.5}, &refusing);
  m.Start(kT0);
  EXPECT_TRUE(IsFinish(m.OnAttemptDone(Answered(503), ResponseOf(503), At(milliseconds(10)))));
  const CallResult r = Result();
  EXPECT_EQ(r.stop_reason, StopReason::kBudgetExhausted);
  EXPECT_EQ(r.budget_refusal, "test_budget_refused");
  EXPECT_THAT(refusing.uses(), ElementsAre(BudgetUse::kRetry));
}

// kBudgetExhausted: the status-query allowance refuses a poll; the retry
// budget is not asked.
TEST_F(CallStateMachineTest, AllowanceRefusalOfAPollStopsBudgetExhausted) {
  RatioBudgetOptions none;
  none.percent = 0;
  none.min_per_second = 0;
  auto empty = MakeRatioBudget(none).value();
  CallStateMachine& m = Make(KeyedPost(seconds(1)), {0.5}, &budget_, empty.get());
  m.Start(kT0);
  EXPECT_TRUE(IsFinish(m.OnAttemptDone(Lost(), std::nullopt, At(milliseconds(100)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kBudgetExhausted);
  EXPECT_EQ(r.budget_refusal, "ratio_exhausted");
  EXPECT_EQ(r.status_queries, 0);
  EXPECT_EQ(budget_.charges(), 0);
}

// kRetryAfterBeyondDeadline: a server hint that does not fit ends the call;
// it is never shortened, and nothing is charged.
TEST_F(CallStateMachineTest, RetryAfterPastTheDeadlineStopsRetryAfterBeyondDeadline) {
  CallStateMachine& m = Make(Get(seconds(1)), {0.5});
  m.Start(kT0);
  // 10 + 950 + 50 + 10 = 1020 ms > 1000 ms.
  EXPECT_TRUE(IsFinish(m.OnAttemptDone(Answered(503, RetryAfter(milliseconds(950))),
                                       ResponseOf(503), At(milliseconds(10)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kRetryAfterBeyondDeadline);
  EXPECT_EQ(budget_.charges(), 0);
  // The backoff was drawn (the hint is a floor under it), nothing else.
  EXPECT_EQ(random_->uniform_draws(), 1);
}

// Retry-After is a floor (docs/adr/0014): a hint shorter than the backoff
// leaves the backoff, jitter and all.
TEST_F(CallStateMachineTest, RetryAfterShorterThanTheBackoffKeepsTheBackoff) {
  CallStateMachine& m = Make(Get(seconds(5)), {0.5});
  m.Start(kT0);
  // Full jitter of 100 ms at u = 0.5: 50 ms, above the 10 ms hint.
  EXPECT_TRUE(IsWait(m.OnAttemptDone(Answered(503, RetryAfter(milliseconds(10))), ResponseOf(503),
                                     At(milliseconds(10))),
                     milliseconds(50), /*from_hint=*/true));
}

// Near the deadline only the backoff part shrinks, never below the hint.
TEST_F(CallStateMachineTest, RetryAfterNearTheDeadlineShrinksOnlyTheBackoff) {
  CallPolicy p = Get(seconds(1));
  p.backoff = Fixed(milliseconds(900));
  CallStateMachine& m = Make(p, {0.5});
  m.Start(kT0);
  // Backoff 900 ms does not fit at 100 ms (100 + 900 + 50 + 10 > 1000); the
  // 300 ms hint does: the wait is the longest that fits, 840 ms.
  EXPECT_TRUE(IsWait(m.OnAttemptDone(Answered(503, RetryAfter(milliseconds(300))), ResponseOf(503),
                                     At(milliseconds(100))),
                     milliseconds(840), /*from_hint=*/true));
}

// A hint above `max_retry_after` stops the call: shortening it would come
// back before the server's "not before".
TEST_F(CallStateMachineTest, RetryAfterAboveTheMaximumStopsRetryAfterTooLong) {
  CallStateMachine& m = Make(Get(seconds(100)), {0.5});
  m.Start(kT0);
  ServerHints h = RetryAfter(seconds(60));
  h.retry_after_above_max = true;
  EXPECT_TRUE(IsFinish(m.OnAttemptDone(Answered(503, h), ResponseOf(503), At(milliseconds(10)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kRetryAfterTooLong);
  EXPECT_EQ(budget_.charges(), 0);
}

// Rule 7: a wait the machine shortened to fit ends exactly when a useful
// attempt is left; a clock that wakes a few ms late still gets its send.
TEST_F(CallStateMachineTest, AShortenedWaitLeadsToASendOnALateClock) {
  for (Duration late : {Duration::zero(), Duration(milliseconds(1)), Duration(milliseconds(5)),
                        Duration(milliseconds(25))}) {
    SCOPED_TRACE(late.count());
    CallPolicy p = Get(seconds(1));
    p.backoff = Fixed(seconds(2));
    CallStateMachine& m = Make(p, {0.5});
    m.Start(kT0);
    EXPECT_TRUE(IsWait(m.OnAttemptDone(Answered(503), ResponseOf(503), At(milliseconds(100))),
                       milliseconds(840)));
    EXPECT_TRUE(IsSend(m.OnWaitOver(At(milliseconds(940)) + late), 2, milliseconds(50) - late));
  }
  // Later than half a useful attempt: the wait overslept, no send.
  CallPolicy p = Get(seconds(1));
  p.backoff = Fixed(seconds(2));
  CallStateMachine& m = Make(p, {0.5});
  m.Start(kT0);
  m.OnAttemptDone(Answered(503), ResponseOf(503), At(milliseconds(100)));
  EXPECT_TRUE(IsFinish(m.OnWaitOver(At(milliseconds(966)))));
  EXPECT_EQ(Result().stop_reason, StopReason::kNoTimeForUsefulAttempt);
}

// kAmbiguousUnresolved: rule 5, an ambiguous write with no key has no way to
// be resolved and is never resent.
TEST_F(CallStateMachineTest, AmbiguousWriteWithoutKeyStopsAmbiguousUnresolved) {
  CallStateMachine& m = Make(UnkeyedPost(seconds(1)));
  EXPECT_TRUE(IsSend(m.Start(kT0), 1, milliseconds(990)));
  EXPECT_TRUE(IsFinish(m.OnAttemptDone(Lost(), std::nullopt, At(milliseconds(10)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kAmbiguousUnresolved);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(budget_.charges(), 0);
  EXPECT_EQ(allowance_.charges(), 0);
}

// kAmbiguousUnresolved: keyed, but no status query, no deduplication
// declared and no 409 seen.
TEST_F(CallStateMachineTest, AmbiguousKeyedWriteWithNoResolutionStopsAmbiguousUnresolved) {
  CallStateMachine& m = Make(KeyedPostWithoutQuery(seconds(1)));
  m.Start(kT0);
  EXPECT_TRUE(IsFinish(m.OnAttemptDone(Answered(500), ResponseOf(500), At(milliseconds(10)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kAmbiguousUnresolved);
  EXPECT_EQ(budget_.charges(), 0);
}

// An answer that comes after the call finished (a copy the driver was to
// cancel) is not recorded and changes nothing.
TEST_F(CallStateMachineTest, AnAnswerAfterTheFinishIsNotRecorded) {
  CallStateMachine& m = Make(Get(seconds(1)));
  m.Start(kT0);
  EXPECT_TRUE(IsFinish(m.OnAttemptDone(Answered(200), ResponseOf(200), At(milliseconds(10)))));
  EXPECT_TRUE(IsFinish(m.OnAttemptDone(Answered(500), ResponseOf(500), At(milliseconds(20)))));
  EXPECT_TRUE(IsFinish(m.OnStatusAnswer(StatusAnswer::kFenced, Answered(404), ResponseOf(404),
                                        At(milliseconds(30)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  ASSERT_EQ(r.evidence.size(), 1u);
  EXPECT_EQ(r.last_response->status_code, 200);
}

// kPendingConfirmation: the server holds the key for a person's decision. A
// status query that says so, or a send answered so, ends the call UNKNOWN at
// once: no poll and no resend can settle it.
TEST_F(CallStateMachineTest, PendingConfirmationEndsUnknownAtOnce) {
  ServerHints pending;
  pending.key_state = KeyState::kPendingConfirmation;
  {
    CallStateMachine& m = Make(KeyedPost(seconds(1)), {0.0});
    m.Start(kT0);
    EXPECT_TRUE(
        IsWait(m.OnAttemptDone(Lost(), std::nullopt, At(milliseconds(100))), milliseconds(25)));
    EXPECT_TRUE(IsQuery(m.OnWaitOver(At(milliseconds(125))), 1, microseconds(432500)));
    EXPECT_TRUE(
        IsFinish(m.OnStatusAnswer(StatusAnswer::kPendingConfirmation, Answered(409, pending),
                                  ResponseOf(409), At(milliseconds(130)))));
    const CallResult r = Result();
    EXPECT_EQ(r.outcome, Outcome::kUnknown);
    EXPECT_EQ(r.stop_reason, StopReason::kPendingConfirmation);
    EXPECT_EQ(r.attempts, 1);
    EXPECT_EQ(r.status_queries, 1);
  }
  {
    CallStateMachine& m = Make(KeyedPostWithoutQuery(seconds(1)));
    m.Start(kT0);
    EXPECT_TRUE(
        IsFinish(m.OnAttemptDone(Answered(409, pending), ResponseOf(409), At(milliseconds(10)))));
    const CallResult r = Result();
    EXPECT_EQ(r.outcome, Outcome::kUnknown);
    EXPECT_EQ(r.stop_reason, StopReason::kPendingConfirmation);
    EXPECT_EQ(r.attempts, 1);
    EXPECT_EQ(budget_.charges(), 0);
  }
}

// A status query's 409 says "pending confirmation" only with the key state.
TEST(StatusAnswerTest, A409MarkedPendingConfirmationIsItsOwnAnswer) {
  TransportResult r;
  r.delivery = Delivery::kResponseReceived;
  r.response = Response{409, {{"Idempotency-Key-State", "pending_confirmation"}}, "{}", false};
  EXPECT_EQ(MapStatusAnswer(r), StatusAnswer::kPendingConfirmation);
  r.response->headers = {{"Idempotency-Key-State", "processing"}};
  EXPECT_EQ(MapStatusAnswer(r), StatusAnswer::kProcessing);
}

// kUnavailableUnresolved: rule 5, an unmarked 503 is doubt (the attempt may
// have taken effect behind a gateway): a write with no key is never resent.
TEST_F(CallStateMachineTest, UnmarkedUnavailableWriteWithoutKeyStopsUnavailableUnresolved) {
  CallStateMachine& m = Make(UnkeyedPost(seconds(1)));
  EXPECT_TRUE(IsSend(m.Start(kT0), 1, milliseconds(990)));
  EXPECT_TRUE(IsFinish(m.OnAttemptDone(Answered(503), ResponseOf(503), At(milliseconds(10)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kUnavailableUnresolved);
  EXPECT_EQ(r.attempts, 1);
  ASSERT_EQ(r.evidence.size(), 1u);
  EXPECT_EQ(r.evidence[0].classification, AttemptClass::kUnavailableUnproven);
  EXPECT_EQ(budget_.charges(), 0);
}

// kUnavailableUnresolved: keyed, but no status query and no deduplication.
// A Retry-After on the 503 is not proof: the call still stops.
TEST_F(CallStateMachineTest, UnmarkedUnavailableKeyedWriteWithNoResolutionStopsUnresolved) {
  CallStateMachine& m = Make(KeyedPostWithoutQuery(seconds(5)));
  m.Start(kT0);
  EXPECT_TRUE(IsFinish(m.OnAttemptDone(Answered(503, RetryAfter(seconds(1))), ResponseOf(503),
                                       At(milliseconds(10)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kUnavailableUnresolved);
  EXPECT_EQ(budget_.charges(), 0);
}

// Rule 5: an unmarked 503 to a keyed write with a status query is settled
// by the query, charged to the allowance, never resent blindly.
TEST_F(CallStateMachineTest, UnmarkedUnavailableKeyedWriteIsQueried) {
  CallStateMachine& m = Make(KeyedPost(seconds(1)), {0.0});
  m.Start(kT0);
  EXPECT_TRUE(IsWait(m.OnAttemptDone(Answered(503), ResponseOf(503), At(milliseconds(100))),
                     milliseconds(25)));
  EXPECT_TRUE(IsQuery(m.OnWaitOver(At(milliseconds(125))), 1, microseconds(432500)));
  EXPECT_TRUE(IsFinish(m.OnStatusAnswer(StatusAnswer::kFound, Answered(200), ResponseOf(200),
                                        At(milliseconds(130)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kStatusQuery);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(allowance_.charges(), 1);
  EXPECT_EQ(budget_.charges(), 0);
}

// Rule 5: with a deduplicating server the same key is resent; the doubt
// stays, so the attempt cap ends the call UNKNOWN, not FAILED.
TEST_F(CallStateMachineTest, UnmarkedUnavailableToADeduplicatingServerIsResentAndNeverFailed) {
  CallPolicy p = KeyedPostWithoutQuery(seconds(5));
  p.server_deduplicates = true;
  p.max_attempts = 2;
  CallStateMachine& m = Make(p, {0.5});
  m.Start(kT0);
  EXPECT_TRUE(
      IsKind(m.OnAttemptDone(Answered(503), ResponseOf(503), At(milliseconds(10))), Kind::kWait));
  EXPECT_TRUE(IsKind(m.OnWaitOver(At(milliseconds(100))), Kind::kSendAttempt));
  EXPECT_TRUE(IsFinish(m.OnAttemptDone(Answered(503), ResponseOf(503), At(milliseconds(110)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kAttemptsExhausted);
  EXPECT_EQ(r.attempts, 2);
  EXPECT_THAT(budget_.charged_classes(), ElementsAre(AttemptClass::kUnavailableUnproven));
}

// The server's mark proves the 503 did nothing: the same write is retried
// as transient and ends FAILED at the cap.
TEST_F(CallStateMachineTest, MarkedUnavailableWriteIsRetriedAndFailsAtTheCap) {
  CallPolicy p = UnkeyedPost(seconds(5));
  p.max_attempts = 2;
  CallStateMachine& m = Make(p, {0.5});
  m.Start(kT0);
  EXPECT_TRUE(
      IsKind(m.OnAttemptDone(Answered(503, Rejected()), ResponseOf(503), At(milliseconds(10))),
             Kind::kWait));
  EXPECT_TRUE(IsKind(m.OnWaitOver(At(milliseconds(100))), Kind::kSendAttempt));
  EXPECT_TRUE(
      IsFinish(m.OnAttemptDone(Answered(503, Rejected()), ResponseOf(503), At(milliseconds(110)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kAttemptsExhausted);
  EXPECT_THAT(budget_.charged_classes(), ElementsAre(AttemptClass::kRetryableTransient));
}

// An idempotent write is retried after an unmarked 503, but the doubt stays
// in its history: at the cap it is UNKNOWN. A GET never is.
TEST_F(CallStateMachineTest, UnmarkedUnavailablePutIsRetriedAndUnknownAtTheCapGetIsFailed) {
  for (const bool put : {true, false}) {
    SCOPED_TRACE(put);
    CallPolicy p = put ? Put(seconds(5)) : Get(seconds(5));
    p.max_attempts = 2;
    CallStateMachine& m = Make(p, {0.5});
    m.Start(kT0);
    EXPECT_TRUE(
        IsKind(m.OnAttemptDone(Answered(503), ResponseOf(503), At(milliseconds(10))), Kind::kWait));
    EXPECT_TRUE(IsKind(m.OnWaitOver(At(milliseconds(100))), Kind::kSendAttempt));
    EXPECT_TRUE(IsFinish(m.OnAttemptDone(Answered(503), ResponseOf(503), At(milliseconds(110)))));
    const CallResult r = Result();
    EXPECT_EQ(r.outcome, put ? Outcome::kUnknown : Outcome::kFailed);
    EXPECT_EQ(r.stop_reason, StopReason::kAttemptsExhausted);
  }
}

// kNotFoundNoAttemptsLeft: an unfenced "not found" with no attempt left.
TEST_F(CallStateMachineTest, NotFoundWithNoAttemptLeftStopsNotFoundNoAttemptsLeft) {
  CallPolicy p = KeyedPost(seconds(1));
  p.max_attempts = 1;
  CallStateMachine& m = Make(p, {0.0});
  m.Start(kT0);
  EXPECT_TRUE(
      IsWait(m.OnAttemptDone(Lost(), std::nullopt, At(milliseconds(100))), milliseconds(25)));
  EXPECT_TRUE(IsQuery(m.OnWaitOver(At(milliseconds(125))), 1, microseconds(432500)));
  EXPECT_TRUE(IsFinish(m.OnStatusAnswer(StatusAnswer::kNotFound, Answered(404), ResponseOf(404),
                                        At(milliseconds(130)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kNotFoundNoAttemptsLeft);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.status_queries, 1);
  EXPECT_EQ(allowance_.charges(), 1);
  EXPECT_EQ(budget_.charges(), 0);
}

// kFenced: with no attempt left and the fence allowed, exactly one fenced
// query is sent; its fenced "not found" is definite.
TEST_F(CallStateMachineTest, FencedNotFoundAfterGivingUpStopsFencedFailed) {
  CallPolicy p = KeyedPost(seconds(1));
  p.max_attempts = 1;
  p.fence_when_giving_up = true;
  CallStateMachine& m = Make(p, {0.0});
  m.Start(kT0);
  EXPECT_TRUE(
      IsWait(m.OnAttemptDone(Lost(), std::nullopt, At(milliseconds(100))), milliseconds(25)));
  EXPECT_TRUE(IsQuery(m.OnWaitOver(At(milliseconds(125))), 1, microseconds(432500), false));
  EXPECT_TRUE(IsWait(m.OnStatusAnswer(StatusAnswer::kNotFound, Answered(404), ResponseOf(404),
                                      At(milliseconds(130))),
                     microseconds(37500)));
  // (1000 - 167.5 - 10) / 2 = 411.25 ms.
  EXPECT_TRUE(IsQuery(m.OnWaitOver(At(microseconds(167500))), 2, microseconds(411250), true));
  EXPECT_TRUE(IsFinish(m.OnStatusAnswer(StatusAnswer::kFenced, Answered(404), ResponseOf(404),
                                        At(milliseconds(170)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kFenced);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kStatusQuery);
  EXPECT_TRUE(r.resolved_by_status_query);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.status_queries, 2);
  EXPECT_EQ(allowance_.charges(), 2);
  EXPECT_EQ(budget_.charges(), 0);
}

// A server that ignores the fence answers the fenced query with a plain
// "not found": the call stays UNKNOWN after one fenced query, never two.
TEST_F(CallStateMachineTest, FenceIgnoredByTheServerIsSentOnceAndLeavesUnknown) {
  CallPolicy p = KeyedPost(seconds(1));
  p.max_attempts = 1;
  p.fence_when_giving_up = true;
  CallStateMachine& m = Make(p, {0.0});
  m.Start(kT0);
  m.OnAttemptDone(Lost(), std::nullopt, At(milliseconds(100)));
  EXPECT_TRUE(IsQuery(m.OnWaitOver(At(milliseconds(125))), 1, microseconds(432500), false));
  m.OnStatusAnswer(StatusAnswer::kNotFound, Answered(404), ResponseOf(404), At(milliseconds(130)));
  EXPECT_TRUE(IsQuery(m.OnWaitOver(At(microseconds(167500))), 2, microseconds(411250), true));
  EXPECT_TRUE(IsFinish(m.OnStatusAnswer(StatusAnswer::kNotFound, Answered(404), ResponseOf(404),
                                        At(milliseconds(170)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kNotFoundNoAttemptsLeft);
  EXPECT_EQ(r.status_queries, 2);
}

// kCancelled: rule 7, cancelled during the wait; the charge is refunded.
TEST_F(CallStateMachineTest, CancelledDuringAWaitStopsCancelledAndRefundsTheCharge) {
  CallStateMachine& m = Make(Get(seconds(1)), {0.5});
  m.Start(kT0);
  EXPECT_TRUE(IsWait(m.OnAttemptDone(Answered(503), ResponseOf(503), At(milliseconds(10))),
                     milliseconds(50)));
  EXPECT_EQ(budget_.charges(), 1);
  token_.Cancel();
  EXPECT_TRUE(IsFinish(m.OnCancelled(At(milliseconds(30)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kCancelled);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_THAT(budget_.refunds(), ElementsAre(1));
  EXPECT_EQ(r.elapsed, milliseconds(30));
}

// kCancelled: the token fired during the wait and the driver reports the end
// of the wait: no send, the charge (here the allowance's) is refunded.
TEST_F(CallStateMachineTest, CancelledWhenTheWaitEndsSendsNothingAndRefunds) {
  CallStateMachine& m = Make(KeyedPost(seconds(1)), {0.0});
  m.Start(kT0);
  EXPECT_TRUE(
      IsWait(m.OnAttemptDone(Lost(), std::nullopt, At(milliseconds(100))), milliseconds(25)));
  token_.Cancel();
  EXPECT_TRUE(IsFinish(m.OnWaitOver(At(milliseconds(125)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kCancelled);
  EXPECT_EQ(r.status_queries, 0);
  EXPECT_THAT(allowance_.refunds(), ElementsAre(1));
  EXPECT_TRUE(budget_.refunds().empty());
}

// kCancelled: rule 4, cancelled while the attempt ran: stop before deciding
// how to go on, uncharged; the history decides UNKNOWN.
TEST_F(CallStateMachineTest, CancelledWhileAnAttemptRanStopsCancelledUncharged) {
  CallStateMachine& m = Make(KeyedPost(seconds(1)));
  m.Start(kT0);
  token_.Cancel();
  EXPECT_TRUE(IsFinish(m.OnAttemptDone(Lost(), std::nullopt, At(milliseconds(10)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kCancelled);
  EXPECT_EQ(budget_.charges(), 0);
  EXPECT_EQ(allowance_.charges(), 0);
}

// A driver's own cancellation (`Cancel()`, no token) decides as the token
// does, step for step: during an attempt of a keyed write, UNKNOWN and
// uncharged; during a GET's wait, no send and the charge refunded.
TEST_F(CallStateMachineTest, CancelWithoutATokenDecidesAsTheTokenDoes) {
  struct Ended {
    Outcome outcome;
    StopReason reason;
    int attempts;
    int charges;
    std::vector<std::int64_t> refunds;
  };
  // `during_wait`: cancelled once the first attempt's 503 scheduled a wait
  // (a GET), else while the first attempt of a keyed POST is in flight.
  auto run = [this](bool by_token, bool during_wait) {
    CountingBudget budget;
    CountingBudget allowance;
    ScriptedRandom random({0.5});
    CancellationToken token;
    const CallServices services{&budget, &classifier_, &random, &allowance};
    CallPolicy policy = during_wait ? Get(seconds(1)) : KeyedPost(seconds(1));
    CallStateMachine m(&policy, &services, by_token ? &token : nullptr);
    m.Start(kT0);
    if (during_wait) {
      EXPECT_TRUE(IsWait(m.OnAttemptDone(Answered(503), ResponseOf(503), At(milliseconds(10))),
                         milliseconds(50)));
    }
    EXPECT_FALSE(m.cancelled());
    if (by_token) {
      token.Cancel();
    } else {
      m.Cancel();
    }
    EXPECT_TRUE(m.cancelled());
    EXPECT_TRUE(IsFinish(during_wait
                             ? m.OnWaitOver(At(milliseconds(60)))
                             : m.OnAttemptDone(Lost(), std::nullopt, At(milliseconds(10)))));
    const CallResult r = m.TakeResult();
    return Ended{r.outcome, r.stop_reason, r.attempts, budget.charges() + allowance.charges(),
                 budget.refunds()};
  };
  for (const bool during_wait : {false, true}) {
    const Ended by_token = run(true, during_wait);
    const Ended by_driver = run(false, during_wait);
    EXPECT_EQ(by_driver.outcome, during_wait ? Outcome::kFailed : Outcome::kUnknown);
    EXPECT_EQ(by_driver.reason, StopReason::kCancelled);
    EXPECT_EQ(by_driver.attempts, 1);
    EXPECT_EQ(by_driver.charges, during_wait ? 1 : 0);
    EXPECT_EQ(by_driver.refunds,
              during_wait ? std::vector<std::int64_t>{1} : std::vector<std::int64_t>{});
    EXPECT_EQ(by_token.outcome, by_driver.outcome);
    EXPECT_EQ(by_token.reason, by_driver.reason);
    EXPECT_EQ(by_token.attempts, by_driver.attempts);
    EXPECT_EQ(by_token.charges, by_driver.charges);
    EXPECT_EQ(by_token.refunds, by_driver.refunds);
  }
}

// kServerDoNotRetry: rule 4, the server asked not to be retried: no charge,
// no delay drawn.
TEST_F(CallStateMachineTest, ServerDoNotRetryHintStopsServerDoNotRetryUncharged) {
  CallStateMachine& m = Make(Get(seconds(1)));
  m.Start(kT0);
  EXPECT_TRUE(IsFinish(
      m.OnAttemptDone(Answered(503, DoNotRetry()), ResponseOf(503), At(milliseconds(10)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kServerDoNotRetry);
  EXPECT_EQ(budget_.charges(), 0);
  EXPECT_EQ(random_->uniform_draws(), 0);
}

// ===========================================================================
// The order of checks.

// Rules 2-4: success, then permanent, then cancelled, then do-not-retry.
TEST_F(CallStateMachineTest, OrderSuccessBeatsCancellation) {
  CallStateMachine& m = Make(Get(seconds(1)));
  m.Start(kT0);
  token_.Cancel();
  EXPECT_TRUE(IsFinish(m.OnAttemptDone(Answered(200), ResponseOf(200), At(milliseconds(10)))));
  EXPECT_EQ(Result().stop_reason, StopReason::kSuccess);
}

TEST_F(CallStateMachineTest, OrderPermanentBeatsCancellation) {
  CallStateMachine& m = Make(Get(seconds(1)));
  m.Start(kT0);
  token_.Cancel();
  EXPECT_TRUE(IsFinish(m.OnAttemptDone(Answered(400), ResponseOf(400), At(milliseconds(10)))));
  EXPECT_EQ(Result().stop_reason, StopReason::kPermanentError);
}

TEST_F(CallStateMachineTest, OrderCancellationBeatsDoNotRetry) {
  CallStateMachine& m = Make(Get(seconds(1)));
  m.Start(kT0);
  token_.Cancel();
  EXPECT_TRUE(IsFinish(
      m.OnAttemptDone(Answered(503, DoNotRetry()), ResponseOf(503), At(milliseconds(10)))));
  EXPECT_EQ(Result().stop_reason, StopReason::kCancelled);
}

TEST_F(CallStateMachineTest, OrderDoNotRetryBeatsTheCapAndTheBudget) {
  CallPolicy p = Get(seconds(1));
  p.max_attempts = 1;
  CountingBudget refusing(/*allow=*/false);
  CallStateMachine& m = Make(p, {0.5}, &refusing);
  m.Start(kT0);
  EXPECT_TRUE(IsFinish(
      m.OnAttemptDone(Answered(503, DoNotRetry()), ResponseOf(503), At(milliseconds(10)))));
  EXPECT_EQ(Result().stop_reason, StopReason::kServerDoNotRetry);
  EXPECT_EQ(refusing.charges(), 0);
}

// Rule 6: the cap comes first: a refusing budget is not consulted and no
// delay is drawn when the attempts are used up.
TEST_F(CallStateMachineTest, OrderCapBeforeDelayAndBudget) {
  CallPolicy p = Get(seconds(1));
  p.max_attempts = 1;
  CountingBudget refusing(/*allow=*/false);
  CallStateMachine& m = Make(p, {0.5}, &refusing);
  m.Start(kT0);
  EXPECT_TRUE(IsFinish(m.OnAttemptDone(Answered(503), ResponseOf(503), At(milliseconds(10)))));
  EXPECT_EQ(Result().stop_reason, StopReason::kAttemptsExhausted);
  EXPECT_EQ(refusing.charges(), 0);
  EXPECT_EQ(random_->uniform_draws(), 0);
}

// The poll cap also comes before the allowance.
TEST_F(CallStateMachineTest, OrderPollCapBeforeTheAllowance) {
  CallPolicy p = KeyedPost(seconds(1));
  p.max_status_queries = 1;
  CallStateMachine& m = Make(p, {0.0});
  m.Start(kT0);
  m.OnAttemptDone(Lost(), std::nullopt, At(milliseconds(100)));
  EXPECT_TRUE(IsQuery(m.OnWaitOver(At(milliseconds(125))), 1, microseconds(432500)));
  const int charged_before = allowance_.charges();
  EXPECT_TRUE(IsFinish(m.OnStatusAnswer(StatusAnswer::kProcessing, Answered(409), ResponseOf(409),
                                        At(milliseconds(130)))));
  EXPECT_EQ(Result().stop_reason, StopReason::kStatusQueriesExhausted);
  EXPECT_EQ(charged_before, 1);
  EXPECT_EQ(allowance_.charges(), 1);
}

// Rule 6: time before budget: a wait that does not fit is never charged,
// even by a budget that would refuse.
TEST_F(CallStateMachineTest, OrderTimeBeforeBudget) {
  CountingBudget refusing(/*allow=*/false);
  CallStateMachine& m = Make(Get(seconds(1)), {0.5}, &refusing);
  m.Start(kT0);
  EXPECT_TRUE(IsFinish(m.OnAttemptDone(Answered(503), ResponseOf(503), At(milliseconds(950)))));
  EXPECT_EQ(Result().stop_reason, StopReason::kNoTimeForUsefulAttempt);
  EXPECT_EQ(refusing.charges(), 0);
}

// Rule 6: the delay is decided before the time check: a Retry-After that
// does not fit ends the call, while a drawn delay of the same length is
// shortened to exactly deadline - now - min useful attempt - margin.
TEST_F(CallStateMachineTest, OrderRetryAfterNeverShortenedButDrawnDelayIs) {
  {
    CallStateMachine& m = Make(Get(seconds(1)), {0.5});
    m.Start(kT0);
    // 10 + 940 + 50 + 10 = 1010 ms > 1000 ms.
    EXPECT_TRUE(IsFinish(m.OnAttemptDone(Answered(503, RetryAfter(milliseconds(940))),
                                         ResponseOf(503), At(milliseconds(10)))));
    EXPECT_EQ(Result().stop_reason, StopReason::kRetryAfterBeyondDeadline);
    EXPECT_EQ(budget_.charges(), 0);
  }
  {
    CallPolicy p = Get(seconds(1));
    p.backoff = Fixed(milliseconds(940));
    CountingBudget budget;
    CallStateMachine& m = Make(p, {0.5}, &budget);
    m.Start(kT0);
    // 1000 - 10 - 50 - 10 = 930 ms.
    EXPECT_TRUE(IsWait(m.OnAttemptDone(Answered(503), ResponseOf(503), At(milliseconds(10))),
                       milliseconds(930)));
    EXPECT_EQ(budget.charges(), 1);
    // The send after the shortened wait gets exactly a useful attempt.
    EXPECT_TRUE(IsSend(m.OnWaitOver(At(milliseconds(940))), 2, milliseconds(50)));
    EXPECT_TRUE(m.result().evidence.back().delay_after == milliseconds(930));
  }
}

TEST_F(CallStateMachineTest, DrawnDelayThatDoesNotFitIsShortenedToTheLastUsefulStart) {
  CallPolicy p = Get(seconds(1));
  p.backoff = Fixed(milliseconds(800));
  CallStateMachine& m = Make(p);
  EXPECT_TRUE(IsSend(m.Start(kT0), 1, milliseconds(495)));
  // 1000 - 300 - 50 - 10 = 640 ms.
  EXPECT_TRUE(IsWait(m.OnAttemptDone(Answered(503), ResponseOf(503), At(milliseconds(300))),
                     milliseconds(640)));
  EXPECT_TRUE(IsSend(m.OnWaitOver(At(milliseconds(940))), 2, milliseconds(50)));
  EXPECT_EQ(budget_.charges(), 1);
  EXPECT_EQ(budget_.charge_times()[0], At(milliseconds(300)));
  EXPECT_TRUE(IsFinish(m.OnAttemptDone(Answered(200), ResponseOf(200), At(milliseconds(960)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.evidence[0].delay_after, milliseconds(640));
  EXPECT_FALSE(r.evidence[0].delay_from_server_hint);
  // The success credits the cost of the retry that reached it.
  EXPECT_THAT(budget_.success_costs(), ElementsAre(1));
}

TEST_F(CallStateMachineTest, RetryAfterThatFitsIsWaitedExactly) {
  CallStateMachine& m = Make(Get(seconds(1)), {0.5});
  m.Start(kT0);
  EXPECT_TRUE(IsWait(m.OnAttemptDone(Answered(429, RetryAfter(milliseconds(300))), ResponseOf(429),
                                     At(milliseconds(10))),
                     milliseconds(300), /*from_hint=*/true));
  // The backoff (50 ms) was drawn and lies under the hint.
  EXPECT_EQ(random_->uniform_draws(), 1);
  // 429 is a throttling answer: the budget is told so.
  EXPECT_THAT(budget_.throttled(), ElementsAre(true));
  EXPECT_TRUE(IsSend(m.OnWaitOver(At(milliseconds(310))), 2, milliseconds(495)));
  EXPECT_TRUE(m.result().evidence[0].delay_from_server_hint);
}

// Rule 6: the budget is charged only when the send is certain, once per
// wait, with the class of the failure that led to it.
TEST_F(CallStateMachineTest, BudgetChargedOncePerWaitWithTheFailureClass) {
  CallPolicy p = Get(seconds(5));
  p.max_attempts = 3;
  CallStateMachine& m = Make(p, {0.5});
  m.Start(kT0);
  EXPECT_TRUE(IsWait(m.OnAttemptDone(Answered(503), ResponseOf(503), At(milliseconds(10))),
                     milliseconds(50)));
  EXPECT_TRUE(IsSend(m.OnWaitOver(At(milliseconds(60))), 2, milliseconds(2495)));
  // Full jitter, 200 ms ceiling, u = 0.5: 100 ms.
  EXPECT_TRUE(
      IsWait(m.OnAttemptDone(Lost(), std::nullopt, At(milliseconds(70))), milliseconds(100)));
  EXPECT_TRUE(IsSend(m.OnWaitOver(At(milliseconds(170))), 3, milliseconds(2495)));
  // The second is the ambiguous kind (a timeout-like failure, priced as
  // such by a cost quota), whatever the request's idempotency.
  EXPECT_THAT(budget_.charged_classes(),
              ElementsAre(AttemptClass::kUnavailableUnproven, AttemptClass::kAmbiguous));
  EXPECT_THAT(budget_.throttled(), ElementsAre(false, false));
  EXPECT_TRUE(budget_.refunds().empty());
}

// Rule 6: polls draw from the status-query allowance, retries from the retry
// budget; a "not found" resend is a retry.
TEST_F(CallStateMachineTest, PollsChargeTheAllowanceRetriesTheRetryBudget) {
  CallPolicy p = KeyedPost(seconds(1));
  p.max_attempts = 2;
  CallStateMachine& m = Make(p, {0.0});
  m.Start(kT0);
  EXPECT_TRUE(
      IsWait(m.OnAttemptDone(Lost(), std::nullopt, At(milliseconds(100))), milliseconds(25)));
  EXPECT_EQ(allowance_.charges(), 1);
  EXPECT_EQ(budget_.charges(), 0);
  EXPECT_TRUE(IsQuery(m.OnWaitOver(At(milliseconds(125))), 1, microseconds(432500)));
  // Not found: resend with the same key; full jitter with u = 0 waits 0.
  EXPECT_TRUE(IsWait(m.OnStatusAnswer(StatusAnswer::kNotFound, Answered(404), ResponseOf(404),
                                      At(milliseconds(130))),
                     Duration::zero()));
  EXPECT_EQ(allowance_.charges(), 1);
  EXPECT_THAT(budget_.charged_classes(), ElementsAre(AttemptClass::kRetryableNotDelivered));
  // The window (300 ms) is still kept: 1000 - 130 - 10 - 300.
  EXPECT_TRUE(IsSend(m.OnWaitOver(At(milliseconds(130))), 2, milliseconds(560)));
  EXPECT_TRUE(IsFinish(m.OnAttemptDone(Answered(201), ResponseOf(201), At(milliseconds(140)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kResponse);
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(r.status_queries, 1);
  EXPECT_THAT(budget_.success_costs(), ElementsAre(1));
}

// A resend after the window has opened gets all that remains.
TEST_F(CallStateMachineTest, ResendInsideTheWindowGetsAllThatRemains) {
  CallPolicy p = KeyedPost(seconds(1));
  p.max_attempts = 2;
  CallStateMachine& m = Make(p, {0.0});
  m.Start(kT0);
  EXPECT_TRUE(
      IsWait(m.OnAttemptDone(TimedOut(), std::nullopt, At(milliseconds(690))), milliseconds(25)));
  // (1000 - 715 - 10) / 2 = 137.5 ms.
  EXPECT_TRUE(IsQuery(m.OnWaitOver(At(milliseconds(715))), 1, microseconds(137500)));
  EXPECT_TRUE(IsWait(m.OnStatusAnswer(StatusAnswer::kNotFound, Answered(404), ResponseOf(404),
                                      At(milliseconds(720))),
                     Duration::zero()));
  EXPECT_TRUE(IsSend(m.OnWaitOver(At(milliseconds(720))), 2, milliseconds(270)));
}

// Rule 5: a resend answered 409 counts as a poll, not as an attempt: with
// two attempts allowed, four sends are made, and the poll cap stops it.
TEST_F(CallStateMachineTest, ResendAnswered409CountsAsAPollNotAnAttempt) {
  CallPolicy p = KeyedPostWithoutQuery(seconds(5));
  p.max_attempts = 2;
  p.max_status_queries = 3;
  CallStateMachine& m = Make(p, {0.0});
  EXPECT_TRUE(IsSend(m.Start(kT0), 1, milliseconds(4990)));
  EXPECT_TRUE(IsWait(m.OnAttemptDone(Answered(409), ResponseOf(409), At(milliseconds(10))),
                     milliseconds(25)));
  EXPECT_TRUE(IsSend(m.OnWaitOver(At(milliseconds(35))), 2, milliseconds(4955)));
  EXPECT_TRUE(IsWait(m.OnAttemptDone(Answered(409), ResponseOf(409), At(milliseconds(45))),
                     microseconds(37500)));
  EXPECT_TRUE(IsSend(m.OnWaitOver(At(microseconds(82500))), 3, microseconds(4907500)));
  EXPECT_TRUE(IsWait(m.OnAttemptDone(Answered(409), ResponseOf(409), At(milliseconds(90))),
                     microseconds(56250)));
  EXPECT_TRUE(IsSend(m.OnWaitOver(At(microseconds(146250))), 4, microseconds(4843750)));
  EXPECT_TRUE(IsFinish(m.OnAttemptDone(Answered(409), ResponseOf(409), At(milliseconds(150)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kStatusQueriesExhausted);
  EXPECT_EQ(r.attempts, 4);
  EXPECT_EQ(r.status_queries, 0);
  EXPECT_EQ(allowance_.charges(), 3);
  EXPECT_EQ(budget_.charges(), 0);
}

// ... and one answered otherwise counts as an attempt again.
TEST_F(CallStateMachineTest, ResendAsAPollAnsweredOtherwiseCountsAsAnAttempt) {
  CallPolicy p = KeyedPostWithoutQuery(seconds(5));
  p.max_attempts = 2;
  p.max_status_queries = 3;
  CallStateMachine& m = Make(p, {0.0});
  m.Start(kT0);
  m.OnAttemptDone(Answered(409), ResponseOf(409), At(milliseconds(10)));
  EXPECT_TRUE(IsSend(m.OnWaitOver(At(milliseconds(35))), 2, milliseconds(4955)));
  EXPECT_TRUE(IsFinish(m.OnAttemptDone(Answered(503), ResponseOf(503), At(milliseconds(45)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kUnknown);  // the 409 said the first may commit
  EXPECT_EQ(r.stop_reason, StopReason::kAttemptsExhausted);
  EXPECT_EQ(r.attempts, 2);
}

// Rule 5: a 409 seen makes a later ambiguous attempt resendable with the
// same key, even with no status query and no declared deduplication.
TEST_F(CallStateMachineTest, AmbiguousAfterA409IsResentWithTheSameKey) {
  CallPolicy p = KeyedPostWithoutQuery(seconds(5));
  p.max_attempts = 3;
  CallStateMachine& m = Make(p, {0.0});
  m.Start(kT0);
  m.OnAttemptDone(Answered(409), ResponseOf(409), At(milliseconds(10)));
  EXPECT_TRUE(IsSend(m.OnWaitOver(At(milliseconds(35))), 2, milliseconds(4955)));
  // The resend is lost: a retry (retry budget), full jitter u = 0.
  EXPECT_TRUE(
      IsWait(m.OnAttemptDone(Lost(), std::nullopt, At(milliseconds(45))), Duration::zero()));
  EXPECT_THAT(budget_.charged_classes(), ElementsAre(AttemptClass::kAmbiguous));
  EXPECT_TRUE(IsSend(m.OnWaitOver(At(milliseconds(45))), 3, milliseconds(4945)));
  EXPECT_TRUE(
      IsFinish(m.OnAttemptDone(Answered(201, Replayed()), ResponseOf(201), At(milliseconds(50)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kResponse);
}

// In progress with a status query: poll by status query; a Retry-After on a
// "processing" answer is honoured.
TEST_F(CallStateMachineTest, InProgressPollsTheStatusQueryAndHonoursItsRetryAfter) {
  CallStateMachine& m = Make(KeyedPost(seconds(5)), {0.0});
  EXPECT_TRUE(IsSend(m.Start(kT0), 1, milliseconds(3490)));
  EXPECT_TRUE(IsWait(m.OnAttemptDone(Answered(409), ResponseOf(409), At(milliseconds(10))),
                     milliseconds(25)));
  // (5000 - 35 - 10) / 2 = 2477.5 ms.
  EXPECT_TRUE(IsQuery(m.OnWaitOver(At(milliseconds(35))), 1, microseconds(2477500)));
  EXPECT_TRUE(
      IsWait(m.OnStatusAnswer(StatusAnswer::kProcessing, Answered(409, RetryAfter(seconds(1))),
                              ResponseOf(409), At(milliseconds(40))),
             seconds(1), /*from_hint=*/true));
  EXPECT_TRUE(IsQuery(m.OnWaitOver(At(milliseconds(1040))), 2, microseconds(1975000)));
  EXPECT_TRUE(IsFinish(m.OnStatusAnswer(StatusAnswer::kFound, Answered(200), ResponseOf(200),
                                        At(milliseconds(1045)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kStatusQuery);
  EXPECT_TRUE(r.resolved_by_status_query);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.status_queries, 2);
  EXPECT_EQ(allowance_.charges(), 2);
  EXPECT_EQ(budget_.charges(), 0);
  ASSERT_TRUE(r.last_response.has_value());
  EXPECT_EQ(r.last_response->status_code, 200);
}

// ===========================================================================
// History decides the outcome.

CallPolicy DedupPost(Duration timeout, int max_attempts) {
  CallPolicy p = KeyedPostWithoutQuery(timeout);
  p.server_deduplicates = true;
  p.max_attempts = max_attempts;
  return p;
}

TEST_F(CallStateMachineTest, HistoryAmbiguousThenCleanFinalErrorIsUnknown) {
  CallStateMachine& m = Make(DedupPost(seconds(1), 2), {0.5});
  EXPECT_TRUE(IsSend(m.Start(kT0), 1, milliseconds(690)));
  EXPECT_TRUE(
      IsWait(m.OnAttemptDone(Lost(), std::nullopt, At(milliseconds(10))), milliseconds(50)));
  EXPECT_TRUE(IsSend(m.OnWaitOver(At(milliseconds(60))), 2, milliseconds(630)));
  EXPECT_TRUE(IsFinish(m.OnAttemptDone(Answered(400), ResponseOf(400), At(milliseconds(70)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  // Not `permanent_error`: an UNKNOWN never reads as a definite failure.
  EXPECT_EQ(r.stop_reason, StopReason::kAnswerNotDefinite);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kNone);
}

TEST_F(CallStateMachineTest, HistoryAmbiguousThenReplayedFinalErrorIsFailed) {
  CallStateMachine& m = Make(DedupPost(seconds(1), 2), {0.5});
  m.Start(kT0);
  m.OnAttemptDone(Lost(), std::nullopt, At(milliseconds(10)));
  EXPECT_TRUE(IsSend(m.OnWaitOver(At(milliseconds(60))), 2, milliseconds(630)));
  EXPECT_TRUE(
      IsFinish(m.OnAttemptDone(Answered(400, Replayed()), ResponseOf(400), At(milliseconds(70)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kPermanentError);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kResponse);
  EXPECT_FALSE(r.resolved_by_status_query);
}

// 410 and 422 say something about the key, never about the intent's effect:
// replayed or not, they leave the history open.
TEST_F(CallStateMachineTest, HistoryAmbiguousThenReplayed410Or422StaysUnknown) {
  for (int status : {410, 422}) {
    SCOPED_TRACE(status);
    CallStateMachine& m = Make(DedupPost(seconds(1), 2), {0.5});
    m.Start(kT0);
    m.OnAttemptDone(Lost(), std::nullopt, At(milliseconds(10)));
    m.OnWaitOver(At(milliseconds(60)));
    EXPECT_TRUE(IsFinish(
        m.OnAttemptDone(Answered(status, Replayed()), ResponseOf(status), At(milliseconds(70)))));
    const CallResult r = Result();
    EXPECT_EQ(r.outcome, Outcome::kUnknown);
    EXPECT_EQ(r.stop_reason,
              status == 410 ? StopReason::kKeyExpired : StopReason::kAnswerNotDefinite);
    EXPECT_EQ(r.resolved_by, ResolvedBy::kNone);
  }
}

// A replayed final error with nothing ambiguous before it is simply FAILED,
// resting on that response.
TEST_F(CallStateMachineTest, HistoryReplayedFinalErrorOnTheFirstAttemptIsFailed) {
  CallStateMachine& m = Make(DedupPost(seconds(1), 2));
  m.Start(kT0);
  EXPECT_TRUE(
      IsFinish(m.OnAttemptDone(Answered(400, Replayed()), ResponseOf(400), At(milliseconds(10)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kResponse);
}

// "Commit, lost response, then clean 503s" ends UNKNOWN.
TEST_F(CallStateMachineTest, HistoryAmbiguousThenCleanRetryableFailuresIsUnknown) {
  CallStateMachine& m = Make(DedupPost(seconds(5), 3), {0.5});
  m.Start(kT0);
  m.OnAttemptDone(Lost(), std::nullopt, At(milliseconds(10)));
  m.OnWaitOver(At(milliseconds(60)));
  EXPECT_TRUE(IsWait(m.OnAttemptDone(Answered(503), ResponseOf(503), At(milliseconds(70))),
                     milliseconds(100)));
  m.OnWaitOver(At(milliseconds(170)));
  EXPECT_TRUE(IsFinish(m.OnAttemptDone(Answered(503), ResponseOf(503), At(milliseconds(180)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kAttemptsExhausted);
}

// A status answer "completed" (the key's stored final error) is definite.
TEST_F(CallStateMachineTest, HistoryStatusAnswerCompletedWithErrorIsFailed) {
  CallStateMachine& m = Make(KeyedPost(seconds(1)), {0.0});
  m.Start(kT0);
  m.OnAttemptDone(Lost(), std::nullopt, At(milliseconds(100)));
  m.OnWaitOver(At(milliseconds(125)));
  EXPECT_TRUE(IsFinish(m.OnStatusAnswer(StatusAnswer::kCompletedWithError, Answered(404),
                                        ResponseOf(404), At(milliseconds(130)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kPermanentError);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kStatusQuery);
  EXPECT_TRUE(r.resolved_by_status_query);
  ASSERT_TRUE(r.last_response.has_value());
  EXPECT_EQ(r.last_response->status_code, 404);
}

// An unfenced "not found" does not clear the history: the resend's clean
// (unmarked) final error gets one settling status query, whose "not found"
// never leads to another resend, and the call ends UNKNOWN.
TEST_F(CallStateMachineTest, HistoryNotFoundThenCleanFinalErrorIsSettledByAQuery) {
  CallPolicy p = KeyedPost(seconds(1));
  p.max_attempts = 3;
  CallStateMachine& m = Make(p, {0.0});
  m.Start(kT0);
  m.OnAttemptDone(Lost(), std::nullopt, At(milliseconds(100)));
  m.OnWaitOver(At(milliseconds(125)));
  m.OnStatusAnswer(StatusAnswer::kNotFound, Answered(404), ResponseOf(404), At(milliseconds(130)));
  EXPECT_TRUE(IsSend(m.OnWaitOver(At(milliseconds(130))), 2, milliseconds(560)));
  EXPECT_TRUE(IsWait(m.OnAttemptDone(Answered(400), ResponseOf(400), At(milliseconds(140))),
                     microseconds(37500)));
  EXPECT_TRUE(IsKind(m.OnWaitOver(At(milliseconds(178))), Kind::kSendStatusQuery));
  EXPECT_TRUE(IsFinish(m.OnStatusAnswer(StatusAnswer::kNotFound, Answered(404), ResponseOf(404),
                                        At(milliseconds(180)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kAnswerNotDefinite);
  EXPECT_EQ(r.attempts, 2);  // one attempt was left: no resend after the 400
  EXPECT_EQ(r.status_queries, 2);
}

// The same settling query can settle it either way.
TEST_F(CallStateMachineTest, HistoryUnmarkedFinalErrorThenFoundSucceeds) {
  for (StatusAnswer answer : {StatusAnswer::kFound, StatusAnswer::kCompletedWithError,
                              StatusAnswer::kFenced, StatusAnswer::kExpired}) {
    SCOPED_TRACE(static_cast<int>(answer));
    CallStateMachine& m = Make(KeyedPost(seconds(1)), {0.0});
    m.Start(kT0);
    m.OnAttemptDone(TimedOut(), std::nullopt, At(milliseconds(100)));
    m.OnWaitOver(At(milliseconds(125)));
    m.OnStatusAnswer(StatusAnswer::kNotFound, Answered(404), ResponseOf(404),
                     At(milliseconds(130)));
    m.OnWaitOver(At(milliseconds(130)));
    EXPECT_TRUE(IsWait(m.OnAttemptDone(Answered(422), ResponseOf(422), At(milliseconds(140))),
                       microseconds(37500)));
    EXPECT_TRUE(IsKind(m.OnWaitOver(At(milliseconds(178))), Kind::kSendStatusQuery));
    const int code = answer == StatusAnswer::kFound ? 200 : 404;
    EXPECT_TRUE(IsFinish(
        m.OnStatusAnswer(answer, Answered(code), ResponseOf(code), At(milliseconds(180)))));
    const CallResult r = Result();
    switch (answer) {
      case StatusAnswer::kFound:
        EXPECT_EQ(r.outcome, Outcome::kSucceeded);
        EXPECT_EQ(r.stop_reason, StopReason::kSuccess);
        break;
      case StatusAnswer::kCompletedWithError:
        EXPECT_EQ(r.outcome, Outcome::kFailed);
        EXPECT_EQ(r.stop_reason, StopReason::kPermanentError);
        break;
      case StatusAnswer::kFenced:
        EXPECT_EQ(r.outcome, Outcome::kFailed);
        EXPECT_EQ(r.stop_reason, StopReason::kFenced);
        break;
      default:
        EXPECT_EQ(r.outcome, Outcome::kUnknown);
        EXPECT_EQ(r.stop_reason, StopReason::kKeyExpired);
        break;
    }
  }
}

// Rule 1: a final answer the server marks as the key's stored answer
// (`Idempotency-Key-State: completed`, first time or replay) is definite.
TEST_F(CallStateMachineTest, HistoryAmbiguousThenMarkedFirstTimeFinalErrorIsFailed) {
  CallStateMachine& m = Make(DedupPost(seconds(1), 2), {0.5});
  m.Start(kT0);
  m.OnAttemptDone(Lost(), std::nullopt, At(milliseconds(10)));
  m.OnWaitOver(At(milliseconds(60)));
  ServerHints completed;
  completed.key_state = KeyState::kCompleted;
  EXPECT_TRUE(
      IsFinish(m.OnAttemptDone(Answered(400, completed), ResponseOf(400), At(milliseconds(70)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kPermanentError);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kResponse);
}

// 410 + fenced is definite, with or without doubt before it.
TEST_F(CallStateMachineTest, Fenced410IsFailedFenced) {
  ServerHints fenced;
  fenced.key_state = KeyState::kFenced;
  for (bool doubt : {false, true}) {
    SCOPED_TRACE(doubt);
    CallStateMachine& m = Make(DedupPost(seconds(1), 2), {0.5});
    m.Start(kT0);
    if (doubt) {
      m.OnAttemptDone(Lost(), std::nullopt, At(milliseconds(10)));
      m.OnWaitOver(At(milliseconds(60)));
    }
    EXPECT_TRUE(
        IsFinish(m.OnAttemptDone(Answered(410, fenced), ResponseOf(410), At(milliseconds(70)))));
    const CallResult r = Result();
    EXPECT_EQ(r.outcome, Outcome::kFailed);
    EXPECT_EQ(r.stop_reason, StopReason::kFenced);
  }
}

// Rule 2: a 410 not fenced (expired, or no state) on the first attempt of a
// key the call did not mint: the key was used before, so it may have taken
// effect. With a status query it is asked, never resent.
TEST_F(CallStateMachineTest, ExpiredKeyOfTheCallerIsAskedNeverResent) {
  for (KeyState state : {KeyState::kExpired, KeyState::kNone}) {
    SCOPED_TRACE(static_cast<int>(state));
    CallStateMachine& m = Make(KeyedPost(seconds(1)), {0.0});
    m.Start(kT0);
    ServerHints h;
    h.key_state = state;
    EXPECT_TRUE(IsWait(m.OnAttemptDone(Answered(410, h), ResponseOf(410), At(milliseconds(10))),
                       milliseconds(25)));
    EXPECT_TRUE(IsKind(m.OnWaitOver(At(milliseconds(35))), Kind::kSendStatusQuery));
    EXPECT_TRUE(IsFinish(m.OnStatusAnswer(StatusAnswer::kNotFound, Answered(404), ResponseOf(404),
                                          At(milliseconds(40)))));
    const CallResult r = Result();
    EXPECT_EQ(r.outcome, Outcome::kUnknown);
    EXPECT_EQ(r.stop_reason, StopReason::kKeyExpired);
    EXPECT_EQ(r.attempts, 1);
  }
}

TEST_F(CallStateMachineTest, ExpiredKeyFoundByTheStatusQuerySucceeds) {
  CallStateMachine& m = Make(KeyedPost(seconds(1)), {0.0});
  m.Start(kT0);
  ServerHints h;
  h.key_state = KeyState::kExpired;
  m.OnAttemptDone(Answered(410, h), ResponseOf(410), At(milliseconds(10)));
  m.OnWaitOver(At(milliseconds(35)));
  EXPECT_TRUE(IsFinish(m.OnStatusAnswer(StatusAnswer::kFound, Answered(200), ResponseOf(200),
                                        At(milliseconds(40)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kStatusQuery);
  ASSERT_TRUE(r.last_response.has_value());
  EXPECT_EQ(r.last_response->status_code, 200);
}

// Without a status query: UNKNOWN with a stop reason of its own.
TEST_F(CallStateMachineTest, ExpiredKeyWithoutAStatusQueryIsUnknownKeyExpired) {
  CallStateMachine& m = Make(DedupPost(seconds(1), 3), {0.0});
  m.Start(kT0);
  ServerHints h;
  h.key_state = KeyState::kExpired;
  EXPECT_TRUE(IsFinish(m.OnAttemptDone(Answered(410, h), ResponseOf(410), At(milliseconds(10)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kKeyExpired);
}

// A minted key on its first attempt keeps today's rule: a 410 is final.
TEST_F(CallStateMachineTest, ExpiredAnswerForAMintedKeyOnItsFirstAttemptIsFailed) {
  CallPolicy p = KeyedPost(seconds(1));
  p.key_minted = true;
  CallStateMachine& m = Make(p, {0.0});
  m.Start(kT0);
  EXPECT_TRUE(IsFinish(m.OnAttemptDone(Answered(410), ResponseOf(410), At(milliseconds(10)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kPermanentError);
}

// A status answer "expired" never leads to a resend.
TEST_F(CallStateMachineTest, StatusAnswerExpiredIsUnknownKeyExpired) {
  CallPolicy p = KeyedPost(seconds(1));
  p.max_attempts = 3;
  CallStateMachine& m = Make(p, {0.0});
  m.Start(kT0);
  m.OnAttemptDone(Lost(), std::nullopt, At(milliseconds(100)));
  m.OnWaitOver(At(milliseconds(125)));
  EXPECT_TRUE(IsFinish(m.OnStatusAnswer(StatusAnswer::kExpired, Answered(404), ResponseOf(404),
                                        At(milliseconds(130)))));
  const CallResult r = Result();
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kKeyExpired);
  EXPECT_EQ(r.attempts, 1);
}

// Rule 3: a continued intent starts as "may have taken effect": refused
// connections, then a clean 4xx, never end it FAILED; a success settles it,
// as a resend's response.
TEST_F(CallStateMachineTest, ContinuedIntentStartsWithTheDoubt) {
  CallPolicy p = DedupPost(seconds(1), 2);
  p.earlier_attempt_may_have_taken_effect = true;
  AttemptEvidence refused;
  refused.delivery = Delivery::kNotSent;
  refused.transport_status = absl::UnavailableError("connection refused");
  CallStateMachine& m = Make(p, {0.0});
  m.Start(kT0);
  m.OnAttemptDone(refused, std::nullopt, At(milliseconds(1)));
  m.OnWaitOver(At(milliseconds(26)));
  EXPECT_TRUE(IsFinish(m.OnAttemptDone(refused, std::nullopt, At(milliseconds(27)))));
  const CallResult refused_twice = Result();
  EXPECT_EQ(refused_twice.outcome, Outcome::kUnknown);
  EXPECT_EQ(refused_twice.stop_reason, StopReason::kAttemptsExhausted);

  struct FirstAnswer {
    int status;
    Outcome outcome;
    StopReason reason;
  };
  for (const FirstAnswer& a : {FirstAnswer{400, Outcome::kUnknown, StopReason::kAnswerNotDefinite},
                               FirstAnswer{201, Outcome::kSucceeded, StopReason::kSuccess}}) {
    SCOPED_TRACE(a.status);
    CallStateMachine& once = Make(p, {0.0});
    once.Start(kT0);
    EXPECT_TRUE(IsFinish(
        once.OnAttemptDone(Answered(a.status), ResponseOf(a.status), At(milliseconds(1)))));
    const CallResult r = Result();
    EXPECT_EQ(r.outcome, a.outcome);
    EXPECT_EQ(r.stop_reason, a.reason);
    EXPECT_EQ(r.resolved_by,
              a.outcome == Outcome::kUnknown ? ResolvedBy::kNone : ResolvedBy::kResponse);
  }
}

// Rule 5: an idempotent request's ambiguous attempt is retried, but the
// history remembers it; a safe request never ends UNKNOWN.
TEST_F(CallStateMachineTest, HistoryIdempotentAmbiguousIsRetriedAndRemembered) {
  CallPolicy put = Put(seconds(1));
  put.max_attempts = 2;
  CallStateMachine& m = Make(put, {0.5});
  EXPECT_TRUE(IsSend(m.Start(kT0), 1, milliseconds(495)));
  EXPECT_TRUE(
      IsWait(m.OnAttemptDone(Lost(), std::nullopt, At(milliseconds(10))), milliseconds(50)));
  EXPECT_THAT(budget_.charged_classes(), ElementsAre(AttemptClass::kAmbiguous));
  m.OnWaitOver(At(milliseconds(60)));
  EXPECT_TRUE(IsFinish(m.OnAttemptDone(Answered(503), ResponseOf(503), At(milliseconds(70)))));
  const CallResult put_result = Result();
  EXPECT_EQ(put_result.outcome, Outcome::kUnknown);
  EXPECT_EQ(put_result.stop_reason, StopReason::kAttemptsExhausted);

  CallPolicy get = Get(seconds(1));
  get.max_attempts = 2;
  CallStateMachine& g = Make(get, {0.5});
  g.Start(kT0);
  g.OnAttemptDone(Lost(), std::nullopt, At(milliseconds(10)));
  g.OnWaitOver(At(milliseconds(60)));
  EXPECT_TRUE(IsFinish(g.OnAttemptDone(TimedOut(), std::nullopt, At(milliseconds(555)))));
  const CallResult get_result = Result();
  EXPECT_EQ(get_result.outcome, Outcome::kFailed);
  EXPECT_EQ(get_result.stop_reason, StopReason::kAttemptsExhausted);
}

// A call that finished ignores a late cancellation.
TEST_F(CallStateMachineTest, CancellationAfterFinishIsIgnored) {
  CallStateMachine& m = Make(Get(seconds(1)));
  m.Start(kT0);
  m.OnAttemptDone(Answered(200), ResponseOf(200), At(milliseconds(10)));
  token_.Cancel();
  EXPECT_TRUE(IsFinish(m.OnCancelled(At(milliseconds(20)))));
  const CallResult r = Result();
  EXPECT_EQ(r.stop_reason, StopReason::kSuccess);
  EXPECT_EQ(r.elapsed, milliseconds(10));
}

}  // namespace
}  // namespace saferetry

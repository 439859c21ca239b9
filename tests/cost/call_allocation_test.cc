// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// What one successful call allocates, counted through the global operator
// new of this executable: a successful GET nothing, a keyed POST with a
// minted key one allocation (the key the result returns), with the caller's
// key at most two. Breakers and a hedging policy configured add nothing on
// the success path. The transport's own allocations (copying its canned
// response into the result) are counted apart and not charged to the call.
// And how often such a call reads the clock: twice.
//
// Built only without sanitizers (their allocators count differently); the
// timings of the same calls are in bench/call_benchmark.

#include <memory>
#include <string>
#include <vector>

#include "canned_call.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "saferetry/call_state_machine.h"
#include "saferetry/circuit_breaker.h"
#include "saferetry/classifier.h"
#include "saferetry/client.h"
#include "saferetry/random.h"
#include "saferetry/retry_budget.h"
#include "saferetry/testing/fake_clock.h"

namespace saferetry {
namespace {

using cost::Allocations;
using cost::CannedTransport;
using cost::CountingClock;

struct Setup {
  bool system_clock = true;
  bool breakers = false;
  bool hedging = false;
};

std::unique_ptr<Client> MakeClient(std::shared_ptr<CannedTransport> transport, const Setup& s) {
  ClientOptions o;
  o.transport = std::move(transport);
  if (!s.system_clock) o.clock = std::make_shared<testkit::FakeClock>();
  if (s.breakers) o.circuit_breakers = CircuitBreakerRegistry::Create({}).value();
  if (s.hedging) {
    RetryPolicyOptions p;
    p.hedging.enabled = true;
    o.policy = RetryPolicy::Create(p).value();
  }
  return Client::Create(std::move(o)).value();
}

const Request kGet{"GET", "http://127.0.0.1:8080/orders/1", {}, "", {}};
const Request kPost{"POST",
                    "http://127.0.0.1:8080/orders",
                    {{"Content-Type", "application/json"}},
                    R"({"sku":"sku-42","quantity":1})",
                    {}};

// The allocations of each of `n` calls, the transport's taken out.
std::vector<long long> PerCall(Client& client, CannedTransport& transport, const Request& request,
                               std::vector<CallOptions>& calls) {
  std::vector<long long> out;
  out.reserve(calls.size());
  for (const CallOptions& call : calls) {
    const long long before = Allocations();
    const long long transport_before = transport.own_allocations();
    CallResult r = client.Execute(request, call);
    const long long after = Allocations();
    out.push_back(after - before - (transport.own_allocations() - transport_before));
    EXPECT_EQ(r.outcome, Outcome::kSucceeded);
    EXPECT_EQ(r.attempts, 1);
    transport.Recycle(r.last_response);
  }
  return out;
}

constexpr int kCalls = 64;

class CallAllocationTest : public ::testing::TestWithParam<Setup> {};

TEST_P(CallAllocationTest, ASuccessfulGetAllocatesNothing) {
  auto transport = std::make_shared<CannedTransport>();
  auto client = MakeClient(transport, GetParam());
  std::vector<CallOptions> warm(1);
  PerCall(*client, *transport, kGet, warm);  // first use of the host's breaker
  std::vector<CallOptions> calls(kCalls);
  const long long transport_warm = transport->own_allocations();
  EXPECT_THAT(PerCall(*client, *transport, kGet, calls), ::testing::Each(0));
  EXPECT_GT(transport_warm, 0);  // the counting works: the first send copied
  // Once warm the canned transport hands back the response it took back: the
  // whole call, transport included, allocates nothing.
  EXPECT_EQ(transport->own_allocations(), transport_warm);
}

TEST_P(CallAllocationTest, AKeyedPostWithAMintedKeyAllocatesTheKeyOnly) {
  auto transport = std::make_shared<CannedTransport>();
  auto client = MakeClient(transport, GetParam());
  std::vector<CallOptions> warm(1);
  PerCall(*client, *transport, kPost, warm);
  std::vector<CallOptions> calls(kCalls);
  EXPECT_THAT(PerCall(*client, *transport, kPost, calls), ::testing::Each(1));
}

TEST_P(CallAllocationTest, AKeyedPostWithTheCallersKeyAllocatesAtMostTwo) {
  auto transport = std::make_shared<CannedTransport>();
  auto client = MakeClient(transport, GetParam());
  std::vector<CallOptions> calls(kCalls + 1);
  for (int i = 0; i <= kCalls; ++i) {
    // A key the caller holds already (short: stored inline in its string).
    calls[i].idempotency_key = "k-" + std::to_string(i);
  }
  const std::vector<long long> each = PerCall(*client, *transport, kPost, calls);
  EXPECT_THAT(std::vector<long long>(each.begin() + 1, each.end()),
              ::testing::Each(::testing::Le(2)));
}

// The clock-read budget of a call that succeeds at once: its start and the
// end of its attempt. The attempt's start is the call's when nothing that
// can take time ran between (a listener, a journal or a tracer does).
TEST(CallClockReadsTest, ASuccessfulCallReadsTheClockTwice) {
  auto clock = std::make_shared<CountingClock>(std::make_shared<testkit::FakeClock>());
  ClientOptions o;
  o.transport = std::make_shared<CannedTransport>();
  o.clock = clock;
  auto client = Client::Create(std::move(o)).value();
  for (const Request* request : {&kGet, &kPost}) {
    const long long before = clock->reads();
    CallResult r = client->Execute(*request, {});
    EXPECT_EQ(r.outcome, Outcome::kSucceeded);
    EXPECT_EQ(clock->reads() - before, 2) << request->method;
  }
  // A listener runs before the send: the attempt's start is read after it.
  CallListener listener;
  CallOptions with_listener;
  with_listener.listener = &listener;
  const long long before = clock->reads();
  CallResult r = client->Execute(kGet, with_listener);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(clock->reads() - before, 3);
}

// The machine keeps what only a call that waits needs (the wait's end and
// charge, receipts, counters, hedge slots) in a block it allocates at the
// first wait: a call settled by its first answer allocates nothing, one that
// retries allocates that block once, however often it retries. The result's
// evidence has room reserved, so the block is all that is counted.
TEST(MachineAllocationTest, OnlyACallThatWaitsAllocatesItsWaitBlockOnce) {
  std::shared_ptr<RetryBudget> budget = MakeUnlimitedBudget();
  DefaultClassifier classifier;
  std::shared_ptr<Random> random = DefaultRandom();
  const TimePoint t0 = TimePoint(std::chrono::seconds(100));
  // The default policy, whose pacing a bare `CallPolicy` falls back on, is
  // built once per process (on its first use), not per call.
  (void)RetryPolicy::Default();
  auto answered = [](int status) {
    AttemptEvidence ev;
    ev.delivery = Delivery::kResponseReceived;
    ev.http_status = status;
    return ev;
  };
  // `statuses`: the answers, in order; every one but the last is a 503.
  auto allocations_of = [&](const std::vector<int>& statuses) {
    CallPolicy policy;
    policy.max_attempts = 5;
    policy.traits.idempotent = true;
    policy.traits.safe = true;
    policy.deadline = Deadline::After(t0, std::chrono::seconds(30));
    CallResult result;
    result.evidence.reserve(statuses.size());
    const CallServices services{budget.get(), &classifier, random.get(), nullptr};
    CallStateMachine machine(&policy, &services);
    machine.BuildResultIn(&result);
    TimePoint now = t0;
    const long long before = Allocations();
    CallAction action = machine.Start(now);
    for (int status : statuses) {
      EXPECT_EQ(action.kind, CallAction::Kind::kSendAttempt);
      action = machine.OnAttemptDone(action.attempt_id, answered(status), std::nullopt, now);
      if (action.kind == CallAction::Kind::kWait) {
        now += action.delay;
        action = machine.OnWaitOver(now);
      }
    }
    const long long after = Allocations();
    EXPECT_EQ(action.kind, CallAction::Kind::kFinish);
    EXPECT_EQ(result.outcome, Outcome::kSucceeded);
    EXPECT_EQ(result.attempts, static_cast<int>(statuses.size()));
    return after - before;
  };
  EXPECT_EQ(allocations_of({200}), 0);
  EXPECT_EQ(allocations_of({503, 200}), 1);
  EXPECT_EQ(allocations_of({503, 503, 503, 200}), 1);
}

INSTANTIATE_TEST_SUITE_P(Clients, CallAllocationTest,
                         ::testing::Values(Setup{true, false, false}, Setup{false, false, false},
                                           Setup{true, true, false}, Setup{true, false, true},
                                           Setup{true, true, true}),
                         [](const ::testing::TestParamInfo<Setup>& param) {
                           std::string name =
                               param.param.system_clock ? "SystemClock" : "FakeClock";
                           if (param.param.breakers) name += "Breakers";
                           if (param.param.hedging) name += "Hedging";
                           return name;
                         });

}  // namespace
}  // namespace saferetry

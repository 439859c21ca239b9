// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Seeded random hedged calls on the fake loop: random request kinds, hedging
// options, budgets, and per-send answers and latencies. Every run checks the
// invariants of hedging whatever happened:
//
//   - never more sends than max_attempts, none left in flight at the end;
//   - every send after the first is charged to the retry budget, once;
//   - a POST whose server does not deduplicate is never sent twice at once;
//   - a call that ends on a final answer ends at the first final answer to
//     arrive, with that answer, and every copy still unanswered then is
//     cancelled (and only those);
//   - a POST with an answered send that may have taken effect never ends
//     FAILED (history), and a GET never ends UNKNOWN.
//
// SAFERETRY_PROPERTY_RUNS sets the number of runs (default 3000).

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "saferetry/async_client.h"
#include "saferetry/testing/async_fake_transport.h"
#include "saferetry/testing/counting_budget.h"
#include "saferetry/testing/fake_clock.h"
#include "saferetry/testing/fake_random.h"

namespace saferetry {
namespace {

using std::chrono::milliseconds;
using testkit::AsyncFakeTransport;
using testkit::CountingBudget;
using testkit::FakeClock;
using testkit::FakeEventLoop;
using testkit::ScriptedRandom;
using testkit::Step;

int Runs() {
  if (const char* env = std::getenv("SAFERETRY_PROPERTY_RUNS"); env != nullptr) {
    const int n = std::atoi(env);
    if (n > 0) return std::min(n, 3000);
  }
  return 3000;
}

enum class Kind { kGet, kDedupPost, kPlainPost };

// What one send was scripted to do.
struct Scripted {
  enum class Answer { k200, k503, kNotSent, kLost, kHang, k404 } answer;
  Duration latency;
};

bool IsFinal(Scripted::Answer a) {
  return a == Scripted::Answer::k200 || a == Scripted::Answer::k404;
}

// The scripted 503 carries no mark: a gateway may have forwarded the request
// before answering it (docs/adr/0031), so it is doubt like a lost answer.
bool MayHaveTakenEffect(Scripted::Answer a) {
  return a == Scripted::Answer::kLost || a == Scripted::Answer::kHang ||
         a == Scripted::Answer::k503;
}

TEST(HedgingPropertyTest, InvariantsHoldForSeededRandomCalls) {
  const int runs = Runs();
  int hedged_calls = 0, final_answer_endings = 0, cancelled_total = 0, held_runs = 0;
  for (int seed = 1; seed <= runs; ++seed) {
    std::mt19937_64 gen(static_cast<std::uint64_t>(seed));
    auto pick = [&](int n) { return static_cast<int>(gen() % static_cast<std::uint64_t>(n)); };

    auto clock = std::make_shared<FakeClock>();
    auto loop = std::make_shared<FakeEventLoop>(clock);
    auto transport = std::make_shared<AsyncFakeTransport>(loop, clock);
    const int allowed = pick(3) == 0 ? pick(3) : 100;
    auto budget = std::make_shared<CountingBudget>(allowed);

    const Kind kind = static_cast<Kind>(pick(3));
    Request request;
    if (kind == Kind::kGet) {
      request.url = "http://127.0.0.1:8080/orders/1";
    } else {
      request = Request{"POST", "http://127.0.0.1:8080/orders", {}, R"({"sku":"sku-42"})"};
    }
    CallOptions call;
    call.timeout = milliseconds(2000);
    saferetry::RetryPolicyOptions call_policy;
    call_policy.max_attempts = 1 + pick(6);
    call_policy.server_deduplicates = kind == Kind::kDedupPost;
    call_policy.hedging.enabled = true;
    call_policy.hedging.delay = milliseconds(pick(60));
    call_policy.hedging.max_hedges = 1 + pick(3);

    std::vector<Scripted> script;
    transport->SetHandler([&](const Request&, const AttemptOptions&) {
      Scripted s{static_cast<Scripted::Answer>(pick(6)),
                 milliseconds(pick(10) == 0 ? 500 + pick(400) : 1 + pick(200))};
      Step step;
      switch (s.answer) {
        case Scripted::Answer::k200:
          step = Step::Respond(200, {}, "send-" + std::to_string(script.size()));
          break;
        case Scripted::Answer::k503:
          step = Step::Respond(503);
          break;
        case Scripted::Answer::kNotSent:
          step = Step::NotSent();
          break;
        case Scripted::Answer::kLost:
          step = Step::CommitThenLost();
          break;
        case Scripted::Answer::kHang:
          step = Step::TimeoutAfterSend();
          break;
        case Scripted::Answer::k404:
          step = Step::Respond(404, {}, "send-" + std::to_string(script.size()));
          break;
      }
      script.push_back(s);
      return step.After(s.latency);
    });

    AsyncClientOptions o;
    o.client.clock = clock;
    std::vector<double> jitter;
    for (int i = 0; i < 8; ++i) jitter.push_back(static_cast<double>(gen() >> 11) * 0x1.0p-53);
    o.client.random = std::make_shared<ScriptedRandom>(jitter, static_cast<std::uint64_t>(seed));
    o.client.budget = budget;
    o.client.status_query_budget = MakeUnlimitedBudget();
    o.loop = loop;
    o.transport = transport;
    o.run_loop_thread = false;
    auto client = AsyncClient::Create(std::move(o));
    ASSERT_TRUE(client.ok()) << client.status();
    const TimePoint start = clock->Now();
    call.policy = saferetry::RetryPolicy::Create(call_policy).value();
    auto future = (*client)->Execute(request, call);
    loop->RunUntilIdle();
    ASSERT_EQ(future.wait_for(std::chrono::seconds(0)), std::future_status::ready)
        << "seed " << seed;
    const CallResult r = future.get();
    const TimePoint end = start + r.elapsed;
    const std::vector<testkit::SentRequest> sent = transport->sent();
    ASSERT_EQ(sent.size(), script.size()) << "seed " << seed;
    const int sends = static_cast<int>(sent.size());

    // Counts and charges.
    EXPECT_LE(sends, call_policy.max_attempts) << "seed " << seed;
    EXPECT_EQ(transport->in_flight(), 0) << "seed " << seed;
    EXPECT_EQ(budget->charges() - budget->refunds(), std::max(sends - 1, 0)) << "seed " << seed;

    // When each send was (or would have been) answered.
    std::vector<TimePoint> answered_at;
    for (int i = 0; i < sends; ++i) {
      const Duration taken = script[static_cast<std::size_t>(i)].answer == Scripted::Answer::kHang
                                 ? sent[static_cast<std::size_t>(i)].timeout
                                 : std::min(script[static_cast<std::size_t>(i)].latency,
                                            sent[static_cast<std::size_t>(i)].timeout);
      answered_at.push_back(sent[static_cast<std::size_t>(i)].at + taken);
    }
    bool overlapped = false;
    for (int i = 1; i < sends; ++i) {
      for (int j = 0; j < i; ++j) {
        if (sent[static_cast<std::size_t>(i)].at < answered_at[static_cast<std::size_t>(j)]) {
          overlapped = true;
        }
      }
    }
    if (overlapped) ++hedged_calls;
    if (kind == Kind::kPlainPost) {
      EXPECT_FALSE(overlapped) << "seed " << seed;
    }

    // The first final answer that is definite wins, and exactly the copies
    // unanswered then are cancelled. A 404 is definite only while nothing
    // answered before it may have taken effect (saferetry/settlement.h: an
    // unmarked 4xx after such an attempt proves nothing).
    auto doubt_before = [&](int i) {
      bool doubt = false;
      for (int j = 0; j < sends; ++j) {
        if (j != i && MayHaveTakenEffect(script[static_cast<std::size_t>(j)].answer) &&
            answered_at[static_cast<std::size_t>(j)] <= answered_at[static_cast<std::size_t>(i)]) {
          doubt = true;
        }
      }
      return doubt;
    };
    // A 404 of a write while another copy is in flight (sent, not answered)
    // is held until that copy is back: the copy may have taken effect. Such
    // runs are checked by the history invariants below, not by the order.
    auto copy_in_flight_at = [&](int i) {
      for (int j = 0; j < sends; ++j) {
        if (j != i &&
            sent[static_cast<std::size_t>(j)].at <= answered_at[static_cast<std::size_t>(i)] &&
            answered_at[static_cast<std::size_t>(j)] >= answered_at[static_cast<std::size_t>(i)]) {
          return true;
        }
      }
      return false;
    };
    bool held = false;
    std::optional<int> first_final;
    for (int i = 0; i < sends; ++i) {
      if (!IsFinal(script[static_cast<std::size_t>(i)].answer)) continue;
      if (kind != Kind::kGet &&
          script[static_cast<std::size_t>(i)].answer == Scripted::Answer::k404 && doubt_before(i)) {
        continue;
      }
      if (kind != Kind::kGet &&
          script[static_cast<std::size_t>(i)].answer == Scripted::Answer::k404 &&
          copy_in_flight_at(i)) {
        held = true;
        continue;
      }
      if (!first_final.has_value() || answered_at[static_cast<std::size_t>(i)] <
                                          answered_at[static_cast<std::size_t>(*first_final)]) {
        first_final = i;
      }
    }
    const bool ended_on_final =
        r.stop_reason == StopReason::kSuccess || r.stop_reason == StopReason::kPermanentError;
    if (held) {
      ++held_runs;
    } else if (ended_on_final) {
      ++final_answer_endings;
      ASSERT_TRUE(first_final.has_value()) << "seed " << seed;
      EXPECT_EQ(end, answered_at[static_cast<std::size_t>(*first_final)]) << "seed " << seed;
      int ties = 0;
      for (int i = 0; i < sends; ++i) {
        if (IsFinal(script[static_cast<std::size_t>(i)].answer) &&
            answered_at[static_cast<std::size_t>(i)] == end) {
          ++ties;
        }
      }
      ASSERT_TRUE(r.last_response.has_value()) << "seed " << seed;
      if (ties == 1) {
        EXPECT_EQ(r.last_response->body, "send-" + std::to_string(*first_final)) << "seed " << seed;
      }
      // A copy due at the very instant of the winner may be answered or
      // cancelled (same-time timers run in the order they were set).
      int unanswered = 0, same_instant = 0;
      for (int i = 0; i < sends; ++i) {
        if (answered_at[static_cast<std::size_t>(i)] > end) ++unanswered;
        if (answered_at[static_cast<std::size_t>(i)] == end && i != *first_final) ++same_instant;
      }
      EXPECT_GE(transport->cancelled_count(), unanswered) << "seed " << seed;
      EXPECT_LE(transport->cancelled_count(), unanswered + same_instant) << "seed " << seed;
      cancelled_total += unanswered;
      if (ties == 1) {
        EXPECT_EQ(r.outcome == Outcome::kSucceeded,
                  script[static_cast<std::size_t>(*first_final)].answer == Scripted::Answer::k200)
            << "seed " << seed;
      }
    } else if (first_final.has_value()) {
      // Not ended on a final answer: none had arrived.
      EXPECT_GT(answered_at[static_cast<std::size_t>(*first_final)], end) << "seed " << seed;
    }

    // History.
    if (kind == Kind::kGet) {
      EXPECT_NE(r.outcome, Outcome::kUnknown) << "seed " << seed;
    } else {
      bool maybe_effect = false;
      for (int i = 0; i < sends; ++i) {
        if (answered_at[static_cast<std::size_t>(i)] <= end &&
            MayHaveTakenEffect(script[static_cast<std::size_t>(i)].answer)) {
          maybe_effect = true;
        }
      }
      // A copy cancelled while in flight was sent: it may have taken effect.
      for (int i = 0; i < sends; ++i) {
        if (answered_at[static_cast<std::size_t>(i)] > end) maybe_effect = true;
      }
      if (maybe_effect) {
        EXPECT_NE(r.outcome, Outcome::kFailed) << "seed " << seed;
      }
    }
  }
  // The generator reaches the cases the invariants are about.
  EXPECT_GT(hedged_calls, runs / 10);
  EXPECT_GT(final_answer_endings, runs / 3);
  EXPECT_GT(cancelled_total, runs / 20);
  EXPECT_GT(held_runs, 0);
}

}  // namespace
}  // namespace saferetry

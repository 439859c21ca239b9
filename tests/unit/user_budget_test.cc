// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// A budget of the user's is one file: this one. It defines the budget, gives
// it a name in a BudgetRegistry, and a policy document selects it by that
// name with its own options object. Calls through a Client are charged and
// refused by it exactly, and its name for a refusal shows in the call's
// result, its trace and the metrics (docs/design.md, "Adding a budget").

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "nlohmann/json.hpp"
#include "saferetry/budget_registry.h"
#include "saferetry/client.h"
#include "saferetry/config.h"
#include "saferetry/metrics.h"
#include "saferetry/testing/fake_clock.h"
#include "saferetry/testing/fake_random.h"
#include "saferetry/testing/fake_transport.h"
#include "saferetry/trace.h"

namespace saferetry {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using testkit::FakeClock;
using testkit::FakeTransport;
using testkit::ScriptedRandom;
using testkit::Step;

// --- The budget ----------------------------------------------------------------
//
// "Each call earns `retriesPerCall` retries, and the client never holds more
// than `cap` unspent": a credit that calls deposit and retries spend. Its
// receipt holds the one credit a retry took, so a refund gives exactly that
// back; its refusal is named "per_call_credit_spent".
class PerCallCredit final : public RetryBudget {
 public:
  PerCallCredit(std::int64_t per_call, std::int64_t cap) : per_call_(per_call), cap_(cap) {}

  void OnCallStart(TimePoint) override { Add(per_call_); }
  BudgetDecision OnFailure(const BudgetFailure&, TimePoint) override {
    std::int64_t current = credit_.load();
    do {
      if (current < 1) return BudgetDecision::Refuse("per_call_credit_spent");
    } while (!credit_.compare_exchange_weak(current, current - 1));
    return BudgetDecision::Allow(BudgetReceipt::Of(1));
  }
  void Refund(const BudgetReceipt& receipt, TimePoint) override {
    if (!receipt.empty()) Add(receipt.first());
  }
  double Balance(TimePoint) const override { return static_cast<double>(credit_.load()); }

 private:
  void Add(std::int64_t n) {
    std::int64_t current = credit_.load();
    while (!credit_.compare_exchange_weak(current, std::min(cap_, current + n))) {
    }
  }
  const std::int64_t per_call_;
  const std::int64_t cap_;
  std::atomic<std::int64_t> credit_{0};
};

// Its factory: reads {"retriesPerCall": n >= 1, "cap": m >= n}, both
// optional (1 and 10), naming the JSON path of what it rejects.
absl::StatusOr<std::shared_ptr<RetryBudget>> MakePerCallCredit(const BudgetSpec& spec) {
  const nlohmann::json options =
      nlohmann::json::parse(spec.options_json, nullptr, /*allow_exceptions=*/false);
  std::int64_t per_call = 1;
  std::int64_t cap = 10;
  for (auto it = options.begin(); it != options.end(); ++it) {
    const std::string path = std::string(spec.path) + "." + it.key();
    if (it.key() != "retriesPerCall" && it.key() != "cap") {
      return absl::InvalidArgumentError("unknown field \"" + it.key() + "\"");
    }
    if (!it.value().is_number_integer() || it.value().get<std::int64_t>() < 1) {
      return absl::InvalidArgumentError(path + ": must be an integer >= 1, got " +
                                        it.value().dump());
    }
    (it.key() == "cap" ? cap : per_call) = it.value().get<std::int64_t>();
  }
  if (cap < per_call) {
    return absl::InvalidArgumentError(std::string(spec.path) + ".cap: must be >= retriesPerCall");
  }
  return std::shared_ptr<RetryBudget>(std::make_shared<PerCallCredit>(per_call, cap));
}

BudgetRegistry Registry() {
  BudgetRegistry budgets;
  EXPECT_TRUE(budgets.Register("perCallCredit", MakePerCallCredit).ok());
  return budgets;
}

// --- The registry ----------------------------------------------------------------

TEST(UserBudgetTest, RegistryKnowsItsNamesAndGuardsTheBuiltIns) {
  BudgetRegistry budgets = Registry();
  EXPECT_TRUE(budgets.Contains("perCallCredit"));
  EXPECT_FALSE(budgets.Contains("ratio"));  // built in, never registered
  EXPECT_THAT(budgets.Names(), ElementsAre("perCallCredit"));
  for (const char* name : {"ratio", "tokenThrottle", "costQuota", "none"}) {
    EXPECT_TRUE(BudgetRegistry::IsBuiltIn(name)) << name;
    const absl::Status s = budgets.Register(name, MakePerCallCredit);
    EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << name;
    EXPECT_EQ(s.message(), "name: \"" + std::string(name) + "\" is a built-in budget");
  }
  EXPECT_EQ(budgets.Register("perCallCredit", MakePerCallCredit).message(),
            "name: \"perCallCredit\" is already registered");
  EXPECT_EQ(budgets.Register("", MakePerCallCredit).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(budgets.Register("a b", MakePerCallCredit).message(),
            "name: only ASCII letters, digits, '_', '-' and '.' are allowed, got \"a b\"");
  EXPECT_EQ(budgets.Register(std::string(65, 'x'), MakePerCallCredit).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(budgets.Register("nothing", nullptr).message(), "factory: must not be null");
  EXPECT_THAT(budgets.Names(), ElementsAre("perCallCredit"));

  const auto unknown = budgets.Make({"leaky", "{}", "$.x"});
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(unknown.status().message(), "no budget named \"leaky\" is registered");
  ASSERT_TRUE(budgets
                  .Register("null",
                            [](const BudgetSpec&) {
                              return absl::StatusOr<std::shared_ptr<RetryBudget>>(
                                  std::shared_ptr<RetryBudget>());
                            })
                  .ok());
  EXPECT_EQ(budgets.Make({"null", "{}", "$.x"}).status().message(),
            "$.x: the factory of \"null\" made no budget");
}

// --- Selected by name from a policy document -----------------------------------

constexpr const char* kPolicy = R"({
  "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "1s",
                  "backoffMultiplier": 2},
  "saferetry": {"budget": "perCallCredit", "budgetOptions": {"retriesPerCall": 1, "cap": 2}}
})";

std::string ErrorOf(const std::string& doc, const BudgetRegistry* budgets) {
  LoadOptions load;
  load.budgets = budgets;
  const absl::StatusOr<Policy> p = LoadPolicy(doc, load);
  EXPECT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(p.status().message());
}

TEST(UserBudgetTest, PolicyNamesItAndKeepsItsOptions) {
  const BudgetRegistry budgets = Registry();
  LoadOptions load;
  load.budgets = &budgets;
  const absl::StatusOr<Policy> p = LoadPolicy(kPolicy, load);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->budget, "perCallCredit");
  EXPECT_EQ(p->budget_options, R"({"cap":2,"retriesPerCall":1})");
  // The dumper writes it back, and the round trip is exact.
  const std::string dumped = DumpPolicy(*p);
  EXPECT_THAT(dumped, HasSubstr(R"("budget": "perCallCredit")"));
  const absl::StatusOr<Policy> again = LoadPolicy(dumped, load);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *p);
}

TEST(UserBudgetTest, LoadingChecksTheNameAndTheOptionsNamingTheirPath) {
  const BudgetRegistry budgets = Registry();
  // Without the registry the name is unknown; with it, the list says so.
  EXPECT_EQ(ErrorOf(kPolicy, nullptr),
            R"($.saferetry.budget: expected one of "ratio", "tokenThrottle", "costQuota", "none", )"
            R"(got "perCallCredit")");
  EXPECT_EQ(ErrorOf(R"({"saferetry": {"budget": "leaky"}})", &budgets),
            R"($.saferetry.budget: expected one of "ratio", "tokenThrottle", "costQuota", "none", )"
            R"("perCallCredit", got "leaky")");
  // The factory's own checks, at load time.
  EXPECT_EQ(ErrorOf(R"({"saferetry": {"budget": "perCallCredit",
                                       "budgetOptions": {"retriesPerCall": 0}}})",
                    &budgets),
            "$.saferetry.budgetOptions.retriesPerCall: must be an integer >= 1, got 0");
  EXPECT_EQ(ErrorOf(R"({"saferetry": {"budget": "perCallCredit",
                                       "budgetOptions": {"retriesPerCall": 3, "cap": 2}}})",
                    &budgets),
            "$.saferetry.budgetOptions.cap: must be >= retriesPerCall");
  // A message without the path gets it in front.
  EXPECT_EQ(
      ErrorOf(R"({"saferetry": {"budget": "perCallCredit", "budgetOptions": {"x": 1}}})", &budgets),
      R"($.saferetry.budgetOptions: unknown field "x")");
  EXPECT_EQ(
      ErrorOf(R"({"saferetry": {"budget": "perCallCredit", "budgetOptions": [1]}})", &budgets),
      "$.saferetry.budgetOptions: expected an object, got an array");
  // Options belong to a registered budget; a built-in one reads its own object.
  EXPECT_EQ(ErrorOf(R"({"saferetry": {"budget": "none", "budgetOptions": {}}})", &budgets),
            R"($.saferetry.budgetOptions: only for a registered budget; "none" is built in and )"
            R"(reads its own object)");
  EXPECT_EQ(ErrorOf(R"({"saferetry": {"budget": "perCallCredit", "costQuota": {}}})", &budgets),
            R"($.saferetry.budget: expected "costQuota" to match the budget object given, got )"
            R"("perCallCredit")");
  // No options at all: the factory gets "{}" and its defaults.
  LoadOptions load;
  load.budgets = &budgets;
  const absl::StatusOr<Policy> bare =
      LoadPolicy(R"({"saferetry": {"budget": "perCallCredit"}})", load);
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_EQ(bare->budget_options, "");
}

TEST(UserBudgetTest, ApplyNeedsTheRegistryThatHoldsIt) {
  const BudgetRegistry budgets = Registry();
  LoadOptions load;
  load.budgets = &budgets;
  const Policy p = LoadPolicy(kPolicy, load).value();
  ClientOptions options;
  const absl::Status without = ApplyToClientOptions(p, &options);
  EXPECT_EQ(without.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(without.message(),
            "budget: \"perCallCredit\" is neither a built-in budget nor in the registry given");
  ASSERT_TRUE(ApplyToClientOptions(p, &options, &budgets).ok());
  ASSERT_NE(options.budget, nullptr);
  EXPECT_EQ(options.budget->Balance(TimePoint{}), 0.0);  // a fresh PerCallCredit
}

// --- Calls through a Client -------------------------------------------------------

TEST(UserBudgetTest, CallsAreChargedAndRefusedByItExactly) {
  const BudgetRegistry budgets = Registry();
  LoadOptions load;
  load.budgets = &budgets;
  const Policy policy = LoadPolicy(kPolicy, load).value();

  auto clock = std::make_shared<FakeClock>();
  auto fake = std::make_shared<FakeTransport>(clock);
  ClientOptions options;
  options.transport = fake;
  options.clock = clock;
  options.random = std::make_shared<ScriptedRandom>();  // u = 0.5
  ASSERT_TRUE(ApplyToClientOptions(policy, &options, &budgets).ok());
  std::shared_ptr<RetryBudget> budget = options.budget;
  auto client = Client::Create(std::move(options)).value();
  const Request get{"GET", "http://127.0.0.1:8080/stock/1", {}, ""};

  // Call 1 earns one retry: 503, the retry (credit 1 -> 0), 503, refused.
  fake->Push(Step::Respond(503)).Push(Step::Respond(503));
  const CallResult refused = client->Execute(get, CallOptions{});
  EXPECT_EQ(refused.outcome, Outcome::kFailed);
  EXPECT_EQ(refused.stop_reason, StopReason::kBudgetExhausted);
  EXPECT_EQ(refused.budget_refusal, "per_call_credit_spent");
  EXPECT_EQ(refused.attempts, 2);
  ASSERT_EQ(refused.evidence.size(), 2u);
  EXPECT_EQ(refused.evidence[0].budget_balance, 0.0);  // after the retry's charge
  EXPECT_EQ(budget->Balance(clock->Now()), 0.0);

  // Call 2 earns one again: 503, the retry, 200.
  fake->Push(Step::Respond(503)).Push(Step::Respond(200));
  const CallResult ok = client->Execute(get, CallOptions{});
  EXPECT_EQ(ok.outcome, Outcome::kSucceeded);
  EXPECT_EQ(ok.attempts, 2);
  EXPECT_EQ(ok.budget_refusal, "");
  EXPECT_EQ(fake->send_count(), 4);

  // Two quiet calls fill the credit to its cap of 2, not 3: a third failing
  // call gets two retries and is then refused.
  for (int i = 0; i < 2; ++i) {
    fake->Push(Step::Respond(200));
    EXPECT_EQ(client->Execute(get, CallOptions{}).attempts, 1);
  }
  EXPECT_EQ(budget->Balance(clock->Now()), 2.0);
  fake->Push(Step::Respond(503)).Push(Step::Respond(503)).Push(Step::Respond(503));
  const CallResult third = client->Execute(get, CallOptions{});
  EXPECT_EQ(third.attempts, 3);
  EXPECT_EQ(third.budget_refusal, "per_call_credit_spent");

  // The name is in the trace and in the metrics.
  const nlohmann::json trace = nlohmann::json::parse(TraceToJson(refused));
  EXPECT_EQ(trace["stop_reason"], "budget_exhausted");
  EXPECT_EQ(trace["budget_refusal"], "per_call_credit_spent");
  EXPECT_FALSE(nlohmann::json::parse(TraceToJson(ok)).contains("budget_refusal"));
  Metrics metrics;
  metrics.RecordCall(refused);
  metrics.RecordCall(ok);
  metrics.RecordCall(third);
  const MetricsSnapshot snapshot = metrics.Snapshot();
  EXPECT_EQ(snapshot.budget_refusals, 2);
  EXPECT_THAT(snapshot.budget_refusals_by_name, ElementsAre(Pair("per_call_credit_spent", 2)));
  EXPECT_THAT(ToPrometheusText(snapshot),
              HasSubstr("saferetry_budget_refusals_by_name_total{saferetry_budget_refusal="
                        "\"per_call_credit_spent\"} 2\n"));
}

TEST(UserBudgetTest, ACancelledWaitGivesTheCreditBack) {
  const BudgetRegistry budgets = Registry();
  auto made = budgets.Make({"perCallCredit", R"({"retriesPerCall": 1})", "$"});
  ASSERT_TRUE(made.ok()) << made.status();
  std::shared_ptr<RetryBudget> budget = *made;
  auto clock = std::make_shared<FakeClock>();
  auto fake = std::make_shared<FakeTransport>(clock);
  CancellationToken token;
  fake->SetHandler([&token](const Request&, const AttemptOptions&) {
    token.Cancel();  // the caller gives up while the answer is on its way
    TransportResult tr;
    tr.delivery = Delivery::kResponseReceived;
    tr.response = Response{503, {}, ""};
    return tr;
  });
  ClientOptions options;
  options.transport = fake;
  options.clock = clock;
  options.random = std::make_shared<ScriptedRandom>();
  options.budget = budget;
  auto client = Client::Create(std::move(options)).value();
  CallOptions call;
  call.cancellation = &token;
  const CallResult r =
      client->Execute(Request{"GET", "http://127.0.0.1:8080/stock/1", {}, ""}, call);
  EXPECT_EQ(r.stop_reason, StopReason::kCancelled);
  EXPECT_EQ(r.budget_refusal, "");
  EXPECT_EQ(budget->Balance(clock->Now()), 1.0);  // deposited, never spent (or refunded)
}

}  // namespace
}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// CHANGELOG.md's table "Migrating from 0.2": each row's right-hand side, as a
// 0.2 user writes it after applying the row, compiles and does what the 0.2
// code did. A row whose replacement stops compiling or changes meaning fails
// here, not in a user's migration.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "saferetry/client.h"
#include "saferetry/config.h"
#include "saferetry/retry_budget.h"
#include "saferetry/retry_policy.h"
#include "saferetry/testing/fake_clock.h"
#include "saferetry/testing/fake_random.h"
#include "saferetry/testing/fake_transport.h"

namespace {

// Row: `saferetry::testing::` -> `saferetry::testkit::`, fully qualified as a
// 0.2 user wrote it.
std::unique_ptr<saferetry::Client> MakeClient(std::shared_ptr<saferetry::Transport> transport,
                                              saferetry::ClientOptions options = {}) {
  options.transport = std::move(transport);
  options.clock = std::make_shared<saferetry::testkit::FakeClock>();
  options.random = std::make_shared<saferetry::testkit::ScriptedRandom>();
  return saferetry::Client::Create(std::move(options)).value();
}

const saferetry::Request kGet{"GET", "http://orders.test/orders/1", {}, "", {}};
const saferetry::Request kPost{"POST", "http://orders.test/orders", {}, "{}", {}};

std::shared_ptr<saferetry::testkit::FakeTransport> AlwaysUnavailable(int sends) {
  auto t = std::make_shared<saferetry::testkit::FakeTransport>();
  for (int i = 0; i < sends; ++i) t->Push(saferetry::testkit::Step::RespondRejected());
  return t;
}

// Row: `call.max_attempts = 5;` -> a `RetryPolicy` for the call, or for every
// call of the client.
TEST(MigrationFrom02Test, MaxAttemptsMovesToTheCallsOrTheClientsPolicy) {
  saferetry::RetryPolicyOptions p;
  p.max_attempts = 5;
  saferetry::CallOptions call;
  call.policy = saferetry::RetryPolicy::Create(p).value();
  auto per_call = AlwaysUnavailable(10);
  EXPECT_EQ(MakeClient(per_call)->Execute(kGet, call).attempts, 5);
  EXPECT_EQ(per_call->send_count(), 5);

  saferetry::ClientOptions client_options;
  client_options.policy = saferetry::RetryPolicy::Create(p).value();
  auto per_client = AlwaysUnavailable(10);
  EXPECT_EQ(MakeClient(per_client, client_options)->Execute(kGet, {}).attempts, 5);
  EXPECT_EQ(per_client->send_count(), 5);
}

// Row: `call.status_query.url_template` -> `call.status_url`.
TEST(MigrationFrom02Test, TheStatusUrlIsTheCallsOwn) {
  auto t = std::make_shared<saferetry::testkit::FakeTransport>();
  t->Push(saferetry::testkit::Step::CommitThenLost());
  t->Push(saferetry::testkit::Step::Respond(200));
  saferetry::CallOptions call;
  call.status_url = "http://orders.test/orders/by-key/{key}";
  const saferetry::CallResult r = MakeClient(t)->Execute(kPost, call);
  EXPECT_EQ(r.outcome, saferetry::Outcome::kSucceeded);
  EXPECT_EQ(r.resolved_by, saferetry::ResolvedBy::kStatusQuery);
  ASSERT_EQ(t->send_count(), 2);
  EXPECT_EQ(t->sent()[1].request.url, "http://orders.test/orders/by-key/" + *r.idempotency_key);
}

// Row: the header names move from `ClientOptions` to `RetryPolicyOptions`.
TEST(MigrationFrom02Test, HeaderNamesAreThePolicys) {
  saferetry::RetryPolicyOptions p;
  p.idempotency_header = "X-Order-Key";
  saferetry::ClientOptions options;
  options.policy = saferetry::RetryPolicy::Create(p).value();
  auto t = std::make_shared<saferetry::testkit::FakeTransport>();
  t->Push(saferetry::testkit::Step::Respond(201));
  const saferetry::CallResult r = MakeClient(t, options)->Execute(kPost, {});
  ASSERT_EQ(t->send_count(), 1);
  EXPECT_EQ(saferetry::FindHeader(t->sent()[0].request.headers, "X-Order-Key"),
            std::optional<std::string_view>(*r.idempotency_key));
}

// Row: `call.timeout` is a `std::optional<Duration>`; assigning a duration
// compiles unchanged.
TEST(MigrationFrom02Test, AssigningATimeoutCompilesUnchanged) {
  saferetry::CallOptions call;
  EXPECT_FALSE(call.timeout.has_value());
  call.timeout = std::chrono::seconds(2);
  EXPECT_EQ(call.timeout, saferetry::Duration(std::chrono::seconds(2)));
}

// Row: `ToCallOptions(policy)` -> `ApplyToClientOptions` for the client's
// default, `ToRetryPolicy` for one call.
TEST(MigrationFrom02Test, AJsonPolicyIsTheClientsDefaultOrOneCallsPolicy) {
  const saferetry::Policy policy =
      saferetry::LoadPolicy(R"({"retryPolicy": {"maxAttempts": 4}})").value();
  saferetry::ClientOptions options;
  ASSERT_TRUE(saferetry::ApplyToClientOptions(policy, &options).ok());
  auto by_default = AlwaysUnavailable(10);
  EXPECT_EQ(MakeClient(by_default, options)->Execute(kGet, {}).attempts, 4);

  saferetry::CallOptions call;
  call.policy = saferetry::ToRetryPolicy(policy).value();
  auto per_call = AlwaysUnavailable(10);
  EXPECT_EQ(MakeClient(per_call)->Execute(kGet, call).attempts, 4);
}

// Rows: the budget factories, `OnFailure`, `BudgetDecision::Allow/Refuse`
// with a receipt, and the refusal's name on the result.
class OneRetry final : public saferetry::RetryBudget {
 public:
  saferetry::BudgetDecision OnFailure(const saferetry::BudgetFailure& failure,
                                      saferetry::TimePoint /*now*/) override {
    last_class_ = failure.cls;
    if (used_++ > 0) return saferetry::BudgetDecision::Refuse("my_budget_exhausted");
    return saferetry::BudgetDecision::Allow(saferetry::BudgetReceipt::Of(1));
  }
  double Balance(saferetry::TimePoint /*now*/) const override { return used_ > 0 ? 0 : 1; }
  saferetry::AttemptClass last_class() const { return last_class_; }

 private:
  int used_ = 0;
  saferetry::AttemptClass last_class_ = saferetry::AttemptClass::kSuccess;
};

TEST(MigrationFrom02Test, BudgetsAreMadeByFactoriesAndRefuseByName) {
  saferetry::RatioBudgetOptions ratio;
  const absl::StatusOr<std::shared_ptr<saferetry::RetryBudget>> made =
      saferetry::MakeRatioBudget(ratio);
  ASSERT_TRUE(made.ok());
  EXPECT_NE(saferetry::MakeUnlimitedBudget(), nullptr);

  auto budget = std::make_shared<OneRetry>();
  saferetry::ClientOptions options;
  options.budget = budget;
  auto t = AlwaysUnavailable(10);
  const saferetry::CallResult r = MakeClient(t, options)->Execute(kGet, {});
  EXPECT_EQ(r.stop_reason, saferetry::StopReason::kBudgetExhausted);
  EXPECT_EQ(r.budget_refusal, "my_budget_exhausted");
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(budget->last_class(), saferetry::AttemptClass::kRetryableTransient);
}

// Rows: a transport reads the added headers as `HeaderRefs`; the result's
// evidence is an `Evidence`.
class HeaderReadingTransport final : public saferetry::Transport {
 public:
  saferetry::TransportResult Send(const saferetry::Request& /*request*/,
                                  const saferetry::AttemptOptions& options) override {
    for (const saferetry::HeaderRef& h : options.extra_headers) names_ += std::string(h.name) + ";";
    attempt_ = std::string(
        saferetry::FindHeaderRef(options.extra_headers, "X-Retry-Attempt").value_or(""));
    saferetry::TransportResult r;
    r.delivery = saferetry::Delivery::kResponseReceived;
    r.response = saferetry::Response{200, {}, "ok"};
    return r;
  }
  std::string names_;
  std::string attempt_;
};

TEST(MigrationFrom02Test, TransportsReadHeaderViewsAndResultsHoldEvidence) {
  auto t = std::make_shared<HeaderReadingTransport>();
  const saferetry::CallResult r = MakeClient(t)->Execute(kPost, {});
  EXPECT_THAT(t->names_, testing::HasSubstr("Idempotency-Key;"));
  EXPECT_FALSE(t->attempt_.empty());
  const saferetry::Evidence& evidence = r.evidence;
  ASSERT_EQ(evidence.size(), 1u);
  EXPECT_EQ(evidence.back().classification, saferetry::AttemptClass::kSuccess);
  EXPECT_EQ(r.resolved_by, saferetry::ResolvedBy::kResponse);
}

}  // namespace

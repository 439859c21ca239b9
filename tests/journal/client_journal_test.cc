// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// ClientOptions::journal and Client::Resolve against the in-memory journal,
// a fake transport and a fake clock: what is written before each send, what
// a journal failure does, the durable "same key, other body" guard, and
// resolution by status queries only.

#include <atomic>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "saferetry/async_client.h"
#include "saferetry/client.h"
#include "saferetry/journal.h"
#include "saferetry/metrics.h"
#include "saferetry/reconciler.h"
#include "saferetry/testing/async_fake_transport.h"
#include "saferetry/testing/fake_clock.h"
#include "saferetry/testing/fake_random.h"
#include "saferetry/testing/fake_transport.h"
#include "saferetry/testing/memory_journal.h"

namespace saferetry {
namespace {

using ::saferetry::testkit::FakeClock;
using ::saferetry::testkit::FakeTransport;
using ::saferetry::testkit::Step;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kStatusUrl[] = "http://orders.test/orders/by-key/{key}";

// Delegates to a memory journal; each operation can be made to fail.
class FlakyJournal final : public IntentJournal {
 public:
  explicit FlakyJournal(std::shared_ptr<IntentJournal> inner) : inner_(std::move(inner)) {}
  std::string Owner() const override { return inner_->Owner(); }
  std::atomic<bool> fail_record{false};
  std::atomic<bool> fail_mark_sent{false};
  // The record commits, and its answer is lost (once).
  std::atomic<bool> lose_record_answer{false};

  absl::StatusOr<RecordResult> Record(const Intent& intent) override {
    if (fail_record) return absl::UnavailableError("disk full");
    if (lose_record_answer.exchange(false)) {
      (void)inner_->Record(intent);
      return absl::UnavailableError("connection lost after commit");
    }
    return inner_->Record(intent);
  }
  absl::Status MarkSent(std::string_view key, int attempt) override {
    if (fail_mark_sent) return absl::UnavailableError("disk full");
    return inner_->MarkSent(key, attempt);
  }
  absl::Status Finish(std::string_view key, IntentState outcome,
                      const IntentSummary& summary) override {
    return inner_->Finish(key, outcome, summary);
  }
  absl::StatusOr<Intent> Get(std::string_view key) override {
    if (before_get) before_get(key);
    return inner_->Get(key);
  }
  absl::StatusOr<std::vector<Intent>> ListUnfinished(const UnfinishedFilter& filter) override {
    return inner_->ListUnfinished(filter);
  }
  // Runs before each Get (e.g. another owner resolving the intent meanwhile).
  std::function<void(std::string_view)> before_get;
  absl::StatusOr<bool> Claim(std::string_view key, std::string_view owner,
                             WallTime until) override {
    return inner_->Claim(key, owner, until);
  }
  absl::StatusOr<bool> Release(std::string_view key, std::string_view owner) override {
    return inner_->Release(key, owner);
  }
  absl::StatusOr<PruneResult> Prune(WallTime now, std::chrono::milliseconds retention) override {
    return inner_->Prune(now, retention);
  }
  absl::StatusOr<std::optional<std::chrono::milliseconds>> OldestUnresolvedAge() override {
    return inner_->OldestUnresolvedAge();
  }

 private:
  std::shared_ptr<IntentJournal> inner_;
};

class ClientJournalTest : public ::testing::Test {
 protected:
  ClientJournalTest() {
    JournalOptions jo;
    jo.clock = clock_;
    jo.owner = "test-client";
    memory_ = saferetry::testkit::MakeMemoryJournal(jo).value();
    journal_ = std::make_shared<FlakyJournal>(memory_);
  }

  std::unique_ptr<Client> MakeClient() {
    ClientOptions o;
    o.transport = transport_;
    o.clock = clock_;
    o.random = std::make_shared<saferetry::testkit::ScriptedRandom>(std::vector<double>{0.5});
    o.journal = journal_;
    return Client::Create(std::move(o)).value();
  }

  static Request Order(std::string body = R"({"sku":"a"})") {
    return Request{"POST",
                   "http://user:pw@orders.test/orders",
                   {{"Authorization", "Bearer secret"}, {"Content-Type", "application/json"}},
                   std::move(body)};
  }

  static CallOptions Keyed(std::string key, bool with_status_url = false) {
    CallOptions call;
    call.idempotency_key = std::move(key);
    call.timeout = std::chrono::seconds(5);
    if (with_status_url) call.status_url = kStatusUrl;
    return call;
  }

  std::shared_ptr<FakeClock> clock_ = std::make_shared<FakeClock>();
  std::shared_ptr<FakeTransport> transport_ = std::make_shared<FakeTransport>(clock_);
  std::shared_ptr<IntentJournal> memory_;
  std::shared_ptr<FlakyJournal> journal_;
};

TEST_F(ClientJournalTest, RecordsAndMarksBeforeSendingThenFinishes) {
  auto client = MakeClient();
  IntentState state_at_send = IntentState::kPending;
  int attempt_at_send = -1;
  transport_->SetHandler([&](const Request&, const AttemptOptions&) {
    Intent seen = memory_->Get("k-1").value();
    state_at_send = seen.state;
    attempt_at_send = seen.attempt;
    TransportResult r;
    r.delivery = Delivery::kResponseReceived;
    r.response = Response{201, {}, "created"};
    return r;
  });
  CallResult r = client->Execute(Order(), Keyed("k-1", true));
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(state_at_send, IntentState::kSent);
  EXPECT_EQ(attempt_at_send, 1);
  Intent stored = memory_->Get("k-1").value();
  EXPECT_EQ(stored.state, IntentState::kSucceeded);
  EXPECT_EQ(stored.method, "POST");
  EXPECT_EQ(stored.url, "http://orders.test/orders");
  EXPECT_EQ(stored.body_digest, BodyDigest(R"({"sku":"a"})"));
  EXPECT_EQ(stored.status_url_template, kStatusUrl);
  EXPECT_EQ(stored.summary.http_status, 201);
  EXPECT_EQ(stored.summary.stop_reason, "success");
  // The same word as the CLI summary's and CallResult::resolved_by.
  EXPECT_EQ(stored.summary.resolved_by, "response");
  EXPECT_EQ(stored.claim_owner, "");  // released
  EXPECT_EQ(stored.deadline - stored.created, std::chrono::seconds(5));
  for (const Header& h : stored.headers) EXPECT_NE(h.first, "Authorization");
}

TEST_F(ClientJournalTest, RecordFailureSendsNothing) {
  auto client = MakeClient();
  journal_->fail_record = true;
  CallResult r = client->Execute(Order(), Keyed("k-1", true));
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kJournalUnavailable);
  EXPECT_EQ(StopReasonName(r.stop_reason), "journal_unavailable");
  EXPECT_THAT(std::string(r.status.message()), HasSubstr("disk full"));
  EXPECT_EQ(transport_->send_count(), 0);
  EXPECT_EQ(r.attempts, 0);
  EXPECT_EQ(r.idempotency_key, "k-1");
}

// Attempt 1 is marked by the record itself (one commit before the first
// byte); every later attempt is marked before it is sent, and one the journal
// cannot mark is not sent.
TEST_F(ClientJournalTest, MarkSentFailureMeansTheAttemptIsNotSent) {
  auto client = MakeClient();
  journal_->fail_mark_sent = true;
  transport_->Push(Step::RespondRejected());
  CallOptions call = Keyed("k-1", true);
  saferetry::RetryPolicyOptions call_policy;
  call_policy.max_attempts = 2;
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  CallResult r = client->Execute(Order(), call);
  EXPECT_EQ(transport_->send_count(), 1);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(r.stop_reason, StopReason::kAttemptsExhausted);
  ASSERT_EQ(r.evidence.size(), 2u);
  EXPECT_EQ(r.evidence[1].delivery, Delivery::kNotSent);
  Intent stored = memory_->Get("k-1").value();
  EXPECT_EQ(stored.state, IntentState::kFailed);
  EXPECT_EQ(stored.attempt, 1);
}

// A record whose answer is lost (the journal committed, then failed): the
// call sends nothing; its retry in the same process finds the row with
// attempt 1 marked and its own owner, and sends exactly once. Another
// process (a fresh client) would not: for it the row may have been sent.
TEST_F(ClientJournalTest, ALostRecordAnswerIsTakenBackByTheSameProcessOnly) {
  auto client = MakeClient();
  journal_->lose_record_answer = true;
  CallResult lost = client->Execute(Order(), Keyed("k-1", true));
  EXPECT_EQ(lost.outcome, Outcome::kFailed);
  EXPECT_EQ(lost.stop_reason, StopReason::kJournalUnavailable);
  EXPECT_EQ(transport_->send_count(), 0);
  EXPECT_EQ(memory_->Get("k-1").value().state, IntentState::kSent);

  // Another process: the row may have been sent; no plain resend.
  CallResult other = MakeClient()->Execute(Order(), Keyed("k-1", true));
  EXPECT_EQ(other.outcome, Outcome::kUnknown);
  EXPECT_EQ(other.stop_reason, StopReason::kAmbiguousUnresolved);
  EXPECT_EQ(transport_->send_count(), 0);

  transport_->Push(Step::Respond(201));
  CallResult retry = client->Execute(Order(), Keyed("k-1", true));
  EXPECT_EQ(retry.outcome, Outcome::kSucceeded);
  EXPECT_EQ(transport_->send_count(), 1);
  EXPECT_EQ(memory_->Get("k-1").value().attempt, 1);
  // Taken once: a second retry of a settled intent returns its outcome.
  CallResult again = client->Execute(Order(), Keyed("k-1", true));
  EXPECT_EQ(again.outcome, Outcome::kSucceeded);
  EXPECT_EQ(transport_->send_count(), 1);
}

TEST_F(ClientJournalTest, KeyReusedWithAnotherBodyIsRefusedByAFreshClient) {
  transport_->Push(Step::Respond(201));
  {
    auto first = MakeClient();
    CallResult r = first->Execute(Order(R"({"sku":"a"})"), Keyed("k-1"));
    EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  }
  auto restarted = MakeClient();  // a new process: no in-memory fingerprints
  CallResult r = restarted->Execute(Order(R"({"sku":"b"})"), Keyed("k-1"));
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kInvalidArgument);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status.message()), HasSubstr("idempotency_key"));
  EXPECT_EQ(transport_->send_count(), 1);
}

TEST_F(ClientJournalTest, ResolvedIntentReturnsItsStoredOutcomeWithoutSending) {
  transport_->Push(Step::Respond(201));
  auto client = MakeClient();
  CallResult first = client->Execute(Order(), Keyed("k-1"));
  ASSERT_EQ(first.outcome, Outcome::kSucceeded);
  auto restarted = MakeClient();
  CallResult again = restarted->Execute(Order(), Keyed("k-1"));
  EXPECT_EQ(again.outcome, Outcome::kSucceeded);
  EXPECT_EQ(again.stop_reason, StopReason::kSuccess);
  EXPECT_EQ(again.attempts, 0);
  EXPECT_EQ(transport_->send_count(), 1);
}

TEST_F(ClientJournalTest, UnresolvedIntentIsNotResentByANewCall) {
  transport_->Push(Step::CommitThenLost());
  auto client = MakeClient();
  CallOptions call = Keyed("k-1");
  saferetry::RetryPolicyOptions call_policy;
  call_policy.max_attempts = 1;
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  CallResult first = client->Execute(Order(), call);
  ASSERT_EQ(first.outcome, Outcome::kUnknown);
  EXPECT_EQ(memory_->Get("k-1").value().state, IntentState::kUnknown);
  CallResult again = MakeClient()->Execute(Order(), call);
  EXPECT_EQ(again.outcome, Outcome::kUnknown);
  EXPECT_EQ(again.stop_reason, StopReason::kAmbiguousUnresolved);
  EXPECT_THAT(std::string(again.status.message()), HasSubstr("Client::Resolve"));
  EXPECT_EQ(transport_->send_count(), 1);
}

// Rule 3: a call killed after its send leaves the intent with attempt 1
// marked; the same key continued with `server_deduplicates` against a server
// that refuses connections (or answers a clean 400) ends UNKNOWN, never
// FAILED, and the journal keeps it unresolved for the reconciler.
TEST_F(ClientJournalTest, AContinuedIntentWhoseAttemptMayHaveLeftIsNeverFailed) {
  // The killed process: recorded, marked as sent, never finished.
  ASSERT_TRUE(memory_
                  ->Record(MakeIntent(Order(), "k-killed", "", clock_->WallNow(),
                                      clock_->WallNow() + std::chrono::seconds(1)))
                  .ok());
  ASSERT_TRUE(memory_->MarkSent("k-killed", 1).ok());
  clock_->Advance(std::chrono::seconds(10));  // its claim ran out with it
  for (int i = 0; i < 3; ++i) transport_->Push(Step::NotSent());
  CallOptions call = Keyed("k-killed");
  saferetry::RetryPolicyOptions call_policy;
  call_policy.server_deduplicates = true;
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  CallResult r = MakeClient()->Execute(Order(), call);
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kAttemptsExhausted);
  EXPECT_EQ(r.attempts, 3);
  Intent stored = memory_->Get("k-killed").value();
  EXPECT_EQ(stored.state, IntentState::kUnknown);
  EXPECT_EQ(stored.attempt, 4);  // 1 from the killed process, then 3

  transport_->Push(Step::Respond(400));
  CallResult clean = MakeClient()->Execute(Order(), call);
  EXPECT_EQ(clean.outcome, Outcome::kUnknown);
  EXPECT_EQ(clean.stop_reason, StopReason::kAnswerNotDefinite);
  EXPECT_EQ(memory_->Get("k-killed").value().state, IntentState::kUnknown);
}

// A continued intent is claimed under the journal's configured owner, not
// under a name made from the host and the process id.
TEST_F(ClientJournalTest, AContinuedIntentIsClaimedUnderTheConfiguredOwner) {
  ASSERT_TRUE(memory_
                  ->Record(MakeIntent(Order(), "k-owned", "", clock_->WallNow(),
                                      clock_->WallNow() + std::chrono::seconds(1)))
                  .ok());
  clock_->Advance(std::chrono::seconds(10));
  std::string holder;
  transport_->SetHandler([&](const Request&, const AttemptOptions&) {
    holder = memory_->Get("k-owned").value().claim_owner;
    TransportResult r;
    r.delivery = Delivery::kResponseReceived;
    r.response = Response{201, {}, "{}", false};
    return r;
  });
  CallOptions call = Keyed("k-owned");
  saferetry::RetryPolicyOptions call_policy;
  call_policy.server_deduplicates = true;
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  CallResult r = MakeClient()->Execute(Order(), call);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(holder, "test-client");
  EXPECT_EQ(memory_->Get("k-owned").value().claim_owner, "");
}

// The same intent with nothing sent yet (PENDING, attempt 0) is a fresh
// start: refused connections prove nothing happened.
TEST_F(ClientJournalTest, AContinuedIntentThatNeverSentCanFail) {
  ASSERT_TRUE(memory_
                  ->Record(MakeIntent(Order(), "k-pending", "", clock_->WallNow(),
                                      clock_->WallNow() + std::chrono::seconds(1)))
                  .ok());
  clock_->Advance(std::chrono::seconds(10));
  for (int i = 0; i < 3; ++i) transport_->Push(Step::NotSent());
  CallOptions call = Keyed("k-pending");
  saferetry::RetryPolicyOptions call_policy;
  call_policy.server_deduplicates = true;
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  CallResult r = MakeClient()->Execute(Order(), call);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kAttemptsExhausted);
  EXPECT_EQ(memory_->Get("k-pending").value().state, IntentState::kFailed);
}

// Every stop reason has its own name, and a journaled outcome reads back
// with the reason it was written with (the new ones included).
TEST_F(ClientJournalTest, EveryStopReasonNameIsDistinctAndReadsBackFromTheJournal) {
  std::set<std::string> names;
  for (int i = 0; i < kStopReasonCount; ++i) {
    const auto reason = static_cast<StopReason>(i);
    const std::string name(StopReasonName(reason));
    SCOPED_TRACE(name);
    EXPECT_FALSE(name.empty());
    EXPECT_TRUE(names.insert(name).second);
    const std::string key = "k-reason-" + std::to_string(i);
    ASSERT_TRUE(memory_
                    ->Record(MakeIntent(Order(), key, "", clock_->WallNow(),
                                        clock_->WallNow() + std::chrono::seconds(1)))
                    .ok());
    IntentSummary summary;
    summary.stop_reason = name;
    ASSERT_TRUE(memory_->Finish(key, IntentState::kFailed, summary).ok());
    CallResult r = MakeClient()->Execute(Order(), Keyed(key));
    EXPECT_EQ(r.outcome, Outcome::kFailed);
    EXPECT_EQ(r.stop_reason, reason);
  }
  EXPECT_TRUE(names.count("key_expired"));
  EXPECT_TRUE(names.count("answer_not_definite"));
  EXPECT_TRUE(names.count("retry_after_too_long"));
  EXPECT_EQ(transport_->send_count(), 0);
}

TEST_F(ClientJournalTest, UnkeyedCallsAreNotJournaled) {
  transport_->Push(Step::Respond(200));
  auto client = MakeClient();
  journal_->fail_record = true;  // would fail if it were used
  CallResult r = client->Execute(Request{"GET", "http://orders.test/orders/1", {}, ""});
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
}

// The event-loop driver goes through the same journal steps.
class AsyncClientJournalTest : public ClientJournalTest {
 protected:
  std::unique_ptr<AsyncClient> MakeAsync() {
    AsyncClientOptions o;
    o.client.clock = clock_;
    o.client.random = std::make_shared<saferetry::testkit::ScriptedRandom>();
    o.client.journal = journal_;
    o.loop = loop_;
    o.transport = async_transport_;
    o.run_loop_thread = false;
    return AsyncClient::Create(std::move(o)).value();
  }
  std::shared_ptr<saferetry::testkit::FakeEventLoop> loop_ =
      std::make_shared<saferetry::testkit::FakeEventLoop>(clock_);
  std::shared_ptr<saferetry::testkit::AsyncFakeTransport> async_transport_ =
      std::make_shared<saferetry::testkit::AsyncFakeTransport>(loop_, clock_);
};

TEST_F(AsyncClientJournalTest, AnUnknownOutcomeIsJournaledWithItsAttempts) {
  auto client = MakeAsync();
  async_transport_->Push(Step::CommitThenLost()).Push(Step::CommitThenLost());
  CallOptions call = Keyed("k-async");
  saferetry::RetryPolicyOptions call_policy;
  call_policy.max_attempts = 2;
  call_policy.server_deduplicates = true;
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  auto done = client->Execute(Order(), call);
  loop_->RunUntilIdle();
  CallResult r = done.get();
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.attempts, 2);
  Intent stored = memory_->Get("k-async").value();
  EXPECT_EQ(stored.state, IntentState::kUnknown);
  EXPECT_EQ(stored.attempt, 2);
  EXPECT_EQ(stored.claim_owner, "");
}

TEST_F(AsyncClientJournalTest, RecordFailureSendsNothing) {
  auto client = MakeAsync();
  journal_->fail_record = true;
  auto done = client->Execute(Order(), Keyed("k-async"));
  loop_->RunUntilIdle();
  CallResult r = done.get();
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kJournalUnavailable);
  EXPECT_EQ(async_transport_->send_count(), 0);
}

TEST_F(AsyncClientJournalTest, MarkSentFailureMeansTheAttemptIsNotSent) {
  auto client = MakeAsync();
  journal_->fail_mark_sent = true;
  async_transport_->Push(Step::RespondRejected());
  CallOptions call = Keyed("k-async");
  saferetry::RetryPolicyOptions call_policy;
  call_policy.max_attempts = 2;
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  auto done = client->Execute(Order(), call);
  loop_->RunUntilIdle();
  CallResult r = done.get();
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.attempts, 2);
  // Attempt 1 was marked by the record; attempt 2 could not be marked.
  EXPECT_EQ(async_transport_->send_count(), 1);
  EXPECT_EQ(memory_->Get("k-async").value().state, IntentState::kFailed);
  EXPECT_EQ(memory_->Get("k-async").value().attempt, 1);
}

class ResolveTest : public ClientJournalTest {
 protected:
  // A fresh journal that keeps request bodies (so Resolve may resend), and a
  // fresh transport.
  void KeepBodies() {
    JournalOptions jo;
    jo.clock = clock_;
    jo.owner = "test-client";
    jo.body_cap = 1024;
    memory_ = saferetry::testkit::MakeMemoryJournal(jo).value();
    journal_ = std::make_shared<FlakyJournal>(memory_);
    transport_ = std::make_shared<FakeTransport>(clock_);
  }

  // Leaves "k-1" UNKNOWN in the journal: committed, answer lost, no query.
  void LeaveUnknown() {
    transport_->Push(Step::CommitThenLost());
    CallOptions call = Keyed("k-1");
    saferetry::RetryPolicyOptions call_policy;
    call_policy.max_attempts = 1;
    call.policy = saferetry::RetryPolicy::Create(call_policy).value();
    call.status_url = kStatusUrl;
    call_policy.max_status_queries = 1;
    transport_->Push(Step::Respond(503));
    call.policy = saferetry::RetryPolicy::Create(call_policy).value();
    CallResult r = MakeClient()->Execute(Order(), call);
    ASSERT_EQ(r.outcome, Outcome::kUnknown);
    ASSERT_EQ(memory_->Get("k-1").value().state, IntentState::kUnknown);
  }
};

TEST_F(ResolveTest, FoundByAStatusQuerySucceedsAndIsWrittenBack) {
  LeaveUnknown();
  const int sent_before = transport_->send_count();
  transport_->Push(Step::Respond(200, {}, R"({"id":7})"));
  ResolveOptions ro;
  ro.headers = {{"Authorization", "Bearer again"}};
  CallResult r = MakeClient()->Resolve("k-1", ro);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kStatusQuery);
  EXPECT_EQ(r.status_queries, 1);
  EXPECT_EQ(r.attempts, 0);
  ASSERT_EQ(transport_->send_count(), sent_before + 1);
  const Request q = transport_->sent().back().request;
  EXPECT_EQ(q.method, "GET");
  EXPECT_EQ(q.url, "http://orders.test/orders/by-key/k-1");
  EXPECT_EQ(FindHeader(q.headers, "Authorization").value_or(""), "Bearer again");
  EXPECT_EQ(FindHeader(q.headers, "Idempotency-Key").value_or(""), "k-1");
  EXPECT_FALSE(FindHeader(q.headers, "Idempotency-Key-Fence").has_value());
  Intent stored = memory_->Get("k-1").value();
  EXPECT_EQ(stored.state, IntentState::kSucceeded);
  EXPECT_EQ(stored.summary.resolved_by, "status_query");
  EXPECT_EQ(stored.summary.http_status, 200);
  EXPECT_EQ(stored.claim_owner, "");
}

TEST_F(ResolveTest, UnfencedNotFoundStaysUnknown) {
  LeaveUnknown();
  transport_->Push(Step::Respond(404));
  CallResult r = MakeClient()->Resolve("k-1", ResolveOptions{});
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kNotFoundNoAttemptsLeft);
  EXPECT_EQ(memory_->Get("k-1").value().state, IntentState::kUnknown);
}

TEST_F(ResolveTest, FencedNotFoundFailsDefinitely) {
  LeaveUnknown();
  const int sent_before = transport_->send_count();
  transport_->Push(Step::Respond(404));
  transport_->Push(Step::Respond(404, {{"Idempotency-Key-State", "fenced"}}));
  ResolveOptions ro;
  ro.fence = true;
  CallResult r = MakeClient()->Resolve("k-1", ro);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kFenced);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kStatusQuery);
  ASSERT_EQ(transport_->send_count(), sent_before + 2);
  EXPECT_EQ(
      FindHeader(transport_->sent().back().request.headers, "Idempotency-Key-Fence").value_or(""),
      "true");
  EXPECT_EQ(memory_->Get("k-1").value().state, IntentState::kFailed);
}

TEST_F(ResolveTest, StoredFinalErrorFails) {
  LeaveUnknown();
  transport_->Push(Step::Respond(404, {{"Idempotency-Key-State", "completed"}}, "sold out"));
  CallResult r = MakeClient()->Resolve("k-1", ResolveOptions{});
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kPermanentError);
  EXPECT_EQ(memory_->Get("k-1").value().summary.stop_reason, "permanent_error");
}

// Rule 1 in the reconciler: a same-key resend answered 410 or 422 (or an
// unmarked 400) says nothing about the intent's effect: never FAILED in the
// journal. A 410 `expired` ends the resolve (never another resend); after a
// 422 or a 400 only status queries follow, and their "not found" leaves it
// kAnswerNotDefinite, as in a call (one engine).
TEST_F(ResolveTest, AResendAnsweredWithANonDefiniteRefusalIsNeverFailed) {
  struct Case {
    int status;
    Headers headers;
    StopReason reason;
  };
  const Case cases[] = {
      {410, {{"Idempotency-Key-State", "expired"}}, StopReason::kKeyExpired},
      {410, {}, StopReason::kKeyExpired},
      {422, {}, StopReason::kAnswerNotDefinite},
      {400, {}, StopReason::kAnswerNotDefinite},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.status);
    KeepBodies();
    LeaveUnknown();
    transport_->Push(Step::Respond(404, {{"Idempotency-Key-State", "unknown"}}));
    transport_->Push(Step::Respond(c.status, c.headers));
    transport_->Push(Step::Respond(404, {{"Idempotency-Key-State", "unknown"}}));
    ResolveOptions ro;
    ro.resend_if_server_deduplicates = true;
    CallResult r = MakeClient()->Resolve("k-1", ro);
    EXPECT_EQ(r.outcome, Outcome::kUnknown);
    EXPECT_EQ(r.stop_reason, c.reason);
    EXPECT_EQ(r.attempts, 1);
    EXPECT_EQ(memory_->Get("k-1").value().state, IntentState::kUnknown);
  }
}

// The resend's answer is definite when the server marks it as the key's
// stored answer, or fences the key.
TEST_F(ResolveTest, AResendAnsweredWithAMarkedFinalErrorIsFailed) {
  for (bool fenced : {false, true}) {
    SCOPED_TRACE(fenced);
    KeepBodies();
    LeaveUnknown();
    transport_->Push(Step::Respond(404, {{"Idempotency-Key-State", "unknown"}}));
    if (fenced) {
      transport_->Push(Step::Respond(410, {{"Idempotency-Key-State", "fenced"}}));
    } else {
      transport_->Push(Step::Respond(400, {{"Idempotency-Key-State", "completed"}}));
    }
    ResolveOptions ro;
    ro.resend_if_server_deduplicates = true;
    CallResult r = MakeClient()->Resolve("k-1", ro);
    EXPECT_EQ(r.outcome, Outcome::kFailed);
    EXPECT_EQ(r.stop_reason, fenced ? StopReason::kFenced : StopReason::kPermanentError);
    EXPECT_EQ(r.resolved_by, ResolvedBy::kResponse);
    EXPECT_EQ(memory_->Get("k-1").value().state, IntentState::kFailed);
  }
}

// A status answer `expired` is not "not found": no resend follows it.
TEST_F(ResolveTest, AnExpiredStatusAnswerStaysUnknownWithoutAResend) {
  KeepBodies();
  LeaveUnknown();
  const int sent_before = transport_->send_count();
  transport_->Push(Step::Respond(404, {{"Idempotency-Key-State", "expired"}}));
  ResolveOptions ro;
  ro.resend_if_server_deduplicates = true;
  CallResult r = MakeClient()->Resolve("k-1", ro);
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kKeyExpired);
  EXPECT_EQ(r.attempts, 0);
  EXPECT_EQ(transport_->send_count(), sent_before + 1);
  EXPECT_EQ(memory_->Get("k-1").value().summary.stop_reason, "key_expired");
}

TEST_F(ResolveTest, NoAnswerStaysUnknownWithinTheQueryCap) {
  LeaveUnknown();
  for (int i = 0; i < 3; ++i) transport_->Push(Step::Respond(503));
  ResolveOptions ro;
  ro.max_status_queries = 3;
  CallResult r = MakeClient()->Resolve("k-1", ro);
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.status_queries, 3);
  EXPECT_EQ(r.stop_reason, StopReason::kStatusQueriesExhausted);
  Intent stored = memory_->Get("k-1").value();
  EXPECT_EQ(stored.state, IntentState::kUnknown);
  EXPECT_EQ(stored.summary.http_status, 503);
}

// One engine: a resolve waits out a status query's Retry-After as a call
// does (the hint is a floor under the poll pacing), charges each paced query
// to the status-query allowance, and answers by the same rule.
TEST_F(ResolveTest, AStatusQueryRetryAfterIsWaitedOut) {
  LeaveUnknown();
  const Duration slept_before = clock_->total_slept();
  transport_->Push(Step::RespondRetryAfter(503, "1"));
  transport_->Push(Step::Respond(200, {}, R"({"id":7})"));
  ResolveOptions ro;
  ro.timeout = std::chrono::seconds(5);
  CallResult r = MakeClient()->Resolve("k-1", ro);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.status_queries, 2);
  ASSERT_EQ(r.evidence.size(), 2u);
  EXPECT_TRUE(r.evidence[0].delay_from_server_hint);
  EXPECT_GE(r.evidence[0].delay_after, std::chrono::seconds(1));
  EXPECT_EQ(clock_->total_slept() - slept_before, r.evidence[0].delay_after);
  EXPECT_EQ(memory_->Get("k-1").value().state, IntentState::kSucceeded);
}

// A Retry-After that does not fit in the resolve's time ends it at once,
// without a query that would disregard the server's "not before".
TEST_F(ResolveTest, ARetryAfterBeyondTheTimeoutEndsTheResolveUnknown) {
  LeaveUnknown();
  const int sent_before = transport_->send_count();
  transport_->Push(Step::RespondRetryAfter(503, "30"));
  ResolveOptions ro;
  ro.timeout = std::chrono::seconds(5);
  CallResult r = MakeClient()->Resolve("k-1", ro);
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kRetryAfterBeyondDeadline);
  EXPECT_EQ(transport_->send_count(), sent_before + 1);
  EXPECT_EQ(memory_->Get("k-1").value().state, IntentState::kUnknown);
}

TEST_F(ResolveTest, ClaimedByAnotherOwnerIsLeftAlone) {
  LeaveUnknown();
  ASSERT_TRUE(
      memory_->Claim("k-1", "someone-else", clock_->WallNow() + std::chrono::minutes(1)).value());
  const int sent_before = transport_->send_count();
  CallResult r = MakeClient()->Resolve("k-1", ResolveOptions{});
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kAmbiguousUnresolved);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(transport_->send_count(), sent_before);
}

TEST_F(ResolveTest, BadInputNamesTheField) {
  auto client = MakeClient();
  CallResult missing = client->Resolve("nope", ResolveOptions{});
  EXPECT_EQ(missing.stop_reason, StopReason::kInvalidArgument);
  EXPECT_THAT(std::string(missing.status.message()), HasSubstr("idempotency_key"));
  ResolveOptions bad;
  bad.timeout = Duration::zero();
  EXPECT_THAT(std::string(client->Resolve("k", bad).status.message()),
              HasSubstr("resolve.timeout"));
  ClientOptions o;
  o.transport = transport_;
  auto without = Client::Create(std::move(o)).value();
  EXPECT_THAT(std::string(without->Resolve("k", ResolveOptions{}).status.message()),
              HasSubstr("journal"));
}

class ReconcilerTest : public ClientJournalTest {
 protected:
  // Leaves `key` UNKNOWN: committed, the answer lost, no status query.
  void LeaveUnknown(const std::string& key) {
    transport_->Push(Step::CommitThenLost());
    CallOptions call = Keyed(key, true);
    saferetry::RetryPolicyOptions call_policy;
    call_policy.max_attempts = 1;
    call_policy.max_status_queries = 1;
    transport_->Push(Step::Respond(503));
    call.policy = saferetry::RetryPolicy::Create(call_policy).value();
    CallResult r = MakeClient()->Execute(Order(), call);
    ASSERT_EQ(r.outcome, Outcome::kUnknown);
  }
};

TEST_F(ReconcilerTest, ResolvesEligibleIntentsOldestFirstAndCallsTheHook) {
  LeaveUnknown("k-1");
  clock_->Advance(std::chrono::seconds(1));
  LeaveUnknown("k-2");
  clock_->Advance(std::chrono::seconds(1));
  LeaveUnknown("k-3");
  // k-1 and k-2 are past their deadlines; k-3 (5 s) is not yet.
  clock_->Advance(std::chrono::milliseconds(4500));
  transport_->Push(Step::Respond(200, {}, "found"));
  transport_->Push(Step::Respond(404, {{"Idempotency-Key-State", "completed"}}));
  std::vector<std::string> hooked;
  ReconcilerOptions options;
  options.on_resolved = [&](const Intent& intent, const CallResult& r) {
    hooked.push_back(intent.key + "=" + std::string(OutcomeName(r.outcome)));
  };
  auto client = MakeClient();
  Reconciler reconciler(client.get(), options);
  ReconcileReport report = reconciler.RunOnce().value();
  ASSERT_EQ(report.tried.size(), 2u);
  EXPECT_EQ(report.tried[0].intent.key, "k-1");
  EXPECT_EQ(report.tried[1].intent.key, "k-2");
  EXPECT_EQ(report.succeeded, 1);
  EXPECT_EQ(report.failed, 1);
  EXPECT_EQ(report.unknown, 0);
  EXPECT_THAT(hooked, ::testing::ElementsAre("k-1=SUCCEEDED", "k-2=FAILED"));
  EXPECT_EQ(memory_->Get("k-1").value().state, IntentState::kSucceeded);
  EXPECT_EQ(memory_->Get("k-2").value().state, IntentState::kFailed);
  EXPECT_EQ(memory_->Get("k-3").value().state, IntentState::kUnknown);
  ASSERT_TRUE(report.oldest_unresolved_age.has_value());
  EXPECT_EQ(*report.oldest_unresolved_age,
            std::chrono::duration_cast<std::chrono::milliseconds>(
                clock_->WallNow() - memory_->Get("k-3").value().created));
  EXPECT_TRUE(report.journal_status.ok());
}

// Two reconcilers meet on one intent: the other one resolves it between
// this run's listing and its resolve. This run reports nothing for it — no
// count, no hook, not among the tried — and sends nothing.
TEST_F(ReconcilerTest, AnIntentResolvedMeanwhileByAnotherOwnerIsNotReportedAsThisRunsOwn) {
  LeaveUnknown("k-1");
  clock_->Advance(std::chrono::seconds(10));
  journal_->before_get = [this](std::string_view key) {
    ASSERT_TRUE(memory_->Claim(key, "reconciler:other", clock_->WallNow() + std::chrono::seconds(5))
                    .value());
    ASSERT_TRUE(memory_->Finish(key, IntentState::kSucceeded, IntentSummary{}).ok());
    ASSERT_TRUE(memory_->Release(key, "reconciler:other").ok());
    journal_->before_get = nullptr;
  };
  const int sent_before = transport_->send_count();
  int hooked = 0;
  ReconcilerOptions options;
  options.older_than = std::chrono::milliseconds(0);
  options.on_resolved = [&](const Intent&, const CallResult&) { ++hooked; };
  auto client = MakeClient();
  Reconciler reconciler(client.get(), options);
  ReconcileReport report = reconciler.RunOnce().value();
  EXPECT_TRUE(report.tried.empty());
  EXPECT_EQ(report.succeeded, 0);
  EXPECT_EQ(report.unknown, 0);
  EXPECT_EQ(hooked, 0);
  EXPECT_TRUE(report.skipped.empty());  // resolved: no longer unfinished
  EXPECT_EQ(transport_->send_count(), sent_before);
  EXPECT_EQ(memory_->Get("k-1").value().state, IntentState::kSucceeded);
}

TEST_F(ReconcilerTest, OlderThanZeroTakesEveryUnclaimedIntentWhateverItsDeadline) {
  LeaveUnknown("k-1");
  transport_->Push(Step::Respond(200));
  ReconcilerOptions options;
  options.older_than = std::chrono::milliseconds(0);
  auto client = MakeClient();
  ReconcileReport report = Reconciler(client.get(), options).RunOnce().value();
  ASSERT_EQ(report.tried.size(), 1u);
  EXPECT_EQ(report.tried[0].result.outcome, Outcome::kSucceeded);
  EXPECT_EQ(report.tried[0].result.resolved_by, ResolvedBy::kStatusQuery);
  EXPECT_FALSE(report.oldest_unresolved_age.has_value());
}

TEST_F(ReconcilerTest, StillUnknownIsReportedAndKeptThroughPrune) {
  LeaveUnknown("k-1");
  transport_->Push(Step::Respond(201));
  ASSERT_EQ(MakeClient()->Execute(Order(), Keyed("k-2")).outcome, Outcome::kSucceeded);
  clock_->Advance(std::chrono::hours(2));
  transport_->Push(Step::Respond(404));  // unfenced: proves nothing
  ReconcilerOptions options;
  options.prune_older_than = std::chrono::hours(1);
  auto client = MakeClient();
  ReconcileReport report = Reconciler(client.get(), options).RunOnce().value();
  ASSERT_EQ(report.tried.size(), 1u);
  EXPECT_EQ(report.unknown, 1);
  ASSERT_TRUE(report.pruned.has_value());
  EXPECT_EQ(report.pruned->pruned, 1);
  EXPECT_EQ(report.pruned->kept_unresolved, 1);
  EXPECT_EQ(memory_->Get("k-1").value().state, IntentState::kUnknown);
  EXPECT_EQ(memory_->Get("k-2").status().code(), absl::StatusCode::kNotFound);
}

// A claimed intent is not tried, but it is reported: who holds it and until
// when. It is not counted as unknown.
TEST_F(ReconcilerTest, AnIntentClaimedByAnotherOwnerIsReportedNotTried) {
  LeaveUnknown("k-1");
  const WallTime until = clock_->WallNow() + std::chrono::minutes(5);
  ASSERT_TRUE(memory_->Claim("k-1", "other", until).value());
  ReconcilerOptions options;
  options.older_than = std::chrono::milliseconds(0);
  auto client = MakeClient();
  const int sent = transport_->send_count();
  ReconcileReport report = Reconciler(client.get(), options).RunOnce().value();
  EXPECT_TRUE(report.tried.empty());
  EXPECT_EQ(report.unknown, 0);
  EXPECT_EQ(transport_->send_count(), sent);
  ASSERT_EQ(report.skipped.size(), 1u);
  EXPECT_EQ(report.skipped[0].why, SkipReason::kClaimed);
  EXPECT_EQ(report.skipped[0].intent.key, "k-1");
  EXPECT_EQ(report.skipped[0].intent.claim_owner, "other");
  EXPECT_EQ(report.skipped[0].intent.claim_until,
            std::chrono::time_point_cast<std::chrono::milliseconds>(until));
  EXPECT_EQ(report.CountSkipped(SkipReason::kClaimed), 1);
}

// By default an intent whose deadline has not passed is in flight, and one
// created after `older_than` too recent: both reported, neither tried.
TEST_F(ReconcilerTest, InFlightAndTooRecentIntentsAreReported) {
  LeaveUnknown("k-1");  // deadline 5 s after it started; its claim released
  auto client = MakeClient();
  ReconcileReport report = Reconciler(client.get(), ReconcilerOptions{}).RunOnce().value();
  ASSERT_EQ(report.skipped.size(), 1u);
  EXPECT_EQ(report.skipped[0].why, SkipReason::kInFlight);
  ReconcilerOptions recent;
  recent.older_than = std::chrono::minutes(1);
  ReconcileReport r2 = Reconciler(client.get(), recent).RunOnce().value();
  ASSERT_EQ(r2.skipped.size(), 1u);
  EXPECT_EQ(r2.skipped[0].why, SkipReason::kTooRecent);
  EXPECT_TRUE(r2.tried.empty());
}

// `wait_for_claims`: the run waits (on the client's clock) for a claim that
// runs out within the bound, then tries the intent.
TEST_F(ReconcilerTest, WaitsForAClaimThatRunsOutWithinTheBound) {
  LeaveUnknown("k-1");
  ASSERT_TRUE(
      memory_->Claim("k-1", "killed-process", clock_->WallNow() + std::chrono::seconds(3)).value());
  transport_->Push(Step::Respond(200, {}, R"({"id":1})"));
  ReconcilerOptions options;
  options.older_than = std::chrono::milliseconds(0);
  options.wait_for_claims = std::chrono::seconds(2);
  auto client = MakeClient();
  const TimePoint start = clock_->Now();
  ReconcileReport short_wait = Reconciler(client.get(), options).RunOnce().value();
  EXPECT_TRUE(short_wait.tried.empty());  // the claim ends after the bound
  EXPECT_EQ(short_wait.CountSkipped(SkipReason::kClaimed), 1);
  EXPECT_EQ(clock_->Now(), start);  // and it did not wait for nothing
  options.wait_for_claims = std::chrono::seconds(5);
  ReconcileReport waited = Reconciler(client.get(), options).RunOnce().value();
  ASSERT_EQ(waited.tried.size(), 1u);
  EXPECT_EQ(waited.succeeded, 1);
  EXPECT_TRUE(waited.skipped.empty());
  // One wait: to 10 ms past the claim's end (stored to the millisecond).
  ASSERT_FALSE(clock_->sleeps().empty());
  EXPECT_GT(clock_->sleeps().back(), std::chrono::milliseconds(3009));
  EXPECT_LE(clock_->sleeps().back(), std::chrono::milliseconds(3010));
}

TEST_F(ReconcilerTest, WaitForClaimsIsValidated) {
  ReconcilerOptions options;
  options.wait_for_claims = std::chrono::milliseconds(-1);
  EXPECT_THAT(std::string(ValidateReconcilerOptions(options).message()),
              HasSubstr("reconciler.wait_for_claims"));
}

TEST_F(ReconcilerTest, BadOptionsNameTheField) {
  auto client = MakeClient();
  ReconcilerOptions options;
  options.max_intents = 0;
  EXPECT_THAT(std::string(Reconciler(client.get(), options).RunOnce().status().message()),
              HasSubstr("reconciler.max_intents"));
}

TEST_F(ReconcilerTest, OldestUnresolvedGaugeIsExported) {
  MetricsSnapshot empty;
  ASSERT_TRUE(AddJournalGauge(*memory_, &empty).ok());
  EXPECT_THAT(ToPrometheusText(empty),
              HasSubstr("saferetry_journal_oldest_unresolved_age_seconds 0\n"));
  LeaveUnknown("k-1");
  // The age counts from the intent's creation, before the call's own time.
  clock_->SetWallNow(memory_->Get("k-1").value().created + std::chrono::milliseconds(90500));
  MetricsSnapshot s;
  ASSERT_TRUE(AddJournalGauge(*memory_, &s).ok());
  EXPECT_EQ(s.journal_oldest_unresolved_age, std::chrono::milliseconds(90500));
  EXPECT_THAT(ToPrometheusText(s),
              HasSubstr("# TYPE saferetry_journal_oldest_unresolved_age_seconds gauge\n"
                        "saferetry_journal_oldest_unresolved_age_seconds 90.5\n"));
  EXPECT_THAT(ToPrometheusText(MetricsSnapshot{}), Not(HasSubstr("journal")));
}

// Threads making journaled calls through one client while a reconciler walks
// the same journal: every intent ends SUCCEEDED, none is touched twice.
TEST_F(ReconcilerTest, ConcurrentCallsAndAReconcilerShareOneJournal) {
  transport_->SetHandler([](const Request& request, const AttemptOptions&) {
    TransportResult r;
    r.delivery = Delivery::kResponseReceived;
    r.response = Response{request.method == "POST" ? 201 : 200, {}, "ok"};
    return r;
  });
  auto client = MakeClient();
  constexpr int kThreads = 6;
  constexpr int kCalls = 40;
  std::atomic<bool> calls_done{false};
  std::atomic<int> succeeded{0};
  std::thread reconciler_thread([&] {
    ReconcilerOptions options;
    options.older_than = std::chrono::milliseconds(0);
    Reconciler reconciler(client.get(), options);
    while (!calls_done.load()) {
      absl::StatusOr<ReconcileReport> report = reconciler.RunOnce();
      EXPECT_TRUE(report.ok()) << report.status();
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        CallResult r = client->Execute(
            Order(), Keyed("t" + std::to_string(t) + "-" + std::to_string(i), true));
        if (r.outcome == Outcome::kSucceeded) ++succeeded;
      }
    });
  }
  for (auto& th : threads) th.join();
  calls_done = true;
  reconciler_thread.join();
  EXPECT_EQ(succeeded.load(), kThreads * kCalls);
  EXPECT_EQ(transport_->send_count(), kThreads * kCalls);  // no status query was needed
  UnfinishedFilter all;
  all.limit = 0;
  EXPECT_TRUE(memory_->ListUnfinished(all).value().empty());
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kCalls; ++i) {
      EXPECT_EQ(memory_->Get("t" + std::to_string(t) + "-" + std::to_string(i)).value().state,
                IntentState::kSucceeded);
    }
  }
}

}  // namespace
}  // namespace saferetry

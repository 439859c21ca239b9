// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The journal conformance suite's cases (see journal_conformance.h); each
// test executable instantiates it for its journals.

#include "journal_conformance.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "saferetry/journal.h"
#include "saferetry/testing/fake_clock.h"

namespace saferetry {
namespace journal_test {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

void JournalConformance::SetUp() {
  if (GetParam().skip_reason) {
    const std::string why = GetParam().skip_reason();
    if (!why.empty()) {
      skipped_ = true;
      GTEST_SKIP() << why;
    }
  }
  clock_ = std::make_shared<testkit::FakeClock>();
  options_.owner = "owner-a";
  options_.claim_grace = seconds(2);
  options_.clock = clock_;
  options_.extra_secret_headers = {"X-Api-Key"};
  journal_ = Open(options_);
  ASSERT_NE(journal_, nullptr);
}

void JournalConformance::TearDown() {
  journal_.reset();
  if (!skipped_ && GetParam().cleanup) GetParam().cleanup(dir_.path());
}

std::shared_ptr<IntentJournal> JournalConformance::Open(const JournalOptions& options) {
  absl::StatusOr<std::shared_ptr<IntentJournal>> j = GetParam().open(options, dir_.path());
  EXPECT_TRUE(j.ok()) << j.status();
  return j.ok() ? *j : nullptr;
}

Intent JournalConformance::NewIntent(const std::string& key, const std::string& body,
                                     milliseconds deadline) {
  Request r{"POST", "https://orders.internal/orders", {{"Content-Type", "application/json"}}, body};
  const WallTime now = clock_->WallNow();
  return MakeIntent(r, key, "https://orders.internal/orders/by-key/{key}", now, now + deadline);
}

Intent JournalConformance::MustGet(const std::string& key) {
  absl::StatusOr<Intent> i = journal_->Get(key);
  EXPECT_TRUE(i.ok()) << i.status();
  return i.ok() ? *i : Intent{};
}

TEST_P(JournalConformance, RecordCreatesPendingClaimedUntilDeadlinePlusGrace) {
  const WallTime now = clock_->WallNow();
  absl::StatusOr<RecordResult> r = journal_->Record(NewIntent("k-1"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->created);
  const Intent i = MustGet("k-1");
  EXPECT_EQ(i.state, IntentState::kPending);
  EXPECT_EQ(i.attempt, 0);
  EXPECT_EQ(i.method, "POST");
  EXPECT_EQ(i.url, "https://orders.internal/orders");
  EXPECT_EQ(i.body_digest, BodyDigest("{\"sku\":1}"));
  EXPECT_EQ(i.status_url_template, "https://orders.internal/orders/by-key/{key}");
  EXPECT_THAT(i.headers, ElementsAre(Pair("Content-Type", "application/json")));
  EXPECT_EQ(i.created, now);
  EXPECT_EQ(i.deadline, now + seconds(10));
  EXPECT_EQ(i.claim_owner, "owner-a");
  EXPECT_EQ(i.claim_until, now + seconds(12));
  EXPECT_EQ(i.updated, now);
  EXPECT_EQ(i.body, std::nullopt);
  EXPECT_EQ(r->intent.claim_until, i.claim_until);
  EXPECT_EQ(r->intent.created, i.created);
}

TEST_P(JournalConformance, RecordTruncatesTimesToMillisAndFillsCreated) {
  clock_->Advance(std::chrono::microseconds(1500));  // now ends in .5 ms
  Intent intent = NewIntent("k-1");
  intent.created = WallTime{};
  intent.deadline = clock_->WallNow() + std::chrono::microseconds(2700);
  ASSERT_TRUE(journal_->Record(intent).ok());
  const Intent i = MustGet("k-1");
  const auto ms = [](WallTime t) { return internal::ToUnixMillis(t); };
  EXPECT_EQ(ms(i.created), ms(clock_->WallNow()));
  EXPECT_EQ(i.created.time_since_epoch() % milliseconds(1), WallTime::duration::zero());
  EXPECT_EQ(ms(i.deadline), ms(clock_->WallNow()) + 3);  // now+2.7 ms = x.5+2.7 = (x+4).2
}

TEST_P(JournalConformance, RecordSameIntentReturnsTheStoredOneInAnyState) {
  ASSERT_TRUE(journal_->Record(NewIntent("k-1")).ok());
  ASSERT_TRUE(journal_->MarkSent("k-1", 1).ok());
  clock_->Advance(seconds(1));
  absl::StatusOr<RecordResult> again = journal_->Record(NewIntent("k-1"));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->created);
  EXPECT_EQ(again->intent.state, IntentState::kSent);
  EXPECT_EQ(again->intent.attempt, 1);
  EXPECT_EQ(again->intent.created, clock_->WallNow() - seconds(1));  // the first record's

  ASSERT_TRUE(
      journal_->Finish("k-1", IntentState::kSucceeded, {201, "succeeded", "response", ""}).ok());
  again = journal_->Record(NewIntent("k-1"));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->created);
  EXPECT_EQ(again->intent.state, IntentState::kSucceeded);
  EXPECT_EQ(again->intent.summary.http_status, 201);
}

TEST_P(JournalConformance, RecordSameKeyForAnotherRequestIsAlreadyExists) {
  ASSERT_TRUE(journal_->Record(NewIntent("k-1", "body-1")).ok());
  absl::StatusOr<RecordResult> other = journal_->Record(NewIntent("k-1", "body-2"));
  EXPECT_EQ(other.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(other.status().message(), HasSubstr("idempotency_key"));
  EXPECT_THAT(other.status().message(), HasSubstr("body"));

  Intent put = NewIntent("k-1", "body-1");
  put.method = "PUT";
  EXPECT_EQ(journal_->Record(put).status().code(), absl::StatusCode::kAlreadyExists);
  Intent elsewhere = NewIntent("k-1", "body-1");
  elsewhere.url = "https://orders.internal/refunds";
  EXPECT_EQ(journal_->Record(elsewhere).status().code(), absl::StatusCode::kAlreadyExists);
  // Refused even once resolved: the guard lasts as long as the intent is retained.
  ASSERT_TRUE(journal_->Finish("k-1", IntentState::kFailed, {}).ok());
  EXPECT_EQ(journal_->Record(NewIntent("k-1", "body-2")).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(MustGet("k-1").body_digest, BodyDigest("body-1"));
}

TEST_P(JournalConformance, RecordRejectsBadInputNamingTheField) {
  struct Case {
    std::function<void(Intent&)> spoil;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](Intent& i) { i.key = ""; }, "idempotency_key"},
      {[](Intent& i) { i.key = "has space"; }, "idempotency_key"},
      {[](Intent& i) { i.method = ""; }, "method"},
      {[](Intent& i) { i.url = ""; }, "url"},
      {[](Intent& i) { i.body_digest = "abc"; }, "body_digest"},
      {[](Intent& i) { i.body_digest = std::string(64, 'A'); }, "body_digest"},
      {[](Intent& i) { i.body = "another body"; }, "body_digest"},
      {[](Intent& i) { i.deadline = WallTime{}; }, "deadline"},
      {[](Intent& i) { i.deadline = i.created - milliseconds(1); }, "deadline"},
      {[](Intent& i) { i.deadline = WallTime::max(); }, "deadline"},
      {[](Intent& i) {
         i.headers.push_back({"X-Evil", "a\r\nHost: b"});
       },
       "headers"},
      {[](Intent& i) {
         i.headers.push_back({"Bad Name", "v"});
       },
       "headers"},
  };
  for (const Case& c : cases) {
    Intent intent = NewIntent("k-1");
    c.spoil(intent);
    absl::StatusOr<RecordResult> r = journal_->Record(intent);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(r.status().message(), HasSubstr(c.field));
  }
  EXPECT_EQ(journal_->Get("k-1").status().code(), absl::StatusCode::kNotFound);
}

TEST_P(JournalConformance, SecretsAreNeverStored) {
  Request r{"POST",
            "https://bob:hunter2@orders.internal/orders",
            {{"Authorization", "Bearer s3cr3t-token"},
             {"Cookie", "session=c00kie"},
             {"proxy-authorization", "Basic cHJveHk="},
             {"x-api-key", "api-k3y"},
             {"Content-Type", "application/json"}},
            "{}"};
  const WallTime now = clock_->WallNow();
  Intent intent =
      MakeIntent(r, "k-1", "https://tok@orders.internal/by-key/{key}", now, now + seconds(5));
  // What a careless caller could pass: the journal filters again by its own list.
  intent.headers = r.headers;
  ASSERT_TRUE(journal_->Record(intent).ok());
  ASSERT_TRUE(journal_
                  ->Finish("k-1", IntentState::kUnknown,
                           {0, "deadline_exceeded", "", "connect to https://bob:hunter2@x/ failed"})
                  .ok());
  const Intent i = MustGet("k-1");
  EXPECT_EQ(i.url, "https://orders.internal/orders");
  EXPECT_EQ(i.status_url_template, "https://orders.internal/by-key/{key}");
  EXPECT_THAT(i.headers, ElementsAre(Pair("Content-Type", "application/json")));
  EXPECT_EQ(i.summary.last_error, "connect to https://x/ failed");
  EXPECT_EQ(i.body, std::nullopt);  // body_cap 0: never stored
}

TEST_P(JournalConformance, BodyIsStoredOnlyWithinTheCap) {
  options_.body_cap = 8;
  journal_ = Open(options_);
  ASSERT_TRUE(journal_->Record(NewIntent("small", "12345678")).ok());
  ASSERT_TRUE(journal_->Record(NewIntent("large", "123456789")).ok());
  EXPECT_EQ(MustGet("small").body, std::optional<std::string>("12345678"));
  EXPECT_EQ(MustGet("large").body, std::nullopt);
  EXPECT_EQ(MustGet("large").body_digest, BodyDigest("123456789"));
}

TEST_P(JournalConformance, StateMovesThroughSentUnknownAndResolves) {
  ASSERT_TRUE(journal_->Record(NewIntent("k-1")).ok());
  ASSERT_TRUE(journal_->MarkSent("k-1", 1).ok());
  EXPECT_EQ(MustGet("k-1").state, IntentState::kSent);
  clock_->Advance(milliseconds(250));
  ASSERT_TRUE(journal_->MarkSent("k-1", 2).ok());
  EXPECT_EQ(MustGet("k-1").attempt, 2);
  EXPECT_EQ(MustGet("k-1").updated, clock_->WallNow());
  ASSERT_TRUE(
      journal_->Finish("k-1", IntentState::kUnknown, {0, "deadline_exceeded", "", "timeout"}).ok());
  EXPECT_EQ(MustGet("k-1").state, IntentState::kUnknown);
  // UNKNOWN again (a reconciliation that learned nothing), then a same-key resend.
  ASSERT_TRUE(
      journal_->Finish("k-1", IntentState::kUnknown, {503, "status_query_limit", "", "x"}).ok());
  ASSERT_TRUE(journal_->MarkSent("k-1", 3).ok());
  ASSERT_TRUE(
      journal_->Finish("k-1", IntentState::kSucceeded, {200, "succeeded", "status_query", ""})
          .ok());
  const Intent i = MustGet("k-1");
  EXPECT_EQ(i.state, IntentState::kSucceeded);
  EXPECT_EQ(i.attempt, 3);
  EXPECT_EQ(i.summary.http_status, 200);
  EXPECT_EQ(i.summary.stop_reason, "succeeded");
  EXPECT_EQ(i.summary.resolved_by, "status_query");
  EXPECT_EQ(i.summary.last_error, "");
}

TEST_P(JournalConformance, PendingMayEndFailedWithoutSending) {
  ASSERT_TRUE(journal_->Record(NewIntent("k-1")).ok());
  ASSERT_TRUE(journal_->Finish("k-1", IntentState::kFailed, {0, "budget_exhausted", "", ""}).ok());
  EXPECT_EQ(MustGet("k-1").state, IntentState::kFailed);
  EXPECT_EQ(MustGet("k-1").attempt, 0);
}

TEST_P(JournalConformance, IllegalTransitionsAreRefusedNamingTheField) {
  ASSERT_TRUE(journal_->Record(NewIntent("k-1")).ok());
  absl::Status s = journal_->MarkSent("k-1", 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("attempt"));
  ASSERT_TRUE(journal_->MarkSent("k-1", 2).ok());
  s = journal_->MarkSent("k-1", 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("attempt"));
  EXPECT_EQ(journal_->MarkSent("k-1", 1).code(), absl::StatusCode::kInvalidArgument);
  for (IntentState bad : {IntentState::kPending, IntentState::kSent}) {
    s = journal_->Finish("k-1", bad, {});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("outcome"));
  }
  ASSERT_TRUE(
      journal_->Finish("k-1", IntentState::kSucceeded, {201, "succeeded", "response", ""}).ok());
  s = journal_->MarkSent("k-1", 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("state"));
  for (IntentState again : {IntentState::kSucceeded, IntentState::kFailed, IntentState::kUnknown}) {
    s = journal_->Finish("k-1", again, {});
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(s.message(), HasSubstr("state"));
  }
  const Intent i = MustGet("k-1");  // the first resolution stands
  EXPECT_EQ(i.state, IntentState::kSucceeded);
  EXPECT_EQ(i.summary.http_status, 201);
  EXPECT_EQ(i.attempt, 2);
}

TEST_P(JournalConformance, UnknownKeyIsNotFoundEverywhere) {
  const auto is_not_found = [](const absl::Status& s) {
    return s.code() == absl::StatusCode::kNotFound &&
           s.message().find("idempotency_key") != absl::string_view::npos;
  };
  EXPECT_TRUE(is_not_found(journal_->Get("nope").status()));
  EXPECT_TRUE(is_not_found(journal_->MarkSent("nope", 1)));
  EXPECT_TRUE(is_not_found(journal_->Finish("nope", IntentState::kFailed, {})));
  EXPECT_TRUE(is_not_found(journal_->Claim("nope", "b", clock_->WallNow()).status()));
  EXPECT_TRUE(is_not_found(journal_->Release("nope", "b").status()));
}

TEST_P(JournalConformance, ClaimWaitsForExpiryAndReleaseFreesIt) {
  ASSERT_TRUE(journal_->Record(NewIntent("k-1", "b", seconds(10))).ok());
  const WallTime until = MustGet("k-1").claim_until;  // deadline + 2 s grace
  EXPECT_EQ(journal_->Claim("k-1", "owner-b", until + seconds(60)).value(), false);
  clock_->Advance(seconds(12) - milliseconds(1));
  EXPECT_EQ(journal_->Claim("k-1", "owner-b", until + seconds(60)).value(), false);
  clock_->Advance(milliseconds(1));  // now == claim_until: expired
  EXPECT_EQ(journal_->Claim("k-1", "owner-b", until + seconds(60)).value(), true);
  Intent i = MustGet("k-1");
  EXPECT_EQ(i.claim_owner, "owner-b");
  EXPECT_EQ(i.claim_until, until + seconds(60));
  EXPECT_EQ(journal_->Claim("k-1", "owner-a", until + seconds(61)).value(), false);
  // The holder may extend its own claim.
  EXPECT_EQ(journal_->Claim("k-1", "owner-b", until + seconds(90)).value(), true);
  EXPECT_EQ(MustGet("k-1").claim_until, until + seconds(90));
  EXPECT_EQ(journal_->Release("k-1", "owner-a").value(), false);
  EXPECT_EQ(MustGet("k-1").claim_owner, "owner-b");
  EXPECT_EQ(journal_->Release("k-1", "owner-b").value(), true);
  EXPECT_EQ(MustGet("k-1").claim_owner, "");
  EXPECT_EQ(journal_->Release("k-1", "owner-b").value(), false);
  EXPECT_EQ(journal_->Claim("k-1", "owner-a", clock_->WallNow() + seconds(1)).value(), true);
  absl::StatusOr<bool> empty = journal_->Claim("k-1", "", clock_->WallNow());
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.status().message(), HasSubstr("owner"));
  // A resolved intent cannot be claimed.
  ASSERT_TRUE(journal_->Finish("k-1", IntentState::kFailed, {}).ok());
  clock_->Advance(seconds(5));
  EXPECT_EQ(journal_->Claim("k-1", "owner-c", clock_->WallNow() + seconds(1)).value(), false);
}

TEST_P(JournalConformance, ConcurrentClaimsFromThreadsExactlyOneWins) {
  constexpr int kKeys = 20;
  constexpr int kThreads = 8;
  for (int k = 0; k < kKeys; ++k) {
    ASSERT_TRUE(journal_->Record(NewIntent("k-" + std::to_string(k), "b", seconds(1))).ok());
  }
  clock_->Advance(seconds(4));  // every Record claim has expired
  std::vector<std::atomic<int>> wins(kKeys);
  std::atomic<int> ready{0};
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();
      for (int k = 0; k < kKeys; ++k) {
        absl::StatusOr<bool> won =
            journal_->Claim("k-" + std::to_string(k), "thread-" + std::to_string(t),
                            clock_->WallNow() + seconds(60));
        if (!won.ok()) errors.fetch_add(1);
        if (won.ok() && *won) wins[static_cast<std::size_t>(k)].fetch_add(1);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  for (int k = 0; k < kKeys; ++k) {
    EXPECT_EQ(wins[static_cast<std::size_t>(k)].load(), 1) << "k-" << k;
  }
}

TEST_P(JournalConformance, ConcurrentWritersFromThreadsLoseNothing) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 40;
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int n = 0; n < kPerThread; ++n) {
        const std::string key = "t" + std::to_string(t) + "-" + std::to_string(n);
        const bool ok =
            journal_->Record(NewIntent(key)).ok() && journal_->MarkSent(key, 1).ok() &&
            journal_
                ->Finish(key, n % 2 == 0 ? IntentState::kSucceeded : IntentState::kUnknown,
                         {n % 2 == 0 ? 201 : 0, "x", "", ""})
                .ok();
        if (!ok) errors.fetch_add(1);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  UnfinishedFilter all;
  all.limit = 0;
  absl::StatusOr<std::vector<Intent>> unresolved = journal_->ListUnfinished(all);
  ASSERT_TRUE(unresolved.ok()) << unresolved.status();
  EXPECT_EQ(unresolved->size(), static_cast<std::size_t>(kThreads * kPerThread / 2));
  for (const Intent& i : *unresolved) EXPECT_EQ(i.state, IntentState::kUnknown) << i.key;
  EXPECT_EQ(MustGet("t7-38").state, IntentState::kSucceeded);
}

TEST_P(JournalConformance, ListUnfinishedFiltersAndOrders) {
  // a: created t0, deadline t0+1s (claim until t0+3s); resolved r; b: t0+1s, deadline t0+20s;
  // c: t0+2s, deadline t0+3s, claim released; d: t0+2s (same created as c), deadline t0+3s.
  const WallTime t0 = clock_->WallNow();
  ASSERT_TRUE(journal_->Record(NewIntent("a", "b", seconds(1))).ok());
  ASSERT_TRUE(journal_->Record(NewIntent("r", "b", seconds(1))).ok());
  ASSERT_TRUE(journal_->Finish("r", IntentState::kSucceeded, {}).ok());
  clock_->Advance(seconds(1));
  ASSERT_TRUE(journal_->Record(NewIntent("b", "b", seconds(19))).ok());
  clock_->Advance(seconds(1));
  ASSERT_TRUE(journal_->Record(NewIntent("d", "b", seconds(1))).ok());
  ASSERT_TRUE(journal_->Record(NewIntent("c", "b", seconds(1))).ok());
  ASSERT_TRUE(journal_->Release("c", "owner-a").value());
  ASSERT_TRUE(journal_->MarkSent("d", 1).ok());
  ASSERT_TRUE(journal_->Finish("a", IntentState::kUnknown, {}).ok());
  clock_->SetWallNow(t0 + milliseconds(3500));  // a's claim expired (t0+3s); d's lasts to t0+5s

  const auto keys = [&](const UnfinishedFilter& f) {
    std::vector<std::string> out;
    absl::StatusOr<std::vector<Intent>> list = journal_->ListUnfinished(f);
    EXPECT_TRUE(list.ok()) << list.status();
    if (list.ok()) {
      for (const Intent& i : *list) out.push_back(i.key);
    }
    return out;
  };
  UnfinishedFilter all;
  EXPECT_THAT(keys(all), ElementsAre("a", "b", "c", "d"));
  UnfinishedFilter older;
  older.older_than = milliseconds(2000);  // created at or before t0+1.5s
  EXPECT_THAT(keys(older), ElementsAre("a", "b"));
  older.older_than = milliseconds(0);
  EXPECT_THAT(keys(older), ElementsAre("a", "b", "c", "d"));
  UnfinishedFilter deadline;
  deadline.deadline_passed = true;
  EXPECT_THAT(keys(deadline), ElementsAre("a", "c", "d"));
  UnfinishedFilter unclaimed;
  unclaimed.claim_expired = true;
  EXPECT_THAT(keys(unclaimed), ElementsAre("a", "c"));
  EXPECT_THAT(keys(UnfinishedFilter::EligibleNow()), ElementsAre("a", "c"));
  EXPECT_THAT(keys(UnfinishedFilter::EligibleNow(1)), ElementsAre("a"));
  UnfinishedFilter limited;
  limited.limit = 3;
  EXPECT_THAT(keys(limited), ElementsAre("a", "b", "c"));
  UnfinishedFilter negative;
  negative.older_than = milliseconds(-1);
  absl::StatusOr<std::vector<Intent>> refused = journal_->ListUnfinished(negative);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("older_than"));
}

TEST_P(JournalConformance, PruneNeverDeletesUnresolved) {
  const WallTime t0 = clock_->WallNow();
  for (const char* k : {"pending", "sent", "unknown", "succeeded", "failed", "recent"}) {
    ASSERT_TRUE(journal_->Record(NewIntent(k, "b", seconds(1))).ok());
  }
  ASSERT_TRUE(journal_->MarkSent("sent", 1).ok());
  ASSERT_TRUE(journal_->Finish("unknown", IntentState::kUnknown, {}).ok());
  ASSERT_TRUE(journal_->Finish("succeeded", IntentState::kSucceeded, {}).ok());
  ASSERT_TRUE(journal_->Finish("failed", IntentState::kFailed, {}).ok());
  clock_->Advance(seconds(100));
  ASSERT_TRUE(journal_->Finish("recent", IntentState::kSucceeded, {}).ok());  // updated t0+100s

  absl::StatusOr<PruneResult> early = journal_->Prune(t0 + seconds(59), seconds(60));
  ASSERT_TRUE(early.ok()) << early.status();
  EXPECT_EQ(early->pruned, 0);
  EXPECT_EQ(early->kept_unresolved, 0);

  absl::StatusOr<PruneResult> r = journal_->Prune(t0 + seconds(60), seconds(60));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->pruned, 2);
  EXPECT_EQ(r->kept_unresolved, 3);
  for (const char* k : {"pending", "sent", "unknown", "recent"}) {
    EXPECT_TRUE(journal_->Get(k).ok()) << k;
  }
  for (const char* k : {"succeeded", "failed"}) {
    EXPECT_EQ(journal_->Get(k).status().code(), absl::StatusCode::kNotFound) << k;
  }
  // Retention zero still keeps every unresolved intent.
  absl::StatusOr<PruneResult> all = journal_->Prune(clock_->WallNow(), milliseconds(0));
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->pruned, 1);
  EXPECT_EQ(all->kept_unresolved, 3);
  // Once pruned, the key is free for a new intent.
  absl::StatusOr<RecordResult> reused = journal_->Record(NewIntent("succeeded", "other"));
  ASSERT_TRUE(reused.ok()) << reused.status();
  EXPECT_TRUE(reused->created);
  EXPECT_EQ(journal_->Prune(t0, milliseconds(-1)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(JournalConformance, OldestUnresolvedAgeFollowsTheOldest) {
  EXPECT_EQ(journal_->OldestUnresolvedAge().value(), std::nullopt);
  ASSERT_TRUE(journal_->Record(NewIntent("old")).ok());
  clock_->Advance(seconds(30));
  ASSERT_TRUE(journal_->Record(NewIntent("new")).ok());
  clock_->Advance(milliseconds(1500));
  EXPECT_EQ(journal_->OldestUnresolvedAge().value(), milliseconds(31500));
  ASSERT_TRUE(journal_->Finish("old", IntentState::kFailed, {}).ok());
  EXPECT_EQ(journal_->OldestUnresolvedAge().value(), milliseconds(1500));
  ASSERT_TRUE(journal_->Finish("new", IntentState::kUnknown, {}).ok());
  EXPECT_EQ(journal_->OldestUnresolvedAge().value(), milliseconds(1500));
  ASSERT_TRUE(journal_->Finish("new", IntentState::kSucceeded, {}).ok());
  EXPECT_EQ(journal_->OldestUnresolvedAge().value(), std::nullopt);
}

TEST_P(JournalConformance, OptionsAreValidated) {
  JournalOptions bad = options_;
  bad.claim_grace = milliseconds(5001);
  absl::StatusOr<std::shared_ptr<IntentJournal>> j = GetParam().open(bad, dir_.path());
  EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(j.status().message(), HasSubstr("claim_grace"));
  bad.claim_grace = milliseconds(-1);
  EXPECT_EQ(GetParam().open(bad, dir_.path()).status().code(), absl::StatusCode::kInvalidArgument);
}

// The default owner names the host, the process and this process start's
// instance, and is the journal's `Owner()`; a configured owner is used as
// given.
TEST_P(JournalConformance, DefaultOwnerNamesHostProcessAndInstance) {
  JournalOptions o = options_;
  o.owner.clear();
  std::shared_ptr<IntentJournal> j = Open(o);
  ASSERT_NE(j, nullptr);
  absl::StatusOr<RecordResult> r = j->Record(NewIntent("k-owner"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->intent.claim_owner,
              ::testing::MatchesRegex(".+:" + std::to_string(getpid()) + ":[0-9a-f]{16}"));
  EXPECT_EQ(r->intent.claim_owner, DefaultJournalOwner());
  EXPECT_EQ(j->Owner(), DefaultJournalOwner());
  o.owner = "orders-7f9c:boot-42";
  std::shared_ptr<IntentJournal> named = Open(o);
  ASSERT_NE(named, nullptr);
  EXPECT_EQ(named->Owner(), "orders-7f9c:boot-42");
}

// A process restarted with the same host name and pid (a container's pid 1)
// is another owner: it does not take the claims of the one it replaces.
TEST_P(JournalConformance, ARestartedProcessWithTheSameHostAndPidDoesNotInheritClaims) {
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  JournalOptions before = options_;
  before.owner = std::string(host) + ":" + std::to_string(getpid());  // 0.2.0's name for it
  std::shared_ptr<IntentJournal> old_process = Open(before);
  ASSERT_NE(old_process, nullptr);
  ASSERT_TRUE(old_process->Record(NewIntent("k-pod")).ok());
  // The restarted process claims under its own default owner.
  absl::StatusOr<bool> claimed = old_process->Claim("k-pod", DefaultJournalOwner(),
                                                    clock_->WallNow() + std::chrono::seconds(30));
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  EXPECT_FALSE(*claimed);
}

// Record with `attempt == 1`: the new intent is SENT with its first attempt
// marked, in the same write; the same state MarkSent(1) would have left.
TEST_P(JournalConformance, RecordWithTheFirstAttemptMarkedIsSentAtOnce) {
  const WallTime now = clock_->WallNow();
  Intent intent = NewIntent("k-1");
  intent.attempt = 1;
  absl::StatusOr<RecordResult> r = journal_->Record(intent);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->created);
  EXPECT_EQ(r->intent.state, IntentState::kSent);
  EXPECT_EQ(r->intent.attempt, 1);
  const Intent i = MustGet("k-1");
  EXPECT_EQ(i.state, IntentState::kSent);
  EXPECT_EQ(i.attempt, 1);
  EXPECT_EQ(i.claim_owner, "owner-a");
  EXPECT_EQ(i.claim_until, now + seconds(12));
  EXPECT_EQ(i.created, now);
  EXPECT_EQ(i.updated, now);
  // Attempt 1 is taken: the next mark is 2.
  absl::Status again = journal_->MarkSent("k-1", 1);
  EXPECT_EQ(again.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(again.message(), HasSubstr("attempt"));
  ASSERT_TRUE(journal_->MarkSent("k-1", 2).ok());
  UnfinishedFilter all;
  absl::StatusOr<std::vector<Intent>> unfinished = journal_->ListUnfinished(all);
  ASSERT_TRUE(unfinished.ok()) << unfinished.status();
  ASSERT_EQ(unfinished->size(), 1u);
  EXPECT_EQ((*unfinished)[0].attempt, 2);
  // A call that then sends nothing says so.
  ASSERT_TRUE(journal_->Finish("k-1", IntentState::kFailed, {0, "deadline_exceeded", "", ""}).ok());
  EXPECT_EQ(MustGet("k-1").state, IntentState::kFailed);
}

// For a key already recorded, `attempt` changes nothing: the stored intent is
// returned as it is (a PENDING one stays PENDING), and only 0 and 1 are
// accepted.
TEST_P(JournalConformance, RecordWithTheFirstAttemptMarkedLeavesAStoredIntentAsItIs) {
  ASSERT_TRUE(journal_->Record(NewIntent("k-1")).ok());
  clock_->Advance(seconds(1));
  Intent intent = NewIntent("k-1");
  intent.attempt = 1;
  absl::StatusOr<RecordResult> r = journal_->Record(intent);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->created);
  EXPECT_EQ(r->intent.state, IntentState::kPending);
  EXPECT_EQ(r->intent.attempt, 0);
  EXPECT_EQ(MustGet("k-1").state, IntentState::kPending);
  EXPECT_EQ(MustGet("k-1").updated, clock_->WallNow() - seconds(1));
  for (int bad : {-1, 2, 7}) {
    Intent b = NewIntent("k-2");
    b.attempt = bad;
    absl::StatusOr<RecordResult> refused = journal_->Record(b);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(refused.status().message(), HasSubstr("attempt")) << bad;
  }
  EXPECT_EQ(journal_->Get("k-2").status().code(), absl::StatusCode::kNotFound);
}

// A Record whose answer was lost is retried by the same owner (the same
// journal, or the same owner's next connection): the retry recognises its
// own row — not created, claimed by that owner, in the state it was written.
TEST_P(JournalConformance, ARetriedRecordRecognisesItsOwnRow) {
  Intent intent = NewIntent("k-1");
  intent.attempt = 1;
  ASSERT_TRUE(journal_->Record(intent).ok());
  std::shared_ptr<IntentJournal> reopened = GetParam().shared_storage ? Open(options_) : journal_;
  ASSERT_NE(reopened, nullptr);
  absl::StatusOr<RecordResult> retry = reopened->Record(intent);
  ASSERT_TRUE(retry.ok()) << retry.status();
  EXPECT_FALSE(retry->created);
  EXPECT_EQ(retry->intent.claim_owner, "owner-a");
  EXPECT_EQ(retry->intent.claim_owner, reopened->Owner());
  EXPECT_EQ(retry->intent.state, IntentState::kSent);
  EXPECT_EQ(retry->intent.attempt, 1);
  // Its owner may go on with it: its claim is its own.
  absl::StatusOr<bool> claimed =
      reopened->Claim("k-1", reopened->Owner(), clock_->WallNow() + seconds(30));
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  EXPECT_TRUE(*claimed);
}

// Many journals on one storage (one connection each, as many processes
// would have) claim the same expired intents at once: exactly one wins each.
TEST_P(JournalConformance, ConcurrentClaimsFromManyConnectionsExactlyOneWins) {
  if (!GetParam().shared_storage) GTEST_SKIP() << GetParam().name << ": one process only";
  constexpr int kKeys = 10;
  constexpr int kJournals = 6;
  for (int k = 0; k < kKeys; ++k) {
    ASSERT_TRUE(journal_->Record(NewIntent("k-" + std::to_string(k), "b", seconds(1))).ok());
  }
  clock_->Advance(seconds(4));  // every Record claim has expired
  std::vector<std::shared_ptr<IntentJournal>> journals;
  for (int j = 0; j < kJournals; ++j) {
    JournalOptions o = options_;
    o.owner = "host-" + std::to_string(j);
    journals.push_back(Open(o));
    ASSERT_NE(journals.back(), nullptr);
  }
  std::vector<std::atomic<int>> wins(kKeys);
  std::vector<std::string> winner(kKeys);
  std::atomic<int> ready{0};
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int j = 0; j < kJournals; ++j) {
    threads.emplace_back([&, j] {
      ready.fetch_add(1);
      while (ready.load() < kJournals) std::this_thread::yield();
      for (int k = 0; k < kKeys; ++k) {
        const std::string owner = "host-" + std::to_string(j);
        absl::StatusOr<bool> won = journals[static_cast<std::size_t>(j)]->Claim(
            "k-" + std::to_string(k), owner, clock_->WallNow() + seconds(60));
        if (!won.ok()) errors.fetch_add(1);
        if (won.ok() && *won && wins[static_cast<std::size_t>(k)].fetch_add(1) == 0) {
          winner[static_cast<std::size_t>(k)] = owner;
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  for (int k = 0; k < kKeys; ++k) {
    const std::size_t i = static_cast<std::size_t>(k);
    EXPECT_EQ(wins[i].load(), 1) << "k-" << k;
    EXPECT_EQ(MustGet("k-" + std::to_string(k)).claim_owner, winner[i]) << "k-" << k;
  }
}

// The journal that recorded an intent is gone (its process, its connection):
// its claim stays until it expires, then another journal on the same storage
// takes the intent.
TEST_P(JournalConformance, AClaimHeldByAJournalThatIsGoneExpires) {
  if (!GetParam().shared_storage) GTEST_SKIP() << GetParam().name << ": one process only";
  JournalOptions dying = options_;
  dying.owner = "owner-dies";
  std::shared_ptr<IntentJournal> gone = Open(dying);
  ASSERT_NE(gone, nullptr);
  ASSERT_TRUE(gone->Record(NewIntent("k-1", "b", seconds(3))).ok());
  ASSERT_TRUE(gone->MarkSent("k-1", 1).ok());
  gone.reset();  // its connections close; its claim (deadline + 2 s) remains
  EXPECT_EQ(MustGet("k-1").claim_owner, "owner-dies");
  const WallTime until = clock_->WallNow() + seconds(60);
  EXPECT_EQ(journal_->Claim("k-1", "owner-b", until).value(), false);
  clock_->Advance(seconds(5) - milliseconds(1));
  EXPECT_EQ(journal_->Claim("k-1", "owner-b", until).value(), false);
  UnfinishedFilter eligible = UnfinishedFilter::EligibleNow();
  EXPECT_TRUE(journal_->ListUnfinished(eligible).value().empty());
  clock_->Advance(milliseconds(1));
  ASSERT_EQ(journal_->ListUnfinished(eligible).value().size(), 1u);
  EXPECT_EQ(journal_->Claim("k-1", "owner-b", until).value(), true);
  const Intent i = MustGet("k-1");
  EXPECT_EQ(i.claim_owner, "owner-b");
  EXPECT_EQ(i.claim_until, until);
  EXPECT_EQ(i.state, IntentState::kSent);
}

// Claims are not fences (journal.h): after a takeover the stale owner's
// writes are judged by the state machine alone. Its outcome is refused once
// the new owner has resolved the intent (the first resolution stands); an
// UNKNOWN it writes before that is accepted, and the new owner's later
// resolution still wins. Its Release does not drop the new owner's claim.
TEST_P(JournalConformance, AStaleOwnersWriteAfterTakeoverIsJudgedByTheStateMachine) {
  ASSERT_TRUE(journal_->Record(NewIntent("k-1", "b", seconds(1))).ok());
  ASSERT_TRUE(journal_->MarkSent("k-1", 1).ok());
  ASSERT_TRUE(journal_->Record(NewIntent("k-2", "b", seconds(1))).ok());
  ASSERT_TRUE(journal_->MarkSent("k-2", 1).ok());
  clock_->Advance(seconds(3));  // owner-a's claims (deadline + 2 s) have expired
  const WallTime until = clock_->WallNow() + seconds(30);
  ASSERT_TRUE(journal_->Claim("k-1", "owner-b", until).value());
  ASSERT_TRUE(journal_->Claim("k-2", "owner-b", until).value());

  // k-1: the new owner resolves first; the stale owner's answer is refused.
  ASSERT_TRUE(
      journal_->Finish("k-1", IntentState::kSucceeded, {200, "succeeded", "status_query", ""})
          .ok());
  absl::Status stale =
      journal_->Finish("k-1", IntentState::kFailed, {409, "failed", "response", ""});
  EXPECT_EQ(stale.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(stale.message(), HasSubstr("state"));
  EXPECT_EQ(journal_->MarkSent("k-1", 2).code(), absl::StatusCode::kFailedPrecondition);
  Intent i = MustGet("k-1");
  EXPECT_EQ(i.state, IntentState::kSucceeded);
  EXPECT_EQ(i.summary.resolved_by, "status_query");
  EXPECT_EQ(i.attempt, 1);

  // k-2: the stale owner writes first; unresolved, it is accepted.
  ASSERT_TRUE(
      journal_->Finish("k-2", IntentState::kUnknown, {0, "deadline_exceeded", "", "t"}).ok());
  EXPECT_EQ(journal_->Release("k-2", "owner-a").value(), false);
  i = MustGet("k-2");
  EXPECT_EQ(i.state, IntentState::kUnknown);
  EXPECT_EQ(i.claim_owner, "owner-b");
  EXPECT_EQ(i.claim_until, until);
  ASSERT_TRUE(
      journal_->Finish("k-2", IntentState::kFailed, {404, "failed", "status_query", ""}).ok());
  EXPECT_EQ(MustGet("k-2").state, IntentState::kFailed);
  EXPECT_EQ(MustGet("k-2").summary.http_status, 404);
}

}  // namespace journal_test
}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// One conformance suite for every IdempotencyStore, and for the request
// helper on top of it: the rules of docs/server-contract.md, exact answers,
// an injected clock (no sleeps).

#include "store_conformance.h"

#include <atomic>
#include <map>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "nlohmann/json.hpp"
#include "saferetry/metrics.h"
#include "saferetry/server/metrics.h"

namespace saferetry {
namespace server {
namespace testkit {

using ::testing::HasSubstr;

std::string FactoryName(const ::testing::TestParamInfo<StoreFactory>& info) {
  return info.param.name;
}

void StoreConformanceTest::SetUp() {
  clock_ = std::make_shared<saferetry::testkit::FakeClock>();
  options_.lease = std::chrono::seconds(10);
  options_.retention = std::chrono::hours(1);
  std::string skip;
  auto made = GetParam().make(clock_, options_, &skip);
  if (!skip.empty()) GTEST_SKIP() << skip;
  ASSERT_TRUE(made.ok()) << made.status();
  under_test_ = *std::move(made);
  store_ = under_test_.store;
  absl::Status s = store_->database().RunInTransaction(TransactionMode::kWrite, [](Transaction& t) {
    return t.Execute("CREATE TABLE widgets (k TEXT PRIMARY KEY, n BIGINT NOT NULL)").status();
  });
  ASSERT_TRUE(s.ok()) << s;
}

void StoreConformanceTest::TearDown() {
  store_.reset();
  under_test_.store.reset();
  if (under_test_.cleanup) under_test_.cleanup();
}

std::int64_t StoreConformanceTest::Widgets() {
  std::int64_t n = -1;
  absl::Status s = store_->database().RunInTransaction(TransactionMode::kRead, [&](Transaction& t) {
    auto rows = t.Execute("SELECT COUNT(*) FROM widgets");
    if (!rows.ok()) return rows.status();
    n = (*rows)[0].Int(0);
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
  return n;
}

Effect StoreConformanceTest::InsertWidget(const std::string& k, bool* ran) {
  return [k, ran](Transaction& t) -> absl::StatusOr<StoredResponse> {
    if (ran != nullptr) *ran = true;
    auto rows = t.Execute("INSERT INTO widgets (k, n) VALUES ($1, $2)", {k, 1});
    if (!rows.ok()) return rows.status();
    return StoredResponse{201, nlohmann::json{{"widget", k}}.dump()};
  };
}

namespace {

KeyScope Scope(const std::string& key) { return {"tenant-a", "make_widget", key}; }

// --- the store -------------------------------------------------------------

TEST_P(StoreConformanceTest, BeginClaimsOnceAndCompleteCommitsEffectAndRecordTogether) {
  auto first = store_->Begin(Scope("k1"), "digest-1");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->outcome, BeginOutcome::kClaimed);
  EXPECT_EQ(first->version, 1);

  auto done = store_->Complete(Scope("k1"), 1, InsertWidget("w1"));
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(done->committed);
  EXPECT_EQ(done->response.status, 201);
  EXPECT_EQ(Widgets(), 1);

  auto record = store_->Read(Scope("k1"));
  ASSERT_TRUE(record.ok());
  ASSERT_TRUE(record->has_value());
  EXPECT_EQ((*record)->state, RecordState::kCompleted);
  EXPECT_EQ((*record)->version, 1);
  EXPECT_EQ((*record)->request_digest, "digest-1");
  EXPECT_EQ((*record)->response.body, R"({"widget":"w1"})");
  EXPECT_TRUE((*record)->completed_ms.has_value());

  auto again = store_->Begin(Scope("k1"), "digest-1");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->outcome, BeginOutcome::kReplay);
  EXPECT_EQ(again->response.status, 201);
  EXPECT_EQ(again->response.body, R"({"widget":"w1"})");
  EXPECT_EQ(Widgets(), 1);
}

TEST_P(StoreConformanceTest, KeysAreScopedByTenantAndOperation) {
  EXPECT_EQ(store_->Begin({"a", "op", "k"}, "d")->outcome, BeginOutcome::kClaimed);
  EXPECT_EQ(store_->Begin({"b", "op", "k"}, "d")->outcome, BeginOutcome::kClaimed);
  EXPECT_EQ(store_->Begin({"a", "op2", "k"}, "d")->outcome, BeginOutcome::kClaimed);
  EXPECT_EQ(store_->Begin({"a", "op", "k"}, "d")->outcome, BeginOutcome::kInProgress);
}

TEST_P(StoreConformanceTest, NonSuccessFinalAnswersAreStoredAndReplayed) {
  ASSERT_EQ(store_->Begin(Scope("bad"), "d")->outcome, BeginOutcome::kClaimed);
  auto done = store_->Complete(Scope("bad"), 1, [](Transaction&) -> absl::StatusOr<StoredResponse> {
    return StoredResponse{400, R"({"error":"invalid"})"};
  });
  ASSERT_TRUE(done.ok() && done->committed);
  auto replay = store_->Begin(Scope("bad"), "d");
  EXPECT_EQ(replay->outcome, BeginOutcome::kReplay);
  EXPECT_EQ(replay->response.status, 400);
  EXPECT_EQ(replay->response.body, R"({"error":"invalid"})");
}

TEST_P(StoreConformanceTest, DigestMismatchIsAConflictWhileProcessingAndAfterCompletion) {
  ASSERT_EQ(store_->Begin(Scope("k"), "d1")->outcome, BeginOutcome::kClaimed);
  EXPECT_EQ(store_->Begin(Scope("k"), "d2")->outcome, BeginOutcome::kConflictingPayload);
  // Even with the lease expired, another payload never takes over.
  clock_->Advance(std::chrono::seconds(10));
  EXPECT_EQ(store_->Begin(Scope("k"), "d2")->outcome, BeginOutcome::kConflictingPayload);
  ASSERT_TRUE(store_->Complete(Scope("k"), 1, InsertWidget("w"))->committed);
  EXPECT_EQ(store_->Begin(Scope("k"), "d2")->outcome, BeginOutcome::kConflictingPayload);
}

TEST_P(StoreConformanceTest, LeaseExpiryLetsASameDigestRequestTakeOverAndFencesTheStaleWriter) {
  ASSERT_EQ(store_->Begin(Scope("k"), "d")->outcome, BeginOutcome::kClaimed);
  clock_->Advance(std::chrono::milliseconds(9999));
  EXPECT_EQ(store_->Begin(Scope("k"), "d")->outcome, BeginOutcome::kInProgress);
  clock_->Advance(std::chrono::milliseconds(1));

  auto takeover = store_->Begin(Scope("k"), "d");
  ASSERT_TRUE(takeover.ok());
  EXPECT_EQ(takeover->outcome, BeginOutcome::kTakenOver);
  EXPECT_EQ(takeover->version, 2);
  ASSERT_TRUE(takeover->previous.has_value());
  EXPECT_EQ(takeover->previous->version, 1);
  // The new owner's lease runs from the takeover.
  EXPECT_EQ(store_->Begin(Scope("k"), "d")->outcome, BeginOutcome::kInProgress);

  bool stale_ran = false;
  auto stale = store_->Complete(Scope("k"), 1, InsertWidget("stale", &stale_ran));
  ASSERT_TRUE(stale.ok()) << stale.status();
  EXPECT_FALSE(stale->committed);
  EXPECT_FALSE(stale_ran);
  ASSERT_TRUE(stale->current.has_value());
  EXPECT_EQ(stale->current->version, 2);
  EXPECT_EQ(stale->current->state, RecordState::kProcessing);

  auto fresh = store_->Complete(Scope("k"), 2, InsertWidget("fresh"));
  ASSERT_TRUE(fresh.ok() && fresh->committed);
  EXPECT_EQ(Widgets(), 1);
  // The stale worker finishing last sees the new owner's answer.
  auto late = store_->Complete(Scope("k"), 1, InsertWidget("stale"));
  EXPECT_FALSE(late->committed);
  EXPECT_EQ(late->current->state, RecordState::kCompleted);
  EXPECT_EQ(late->current->response.body, R"({"widget":"fresh"})");
}

TEST_P(StoreConformanceTest, AnExpiredLeaseAloneDoesNotCancelTheWorker) {
  ASSERT_EQ(store_->Begin(Scope("k"), "d")->outcome, BeginOutcome::kClaimed);
  clock_->Advance(std::chrono::minutes(5));
  auto done = store_->Complete(Scope("k"), 1, InsertWidget("w"));
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(done->committed);
  EXPECT_EQ(Widgets(), 1);
}

TEST_P(StoreConformanceTest, AFailedEffectRollsBackTheEffectAndKeepsTheRecordProcessing) {
  ASSERT_EQ(store_->Begin(Scope("k"), "d")->outcome, BeginOutcome::kClaimed);
  auto failed =
      store_->Complete(Scope("k"), 1, [](Transaction& t) -> absl::StatusOr<StoredResponse> {
        auto r = t.Execute("INSERT INTO widgets (k, n) VALUES ($1, $2)", {"half", 1});
        if (!r.ok()) return r.status();
        return absl::UnavailableError("payment provider down");
      });
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Widgets(), 0);
  EXPECT_EQ((*store_->Read(Scope("k")))->state, RecordState::kProcessing);
  // The same owner may try again.
  EXPECT_TRUE(store_->Complete(Scope("k"), 1, InsertWidget("w"))->committed);
}

TEST_P(StoreConformanceTest, AUniqueViolationInTheEffectIsAlreadyExistsAndRollsBack) {
  ASSERT_TRUE(store_->database()
                  .RunInTransaction(
                      TransactionMode::kWrite,
                      [](Transaction& t) {
                        return t.Execute("INSERT INTO widgets (k, n) VALUES ('w', 1)").status();
                      })
                  .ok());
  ASSERT_EQ(store_->Begin(Scope("k"), "d")->outcome, BeginOutcome::kClaimed);
  auto dup = store_->Complete(Scope("k"), 1, InsertWidget("w"));
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists) << dup.status();
  EXPECT_EQ((*store_->Read(Scope("k")))->state, RecordState::kProcessing);
}

TEST_P(StoreConformanceTest, TakeOverNeedsAnExpiredLeaseAndTheObservedVersion) {
  ASSERT_EQ(store_->Begin(Scope("k"), "d")->outcome, BeginOutcome::kClaimed);
  EXPECT_EQ(*store_->TakeOver(Scope("k"), 1), std::nullopt);  // lease running
  clock_->Advance(std::chrono::seconds(10));
  EXPECT_EQ(*store_->TakeOver(Scope("k"), 7), std::nullopt);  // not the version seen
  EXPECT_EQ(*store_->TakeOver(Scope("k"), 1), std::optional<std::int64_t>(2));
  EXPECT_EQ(*store_->TakeOver(Scope("k"), 1), std::nullopt);  // already taken
  EXPECT_EQ(*store_->TakeOver(Scope("never"), 1), std::nullopt);
  EXPECT_FALSE(store_->Complete(Scope("k"), 1, InsertWidget("w"))->committed);
}

TEST_P(StoreConformanceTest, FenceOfANeverSeenKeyRecordsItAndRefusesLaterRequests) {
  auto fenced = store_->Fence(Scope("ghost"), std::nullopt);
  ASSERT_TRUE(fenced.ok()) << fenced.status();
  EXPECT_EQ(fenced->outcome, FenceOutcome::kFenced);
  EXPECT_TRUE(fenced->newly_fenced);
  EXPECT_EQ(fenced->record.state, RecordState::kFenced);

  auto again = store_->Fence(Scope("ghost"), std::nullopt);  // idempotent
  EXPECT_EQ(again->outcome, FenceOutcome::kFenced);
  EXPECT_FALSE(again->newly_fenced);

  EXPECT_EQ(store_->Begin(Scope("ghost"), "d")->outcome, BeginOutcome::kFenced);
  EXPECT_EQ(store_->Begin(Scope("ghost"), "other")->outcome, BeginOutcome::kFenced);
  EXPECT_EQ((*store_->Read(Scope("ghost")))->state, RecordState::kFenced);
}

TEST_P(StoreConformanceTest, FenceOfAnExpiredLeaseBumpsTheVersionSoTheStaleWorkerCannotComplete) {
  ASSERT_EQ(store_->Begin(Scope("k"), "d")->outcome, BeginOutcome::kClaimed);
  auto running = store_->Fence(Scope("k"), std::nullopt);
  EXPECT_EQ(running->outcome, FenceOutcome::kProcessing);
  EXPECT_FALSE(running->newly_fenced);

  clock_->Advance(std::chrono::seconds(10));
  auto fenced = store_->Fence(Scope("k"), std::nullopt);
  ASSERT_TRUE(fenced.ok());
  EXPECT_EQ(fenced->outcome, FenceOutcome::kFenced);
  EXPECT_TRUE(fenced->newly_fenced);
  EXPECT_EQ(fenced->record.version, 2);

  bool ran = false;
  auto stale = store_->Complete(Scope("k"), 1, InsertWidget("w", &ran));
  EXPECT_FALSE(stale->committed);
  EXPECT_FALSE(ran);
  EXPECT_EQ(stale->current->state, RecordState::kFenced);
  EXPECT_EQ(Widgets(), 0);
  EXPECT_EQ(store_->Begin(Scope("k"), "d")->outcome, BeginOutcome::kFenced);
}

TEST_P(StoreConformanceTest, FenceByTheOwnerAfterATakeOverNeedsNoExpiredLease) {
  ASSERT_EQ(store_->Begin(Scope("k"), "d")->outcome, BeginOutcome::kClaimed);
  clock_->Advance(std::chrono::seconds(10));
  auto owned = store_->TakeOver(Scope("k"), 1);
  ASSERT_EQ(*owned, std::optional<std::int64_t>(2));
  EXPECT_EQ(store_->Fence(Scope("k"), 1)->outcome, FenceOutcome::kProcessing);  // not the owner
  auto fenced = store_->Fence(Scope("k"), 2);
  EXPECT_EQ(fenced->outcome, FenceOutcome::kFenced);
  EXPECT_EQ(fenced->record.version, 3);
}

TEST_P(StoreConformanceTest, FenceLeavesCompletedAndExpiredKeysAlone) {
  ASSERT_EQ(store_->Begin(Scope("done"), "d")->outcome, BeginOutcome::kClaimed);
  ASSERT_TRUE(store_->Complete(Scope("done"), 1, InsertWidget("w"))->committed);
  auto completed = store_->Fence(Scope("done"), std::nullopt);
  EXPECT_EQ(completed->outcome, FenceOutcome::kCompleted);
  EXPECT_EQ(completed->record.response.status, 201);
  EXPECT_EQ(store_->Begin(Scope("done"), "d")->outcome, BeginOutcome::kReplay);

  clock_->Advance(std::chrono::hours(1));
  ASSERT_EQ(*store_->Reap(), 1);
  auto expired = store_->Fence(Scope("done"), std::nullopt);
  EXPECT_EQ(expired->outcome, FenceOutcome::kExpired);
  EXPECT_EQ(expired->record.response.status, 201);
  EXPECT_EQ(store_->Begin(Scope("done"), "d")->outcome, BeginOutcome::kExpired);
}

TEST_P(StoreConformanceTest, RetentionReapsOnlyOldCompletedRecordsIntoTombstones) {
  ASSERT_EQ(store_->Begin(Scope("done"), "d")->outcome, BeginOutcome::kClaimed);
  ASSERT_TRUE(store_->Complete(Scope("done"), 1, InsertWidget("w"))->committed);
  ASSERT_EQ(store_->Begin(Scope("held"), "d")->outcome, BeginOutcome::kClaimed);
  ASSERT_EQ(store_->Fence(Scope("fenced"), std::nullopt)->outcome, FenceOutcome::kFenced);

  clock_->Advance(std::chrono::minutes(59));
  EXPECT_EQ(*store_->Reap(), 0);
  EXPECT_EQ(store_->Begin(Scope("done"), "d")->outcome, BeginOutcome::kReplay);

  clock_->Advance(std::chrono::hours(100));
  EXPECT_EQ(*store_->Reap(), 1);
  EXPECT_EQ(*store_->Reap(), 0);
  auto tomb = store_->Read(Scope("done"));
  ASSERT_TRUE(tomb.ok() && tomb->has_value());
  EXPECT_EQ((*tomb)->state, RecordState::kExpired);
  EXPECT_EQ((*tomb)->response.status, 201);
  EXPECT_EQ((*tomb)->request_digest, "d");
  // Never a new execution for a reaped key, whatever the payload.
  EXPECT_EQ(store_->Begin(Scope("done"), "d")->outcome, BeginOutcome::kExpired);
  EXPECT_EQ(store_->Begin(Scope("done"), "other")->outcome, BeginOutcome::kExpired);
  // Unresolved and fenced keys are never reaped, however old.
  EXPECT_EQ((*store_->Read(Scope("held")))->state, RecordState::kProcessing);
  EXPECT_EQ((*store_->Read(Scope("fenced")))->state, RecordState::kFenced);
  EXPECT_EQ(Widgets(), 1);  // the effect outlives its key
}

TEST_P(StoreConformanceTest, ReadReportsTheLeaseByTheStoreClock) {
  EXPECT_EQ(*store_->Read(Scope("none")), std::nullopt);
  ASSERT_EQ(store_->Begin(Scope("k"), "d")->outcome, BeginOutcome::kClaimed);
  EXPECT_FALSE((*store_->Read(Scope("k")))->lease_expired);
  clock_->Advance(std::chrono::seconds(10));
  EXPECT_TRUE((*store_->Read(Scope("k")))->lease_expired);
}

TEST_P(StoreConformanceTest, ProcessOnceRunsAMessageOnceAndRollsBackWithItsEffect) {
  auto effect = [](Transaction& t) {
    return t.Execute("INSERT INTO widgets (k, n) VALUES ('from-message', 1)").status();
  };
  auto failing = [](Transaction& t) -> absl::Status {
    auto r = t.Execute("INSERT INTO widgets (k, n) VALUES ('from-message', 1)");
    if (!r.ok()) return r.status();
    return absl::InternalError("crash after the write");
  };
  EXPECT_EQ(store_->ProcessOnce("stock", "m-1", failing).status().code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(Widgets(), 0);  // the id was not recorded either
  EXPECT_EQ(*store_->ProcessOnce("stock", "m-1", effect), true);
  EXPECT_EQ(*store_->ProcessOnce("stock", "m-1", effect), false);
  EXPECT_EQ(*store_->ProcessOnce("mail", "m-1", [](Transaction&) { return absl::OkStatus(); }),
            true);  // ids are per consumer
  EXPECT_EQ(Widgets(), 1);
  EXPECT_EQ(store_->ProcessOnce("", "m", effect).status().message(),
            "consumer: must be 1 to 255 bytes");
}

TEST_P(StoreConformanceTest, ASecondInstanceSharesTheRecordsAndTheSchema) {
  auto second = under_test_.open_again();
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ(store_->Begin(Scope("k"), "d")->outcome, BeginOutcome::kClaimed);
  EXPECT_EQ((*second)->Begin(Scope("k"), "d")->outcome, BeginOutcome::kInProgress);
  ASSERT_TRUE((*second)->Complete(Scope("k"), 1, InsertWidget("w"))->committed);
  EXPECT_EQ(store_->Begin(Scope("k"), "d")->outcome, BeginOutcome::kReplay);
  absl::Status s = store_->database().RunInTransaction(TransactionMode::kRead, [](Transaction& t) {
    auto rows = t.Execute("SELECT COUNT(*), MAX(version) FROM saferetry_schema_version");
    if (!rows.ok()) return rows.status();
    EXPECT_EQ((*rows)[0].Int(0), kStoreSchemaVersion);  // one row per migration, once
    EXPECT_EQ((*rows)[0].Int(1), kStoreSchemaVersion);
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
}

TEST_P(StoreConformanceTest, ScopeFieldsAreValidated) {
  EXPECT_EQ(store_->Begin({"", "op", "k"}, "d").status().message(),
            "scope.tenant: must be 1 to 255 bytes, got 0");
  EXPECT_EQ(store_->Read({"t", "op", std::string(256, 'k')}).status().message(),
            "scope.key: must be 1 to 255 bytes, got 256");
}

TEST_P(StoreConformanceTest, ConcurrentSameKeyBeginsHaveExactlyOneWinner) {
  constexpr int kThreads = 12;
  constexpr int kRounds = 5;
  for (int round = 0; round < kRounds; ++round) {
    const KeyScope scope = Scope("race-" + std::to_string(round));
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<BeginOutcome> outcomes(kThreads);
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back([&, i] {
        ready++;
        while (!go.load()) std::this_thread::yield();
        auto r = store_->Begin(scope, "d");
        EXPECT_TRUE(r.ok()) << r.status();
        outcomes[i] = r.ok() ? r->outcome : BeginOutcome::kExpired;
      });
    }
    while (ready.load() < kThreads) std::this_thread::yield();
    go = true;
    for (auto& t : threads) t.join();
    int claimed = 0, in_progress = 0;
    for (BeginOutcome o : outcomes) {
      claimed += o == BeginOutcome::kClaimed;
      in_progress += o == BeginOutcome::kInProgress;
    }
    EXPECT_EQ(claimed, 1) << "round " << round;
    EXPECT_EQ(in_progress, kThreads - 1) << "round " << round;
  }
}

TEST_P(StoreConformanceTest, ConcurrentWorkersOnManyKeysCompleteEachKeyExactlyOnce) {
  constexpr int kThreads = 8;
  constexpr int kKeys = 25;
  std::atomic<int> executed{0}, replayed{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < kKeys; ++k) {
        const std::string key = "key-" + std::to_string((k + 3 * i) % kKeys);
        // Every worker insists until the key has an answer (the owner is
        // completing it; bounded at ~10 s so a bug cannot hang the suite).
        for (int attempt = 0; attempt < 10000; ++attempt) {
          auto begun = store_->Begin(Scope(key), "d");
          ASSERT_TRUE(begun.ok()) << begun.status();
          if (begun->outcome == BeginOutcome::kReplay) {
            replayed++;
            break;
          }
          if (begun->outcome != BeginOutcome::kClaimed) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
            continue;
          }
          auto done = store_->Complete(Scope(key), begun->version, InsertWidget(key));
          ASSERT_TRUE(done.ok()) << done.status();
          ASSERT_TRUE(done->committed);
          executed++;
          break;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(executed.load(), kKeys);
  EXPECT_EQ(replayed.load(), kThreads * kKeys - kKeys);
  EXPECT_EQ(Widgets(), kKeys);
}

TEST_P(StoreConformanceTest, ConcurrentRedeliveriesOfOneMessageRunItOnce) {
  constexpr int kThreads = 8;
  std::atomic<int> ran{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      for (int m = 0; m < 10; ++m) {
        const std::string id = "msg-" + std::to_string(m);
        auto r = store_->ProcessOnce("stock", id, [&](Transaction& t) {
          return t.Execute("INSERT INTO widgets (k, n) VALUES ($1, 1)", {id}).status();
        });
        ASSERT_TRUE(r.ok()) << r.status();
        if (*r) ran++;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ran.load(), 10);
  EXPECT_EQ(Widgets(), 10);
}

// --- the request helper on this store ---------------------------------------

class HandlerOn {
 public:
  HandlerOn(std::shared_ptr<IdempotencyStore> store,
            std::shared_ptr<saferetry::testkit::FakeClock> clock, TakeoverHook hook = nullptr,
            std::chrono::milliseconds expected_work = std::chrono::milliseconds(100)) {
    HandlerOptions options;
    options.operation = "make_widget";
    options.expected_work = expected_work;
    options.takeover_hook = std::move(hook);
    options.clock = std::move(clock);
    auto h = IdempotentHandler::Create(std::move(store), std::move(options));
    EXPECT_TRUE(h.ok()) << h.status();
    handler = *std::move(h);
  }
  std::unique_ptr<IdempotentHandler> handler;
};

WriteRequest Post(const std::string& key, const std::string& body = R"({"n":1})") {
  WriteRequest w;
  w.method = "POST";
  w.path = "/widgets";
  w.body = body;
  if (!key.empty()) w.idempotency_key = key;
  w.tenant = "tenant-a";
  return w;
}

StatusQueryRequest Query(const std::string& key, bool fence) {
  StatusQueryRequest q;
  q.key = key;
  q.tenant = "tenant-a";
  if (fence) q.fence = "true";
  return q;
}

std::string ErrorOf(const Answer& a) { return nlohmann::json::parse(a.body).value("error", ""); }

TEST_P(StoreConformanceTest, HandlerRefusesBadRequestsBeforeRecordingAnything) {
  HandlerOn h(store_, clock_);
  Answer missing = h.handler->HandleWrite(Post(""), {nullptr, InsertWidget("w")});
  EXPECT_EQ(missing.status, 400);
  EXPECT_EQ(ErrorOf(missing), "missing_idempotency_key");
  Answer invalid = h.handler->HandleWrite(Post("bad key"), {nullptr, InsertWidget("w")});
  EXPECT_EQ(invalid.status, 400);
  EXPECT_EQ(ErrorOf(invalid), "invalid_idempotency_key");
  WriteRequest garbage = Post("k");
  garbage.deadline = "soon";
  Answer bad_deadline = h.handler->HandleWrite(garbage, {nullptr, InsertWidget("w")});
  EXPECT_EQ(bad_deadline.status, 400);
  EXPECT_EQ(ErrorOf(bad_deadline), "invalid_deadline");
  EXPECT_THAT(bad_deadline.body, HasSubstr("X-Request-Timeout-Ms"));
  EXPECT_EQ(*store_->Read(Scope("k")), std::nullopt);
  EXPECT_EQ(h.handler->metrics().rejected_bad_request, 3);
}

TEST_P(StoreConformanceTest, HandlerRejectsATooShortDeadlineWith503RejectedAndRecordsNothing) {
  HandlerOn h(store_, clock_);
  for (const char* ms : {"0", "99"}) {
    WriteRequest w = Post("k");
    w.deadline = ms;
    bool ran = false;
    Answer a = h.handler->HandleWrite(w, {nullptr, InsertWidget("w", &ran)});
    EXPECT_EQ(a.status, 503) << ms;
    EXPECT_EQ(a.Header("Idempotency-Key-State"), "rejected");
    EXPECT_EQ(ErrorOf(a), "deadline_too_short");
    EXPECT_FALSE(ran);
  }
  EXPECT_EQ(*store_->Read(Scope("k")), std::nullopt);
  EXPECT_EQ(h.handler->metrics().rejected_before_work, 2);
  // Nothing was recorded: the same key works once there is time.
  WriteRequest enough = Post("k");
  enough.deadline = "100";
  Answer a = h.handler->HandleWrite(enough, {nullptr, InsertWidget("w")});
  EXPECT_EQ(a.status, 201);
  EXPECT_EQ(a.Header("Idempotent-Replayed"), "");
  EXPECT_EQ(RejectedBeforeWork("overloaded", "shedding").Header("Idempotency-Key-State"),
            "rejected");
}

// The store's database, made unreachable on demand: every transaction fails
// with Unavailable before it starts, as a refused connection does.
class SwitchableDatabase final : public SqlDatabase {
 public:
  explicit SwitchableDatabase(SqlDatabase& real) : real_(real) {}
  absl::Status RunInTransaction(TransactionMode mode,
                                const std::function<absl::Status(Transaction&)>& body) override {
    if (down) return absl::UnavailableError("conninfo: cannot connect: connection refused");
    return real_.RunInTransaction(mode, body);
  }
  SqlDialect dialect() const override { return real_.dialect(); }
  std::atomic<bool> down{false};

 private:
  SqlDatabase& real_;
};

TEST_P(StoreConformanceTest, HandlerAnswers503RejectedWhenTheDatabaseIsDownBeforeTheClaim) {
  auto db = std::make_shared<SwitchableDatabase>(store_->database());
  auto made = MakeIdempotencyStore(db, options_, clock_);
  ASSERT_TRUE(made.ok()) << made.status();
  std::shared_ptr<IdempotencyStore> switchable = *std::move(made);
  HandlerOn h(switchable, clock_);
  db->down = true;
  bool ran = false, before = false;
  Answer a = h.handler->HandleWrite(
      Post("k"), {[&](const KeyScope&, std::int64_t) { before = true; }, InsertWidget("w", &ran)});
  EXPECT_EQ(a.status, 503);
  EXPECT_EQ(a.Header("Idempotency-Key-State"), "rejected");
  EXPECT_EQ(ErrorOf(a), "storage_unavailable");
  EXPECT_FALSE(before);
  EXPECT_FALSE(ran);
  Answer q = h.handler->HandleStatusQuery(Query("k", true));
  EXPECT_EQ(q.status, 503);
  EXPECT_EQ(q.Header("Idempotency-Key-State"), "rejected");
  EXPECT_EQ(h.handler->metrics().storage_unavailable, 2);
  EXPECT_EQ(h.handler->metrics().storage_errors, 0);
  db->down = false;
  EXPECT_EQ(*store_->Read(Scope("k")), std::nullopt);  // nothing was recorded
  // Back up: the same key is processed once.
  Answer back = h.handler->HandleWrite(Post("k"), {nullptr, InsertWidget("w")});
  EXPECT_EQ(back.status, 201);
  EXPECT_EQ(Widgets(), 1);
}

TEST_P(StoreConformanceTest, HandlerAnswers500NotRejectedWhenTheDatabaseFailsAfterTheClaim) {
  auto db = std::make_shared<SwitchableDatabase>(store_->database());
  auto made = MakeIdempotencyStore(db, options_, clock_);
  ASSERT_TRUE(made.ok()) << made.status();
  std::shared_ptr<IdempotencyStore> switchable = *std::move(made);
  HandlerOn h(switchable, clock_);
  // The work ran (it may have called someone); the completion cannot reach
  // the database: never "rejected".
  Answer a = h.handler->HandleWrite(
      Post("k"), {[&](const KeyScope&, std::int64_t) { db->down = true; }, InsertWidget("w")});
  EXPECT_EQ(a.status, 500);
  EXPECT_EQ(a.Header("Idempotency-Key-State"), "");
  EXPECT_EQ(ErrorOf(a), "storage_error");
  EXPECT_EQ(h.handler->metrics().storage_errors, 1);
  db->down = false;
  EXPECT_EQ((*store_->Read(Scope("k")))->state, RecordState::kProcessing);
}

TEST_P(StoreConformanceTest, HandlerTakeoverCheckFailureIs503RejectedOnWritesAndStatusQueries) {
  HandlerOn h(
      store_, clock_,
      [&](const KeyScope&, const KeyRecord&) -> absl::StatusOr<std::optional<StoredResponse>> {
        return absl::UnavailableError("payment channel unreachable");
      });
  const std::string digest = RequestDigest("POST", "/widgets", R"({"n":1})");
  ASSERT_EQ(store_->Begin(Scope("w"), digest)->outcome, BeginOutcome::kClaimed);
  ASSERT_EQ(store_->Begin(Scope("q"), digest)->outcome, BeginOutcome::kClaimed);
  clock_->Advance(std::chrono::seconds(10));
  bool ran = false;
  Answer write = h.handler->HandleWrite(Post("w"), {nullptr, InsertWidget("w", &ran)});
  EXPECT_EQ(write.status, 503);
  EXPECT_EQ(write.Header("Idempotency-Key-State"), "rejected");
  EXPECT_EQ(ErrorOf(write), "takeover_check_failed");
  EXPECT_FALSE(ran);
  Answer query = h.handler->HandleStatusQuery(Query("q", true));
  EXPECT_EQ(query.status, 503);
  EXPECT_EQ(query.Header("Idempotency-Key-State"), "rejected");
  EXPECT_EQ(ErrorOf(query), "takeover_check_failed");
  EXPECT_EQ((*store_->Read(Scope("q")))->state, RecordState::kProcessing);  // not fenced
  EXPECT_EQ(Widgets(), 0);
}

TEST_P(StoreConformanceTest, HandlerReplaysEveryFinalAnswerWithTheMarker) {
  HandlerOn h(store_, clock_);
  Answer created = h.handler->HandleWrite(Post("ok"), {nullptr, InsertWidget("w")});
  EXPECT_EQ(created.status, 201);
  Answer replay = h.handler->HandleWrite(Post("ok"), {nullptr, InsertWidget("w")});
  EXPECT_EQ(replay.status, 201);
  EXPECT_EQ(replay.body, created.body);
  EXPECT_EQ(replay.Header("Idempotent-Replayed"), "true");

  Effect reject = [](Transaction&) -> absl::StatusOr<StoredResponse> {
    return StoredResponse{402, R"({"error":"payment_required"})"};
  };
  EXPECT_EQ(h.handler->HandleWrite(Post("no"), {nullptr, reject}).status, 402);
  Answer again = h.handler->HandleWrite(Post("no"), {nullptr, reject});
  EXPECT_EQ(again.status, 402);
  EXPECT_EQ(again.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(Widgets(), 1);

  Answer other = h.handler->HandleWrite(Post("ok", R"({"n":2})"), {nullptr, InsertWidget("x")});
  EXPECT_EQ(other.status, 422);
  EXPECT_EQ(ErrorOf(other), "idempotency_key_reused");
  EXPECT_EQ(other.Header("Idempotent-Replayed"), "");
  HandlerMetrics m = h.handler->metrics();
  EXPECT_EQ(m.executed, 2);
  EXPECT_EQ(m.replayed, 2);
  EXPECT_EQ(m.conflicting_payload, 1);
}

TEST_P(StoreConformanceTest, HandlerStatusQueryTableWithoutFence) {
  HandlerOn h(store_, clock_);
  Answer unknown = h.handler->HandleStatusQuery(Query("k", false));
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(unknown.Header("Idempotency-Key-State"), "unknown");
  EXPECT_EQ(*store_->Read(Scope("k")), std::nullopt);  // a plain query records nothing

  const std::string digest = RequestDigest("POST", "/widgets", R"({"n":1})");
  ASSERT_EQ(store_->Begin(Scope("k"), digest)->outcome, BeginOutcome::kClaimed);
  Answer processing = h.handler->HandleStatusQuery(Query("k", false));
  EXPECT_EQ(processing.status, 409);
  EXPECT_EQ(processing.Header("Idempotency-Key-State"), "processing");
  Answer busy = h.handler->HandleWrite(Post("k"), {nullptr, InsertWidget("w")});
  EXPECT_EQ(busy.status, 409);
  EXPECT_EQ(busy.Header("Idempotency-Key-State"), "processing");

  clock_->Advance(std::chrono::seconds(10));
  Answer abandoned = h.handler->HandleStatusQuery(Query("k", false));
  EXPECT_EQ(abandoned.status, 404);
  EXPECT_EQ(abandoned.Header("Idempotency-Key-State"), "abandoned");

  // A resend takes over and completes.
  Answer taken = h.handler->HandleWrite(Post("k"), {nullptr, InsertWidget("w")});
  EXPECT_EQ(taken.status, 201);
  EXPECT_EQ(h.handler->metrics().takeovers, 1);
  Answer found = h.handler->HandleStatusQuery(Query("k", true));
  EXPECT_EQ(found.status, 200);
  EXPECT_EQ(found.Header("Idempotency-Key-State"), "completed");
  EXPECT_EQ(found.body, taken.body);

  clock_->Advance(std::chrono::hours(2));
  ASSERT_EQ(*store_->Reap(), 1);
  Answer expired = h.handler->HandleStatusQuery(Query("k", true));
  EXPECT_EQ(expired.status, 404);
  EXPECT_EQ(expired.Header("Idempotency-Key-State"), "expired");
  Answer late = h.handler->HandleWrite(Post("k"), {nullptr, InsertWidget("w2")});
  EXPECT_EQ(late.status, 410);
  EXPECT_EQ(late.Header("Idempotency-Key-State"), "expired");
  EXPECT_EQ(ErrorOf(late), "idempotency_key_expired");
}

TEST_P(StoreConformanceTest, HandlerFenceSettlesANeverSeenKeyAndRefusesItLater) {
  HandlerOn h(store_, clock_);
  Answer fenced = h.handler->HandleStatusQuery(Query("ghost", true));
  EXPECT_EQ(fenced.status, 404);
  EXPECT_EQ(fenced.Header("Idempotency-Key-State"), "fenced");
  Answer again = h.handler->HandleStatusQuery(Query("ghost", true));
  EXPECT_EQ(again.status, 404);
  EXPECT_EQ(again.Header("Idempotency-Key-State"), "fenced");
  Answer plain = h.handler->HandleStatusQuery(Query("ghost", false));
  EXPECT_EQ(plain.Header("Idempotency-Key-State"), "fenced");

  bool ran = false;
  Answer refused = h.handler->HandleWrite(Post("ghost"), {nullptr, InsertWidget("w", &ran)});
  EXPECT_EQ(refused.status, 410);
  EXPECT_EQ(refused.Header("Idempotency-Key-State"), "fenced");
  EXPECT_EQ(refused.body, R"({"error":"idempotency_key_fenced","message":)"
                          R"("Idempotency-Key: a status query settled this key as never )"
                          R"(executed; it will not be executed"})");
  EXPECT_FALSE(ran);
  EXPECT_EQ(h.handler->metrics().fences, 1);
  EXPECT_EQ(h.handler->metrics().fenced_refused, 1);
}

TEST_P(StoreConformanceTest, HandlerFenceLeavesARunningLeaseAndACompletedKeyAlone) {
  HandlerOn h(store_, clock_);
  const std::string digest = RequestDigest("POST", "/widgets", R"({"n":1})");
  ASSERT_EQ(store_->Begin(Scope("run"), digest)->outcome, BeginOutcome::kClaimed);
  Answer running = h.handler->HandleStatusQuery(Query("run", true));
  EXPECT_EQ(running.status, 409);
  EXPECT_EQ(running.Header("Idempotency-Key-State"), "processing");
  EXPECT_EQ((*store_->Read(Scope("run")))->state, RecordState::kProcessing);

  Effect reject = [](Transaction&) -> absl::StatusOr<StoredResponse> {
    return StoredResponse{400, R"({"error":"invalid"})"};
  };
  ASSERT_EQ(h.handler->HandleWrite(Post("bad"), {nullptr, reject}).status, 400);
  Answer completed = h.handler->HandleStatusQuery(Query("bad", true));
  EXPECT_EQ(completed.status, 404);
  EXPECT_EQ(completed.Header("Idempotency-Key-State"), "completed");
  EXPECT_EQ(nlohmann::json::parse(completed.body)["final_status"], 400);
  EXPECT_EQ(h.handler->metrics().fences, 0);
}

TEST_P(StoreConformanceTest, HandlerFenceOfAnExpiredLeaseRefusesTheStaleWorkerWith410) {
  HandlerOn h(store_, clock_);
  bool ran = false;
  Answer fence_answer;
  // The worker stalls after its claim; meanwhile its lease runs out and a
  // status query fences the key.
  Work work{[&](const KeyScope&, std::int64_t) {
              clock_->Advance(std::chrono::seconds(10));
              fence_answer = h.handler->HandleStatusQuery(Query("k", true));
            },
            InsertWidget("w", &ran)};
  Answer stale = h.handler->HandleWrite(Post("k"), work);
  EXPECT_EQ(fence_answer.status, 404);
  EXPECT_EQ(fence_answer.Header("Idempotency-Key-State"), "fenced");
  EXPECT_EQ(stale.status, 410);
  EXPECT_EQ(stale.Header("Idempotency-Key-State"), "fenced");
  EXPECT_FALSE(ran);
  EXPECT_EQ(Widgets(), 0);
  EXPECT_EQ(h.handler->metrics().stale_writes_rejected, 1);
}

TEST_P(StoreConformanceTest, HandlerTakeoverHookThatFindsTheEffectStoresItInsteadOfRedoing) {
  std::vector<std::int64_t> seen_versions;
  HandlerOn h(store_, clock_,
              [&](const KeyScope& scope,
                  const KeyRecord& previous) -> absl::StatusOr<std::optional<StoredResponse>> {
                EXPECT_EQ(scope.key, "k");
                seen_versions.push_back(previous.version);
                return std::optional<StoredResponse>(StoredResponse{201, R"({"charge":"ch_1"})"});
              });
  const std::string digest = RequestDigest("POST", "/widgets", R"({"n":1})");
  ASSERT_EQ(store_->Begin(Scope("k"), digest)->outcome, BeginOutcome::kClaimed);
  clock_->Advance(std::chrono::seconds(10));
  bool ran = false;
  Answer a = h.handler->HandleWrite(Post("k"), {nullptr, InsertWidget("w", &ran)});
  EXPECT_EQ(a.status, 201);
  EXPECT_EQ(a.body, R"({"charge":"ch_1"})");
  EXPECT_EQ(a.Header("Idempotent-Replayed"), "true");
  EXPECT_FALSE(ran);
  EXPECT_EQ(seen_versions, std::vector<std::int64_t>{1});
  EXPECT_EQ((*store_->Read(Scope("k")))->state, RecordState::kCompleted);
  EXPECT_EQ(h.handler->metrics().takeover_found_effect, 1);
}

TEST_P(StoreConformanceTest, HandlerTakeoverHookThatFindsNoEffectLetsTheWorkBeRedone) {
  int calls = 0;
  HandlerOn h(
      store_, clock_,
      [&](const KeyScope&, const KeyRecord&) -> absl::StatusOr<std::optional<StoredResponse>> {
        ++calls;
        return std::optional<StoredResponse>();
      });
  const std::string digest = RequestDigest("POST", "/widgets", R"({"n":1})");
  ASSERT_EQ(store_->Begin(Scope("k"), digest)->outcome, BeginOutcome::kClaimed);
  clock_->Advance(std::chrono::seconds(10));
  Answer a = h.handler->HandleWrite(Post("k"), {nullptr, InsertWidget("w")});
  EXPECT_EQ(a.status, 201);
  EXPECT_EQ(a.Header("Idempotent-Replayed"), "");
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(Widgets(), 1);
}

TEST_P(StoreConformanceTest, HandlerFenceAsksTheTakeoverHookFirst) {
  bool effect_happened = true;
  HandlerOn h(
      store_, clock_,
      [&](const KeyScope&, const KeyRecord&) -> absl::StatusOr<std::optional<StoredResponse>> {
        if (!effect_happened) return std::optional<StoredResponse>();
        return std::optional<StoredResponse>(StoredResponse{201, R"({"charge":"ch_9"})"});
      });
  const std::string digest = RequestDigest("POST", "/widgets", R"({"n":1})");
  ASSERT_EQ(store_->Begin(Scope("paid"), digest)->outcome, BeginOutcome::kClaimed);
  ASSERT_EQ(store_->Begin(Scope("unpaid"), digest)->outcome, BeginOutcome::kClaimed);
  clock_->Advance(std::chrono::seconds(10));

  Answer paid = h.handler->HandleStatusQuery(Query("paid", true));
  EXPECT_EQ(paid.status, 200);
  EXPECT_EQ(paid.Header("Idempotency-Key-State"), "completed");
  EXPECT_EQ(paid.body, R"({"charge":"ch_9"})");
  EXPECT_EQ((*store_->Read(Scope("paid")))->state, RecordState::kCompleted);

  effect_happened = false;
  Answer unpaid = h.handler->HandleStatusQuery(Query("unpaid", true));
  EXPECT_EQ(unpaid.status, 404);
  EXPECT_EQ(unpaid.Header("Idempotency-Key-State"), "fenced");
  auto record = *store_->Read(Scope("unpaid"));
  EXPECT_EQ(record->state, RecordState::kFenced);
  EXPECT_EQ(record->version, 3);  // takeover (2), then the fence (3)
  EXPECT_EQ(h.handler->metrics().fences, 1);
}

TEST_P(StoreConformanceTest, HandlerResourceLookupAnswersTheStatusQueryFirst) {
  HandlerOn h(store_, clock_);
  ResourceLookup lookup = [](const KeyScope& scope) -> absl::StatusOr<std::optional<std::string>> {
    if (scope.key == "kept") return std::optional<std::string>(R"({"order":"ord-1"})");
    return std::optional<std::string>();
  };
  Answer found = h.handler->HandleStatusQuery(Query("kept", true), lookup);
  EXPECT_EQ(found.status, 200);
  EXPECT_EQ(found.body, R"({"order":"ord-1"})");
  EXPECT_EQ(*store_->Read(Scope("kept")), std::nullopt);  // found: nothing to fence
  EXPECT_EQ(h.handler->HandleStatusQuery(Query("gone", false), lookup).status, 404);
}

}  // namespace
}  // namespace testkit
}  // namespace server
}  // namespace saferetry

namespace saferetry {
namespace server {
namespace testkit {
namespace {

// --- recovery steps, the sweeper, pending confirmation ----------------------

const std::string& WidgetDigest() {
  static const std::string d = RequestDigest("POST", "/widgets", R"({"n":1})");
  return d;
}

TEST_P(StoreConformanceTest, RecoveryStepIsRecordedUnderTheFenceAndSeenByHookAndStatusQuery) {
  std::vector<std::optional<RecoveryStep>> seen;
  HandlerOn h(store_, clock_,
              [&](const KeyScope&, const KeyRecord& previous) -> absl::StatusOr<TakeoverVerdict> {
                seen.push_back(previous.step);
                return TakeoverVerdict::NoEffect();
              });
  auto begun = store_->Begin(Scope("k"), WidgetDigest());
  ASSERT_EQ(begun->outcome, BeginOutcome::kClaimed);
  clock_->Advance(std::chrono::milliseconds(5));
  auto step = h.handler->RecordStep(Scope("k"), 1, "charge");
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->name, "charge");
  EXPECT_EQ(step->external_id, DefaultExternalRequestId(Scope("k"), "charge"));
  auto record = *store_->Read(Scope("k"));
  ASSERT_TRUE(record->step.has_value());
  EXPECT_EQ(record->step->name, "charge");
  EXPECT_EQ(record->step->external_id, step->external_id);
  EXPECT_EQ(record->step->recorded_ms, record->created_ms + 5);
  // A later step replaces it; an explicit id is kept as given.
  ASSERT_TRUE(h.handler->RecordStep(Scope("k"), 1, "reserve", std::string("wh-77")).ok());
  EXPECT_EQ((*store_->Read(Scope("k")))->step->external_id, "wh-77");

  Answer running = h.handler->HandleStatusQuery(Query("k", false));
  EXPECT_EQ(running.status, 409);
  auto body = nlohmann::json::parse(running.body);
  EXPECT_EQ(body["step"]["name"], "reserve");
  EXPECT_EQ(body["step"]["external_id"], "wh-77");

  clock_->Advance(std::chrono::seconds(10));
  Answer abandoned = h.handler->HandleStatusQuery(Query("k", false));
  EXPECT_EQ(abandoned.Header("Idempotency-Key-State"), "abandoned");
  EXPECT_EQ(nlohmann::json::parse(abandoned.body)["step"]["external_id"], "wh-77");
  // The resend's takeover hook sees the step, then redoes the work.
  Answer redone = h.handler->HandleWrite(Post("k"), {nullptr, InsertWidget("w")});
  EXPECT_EQ(redone.status, 201);
  ASSERT_EQ(seen.size(), 1u);
  ASSERT_TRUE(seen[0].has_value());
  EXPECT_EQ(seen[0]->external_id, "wh-77");
  EXPECT_EQ(h.handler->metrics().steps_recorded, 2);
}

TEST_P(StoreConformanceTest, RecoveryStepOfAFencedOffWorkerIsRefusedAndWritesNothing) {
  HandlerOn h(store_, clock_);
  ASSERT_EQ(store_->Begin(Scope("k"), WidgetDigest())->outcome, BeginOutcome::kClaimed);
  clock_->Advance(std::chrono::seconds(10));
  ASSERT_EQ(*store_->TakeOver(Scope("k"), 1), std::optional<std::int64_t>(2));
  auto stale = h.handler->RecordStep(Scope("k"), 1, "charge");
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kAborted) << stale.status();
  EXPECT_EQ((*store_->Read(Scope("k")))->step, std::nullopt);
  auto bad = store_->RecordStep(Scope("k"), 2, RecoveryStep{"", "x", 0});
  EXPECT_EQ(bad.status().message(), "step.name: must be 1 to 255 bytes, got 0");
  bad = store_->RecordStep(Scope("k"), 2, RecoveryStep{"charge", std::string(256, 'x'), 0});
  EXPECT_EQ(bad.status().message(), "step.external_id: must be 1 to 255 bytes, got 256");
}

TEST_P(StoreConformanceTest, RecoveryStepDefaultExternalIdIsStablePerKeyAndStep) {
  const std::string id = DefaultExternalRequestId(Scope("k"), "charge");
  EXPECT_EQ(id.size(), 43u);
  EXPECT_EQ(id.rfind("sr-", 0), 0u);
  EXPECT_EQ(id, DefaultExternalRequestId(Scope("k"), "charge"));
  EXPECT_NE(id, DefaultExternalRequestId(Scope("k"), "refund"));
  EXPECT_NE(id, DefaultExternalRequestId(Scope("k2"), "charge"));
  EXPECT_NE(id, DefaultExternalRequestId({"tenant-b", "make_widget", "k"}, "charge"));
}

TEST_P(StoreConformanceTest, SweepCompletesWhatTheHookFoundByTheStepsExternalId) {
  std::map<std::string, std::string> channel = {};  // external id -> charge
  HandlerOn h(store_, clock_,
              [&](const KeyScope&, const KeyRecord& previous) -> absl::StatusOr<TakeoverVerdict> {
                if (!previous.step.has_value()) return TakeoverVerdict::NoEffect();
                auto it = channel.find(previous.step->external_id);
                if (it == channel.end()) return TakeoverVerdict::NoEffect();
                return TakeoverVerdict::Happened(
                    StoredResponse{201, nlohmann::json{{"charge", it->second}}.dump()});
              });
  // The worker records its step, the channel charges, the worker dies.
  ASSERT_EQ(store_->Begin(Scope("paid"), WidgetDigest())->outcome, BeginOutcome::kClaimed);
  auto step = h.handler->RecordStep(Scope("paid"), 1, "charge");
  ASSERT_TRUE(step.ok());
  channel[step->external_id] = "ch_1";
  ASSERT_EQ(store_->Begin(Scope("unpaid"), WidgetDigest())->outcome, BeginOutcome::kClaimed);
  ASSERT_EQ(store_->Begin(Scope("fresh"), WidgetDigest())->outcome, BeginOutcome::kClaimed);

  clock_->Advance(std::chrono::seconds(9));
  auto early = h.handler->RunSweep();
  ASSERT_TRUE(early.ok()) << early.status();
  EXPECT_EQ(early->examined, 0);  // every lease still runs

  clock_->Advance(std::chrono::seconds(1));
  ASSERT_EQ(store_->Begin(Scope("fresh2"), WidgetDigest())->outcome, BeginOutcome::kClaimed);
  auto swept = h.handler->RunSweep();
  ASSERT_TRUE(swept.ok()) << swept.status();
  EXPECT_EQ(swept->examined, 3);  // not fresh2
  EXPECT_EQ(swept->taken_over, 3);
  EXPECT_EQ(swept->completed, 1);
  EXPECT_EQ(swept->fenced, 2);
  auto paid = *store_->Read(Scope("paid"));
  EXPECT_EQ(paid->state, RecordState::kCompleted);
  EXPECT_EQ(paid->response.body, R"({"charge":"ch_1"})");
  EXPECT_EQ((*store_->Read(Scope("unpaid")))->state, RecordState::kFenced);
  EXPECT_EQ((*store_->Read(Scope("fresh2")))->state, RecordState::kProcessing);
  // A later same-key request replays the channel's answer; nothing is redone.
  bool ran = false;
  Answer replay = h.handler->HandleWrite(Post("paid"), {nullptr, InsertWidget("w", &ran)});
  EXPECT_EQ(replay.status, 201);
  EXPECT_EQ(replay.body, R"({"charge":"ch_1"})");
  EXPECT_EQ(replay.Header("Idempotent-Replayed"), "true");
  EXPECT_FALSE(ran);
  EXPECT_EQ(h.handler->HandleWrite(Post("unpaid"), {nullptr, InsertWidget("w")}).status, 410);
  // Idempotent: nothing is left to recover.
  auto again = h.handler->RunSweep();
  EXPECT_EQ(again->examined, 0);
  EXPECT_EQ(h.handler->metrics().swept_completed, 1);
  EXPECT_EQ(h.handler->metrics().swept_fenced, 2);
}

// A hook that found the external effect may also write the local part of the
// work from it (the payment row for the channel's charge), in the completing
// transaction: on a resend's takeover and on a sweep alike.
TEST_P(StoreConformanceTest, SweepAndTakeoverRunTheHooksLocalPartInTheCompletingTransaction) {
  HandlerOn h(store_, clock_,
              [&](const KeyScope& scope, const KeyRecord&) -> absl::StatusOr<TakeoverVerdict> {
                return TakeoverVerdict::Finish(InsertWidget("from-facts-" + scope.key));
              });
  ASSERT_EQ(store_->Begin(Scope("swept"), WidgetDigest())->outcome, BeginOutcome::kClaimed);
  ASSERT_EQ(store_->Begin(Scope("resent"), WidgetDigest())->outcome, BeginOutcome::kClaimed);
  clock_->Advance(std::chrono::seconds(10));
  bool ran = false;
  Answer resent = h.handler->HandleWrite(Post("resent"), {nullptr, InsertWidget("redo", &ran)});
  EXPECT_EQ(resent.status, 201);
  EXPECT_EQ(resent.body, R"({"widget":"from-facts-resent"})");
  EXPECT_FALSE(ran);
  SweepOptions one;
  one.max_records = 1;
  EXPECT_EQ(h.handler->RunSweep(one)->completed, 1);
  EXPECT_EQ((*store_->Read(Scope("swept")))->response.body, R"({"widget":"from-facts-swept"})");
  EXPECT_EQ(Widgets(), 2);
}

TEST_P(StoreConformanceTest, SweepIsBoundedPerRunAndRefusesTheStaleWorkersLateCompletion) {
  HandlerOn h(store_, clock_);
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(store_->Begin(Scope("k" + std::to_string(i)), WidgetDigest())->outcome,
              BeginOutcome::kClaimed);
  }
  clock_->Advance(std::chrono::seconds(10));
  SweepOptions two;
  two.max_records = 2;
  EXPECT_EQ(h.handler->RunSweep(two)->fenced, 2);
  EXPECT_EQ(h.handler->RunSweep(two)->fenced, 2);
  EXPECT_EQ(h.handler->RunSweep(two)->fenced, 1);
  EXPECT_EQ(h.handler->RunSweep(two)->examined, 0);
  bool ran = false;
  auto late = store_->Complete(Scope("k0"), 1, InsertWidget("late", &ran));
  ASSERT_TRUE(late.ok());
  EXPECT_FALSE(late->committed);
  EXPECT_FALSE(ran);
  EXPECT_EQ(Widgets(), 0);
  two.max_records = 0;
  EXPECT_EQ(h.handler->RunSweep(two).status().message(), "max_records: must be > 0, got 0");
}

TEST_P(StoreConformanceTest, ConcurrentSweepersOnTwoInstancesRecoverEachRecordExactlyOnce) {
  auto second = under_test_.open_again();
  ASSERT_TRUE(second.ok()) << second.status();
  constexpr int kKeys = 30;
  std::atomic<int> hook_calls{0};
  TakeoverHook hook = [&](const KeyScope&, const KeyRecord&) -> absl::StatusOr<TakeoverVerdict> {
    hook_calls++;
    return TakeoverVerdict::Happened(StoredResponse{201, "{}"});
  };
  HandlerOn a(store_, clock_, hook);
  HandlerOn b(*second, clock_, hook);
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_EQ(store_->Begin(Scope("s" + std::to_string(i)), WidgetDigest())->outcome,
              BeginOutcome::kClaimed);
  }
  clock_->Advance(std::chrono::seconds(10));
  std::atomic<int> completed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      IdempotentHandler& handler = t % 2 == 0 ? *a.handler : *b.handler;
      for (int run = 0; run < 5; ++run) {
        SweepOptions o;
        o.max_records = 7;
        auto r = handler.RunSweep(o);
        ASSERT_TRUE(r.ok()) << r.status();
        completed += r->completed;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(completed.load(), kKeys);
  EXPECT_EQ(hook_calls.load(), kKeys);  // never two recoveries of one record
  auto left = store_->ListAbandoned("make_widget", 100);
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty());
}

TEST_P(StoreConformanceTest, PendingConfirmationWhenTheHookCannotTellIsAnsweredDistinctly) {
  HandlerOn h(store_, clock_,
              [&](const KeyScope&, const KeyRecord&) -> absl::StatusOr<TakeoverVerdict> {
                return TakeoverVerdict::CannotTell("the warehouse has no query by request id");
              });
  ASSERT_EQ(store_->Begin(Scope("k"), WidgetDigest())->outcome, BeginOutcome::kClaimed);
  ASSERT_TRUE(h.handler->RecordStep(Scope("k"), 1, "reserve").ok());
  clock_->Advance(std::chrono::seconds(10));
  auto swept = h.handler->RunSweep();
  EXPECT_EQ(swept->pending_confirmation, 1);
  auto record = *store_->Read(Scope("k"));
  EXPECT_EQ(record->state, RecordState::kPendingConfirmation);
  EXPECT_EQ(record->version, 3);  // takeover, then the move: any late completion is refused
  EXPECT_EQ(record->pending_reason, "the warehouse has no query by request id");
  EXPECT_EQ(RecordStateName(record->state), "PENDING_CONFIRMATION");

  for (bool fence : {false, true}) {
    Answer q = h.handler->HandleStatusQuery(Query("k", fence));
    EXPECT_EQ(q.status, 409) << fence;
    EXPECT_EQ(q.Header("Idempotency-Key-State"), "pending_confirmation");
    EXPECT_EQ(ErrorOf(q), "pending_confirmation");
    EXPECT_EQ(nlohmann::json::parse(q.body)["step"]["name"], "reserve");
  }
  bool ran = false;
  Answer w = h.handler->HandleWrite(Post("k"), {nullptr, InsertWidget("w", &ran)});
  EXPECT_EQ(w.status, 409);
  EXPECT_EQ(w.Header("Idempotency-Key-State"), "pending_confirmation");
  EXPECT_FALSE(ran);
  // Automatic work has stopped: later sweeps leave it alone, and it is listed.
  clock_->Advance(std::chrono::hours(5));
  EXPECT_EQ(h.handler->RunSweep()->examined, 0);
  EXPECT_EQ(*store_->Reap(), 0);
  auto listed = store_->ListPendingConfirmation("make_widget", 10);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].scope.key, "k");
  EXPECT_EQ((*listed)[0].scope.tenant, "tenant-a");
  EXPECT_EQ((*listed)[0].record.step->name, "reserve");
  EXPECT_TRUE(store_->ListPendingConfirmation("other_op", 10)->empty());
  EXPECT_EQ(store_->Gauges()->pending_confirmation, 1);
}

TEST_P(StoreConformanceTest, PendingConfirmationAfterTheWritePathsHookCannotTell) {
  HandlerOn h(store_, clock_,
              [&](const KeyScope&, const KeyRecord&) -> absl::StatusOr<TakeoverVerdict> {
                return TakeoverVerdict::CannotTell("no query");
              });
  ASSERT_EQ(store_->Begin(Scope("k"), WidgetDigest())->outcome, BeginOutcome::kClaimed);
  clock_->Advance(std::chrono::seconds(10));
  bool ran = false;
  Answer w = h.handler->HandleWrite(Post("k"), {nullptr, InsertWidget("w", &ran)});
  EXPECT_EQ(w.status, 409);
  EXPECT_EQ(w.Header("Idempotency-Key-State"), "pending_confirmation");
  EXPECT_FALSE(ran);
  EXPECT_EQ((*store_->Read(Scope("k")))->state, RecordState::kPendingConfirmation);
  // Another payload with the key is still a conflict.
  EXPECT_EQ(h.handler->HandleWrite(Post("k", R"({"n":2})"), {nullptr, InsertWidget("x")}).status,
            422);
  EXPECT_EQ(h.handler->metrics().moved_to_pending, 1);
}

TEST_P(StoreConformanceTest, PendingConfirmationAfterTooManyFailedRecoveries) {
  int calls = 0;
  HandlerOn h(store_, clock_,
              [&](const KeyScope&, const KeyRecord&) -> absl::StatusOr<TakeoverVerdict> {
                ++calls;
                return absl::UnavailableError("channel down");
              });
  ASSERT_EQ(store_->Begin(Scope("k"), WidgetDigest())->outcome, BeginOutcome::kClaimed);
  SweepOptions o;
  o.max_failed_recoveries = 2;
  clock_->Advance(std::chrono::seconds(10));
  auto first = h.handler->RunSweep(o);
  EXPECT_EQ(first->failed_checks, 1);
  EXPECT_EQ(first->pending_confirmation, 0);
  EXPECT_EQ((*store_->Read(Scope("k")))->recovery_failures, 1);
  // The failed recovery renewed the lease: the next sweep waits for it.
  EXPECT_EQ(h.handler->RunSweep(o)->examined, 0);
  clock_->Advance(std::chrono::seconds(10));
  auto second = h.handler->RunSweep(o);
  EXPECT_EQ(second->failed_checks, 1);
  EXPECT_EQ(second->pending_confirmation, 1);
  auto record = *store_->Read(Scope("k"));
  EXPECT_EQ(record->state, RecordState::kPendingConfirmation);
  EXPECT_EQ(record->pending_reason, "2 recoveries could not check the facts; last: channel down");
  EXPECT_EQ(calls, 2);
}

Decision Succeeded(const std::string& body, const std::string& who = "ops@example.com") {
  Decision d;
  d.outcome = Decision::Outcome::kSucceeded;
  d.response = StoredResponse{201, body};
  d.decided_by = who;
  d.reason = "the warehouse's stock ledger shows the reservation";
  return d;
}

TEST_P(StoreConformanceTest, PendingConfirmationDecisionIsRecordedOnceWithWhoWhenAndWhy) {
  HandlerOn h(store_, clock_,
              [&](const KeyScope&, const KeyRecord&) -> absl::StatusOr<TakeoverVerdict> {
                return TakeoverVerdict::CannotTell("no query");
              });
  ASSERT_EQ(store_->Begin(Scope("k"), WidgetDigest())->outcome, BeginOutcome::kClaimed);
  clock_->Advance(std::chrono::seconds(10));
  ASSERT_EQ(h.handler->RunSweep()->pending_confirmation, 1);
  clock_->Advance(std::chrono::minutes(3));

  auto decided = h.handler->Decide("k", "tenant-a", Succeeded(R"({"reservation":"r-1"})"));
  ASSERT_TRUE(decided.ok()) << decided.status();
  EXPECT_EQ(decided->outcome, DecideOutcome::kRecorded);
  auto record = *store_->Read(Scope("k"));
  EXPECT_EQ(record->state, RecordState::kCompleted);
  ASSERT_TRUE(record->decision.has_value());
  EXPECT_EQ(record->decision->outcome, Decision::Outcome::kSucceeded);
  EXPECT_EQ(record->decision->decided_by, "ops@example.com");
  EXPECT_EQ(record->decision->reason, "the warehouse's stock ledger shows the reservation");
  EXPECT_EQ(record->decision->decided_ms, *record->completed_ms);
  EXPECT_EQ(record->decision->decided_ms, record->created_ms + 10000 + 180000);

  // The same decision again (another run of the same command): unchanged.
  clock_->Advance(std::chrono::minutes(1));
  auto same = h.handler->Decide("k", "tenant-a", Succeeded(R"({"reservation":"r-1"})", "bob"));
  EXPECT_EQ(same->outcome, DecideOutcome::kAlreadyRecorded);
  EXPECT_EQ(same->record.decision->decided_by, "ops@example.com");
  // Another answer, or the other outcome: refused, unchanged.
  auto other = h.handler->Decide("k", "tenant-a", Succeeded(R"({"reservation":"r-2"})"));
  EXPECT_EQ(other->outcome, DecideOutcome::kConflictingDecision);
  Decision failed;
  failed.outcome = Decision::Outcome::kFailed;
  failed.response = StoredResponse{409, R"({"error":"not_reserved"})"};
  failed.decided_by = "carol";
  failed.reason = "no reservation found";
  EXPECT_EQ(h.handler->Decide("k", "tenant-a", failed)->outcome,
            DecideOutcome::kConflictingDecision);
  EXPECT_EQ((*store_->Read(Scope("k")))->response.body, R"({"reservation":"r-1"})");
  EXPECT_EQ(h.handler->metrics().decisions, 1);

  // Replayed from now on, and the status query finds it.
  Answer replay = h.handler->HandleWrite(Post("k"), {nullptr, InsertWidget("w")});
  EXPECT_EQ(replay.status, 201);
  EXPECT_EQ(replay.body, R"({"reservation":"r-1"})");
  EXPECT_EQ(replay.Header("Idempotent-Replayed"), "true");
  Answer found = h.handler->HandleStatusQuery(Query("k", true));
  EXPECT_EQ(found.status, 200);
  EXPECT_EQ(found.Header("Idempotency-Key-State"), "completed");
  EXPECT_EQ(Widgets(), 0);
  EXPECT_TRUE(store_->ListPendingConfirmation("", 10)->empty());
}

TEST_P(StoreConformanceTest, PendingConfirmationFailedDecisionReplaysItsFinalErrorAndIsChecked) {
  HandlerOn h(store_, clock_,
              [&](const KeyScope&, const KeyRecord&) -> absl::StatusOr<TakeoverVerdict> {
                return TakeoverVerdict::CannotTell("no query");
              });
  ASSERT_EQ(store_->Begin(Scope("k"), WidgetDigest())->outcome, BeginOutcome::kClaimed);
  ASSERT_EQ(store_->Begin(Scope("running"), WidgetDigest())->outcome, BeginOutcome::kClaimed);
  clock_->Advance(std::chrono::seconds(10));
  ASSERT_TRUE(store_->Begin(Scope("running"), WidgetDigest()).ok());  // taken over: running again
  ASSERT_EQ(h.handler->RunSweep()->pending_confirmation, 1);

  Decision failed;
  failed.outcome = Decision::Outcome::kFailed;
  failed.response = StoredResponse{200, "{}"};
  failed.decided_by = "carol";
  failed.reason = "no reservation found";
  EXPECT_EQ(h.handler->Decide("k", "tenant-a", failed).status().message(),
            "decision.response.status: a failed decision stores a 4xx answer, got 200");
  Decision ok = Succeeded("{}");
  ok.response.status = 409;
  EXPECT_EQ(h.handler->Decide("k", "tenant-a", ok).status().message(),
            "decision.response.status: a succeeded decision stores a 2xx answer, got 409");
  Decision nobody = Succeeded("{}", "");
  EXPECT_EQ(h.handler->Decide("k", "tenant-a", nobody).status().message(),
            "decision.decided_by: must be 1 to 255 bytes, got 0");
  nobody = Succeeded("{}");
  nobody.reason = "";
  EXPECT_EQ(h.handler->Decide("k", "tenant-a", nobody).status().message(),
            "decision.reason: must be 1 to 4096 bytes, got 0");

  failed.response = StoredResponse{409, R"({"error":"not_reserved"})"};
  auto decided = h.handler->Decide("k", "tenant-a", failed);
  ASSERT_TRUE(decided.ok()) << decided.status();
  EXPECT_EQ(decided->outcome, DecideOutcome::kRecorded);
  EXPECT_EQ(decided->record.decision->outcome, Decision::Outcome::kFailed);
  Answer replay = h.handler->HandleWrite(Post("k"), {nullptr, InsertWidget("w")});
  EXPECT_EQ(replay.status, 409);
  EXPECT_EQ(replay.Header("Idempotency-Key-State"), "completed");
  EXPECT_EQ(replay.Header("Idempotent-Replayed"), "true");
  Answer query = h.handler->HandleStatusQuery(Query("k", false));
  EXPECT_EQ(query.status, 404);
  EXPECT_EQ(query.Header("Idempotency-Key-State"), "completed");
  EXPECT_EQ(Widgets(), 0);

  EXPECT_EQ(h.handler->Decide("running", "tenant-a", failed)->outcome, DecideOutcome::kNotPending);
  EXPECT_EQ(h.handler->Decide("never", "tenant-a", failed)->outcome, DecideOutcome::kNotFound);
}

TEST_P(StoreConformanceTest, SweepGaugesShowTheOldestProcessingAgeAndThePendingCount) {
  auto empty = store_->Gauges();
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->processing, 0);
  EXPECT_EQ(empty->oldest_processing_age_ms, 0);
  EXPECT_EQ(empty->pending_confirmation, 0);
  ASSERT_EQ(store_->Begin(Scope("old"), "d")->outcome, BeginOutcome::kClaimed);
  clock_->Advance(std::chrono::seconds(12));
  ASSERT_EQ(store_->Begin(Scope("new"), "d")->outcome, BeginOutcome::kClaimed);
  clock_->Advance(std::chrono::seconds(1));
  auto g = *store_->Gauges();
  EXPECT_EQ(g.processing, 2);
  EXPECT_EQ(g.oldest_processing_age_ms, 13000);
  EXPECT_EQ(g.abandoned, 1);
  EXPECT_EQ(g.pending_confirmation, 0);
  ASSERT_TRUE(*store_->MarkPendingConfirmation(Scope("old"), 1, "test"));
  EXPECT_FALSE(*store_->MarkPendingConfirmation(Scope("new"), 7, "not the owner"));
  g = *store_->Gauges();
  EXPECT_EQ(g.processing, 1);
  EXPECT_EQ(g.oldest_processing_age_ms, 1000);
  EXPECT_EQ(g.pending_confirmation, 1);

  // Exported through the library's metrics, beside the client's series.
  MetricsSnapshot snapshot;
  EXPECT_EQ(ToPrometheusText(snapshot).find("saferetry_server_"), std::string::npos);
  ASSERT_TRUE(AddServerGauges(*store_, &snapshot).ok());
  ASSERT_TRUE(snapshot.server_gauges.has_value());
  EXPECT_EQ(snapshot.server_gauges->oldest_processing_age, std::chrono::milliseconds(1000));
  const std::string text = ToPrometheusText(snapshot);
  EXPECT_THAT(text, HasSubstr("# TYPE saferetry_server_oldest_processing_age_seconds gauge\n"
                              "saferetry_server_oldest_processing_age_seconds 1\n"));
  EXPECT_THAT(text, HasSubstr("saferetry_server_pending_confirmation_records 1\n"));
  EXPECT_THAT(text, HasSubstr("saferetry_server_processing_records 1\n"));
  EXPECT_THAT(text, HasSubstr("saferetry_server_abandoned_records 0\n"));
  EXPECT_EQ(AddServerGauges(*store_, nullptr).message(), "snapshot: must not be null");
}

// A database at schema version 1 (before recovery steps) is upgraded in place,
// keeping its records.
TEST_P(StoreConformanceTest, RecoveryStepSchemaUpgradeFromVersion1KeepsTheRecords) {
  SqlDatabase& db = store_->database();
  absl::Status s = db.RunInTransaction(TransactionMode::kWrite, [](Transaction& t) {
    for (const char* sql : {
             "DROP TABLE saferetry_idempotency_keys",
             "DELETE FROM saferetry_schema_version WHERE version > 1",
             R"sql(CREATE TABLE saferetry_idempotency_keys (
  tenant           TEXT NOT NULL,
  operation        TEXT NOT NULL,
  idem_key         TEXT NOT NULL,
  request_digest   TEXT NOT NULL,
  state            TEXT NOT NULL CHECK (state IN ('PROCESSING', 'COMPLETED', 'FENCED')),
  fencing_version  BIGINT NOT NULL,
  lease_expires_ms BIGINT NOT NULL,
  response_status  INTEGER,
  response_body    TEXT,
  created_ms       BIGINT NOT NULL,
  updated_ms       BIGINT NOT NULL,
  completed_ms     BIGINT,
  PRIMARY KEY (tenant, operation, idem_key)
))sql",
             "CREATE INDEX saferetry_idempotency_keys_by_completion "
             "ON saferetry_idempotency_keys (state, completed_ms)",
             "INSERT INTO saferetry_idempotency_keys VALUES ('tenant-a', 'make_widget', 'old', "
             "'d', 'COMPLETED', 1, 0, 201, '{\"w\":1}', 5, 6, 6)",
             "INSERT INTO saferetry_idempotency_keys VALUES ('tenant-a', 'make_widget', 'held', "
             "'d', 'PROCESSING', 3, 0, NULL, NULL, 5, 6, NULL)",
         }) {
      if (auto r = t.Execute(sql); !r.ok()) return r.status();
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(s.ok()) << s;
  auto upgraded = MakeIdempotencyStore(std::shared_ptr<SqlDatabase>(&db, [](SqlDatabase*) {}),
                                       options_, clock_);
  ASSERT_TRUE(upgraded.ok()) << upgraded.status();
  auto old = *(*upgraded)->Read(Scope("old"));
  ASSERT_TRUE(old.has_value());
  EXPECT_EQ(old->state, RecordState::kCompleted);
  EXPECT_EQ(old->response.body, R"({"w":1})");
  EXPECT_EQ(old->step, std::nullopt);
  EXPECT_EQ(old->recovery_failures, 0);
  EXPECT_EQ((*(*upgraded)->Read(Scope("held")))->version, 3);
  EXPECT_TRUE(*(*upgraded)->MarkPendingConfirmation(Scope("held"), 3, "after the upgrade"));
  EXPECT_EQ((*(*upgraded)->Read(Scope("held")))->state, RecordState::kPendingConfirmation);
}

}  // namespace
}  // namespace testkit
}  // namespace server
}  // namespace saferetry

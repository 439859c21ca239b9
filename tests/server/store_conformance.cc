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
    EXPECT_EQ((*rows)[0].Int(0), 1);
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

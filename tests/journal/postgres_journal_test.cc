// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The PostgreSQL intent journal: the conformance suite (journal_conformance.cc,
// each test in a schema of its own, the journal's clock a FakeClock), and what
// only PostgreSQL has — claims on the database's clock, durability whatever
// the server's default, a commit whose answer is lost, a terminated backend,
// concurrent first opens, the schema option, text PostgreSQL cannot hold.
// Needs a database (tests/server/pg_dsn.h); without one the tests skip, unless
// SAFERETRY_REQUIRE_POSTGRES=1.

#include "saferetry/postgres_journal.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "journal_conformance.h"
#include "pg_dsn.h"
#include "saferetry/client.h"
#include "saferetry/journal.h"
#include "saferetry/reconciler.h"
#include "saferetry/server/postgres_store.h"
#include "saferetry/server/sql.h"
#include "saferetry/testing/fake_clock.h"
#include "saferetry/testing/fake_random.h"
#include "saferetry/testing/fake_transport.h"

namespace saferetry {
namespace {

using ::saferetry::journal_test::JournalConformance;
using ::saferetry::journal_test::JournalFactory;
using ::saferetry::pg_test::Dsn;
using ::saferetry::pg_test::Required;
using server::SqlDatabase;
using server::Transaction;
using server::TransactionMode;
using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

std::string NoDatabase() {
  if (!Dsn().empty()) return "";
  return Required() ? "" : ::saferetry::pg_test::SkipReason();
}

// A statement on a connection of its own.
absl::StatusOr<std::vector<server::SqlRow>> Admin(const std::string& sql) {
  server::PostgresOptions pg;
  pg.conninfo = Dsn();
  pg.max_connections = 1;
  auto db = server::OpenPostgresDatabase(pg);
  if (!db.ok()) return db.status();
  std::vector<server::SqlRow> rows;
  absl::Status s = (*db)->RunInTransaction(TransactionMode::kWrite, [&](Transaction& t) {
    auto r = t.Execute(sql);
    if (!r.ok()) return r.status();
    rows = *std::move(r);
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return rows;
}

// A schema name for `dir` (one per test): lower-case, unique per process.
std::string SchemaFor(const std::string& dir) {
  return absl::StrCat("journal_", getpid(), "_", std::hash<std::string>()(dir) % 1000000007);
}

std::string NewSchema(const std::string& tag) {
  static std::atomic<int> counter{0};
  const std::string schema =
      absl::StrCat("journal_", tag, "_", getpid(), "_", counter.fetch_add(1));
  EXPECT_TRUE(Admin(absl::StrCat("CREATE SCHEMA ", schema)).ok());
  return schema;
}

void DropSchema(const std::string& schema) {
  (void)Admin(absl::StrCat("DROP SCHEMA IF EXISTS ", schema, " CASCADE"));
}

JournalFactory PostgresFactory() {
  JournalFactory f;
  f.name = "Postgres";
  f.open = [](const JournalOptions& options,
              const std::string& dir) -> absl::StatusOr<std::shared_ptr<IntentJournal>> {
    if (Dsn().empty()) {
      return absl::FailedPreconditionError(
          "SAFERETRY_REQUIRE_POSTGRES=1 but no database (SAFERETRY_PG_DSN)");
    }
    const std::string schema = SchemaFor(dir);
    if (auto r = Admin(absl::StrCat("CREATE SCHEMA IF NOT EXISTS ", schema)); !r.ok()) {
      return r.status();
    }
    PostgresJournalOptions o;
    static_cast<JournalOptions&>(o) = options;
    o.dsn = Dsn();
    o.schema = schema;
    o.max_connections = 2;
    // The suite's times are a FakeClock's; claims on the database's clock
    // are tested below.
    o.clock_source = PostgresJournalClock::kJournalClock;
    return OpenPostgresJournal(o);
  };
  f.shared_storage = true;
  f.skip_reason = NoDatabase;
  f.cleanup = [](const std::string& dir) { DropSchema(SchemaFor(dir)); };
  return f;
}

INSTANTIATE_TEST_SUITE_P(Journals, JournalConformance, ::testing::Values(PostgresFactory()),
                         journal_test::FactoryName);

// Wraps a database: counts write transactions, reads the effective
// synchronous_commit at the end of each, and can lose the answer of commits
// that did happen (the connection breaking after COMMIT was sent).
class ObservedDatabase final : public SqlDatabase {
 public:
  explicit ObservedDatabase(std::shared_ptr<SqlDatabase> inner) : inner_(std::move(inner)) {}

  absl::Status RunInTransaction(TransactionMode mode,
                                const std::function<absl::Status(Transaction&)>& body) override {
    std::string setting;
    absl::Status s = inner_->RunInTransaction(mode, [&](Transaction& txn) -> absl::Status {
      absl::Status b = body(txn);
      if (!b.ok() || mode != TransactionMode::kWrite) return b;
      auto rows = txn.Execute("SELECT current_setting('synchronous_commit')");
      if (!rows.ok()) return rows.status();
      setting = (*rows)[0].Text(0);
      return b;
    });
    std::lock_guard<std::mutex> lock(mu_);
    if (mode == TransactionMode::kWrite && s.ok()) {
      ++commits_;
      settings_.push_back(setting);
      if (lose_next_commit_answers_ > 0) {
        --lose_next_commit_answers_;
        return absl::UnavailableError("server closed the connection unexpectedly");
      }
    }
    return s;
  }
  server::SqlDialect dialect() const override { return inner_->dialect(); }

  int commits() {
    std::lock_guard<std::mutex> lock(mu_);
    return commits_;
  }
  std::vector<std::string> settings() {
    std::lock_guard<std::mutex> lock(mu_);
    return settings_;
  }
  void LoseNextCommitAnswers(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    lose_next_commit_answers_ = n;
  }

 private:
  std::shared_ptr<SqlDatabase> inner_;
  std::mutex mu_;
  int commits_ = 0;
  std::vector<std::string> settings_;
  int lose_next_commit_answers_ = 0;
};

class PostgresJournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Dsn().empty()) {
      if (Required()) FAIL() << "SAFERETRY_REQUIRE_POSTGRES=1 but no database";
      GTEST_SKIP() << ::saferetry::pg_test::SkipReason();
    }
    schema_ = NewSchema("pg");
  }
  void TearDown() override {
    if (!schema_.empty()) DropSchema(schema_);
  }

  PostgresJournalOptions Options(const std::string& owner) const {
    PostgresJournalOptions o;
    o.dsn = Dsn();
    o.schema = schema_;
    o.owner = owner;
    o.claim_grace = milliseconds(0);
    return o;
  }

  std::shared_ptr<SqlDatabase> Database(const std::string& conninfo, int connections = 1) {
    server::PostgresOptions pg;
    pg.conninfo = conninfo;
    pg.schema = schema_;
    pg.max_connections = connections;
    auto db = server::OpenPostgresDatabase(pg);
    EXPECT_TRUE(db.ok()) << db.status();
    return db.ok() ? *db : nullptr;
  }

  static Intent NewIntent(const std::string& key, WallTime now, milliseconds deadline) {
    Request r{"POST",
              "https://orders.internal/orders",
              {{"Content-Type", "application/json"}},
              "{\"sku\":1}"};
    return MakeIntent(r, key, "https://orders.internal/orders/by-key/{key}", now, now + deadline);
  }

  std::string schema_;
};

TEST(PostgresJournalOptionsTest, OptionsNameTheFieldAndAnUnreachableServerIsUnavailable) {
  PostgresJournalOptions o;
  EXPECT_EQ(OpenPostgresJournal(o).status().message(), "dsn: must not be empty");
  o.dsn = "host=127.0.0.1 port=1 dbname=none";
  o.connect_timeout = seconds(1);
  for (int bad : {0, 65}) {
    o.max_connections = bad;
    absl::StatusOr<std::shared_ptr<IntentJournal>> j = OpenPostgresJournal(o);
    EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StartsWith(j.status().message(), "max_connections: ")) << j.status();
  }
  o.max_connections = 1;
  o.busy_timeout = milliseconds(0);
  EXPECT_TRUE(absl::StartsWith(OpenPostgresJournal(o).status().message(), "busy_timeout: "));
  o.busy_timeout = seconds(1);
  o.connect_timeout = milliseconds(0);
  EXPECT_TRUE(absl::StartsWith(OpenPostgresJournal(o).status().message(), "connect_timeout: "));
  o.connect_timeout = seconds(1);
  o.claim_grace = milliseconds(5001);
  EXPECT_TRUE(absl::StartsWith(OpenPostgresJournal(o).status().message(), "claim_grace: "));
  o.claim_grace = seconds(2);
  for (const char* bad : {"Journal", "1journal", "journal-v2", "a\"; DROP TABLE x; --"}) {
    o.schema = bad;
    EXPECT_TRUE(absl::StartsWith(OpenPostgresJournal(o).status().message(), "schema: ")) << bad;
  }
  o.schema.clear();
  absl::StatusOr<std::shared_ptr<IntentJournal>> unreachable = OpenPostgresJournal(o);
  EXPECT_EQ(unreachable.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StartsWith(unreachable.status().message(), "dsn: cannot connect"))
      << unreachable.status();
  EXPECT_EQ(OpenPostgresJournal(nullptr, o).status().message(), "database: must not be null");
}

// The tables are in the schema of the options, not in public; a second open
// finds the schema at the current version and changes nothing.
TEST_F(PostgresJournalTest, TheSchemaOptionHoldsTheTables) {
  const auto count_tables = [](const std::string& in) {
    auto rows =
        Admin(absl::StrCat("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = '",
                           in, "' AND table_name LIKE 'saferetry_%'"));
    EXPECT_TRUE(rows.ok()) << rows.status();
    return rows.ok() ? (*rows)[0].Int(0) : -1;
  };
  const std::int64_t public_before = count_tables("public");
  absl::StatusOr<std::shared_ptr<IntentJournal>> j = OpenPostgresJournal(Options("a"));
  ASSERT_TRUE(j.ok()) << j.status();
  ASSERT_TRUE((*j)->Record(NewIntent("k-1", SystemClock()->WallNow(), seconds(5))).ok());
  EXPECT_EQ(count_tables(schema_), 2);  // saferetry_intents, saferetry_journal_schema_version
  EXPECT_EQ(count_tables("public"), public_before);
  ASSERT_TRUE(OpenPostgresJournal(Options("b")).ok());
  auto version = Admin(absl::StrCat("SELECT COUNT(*), MAX(version) FROM ", schema_,
                                    ".saferetry_journal_schema_version"));
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ((*version)[0].Int(0), 1);
  EXPECT_EQ((*version)[0].Int(1), 1);
  // A database written by a newer version is refused.
  ASSERT_TRUE(
      Admin(absl::StrCat("INSERT INTO ", schema_, ".saferetry_journal_schema_version VALUES (2)"))
          .ok());
  absl::StatusOr<std::shared_ptr<IntentJournal>> newer = OpenPostgresJournal(Options("c"));
  EXPECT_EQ(newer.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StartsWith(newer.status().message(), "schema: ")) << newer.status();
}

// Processes starting together on an empty schema: the migration runs once,
// under the advisory lock, and every open succeeds.
TEST_F(PostgresJournalTest, ConcurrentFirstOpensAllSucceed) {
  constexpr int kOpens = 8;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kOpens; ++i) {
    threads.emplace_back([&, i] {
      PostgresJournalOptions o = Options("opener-" + std::to_string(i));
      o.max_connections = 1;
      if (!OpenPostgresJournal(o).ok()) failures.fetch_add(1);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  auto version =
      Admin(absl::StrCat("SELECT COUNT(*) FROM ", schema_, ".saferetry_journal_schema_version"));
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ((*version)[0].Int(0), 1);
}

// Claims expire on the database's clock. The second process's clock is an
// hour fast: it still sees the first one's claim as live until the database
// says it has expired, and its own claim lasts as long as it asked for from
// the database's now, not an hour more.
TEST_F(PostgresJournalTest, ClaimsExpireOnTheDatabaseClock) {
  PostgresJournalOptions first = Options("owner-first");
  first.clock = SystemClock();
  absl::StatusOr<std::shared_ptr<IntentJournal>> a = OpenPostgresJournal(first);
  ASSERT_TRUE(a.ok()) << a.status();
  const WallTime start = SystemClock()->WallNow();
  ASSERT_TRUE((*a)->Record(NewIntent("k-1", start, milliseconds(600))).ok());
  ASSERT_TRUE((*a)->MarkSent("k-1", 1).ok());
  a->reset();  // the process and its connection are gone; the claim is not

  auto fast = std::make_shared<testkit::FakeClock>(
      SystemClock()->Now(), SystemClock()->WallNow() + std::chrono::hours(1));
  PostgresJournalOptions second = Options("owner-second");
  second.clock = fast;
  absl::StatusOr<std::shared_ptr<IntentJournal>> b = OpenPostgresJournal(second);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->Claim("k-1", "owner-second", fast->WallNow() + seconds(60)).value(), false);
  EXPECT_TRUE((*b)->ListUnfinished(UnfinishedFilter::EligibleNow()).value().empty());
  // Past the claim (deadline + 0 grace) on the database's clock.
  std::this_thread::sleep_until(std::chrono::system_clock::now() + milliseconds(800));
  EXPECT_EQ((*b)->ListUnfinished(UnfinishedFilter::EligibleNow()).value().size(), 1u);
  EXPECT_EQ((*b)->Claim("k-1", "owner-second", fast->WallNow() + seconds(60)).value(), true);
  const Intent i = (*b)->Get("k-1").value();
  EXPECT_EQ(i.claim_owner, "owner-second");
  const WallTime real_now = SystemClock()->WallNow();
  EXPECT_GT(i.claim_until, real_now + seconds(55));
  EXPECT_LT(i.claim_until, real_now + seconds(65));
  // The intent's times are on the database's clock too.
  EXPECT_LT(i.created, real_now);
  EXPECT_GT(i.created, real_now - seconds(30));
  const std::optional<milliseconds> age = (*b)->OldestUnresolvedAge().value();
  ASSERT_TRUE(age.has_value());
  EXPECT_GE(*age, milliseconds(800));
  EXPECT_LT(*age, seconds(30));
}

// Every write commits with synchronous_commit on, although the session's
// default here is off; a plain transaction on the same database shows off.
TEST_F(PostgresJournalTest, EveryWriteCommitsDurablyWhateverTheDefault) {
  // The session default off, as a startup parameter (a direct connection takes it).
  const std::string dsn = Dsn();
  const std::string off = absl::StartsWith(dsn, "postgres")
                              ? absl::StrCat(dsn, absl::StrContains(dsn, "?") ? "&" : "?",
                                             "options=-c%20synchronous_commit%3Doff")
                              : absl::StrCat(dsn, " options='-c synchronous_commit=off'");
  auto observed = std::make_shared<ObservedDatabase>(Database(off));
  ASSERT_NE(observed, nullptr);
  std::string session_default;
  ASSERT_TRUE(observed
                  ->RunInTransaction(TransactionMode::kRead,
                                     [&](Transaction& t) {
                                       auto r = t.Execute("SHOW synchronous_commit");
                                       if (!r.ok()) return r.status();
                                       session_default = (*r)[0].Text(0);
                                       return absl::OkStatus();
                                     })
                  .ok());
  EXPECT_EQ(session_default, "off");
  absl::StatusOr<std::shared_ptr<IntentJournal>> j = OpenPostgresJournal(observed, Options("a"));
  ASSERT_TRUE(j.ok()) << j.status();
  const WallTime now = SystemClock()->WallNow();
  ASSERT_TRUE((*j)->Record(NewIntent("k-1", now, seconds(5))).ok());
  ASSERT_TRUE((*j)->MarkSent("k-1", 1).ok());
  ASSERT_TRUE((*j)->Finish("k-1", IntentState::kUnknown, {}).ok());
  ASSERT_TRUE((*j)->Claim("k-1", "b", now + seconds(60)).ok());
  ASSERT_TRUE((*j)->Release("k-1", "b").ok());
  ASSERT_TRUE((*j)->Prune(now, seconds(60)).ok());
  const std::vector<std::string> settings = observed->settings();
  ASSERT_EQ(settings.size(), 7u);  // the migration and six writes
  for (const std::string& s : settings) EXPECT_EQ(s, "on");
}

// A journaled call commits twice, once before its first byte, when Record
// marks attempt 1: Record + Finish, against Record + MarkSent + Finish.
TEST_F(PostgresJournalTest, RecordingWithTheFirstAttemptMarkedSavesACommit) {
  auto observed = std::make_shared<ObservedDatabase>(Database(Dsn()));
  absl::StatusOr<std::shared_ptr<IntentJournal>> j = OpenPostgresJournal(observed, Options("a"));
  ASSERT_TRUE(j.ok()) << j.status();
  const WallTime now = SystemClock()->WallNow();
  const int before = observed->commits();
  ASSERT_TRUE((*j)->Record(NewIntent("k-old", now, seconds(5))).ok());
  ASSERT_TRUE((*j)->MarkSent("k-old", 1).ok());
  ASSERT_TRUE(
      (*j)->Finish("k-old", IntentState::kSucceeded, {201, "succeeded", "response", ""}).ok());
  EXPECT_EQ(observed->commits() - before, 3);
  const int middle = observed->commits();
  Intent intent = NewIntent("k-new", now, seconds(5));
  intent.attempt = 1;
  absl::StatusOr<RecordResult> r = (*j)->Record(intent);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->intent.state, IntentState::kSent);
  ASSERT_TRUE(
      (*j)->Finish("k-new", IntentState::kSucceeded, {201, "succeeded", "response", ""}).ok());
  EXPECT_EQ(observed->commits() - middle, 2);
}

// A commit whose answer is lost: Record fails (the caller sends nothing),
// although the row is there; the same owner's retry finds it as its own and
// goes on with it. An intent nobody retries stays for the reconciler.
TEST_F(PostgresJournalTest, ALostCommitAnswerFailsClosedAndTheRetryFindsItsOwnRow) {
  auto observed = std::make_shared<ObservedDatabase>(Database(Dsn()));
  absl::StatusOr<std::shared_ptr<IntentJournal>> j = OpenPostgresJournal(observed, Options("a"));
  ASSERT_TRUE(j.ok()) << j.status();
  const WallTime now = SystemClock()->WallNow();
  Intent intent = NewIntent("k-1", now, seconds(5));
  intent.attempt = 1;
  observed->LoseNextCommitAnswers(1);
  absl::StatusOr<RecordResult> lost = (*j)->Record(intent);
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kUnavailable) << lost.status();
  absl::StatusOr<Intent> there = (*j)->Get("k-1");
  ASSERT_TRUE(there.ok()) << there.status();
  EXPECT_EQ(there->claim_owner, "a");
  EXPECT_EQ(there->state, IntentState::kSent);
  absl::StatusOr<RecordResult> retry = (*j)->Record(intent);
  ASSERT_TRUE(retry.ok()) << retry.status();
  EXPECT_FALSE(retry->created);
  EXPECT_EQ(retry->intent.claim_owner, (*j)->Owner());
  EXPECT_EQ(retry->intent.state, IntentState::kSent);
  EXPECT_EQ((*j)->Claim("k-1", (*j)->Owner(), now + seconds(10)).value(), true);
  // Lost answers of MarkSent and Finish: errors too, the write stands.
  ASSERT_TRUE((*j)->Record(NewIntent("k-2", now, seconds(5))).ok());
  observed->LoseNextCommitAnswers(1);
  EXPECT_EQ((*j)->MarkSent("k-2", 1).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ((*j)->Get("k-2").value().attempt, 1);
  EXPECT_EQ((*j)->MarkSent("k-2", 1).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE((*j)->MarkSent("k-2", 2).ok());
  // Nobody retries k-2: once its claim is gone it is the reconciler's.
  ASSERT_TRUE((*j)->Release("k-2", "a").value());
  UnfinishedFilter unclaimed;
  unclaimed.claim_expired = true;
  std::vector<Intent> left = (*j)->ListUnfinished(unclaimed).value();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].key, "k-2");
}

// The backend is terminated from another connection (a restart, a failover,
// an idle timeout in a proxy): the next operation runs on a new connection
// and succeeds.
TEST_F(PostgresJournalTest, TheNextOperationAfterTheBackendIsTerminatedSucceeds) {
  std::shared_ptr<SqlDatabase> db = Database(Dsn(), 1);
  ASSERT_NE(db, nullptr);
  absl::StatusOr<std::shared_ptr<IntentJournal>> j = OpenPostgresJournal(db, Options("a"));
  ASSERT_TRUE(j.ok()) << j.status();
  const WallTime now = SystemClock()->WallNow();
  ASSERT_TRUE((*j)->Record(NewIntent("k-1", now, seconds(5))).ok());
  const auto backend = [&] {
    std::int64_t pid = 0;
    EXPECT_TRUE(db->RunInTransaction(TransactionMode::kRead, [&](Transaction& t) {
                    auto r = t.Execute("SELECT pg_backend_pid()");
                    if (!r.ok()) return r.status();
                    pid = (*r)[0].Int(0);
                    return absl::OkStatus();
                  }).ok());
    return pid;
  };
  for (int round = 0; round < 2; ++round) {
    const std::int64_t pid = backend();
    ASSERT_GT(pid, 0);
    auto killed = Admin(absl::StrCat("SELECT pg_terminate_backend(", pid, ")"));
    ASSERT_TRUE(killed.ok()) << killed.status();
    ASSERT_EQ((*killed)[0].Text(0), "t");
    // Wait until the backend is gone, so the journal finds its connection broken.
    for (int i = 0; i < 200; ++i) {
      auto alive = Admin(absl::StrCat("SELECT COUNT(*) FROM pg_stat_activity WHERE pid = ", pid));
      if (alive.ok() && (*alive)[0].Int(0) == 0) break;
      std::this_thread::sleep_for(milliseconds(10));
    }
    if (round == 0) {
      absl::Status marked = (*j)->MarkSent("k-1", 1);
      EXPECT_TRUE(marked.ok()) << marked;
    } else {
      absl::StatusOr<Intent> got = (*j)->Get("k-1");
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(got->attempt, 1);
    }
    EXPECT_NE(backend(), pid);
  }
}

// PostgreSQL text holds neither NUL nor invalid UTF-8: such a URL is refused
// naming the field (nothing is recorded), and a summary is stored with the
// offending bytes replaced.
TEST_F(PostgresJournalTest, TextPostgresCannotHoldIsRefusedOrReplaced) {
  absl::StatusOr<std::shared_ptr<IntentJournal>> j = OpenPostgresJournal(Options("a"));
  ASSERT_TRUE(j.ok()) << j.status();
  const WallTime now = SystemClock()->WallNow();
  Intent bad = NewIntent("k-bad", now, seconds(5));
  bad.url = std::string("https://orders.internal/\xff", 25);
  absl::StatusOr<RecordResult> refused = (*j)->Record(bad);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("url"));
  EXPECT_EQ((*j)->Get("k-bad").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*j)->Claim("k-bad", std::string("o\0x", 3), now).status().code(),
            absl::StatusCode::kInvalidArgument);

  Intent good = NewIntent("k-1", now, seconds(5));
  good.headers.push_back({"X-Note", "caf\xc3\xa9 \x01"});
  ASSERT_TRUE((*j)->Record(good).ok());
  ASSERT_TRUE((*j)->Finish("k-1", IntentState::kUnknown,
                           {0, "deadline_exceeded", "", std::string("read \xc3\xa9\xff\0!", 10)})
                  .ok());
  const Intent i = (*j)->Get("k-1").value();
  EXPECT_EQ(i.summary.last_error,
            "read \xc3\xa9?"
            "?!");
  ASSERT_EQ(i.headers.size(), 2u);
  EXPECT_EQ(i.headers[1].second, "caf\xc3\xa9 \x01");
}

// End to end through the client: a call whose Record commit answer is lost
// fails closed (journal_unavailable) and sends nothing, though the row is
// there; the same process calling again with the same key finds its own
// PENDING intent, takes it under its own claim and sends it once.
TEST_F(PostgresJournalTest, ACallWhoseRecordAnswerIsLostSendsNothingAndItsRetrySendsOnce) {
  auto observed = std::make_shared<ObservedDatabase>(Database(Dsn(), 2));
  auto clock = std::make_shared<testkit::FakeClock>(SystemClock()->Now(), SystemClock()->WallNow());
  PostgresJournalOptions o = Options("orders-1:42:abcdef0123456789");
  o.clock = clock;  // the client's clock: instants are rebased from it
  absl::StatusOr<std::shared_ptr<IntentJournal>> journal = OpenPostgresJournal(observed, o);
  ASSERT_TRUE(journal.ok()) << journal.status();
  auto transport = std::make_shared<testkit::FakeTransport>(clock);
  transport->Push(testkit::Step::Respond(201));
  ClientOptions co;
  co.transport = transport;
  co.clock = clock;
  co.random = std::make_shared<testkit::ScriptedRandom>(std::vector<double>{0.5});
  co.journal = *journal;
  std::unique_ptr<Client> client = Client::Create(std::move(co)).value();
  const Request order{"POST",
                      "http://orders.test/orders",
                      {{"Content-Type", "application/json"}},
                      R"({"sku":"a"})"};
  CallOptions call;
  call.idempotency_key = "k-lost";
  call.timeout = seconds(5);

  observed->LoseNextCommitAnswers(1);
  CallResult lost = client->Execute(order, call);
  EXPECT_EQ(lost.outcome, Outcome::kFailed);
  EXPECT_EQ(lost.stop_reason, StopReason::kJournalUnavailable);
  EXPECT_EQ(transport->send_count(), 0);
  const Intent row = (*journal)->Get("k-lost").value();
  // Recorded with attempt 1 marked, in the commit whose answer was lost: the
  // row says "may have been sent", but this process knows it sent nothing,
  // and its retry takes the row as its own.
  EXPECT_EQ(row.state, IntentState::kSent);
  EXPECT_EQ(row.attempt, 1);
  EXPECT_EQ(row.claim_owner, "orders-1:42:abcdef0123456789");

  CallResult retry = client->Execute(order, call);
  EXPECT_EQ(retry.outcome, Outcome::kSucceeded);
  EXPECT_EQ(transport->send_count(), 1);
  const Intent done = (*journal)->Get("k-lost").value();
  EXPECT_EQ(done.state, IntentState::kSucceeded);
  EXPECT_EQ(done.attempt, 1);
  EXPECT_EQ(done.summary.http_status, 201);
}

// A fleet: the process that sent 12 calls is gone (their claims expire on the
// database's clock); two reconcilers, each with its own client and its own
// connections, run at once over the same journal. Every intent ends SUCCEEDED,
// each was asked about exactly once in all, and each was reported resolved by
// exactly one of them.
TEST_F(PostgresJournalTest, ConcurrentReconcilersOverOneJournalResolveEachIntentOnce) {
  constexpr int kIntents = 12;
  {
    absl::StatusOr<std::shared_ptr<IntentJournal>> gone = OpenPostgresJournal(Options("gone"));
    ASSERT_TRUE(gone.ok()) << gone.status();
    const WallTime now = SystemClock()->WallNow();
    for (int i = 0; i < kIntents; ++i) {
      Intent intent = NewIntent("k-" + std::to_string(i), now, milliseconds(200));
      intent.attempt = 1;
      ASSERT_TRUE((*gone)->Record(intent).ok());
    }
  }
  std::this_thread::sleep_for(milliseconds(400));  // deadlines and claims (grace 0) are over

  std::mutex mu;
  std::map<std::string, int> queries;   // status queries per key, both reconcilers
  std::map<std::string, int> resolved;  // on_resolved with a status query, per key
  const auto run = [&](const std::string& owner, absl::StatusOr<ReconcileReport>* out) {
    auto transport = std::make_shared<testkit::FakeTransport>();
    transport->SetHandler([&](const Request& r, const AttemptOptions&) {
      const std::string prefix = "https://orders.internal/orders/by-key/";
      TransportResult tr;
      if (r.method == "GET" && r.url.rfind(prefix, 0) == 0) {
        std::lock_guard<std::mutex> lock(mu);
        ++queries[r.url.substr(prefix.size())];
        tr.delivery = Delivery::kResponseReceived;
        tr.response = Response{200, {}, R"({"order":1})"};
      } else {
        tr.delivery = Delivery::kNotSent;
        tr.status = absl::FailedPreconditionError("unexpected request " + r.method + " " + r.url);
      }
      return tr;
    });
    absl::StatusOr<std::shared_ptr<IntentJournal>> journal = OpenPostgresJournal(Options(owner));
    if (!journal.ok()) {
      *out = journal.status();
      return;
    }
    ClientOptions co;
    co.transport = transport;
    co.journal = *journal;
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(std::move(co));
    if (!client.ok()) {
      *out = client.status();
      return;
    }
    ReconcilerOptions ro;
    ro.resolve.timeout = seconds(5);
    ro.on_resolved = [&](const Intent& intent, const CallResult& result) {
      if (result.status_queries == 0) return;  // found resolved by the other one
      std::lock_guard<std::mutex> lock(mu);
      ++resolved[intent.key];
    };
    Reconciler reconciler(client->get(), ro);
    *out = reconciler.RunOnce();
  };
  absl::StatusOr<ReconcileReport> a, b;
  std::thread ta(run, "reconciler-a", &a);
  std::thread tb(run, "reconciler-b", &b);
  ta.join();
  tb.join();
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->unknown + b->unknown, 0);
  EXPECT_EQ(a->failed + b->failed, 0);
  absl::StatusOr<std::shared_ptr<IntentJournal>> check = OpenPostgresJournal(Options("check"));
  ASSERT_TRUE(check.ok()) << check.status();
  for (int i = 0; i < kIntents; ++i) {
    const std::string key = "k-" + std::to_string(i);
    EXPECT_EQ((*check)->Get(key).value().state, IntentState::kSucceeded) << key;
    EXPECT_EQ(queries[key], 1) << key;
    EXPECT_EQ(resolved[key], 1) << key;
  }
  EXPECT_EQ((*check)->OldestUnresolvedAge().value(), std::nullopt);
}

}  // namespace
}  // namespace saferetry

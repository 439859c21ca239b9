// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// What only the SQLite journal promises: the file's mode, no secret in its
// bytes, restarts, several processes on one file, kill -9 right after
// Record, the schema version, and corrupt rows reported as kDataLoss.

#include "saferetry/sqlite_journal.h"

#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "journal_test_util.h"
#include "saferetry/journal.h"
#include "saferetry/testing/fake_clock.h"
#include "src/intents/sqlite/journal_codec.h"

namespace saferetry {
namespace {

using std::chrono::seconds;
using ::testing::HasSubstr;

class SqliteJournalTest : public ::testing::Test {
 protected:
  SqliteJournalOptions Options() const {
    SqliteJournalOptions o;
    o.path = path_;
    o.owner = "owner-a";
    o.clock = clock_;
    return o;
  }

  std::shared_ptr<IntentJournal> Open() { return Open(Options()); }
  static std::shared_ptr<IntentJournal> Open(const SqliteJournalOptions& o) {
    absl::StatusOr<std::shared_ptr<IntentJournal>> j = OpenSqliteJournal(o);
    EXPECT_TRUE(j.ok()) << j.status();
    return j.ok() ? *j : nullptr;
  }

  Intent NewIntent(const std::string& key, const std::string& body = "{\"sku\":1}") const {
    Request r{
        "POST", "https://orders.internal/orders", {{"Content-Type", "application/json"}}, body};
    const WallTime now = clock_->WallNow();
    return MakeIntent(r, key, "https://orders.internal/orders/by-key/{key}", now, now + seconds(1));
  }

  // Runs `sql` on the file with a plain SQLite connection.
  void RawSql(const std::string& sql) const {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    char* err = nullptr;
    const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
    EXPECT_EQ(rc, SQLITE_OK) << (err != nullptr ? err : "");
    sqlite3_free(err);
    sqlite3_close(db);
  }

  static mode_t ModeOf(const std::string& file) {
    struct stat st {};
    if (stat(file.c_str(), &st) != 0) return 0;
    return st.st_mode & 0777;
  }

  journal_test::TempDir dir_;
  std::string path_ = dir_.path() + "/intents.db";
  std::shared_ptr<testkit::FakeClock> clock_ = std::make_shared<testkit::FakeClock>();
};

TEST_F(SqliteJournalTest, FileAndCompanionsAreOwnerOnlyWhateverTheUmask) {
  const mode_t old = umask(0);
  std::shared_ptr<IntentJournal> j = Open();
  umask(old);
  ASSERT_NE(j, nullptr);
  ASSERT_TRUE(j->Record(NewIntent("k-1")).ok());
  EXPECT_EQ(ModeOf(path_), 0600u);
  EXPECT_EQ(ModeOf(path_ + "-wal"), 0600u);
  EXPECT_EQ(ModeOf(path_ + "-shm"), 0600u);
  // A umask that takes the owner's bits away does not make it unusable either.
  const std::string other = dir_.path() + "/other.db";
  const mode_t strict = umask(0377);
  SqliteJournalOptions o = Options();
  o.path = other;
  std::shared_ptr<IntentJournal> j2 = Open(o);
  umask(strict);
  ASSERT_NE(j2, nullptr);
  EXPECT_TRUE(j2->Record(NewIntent("k-1")).ok());
  EXPECT_EQ(ModeOf(other), 0600u);
}

TEST_F(SqliteJournalTest, RefusesAFileOthersMayReadAndSymbolicLinks) {
  const int fd = open(path_.c_str(), O_CREAT | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(fchmod(fd, 0644), 0);
  close(fd);
  absl::StatusOr<std::shared_ptr<IntentJournal>> j = OpenSqliteJournal(Options());
  EXPECT_EQ(j.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(j.status().message(), HasSubstr("0644"));
  ASSERT_EQ(chmod(path_.c_str(), 0600), 0);
  EXPECT_TRUE(OpenSqliteJournal(Options()).ok());

  const std::string link = dir_.path() + "/link.db";
  ASSERT_EQ(symlink(path_.c_str(), link.c_str()), 0);
  SqliteJournalOptions o = Options();
  o.path = link;
  j = OpenSqliteJournal(o);
  EXPECT_EQ(j.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(j.status().message(), HasSubstr("symbolic link"));
}

TEST_F(SqliteJournalTest, OptionsAreValidated) {
  SqliteJournalOptions o = Options();
  o.path = "";
  EXPECT_THAT(OpenSqliteJournal(o).status().message(), HasSubstr("path"));
  o = Options();
  o.busy_timeout = std::chrono::milliseconds(-1);
  EXPECT_THAT(OpenSqliteJournal(o).status().message(), HasSubstr("busy_timeout"));
  o = Options();
  o.path = dir_.path() + "/missing-dir/intents.db";
  EXPECT_EQ(OpenSqliteJournal(o).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SqliteJournalTest, SecretsNeverReachTheFile) {
  SqliteJournalOptions o = Options();
  o.extra_secret_headers = {"X-Api-Key"};
  o.body_cap = 1024;  // bodies stored: still no header or URL secret
  {
    std::shared_ptr<IntentJournal> j = Open(o);
    ASSERT_NE(j, nullptr);
    Request r{"POST",
              "https://bob:hunter2pw@orders.internal/orders",
              {{"Authorization", "Bearer s3cr3t-token"},
               {"Cookie", "session=c00kie-value"},
               {"Proxy-Authorization", "Basic pr0xy-cred"},
               {"X-Api-Key", "api-k3y-value"},
               {"Content-Type", "application/json"}},
              "{\"sku\":\"visible-body\"}"};
    Intent intent = MakeIntent(r, "k-visible", "https://qtoken@orders.internal/by-key/{key}",
                               clock_->WallNow(), clock_->WallNow() + seconds(5));
    intent.headers = r.headers;  // as a careless caller would
    ASSERT_TRUE(j->Record(intent).ok());
    ASSERT_TRUE(j->Finish("k-visible", IntentState::kUnknown,
                          {0, "deadline_exceeded", "", "GET https://bob:hunter2pw@h/ timed out"})
                    .ok());
    // While open the rows are in the WAL; read every file.
    const std::string bytes =
        journal_test::ReadFileBytes(path_) + journal_test::ReadFileBytes(path_ + "-wal");
    ASSERT_THAT(bytes, HasSubstr("k-visible"));  // the read sees the records
    ASSERT_THAT(bytes, HasSubstr("visible-body"));
    for (const char* secret :
         {"s3cr3t-token", "c00kie-value", "pr0xy-cred", "api-k3y-value", "hunter2pw", "qtoken"}) {
      EXPECT_THAT(bytes, ::testing::Not(HasSubstr(secret))) << secret;
    }
  }
  // Closed: checkpointed into the main file.
  const std::string bytes = journal_test::ReadFileBytes(path_);
  ASSERT_THAT(bytes, HasSubstr("k-visible"));
  for (const char* secret :
       {"s3cr3t-token", "c00kie-value", "pr0xy-cred", "api-k3y-value", "hunter2pw", "qtoken"}) {
    EXPECT_THAT(bytes, ::testing::Not(HasSubstr(secret))) << secret;
  }
}

TEST_F(SqliteJournalTest, ARestartKeepsIntentsAndTheBodyGuard) {
  {
    std::shared_ptr<IntentJournal> j = Open();
    ASSERT_NE(j, nullptr);
    ASSERT_TRUE(j->Record(NewIntent("k-1", "body-1")).ok());
    ASSERT_TRUE(j->MarkSent("k-1", 1).ok());
  }
  std::shared_ptr<IntentJournal> j = Open();
  ASSERT_NE(j, nullptr);
  absl::StatusOr<Intent> i = j->Get("k-1");
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_EQ(i->state, IntentState::kSent);
  absl::StatusOr<RecordResult> reuse = j->Record(NewIntent("k-1", "body-2"));
  EXPECT_EQ(reuse.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(reuse.status().message(), HasSubstr("idempotency_key"));
}

TEST_F(SqliteJournalTest, SchemaIsVersionedAndANewerFileIsRefused) {
  ASSERT_NE(Open(), nullptr);
  RawSql("PRAGMA user_version=1");  // unchanged: opens
  ASSERT_NE(Open(), nullptr);
  RawSql("PRAGMA user_version=2");
  absl::StatusOr<std::shared_ptr<IntentJournal>> j = OpenSqliteJournal(Options());
  EXPECT_EQ(j.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(j.status().message(), HasSubstr("schema"));
}

TEST_F(SqliteJournalTest, ACorruptRowIsDataLossNamingTheField) {
  std::shared_ptr<IntentJournal> j = Open();
  ASSERT_NE(j, nullptr);
  ASSERT_TRUE(j->Record(NewIntent("k-1")).ok());
  ASSERT_TRUE(j->Record(NewIntent("k-2")).ok());
  RawSql("UPDATE intents SET state = 'BOGUS' WHERE key = 'k-1'");
  RawSql("UPDATE intents SET headers = 'h1;5:X-Bad,3:a' WHERE key = 'k-2'");
  absl::StatusOr<Intent> i = j->Get("k-1");
  EXPECT_EQ(i.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(i.status().message(), HasSubstr("state"));
  EXPECT_EQ(j->MarkSent("k-1", 1).code(), absl::StatusCode::kDataLoss);
  i = j->Get("k-2");
  EXPECT_EQ(i.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(i.status().message(), HasSubstr("headers"));
}

TEST_F(SqliteJournalTest, ConcurrentClaimsFromThreadsOnSeparateConnectionsExactlyOneWins) {
  constexpr int kThreads = 6;
  constexpr int kKeys = 15;
  {
    std::shared_ptr<IntentJournal> j = Open();
    ASSERT_NE(j, nullptr);
    for (int k = 0; k < kKeys; ++k) ASSERT_TRUE(j->Record(NewIntent(std::to_string(k))).ok());
  }
  clock_->Advance(seconds(10));
  std::vector<std::shared_ptr<IntentJournal>> journals;
  for (int t = 0; t < kThreads; ++t) journals.push_back(Open());
  std::vector<std::vector<bool>> won(kThreads, std::vector<bool>(kKeys, false));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < kKeys; ++k) {
        absl::StatusOr<bool> w = journals[t]->Claim(std::to_string(k), "t" + std::to_string(t),
                                                    clock_->WallNow() + seconds(60));
        won[t][k] = w.ok() && *w;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int k = 0; k < kKeys; ++k) {
    int winners = 0;
    for (int t = 0; t < kThreads; ++t) winners += won[t][k] ? 1 : 0;
    EXPECT_EQ(winners, 1) << "key " << k;
  }
}

TEST_F(SqliteJournalTest, GroupCommitOffStillSerialisesWritersFromThreads) {
  SqliteJournalOptions o = Options();
  o.group_commit = false;
  std::shared_ptr<IntentJournal> j = Open(o);
  ASSERT_NE(j, nullptr);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int n = 0; n < 20; ++n) {
        const std::string key = std::to_string(t) + "-" + std::to_string(n);
        EXPECT_TRUE(j->Record(NewIntent(key)).ok());
        EXPECT_TRUE(j->Finish(key, IntentState::kSucceeded, {}).ok());
      }
    });
  }
  for (std::thread& th : threads) th.join();
  absl::StatusOr<PruneResult> r = j->Prune(clock_->WallNow(), std::chrono::milliseconds(0));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->pruned, 80);
}

// Forked children share the file with the parent; each reports through a pipe.
// The parent holds no connection across fork().
TEST_F(SqliteJournalTest, ForkedProcessesClaimEachKeyExactlyOnce) {
  constexpr int kProcesses = 4;
  constexpr int kKeys = 30;
  {
    std::shared_ptr<IntentJournal> j = Open();
    ASSERT_NE(j, nullptr);
    for (int k = 0; k < kKeys; ++k) ASSERT_TRUE(j->Record(NewIntent("k" + std::to_string(k))).ok());
  }
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  std::vector<pid_t> children;
  std::vector<int> results;
  for (int p = 0; p < kProcesses; ++p) {
    int out[2];
    ASSERT_EQ(pipe(out), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(go[1]);
      close(out[0]);
      auto clock = std::make_shared<testkit::FakeClock>();
      clock->Advance(seconds(10));  // Record's claims (deadline + 2 s) have expired
      SqliteJournalOptions o;
      o.path = path_;
      o.clock = clock;
      absl::StatusOr<std::shared_ptr<IntentJournal>> j = OpenSqliteJournal(o);
      char c = 0;
      if (read(go[0], &c, 1) != 1 || !j.ok()) _exit(2);
      std::string wins(kKeys, '0');
      for (int k = 0; k < kKeys; ++k) {
        absl::StatusOr<bool> w = (*j)->Claim("k" + std::to_string(k), "proc-" + std::to_string(p),
                                             clock->WallNow() + seconds(600));
        if (!w.ok()) _exit(3);
        if (*w) wins[static_cast<std::size_t>(k)] = '1';
      }
      if (write(out[1], wins.data(), wins.size()) != static_cast<ssize_t>(wins.size())) _exit(4);
      _exit(0);
    }
    close(out[1]);
    children.push_back(pid);
    results.push_back(out[0]);
  }
  close(go[0]);
  const std::string start(kProcesses, 'g');
  ASSERT_EQ(write(go[1], start.data(), start.size()), static_cast<ssize_t>(start.size()));
  close(go[1]);
  std::vector<int> winners(kKeys, 0);
  for (int p = 0; p < kProcesses; ++p) {
    int status = 0;
    ASSERT_EQ(waitpid(children[p], &status, 0), children[p]);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child " << p << " " << status;
    char buf[kKeys] = {};
    const ssize_t n = read(results[p], buf, sizeof(buf));
    close(results[p]);
    ASSERT_EQ(n, kKeys);
    for (int k = 0; k < kKeys; ++k) winners[k] += buf[k] == '1' ? 1 : 0;
  }
  for (int k = 0; k < kKeys; ++k) EXPECT_EQ(winners[k], 1) << "k" << k;
  std::shared_ptr<IntentJournal> j = Open();
  ASSERT_NE(j, nullptr);
  EXPECT_THAT(j->Get("k0").value().claim_owner, ::testing::StartsWith("proc-"));
}

// 50 processes open one journal file that does not exist yet, at once, and
// each journals a call (records an intent, marks it sent, finishes it): every
// one succeeds, waiting within `busy_timeout` for the others' locks.
TEST_F(SqliteJournalTest, ConcurrentFirstOpensOfAFreshFileAllSucceed) {
  constexpr int kProcesses = 50;
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round);
    const std::string path = dir_.path() + "/fresh-" + std::to_string(round) + ".db";
    int go[2];
    ASSERT_EQ(pipe(go), 0);
    std::vector<pid_t> children;
    for (int p = 0; p < kProcesses; ++p) {
      const pid_t pid = fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        close(go[1]);
        char c = 0;
        if (read(go[0], &c, 1) != 1) _exit(2);
        SqliteJournalOptions o;
        o.path = path;
        absl::StatusOr<std::shared_ptr<IntentJournal>> j = OpenSqliteJournal(o);
        if (!j.ok()) {
          std::fprintf(stderr, "open: %s\n", j.status().ToString().c_str());
          _exit(3);
        }
        const std::string key = "k-" + std::to_string(p);
        Request r{"POST", "https://orders.internal/orders", {}, "{}"};
        const WallTime now = std::chrono::system_clock::now();
        absl::Status s = (*j)->Record(MakeIntent(r, key, "", now, now + seconds(5))).status();
        if (s.ok()) s = (*j)->MarkSent(key, 1);
        if (s.ok()) s = (*j)->Finish(key, IntentState::kSucceeded, IntentSummary{});
        if (!s.ok()) {
          std::fprintf(stderr, "journal: %s\n", s.ToString().c_str());
          _exit(4);
        }
        _exit(0);
      }
      children.push_back(pid);
    }
    close(go[0]);
    const std::string start(kProcesses, 'g');
    ASSERT_EQ(write(go[1], start.data(), start.size()), static_cast<ssize_t>(start.size()));
    close(go[1]);
    int failures = 0;
    for (pid_t pid : children) {
      int status = 0;
      ASSERT_EQ(waitpid(pid, &status, 0), pid);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
    }
    EXPECT_EQ(failures, 0);
    SqliteJournalOptions o;
    o.path = path;
    std::shared_ptr<IntentJournal> j = Open(o);
    ASSERT_NE(j, nullptr);
    for (int p = 0; p < kProcesses; ++p) {
      absl::StatusOr<Intent> got = j->Get("k-" + std::to_string(p));
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(got->state, IntentState::kSucceeded);
    }
  }
}

// A child records intents, tells the parent, and is killed with SIGKILL before
// it can do anything else: every intent whose Record returned is in the file.
void RecordThenGetKilled(const std::string& path, SqliteSynchronous sync) {
  constexpr int kIntents = 25;
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(ready[0]);
    SqliteJournalOptions o;
    o.path = path;
    o.synchronous = sync;
    o.owner = "doomed";
    absl::StatusOr<std::shared_ptr<IntentJournal>> j = OpenSqliteJournal(o);
    if (!j.ok()) _exit(2);
    const WallTime now = SystemClock()->WallNow();
    for (int n = 0; n < kIntents; ++n) {
      Request r{"POST", "https://orders.internal/orders", {}, "body-" + std::to_string(n)};
      if (!(*j)->Record(MakeIntent(r, "kill-" + std::to_string(n), "", now, now + seconds(5)))
               .ok()) {
        _exit(3);
      }
      if (n % 2 == 1 && !(*j)->MarkSent("kill-" + std::to_string(n), 1).ok()) _exit(4);
    }
    const char c = 'r';
    if (write(ready[1], &c, 1) != 1) _exit(5);
    while (true) pause();  // killed here, the journal still open
  }
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  SqliteJournalOptions o;
  o.path = path;
  absl::StatusOr<std::shared_ptr<IntentJournal>> j = OpenSqliteJournal(o);
  ASSERT_TRUE(j.ok()) << j.status();
  for (int n = 0; n < kIntents; ++n) {
    absl::StatusOr<Intent> i = (*j)->Get("kill-" + std::to_string(n));
    ASSERT_TRUE(i.ok()) << n << ": " << i.status();
    EXPECT_EQ(i->state, n % 2 == 1 ? IntentState::kSent : IntentState::kPending);
    EXPECT_EQ(i->body_digest, BodyDigest("body-" + std::to_string(n)));
    EXPECT_EQ(i->claim_owner, "doomed");
  }
}

TEST_F(SqliteJournalTest, RecordSurvivesSigkillRightAfterItReturnsNormal) {
  RecordThenGetKilled(path_, SqliteSynchronous::kNormal);
}

TEST_F(SqliteJournalTest, RecordSurvivesSigkillRightAfterItReturnsFull) {
  RecordThenGetKilled(path_, SqliteSynchronous::kFull);
}

TEST(JournalCodec, HeadersRoundTripCanonically) {
  const Headers headers = {{"Content-Type", "application/json"}, {"X-Empty", ""}, {"A", "1:2,"}};
  const std::string blob = internal::EncodeHeaders(headers);
  EXPECT_EQ(blob, "h1;12:Content-Type,16:application/json,7:X-Empty,0:,1:A,4:1:2,,");
  absl::StatusOr<Headers> back = internal::DecodeHeaders(blob);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, headers);
  EXPECT_EQ(internal::DecodeHeaders("h1;").value(), Headers{});
}

TEST(JournalCodec, MalformedHeadersAreDataLoss) {
  for (const char* bad :
       {"", "h2;", "h1", "h1;1:A", "h1;1:A,", "h1;1:A,1:b", "h1;01:A,1:b,", "h1;1:A,2:b,",
        "h1;1:A,1:\n,", "h1;1: ,1:b,", "h1;x:A,1:b,", "h1;9999999:A,1:b,"}) {
    EXPECT_EQ(internal::DecodeHeaders(bad).status().code(), absl::StatusCode::kDataLoss) << bad;
  }
}

}  // namespace
}  // namespace saferetry

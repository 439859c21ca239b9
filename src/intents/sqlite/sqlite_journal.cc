// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The SQLite intent journal. Layout (schema version 1, `PRAGMA user_version`):
// one table `intents`, one row per key, with a partial index over the
// unresolved rows by age (what the reconciler and the gauge read) and one
// over the resolved rows by last update (what retention deletes).
//
// Threads: one write connection behind a leader/follower queue, so that
// concurrent writes share one transaction and one sync (group commit), and
// one read connection behind a mutex. SQLite admits one writer at a time per
// file anyway: more write connections in one process would only contend on
// the file lock, whose busy handler waits by sleeping.

#include "saferetry/sqlite_journal.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "journal_codec.h"
#include "saferetry/journal.h"
#include "sqlite_support.h"

namespace saferetry {
namespace {

using internal::CheckCompanionFiles;
using internal::Connection;
using internal::FromUnixMillis;
using internal::IntentRow;
using internal::PrepareFile;
using internal::SqliteError;
using internal::Statement;
using internal::ToUnixMillis;

// The schema, by version. Migration k (k >= 1) takes a file from version k-1
// to k; each runs in one transaction with the version bump, so a file is
// always at exactly one version. Never edit a released step: append one.
constexpr const char* kMigrations[] = {
    // 0 -> 1
    "CREATE TABLE intents ("
    "  key TEXT PRIMARY KEY NOT NULL,"
    "  method TEXT NOT NULL,"
    "  url TEXT NOT NULL,"
    "  body_digest TEXT NOT NULL,"
    "  body BLOB,"
    "  status_url_template TEXT NOT NULL,"
    "  headers BLOB NOT NULL,"
    "  created_ms INTEGER NOT NULL,"
    "  deadline_ms INTEGER NOT NULL,"
    "  state TEXT NOT NULL,"
    "  attempt INTEGER NOT NULL,"
    "  http_status INTEGER NOT NULL,"
    "  stop_reason TEXT NOT NULL,"
    "  resolved_by TEXT NOT NULL,"
    "  last_error TEXT NOT NULL,"
    "  claim_owner TEXT NOT NULL,"
    "  claim_until_ms INTEGER NOT NULL,"
    "  updated_ms INTEGER NOT NULL"
    ") WITHOUT ROWID;"
    "CREATE INDEX intents_unresolved ON intents(created_ms, key)"
    "  WHERE state IN ('PENDING', 'SENT', 'UNKNOWN');"
    "CREATE INDEX intents_resolved ON intents(updated_ms)"
    "  WHERE state IN ('SUCCEEDED', 'FAILED');",
};
constexpr int kSchemaVersion = static_cast<int>(std::size(kMigrations));

constexpr const char* kColumns =
    "key, method, url, body_digest, body, status_url_template, headers, created_ms, "
    "deadline_ms, state, attempt, http_status, stop_reason, resolved_by, last_error, "
    "claim_owner, claim_until_ms, updated_ms";

IntentRow ReadRow(const Statement& s) {
  IntentRow row;
  row.key = s.Text(0);
  row.method = s.Text(1);
  row.url = s.Text(2);
  row.body_digest = s.Text(3);
  if (!s.IsNull(4)) row.body = s.Text(4);
  row.status_url_template = s.Text(5);
  row.headers = s.Text(6);
  row.created_ms = s.Int(7);
  row.deadline_ms = s.Int(8);
  row.state = s.Text(9);
  row.attempt = s.Int(10);
  row.http_status = s.Int(11);
  row.stop_reason = s.Text(12);
  row.resolved_by = s.Text(13);
  row.last_error = s.Text(14);
  row.claim_owner = s.Text(15);
  row.claim_until_ms = s.Int(16);
  row.updated_ms = s.Int(17);
  return row;
}

absl::Status NoIntent(std::string_view key) {
  return absl::NotFoundError(absl::StrCat("idempotency_key: no intent \"", std::string(key), "\""));
}

const std::string kSelectByKey = absl::StrCat("SELECT ", kColumns, " FROM intents WHERE key = ?");
const std::string kInsert = absl::StrCat("INSERT INTO intents (", kColumns,
                                         ") VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
const std::string kListUnfinished = absl::StrCat(
    "SELECT ", kColumns,
    " FROM intents WHERE state IN ('PENDING', 'SENT', 'UNKNOWN') AND created_ms <= ?"
    " AND (? = 0 OR deadline_ms <= ?) AND (? = 0 OR claim_owner = '' OR claim_until_ms <= ?)"
    " ORDER BY created_ms, key LIMIT ?");
constexpr const char* kSelectState = "SELECT state, attempt FROM intents WHERE key = ?";
constexpr const char* kSelectClaim =
    "SELECT state, claim_owner, claim_until_ms FROM intents WHERE key = ?";
constexpr const char* kUpdateSent =
    "UPDATE intents SET state = 'SENT', attempt = ?, updated_ms = ? WHERE key = ?";
constexpr const char* kUpdateFinish =
    "UPDATE intents SET state = ?, http_status = ?, stop_reason = ?, resolved_by = ?,"
    " last_error = ?, updated_ms = ? WHERE key = ?";
constexpr const char* kUpdateClaim =
    "UPDATE intents SET claim_owner = ?, claim_until_ms = ?, updated_ms = ? WHERE key = ?";
constexpr const char* kDeleteResolved =
    "DELETE FROM intents WHERE state IN ('SUCCEEDED', 'FAILED') AND updated_ms <= ?";
constexpr const char* kCountOldUnresolved =
    "SELECT COUNT(*) FROM intents WHERE state IN ('PENDING', 'SENT', 'UNKNOWN')"
    " AND created_ms <= ?";
constexpr const char* kOldestUnresolved =
    "SELECT MIN(created_ms) FROM intents WHERE state IN ('PENDING', 'SENT', 'UNKNOWN')";

// Reads the intent's state and attempt (enough for MarkSent and Finish).
absl::StatusOr<Intent> SelectState(Connection& conn, std::string_view key) {
  absl::StatusOr<sqlite3_stmt*> stmt = conn.Prepare(kSelectState);
  if (!stmt.ok()) return stmt.status();
  Statement s(conn, *stmt);
  s.Bind(key);
  absl::StatusOr<bool> row = s.Step();
  if (!row.ok()) return row.status();
  if (!*row) return NoIntent(key);
  Intent intent;
  intent.key = std::string(key);
  const std::string state = s.Text(0);
  std::optional<IntentState> parsed = ParseIntentState(state);
  if (!parsed.has_value()) {
    return absl::DataLossError(
        absl::StrCat("journal record \"", std::string(key), "\": state: unknown state"));
  }
  intent.state = *parsed;
  intent.attempt = static_cast<int>(s.Int(1));
  return intent;
}

absl::StatusOr<std::optional<Intent>> SelectIntent(Connection& conn, std::string_view key) {
  absl::StatusOr<sqlite3_stmt*> stmt = conn.Prepare(kSelectByKey.c_str());
  if (!stmt.ok()) return stmt.status();
  Statement s(conn, *stmt);
  s.Bind(key);
  absl::StatusOr<bool> row = s.Step();
  if (!row.ok()) return row.status();
  if (!*row) return std::optional<Intent>();
  absl::StatusOr<Intent> intent = internal::DecodeIntentRow(ReadRow(s));
  if (!intent.ok()) return intent.status();
  return std::optional<Intent>(*std::move(intent));
}

class SqliteJournal final : public IntentJournal {
 public:
  explicit SqliteJournal(const SqliteJournalOptions& options)
      : options_(options),
        owner_(internal::JournalOwner(options)),
        clock_(options.clock != nullptr ? options.clock : SystemClock()) {}

  // Opens the file, retrying while another process holds a lock the busy
  // handler does not wait for. Two processes opening a file that does not
  // exist yet race to switch it to WAL and to create the schema; SQLite
  // answers some of those steps SQLITE_BUSY at once, without calling the
  // busy handler (it cannot wait there without risking a deadlock). The
  // whole sequence is idempotent, so it is run again, within `busy_timeout`.
  absl::Status Open() {
    if (auto s = PrepareFile(options_.path); !s.ok()) return s;
    // Time through the journal's clock seam, like every other wait here.
    const TimePoint give_up = clock_->Now() + options_.busy_timeout;
    for (int round = 0;; ++round) {
      absl::Status s = OpenOnce();
      const bool busy = writer_.LastErrorWasBusy() || reader_.LastErrorWasBusy() ||
                        absl::StrContains(s.message(), "database is locked") ||
                        absl::StrContains(s.message(), "database table is locked");
      if (s.ok() || !absl::IsUnavailable(s) || !busy || clock_->Now() >= give_up) {
        return s;
      }
      writer_.Close();
      reader_.Close();
      // 1, 2, 4 ... 16 ms, plus a share of the process id so that processes
      // started together do not retry in step.
      const int pause_us = (1000 << std::min(round, 4)) + static_cast<int>(getpid() % 997);
      clock_->SleepFor(std::chrono::microseconds(pause_us));
    }
  }

  absl::Status OpenOnce() {
    for (Connection* conn : {&writer_, &reader_}) {
      if (auto s = conn->Open(options_.path, options_.busy_timeout); !s.ok()) return s;
    }
    // WAL first: it is a property of the file, and every connection agrees.
    {
      absl::StatusOr<sqlite3_stmt*> stmt = writer_.Prepare("PRAGMA journal_mode=WAL");
      if (!stmt.ok()) return stmt.status();
      Statement s(writer_, *stmt);
      absl::StatusOr<bool> row = s.Step();
      if (!row.ok()) return row.status();
      if (!*row || s.Text(0) != "wal") {
        return absl::UnavailableError(
            absl::StrCat("path: ", options_.path, ": cannot switch to WAL mode"));
      }
    }
    const char* sync = options_.synchronous == SqliteSynchronous::kFull
                           ? "PRAGMA synchronous=FULL"
                           : "PRAGMA synchronous=NORMAL";
    if (auto s = writer_.Exec(sync); !s.ok()) return s;
    if (auto s = reader_.Exec("PRAGMA query_only=1"); !s.ok()) return s;
    if (auto s = Migrate(); !s.ok()) return s;
    return CheckCompanionFiles(options_.path);
  }

  std::string Owner() const override { return owner_; }

  absl::StatusOr<RecordResult> Record(const Intent& intent) override {
    absl::StatusOr<Intent> normal =
        internal::NormalizeIntent(intent, options_, owner_, clock_->WallNow());
    if (!normal.ok()) return normal.status();
    RecordResult result;
    absl::Status status = Write([&](Connection& conn) -> absl::Status {
      absl::StatusOr<std::optional<Intent>> existing = SelectIntent(conn, normal->key);
      if (!existing.ok()) return existing.status();
      if (existing->has_value()) {
        if (auto s = internal::CheckSameIntent(**existing, *normal); !s.ok()) return s;
        result.intent = **std::move(existing);
        result.created = false;
        return absl::OkStatus();
      }
      const IntentRow row = internal::EncodeIntentRow(*normal);
      absl::StatusOr<sqlite3_stmt*> stmt = conn.Prepare(kInsert.c_str());
      if (!stmt.ok()) return stmt.status();
      Statement s(conn, *stmt);
      s.Bind(row.key).Bind(row.method).Bind(row.url).Bind(row.body_digest).BindBlob(row.body);
      s.Bind(row.status_url_template).BindBlob(std::string_view(row.headers));
      s.Bind(row.created_ms).Bind(row.deadline_ms).Bind(row.state).Bind(row.attempt);
      s.Bind(row.http_status).Bind(row.stop_reason).Bind(row.resolved_by).Bind(row.last_error);
      s.Bind(row.claim_owner).Bind(row.claim_until_ms).Bind(row.updated_ms);
      if (auto st = s.Run(); !st.ok()) return st;
      result.intent = *normal;
      result.created = true;
      return absl::OkStatus();
    });
    if (!status.ok()) return status;
    return result;
  }

  absl::Status MarkSent(std::string_view key, int attempt) override {
    return Write([&](Connection& conn) -> absl::Status {
      absl::StatusOr<Intent> stored = SelectState(conn, key);
      if (!stored.ok()) return stored.status();
      if (auto s = internal::CheckMarkSent(*stored, attempt); !s.ok()) return s;
      absl::StatusOr<sqlite3_stmt*> stmt = conn.Prepare(kUpdateSent);
      if (!stmt.ok()) return stmt.status();
      Statement s(conn, *stmt);
      s.Bind(std::int64_t{attempt}).Bind(ToUnixMillis(clock_->WallNow())).Bind(key);
      return s.Run();
    });
  }

  absl::Status Finish(std::string_view key, IntentState outcome,
                      const IntentSummary& summary) override {
    const IntentSummary redacted = internal::RedactSummary(summary);
    return Write([&](Connection& conn) -> absl::Status {
      absl::StatusOr<Intent> stored = SelectState(conn, key);
      if (!stored.ok()) return stored.status();
      if (auto s = internal::CheckFinish(*stored, outcome); !s.ok()) return s;
      absl::StatusOr<sqlite3_stmt*> stmt = conn.Prepare(kUpdateFinish);
      if (!stmt.ok()) return stmt.status();
      Statement s(conn, *stmt);
      s.Bind(IntentStateName(outcome)).Bind(std::int64_t{redacted.http_status});
      s.Bind(redacted.stop_reason).Bind(redacted.resolved_by).Bind(redacted.last_error);
      s.Bind(ToUnixMillis(clock_->WallNow())).Bind(key);
      return s.Run();
    });
  }

  absl::StatusOr<Intent> Get(std::string_view key) override {
    std::lock_guard<std::mutex> lock(reader_mu_);
    absl::StatusOr<std::optional<Intent>> intent = SelectIntent(reader_, key);
    if (!intent.ok()) return intent.status();
    if (!intent->has_value()) return NoIntent(key);
    return **std::move(intent);
  }

  absl::StatusOr<std::vector<Intent>> ListUnfinished(const UnfinishedFilter& filter) override {
    if (filter.older_than.has_value() && filter.older_than->count() < 0) {
      return absl::InvalidArgumentError("older_than: must be >= 0");
    }
    const std::int64_t now_ms = ToUnixMillis(clock_->WallNow());
    const std::int64_t created_max = filter.older_than.has_value()
                                         ? now_ms - filter.older_than->count()
                                         : std::numeric_limits<std::int64_t>::max();
    const std::int64_t limit = filter.limit == 0 ? -1 : static_cast<std::int64_t>(filter.limit);
    std::lock_guard<std::mutex> lock(reader_mu_);
    absl::StatusOr<sqlite3_stmt*> stmt = reader_.Prepare(kListUnfinished.c_str());
    if (!stmt.ok()) return stmt.status();
    Statement s(reader_, *stmt);
    s.Bind(created_max).Bind(std::int64_t{filter.deadline_passed}).Bind(now_ms);
    s.Bind(std::int64_t{filter.claim_expired}).Bind(now_ms).Bind(limit);
    std::vector<Intent> out;
    while (true) {
      absl::StatusOr<bool> row = s.Step();
      if (!row.ok()) return row.status();
      if (!*row) break;
      absl::StatusOr<Intent> intent = internal::DecodeIntentRow(ReadRow(s));
      if (!intent.ok()) return intent.status();
      out.push_back(*std::move(intent));
    }
    return out;
  }

  absl::StatusOr<bool> Claim(std::string_view key, std::string_view owner,
                             WallTime until) override {
    if (owner.empty()) return absl::InvalidArgumentError("owner: must not be empty");
    bool won = false;
    absl::Status status = Write([&](Connection& conn) -> absl::Status {
      won = false;
      absl::StatusOr<sqlite3_stmt*> select = conn.Prepare(kSelectClaim);
      if (!select.ok()) return select.status();
      bool take = false;
      {
        Statement s(conn, *select);
        s.Bind(key);
        absl::StatusOr<bool> row = s.Step();
        if (!row.ok()) return row.status();
        if (!*row) return NoIntent(key);
        std::optional<IntentState> state = ParseIntentState(s.Text(0));
        const std::string holder = s.Text(1);
        const std::int64_t holder_until = s.Int(2);
        const std::int64_t now_ms = ToUnixMillis(clock_->WallNow());
        take = state.has_value() && !IsResolved(*state) &&
               (holder.empty() || holder == owner || holder_until <= now_ms);
      }
      if (!take) return absl::OkStatus();
      absl::StatusOr<sqlite3_stmt*> update = conn.Prepare(kUpdateClaim);
      if (!update.ok()) return update.status();
      Statement s(conn, *update);
      s.Bind(owner).Bind(ToUnixMillis(until)).Bind(ToUnixMillis(clock_->WallNow())).Bind(key);
      if (auto st = s.Run(); !st.ok()) return st;
      won = true;
      return absl::OkStatus();
    });
    if (!status.ok()) return status;
    return won;
  }

  absl::StatusOr<bool> Release(std::string_view key, std::string_view owner) override {
    bool released = false;
    absl::Status status = Write([&](Connection& conn) -> absl::Status {
      released = false;
      absl::StatusOr<sqlite3_stmt*> select = conn.Prepare(kSelectClaim);
      if (!select.ok()) return select.status();
      {
        Statement s(conn, *select);
        s.Bind(key);
        absl::StatusOr<bool> row = s.Step();
        if (!row.ok()) return row.status();
        if (!*row) return NoIntent(key);
        if (owner.empty() || s.Text(1) != owner) return absl::OkStatus();
      }
      absl::StatusOr<sqlite3_stmt*> update = conn.Prepare(kUpdateClaim);
      if (!update.ok()) return update.status();
      Statement s(conn, *update);
      s.Bind(std::string_view("")).Bind(std::int64_t{0});
      s.Bind(ToUnixMillis(clock_->WallNow())).Bind(key);
      if (auto st = s.Run(); !st.ok()) return st;
      released = true;
      return absl::OkStatus();
    });
    if (!status.ok()) return status;
    return released;
  }

  absl::StatusOr<PruneResult> Prune(WallTime now, std::chrono::milliseconds retention) override {
    if (retention.count() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("retention: must be >= 0, got ", retention.count(), "ms"));
    }
    const std::int64_t cutoff = ToUnixMillis(now) - retention.count();
    PruneResult result;
    absl::Status status = Write([&](Connection& conn) -> absl::Status {
      absl::StatusOr<sqlite3_stmt*> del = conn.Prepare(kDeleteResolved);
      if (!del.ok()) return del.status();
      {
        Statement s(conn, *del);
        s.Bind(cutoff);
        if (auto st = s.Run(); !st.ok()) return st;
      }
      result.pruned = sqlite3_changes(conn.db());
      absl::StatusOr<sqlite3_stmt*> count = conn.Prepare(kCountOldUnresolved);
      if (!count.ok()) return count.status();
      Statement s(conn, *count);
      s.Bind(cutoff);
      absl::StatusOr<bool> row = s.Step();
      if (!row.ok()) return row.status();
      result.kept_unresolved = *row ? s.Int(0) : 0;
      return absl::OkStatus();
    });
    if (!status.ok()) return status;
    return result;
  }

  absl::StatusOr<std::optional<std::chrono::milliseconds>> OldestUnresolvedAge() override {
    std::lock_guard<std::mutex> lock(reader_mu_);
    absl::StatusOr<sqlite3_stmt*> stmt = reader_.Prepare(kOldestUnresolved);
    if (!stmt.ok()) return stmt.status();
    Statement s(reader_, *stmt);
    absl::StatusOr<bool> row = s.Step();
    if (!row.ok()) return row.status();
    if (!*row || s.IsNull(0)) return std::optional<std::chrono::milliseconds>();
    const std::int64_t age = ToUnixMillis(clock_->WallNow()) - s.Int(0);
    return std::optional<std::chrono::milliseconds>(std::chrono::milliseconds(age > 0 ? age : 0));
  }

 private:
  using WriteBody = std::function<absl::Status(Connection&)>;
  struct PendingWrite {
    const WriteBody* body;
    absl::Status result;
    bool done = false;
  };

  // Runs `body` in a write transaction. Group commit: the first writer to
  // find no transaction in progress becomes the leader and runs every
  // queued write in one BEGIN IMMEDIATE ... COMMIT, each under a savepoint
  // (a failed write is rolled back alone); the others wait for its commit.
  // A write's result is reported only once its transaction has committed.
  absl::Status Write(const WriteBody& body) {
    PendingWrite self{&body, absl::OkStatus()};
    std::vector<PendingWrite*> batch;
    {
      std::unique_lock<std::mutex> lock(write_mu_);
      queue_.push_back(&self);
      write_cv_.wait(lock, [&] { return self.done || !leader_active_; });
      if (self.done) return self.result;
      leader_active_ = true;
      if (options_.group_commit) {
        batch.assign(queue_.begin(), queue_.end());
        queue_.clear();
      } else {
        batch.push_back(&self);
        queue_.erase(std::find(queue_.begin(), queue_.end(), &self));
      }
    }
    RunBatch(batch);
    {
      std::lock_guard<std::mutex> lock(write_mu_);
      for (PendingWrite* w : batch) w->done = true;
      leader_active_ = false;
    }
    write_cv_.notify_all();
    return self.result;
  }

  void RunBatch(const std::vector<PendingWrite*>& batch) {
    absl::Status begin = writer_.Exec("BEGIN IMMEDIATE");
    if (!begin.ok()) {
      for (PendingWrite* w : batch) w->result = begin;
      return;
    }
    for (PendingWrite* w : batch) {
      if (absl::Status s = writer_.Exec("SAVEPOINT w"); !s.ok()) {
        w->result = s;
        continue;
      }
      w->result = (*w->body)(writer_);
      if (!w->result.ok()) (void)writer_.Exec("ROLLBACK TO w");
      (void)writer_.Exec("RELEASE w");
    }
    absl::Status commit = writer_.Exec("COMMIT");
    if (!commit.ok()) {
      (void)writer_.Exec("ROLLBACK");
      for (PendingWrite* w : batch) {
        if (w->result.ok()) w->result = commit;
      }
    }
  }

  absl::Status Migrate() {
    return Write([](Connection& conn) -> absl::Status {
      absl::StatusOr<sqlite3_stmt*> stmt = conn.Prepare("PRAGMA user_version");
      if (!stmt.ok()) return stmt.status();
      std::int64_t version = 0;
      {
        Statement s(conn, *stmt);
        absl::StatusOr<bool> row = s.Step();
        if (!row.ok()) return row.status();
        version = *row ? s.Int(0) : 0;
      }
      if (version > kSchemaVersion) {
        return absl::FailedPreconditionError(absl::StrCat("schema: the journal file is at version ",
                                                          version, ", newer than this library's ",
                                                          kSchemaVersion));
      }
      for (std::int64_t v = version; v < kSchemaVersion; ++v) {
        if (auto s = conn.Exec(kMigrations[v]); !s.ok()) return s;
      }
      if (version == kSchemaVersion) return absl::OkStatus();
      return conn.Exec(absl::StrCat("PRAGMA user_version=", kSchemaVersion).c_str());
    });
  }

  const SqliteJournalOptions options_;
  const std::string owner_;
  const std::shared_ptr<Clock> clock_;

  Connection writer_;
  std::mutex write_mu_;
  std::condition_variable write_cv_;
  std::deque<PendingWrite*> queue_;
  bool leader_active_ = false;

  std::mutex reader_mu_;
  Connection reader_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<IntentJournal>> OpenSqliteJournal(
    const SqliteJournalOptions& options) {
  if (options.path.empty()) return absl::InvalidArgumentError("path: must not be empty");
  if (options.busy_timeout.count() < 0 || options.busy_timeout > std::chrono::hours(24)) {
    return absl::InvalidArgumentError(absl::StrCat("busy_timeout: must be from 0 to 24h, got ",
                                                   options.busy_timeout.count(), "ms"));
  }
  if (auto s = internal::ValidateJournalOptions(options); !s.ok()) return s;
  auto journal = std::make_shared<SqliteJournal>(options);
  if (auto s = journal->Open(); !s.ok()) return s;
  return std::shared_ptr<IntentJournal>(std::move(journal));
}

}  // namespace saferetry

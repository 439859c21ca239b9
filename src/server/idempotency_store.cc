// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The idempotency store over any SqlDatabase. Every statement is portable
// between SQLite (3.35+) and PostgreSQL (9.5+); the only dialect difference is
// the row lock (`FOR UPDATE`), which SQLite does not need because a write
// transaction holds the database's write lock from BEGIN IMMEDIATE on.

#include "saferetry/server/idempotency_store.h"

#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace saferetry {
namespace server {

std::int64_t SqlRow::Int(std::size_t i) const {
  if (IsNull(i)) return 0;
  return std::strtoll(columns[i]->c_str(), nullptr, 10);
}

std::string_view RecordStateName(RecordState state) {
  switch (state) {
    case RecordState::kProcessing:
      return "PROCESSING";
    case RecordState::kCompleted:
      return "COMPLETED";
    case RecordState::kFenced:
      return "FENCED";
    case RecordState::kExpired:
      return "EXPIRED";
  }
  return "UNKNOWN";
}

absl::Status ValidateStoreOptions(const StoreOptions& options) {
  if (options.lease.count() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("lease: must be > 0, got ", options.lease.count(), "ms"));
  }
  if (options.retention.count() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("retention: must be > 0, got ", options.retention.count(), "ms"));
  }
  return absl::OkStatus();
}

namespace {

// Schema version 1. The statements run one by one (neither database runs a
// multi-statement string through a prepared statement). Column types are
// spelled so that both databases accept them: BIGINT has INTEGER affinity in
// SQLite.
constexpr const char* kMigration1[] = {
    R"sql(CREATE TABLE IF NOT EXISTS saferetry_idempotency_keys (
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
    R"sql(CREATE INDEX IF NOT EXISTS saferetry_idempotency_keys_by_completion
  ON saferetry_idempotency_keys (state, completed_ms))sql",
    R"sql(CREATE TABLE IF NOT EXISTS saferetry_expired_keys (
  tenant          TEXT NOT NULL,
  operation       TEXT NOT NULL,
  idem_key        TEXT NOT NULL,
  request_digest  TEXT NOT NULL,
  response_status INTEGER,
  completed_ms    BIGINT,
  expired_ms      BIGINT NOT NULL,
  PRIMARY KEY (tenant, operation, idem_key)
))sql",
    R"sql(CREATE TABLE IF NOT EXISTS saferetry_processed_events (
  consumer     TEXT NOT NULL,
  message_id   TEXT NOT NULL,
  processed_ms BIGINT NOT NULL,
  PRIMARY KEY (consumer, message_id)
))sql",
};

constexpr char kRecordColumns[] =
    "request_digest, state, fencing_version, lease_expires_ms, response_status, response_body, "
    "created_ms, updated_ms, completed_ms";
constexpr char kWhereScope[] = " WHERE tenant = $1 AND operation = $2 AND idem_key = $3";

KeyRecord RecordFromRow(const SqlRow& row) {
  KeyRecord r;
  r.request_digest = row.Text(0);
  const std::string state = row.Text(1);
  r.state = state == "COMPLETED" ? RecordState::kCompleted
            : state == "FENCED"  ? RecordState::kFenced
                                 : RecordState::kProcessing;
  r.version = row.Int(2);
  r.lease_expires_ms = row.Int(3);
  r.response.status = static_cast<int>(row.Int(4));
  r.response.body = row.Text(5);
  r.created_ms = row.Int(6);
  r.updated_ms = row.Int(7);
  if (!row.IsNull(8)) r.completed_ms = row.Int(8);
  return r;
}

std::vector<SqlValue> ScopeParams(const KeyScope& scope) {
  return {scope.tenant, scope.operation, scope.key};
}

std::vector<SqlValue> With(std::vector<SqlValue> params, std::initializer_list<SqlValue> more) {
  params.insert(params.end(), more.begin(), more.end());
  return params;
}

absl::Status ValidateScope(const KeyScope& scope) {
  struct Field {
    const std::string& value;
    const char* name;
  };
  for (const Field& f : {Field{scope.tenant, "tenant"}, Field{scope.operation, "operation"},
                         Field{scope.key, "key"}}) {
    if (f.value.empty() || f.value.size() > 255) {
      return absl::InvalidArgumentError(
          absl::StrCat("scope.", f.name, ": must be 1 to 255 bytes, got ", f.value.size()));
    }
  }
  return absl::OkStatus();
}

// A body's way of saying "roll back, but this is not an error".
absl::Status RollbackOnly() { return absl::CancelledError("rollback only"); }
bool IsRollbackOnly(const absl::Status& s) {
  return s.code() == absl::StatusCode::kCancelled && s.message() == "rollback only";
}
// The record vanished between two statements (a concurrent reap): run the
// transaction again.
absl::Status Vanished() { return absl::AbortedError("record vanished, retry"); }
bool IsVanished(const absl::Status& s) {
  return s.code() == absl::StatusCode::kAborted && s.message() == "record vanished, retry";
}
constexpr int kVanishedRetries = 3;

class SqlIdempotencyStore final : public IdempotencyStore {
 public:
  SqlIdempotencyStore(std::shared_ptr<SqlDatabase> db, StoreOptions options,
                      std::shared_ptr<Clock> clock)
      : db_(std::move(db)),
        options_(options),
        clock_(std::move(clock)),
        lock_suffix_(db_->dialect() == SqlDialect::kPostgres ? " FOR UPDATE" : "") {}

  absl::Status Migrate() {
    return db_->RunInTransaction(TransactionMode::kWrite, [&](Transaction& txn) -> absl::Status {
      if (txn.dialect() == SqlDialect::kPostgres) {
        // Instances starting together must not race on CREATE TABLE.
        auto locked = txn.Execute("SELECT pg_advisory_xact_lock(7305210001)");
        if (!locked.ok()) return locked.status();
      }
      auto created = txn.Execute(
          "CREATE TABLE IF NOT EXISTS saferetry_schema_version (version INTEGER NOT NULL)");
      if (!created.ok()) return created.status();
      auto current = txn.Execute("SELECT MAX(version) FROM saferetry_schema_version");
      if (!current.ok()) return current.status();
      const std::int64_t version = current->empty() ? 0 : (*current)[0].Int(0);
      if (version > kStoreSchemaVersion) {
        return absl::FailedPreconditionError(
            absl::StrCat("schema: the database has saferetry schema version ", version,
                         "; this library knows up to ", kStoreSchemaVersion));
      }
      if (version < 1) {
        for (const char* sql : kMigration1) {
          if (auto r = txn.Execute(sql); !r.ok()) return r.status();
        }
        if (auto r = txn.Execute("INSERT INTO saferetry_schema_version (version) VALUES (1)");
            !r.ok()) {
          return r.status();
        }
      }
      return absl::OkStatus();
    });
  }

  absl::StatusOr<BeginResult> Begin(const KeyScope& scope,
                                    std::string_view request_digest) override {
    if (auto s = ValidateScope(scope); !s.ok()) return s;
    for (int attempt = 0;; ++attempt) {
      BeginResult result;
      absl::Status s = db_->RunInTransaction(TransactionMode::kWrite, [&](Transaction& txn) {
        return BeginIn(txn, scope, request_digest, result);
      });
      if (IsRollbackOnly(s)) s = absl::OkStatus();
      if (s.ok()) return result;
      if (!IsVanished(s) || attempt == kVanishedRetries) return s;
    }
  }

  absl::StatusOr<CompleteResult> Complete(const KeyScope& scope, std::int64_t version,
                                          const Effect& effect) override {
    if (auto s = ValidateScope(scope); !s.ok()) return s;
    CompleteResult result;
    absl::Status s =
        db_->RunInTransaction(TransactionMode::kWrite, [&](Transaction& txn) -> absl::Status {
          const EpochMillis now = NowMillis();
          auto current = LockRecord(txn, scope);
          if (!current.ok()) return current.status();
          // The fence: only the holder of the current version may complete.
          if (!current->has_value() || (*current)->state != RecordState::kProcessing ||
              (*current)->version != version) {
            if (current->has_value()) {
              result.current = **current;
            } else {
              auto tomb = ReadTombstone(txn, scope);
              if (!tomb.ok()) return tomb.status();
              result.current = *tomb;
            }
            return absl::OkStatus();
          }
          auto response = effect(txn);
          if (!response.ok()) return response.status();
          auto updated = txn.Execute(
              absl::StrCat("UPDATE saferetry_idempotency_keys SET state = 'COMPLETED', "
                           "response_status = $4, response_body = $5, updated_ms = $6, "
                           "completed_ms = $6",
                           kWhereScope, " AND fencing_version = $7 AND state = 'PROCESSING'"),
              With(ScopeParams(scope), {response->status, response->body, now, version}));
          if (!updated.ok()) return updated.status();
          if (txn.rows_affected() != 1)
            return absl::InternalError("complete: the locked record changed");
          result.committed = true;
          result.response = *std::move(response);
          return absl::OkStatus();
        });
    if (!s.ok()) return s;
    return result;
  }

  absl::StatusOr<std::optional<KeyRecord>> Read(const KeyScope& scope) override {
    if (auto s = ValidateScope(scope); !s.ok()) return s;
    std::optional<KeyRecord> out;
    absl::Status s =
        db_->RunInTransaction(TransactionMode::kRead, [&](Transaction& txn) -> absl::Status {
          auto rows = txn.Execute(absl::StrCat("SELECT ", kRecordColumns,
                                               " FROM saferetry_idempotency_keys", kWhereScope),
                                  ScopeParams(scope));
          if (!rows.ok()) return rows.status();
          if (!rows->empty()) {
            out = RecordFromRow((*rows)[0]);
            out->lease_expired =
                out->state == RecordState::kProcessing && out->lease_expires_ms <= NowMillis();
            return absl::OkStatus();
          }
          auto tomb = ReadTombstone(txn, scope);
          if (!tomb.ok()) return tomb.status();
          out = *tomb;
          return absl::OkStatus();
        });
    if (!s.ok()) return s;
    return out;
  }

  absl::StatusOr<std::optional<std::int64_t>> TakeOver(const KeyScope& scope,
                                                       std::int64_t observed_version) override {
    if (auto s = ValidateScope(scope); !s.ok()) return s;
    std::optional<std::int64_t> out;
    absl::Status s =
        db_->RunInTransaction(TransactionMode::kWrite, [&](Transaction& txn) -> absl::Status {
          const EpochMillis now = NowMillis();
          auto updated = txn.Execute(
              absl::StrCat("UPDATE saferetry_idempotency_keys SET fencing_version = $4 + 1, "
                           "lease_expires_ms = $5, updated_ms = $6",
                           kWhereScope,
                           " AND fencing_version = $4 AND state = 'PROCESSING' AND "
                           "lease_expires_ms <= $6"),
              With(ScopeParams(scope), {observed_version, now + options_.lease.count(), now}));
          if (!updated.ok()) return updated.status();
          if (txn.rows_affected() == 1) out = observed_version + 1;
          return absl::OkStatus();
        });
    if (!s.ok()) return s;
    return out;
  }

  absl::StatusOr<FenceResult> Fence(const KeyScope& scope,
                                    std::optional<std::int64_t> owned_version) override {
    if (auto s = ValidateScope(scope); !s.ok()) return s;
    for (int attempt = 0;; ++attempt) {
      FenceResult result;
      absl::Status s = db_->RunInTransaction(TransactionMode::kWrite, [&](Transaction& txn) {
        return FenceIn(txn, scope, owned_version, result);
      });
      if (IsRollbackOnly(s)) s = absl::OkStatus();
      if (s.ok()) return result;
      if (!IsVanished(s) || attempt == kVanishedRetries) return s;
    }
  }

  absl::StatusOr<int> Reap() override {
    int reaped = 0;
    absl::Status s =
        db_->RunInTransaction(TransactionMode::kWrite, [&](Transaction& txn) -> absl::Status {
          const EpochMillis now = NowMillis();
          const EpochMillis cutoff = now - options_.retention.count();
          auto moved = txn.Execute(
              "INSERT INTO saferetry_expired_keys (tenant, operation, idem_key, request_digest, "
              "response_status, completed_ms, expired_ms) "
              "SELECT tenant, operation, idem_key, request_digest, response_status, completed_ms, "
              "$1 "
              "FROM saferetry_idempotency_keys WHERE state = 'COMPLETED' AND completed_ms <= $2 "
              "ON CONFLICT DO NOTHING",
              {now, cutoff});
          if (!moved.ok()) return moved.status();
          auto deleted = txn.Execute(
              "DELETE FROM saferetry_idempotency_keys WHERE state = 'COMPLETED' AND completed_ms "
              "<= $1",
              {cutoff});
          if (!deleted.ok()) return deleted.status();
          reaped = static_cast<int>(txn.rows_affected());
          return absl::OkStatus();
        });
    if (!s.ok()) return s;
    return reaped;
  }

  absl::StatusOr<bool> ProcessOnce(
      std::string_view consumer, std::string_view message_id,
      const std::function<absl::Status(Transaction& txn)>& effect) override {
    if (consumer.empty() || consumer.size() > 255) {
      return absl::InvalidArgumentError("consumer: must be 1 to 255 bytes");
    }
    if (message_id.empty() || message_id.size() > 255) {
      return absl::InvalidArgumentError("message_id: must be 1 to 255 bytes");
    }
    bool ran = false;
    absl::Status s =
        db_->RunInTransaction(TransactionMode::kWrite, [&](Transaction& txn) -> absl::Status {
          auto inserted = txn.Execute(
              "INSERT INTO saferetry_processed_events (consumer, message_id, processed_ms) "
              "VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
              {consumer, message_id, NowMillis()});
          if (!inserted.ok()) return inserted.status();
          if (txn.rows_affected() == 0) return absl::OkStatus();  // a redelivery
          if (auto e = effect(txn); !e.ok()) return e;
          ran = true;
          return absl::OkStatus();
        });
    if (!s.ok()) return s;
    return ran;
  }

  SqlDatabase& database() override { return *db_; }
  const StoreOptions& options() const override { return options_; }

 private:
  EpochMillis NowMillis() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               clock_->WallNow().time_since_epoch())
        .count();
  }

  absl::StatusOr<std::optional<KeyRecord>> LockRecord(Transaction& txn, const KeyScope& scope) {
    auto rows =
        txn.Execute(absl::StrCat("SELECT ", kRecordColumns, " FROM saferetry_idempotency_keys",
                                 kWhereScope, lock_suffix_),
                    ScopeParams(scope));
    if (!rows.ok()) return rows.status();
    if (rows->empty()) return std::optional<KeyRecord>();
    return std::optional<KeyRecord>(RecordFromRow((*rows)[0]));
  }

  static absl::StatusOr<std::optional<KeyRecord>> ReadTombstone(Transaction& txn,
                                                                const KeyScope& scope) {
    auto rows =
        txn.Execute(absl::StrCat("SELECT request_digest, response_status, completed_ms, expired_ms "
                                 "FROM saferetry_expired_keys",
                                 kWhereScope),
                    ScopeParams(scope));
    if (!rows.ok()) return rows.status();
    if (rows->empty()) return std::optional<KeyRecord>();
    const SqlRow& row = (*rows)[0];
    KeyRecord r;
    r.request_digest = row.Text(0);
    r.state = RecordState::kExpired;
    r.response.status = static_cast<int>(row.Int(1));
    if (!row.IsNull(2)) r.completed_ms = row.Int(2);
    r.updated_ms = row.Int(3);
    return std::optional<KeyRecord>(std::move(r));
  }

  absl::Status BeginIn(Transaction& txn, const KeyScope& scope, std::string_view digest,
                       BeginResult& result) {
    const EpochMillis now = NowMillis();
    // The winner is whoever inserts first: the primary key refuses the rest
    // (in PostgreSQL a concurrent inserter waits for the first to commit).
    auto inserted = txn.Execute(
        "INSERT INTO saferetry_idempotency_keys (tenant, operation, idem_key, request_digest, "
        "state, fencing_version, lease_expires_ms, created_ms, updated_ms) "
        "VALUES ($1, $2, $3, $4, 'PROCESSING', 1, $5, $6, $6) ON CONFLICT DO NOTHING",
        With(ScopeParams(scope), {digest, now + options_.lease.count(), now}));
    if (!inserted.ok()) return inserted.status();
    if (txn.rows_affected() == 1) {
      // Checked after the insert, so a reap committing in between cannot
      // let a reaped key be claimed again.
      auto tomb = ReadTombstone(txn, scope);
      if (!tomb.ok()) return tomb.status();
      if (tomb->has_value()) {
        result.outcome = BeginOutcome::kExpired;
        return RollbackOnly();
      }
      result.outcome = BeginOutcome::kClaimed;
      result.version = 1;
      return absl::OkStatus();
    }
    auto existing = LockRecord(txn, scope);
    if (!existing.ok()) return existing.status();
    if (!existing->has_value()) {
      auto tomb = ReadTombstone(txn, scope);
      if (!tomb.ok()) return tomb.status();
      if (!tomb->has_value()) return Vanished();
      result.outcome = BeginOutcome::kExpired;
      return absl::OkStatus();
    }
    KeyRecord& r = **existing;
    r.lease_expired = r.state == RecordState::kProcessing && r.lease_expires_ms <= now;
    result.version = r.version;
    if (r.state == RecordState::kFenced) {
      result.outcome = BeginOutcome::kFenced;
      return absl::OkStatus();
    }
    if (r.request_digest != digest) {
      result.outcome = BeginOutcome::kConflictingPayload;
      return absl::OkStatus();
    }
    if (r.state == RecordState::kCompleted) {
      result.outcome = BeginOutcome::kReplay;
      result.response = r.response;
      return absl::OkStatus();
    }
    if (r.lease_expires_ms > now) {
      result.outcome = BeginOutcome::kInProgress;
      return absl::OkStatus();
    }
    // The previous worker's lease ran out: take over with a higher version,
    // so that worker's Complete() can no longer match.
    auto updated =
        txn.Execute(absl::StrCat("UPDATE saferetry_idempotency_keys SET fencing_version = $4 + 1, "
                                 "lease_expires_ms = $5, updated_ms = $6",
                                 kWhereScope, " AND fencing_version = $4 AND state = 'PROCESSING'"),
                    With(ScopeParams(scope), {r.version, now + options_.lease.count(), now}));
    if (!updated.ok()) return updated.status();
    if (txn.rows_affected() != 1) return absl::InternalError("takeover: the locked record changed");
    result.outcome = BeginOutcome::kTakenOver;
    result.previous = r;
    result.version = r.version + 1;
    return absl::OkStatus();
  }

  absl::Status FenceIn(Transaction& txn, const KeyScope& scope,
                       std::optional<std::int64_t> owned_version, FenceResult& result) {
    const EpochMillis now = NowMillis();
    auto inserted = txn.Execute(
        "INSERT INTO saferetry_idempotency_keys (tenant, operation, idem_key, request_digest, "
        "state, fencing_version, lease_expires_ms, created_ms, updated_ms) "
        "VALUES ($1, $2, $3, '', 'FENCED', 1, 0, $4, $4) ON CONFLICT DO NOTHING",
        With(ScopeParams(scope), {now}));
    if (!inserted.ok()) return inserted.status();
    if (txn.rows_affected() == 1) {
      auto tomb = ReadTombstone(txn, scope);
      if (!tomb.ok()) return tomb.status();
      if (tomb->has_value()) {
        result.outcome = FenceOutcome::kExpired;
        result.record = **tomb;
        return RollbackOnly();
      }
      result.outcome = FenceOutcome::kFenced;
      result.newly_fenced = true;
      result.record.state = RecordState::kFenced;
      result.record.version = 1;
      result.record.created_ms = result.record.updated_ms = now;
      return absl::OkStatus();
    }
    auto existing = LockRecord(txn, scope);
    if (!existing.ok()) return existing.status();
    if (!existing->has_value()) {
      auto tomb = ReadTombstone(txn, scope);
      if (!tomb.ok()) return tomb.status();
      if (!tomb->has_value()) return Vanished();
      result.outcome = FenceOutcome::kExpired;
      result.record = **tomb;
      return absl::OkStatus();
    }
    KeyRecord r = **existing;
    switch (r.state) {
      case RecordState::kFenced:
        result.outcome = FenceOutcome::kFenced;
        result.record = r;
        return absl::OkStatus();
      case RecordState::kCompleted:
        result.outcome = FenceOutcome::kCompleted;
        result.record = r;
        return absl::OkStatus();
      case RecordState::kExpired:  // not stored in this table
      case RecordState::kProcessing:
        break;
    }
    const bool owned = owned_version.has_value() && *owned_version == r.version;
    if (!owned && r.lease_expires_ms > now) {
      result.outcome = FenceOutcome::kProcessing;
      result.record = r;
      return absl::OkStatus();
    }
    auto updated =
        txn.Execute(absl::StrCat("UPDATE saferetry_idempotency_keys SET state = 'FENCED', "
                                 "fencing_version = $4 + 1, updated_ms = $5",
                                 kWhereScope, " AND fencing_version = $4 AND state = 'PROCESSING'"),
                    With(ScopeParams(scope), {r.version, now}));
    if (!updated.ok()) return updated.status();
    if (txn.rows_affected() != 1) return absl::InternalError("fence: the locked record changed");
    r.state = RecordState::kFenced;
    r.version += 1;
    r.updated_ms = now;
    result.outcome = FenceOutcome::kFenced;
    result.newly_fenced = true;
    result.record = r;
    return absl::OkStatus();
  }

  std::shared_ptr<SqlDatabase> db_;
  const StoreOptions options_;
  std::shared_ptr<Clock> clock_;
  const char* const lock_suffix_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<IdempotencyStore>> MakeIdempotencyStore(
    std::shared_ptr<SqlDatabase> database, StoreOptions options, std::shared_ptr<Clock> clock) {
  if (auto s = ValidateStoreOptions(options); !s.ok()) return s;
  if (!database) return absl::InvalidArgumentError("database: must not be null");
  if (!clock) clock = SystemClock();
  auto store =
      std::make_unique<SqlIdempotencyStore>(std::move(database), options, std::move(clock));
  if (auto s = store->Migrate(); !s.ok()) return s;
  return std::unique_ptr<IdempotencyStore>(std::move(store));
}

}  // namespace server
}  // namespace saferetry

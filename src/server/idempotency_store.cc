// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The idempotency store over any SqlDatabase. Every statement is portable
// between SQLite (3.35+) and PostgreSQL (9.5+); the only dialect difference is
// the row lock (`FOR UPDATE`), which SQLite does not need because a write
// transaction holds the database's write lock from BEGIN IMMEDIATE on.

#include "saferetry/server/idempotency_store.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/sha256.h"

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
    case RecordState::kPendingConfirmation:
      return "PENDING_CONFIRMATION";
  }
  return "UNKNOWN";
}

std::string_view DecisionOutcomeName(Decision::Outcome outcome) {
  return outcome == Decision::Outcome::kSucceeded ? "succeeded" : "failed";
}

std::string DefaultExternalRequestId(const KeyScope& scope, std::string_view step) {
  return absl::StrCat("sr-", saferetry::internal::Sha256Hex(
                                 {scope.tenant, "\n", scope.operation, "\n", scope.key, "\n", step})
                                 .substr(0, 40));
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

// Schema version 2: recovery steps, pending confirmation and a person's
// decision. New columns are added; the state CHECK gains
// 'PENDING_CONFIRMATION' (PostgreSQL replaces the constraint; SQLite, which
// cannot alter a CHECK, rebuilds the table inside the migration's
// transaction).
constexpr const char* kMigration2Columns[] = {
    "ALTER TABLE saferetry_idempotency_keys ADD COLUMN step_name TEXT",
    "ALTER TABLE saferetry_idempotency_keys ADD COLUMN step_external_id TEXT",
    "ALTER TABLE saferetry_idempotency_keys ADD COLUMN step_ms BIGINT",
    "ALTER TABLE saferetry_idempotency_keys ADD COLUMN recovery_failures INTEGER NOT NULL DEFAULT "
    "0",
    "ALTER TABLE saferetry_idempotency_keys ADD COLUMN pending_since_ms BIGINT",
    "ALTER TABLE saferetry_idempotency_keys ADD COLUMN pending_reason TEXT",
    "ALTER TABLE saferetry_idempotency_keys ADD COLUMN decision TEXT",
    "ALTER TABLE saferetry_idempotency_keys ADD COLUMN decided_by TEXT",
    "ALTER TABLE saferetry_idempotency_keys ADD COLUMN decided_ms BIGINT",
    "ALTER TABLE saferetry_idempotency_keys ADD COLUMN decision_reason TEXT",
};
constexpr const char* kMigration2Postgres[] = {
    "ALTER TABLE saferetry_idempotency_keys DROP CONSTRAINT IF EXISTS "
    "saferetry_idempotency_keys_state_check",
    "ALTER TABLE saferetry_idempotency_keys ADD CONSTRAINT saferetry_idempotency_keys_state_check "
    "CHECK (state IN ('PROCESSING', 'COMPLETED', 'FENCED', 'PENDING_CONFIRMATION'))",
};
constexpr const char* kMigration2Sqlite[] = {
    R"sql(CREATE TABLE saferetry_idempotency_keys_v2 (
  tenant            TEXT NOT NULL,
  operation         TEXT NOT NULL,
  idem_key          TEXT NOT NULL,
  request_digest    TEXT NOT NULL,
  state             TEXT NOT NULL
                    CHECK (state IN ('PROCESSING', 'COMPLETED', 'FENCED', 'PENDING_CONFIRMATION')),
  fencing_version   BIGINT NOT NULL,
  lease_expires_ms  BIGINT NOT NULL,
  response_status   INTEGER,
  response_body     TEXT,
  created_ms        BIGINT NOT NULL,
  updated_ms        BIGINT NOT NULL,
  completed_ms      BIGINT,
  step_name         TEXT,
  step_external_id  TEXT,
  step_ms           BIGINT,
  recovery_failures INTEGER NOT NULL DEFAULT 0,
  pending_since_ms  BIGINT,
  pending_reason    TEXT,
  decision          TEXT,
  decided_by        TEXT,
  decided_ms        BIGINT,
  decision_reason   TEXT,
  PRIMARY KEY (tenant, operation, idem_key)
))sql",
    "INSERT INTO saferetry_idempotency_keys_v2 (tenant, operation, idem_key, request_digest, "
    "state, "
    "fencing_version, lease_expires_ms, response_status, response_body, created_ms, updated_ms, "
    "completed_ms) SELECT tenant, operation, idem_key, request_digest, state, fencing_version, "
    "lease_expires_ms, response_status, response_body, created_ms, updated_ms, completed_ms FROM "
    "saferetry_idempotency_keys",
    "DROP TABLE saferetry_idempotency_keys",
    "ALTER TABLE saferetry_idempotency_keys_v2 RENAME TO saferetry_idempotency_keys",
    R"sql(CREATE INDEX IF NOT EXISTS saferetry_idempotency_keys_by_completion
  ON saferetry_idempotency_keys (state, completed_ms))sql",
};
// Both: the sweeper's and the gauges' index.
constexpr const char* kMigration2Index =
    "CREATE INDEX IF NOT EXISTS saferetry_idempotency_keys_by_lease "
    "ON saferetry_idempotency_keys (state, lease_expires_ms)";

constexpr char kRecordColumns[] =
    "request_digest, state, fencing_version, lease_expires_ms, response_status, response_body, "
    "created_ms, updated_ms, completed_ms, step_name, step_external_id, step_ms, "
    "recovery_failures, pending_since_ms, pending_reason, decision, decided_by, decided_ms, "
    "decision_reason, tenant, operation, idem_key";
constexpr char kWhereScope[] = " WHERE tenant = $1 AND operation = $2 AND idem_key = $3";

KeyRecord RecordFromRow(const SqlRow& row) {
  KeyRecord r;
  r.request_digest = row.Text(0);
  const std::string state = row.Text(1);
  r.state = state == "COMPLETED"              ? RecordState::kCompleted
            : state == "FENCED"               ? RecordState::kFenced
            : state == "PENDING_CONFIRMATION" ? RecordState::kPendingConfirmation
                                              : RecordState::kProcessing;
  r.version = row.Int(2);
  r.lease_expires_ms = row.Int(3);
  r.response.status = static_cast<int>(row.Int(4));
  r.response.body = row.Text(5);
  r.created_ms = row.Int(6);
  r.updated_ms = row.Int(7);
  if (!row.IsNull(8)) r.completed_ms = row.Int(8);
  if (!row.IsNull(9)) r.step = RecoveryStep{row.Text(9), row.Text(10), row.Int(11)};
  r.recovery_failures = static_cast<int>(row.Int(12));
  if (!row.IsNull(13)) r.pending_since_ms = row.Int(13);
  r.pending_reason = row.Text(14);
  if (!row.IsNull(15)) {
    Decision d;
    d.outcome =
        row.Text(15) == "succeeded" ? Decision::Outcome::kSucceeded : Decision::Outcome::kFailed;
    d.response = r.response;
    d.decided_by = row.Text(16);
    d.decided_ms = row.Int(17);
    d.reason = row.Text(18);
    r.decision = std::move(d);
  }
  return r;
}

KeyScope ScopeFromRow(const SqlRow& row) { return {row.Text(19), row.Text(20), row.Text(21)}; }

absl::Status ValidateText(std::string_view value, std::string_view field, std::size_t max) {
  if (value.empty() || value.size() > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(field), ": must be 1 to ", max, " bytes, got ", value.size()));
  }
  return absl::OkStatus();
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
      if (version < 2) {
        if (txn.dialect() == SqlDialect::kPostgres) {
          for (const char* sql : kMigration2Columns) {
            if (auto r = txn.Execute(sql); !r.ok()) return r.status();
          }
          for (const char* sql : kMigration2Postgres) {
            if (auto r = txn.Execute(sql); !r.ok()) return r.status();
          }
        } else {
          for (const char* sql : kMigration2Sqlite) {
            if (auto r = txn.Execute(sql); !r.ok()) return r.status();
          }
        }
        if (auto r = txn.Execute(kMigration2Index); !r.ok()) return r.status();
        if (auto r = txn.Execute("INSERT INTO saferetry_schema_version (version) VALUES (2)");
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

  absl::StatusOr<StepResult> RecordStep(const KeyScope& scope, std::int64_t version,
                                        RecoveryStep step) override {
    if (auto s = ValidateScope(scope); !s.ok()) return s;
    if (auto s = ValidateText(step.name, "step.name", 255); !s.ok()) return s;
    if (auto s = ValidateText(step.external_id, "step.external_id", 255); !s.ok()) return s;
    StepResult result;
    absl::Status s =
        db_->RunInTransaction(TransactionMode::kWrite, [&](Transaction& txn) -> absl::Status {
          const EpochMillis now = NowMillis();
          auto updated = txn.Execute(
              absl::StrCat("UPDATE saferetry_idempotency_keys SET step_name = $4, "
                           "step_external_id = $5, step_ms = $6, updated_ms = $6",
                           kWhereScope, " AND fencing_version = $7 AND state = 'PROCESSING'"),
              With(ScopeParams(scope), {step.name, step.external_id, now, version}));
          if (!updated.ok()) return updated.status();
          result.recorded = txn.rows_affected() == 1;
          step.recorded_ms = now;
          return absl::OkStatus();
        });
    if (!s.ok()) return s;
    result.step = std::move(step);
    return result;
  }

  absl::StatusOr<std::vector<ScopedRecord>> ListAbandoned(std::string_view operation,
                                                          int limit) override {
    return List("state = 'PROCESSING' AND lease_expires_ms <= $1", "lease_expires_ms", operation,
                limit);
  }

  absl::StatusOr<std::vector<ScopedRecord>> ListPendingConfirmation(std::string_view operation,
                                                                    int limit) override {
    return List("state = 'PENDING_CONFIRMATION' AND $1 = $1", "pending_since_ms", operation, limit);
  }

  absl::StatusOr<bool> MarkPendingConfirmation(const KeyScope& scope, std::int64_t version,
                                               std::string_view reason) override {
    if (auto s = ValidateScope(scope); !s.ok()) return s;
    bool marked = false;
    absl::Status s =
        db_->RunInTransaction(TransactionMode::kWrite, [&](Transaction& txn) -> absl::Status {
          const EpochMillis now = NowMillis();
          auto updated = txn.Execute(
              absl::StrCat("UPDATE saferetry_idempotency_keys SET state = 'PENDING_CONFIRMATION', "
                           "fencing_version = $4 + 1, pending_since_ms = $5, pending_reason = $6, "
                           "updated_ms = $5",
                           kWhereScope, " AND fencing_version = $4 AND state = 'PROCESSING'"),
              With(ScopeParams(scope), {version, now, reason}));
          if (!updated.ok()) return updated.status();
          marked = txn.rows_affected() == 1;
          return absl::OkStatus();
        });
    if (!s.ok()) return s;
    return marked;
  }

  absl::StatusOr<std::optional<int>> RecordRecoveryFailure(const KeyScope& scope,
                                                           std::int64_t version) override {
    if (auto s = ValidateScope(scope); !s.ok()) return s;
    std::optional<int> count;
    absl::Status s =
        db_->RunInTransaction(TransactionMode::kWrite, [&](Transaction& txn) -> absl::Status {
          auto updated =
              txn.Execute(absl::StrCat("UPDATE saferetry_idempotency_keys SET recovery_failures = "
                                       "recovery_failures + 1, updated_ms = $5",
                                       kWhereScope,
                                       " AND fencing_version = $4 AND state = 'PROCESSING' "
                                       "RETURNING recovery_failures"),
                          With(ScopeParams(scope), {version, NowMillis()}));
          if (!updated.ok()) return updated.status();
          if (!updated->empty()) count = static_cast<int>((*updated)[0].Int(0));
          return absl::OkStatus();
        });
    if (!s.ok()) return s;
    return count;
  }

  absl::StatusOr<DecideResult> Decide(const KeyScope& scope, Decision decision) override {
    if (auto s = ValidateScope(scope); !s.ok()) return s;
    if (auto s = ValidateText(decision.decided_by, "decision.decided_by", 255); !s.ok()) return s;
    if (auto s = ValidateText(decision.reason, "decision.reason", 4096); !s.ok()) return s;
    const int status = decision.response.status;
    if (decision.outcome == Decision::Outcome::kSucceeded && (status < 200 || status > 299)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "decision.response.status: a succeeded decision stores a 2xx answer, got ", status));
    }
    if (decision.outcome == Decision::Outcome::kFailed && (status < 400 || status > 499)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "decision.response.status: a failed decision stores a 4xx answer, got ", status));
    }
    DecideResult result;
    absl::Status s =
        db_->RunInTransaction(TransactionMode::kWrite, [&](Transaction& txn) -> absl::Status {
          const EpochMillis now = NowMillis();
          auto current = LockRecord(txn, scope);
          if (!current.ok()) return current.status();
          if (!current->has_value()) {
            result.outcome = DecideOutcome::kNotFound;
            return absl::OkStatus();
          }
          KeyRecord r = **current;
          if (r.decision.has_value()) {
            const bool same = r.decision->outcome == decision.outcome &&
                              r.response.status == decision.response.status &&
                              r.response.body == decision.response.body;
            result.outcome =
                same ? DecideOutcome::kAlreadyRecorded : DecideOutcome::kConflictingDecision;
            result.record = std::move(r);
            return absl::OkStatus();
          }
          if (r.state != RecordState::kPendingConfirmation) {
            result.outcome = DecideOutcome::kNotPending;
            result.record = std::move(r);
            return absl::OkStatus();
          }
          auto updated = txn.Execute(
              absl::StrCat("UPDATE saferetry_idempotency_keys SET state = 'COMPLETED', "
                           "response_status = $4, response_body = $5, updated_ms = $6, "
                           "completed_ms = $6, decision = $7, decided_by = $8, decided_ms = $6, "
                           "decision_reason = $9",
                           kWhereScope,
                           " AND fencing_version = $10 AND state = 'PENDING_CONFIRMATION'"),
              With(ScopeParams(scope), {decision.response.status, decision.response.body, now,
                                        DecisionOutcomeName(decision.outcome), decision.decided_by,
                                        decision.reason, r.version}));
          if (!updated.ok()) return updated.status();
          if (txn.rows_affected() != 1)
            return absl::InternalError("decide: the locked record changed");
          r.state = RecordState::kCompleted;
          r.response = decision.response;
          r.updated_ms = now;
          r.completed_ms = now;
          decision.decided_ms = now;
          r.decision = decision;
          result.outcome = DecideOutcome::kRecorded;
          result.record = std::move(r);
          return absl::OkStatus();
        });
    if (!s.ok()) return s;
    return result;
  }

  absl::StatusOr<StoreGauges> Gauges() override {
    StoreGauges g;
    absl::Status s =
        db_->RunInTransaction(TransactionMode::kRead, [&](Transaction& txn) -> absl::Status {
          const EpochMillis now = NowMillis();
          auto rows = txn.Execute(
              "SELECT COUNT(*), MIN(created_ms), "
              "SUM(CASE WHEN lease_expires_ms <= $1 THEN 1 ELSE 0 END) "
              "FROM saferetry_idempotency_keys WHERE state = 'PROCESSING'",
              {now});
          if (!rows.ok()) return rows.status();
          g.processing = (*rows)[0].Int(0);
          if (!(*rows)[0].IsNull(1)) {
            g.oldest_processing_age_ms = std::max<std::int64_t>(0, now - (*rows)[0].Int(1));
          }
          g.abandoned = (*rows)[0].Int(2);
          auto pending = txn.Execute(
              "SELECT COUNT(*) FROM saferetry_idempotency_keys "
              "WHERE state = 'PENDING_CONFIRMATION'");
          if (!pending.ok()) return pending.status();
          g.pending_confirmation = (*pending)[0].Int(0);
          return absl::OkStatus();
        });
    if (!s.ok()) return s;
    return g;
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

  absl::StatusOr<std::vector<ScopedRecord>> List(const char* where, const char* order,
                                                 std::string_view operation, int limit) {
    if (limit <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("limit: must be > 0, got ", limit));
    }
    std::vector<ScopedRecord> out;
    absl::Status s =
        db_->RunInTransaction(TransactionMode::kRead, [&](Transaction& txn) -> absl::Status {
          std::vector<SqlValue> params = {NowMillis(), static_cast<std::int64_t>(limit)};
          std::string sql = absl::StrCat("SELECT ", kRecordColumns,
                                         " FROM saferetry_idempotency_keys WHERE ", where);
          if (!operation.empty()) {
            absl::StrAppend(&sql, " AND operation = $3");
            params.emplace_back(operation);
          }
          absl::StrAppend(&sql, " ORDER BY ", order, ", tenant, operation, idem_key LIMIT $2");
          auto rows = txn.Execute(sql, params);
          if (!rows.ok()) return rows.status();
          const EpochMillis now = NowMillis();
          for (const SqlRow& row : *rows) {
            ScopedRecord sr{ScopeFromRow(row), RecordFromRow(row)};
            sr.record.lease_expired =
                sr.record.state == RecordState::kProcessing && sr.record.lease_expires_ms <= now;
            out.push_back(std::move(sr));
          }
          return absl::OkStatus();
        });
    if (!s.ok()) return s;
    return out;
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
    if (r.state == RecordState::kPendingConfirmation) {
      result.outcome = BeginOutcome::kPendingConfirmation;
      result.previous = r;
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
      case RecordState::kPendingConfirmation:
        result.outcome = FenceOutcome::kPendingConfirmation;
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

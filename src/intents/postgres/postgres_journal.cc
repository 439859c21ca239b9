// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The PostgreSQL intent journal, over the SQL seam the server stores share
// (saferetry/server/sql.h, docs/adr/0010): the pool, reconnection and error
// mapping are `server::OpenPostgresDatabase`'s; the row layout and its checks
// are the SQLite journal's codec (journal_codec.h).
//
// Every operation is one short transaction. Its first statement sets the
// transaction's durability and lock timeout and reads the database's clock in
// one round trip; the hot-path writes (MarkSent, Finish, Claim, Release) are
// then one conditional UPDATE each, whose WHERE clause is the state machine's
// rule, re-checked by PostgreSQL under the row lock (READ COMMITTED), so of
// concurrent writers exactly one passes. Only when it changes nothing is the
// row read to say why.

#include "saferetry/postgres_journal.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "journal_codec.h"
#include "saferetry/journal.h"
#include "saferetry/server/postgres_store.h"
#include "saferetry/server/sql.h"

namespace saferetry {
namespace {

using internal::FromUnixMillis;
using internal::IntentRow;
using internal::ToUnixMillis;
using server::SqlDatabase;
using server::SqlRow;
using server::SqlValue;
using server::Transaction;
using server::TransactionMode;

// pg_advisory_xact_lock key of the journal's migrations ("saferetry" 2: the
// server store's is ...0001).
constexpr std::int64_t kMigrationLock = 7305210002;

// The schema, by version. Migration k (k >= 1) takes the database from
// version k-1 to k, in one transaction with the version row. Never edit a
// released step: append one.
const std::vector<std::vector<const char*>> kMigrations = {
    // 0 -> 1
    {R"sql(CREATE TABLE saferetry_intents (
  idem_key            TEXT PRIMARY KEY,
  method              TEXT NOT NULL,
  url                 TEXT NOT NULL,
  body_digest         TEXT NOT NULL,
  body                BYTEA,
  status_url_template TEXT NOT NULL,
  headers             BYTEA NOT NULL,
  created_ms          BIGINT NOT NULL,
  deadline_ms         BIGINT NOT NULL,
  state               TEXT NOT NULL,
  attempt             BIGINT NOT NULL,
  http_status         BIGINT NOT NULL,
  stop_reason         TEXT NOT NULL,
  resolved_by         TEXT NOT NULL,
  last_error          TEXT NOT NULL,
  claim_owner         TEXT NOT NULL,
  claim_until_ms      BIGINT NOT NULL,
  updated_ms          BIGINT NOT NULL
))sql",
     "CREATE INDEX saferetry_intents_unresolved ON saferetry_intents (created_ms, idem_key)"
     " WHERE state IN ('PENDING', 'SENT', 'UNKNOWN')",
     "CREATE INDEX saferetry_intents_resolved ON saferetry_intents (updated_ms)"
     " WHERE state IN ('SUCCEEDED', 'FAILED')"},
};
const std::int64_t kSchemaVersion = static_cast<std::int64_t>(kMigrations.size());

constexpr const char* kColumns =
    "idem_key, method, url, body_digest, encode(body, 'hex'), status_url_template,"
    " encode(headers, 'hex'), created_ms, deadline_ms, state, attempt, http_status, stop_reason,"
    " resolved_by, last_error, claim_owner, claim_until_ms, updated_ms";
constexpr const char* kUnresolved = "state IN ('PENDING', 'SENT', 'UNKNOWN')";

const std::string kSelectByKey =
    absl::StrCat("SELECT ", kColumns, " FROM saferetry_intents WHERE idem_key = $1");
constexpr const char* kInsert =
    "INSERT INTO saferetry_intents (idem_key, method, url, body_digest, body,"
    " status_url_template, headers, created_ms, deadline_ms, state, attempt, http_status,"
    " stop_reason, resolved_by, last_error, claim_owner, claim_until_ms, updated_ms)"
    " VALUES ($1, $2, $3, $4, decode($5, 'hex'), $6, decode($7, 'hex'), $8, $9, $10, $11, $12,"
    " $13, $14, $15, $16, $17, $18) ON CONFLICT (idem_key) DO NOTHING";
const std::string kUpdateSent = absl::StrCat(
    "UPDATE saferetry_intents SET state = 'SENT', attempt = $2, updated_ms = $3"
    " WHERE idem_key = $1 AND attempt < $2 AND ",
    kUnresolved);
const std::string kUpdateFinish = absl::StrCat(
    "UPDATE saferetry_intents SET state = $2, http_status = $3, stop_reason = $4,"
    " resolved_by = $5, last_error = $6, updated_ms = $7 WHERE idem_key = $1 AND ",
    kUnresolved);
const std::string kUpdateClaim = absl::StrCat(
    "UPDATE saferetry_intents SET claim_owner = $2, claim_until_ms = $3, updated_ms = $4"
    " WHERE idem_key = $1 AND ",
    kUnresolved, " AND (claim_owner = '' OR claim_owner = $2 OR claim_until_ms <= $4)");
constexpr const char* kUpdateRelease =
    "UPDATE saferetry_intents SET claim_owner = '', claim_until_ms = 0, updated_ms = $3"
    " WHERE idem_key = $1 AND claim_owner = $2";
constexpr const char* kSelectState =
    "SELECT state, attempt FROM saferetry_intents WHERE idem_key = $1";
const std::string kListUnfinished =
    absl::StrCat("SELECT ", kColumns, " FROM saferetry_intents WHERE ", kUnresolved,
                 " AND created_ms <= $1 AND ($2 = 0 OR deadline_ms <= $3)"
                 " AND ($4 = 0 OR claim_owner = '' OR claim_until_ms <= $3)"
                 " ORDER BY created_ms, idem_key LIMIT $5");
constexpr const char* kDeleteResolved =
    "DELETE FROM saferetry_intents WHERE state IN ('SUCCEEDED', 'FAILED') AND updated_ms <= $1";
const std::string kCountOldUnresolved = absl::StrCat(
    "SELECT COUNT(*) FROM saferetry_intents WHERE ", kUnresolved, " AND created_ms <= $1");
const std::string kOldestUnresolved =
    absl::StrCat("SELECT MIN(created_ms) FROM saferetry_intents WHERE ", kUnresolved);

// The first statement of every transaction: durability and lock timeout for
// this transaction only, and the database's clock in Unix milliseconds
// (floored, like every stored time).
std::string BeginStatement(std::chrono::milliseconds busy_timeout, bool write) {
  return absl::StrCat("SELECT ", write ? "set_config('synchronous_commit', 'on', true), " : "",
                      "set_config('lock_timeout', '", busy_timeout.count(),
                      "ms', true),"
                      " floor(extract(epoch from now()) * 1000)::bigint");
}

absl::Status NoIntent(std::string_view key) {
  return absl::NotFoundError(absl::StrCat("idempotency_key: no intent \"", std::string(key), "\""));
}

// True when `s` is UTF-8 without NUL (what a PostgreSQL text value holds).
bool IsPgText(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == 0) return false;
    int extra = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      extra = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + static_cast<std::size_t>(extra) >= s.size()) return false;
    for (int k = 1; k <= extra; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    // Overlong forms, surrogates and values above U+10FFFF are not UTF-8.
    static constexpr std::uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[extra] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return false;
    i += static_cast<std::size_t>(extra) + 1;
  }
  return true;
}

// `s` with every byte that is NUL or not part of valid UTF-8 replaced by '?'.
std::string ToPgText(std::string_view s) {
  if (IsPgText(s)) return std::string(s);
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    // The longest valid sequence starting here (1 to 4 bytes), else one '?'.
    std::size_t len = 0;
    for (std::size_t n = 1; n <= 4 && i + n <= s.size(); ++n) {
      if (IsPgText(s.substr(i, n))) {
        len = n;
        break;
      }
    }
    if (len == 0) {
      out += '?';
      ++i;
    } else {
      out.append(s.data() + i, len);
      i += len;
    }
  }
  return out;
}

std::string Hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) {
    const unsigned char b = static_cast<unsigned char>(c);
    out += kDigits[b >> 4];
    out += kDigits[b & 0x0F];
  }
  return out;
}

std::optional<std::string> Unhex(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  const auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(hex.size() / 2);
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    const int hi = nibble(hex[i]);
    const int lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>((hi << 4) | lo);
  }
  return out;
}

absl::StatusOr<Intent> DecodeRow(const SqlRow& r) {
  IntentRow row;
  row.key = r.Text(0);
  row.method = r.Text(1);
  row.url = r.Text(2);
  row.body_digest = r.Text(3);
  if (!r.IsNull(4)) {
    row.body = Unhex(r.Text(4));
    if (!row.body.has_value()) {
      return absl::DataLossError(absl::StrCat("journal record \"", row.key, "\": body: not hex"));
    }
  }
  row.status_url_template = r.Text(5);
  std::optional<std::string> headers = Unhex(r.Text(6));
  if (!headers.has_value()) {
    return absl::DataLossError(absl::StrCat("journal record \"", row.key, "\": headers: not hex"));
  }
  row.headers = *std::move(headers);
  row.created_ms = r.Int(7);
  row.deadline_ms = r.Int(8);
  row.state = r.Text(9);
  row.attempt = r.Int(10);
  row.http_status = r.Int(11);
  row.stop_reason = r.Text(12);
  row.resolved_by = r.Text(13);
  row.last_error = r.Text(14);
  row.claim_owner = r.Text(15);
  row.claim_until_ms = r.Int(16);
  row.updated_ms = r.Int(17);
  return internal::DecodeIntentRow(row);
}

// `ms` moved by `offset`, kept within the range a WallTime holds.
std::int64_t Shift(std::int64_t ms, std::int64_t offset) {
  constexpr std::int64_t kMax = internal::kMaxUnixMillis;
  if (offset > 0 && ms > kMax - offset) return kMax;
  if (offset < 0 && ms < -kMax - offset) return -kMax;
  return std::clamp<std::int64_t>(ms + offset, -kMax, kMax);
}

// One transaction's view of time: `now_ms` on the journal's time source, and
// the offset that moves an instant on the caller's clock onto it.
struct TxnTime {
  std::int64_t now_ms = 0;
  std::int64_t offset_ms = 0;
  std::int64_t Rebase(WallTime caller_time) const {
    return Shift(ToUnixMillis(caller_time), offset_ms);
  }
};

class PostgresJournal final : public IntentJournal {
 public:
  PostgresJournal(std::shared_ptr<SqlDatabase> db, const PostgresJournalOptions& options)
      : db_(std::move(db)),
        options_(options),
        owner_(internal::JournalOwner(options)),
        clock_(options.clock != nullptr ? options.clock : SystemClock()),
        begin_write_(BeginStatement(options.busy_timeout, true)),
        begin_read_(BeginStatement(options.busy_timeout, false)),
        max_reruns_(std::max(1, options.max_connections) + 1) {}

  absl::Status Migrate() {
    return Run(TransactionMode::kWrite, [&](Transaction& txn, const TxnTime&) -> absl::Status {
      // Processes starting together must not race on CREATE TABLE.
      if (auto r = txn.Execute(absl::StrCat("SELECT pg_advisory_xact_lock(", kMigrationLock, ")"));
          !r.ok()) {
        return r.status();
      }
      if (auto r = txn.Execute("CREATE TABLE IF NOT EXISTS saferetry_journal_schema_version "
                               "(version BIGINT NOT NULL)");
          !r.ok()) {
        return r.status();
      }
      auto current = txn.Execute("SELECT MAX(version) FROM saferetry_journal_schema_version");
      if (!current.ok()) return current.status();
      const std::int64_t version = current->empty() ? 0 : (*current)[0].Int(0);
      if (version > kSchemaVersion) {
        return absl::FailedPreconditionError(
            absl::StrCat("schema: the database has journal schema version ", version,
                         ", newer than this library's ", kSchemaVersion));
      }
      for (std::int64_t v = version; v < kSchemaVersion; ++v) {
        for (const char* sql : kMigrations[static_cast<std::size_t>(v)]) {
          if (auto r = txn.Execute(sql); !r.ok()) return r.status();
        }
        if (auto r = txn.Execute(
                "INSERT INTO saferetry_journal_schema_version (version) VALUES ($1)", {v + 1});
            !r.ok()) {
          return r.status();
        }
      }
      return absl::OkStatus();
    });
  }

  std::string Owner() const override { return owner_; }

  absl::StatusOr<RecordResult> Record(const Intent& intent) override {
    absl::StatusOr<Intent> normal =
        internal::NormalizeIntent(intent, options_, owner_, clock_->WallNow());
    if (!normal.ok()) return normal.status();
    for (const auto& [field, value] :
         {std::pair<const char*, const std::string*>{"method", &normal->method},
          {"url", &normal->url},
          {"status_url_template", &normal->status_url_template},
          {"owner", &normal->claim_owner}}) {
      if (!IsPgText(*value)) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ": must be UTF-8 without NUL bytes (PostgreSQL text)"));
      }
    }
    RecordResult result;
    absl::Status status =
        Run(TransactionMode::kWrite, [&](Transaction& txn, const TxnTime& t) -> absl::Status {
          IntentRow row = internal::EncodeIntentRow(*normal);
          row.created_ms = t.Rebase(normal->created);
          row.deadline_ms = t.Rebase(normal->deadline);
          row.claim_until_ms = t.Rebase(normal->claim_until);
          row.updated_ms = t.Rebase(normal->updated);
          // $5, the body: NULL unless it is kept.
          std::vector<SqlValue> params = {
              row.key,          row.method,         row.url,
              row.body_digest,  SqlValue(),         row.status_url_template,
              Hex(row.headers), row.created_ms,     row.deadline_ms,
              row.state,        row.attempt,        row.http_status,
              row.stop_reason,  row.resolved_by,    row.last_error,
              row.claim_owner,  row.claim_until_ms, row.updated_ms};
          if (row.body.has_value()) params[4] = SqlValue(Hex(*row.body));
          auto inserted = txn.Execute(kInsert, params);
          if (!inserted.ok()) return inserted.status();
          if (txn.rows_affected() == 1) {
            absl::StatusOr<Intent> stored = internal::DecodeIntentRow(row);
            if (!stored.ok()) return stored.status();
            result.intent = *std::move(stored);
            result.created = true;
            return absl::OkStatus();
          }
          // The key is taken (the conflicting insert has committed: ON
          // CONFLICT waited for it): the stored intent decides.
          absl::StatusOr<std::optional<Intent>> existing = Select(txn, normal->key);
          if (!existing.ok()) return existing.status();
          if (!existing->has_value()) {
            return absl::UnavailableError(absl::StrCat(
                "idempotency_key: \"", normal->key, "\" was pruned while being recorded; retry"));
          }
          if (auto s = internal::CheckSameIntent(**existing, *normal); !s.ok()) return s;
          result.intent = **std::move(existing);
          result.created = false;
          return absl::OkStatus();
        });
    if (!status.ok()) return status;
    return result;
  }

  absl::Status MarkSent(std::string_view key, int attempt) override {
    return Run(TransactionMode::kWrite, [&](Transaction& txn, const TxnTime& t) -> absl::Status {
      if (attempt >= 1) {
        auto updated =
            txn.Execute(kUpdateSent, {std::string(key), std::int64_t{attempt}, t.now_ms});
        if (!updated.ok()) return updated.status();
        if (txn.rows_affected() == 1) return absl::OkStatus();
      }
      absl::StatusOr<Intent> stored = SelectState(txn, key);
      if (!stored.ok()) return stored.status();
      if (auto s = internal::CheckMarkSent(*stored, attempt); !s.ok()) return s;
      return absl::UnavailableError(
          absl::StrCat("idempotency_key: \"", std::string(key), "\" changed concurrently; retry"));
    });
  }

  absl::Status Finish(std::string_view key, IntentState outcome,
                      const IntentSummary& summary) override {
    const IntentSummary redacted = internal::RedactSummary(summary);
    return Run(TransactionMode::kWrite, [&](Transaction& txn, const TxnTime& t) -> absl::Status {
      if (IsFinalOrUnknown(outcome)) {
        auto updated =
            txn.Execute(kUpdateFinish,
                        {std::string(key), std::string(IntentStateName(outcome)),
                         std::int64_t{redacted.http_status}, ToPgText(redacted.stop_reason),
                         ToPgText(redacted.resolved_by), ToPgText(redacted.last_error), t.now_ms});
        if (!updated.ok()) return updated.status();
        if (txn.rows_affected() == 1) return absl::OkStatus();
      }
      absl::StatusOr<Intent> stored = SelectState(txn, key);
      if (!stored.ok()) return stored.status();
      if (auto s = internal::CheckFinish(*stored, outcome); !s.ok()) return s;
      return absl::UnavailableError(
          absl::StrCat("idempotency_key: \"", std::string(key), "\" changed concurrently; retry"));
    });
  }

  absl::StatusOr<Intent> Get(std::string_view key) override {
    Intent out;
    absl::Status status =
        Run(TransactionMode::kRead, [&](Transaction& txn, const TxnTime&) -> absl::Status {
          absl::StatusOr<std::optional<Intent>> intent = Select(txn, key);
          if (!intent.ok()) return intent.status();
          if (!intent->has_value()) return NoIntent(key);
          out = **std::move(intent);
          return absl::OkStatus();
        });
    if (!status.ok()) return status;
    return out;
  }

  absl::StatusOr<std::vector<Intent>> ListUnfinished(const UnfinishedFilter& filter) override {
    if (filter.older_than.has_value() && filter.older_than->count() < 0) {
      return absl::InvalidArgumentError("older_than: must be >= 0");
    }
    std::vector<Intent> out;
    absl::Status status =
        Run(TransactionMode::kRead, [&](Transaction& txn, const TxnTime& t) -> absl::Status {
          out.clear();
          const std::int64_t created_max = filter.older_than.has_value()
                                               ? t.now_ms - filter.older_than->count()
                                               : std::numeric_limits<std::int64_t>::max();
          std::vector<SqlValue> params = {created_max, std::int64_t{filter.deadline_passed},
                                          t.now_ms, std::int64_t{filter.claim_expired}};
          if (filter.limit == 0) {
            params.emplace_back();  // LIMIT NULL: no limit
          } else {
            params.emplace_back(static_cast<std::int64_t>(
                std::min<std::size_t>(filter.limit, std::numeric_limits<std::int64_t>::max())));
          }
          auto rows = txn.Execute(kListUnfinished, params);
          if (!rows.ok()) return rows.status();
          for (const SqlRow& r : *rows) {
            absl::StatusOr<Intent> intent = DecodeRow(r);
            if (!intent.ok()) return intent.status();
            out.push_back(*std::move(intent));
          }
          return absl::OkStatus();
        });
    if (!status.ok()) return status;
    return out;
  }

  absl::StatusOr<bool> Claim(std::string_view key, std::string_view owner,
                             WallTime until) override {
    if (owner.empty()) return absl::InvalidArgumentError("owner: must not be empty");
    if (!IsPgText(owner)) {
      return absl::InvalidArgumentError("owner: must be UTF-8 without NUL bytes (PostgreSQL text)");
    }
    bool won = false;
    absl::Status status =
        Run(TransactionMode::kWrite, [&](Transaction& txn, const TxnTime& t) -> absl::Status {
          auto updated = txn.Execute(
              kUpdateClaim, {std::string(key), std::string(owner), t.Rebase(until), t.now_ms});
          if (!updated.ok()) return updated.status();
          won = txn.rows_affected() == 1;
          if (won) return absl::OkStatus();
          return Exists(txn, key);
        });
    if (!status.ok()) return status;
    return won;
  }

  absl::StatusOr<bool> Release(std::string_view key, std::string_view owner) override {
    bool released = false;
    absl::Status status =
        Run(TransactionMode::kWrite, [&](Transaction& txn, const TxnTime& t) -> absl::Status {
          released = false;
          if (!owner.empty() && IsPgText(owner)) {
            auto updated =
                txn.Execute(kUpdateRelease, {std::string(key), std::string(owner), t.now_ms});
            if (!updated.ok()) return updated.status();
            released = txn.rows_affected() == 1;
            if (released) return absl::OkStatus();
          }
          return Exists(txn, key);
        });
    if (!status.ok()) return status;
    return released;
  }

  absl::StatusOr<PruneResult> Prune(WallTime now, std::chrono::milliseconds retention) override {
    if (retention.count() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("retention: must be >= 0, got ", retention.count(), "ms"));
    }
    PruneResult result;
    absl::Status status =
        Run(TransactionMode::kWrite, [&](Transaction& txn, const TxnTime& t) -> absl::Status {
          const std::int64_t cutoff = Shift(t.Rebase(now), -retention.count());
          auto deleted = txn.Execute(kDeleteResolved, {cutoff});
          if (!deleted.ok()) return deleted.status();
          result.pruned = txn.rows_affected();
          auto count = txn.Execute(kCountOldUnresolved, {cutoff});
          if (!count.ok()) return count.status();
          result.kept_unresolved = count->empty() ? 0 : (*count)[0].Int(0);
          return absl::OkStatus();
        });
    if (!status.ok()) return status;
    return result;
  }

  absl::StatusOr<std::optional<std::chrono::milliseconds>> OldestUnresolvedAge() override {
    std::optional<std::chrono::milliseconds> age;
    absl::Status status =
        Run(TransactionMode::kRead, [&](Transaction& txn, const TxnTime& t) -> absl::Status {
          age.reset();
          auto rows = txn.Execute(kOldestUnresolved);
          if (!rows.ok()) return rows.status();
          if (rows->empty() || (*rows)[0].IsNull(0)) return absl::OkStatus();
          const std::int64_t a = t.now_ms - (*rows)[0].Int(0);
          age = std::chrono::milliseconds(a > 0 ? a : 0);
          return absl::OkStatus();
        });
    if (!status.ok()) return status;
    return age;
  }

 private:
  using Body = std::function<absl::Status(Transaction&, const TxnTime&)>;

  static bool IsFinalOrUnknown(IntentState s) {
    return s == IntentState::kSucceeded || s == IntentState::kFailed || s == IntentState::kUnknown;
  }

  // Runs `body` in one transaction after the opening statement (durability
  // for writes, the lock timeout, the clock). When the transaction fails
  // before that statement has answered — a pooled connection found broken —
  // nothing of the operation reached the database, and it is run again on
  // another (fresh) connection, at most once per pooled connection plus one.
  absl::Status Run(TransactionMode mode, const Body& body) {
    absl::Status status;
    for (int run = 0; run < max_reruns_; ++run) {
      bool opened = false;
      status = db_->RunInTransaction(mode, [&](Transaction& txn) -> absl::Status {
        const std::int64_t local_before = ToUnixMillis(clock_->WallNow());
        auto first = txn.Execute(mode == TransactionMode::kWrite ? begin_write_ : begin_read_);
        if (!first.ok()) return first.status();
        opened = true;
        TxnTime t;
        if (options_.clock_source == PostgresJournalClock::kDatabase && !first->empty()) {
          const SqlRow& row = first->front();
          t.now_ms = row.Int(row.columns.size() - 1);
          t.offset_ms = t.now_ms - local_before;
        } else {
          t.now_ms = local_before;
        }
        return body(txn, t);
      });
      if (status.ok() || opened || !absl::IsUnavailable(status) ||
          absl::StartsWith(status.message(), "conninfo:")) {
        break;
      }
    }
    if (absl::StartsWith(status.message(), "conninfo:")) {
      return absl::Status(status.code(), absl::StrCat("dsn:", status.message().substr(9)));
    }
    return status;
  }

  static absl::StatusOr<std::optional<Intent>> Select(Transaction& txn, std::string_view key) {
    auto rows = txn.Execute(kSelectByKey, {std::string(key)});
    if (!rows.ok()) return rows.status();
    if (rows->empty()) return std::optional<Intent>();
    absl::StatusOr<Intent> intent = DecodeRow(rows->front());
    if (!intent.ok()) return intent.status();
    return std::optional<Intent>(*std::move(intent));
  }

  static absl::StatusOr<Intent> SelectState(Transaction& txn, std::string_view key) {
    auto rows = txn.Execute(kSelectState, {std::string(key)});
    if (!rows.ok()) return rows.status();
    if (rows->empty()) return NoIntent(key);
    Intent intent;
    intent.key = std::string(key);
    std::optional<IntentState> state = ParseIntentState(rows->front().Text(0));
    if (!state.has_value()) {
      return absl::DataLossError(
          absl::StrCat("journal record \"", std::string(key), "\": state: unknown state"));
    }
    intent.state = *state;
    intent.attempt = static_cast<int>(rows->front().Int(1));
    return intent;
  }

  static absl::Status Exists(Transaction& txn, std::string_view key) {
    auto rows = txn.Execute(kSelectState, {std::string(key)});
    if (!rows.ok()) return rows.status();
    return rows->empty() ? NoIntent(key) : absl::OkStatus();
  }

  const std::shared_ptr<SqlDatabase> db_;
  const PostgresJournalOptions options_;
  const std::string owner_;
  const std::shared_ptr<Clock> clock_;
  const std::string begin_write_;
  const std::string begin_read_;
  const int max_reruns_;
};

absl::Status ValidateOptions(const PostgresJournalOptions& options) {
  if (options.busy_timeout.count() < 1 || options.busy_timeout > std::chrono::hours(24)) {
    return absl::InvalidArgumentError(absl::StrCat("busy_timeout: must be from 1ms to 24h, got ",
                                                   options.busy_timeout.count(), "ms"));
  }
  return internal::ValidateJournalOptions(options);
}

absl::StatusOr<std::shared_ptr<IntentJournal>> OpenOn(std::shared_ptr<SqlDatabase> database,
                                                      const PostgresJournalOptions& options) {
  auto journal = std::make_shared<PostgresJournal>(std::move(database), options);
  if (auto s = journal->Migrate(); !s.ok()) return s;
  return std::shared_ptr<IntentJournal>(std::move(journal));
}

}  // namespace

absl::StatusOr<std::shared_ptr<IntentJournal>> OpenPostgresJournal(
    const PostgresJournalOptions& options) {
  if (options.dsn.empty()) return absl::InvalidArgumentError("dsn: must not be empty");
  if (options.max_connections < 1 || options.max_connections > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_connections: must be from 1 to 64, got ", options.max_connections));
  }
  if (options.connect_timeout.count() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("connect_timeout: must be > 0, got ", options.connect_timeout.count(), "ms"));
  }
  if (auto s = ValidateOptions(options); !s.ok()) return s;
  server::PostgresOptions pg;
  pg.conninfo = options.dsn;
  pg.schema = options.schema;  // validated there, named "schema"
  pg.max_connections = options.max_connections;
  pg.connect_timeout = options.connect_timeout;
  absl::StatusOr<std::shared_ptr<SqlDatabase>> database = server::OpenPostgresDatabase(pg);
  if (!database.ok()) {
    const absl::Status& s = database.status();
    if (absl::StartsWith(s.message(), "conninfo:")) {
      return absl::Status(s.code(), absl::StrCat("dsn:", s.message().substr(9)));
    }
    return s;
  }
  return OpenOn(*std::move(database), options);
}

absl::StatusOr<std::shared_ptr<IntentJournal>> OpenPostgresJournal(
    std::shared_ptr<SqlDatabase> database, const PostgresJournalOptions& options) {
  if (database == nullptr) return absl::InvalidArgumentError("database: must not be null");
  if (database->dialect() != server::SqlDialect::kPostgres) {
    return absl::InvalidArgumentError("database: must be PostgreSQL");
  }
  if (auto s = ValidateOptions(options); !s.ok()) return s;
  return OpenOn(std::move(database), options);
}

}  // namespace saferetry

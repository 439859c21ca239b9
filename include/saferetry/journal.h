// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The intent journal: a durable record of every keyed write, written before
// the first byte of the request leaves (persist-before-send) and at every
// state change, so that a process killed between sending and the answer
// leaves behind the key, the request's fingerprint and the status-query
// template, and something else can later ask the server what happened.
//
// One intent is one logical request with one Idempotency-Key. Its state moves
// along
//
//   PENDING --MarkSent(1)--> SENT(1) --MarkSent(2)--> SENT(2) ...
//      |                        |
//      +--------Finish----------+--> SUCCEEDED | FAILED   (resolved: final)
//                               +--> UNKNOWN --Finish--> SUCCEEDED | FAILED
//                                       |  \--Finish(UNKNOWN): still unknown
//                                       +--MarkSent(n+1): a same-key resend
//
// PENDING, SENT and UNKNOWN are *unresolved*: the reconciler walks them and
// retention never deletes them. SUCCEEDED and FAILED are *resolved* and never
// change again.
//
// A claim (owner, expiry) says which process is working on an intent. `Record`
// claims the new intent for the journal's owner until the call's deadline
// plus a short grace, so a killed process blocks reconciliation for at most
// that long; a reconciler takes an intent with `Claim`, which succeeds only
// when the intent is unclaimed or its claim has expired. Claims coordinate
// work; they do not guard writes: the state machine does (a resolved intent
// never changes, so the first definite answer wins). No claim carries a
// fencing version: a process whose claim was taken over can still write
// UNKNOWN or mark an attempt on an unresolved intent (docs/journal.md).
//
// What is never written: the values of secret headers (Authorization,
// Proxy-Authorization, Cookie, Set-Cookie and the configured extra names —
// the header is dropped entirely), the userinfo of the URL and of the
// status-query template, and the body unless `JournalOptions::body_cap`
// allows it. Every journal enforces this itself, whatever the caller passes.
//
// Times are wall-clock (`WallTime`) because other processes read them; they
// are stored with millisecond precision (truncated towards the past).
//
// @code
//   saferetry::SqliteJournalOptions options;
//   options.path = "/var/lib/svc/intents.db";
//   std::shared_ptr<saferetry::IntentJournal> journal =
//   saferetry::OpenSqliteJournal(options).value(); saferetry::Intent intent =
//   saferetry::MakeIntent(request, key, status_url_template,
//                                                    clock->WallNow(), wall_deadline);
//   absl::StatusOr<saferetry::RecordResult> r = journal->Record(intent);
//   if (!r.ok()) return ...;            // nothing is sent: the intent is not durable
//   (void)journal->MarkSent(key, 1);    // before the attempt is handed to the transport
//   ... send ...
//   (void)journal->Finish(key, saferetry::IntentState::kSucceeded, {201, "succeeded", "response"});
// @endcode
//
// The SQLite implementation is in "saferetry/sqlite_journal.h" (target
// saferetry::journal), the PostgreSQL one for a fleet in
// "saferetry/postgres_journal.h" (target saferetry::journal_postgres); an
// in-memory one for tests in "saferetry/testing/memory_journal.h". See
// docs/journal.md and docs/journal-postgres.md.

#ifndef SAFERETRY_JOURNAL_H_
#define SAFERETRY_JOURNAL_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "saferetry/clock.h"
#include "saferetry/request.h"

namespace saferetry {

/// Where an intent stands. See the diagram at the top of this file.
enum class IntentState {
  /// Recorded; no attempt has been handed to the transport yet (when the
  /// client marks each attempt before sending it, nothing has left).
  kPending,
  /// At least one attempt may have left; `Intent::attempt` is the latest.
  kSent,
  /// The server applied the intent (a 2xx, or a status query that found it).
  kSucceeded,
  /// The intent had no effect and never will: a definite refusal, or a
  /// definite / fenced "not found" from a status query.
  kFailed,
  /// It may or may not have taken effect; a status query must decide. Not
  /// final: the reconciler resolves it later.
  kUnknown,
};

/// "PENDING", "SENT", "SUCCEEDED", "FAILED" or "UNKNOWN" (the stored form).
std::string_view IntentStateName(IntentState state);
/// The state named `name` (exactly as `IntentStateName` writes it), or
/// nullopt.
std::optional<IntentState> ParseIntentState(std::string_view name);
/// True for kSucceeded and kFailed: the intent will never change again and
/// retention may prune it.
bool IsResolved(IntentState state);

/// How an intent ended (or why it is still UNKNOWN). Written by `Finish`.
struct IntentSummary {
  /// The HTTP status of the response that decided the outcome (the final
  /// response, or the status query's answer); 0 when there was none.
  int http_status = 0;
  /// The name of the call's stop reason (`StopReasonName`, e.g. "succeeded").
  std::string stop_reason;
  /// What decided the outcome: "response", "status_query", or empty.
  std::string resolved_by;
  /// The last error seen (transport error, journal error), for people; URL
  /// credentials are removed before it is stored.
  std::string last_error;
};

/// One intent as stored. `Record` takes one (only the request part matters)
/// and every read returns one.
struct Intent {
  /// The Idempotency-Key: 1 to 255 visible ASCII characters. Unique.
  std::string key;
  /// The method, as sent ("POST").
  std::string method;
  /// The URL, userinfo removed (`RedactUrl`).
  std::string url;
  /// SHA-256 of the exact body bytes, 64 lower-case hex digits
  /// (`BodyDigest`). The durable "same key, other body" guard compares it.
  std::string body_digest;
  /// The body, only when the journal's `body_cap` allows it; nullopt
  /// otherwise (the default: bodies are never stored).
  std::optional<std::string> body;
  /// The status-query URL template with `{key}` (userinfo removed); empty
  /// when the call had none.
  std::string status_url_template;
  /// The request headers that may be sent again later. Secret headers are
  /// never included (see the top of this file).
  Headers headers;
  /// When the intent was recorded (wall clock, ms precision). Zero (the
  /// epoch) in `Record`'s argument: the journal's clock fills it in.
  WallTime created{};
  /// The call's deadline (wall clock, ms precision). Required.
  WallTime deadline{};
  /// See `IntentState`.
  IntentState state = IntentState::kPending;
  /// The latest attempt marked sent, 1-based; 0 while PENDING.
  int attempt = 0;
  /// How it ended; empty until `Finish`.
  IntentSummary summary;
  /// Who is working on it (empty: nobody) and until when (wall clock).
  std::string claim_owner;
  WallTime claim_until{};
  /// The last time the row changed (wall clock, ms precision).
  WallTime updated{};
};

/// SHA-256 of `body`, as 64 lower-case hex digits. Pure, thread-safe.
std::string BodyDigest(std::string_view body);

/// The intent of `request` sent with `key`: the method, the URL with its
/// userinfo removed, the body digest, the body itself (the journal drops it
/// unless its `body_cap` allows), the non-secret headers (the built-in secret
/// names and `extra_secret_headers` are left out), the template, and the two
/// wall-clock times. State PENDING. Pure, thread-safe.
Intent MakeIntent(const Request& request, std::string key, std::string status_url_template,
                  WallTime created, WallTime deadline,
                  const std::vector<std::string>& extra_secret_headers = {});

/// This process's name in claims: "<host>:<pid>:<instance>", where the
/// instance is 16 hex digits from the operating system's CSPRNG, drawn once
/// per process start. A container restarted in the same pod has the same
/// host name and often pid 1; the instance keeps it from taking the claims of
/// the process it replaces for its own. Thread-safe.
std::string DefaultJournalOwner();

/// Options every journal shares.
struct JournalOptions {
  /// This process's name in claims, e.g. "orders-7f9c:4242:boot-20261201T1200".
  /// It must be unique per process start: a process that starts with the
  /// name of one that died takes that one's claims for its own. Empty (the
  /// default): `DefaultJournalOwner()`.
  std::string owner;
  /// How long after the call's deadline `Record`'s claim lasts: a killed
  /// process blocks reconciliation of its intents for at most this long
  /// past their deadlines. From 0 to 5 s; default 2 s.
  std::chrono::milliseconds claim_grace = std::chrono::seconds(2);
  /// Bodies of at most this many bytes are stored with the intent (so that a
  /// reconciler could resend them); larger bodies, and every body when 0 (the
  /// default), are not stored — only their digest.
  std::size_t body_cap = 0;
  /// Header names whose values are secret besides the built-in ones
  /// (case-insensitive). Such headers are never stored.
  std::vector<std::string> extra_secret_headers;
  /// The wall clock for `created`, `updated` and claim expiry. Null:
  /// `SystemClock()`.
  std::shared_ptr<Clock> clock;
};

/// What `Record` did.
struct RecordResult {
  /// The intent as stored (normalised: times truncated to ms, secrets
  /// removed, body dropped unless allowed).
  Intent intent;
  /// True when this call created it; false when the same intent (same key,
  /// method, URL and body digest) was already there, in any state.
  bool created = false;
};

/// Which unresolved intents `ListUnfinished` returns.
struct UnfinishedFilter {
  /// Only intents created at least this long before now (the journal's
  /// clock); nullopt: any age. `0ms` means every intent created until now.
  std::optional<std::chrono::milliseconds> older_than;
  /// Only intents whose deadline has passed.
  bool deadline_passed = false;
  /// Only intents nobody holds: no claim, or an expired one.
  bool claim_expired = false;
  /// At most this many, oldest `created` first (ties by key). 0: no limit.
  std::size_t limit = 1000;

  /// The reconciler's default: deadline passed and claim expired.
  static UnfinishedFilter EligibleNow(std::size_t limit = 1000) {
    UnfinishedFilter f;
    f.deadline_passed = true;
    f.claim_expired = true;
    f.limit = limit;
    return f;
  }
};

/// What `Prune` did.
struct PruneResult {
  /// Resolved intents deleted.
  std::int64_t pruned = 0;
  /// Unresolved intents (PENDING, SENT, UNKNOWN) older than the retention,
  /// kept because they are unresolved: each one needs reconciliation and is
  /// worth an alert.
  std::int64_t kept_unresolved = 0;
};

/// The durable record of intents. Implementations are thread-safe: one
/// instance may be shared by every thread of a process. Whether several
/// processes may share the same storage is the implementation's to say (the
/// SQLite journal: yes, on one host; the PostgreSQL journal: yes, on any hosts). Nothing throws;
/// every error is a status, and a failed write changes nothing.
///
/// Errors common to every method: `kUnavailable` when the storage cannot be
/// reached or stays locked past the busy timeout (retrying later may work),
/// `kDataLoss` when a stored record cannot be decoded, `kInternal` for any
/// other storage failure. Messages name the field at fault
/// ("idempotency_key: ...", "state: ...", "attempt: ...").
class IntentJournal {
 public:
  virtual ~IntentJournal() = default;

  /// The name this journal claims intents with: `JournalOptions::owner` when
  /// set (it must then be unique per process start), else
  /// `DefaultJournalOwner()`. The call setup continues an intent and
  /// `Client::Resolve` claims one under this name. The default is for
  /// implementations that keep no owner of their own.
  virtual std::string Owner() const { return DefaultJournalOwner(); }

  /// Persist-before-send: records `intent` as PENDING (or SENT with its first
  /// attempt marked, see `attempt` below), claimed by this
  /// journal's owner until `intent.deadline + claim_grace`, and returns it
  /// once it is durable (see the implementation for what durable means). The
  /// caller must not send anything unless this returned OK.
  ///
  /// `intent.state`, `summary`, claim and `updated` are ignored; `created`
  /// zero means now. Secrets are removed and the body kept only within
  /// `body_cap` (see the top of this file).
  ///
  /// `intent.attempt` says what is recorded for a new intent: 0 (the
  /// default, `MakeIntent`'s) records it PENDING; 1 records it SENT with
  /// attempt 1 already marked, in the same commit — exactly as if
  /// `MarkSent(key, 1)` had followed in the same transaction — so a call
  /// commits once, not twice, before its first byte. Mark early only when the
  /// first attempt is about to be handed to the transport: SENT tells the
  /// reconciler that something may have left (it asks the server rather than
  /// settling FAILED), so a call that then sends nothing must say so with
  /// `Finish(kFailed)`. Check the result: attempt 1 is marked only when
  /// `created` is true and `intent.state` is kSent (a journal that predates
  /// this returns PENDING; call `MarkSent(key, 1)` then). For a key already
  /// recorded the stored intent is returned as it is, whatever `attempt` says.
  ///
  /// @code
  ///   Intent intent = MakeIntent(request, key, url_template, now, deadline);
  ///   intent.attempt = 1;  // attempt 1 marked in the same commit
  ///   absl::StatusOr<RecordResult> r = journal->Record(intent);
  ///   if (!r.ok()) return ...;  // nothing is sent
  ///   const bool marked = r->created && r->intent.state == IntentState::kSent;
  ///   if (!marked && r->created && !journal->MarkSent(key, 1).ok()) return ...;
  /// @endcode
  ///
  /// When the key is already recorded for the same method, URL and body
  /// digest, nothing is written and the stored intent is returned with
  /// `created == false`, whatever its state: unresolved (the caller may
  /// continue it — with the same key — or leave it to the reconciler) or
  /// resolved (its outcome is known; nothing needs to be sent).
  ///
  /// Errors: `kInvalidArgument` naming the field (idempotency_key, method,
  /// url, body_digest — 64 lower-case hex digits, and matching `body` when it
  /// is given — deadline: must be set and not before `created` — and
  /// "attempt: ..." when `intent.attempt` is neither 0 nor 1;
  /// `kAlreadyExists` "idempotency_key: ... already recorded for another
  /// request" when the key was recorded with another method, URL or body
  /// digest — across restarts, for as long as the first intent is retained.
  virtual absl::StatusOr<RecordResult> Record(const Intent& intent) = 0;

  /// Marks attempt `attempt` (1-based) as possibly sent. Call it before the
  /// attempt is handed to the transport, so that PENDING proves nothing left.
  /// Allowed from PENDING, SENT and UNKNOWN (a same-key resend) with
  /// `attempt` greater than the stored one.
  ///
  /// Errors: `kNotFound` "idempotency_key: ..." for an unknown key;
  /// `kFailedPrecondition` "state: ..." when the intent is resolved;
  /// `kInvalidArgument` "attempt: ..." when `attempt` < 1 or not greater
  /// than the stored attempt.
  virtual absl::Status MarkSent(std::string_view key, int attempt) = 0;

  /// Writes the outcome: `outcome` is kSucceeded, kFailed or kUnknown (an
  /// UNKNOWN intent may be finished again, e.g. UNKNOWN with a newer
  /// `last_error`, or resolved). The claim is left as it is (see `Release`).
  ///
  /// Errors: `kNotFound` "idempotency_key: ..."; `kInvalidArgument`
  /// "outcome: ..." for kPending or kSent; `kFailedPrecondition` "state: ..."
  /// when the intent is already resolved (the first resolution stands).
  virtual absl::Status Finish(std::string_view key, IntentState outcome,
                              const IntentSummary& summary) = 0;

  /// The stored intent. Errors: `kNotFound` "idempotency_key: ...".
  virtual absl::StatusOr<Intent> Get(std::string_view key) = 0;

  /// Unresolved intents (PENDING, SENT, UNKNOWN) matching `filter`, oldest
  /// first. A snapshot: by the time the caller acts another process may have
  /// claimed or resolved some, so take each with `Claim`.
  /// Errors: `kInvalidArgument` "older_than: ..." when negative.
  virtual absl::StatusOr<std::vector<Intent>> ListUnfinished(const UnfinishedFilter& filter) = 0;

  /// Atomically claims the intent for `owner` until `until` (wall clock), if
  /// it is unresolved and either unclaimed, claimed by `owner` already (the
  /// claim is then moved to `until`), or its claim has expired (`claim_until`
  /// <= now). Returns true when `owner` now holds the claim; false when
  /// another owner holds a live claim or the intent is resolved. Atomic
  /// across threads and, for the SQLite and PostgreSQL journals, across
  /// processes (PostgreSQL: and hosts): of concurrent claimers exactly one
  /// wins.
  ///
  /// Errors: `kNotFound` "idempotency_key: ..."; `kInvalidArgument`
  /// "owner: ..." when `owner` is empty.
  virtual absl::StatusOr<bool> Claim(std::string_view key, std::string_view owner,
                                     WallTime until) = 0;

  /// Drops `owner`'s claim. Returns true when `owner` held it (live or
  /// expired) and it is dropped; false when someone else holds it or nobody.
  /// Errors: `kNotFound` "idempotency_key: ...".
  virtual absl::StatusOr<bool> Release(std::string_view key, std::string_view owner) = 0;

  /// Deletes resolved intents (SUCCEEDED, FAILED) last updated at or before
  /// `now - retention`, and counts the unresolved intents created at or
  /// before that time, which are never deleted. Once pruned, a key may be
  /// recorded again for another request.
  /// Errors: `kInvalidArgument` "retention: ..." when negative.
  virtual absl::StatusOr<PruneResult> Prune(WallTime now, std::chrono::milliseconds retention) = 0;

  /// How long ago (by the journal's clock) the oldest unresolved intent was
  /// created, for an "oldest unresolved intent" gauge; nullopt when there is
  /// none. Never negative.
  virtual absl::StatusOr<std::optional<std::chrono::milliseconds>> OldestUnresolvedAge() = 0;
};

namespace internal {

/// Not API: the rules both journals share.
///
/// `intent` normalised for storing: key validated, URL and template
/// redacted, secret headers dropped, body kept only within `options.body_cap`
/// (its digest checked when given), times truncated to ms (`created` zero ->
/// `now`), state PENDING, claim for `owner` until deadline + grace.
absl::StatusOr<Intent> NormalizeIntent(const Intent& intent, const JournalOptions& options,
                                       std::string_view owner, WallTime now);
/// OK when an intent recorded as `stored` may be recorded again as
/// `incoming` (same method, URL and digest); kAlreadyExists naming
/// "idempotency_key" otherwise.
absl::Status CheckSameIntent(const Intent& stored, const Intent& incoming);
/// OK when `MarkSent(attempt)` is allowed from `stored`.
absl::Status CheckMarkSent(const Intent& stored, int attempt);
/// OK when `Finish(outcome)` is allowed from `stored`.
absl::Status CheckFinish(const Intent& stored, IntentState outcome);
/// `options.owner`, or `DefaultJournalOwner()` when it is empty.
std::string JournalOwner(const JournalOptions& options);
/// Checks `options` (claim_grace range). kInvalidArgument naming the field.
absl::Status ValidateJournalOptions(const JournalOptions& options);
/// The widest range of Unix milliseconds a `WallTime` can hold (about
/// ±292 years around 1970 with libstdc++'s nanosecond clock).
inline constexpr std::int64_t kMaxUnixMillis =
    std::chrono::duration_cast<std::chrono::milliseconds>(WallTime::duration::max()).count();
/// `t` truncated to whole milliseconds since the Unix epoch.
std::int64_t ToUnixMillis(WallTime t);
/// The wall time `ms` milliseconds after the Unix epoch; `ms` must be within
/// ±`kMaxUnixMillis`.
WallTime FromUnixMillis(std::int64_t ms);
/// At most this many headers per intent, each name and value at most
/// `kMaxHeaderBytes`.
inline constexpr std::size_t kMaxStoredHeaders = 256;
inline constexpr std::size_t kMaxHeaderBytes = 64 * 1024;
/// OK when every name is an HTTP token and no value holds CR, LF or NUL,
/// within the limits above; kInvalidArgument "headers: ..." otherwise.
absl::Status ValidateHeaders(const Headers& headers);
/// `summary` with URL credentials removed from `last_error`.
IntentSummary RedactSummary(const IntentSummary& summary);

}  // namespace internal
}  // namespace saferetry

#endif  // SAFERETRY_JOURNAL_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The request-handling helper: what a keyed write handler wraps around its
// business transaction, and the status query, answering exactly as
// docs/server-contract.md says. It knows no HTTP framework: the caller copies
// a few request fields into `WriteRequest` / `StatusQueryRequest` and the
// returned `Answer` (status, headers, body) into its response.
//
// @code
//   saferetry::server::HandlerOptions options;
//   options.operation = "create_order";
//   auto orders = *saferetry::server::IdempotentHandler::Create(store, options);
//   server.Post("/orders", [&](const httplib::Request& req, httplib::Response& res) {
//     saferetry::server::WriteRequest w;
//     w.method = "POST";
//     w.path = "/orders";
//     w.body = req.body;
//     w.idempotency_key = HeaderOrNull(req, "Idempotency-Key");
//     w.deadline = HeaderOrNull(req, "X-Request-Timeout-Ms");
//     saferetry::server::Work work;
//     work.effect = CreateOrder(req.body);  // runs in the completing transaction
//     saferetry::server::Answer a = orders->HandleWrite(w, work);
//     res.status = a.status;
//     for (auto& [name, value] : a.headers) res.set_header(name, value);
//     res.set_content(a.body, a.content_type);
//   });
// @endcode
//
// Answers of `HandleWrite`, in the order the checks run:
//
//   400  missing or invalid key or tenant, malformed deadline  (nothing recorded)
//   503  `Idempotency-Key-State: rejected`: deadline 0 or shorter than the
//        expected work                                     (nothing recorded)
//   410  `fenced`: the key was fenced by a status query
//   410  `expired`: the key was reaped after its retention
//   422  the key was used for a different request
//   409  `processing`: another worker holds the lease
//   409  `pending_confirmation`: the key waits for a person's decision (a
//        recovery could not tell whether its effect happened)
//   any  replay of the stored final answer, `Idempotent-Replayed: true` and
//        `Idempotency-Key-State: completed`
//   503  `rejected`: the database could not be reached before the claim
//        was recorded, or the takeover hook could not check the previous
//        attempt's effect                                  (no work done)
//   any  the effect's answer (fresh execution; also after a takeover),
//        `Idempotency-Key-State: completed`: every final answer the handler
//        stores carries the key's state, first time and replay alike, so a
//        client can take a final 4xx as definite (saferetry/settlement.h)
//   500  the database failed after the claim (the work may have run;
//        nothing of the effect's transaction is known to have committed)
//
// Every 503 this helper produces carries `Idempotency-Key-State: rejected`:
// it is only ever answered before any work of the attempt ran.
//
// Thread-safety: one handler is shared by every request thread.

#ifndef SAFERETRY_SERVER_HANDLER_H_
#define SAFERETRY_SERVER_HANDLER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "saferetry/clock.h"
#include "saferetry/server/idempotency_store.h"

namespace saferetry {
namespace server {

inline constexpr std::string_view kIdempotencyKeyHeader = "Idempotency-Key";
inline constexpr std::string_view kTenantHeader = "X-Tenant-Id";
/// Whole milliseconds the server has for this attempt.
inline constexpr std::string_view kRequestTimeoutHeader = "X-Request-Timeout-Ms";
/// "true" on an answer that replays a stored one (the work did not run now).
inline constexpr std::string_view kReplayedHeader = "Idempotent-Replayed";
/// completed | processing | abandoned | expired | unknown | fenced | rejected
/// | pending_confirmation.
inline constexpr std::string_view kKeyStateHeader = "Idempotency-Key-State";
/// "true" on a status query asks the server to fence an unsettled key.
inline constexpr std::string_view kFenceHeader = "Idempotency-Key-Fence";
/// The tenant when the request names none.
inline constexpr std::string_view kDefaultTenant = "default";

/// An HTTP answer for the caller to copy into its framework's response.
struct Answer {
  int status = 500;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string content_type = "application/json";

  /// The value of header `name` (exact case), or "" when absent.
  std::string Header(std::string_view name) const;
};

/// What the helper needs from a keyed write request. Header fields are
/// nullopt when the header is absent.
struct WriteRequest {
  /// Method and path, for the request digest (SHA-256 of method "\n" path
  /// "\n" body).
  std::string method;
  std::string path;
  /// The exact body bytes.
  std::string body;
  std::optional<std::string> idempotency_key;
  std::optional<std::string> tenant;
  /// The raw `X-Request-Timeout-Ms` value.
  std::optional<std::string> deadline;
};

/// What the helper needs from a status query (`GET .../by-key/{key}`).
struct StatusQueryRequest {
  std::string key;  // already percent-decoded
  std::optional<std::string> tenant;
  /// The raw `Idempotency-Key-Fence` value; "true" asks for a fence.
  std::optional<std::string> fence;
};

/// What a takeover hook found out about the previous worker's effect.
/// Implicitly made from `std::optional<StoredResponse>` (nullopt: no effect;
/// a value: the effect happened with that answer), so a hook may return
/// either.
struct TakeoverVerdict {
  enum class Kind {
    /// The effect certainly did not happen: a write redoes the work, a
    /// fencing status query and the sweeper fence the key.
    kNoEffect,
    /// The effect happened: `response` is the final answer to store.
    kEffect,
    /// The facts cannot settle it, now or later (the external system has no
    /// query by request id): the record moves to PENDING_CONFIRMATION and a
    /// person decides. `reason` says why.
    kCannotTell,
  };
  Kind kind = Kind::kNoEffect;
  StoredResponse response;
  /// kEffect, optional: instead of storing `response` as is, runs in the
  /// completing transaction to write the local part of the work from the
  /// external facts (e.g. the payment row for the channel's charge) and
  /// returns the answer to store.
  Effect finish;
  std::string reason;

  TakeoverVerdict() = default;
  TakeoverVerdict(std::optional<StoredResponse> found)  // NOLINT: implicit on purpose
      : kind(found.has_value() ? Kind::kEffect : Kind::kNoEffect),
        response(found.has_value() ? *std::move(found) : StoredResponse{}) {}
  static TakeoverVerdict NoEffect() { return TakeoverVerdict(); }
  static TakeoverVerdict Happened(StoredResponse answer) {
    return TakeoverVerdict(std::optional<StoredResponse>(std::move(answer)));
  }
  static TakeoverVerdict Finish(Effect local_part) {
    TakeoverVerdict v;
    v.kind = Kind::kEffect;
    v.finish = std::move(local_part);
    return v;
  }
  static TakeoverVerdict CannotTell(std::string why) {
    TakeoverVerdict v;
    v.kind = Kind::kCannotTell;
    v.reason = std::move(why);
    return v;
  }
};

/// What the previous worker of a taken-over key may have done, checked
/// against the external facts before the work is redone (seed of the
/// contract: a lease proves nothing about external effects). `previous`
/// holds the last recovery step the worker recorded (`previous.step`: its
/// name and the external request id to ask the external system about).
///
/// Return `NoEffect` (or nullopt) when the effect certainly did not happen;
/// `Happened(answer)` (or the answer) when it did (e.g. the payment provider
/// knows the charge: 201 with its id); `CannotTell(why)` when no check can
/// ever settle it; an error when the facts cannot be checked now (a write or
/// a status query gets 503 `rejected`, the sweeper counts a failed recovery;
/// the record stays with its new version until the lease runs out).
using TakeoverHook = std::function<absl::StatusOr<TakeoverVerdict>(const KeyScope& scope,
                                                                   const KeyRecord& previous)>;

/// The work of one keyed write.
struct Work {
  /// Optional. Runs after the claim, outside any transaction: slow calls,
  /// waiting, anything that must not hold a database lock. Receives the
  /// scope and the fencing version this worker owns. Before calling an
  /// external system, record a recovery step (`IdempotentHandler::
  /// RecordStep`) and pass its external id to that system.
  std::function<void(const KeyScope& scope, std::int64_t version)> before_effect;
  /// Required. The business effect, inside the completing transaction; it
  /// returns the final answer to store (any status: a final 4xx is stored
  /// and replayed like a 2xx).
  Effect effect;
};

/// Looks the business resource up by key for a status query; returns the
/// body of a 200 answer, or nullopt when there is none. Optional: without
/// it a COMPLETED 2xx record answers with its stored body.
using ResourceLookup =
    std::function<absl::StatusOr<std::optional<std::string>>(const KeyScope& scope)>;

/// Defaults: no expected work, no takeover hook.
struct HandlerOptions {
  /// The operation that scopes the keys (e.g. "create_order"). Required.
  std::string operation;
  /// The work a request needs; a deadline shorter than this is refused
  /// before any work (503 `rejected`). >= 0.
  std::chrono::milliseconds expected_work{0};
  /// Called on every takeover of an abandoned PROCESSING record, by a write
  /// (before redoing the work) and by a fencing status query (before
  /// fencing). Optional.
  TakeoverHook takeover_hook;
  /// Steady clock for the deadline; the system clock when null.
  std::shared_ptr<Clock> clock;
};

/// Bounds of one sweep. Defaults: 100 records, 3 failed recoveries.
struct SweepOptions {
  /// At most this many abandoned records are examined per run. > 0.
  int max_records = 100;
  /// A record whose hook failed this many times moves to pending
  /// confirmation. > 0.
  int max_failed_recoveries = 3;
};

/// What one sweep did.
struct SweepReport {
  int examined = 0;              // abandoned records listed
  int taken_over = 0;            // taken over under the fence by this sweep
  int completed = 0;             // the hook found the effect: COMPLETED with its answer
  int fenced = 0;                // no effect: fenced (a resend gets 410, a status query "fenced")
  int pending_confirmation = 0;  // cannot tell, or too many failed recoveries
  int failed_checks = 0;         // the hook could not check now (retried after the lease)
  int skipped = 0;               // someone else moved the record on first
};

/// Counters by answer, for /stats or metrics.
struct HandlerMetrics {
  std::int64_t executed = 0;               // effect committed by a fresh execution
  std::int64_t replayed = 0;               // stored answer replayed
  std::int64_t conflicting_payload = 0;    // 422
  std::int64_t in_progress = 0;            // 409 on a write
  std::int64_t rejected_bad_request = 0;   // 400 before anything is recorded
  std::int64_t rejected_before_work = 0;   // 503 rejected
  std::int64_t expired_key = 0;            // 410 expired
  std::int64_t fenced_refused = 0;         // 410 fenced
  std::int64_t takeovers = 0;              // abandoned records taken over
  std::int64_t takeover_found_effect = 0;  // the hook found the effect had happened
  std::int64_t stale_writes_rejected = 0;  // completions refused by the fencing version
  std::int64_t status_queries = 0;
  std::int64_t fences = 0;          // keys newly fenced
  std::int64_t storage_errors = 0;  // 500
  /// 503 `rejected`: the database could not be reached (a write: before
  /// its claim was recorded, so nothing was done; or a status query).
  std::int64_t storage_unavailable = 0;
  std::int64_t steps_recorded = 0;        // recovery steps written
  std::int64_t pending_confirmation = 0;  // 409 pending_confirmation answers
  std::int64_t moved_to_pending = 0;      // records moved to pending confirmation
  std::int64_t decisions = 0;             // a person's decisions recorded
  std::int64_t sweeps = 0;                // RunSweep calls that reached the database
  std::int64_t swept_completed = 0;       // recovered by a sweep: completed
  std::int64_t swept_fenced = 0;          // recovered by a sweep: fenced
};

/// Keys and tenants: 1 to 255 visible ASCII characters.
bool IsValidKeyToken(std::string_view s);

/// SHA-256, lower-case hex, of method "\n" path "\n" body.
std::string RequestDigest(std::string_view method, std::string_view path, std::string_view body);

/// A 503 `Idempotency-Key-State: rejected` answer with body
/// {"error": code, "message": message}: for a server that refuses before
/// doing any work and before recording the key (load shedding, a deadline
/// too short). The client reads it as "this attempt had no effect".
Answer RejectedBeforeWork(std::string_view code, std::string_view message);

class IdempotentHandler {
 public:
  /// InvalidArgument naming "store", "operation" or "expected_work".
  static absl::StatusOr<std::unique_ptr<IdempotentHandler>> Create(
      std::shared_ptr<IdempotencyStore> store, HandlerOptions options);

  /// Runs one keyed write: the checks, Begin, `work.before_effect`,
  /// Complete with `work.effect`. Never throws; a database failure is a 500
  /// with nothing committed.
  Answer HandleWrite(const WriteRequest& request, const Work& work);

  /// Answers a status query, fencing when asked (`Idempotency-Key-Fence:
  /// true`):
  ///   200 `completed`   the resource exists (or a COMPLETED 2xx record)
  ///   404 `completed`   COMPLETED with a final error (body: final_status)
  ///   409 `processing`  PROCESSING, lease running
  ///   409 `pending_confirmation`  waits for a person's decision
  ///   404 `abandoned`   PROCESSING, lease expired (no fence asked)
  ///   404 `expired`     reaped without a resource
  ///   404 `unknown`     never seen (no fence asked)
  ///   404 `fenced`      fenced now or before
  ///   503 `rejected`    the database cannot be reached, or the takeover
  ///                     hook cannot check the facts now: ask again later
  ///   500               any other database failure
  Answer HandleStatusQuery(const StatusQueryRequest& request,
                           const ResourceLookup& lookup = nullptr);

  /// Records recovery step `step` for the key this worker owns at
  /// `version` (from `Work::before_effect`), before calling the external
  /// system, in its own short transaction. `external_id` defaults to
  /// `DefaultExternalRequestId(scope, step)`. Returns the step recorded
  /// (pass its `external_id` to the external system); Aborted when the key
  /// was taken over or fenced meanwhile (do not call); the database's error
  /// otherwise (do not call either).
  absl::StatusOr<RecoveryStep> RecordStep(const KeyScope& scope, std::int64_t version,
                                          std::string_view step,
                                          std::optional<std::string> external_id = std::nullopt);

  /// One bounded sweep of this operation's abandoned records (PROCESSING,
  /// lease run out, nobody came back): each is taken over under the fence
  /// (only one of several sweepers wins a record; a stale worker's late
  /// completion is refused) and the takeover hook decides: effect → COMPLETED
  /// with its answer; no effect → fenced; cannot tell → pending
  /// confirmation; an error → a failed recovery, retried by a later sweep
  /// once the renewed lease runs out, until `max_failed_recoveries` moves it
  /// to pending confirmation. Without a hook every abandoned record is
  /// fenced (a local effect commits with its record, so PROCESSING proves
  /// none happened). Idempotent; safe to run from cron on every instance.
  absl::StatusOr<SweepReport> RunSweep(const SweepOptions& options = {});

  /// Records a person's decision on a key pending confirmation (the key and
  /// tenant as in a status query). See `IdempotencyStore::Decide`.
  absl::StatusOr<DecideResult> Decide(std::string_view key, std::optional<std::string> tenant,
                                      Decision decision);

  HandlerMetrics metrics() const;
  IdempotencyStore& store() { return *store_; }
  const HandlerOptions& options() const { return options_; }

 private:
  IdempotentHandler(std::shared_ptr<IdempotencyStore> store, HandlerOptions options);
  Answer Replay(const StoredResponse& stored);
  Answer StorageError(const absl::Status& status);
  Answer StorageUnavailable(const absl::Status& status);
  Answer QueryStorageFailure(const absl::Status& status);
  Answer Fenced410();
  Answer AnswerCompletedStatus(const KeyRecord& record);
  Answer FenceAndAnswer(const KeyScope& scope, const KeyRecord& abandoned);
  Answer PendingConfirmation409(const KeyRecord& record);

  struct Counters {
    std::atomic<std::int64_t> executed{0}, replayed{0}, conflicting_payload{0}, in_progress{0},
        rejected_bad_request{0}, rejected_before_work{0}, expired_key{0}, fenced_refused{0},
        takeovers{0}, takeover_found_effect{0}, stale_writes_rejected{0}, status_queries{0},
        fences{0}, storage_errors{0}, storage_unavailable{0}, steps_recorded{0},
        pending_confirmation{0}, moved_to_pending{0}, decisions{0}, sweeps{0}, swept_completed{0},
        swept_fenced{0};
  };

  std::shared_ptr<IdempotencyStore> store_;
  HandlerOptions options_;
  Counters counters_;
};

}  // namespace server
}  // namespace saferetry

#endif  // SAFERETRY_SERVER_HANDLER_H_

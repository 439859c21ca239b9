// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/server/handler.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/sha256.h"
#include "nlohmann/json.hpp"
#include "saferetry/deadline.h"

namespace saferetry {
namespace server {
namespace {

Answer Json(int status, nlohmann::json body) {
  Answer a;
  a.status = status;
  a.body = body.dump();
  return a;
}

Answer Error(int status, std::string_view code, std::string_view message) {
  return Json(status, {{"error", code}, {"message", message}});
}

Answer WithState(Answer a, std::string_view state) {
  a.headers.emplace_back(std::string(kKeyStateHeader), std::string(state));
  return a;
}

bool Is2xx(int status) { return status >= 200 && status < 300; }

// The completion of a takeover that found the effect: the hook's local part,
// or its answer stored as is.
Effect FactsEffect(const TakeoverVerdict& verdict) {
  if (verdict.finish) return verdict.finish;
  StoredResponse found = verdict.response;
  return [found](Transaction&) -> absl::StatusOr<StoredResponse> { return found; };
}

// A PROCESSING or pending record's answer body, with its last recovery step.
Answer WithStep(int status, std::string_view code, std::string_view message,
                const KeyRecord& record) {
  nlohmann::json body = {{"error", code}, {"message", message}};
  if (record.step.has_value()) {
    body["step"] = {{"name", record.step->name}, {"external_id", record.step->external_id}};
  }
  if (record.pending_since_ms.has_value()) {
    body["pending_since_ms"] = *record.pending_since_ms;
    body["pending_reason"] = record.pending_reason;
  }
  return Json(status, std::move(body));
}

}  // namespace

std::string Answer::Header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (n == name) return v;
  }
  return "";
}

bool IsValidKeyToken(std::string_view s) {
  if (s.empty() || s.size() > 255) return false;
  for (char c : s) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

std::string RequestDigest(std::string_view method, std::string_view path, std::string_view body) {
  // The core's SHA-256 (src/common/sha256.h), shared with the intent journal.
  return saferetry::internal::Sha256Hex({method, "\n", path, "\n", body});
}

Answer RejectedBeforeWork(std::string_view code, std::string_view message) {
  return WithState(Error(503, code, message), "rejected");
}

absl::StatusOr<std::unique_ptr<IdempotentHandler>> IdempotentHandler::Create(
    std::shared_ptr<IdempotencyStore> store, HandlerOptions options) {
  if (!store) return absl::InvalidArgumentError("store: must not be null");
  if (options.operation.empty() || options.operation.size() > 255) {
    return absl::InvalidArgumentError("operation: must be 1 to 255 bytes");
  }
  if (options.expected_work.count() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected_work: must be >= 0, got ", options.expected_work.count(), "ms"));
  }
  if (!options.clock) options.clock = SystemClock();
  return std::unique_ptr<IdempotentHandler>(
      new IdempotentHandler(std::move(store), std::move(options)));
}

IdempotentHandler::IdempotentHandler(std::shared_ptr<IdempotencyStore> store,
                                     HandlerOptions options)
    : store_(std::move(store)), options_(std::move(options)) {}

HandlerMetrics IdempotentHandler::metrics() const {
  HandlerMetrics m;
  m.executed = counters_.executed.load();
  m.replayed = counters_.replayed.load();
  m.conflicting_payload = counters_.conflicting_payload.load();
  m.in_progress = counters_.in_progress.load();
  m.rejected_bad_request = counters_.rejected_bad_request.load();
  m.rejected_before_work = counters_.rejected_before_work.load();
  m.expired_key = counters_.expired_key.load();
  m.fenced_refused = counters_.fenced_refused.load();
  m.takeovers = counters_.takeovers.load();
  m.takeover_found_effect = counters_.takeover_found_effect.load();
  m.stale_writes_rejected = counters_.stale_writes_rejected.load();
  m.status_queries = counters_.status_queries.load();
  m.fences = counters_.fences.load();
  m.storage_errors = counters_.storage_errors.load();
  m.storage_unavailable = counters_.storage_unavailable.load();
  m.steps_recorded = counters_.steps_recorded.load();
  m.pending_confirmation = counters_.pending_confirmation.load();
  m.moved_to_pending = counters_.moved_to_pending.load();
  m.decisions = counters_.decisions.load();
  m.sweeps = counters_.sweeps.load();
  m.swept_completed = counters_.swept_completed.load();
  m.swept_fenced = counters_.swept_fenced.load();
  return m;
}

Answer IdempotentHandler::Replay(const StoredResponse& stored) {
  counters_.replayed++;
  Answer a;
  a.status = stored.status;
  a.body = stored.body;
  a.headers.emplace_back(std::string(kReplayedHeader), "true");
  return WithState(std::move(a), "completed");
}

Answer IdempotentHandler::StorageError(const absl::Status& status) {
  counters_.storage_errors++;
  return Error(500, "storage_error", std::string(status.message()));
}

Answer IdempotentHandler::StorageUnavailable(const absl::Status& status) {
  counters_.storage_unavailable++;
  return RejectedBeforeWork(
      "storage_unavailable",
      absl::StrCat("the database cannot be reached; nothing was done: ", status.message()));
}

Answer IdempotentHandler::QueryStorageFailure(const absl::Status& status) {
  // A status query has no business effect: a database that cannot be reached
  // is "ask again later", like a write refused before its claim.
  if (absl::IsUnavailable(status)) return StorageUnavailable(status);
  return StorageError(status);
}

Answer IdempotentHandler::PendingConfirmation409(const KeyRecord& record) {
  counters_.pending_confirmation++;
  return WithState(WithStep(409, "pending_confirmation",
                            "the effect of the request with this key could not be confirmed; "
                            "automatic work has stopped until a person decides. Do not send a "
                            "new request: ask again later",
                            record),
                   "pending_confirmation");
}

Answer IdempotentHandler::Fenced410() {
  counters_.fenced_refused++;
  return WithState(Error(410, "idempotency_key_fenced",
                         "Idempotency-Key: a status query settled this key as never executed; "
                         "it will not be executed"),
                   "fenced");
}

Answer IdempotentHandler::HandleWrite(const WriteRequest& request, const Work& work) {
  // Checks that need no state come first; none of them records anything, so
  // the same key may be sent again after fixing the request.
  if (!request.idempotency_key.has_value() || request.idempotency_key->empty()) {
    counters_.rejected_bad_request++;
    return Error(400, "missing_idempotency_key",
                 absl::StrCat("Idempotency-Key: required on ", request.method, " ", request.path));
  }
  if (!IsValidKeyToken(*request.idempotency_key)) {
    counters_.rejected_bad_request++;
    return Error(400, "invalid_idempotency_key",
                 "Idempotency-Key: must be 1 to 255 visible ASCII characters");
  }
  const std::string tenant = request.tenant.has_value() && !request.tenant->empty()
                                 ? *request.tenant
                                 : std::string(kDefaultTenant);
  if (!IsValidKeyToken(tenant)) {
    counters_.rejected_bad_request++;
    return Error(400, "invalid_tenant", "X-Tenant-Id: must be 1 to 255 visible ASCII characters");
  }
  if (request.deadline.has_value()) {
    const TimePoint now = options_.clock->Now();
    auto deadline = DeadlineFromHeader(*request.deadline, now, kRequestTimeoutHeader);
    if (!deadline.ok()) {
      counters_.rejected_bad_request++;
      return Error(400, "invalid_deadline", std::string(deadline.status().message()));
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline->Remaining(now));
    // Work the caller will not wait for is wasted, and could commit after the
    // caller gave up: refuse before recording the key.
    if (left.count() == 0 || left < options_.expected_work) {
      counters_.rejected_before_work++;
      return RejectedBeforeWork("deadline_too_short",
                                absl::StrCat("X-Request-Timeout-Ms: ", left.count(),
                                             " ms for this attempt, the work needs ",
                                             options_.expected_work.count(), " ms"));
    }
  }
  if (!work.effect) return StorageError(absl::InvalidArgumentError("work.effect: required"));

  const KeyScope scope{tenant, options_.operation, *request.idempotency_key};
  const std::string digest = RequestDigest(request.method, request.path, request.body);
  auto begun = store_->Begin(scope, digest);
  if (!begun.ok()) {
    // Nothing ran for this attempt: the claim did not commit (or committed
    // without any work). A database that cannot be reached is "try again",
    // and the answer says this attempt had no effect.
    if (absl::IsUnavailable(begun.status())) return StorageUnavailable(begun.status());
    return StorageError(begun.status());
  }
  switch (begun->outcome) {
    case BeginOutcome::kClaimed:
      break;
    case BeginOutcome::kTakenOver:
      counters_.takeovers++;
      break;
    case BeginOutcome::kReplay:
      return Replay(begun->response);
    case BeginOutcome::kConflictingPayload:
      counters_.conflicting_payload++;
      return Error(422, "idempotency_key_reused",
                   "Idempotency-Key: already used for a different request");
    case BeginOutcome::kInProgress:
      counters_.in_progress++;
      return WithState(Error(409, "request_in_progress",
                             "Idempotency-Key: a request with this key is still being processed"),
                       "processing");
    case BeginOutcome::kExpired:
      counters_.expired_key++;
      return WithState(Error(410, "idempotency_key_expired",
                             "Idempotency-Key: this key completed before the retention window; "
                             "its stored answer is gone and it will not be executed again"),
                       "expired");
    case BeginOutcome::kFenced:
      return Fenced410();
    case BeginOutcome::kPendingConfirmation:
      return PendingConfirmation409(begun->previous.value_or(KeyRecord{}));
  }
  const std::int64_t version = begun->version;

  // A takeover first asks whether the previous worker's effect happened
  // elsewhere: a lease proves nothing about external effects.
  Effect effect = work.effect;
  bool from_facts = false;
  if (begun->outcome == BeginOutcome::kTakenOver && options_.takeover_hook) {
    auto facts = options_.takeover_hook(scope, *begun->previous);
    if (!facts.ok()) {
      counters_.rejected_before_work++;
      return RejectedBeforeWork(
          "takeover_check_failed",
          absl::StrCat("the previous attempt's effect cannot be checked now: ",
                       facts.status().message()));
    }
    if (facts->kind == TakeoverVerdict::Kind::kCannotTell) {
      auto marked = store_->MarkPendingConfirmation(scope, version, facts->reason);
      if (!marked.ok()) return StorageError(marked.status());
      KeyRecord pending = *begun->previous;
      if (*marked) {
        counters_.moved_to_pending++;
        pending.state = RecordState::kPendingConfirmation;
        pending.pending_reason = facts->reason;
        return PendingConfirmation409(pending);
      }
      counters_.in_progress++;
      return WithState(Error(409, "request_in_progress",
                             "Idempotency-Key: another worker took this request over"),
                       "processing");
    }
    if (facts->kind == TakeoverVerdict::Kind::kEffect) {
      from_facts = true;
      effect = FactsEffect(*facts);
    }
  }
  if (!from_facts && work.before_effect) work.before_effect(scope, version);

  auto done = store_->Complete(scope, version, effect);
  if (!done.ok()) {
    // Nothing was committed; the record stays PROCESSING until its lease runs
    // out and a request with the same key takes over.
    return StorageError(done.status());
  }
  if (done->committed) {
    if (from_facts) {
      counters_.takeover_found_effect++;
      return Replay(done->response);
    }
    counters_.executed++;
    // The first final answer is marked like its replays: the client may take
    // it as the key's definite answer (saferetry/settlement.h).
    Answer a;
    a.status = done->response.status;
    a.body = std::move(done->response.body);
    return WithState(std::move(a), "completed");
  }

  // Fenced off: someone took the key over (or fenced it) while this worker
  // was slow. Answer with what the record says now.
  counters_.stale_writes_rejected++;
  if (done->current.has_value()) {
    const KeyRecord& now = *done->current;
    if (now.state == RecordState::kCompleted && now.request_digest == digest) {
      return Replay(now.response);
    }
    if (now.state == RecordState::kFenced) return Fenced410();
    if (now.state == RecordState::kPendingConfirmation) return PendingConfirmation409(now);
  }
  counters_.in_progress++;
  return WithState(
      Error(409, "request_in_progress", "Idempotency-Key: another worker took this request over"),
      "processing");
}

Answer IdempotentHandler::AnswerCompletedStatus(const KeyRecord& record) {
  if (Is2xx(record.response.status)) {
    Answer a;
    a.status = 200;
    a.body = record.response.body;
    return WithState(std::move(a), "completed");
  }
  return WithState(Json(404, {{"error", "no_effect"},
                              {"message",
                               "the key completed with a final error; a request with the same "
                               "key replays it"},
                              {"final_status", record.response.status}}),
                   "completed");
}

Answer IdempotentHandler::FenceAndAnswer(const KeyScope& scope, const KeyRecord& abandoned) {
  std::optional<std::int64_t> owned;
  if (options_.takeover_hook && abandoned.state == RecordState::kProcessing &&
      abandoned.version > 0) {
    // Check the external facts before settling the key as "no effect".
    auto taken = store_->TakeOver(scope, abandoned.version);
    if (!taken.ok()) return QueryStorageFailure(taken.status());
    if (taken->has_value()) {
      counters_.takeovers++;
      auto facts = options_.takeover_hook(scope, abandoned);
      if (!facts.ok()) {
        counters_.rejected_before_work++;
        return RejectedBeforeWork(
            "takeover_check_failed",
            absl::StrCat("the previous attempt's effect cannot be checked now: ",
                         facts.status().message()));
      }
      if (facts->kind == TakeoverVerdict::Kind::kCannotTell) {
        auto marked = store_->MarkPendingConfirmation(scope, **taken, facts->reason);
        if (!marked.ok()) return StorageError(marked.status());
        if (*marked) {
          counters_.moved_to_pending++;
          KeyRecord pending = abandoned;
          pending.state = RecordState::kPendingConfirmation;
          pending.pending_reason = facts->reason;
          return PendingConfirmation409(pending);
        }
        // Someone else moved the key on meanwhile: the fence below reports it.
      } else if (facts->kind == TakeoverVerdict::Kind::kEffect) {
        auto done = store_->Complete(scope, **taken, FactsEffect(*facts));
        if (!done.ok()) return StorageError(done.status());
        if (done->committed) {
          counters_.takeover_found_effect++;
          KeyRecord completed = abandoned;
          completed.state = RecordState::kCompleted;
          completed.response = done->response;
          return AnswerCompletedStatus(completed);
        }
        // Someone else moved the key on meanwhile: the fence below reports it.
      } else {
        owned = **taken;
      }
    }
  }
  auto fenced = store_->Fence(scope, owned);
  if (!fenced.ok()) return QueryStorageFailure(fenced.status());
  switch (fenced->outcome) {
    case FenceOutcome::kFenced:
      if (fenced->newly_fenced) counters_.fences++;
      return WithState(
          Error(404, "no_effect", "the key is fenced: no request with it was or will be executed"),
          "fenced");
    case FenceOutcome::kProcessing:
      return WithState(
          Error(409, "request_in_progress", "the request with this key is still being processed"),
          "processing");
    case FenceOutcome::kCompleted:
      return AnswerCompletedStatus(fenced->record);
    case FenceOutcome::kPendingConfirmation:
      return PendingConfirmation409(fenced->record);
    case FenceOutcome::kExpired:
      return WithState(Json(404, {{"error", "no_effect"},
                                  {"message", "the key expired without a resource"},
                                  {"final_status", fenced->record.response.status}}),
                       "expired");
  }
  return StorageError(absl::InternalError("fence: unknown outcome"));
}

Answer IdempotentHandler::HandleStatusQuery(const StatusQueryRequest& request,
                                            const ResourceLookup& lookup) {
  counters_.status_queries++;
  if (!IsValidKeyToken(request.key)) {
    counters_.rejected_bad_request++;
    return Error(400, "invalid_idempotency_key", "key: must be 1 to 255 visible ASCII characters");
  }
  const std::string tenant = request.tenant.has_value() && !request.tenant->empty()
                                 ? *request.tenant
                                 : std::string(kDefaultTenant);
  if (!IsValidKeyToken(tenant)) {
    counters_.rejected_bad_request++;
    return Error(400, "invalid_tenant", "X-Tenant-Id: must be 1 to 255 visible ASCII characters");
  }
  const bool fence = request.fence.has_value() && absl::AsciiStrToLower(*request.fence) == "true";
  const KeyScope scope{tenant, options_.operation, request.key};

  if (lookup) {
    auto found = lookup(scope);
    if (!found.ok()) return QueryStorageFailure(found.status());
    if (found->has_value()) {
      Answer a;
      a.status = 200;
      a.body = **found;
      return WithState(std::move(a), "completed");
    }
  }
  auto record = store_->Read(scope);
  if (!record.ok()) return QueryStorageFailure(record.status());
  if (!record->has_value()) {
    if (fence) return FenceAndAnswer(scope, KeyRecord{});
    return WithState(Error(404, "no_effect", "no request with this key was recorded"), "unknown");
  }
  const KeyRecord& r = **record;
  switch (r.state) {
    case RecordState::kCompleted:
      return AnswerCompletedStatus(r);
    case RecordState::kFenced:
      return WithState(
          Error(404, "no_effect", "the key is fenced: no request with it was or will be executed"),
          "fenced");
    case RecordState::kExpired:
      return WithState(Json(404, {{"error", "no_effect"},
                                  {"message", "the key expired without a resource"},
                                  {"final_status", r.response.status}}),
                       "expired");
    case RecordState::kPendingConfirmation:
      return PendingConfirmation409(r);
    case RecordState::kProcessing:
      break;
  }
  if (!r.lease_expired) {
    return WithState(WithStep(409, "request_in_progress",
                              "the request with this key is still being processed", r),
                     "processing");
  }
  if (fence) return FenceAndAnswer(scope, r);
  return WithState(WithStep(404, "no_effect",
                            "its worker's lease ran out without a local effect; a request with "
                            "the same key will take over",
                            r),
                   "abandoned");
}

}  // namespace server
}  // namespace saferetry

namespace saferetry {
namespace server {

absl::StatusOr<RecoveryStep> IdempotentHandler::RecordStep(const KeyScope& scope,
                                                           std::int64_t version,
                                                           std::string_view step,
                                                           std::optional<std::string> external_id) {
  RecoveryStep wanted;
  wanted.name = std::string(step);
  wanted.external_id =
      external_id.has_value() ? *std::move(external_id) : DefaultExternalRequestId(scope, step);
  auto recorded = store_->RecordStep(scope, version, std::move(wanted));
  if (!recorded.ok()) return recorded.status();
  if (!recorded->recorded) {
    return absl::AbortedError(absl::StrCat("step: the key was taken over or fenced after version ",
                                           version,
                                           "; this worker must not call the external system"));
  }
  counters_.steps_recorded++;
  return recorded->step;
}

absl::StatusOr<SweepReport> IdempotentHandler::RunSweep(const SweepOptions& options) {
  if (options.max_records <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_records: must be > 0, got ", options.max_records));
  }
  if (options.max_failed_recoveries <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_failed_recoveries: must be > 0, got ", options.max_failed_recoveries));
  }
  auto listed = store_->ListAbandoned(options_.operation, options.max_records);
  if (!listed.ok()) return listed.status();
  counters_.sweeps++;
  SweepReport report;
  for (const ScopedRecord& item : *listed) {
    report.examined++;
    // The fence: one conditional update picks one sweeper (or one resend).
    auto taken = store_->TakeOver(item.scope, item.record.version);
    if (!taken.ok()) return taken.status();
    if (!taken->has_value()) {
      report.skipped++;
      continue;
    }
    const std::int64_t owned = **taken;
    report.taken_over++;
    counters_.takeovers++;
    absl::StatusOr<TakeoverVerdict> verdict = TakeoverVerdict::NoEffect();
    if (options_.takeover_hook) verdict = options_.takeover_hook(item.scope, item.record);
    if (!verdict.ok()) {
      report.failed_checks++;
      auto failures = store_->RecordRecoveryFailure(item.scope, owned);
      if (!failures.ok()) return failures.status();
      if (failures->has_value() && **failures >= options.max_failed_recoveries) {
        auto marked = store_->MarkPendingConfirmation(
            item.scope, owned,
            absl::StrCat(**failures, " recoveries could not check the facts; last: ",
                         verdict.status().message()));
        if (!marked.ok()) return marked.status();
        if (*marked) {
          report.pending_confirmation++;
          counters_.moved_to_pending++;
        }
      }
      continue;
    }
    switch (verdict->kind) {
      case TakeoverVerdict::Kind::kEffect: {
        auto done = store_->Complete(item.scope, owned, FactsEffect(*verdict));
        if (!done.ok()) return done.status();
        if (done->committed) {
          report.completed++;
          counters_.takeover_found_effect++;
          counters_.swept_completed++;
        } else {
          report.skipped++;
        }
        break;
      }
      case TakeoverVerdict::Kind::kNoEffect: {
        auto fenced = store_->Fence(item.scope, owned);
        if (!fenced.ok()) return fenced.status();
        if (fenced->outcome == FenceOutcome::kFenced && fenced->newly_fenced) {
          report.fenced++;
          counters_.fences++;
          counters_.swept_fenced++;
        } else {
          report.skipped++;
        }
        break;
      }
      case TakeoverVerdict::Kind::kCannotTell: {
        auto marked = store_->MarkPendingConfirmation(item.scope, owned, verdict->reason);
        if (!marked.ok()) return marked.status();
        if (*marked) {
          report.pending_confirmation++;
          counters_.moved_to_pending++;
        } else {
          report.skipped++;
        }
        break;
      }
    }
  }
  return report;
}

absl::StatusOr<DecideResult> IdempotentHandler::Decide(std::string_view key,
                                                       std::optional<std::string> tenant,
                                                       Decision decision) {
  if (!IsValidKeyToken(key)) {
    return absl::InvalidArgumentError("key: must be 1 to 255 visible ASCII characters");
  }
  const std::string t =
      tenant.has_value() && !tenant->empty() ? *std::move(tenant) : std::string(kDefaultTenant);
  if (!IsValidKeyToken(t)) {
    return absl::InvalidArgumentError("tenant: must be 1 to 255 visible ASCII characters");
  }
  auto decided =
      store_->Decide(KeyScope{t, options_.operation, std::string(key)}, std::move(decision));
  if (decided.ok() && decided->outcome == DecideOutcome::kRecorded) counters_.decisions++;
  return decided;
}

}  // namespace server
}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/internal/call_session.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace saferetry {
namespace internal {
namespace {

// How long past its timeout a resolve keeps its claim: a killed reconciler
// blocks the intent for about this long.
constexpr std::chrono::seconds kResolveClaimGrace{2};

CallResult Unresolved(std::string_view key, StopReason reason, absl::Status status) {
  CallResult r;
  r.outcome = Outcome::kUnknown;
  r.stop_reason = reason;
  r.status = std::move(status);
  r.idempotency_key = std::string(key);
  return r;
}

absl::Status Prefixed(std::string_view prefix, const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), std::string(prefix) + std::string(s.message()));
}

}  // namespace

CallResult CallSession::EndEarly(CallResult result) const {
  if (options_.listener != nullptr) options_.listener->OnFinish(result);
  return result;
}

std::optional<CallResult> CallSession::Begin(KeyFingerprints& fingerprints,
                                            UnsentRecords& unsent, TimePoint start) {
  absl::StatusOr<PreparedCall> prepared =
      PrepareCall(client_, fingerprints, *request_, options_, start);
  // Bad input never reaches the listener: nothing started.
  if (!prepared.ok()) return InvalidCall(prepared.status());
  call_ = *std::move(prepared);
  if (std::optional<CallResult> early = JournalBegin(client_, call_, *request_, start, &unsent)) {
    return EndEarly(*std::move(early));
  }
  return std::nullopt;
}

std::optional<CallResult> CallSession::BeginResolve(std::string_view key,
                                                    const ResolveOptions& options,
                                                    TimePoint start) {
  resolve_ = true;
  if (client_.journal == nullptr) {
    return Unresolved(key, StopReason::kInvalidArgument,
                      absl::InvalidArgumentError("journal: the client has none"));
  }
  if (absl::Status s = ValidateResolveOptions(options); !s.ok()) {
    return Unresolved(key, StopReason::kInvalidArgument, s);
  }
  IntentJournal& journal = *client_.journal;
  absl::StatusOr<Intent> intent = journal.Get(key);
  if (!intent.ok()) {
    const bool missing = intent.status().code() == absl::StatusCode::kNotFound ||
                         intent.status().code() == absl::StatusCode::kInvalidArgument;
    return Unresolved(key, missing ? StopReason::kInvalidArgument : StopReason::kJournalUnavailable,
                      intent.status());
  }
  if (IsResolved(intent->state)) return StoredOutcome(*intent);

  resolve_query_.url_template = options.status_url_template.empty() ? intent->status_url_template
                                                                    : options.status_url_template;
  resolve_query_.fence_when_giving_up = options.fence;
  if (resolve_query_.url_template.empty()) {
    return Unresolved(key, StopReason::kInvalidArgument,
                      absl::InvalidArgumentError(
                          "resolve.status_url_template: the intent has none; give one"));
  }
  if (absl::Status s = ValidateStatusQuery(resolve_query_); !s.ok()) {
    return Unresolved(key, StopReason::kInvalidArgument, Prefixed("resolve.", s));
  }

  const std::string owner =
      options.owner.empty() ? "reconciler:" + journal.Owner() : options.owner;
  absl::StatusOr<bool> claimed =
      journal.Claim(key, owner, client_.clock->WallNow() + options.timeout + kResolveClaimGrace);
  if (!claimed.ok()) return Unresolved(key, StopReason::kJournalUnavailable, claimed.status());
  if (!*claimed) {
    return Unresolved(key, StopReason::kAmbiguousUnresolved,
                      absl::FailedPreconditionError(
                          "idempotency_key: another owner holds the intent, or it was resolved"));
  }

  // The request as journaled, with the caller's headers (the credentials
  // the journal never stores); its body only when the journal kept it.
  const bool may_resend = options.resend_if_server_deduplicates && intent->body.has_value();
  Request original{intent->method, intent->url, intent->headers,
                   may_resend ? *intent->body : std::string()};
  original.headers.insert(original.headers.end(), options.headers.begin(), options.headers.end());
  resolve_request_.emplace(std::move(original));
  request_ = &*resolve_request_;

  CallPolicy& policy = call_.policy;
  // Status queries only, unless the caller allows one same-key resend to a
  // deduplicating server: the intent's attempt may have taken effect.
  policy.start_with_status_query = true;
  policy.max_attempts = may_resend ? 1 : 0;
  policy.max_status_queries = std::min(options.max_status_queries, kMaxStatusQueriesHardCap);
  policy.poll_backoff = options.poll_backoff;
  policy.deadline = Deadline::After(start, options.timeout);
  policy.traits.idempotent = IsIdempotent(*request_);
  policy.traits.safe = IsSafeMethod(request_->method);
  policy.traits.keyed = true;
  policy.has_status_query = true;
  policy.fence_when_giving_up = options.fence;
  policy.server_deduplicates = may_resend;
  policy.earlier_attempt_may_have_taken_effect = true;
  // The client's policy names the headers, reads the hints and, with its
  // response predicate, the answers.
  call_.retry = client_.policy.get();
  policy.response_predicate = client_.policy->response_predicate();
  policy.response_predicate_max_body_bytes =
      client_.policy->options().response_predicate.max_body_bytes;
  call_.status_url_template = resolve_query_.url_template;
  AssignCircuitBreakers(client_, *request_, call_.status_url_template, policy);

  call_.key = std::string(key);
  const RetryPolicyOptions& names = client_.policy->options();
  const bool key_in_request = FindHeader(request_->headers, names.idempotency_header).has_value();
  BuildExtraHeaders(names, key_in_request, call_);
  call_.journal = &journal;
  call_.attempt_offset = intent->attempt;
  call_.journal_owner = owner;
  return std::nullopt;
}

std::optional<CallAction> CallSession::BeforeAttempt(CallStateMachine& machine,
                                                     const CallAction& action,
                                                     AttemptOptions& ao) {
  StampAttemptHeaders(call_, action);
  if (options_.listener != nullptr) options_.listener->OnAttemptStart(action.number, false);
  ao.timeout = action.timeout;
  ao.extra_headers = &call_.extra;
  const TimePoint t0 = client_.clock->Now();
  if (std::optional<TransportResult> unmarked = JournalBeforeSend(call_, action.number)) {
    // Not journaled, not sent: the machine sees an attempt that never left.
    return AfterAttempt(machine, action.attempt_id, *std::move(unmarked), t0);
  }
  return std::nullopt;
}

CallAction CallSession::AfterAttempt(CallStateMachine& machine, std::uint32_t attempt_id,
                                     TransportResult tr, TimePoint t0) {
  Clock& clock = *client_.clock;
  const TimePoint t1 = clock.Now();
  AttemptEvidence ev = EvidenceOf(tr, t0, t1, clock.WallNow(), call_.retry->options());
  CallAction next = machine.OnAttemptDone(attempt_id, std::move(ev), std::move(tr.response), t1);
  if (options_.listener != nullptr && !machine.result().evidence.empty()) {
    options_.listener->OnAttemptEnd(machine.result().evidence.back());
  }
  return next;
}

std::optional<CallAction> CallSession::BeforeStatusQuery(CallStateMachine& machine,
                                                         const CallAction& action,
                                                         const Request** query,
                                                         AttemptOptions& ao) {
  if (options_.listener != nullptr) options_.listener->OnAttemptStart(action.number, true);
  if (call_.use_callback) {
    const StatusQuery& spec = call_.retry->options().status_query;
    // A callback answers synchronously, on the driver's thread.
    Clock& clock = *client_.clock;
    const TimePoint t0 = clock.Now();
    StatusQueryReply reply = spec.callback(*call_.key, action.timeout);
    const TimePoint t1 = clock.Now();
    AttemptEvidence ev = EvidenceOf(reply.result, t0, t1, clock.WallNow(), call_.retry->options());
    CallAction next =
        machine.OnStatusAnswer(reply.answer, std::move(ev), std::move(reply.result.response), t1);
    if (options_.listener != nullptr) {
      options_.listener->OnAttemptEnd(machine.result().evidence.back());
    }
    return next;
  }
  if (!query_request_.has_value()) query_request_ = StatusQueryRequest(call_, *request_);
  query_extra_ = StatusQueryHeaders(call_, action);
  *query = &*query_request_;
  ao.timeout = action.timeout;
  ao.extra_headers = &query_extra_;
  return std::nullopt;
}

CallAction CallSession::AfterStatusQuery(CallStateMachine& machine, TransportResult tr,
                                         TimePoint t0) {
  Clock& clock = *client_.clock;
  const TimePoint t1 = clock.Now();
  AttemptEvidence ev = EvidenceOf(tr, t0, t1, clock.WallNow(), call_.retry->options());
  const StatusAnswer answer = MapStatusAnswer(tr);
  CallAction next = machine.OnStatusAnswer(answer, std::move(ev), std::move(tr.response), t1);
  if (options_.listener != nullptr) {
    options_.listener->OnAttemptEnd(machine.result().evidence.back());
  }
  return next;
}

void CallSession::OnWait(const CallAction& action) const {
  if (options_.listener != nullptr) {
    options_.listener->OnWaitScheduled(action.delay, action.delay_from_server_hint);
  }
}

CallResult CallSession::Finish(CallStateMachine& machine) {
  CallResult result = machine.TakeResult();
  if (resolve_) return FinishResolve(std::move(result));
  JournalFinish(call_, result);
  result.idempotency_key = std::move(call_.key);
  if (options_.listener != nullptr) options_.listener->OnFinish(result);
  return result;
}

CallResult CallSession::FinishResolve(CallResult result) {
  IntentJournal& journal = *call_.journal;
  const std::string& key = *call_.key;
  result.idempotency_key = key;
  const IntentState state = result.outcome == Outcome::kSucceeded ? IntentState::kSucceeded
                            : result.outcome == Outcome::kFailed  ? IntentState::kFailed
                                                                  : IntentState::kUnknown;
  absl::Status written = journal.Finish(key, state, SummaryOf(result));
  if (written.code() == absl::StatusCode::kFailedPrecondition) {
    // Resolved meanwhile by the call itself: the first resolution stands.
    absl::StatusOr<Intent> now_stored = journal.Get(key);
    if (now_stored.ok() && IsResolved(now_stored->state)) {
      (void)journal.Release(key, call_.journal_owner);
      return StoredOutcome(*now_stored);
    }
  }
  if (!written.ok()) {
    result.status = absl::Status(written.code(), absl::StrCat("journal: ", written.message()));
  }
  (void)journal.Release(key, call_.journal_owner);
  return result;
}

}  // namespace internal
}  // namespace saferetry

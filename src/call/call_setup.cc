// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "call/call_setup.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/status_internal.h"
#include "core/server_hints_internal.h"
#include "saferetry/server_hints.h"
#include "saferetry/status_query.h"

namespace saferetry {

// The per-call fields only: the policy was validated when it was built.
absl::Status ValidateCallOptions(const CallOptions& options) {
  if (!options.deadline.has_value() && options.timeout.has_value() &&
      *options.timeout <= Duration::zero()) {
    return absl::InvalidArgumentError("call.timeout: must be > 0");
  }
  if (!options.idempotency_key.empty()) {
    absl::Status s = ValidateIdempotencyKey(options.idempotency_key);
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat("call.", s.message()));
  }
  if (!options.status_url.empty()) {
    StatusQuery q;
    q.url_template = options.status_url;
    absl::Status s = ValidateStatusQuery(q);
    if (!s.ok()) {
      absl::string_view message = s.message();
      absl::ConsumePrefix(&message, "status_query.url_template: ");
      return absl::Status(s.code(), absl::StrCat("call.status_url: ", message));
    }
  }
  return absl::OkStatus();
}

namespace internal {
namespace {

// Unbounded calls hold their claim for a day at most: a killed process must
// not keep its intents from reconciliation for longer.
constexpr Duration kMaxJournalDeadline = std::chrono::hours(24);
constexpr std::chrono::seconds kContinueClaimGrace{2};

CallResult JournalFailure(Outcome outcome, StopReason reason, absl::Status status) {
  CallResult r;
  r.outcome = outcome;
  r.stop_reason = reason;
  r.status = std::move(status);
  return r;
}

absl::Status JournalError(const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat("journal: ", s.message()));
}

}  // namespace

CallResult StoredOutcome(const Intent& intent) {
  CallResult r;
  r.outcome = intent.state == IntentState::kSucceeded ? Outcome::kSucceeded : Outcome::kFailed;
  r.stop_reason =
      intent.state == IntentState::kSucceeded ? StopReason::kSuccess : StopReason::kPermanentError;
  for (int i = 0; i < kStopReasonCount; ++i) {
    if (StopReasonName(static_cast<StopReason>(i)) == intent.summary.stop_reason) {
      r.stop_reason = static_cast<StopReason>(i);
    }
  }
  if (intent.summary.resolved_by == ResolvedByName(ResolvedBy::kStatusQuery)) {
    r.resolved_by = ResolvedBy::kStatusQuery;
    r.resolved_by_status_query = true;
  } else if (intent.summary.resolved_by == ResolvedByName(ResolvedBy::kResponse)) {
    r.resolved_by = ResolvedBy::kResponse;
  }
  r.idempotency_key = intent.key;
  return r;
}

IntentSummary SummaryOf(const CallResult& result) {
  IntentSummary summary;
  if (result.last_response.has_value()) {
    summary.http_status = result.last_response->status_code;
  } else if (!result.evidence.empty() && result.evidence.back().http_status.has_value()) {
    // Unresolved: the last answer seen, for people.
    summary.http_status = *result.evidence.back().http_status;
  }
  summary.stop_reason = std::string(StopReasonName(result.stop_reason));
  summary.resolved_by = std::string(ResolvedByName(result.resolved_by));
  if (!result.status.ok()) {
    summary.last_error = result.status.ToString();
  } else if (!result.last_transport_status.ok()) {
    summary.last_error = result.last_transport_status.ToString();
  }
  return summary;
}

void UnsentRecords::Add(std::string_view key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (keys_.size() >= capacity_) keys_.pop_front();
  keys_.emplace_back(key);
}

bool UnsentRecords::Take(std::string_view key) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = keys_.begin(); it != keys_.end(); ++it) {
    if (*it == key) {
      keys_.erase(it);
      return true;
    }
  }
  return false;
}

std::optional<CallResult> RecordIntent(const ClientOptions& client, PreparedCall& call,
                                       const Request& request, TimePoint start,
                                       UnsentRecords* unsent) {
  IntentJournal& journal = *client.journal;
  const WallTime now = client.clock->WallNow();
  const Duration remaining =
      std::min<Duration>(call.policy.deadline.Remaining(start), kMaxJournalDeadline);
  const WallTime deadline = now + remaining;
  const std::string query_template =
      call.use_callback ? std::string() : std::string(call.status_url_template());
  Intent intent = MakeIntent(request, call.key, query_template, now, deadline);
  // Recorded with its first attempt marked, in one commit: one commit before
  // the first byte instead of two. A call that then sends nothing writes
  // FAILED at its end; a crash before the send leaves SENT(1), which the
  // reconciler asks about (never FAILED on a guess).
  intent.attempt = 1;
  absl::StatusOr<RecordResult> recorded = journal.Record(intent);
  if (!recorded.ok()) {
    const absl::Status& s = recorded.status();
    if (s.code() == absl::StatusCode::kAlreadyExists) {
      // The durable "same key, other body" guard.
      return InvalidCall(absl::InvalidArgumentError(s.message()));
    }
    if (s.code() == absl::StatusCode::kInvalidArgument) return InvalidCall(s);
    CallResult r =
        JournalFailure(Outcome::kFailed, StopReason::kJournalUnavailable, JournalError(s));
    r.idempotency_key = call.key;  // nothing was sent with it
    // The row may exist (a commit whose answer was lost): this process knows
    // it sent nothing, so its next call of the key may take the row as its own.
    if (unsent != nullptr) unsent->Add(call.key);
    return r;
  }
  const Intent& stored = recorded->intent;
  if (IsResolved(stored.state)) return StoredOutcome(stored);
  const std::string owner = journal.Owner();
  // This process's own row whose record answer was lost: attempt 1 was
  // marked by that record and never sent.
  const bool own_unsent = !recorded->created && stored.state == IntentState::kSent &&
                          stored.attempt == 1 && stored.claim_owner == owner && unsent != nullptr &&
                          unsent->Take(stored.key);
  if (own_unsent) {
    absl::StatusOr<bool> claimed = journal.Claim(stored.key, owner, deadline + kContinueClaimGrace);
    if (!claimed.ok() || !*claimed) {
      // Not confirmed again: the next call may try once more. Meanwhile
      // another owner (a reconciler) may hold it: not FAILED.
      if (unsent != nullptr) unsent->Add(stored.key);
      CallResult r = JournalFailure(
          Outcome::kUnknown,
          claimed.ok() ? StopReason::kAmbiguousUnresolved : StopReason::kJournalUnavailable,
          claimed.ok() ? absl::FailedPreconditionError(
                             "idempotency_key: another process is working on this intent")
                       : JournalError(claimed.status()));
      r.idempotency_key = stored.key;
      return r;
    }
    call.extra().journal_owner = owner;
    call.extra().first_attempt_marked = true;
    call.extra().attempt_offset = 0;
  } else if (!recorded->created) {
    // An intent an earlier call (perhaps in a process since killed) left
    // unresolved. If an attempt may have left, only a status query or a
    // deduplicated same-key resend may follow, never a plain resend.
    if (stored.attempt > 0 && !call.retry->options().server_deduplicates) {
      CallResult r = JournalFailure(
          Outcome::kUnknown, StopReason::kAmbiguousUnresolved,
          absl::FailedPreconditionError(absl::StrCat(
              "idempotency_key: an earlier attempt of this intent may have taken effect (state ",
              std::string(IntentStateName(stored.state)), "); resolve it with Client::Resolve")));
      r.idempotency_key = stored.key;
      return r;
    }
    absl::StatusOr<bool> claimed = journal.Claim(stored.key, owner, deadline + kContinueClaimGrace);
    if (!claimed.ok() || !*claimed) {
      const bool maybe_sent = stored.attempt > 0;
      CallResult r = JournalFailure(
          maybe_sent ? Outcome::kUnknown : Outcome::kFailed,
          claimed.ok() ? StopReason::kAmbiguousUnresolved : StopReason::kJournalUnavailable,
          claimed.ok() ? absl::FailedPreconditionError(
                             "idempotency_key: another process is working on this intent")
                       : JournalError(claimed.status()));
      if (claimed.ok() && !maybe_sent) r.outcome = Outcome::kUnknown;
      r.idempotency_key = stored.key;
      return r;
    }
    call.extra().journal_owner = owner;
    // The earlier call's attempt may have taken effect: this one starts
    // with that doubt, so it can end FAILED only on a definite answer.
    call.policy.earlier_attempt_may_have_taken_effect = stored.attempt > 0;
    call.extra().attempt_offset = stored.attempt;
  } else {
    call.extra().journal_owner = stored.claim_owner;
    // A journal that predates the one-commit record returns PENDING: attempt
    // 1 is then marked before its send, as every later one is.
    call.extra().first_attempt_marked = stored.state == IntentState::kSent && stored.attempt == 1;
    call.extra().attempt_offset = 0;
  }
  call.extra().journal = &journal;
  return std::nullopt;
}

std::optional<TransportResult> MarkAttemptSent(PreparedCall& call, int number) {
  IntentJournal* const journal = call.journal();
  const PreparedCall::Extras& extras = *call.extras;
  if (number == 1 && extras.first_attempt_marked) return std::nullopt;  // marked by the record
  absl::Status s = journal->MarkSent(call.key, extras.attempt_offset + number);
  if (!s.ok()) {
    // Not marked, not sent: PENDING must keep proving that nothing left.
    TransportResult tr;
    tr.delivery = Delivery::kNotSent;
    tr.status = absl::UnavailableError(absl::StrCat("journal: ", s.message()));
    return tr;
  }
  return std::nullopt;
}

void WriteOutcome(PreparedCall& call, const CallResult& result) {
  IntentJournal* const journal = call.journal();
  const IntentState state = result.outcome == Outcome::kSucceeded ? IntentState::kSucceeded
                            : result.outcome == Outcome::kFailed  ? IntentState::kFailed
                                                                  : IntentState::kUnknown;
  // Either may fail (storage gone): the intent then stays unresolved and the
  // reconciler settles it; the caller's result stands.
  (void)journal->Finish(call.key, state, SummaryOf(result));
  (void)journal->Release(call.key, call.journal_owner());
  call.extras->journal = nullptr;
}

CallResult InvalidCall(absl::Status status) {
  CallResult r;
  r.outcome = Outcome::kFailed;
  r.stop_reason = StopReason::kInvalidArgument;
  r.status = std::move(status);
  return r;
}

void FillEvidence(const TransportResult& tr, TimePoint start, TimePoint end, Clock& clock,
                  const RetryPolicyOptions& options, AttemptEvidence& ev) {
  ev.start = start;
  ev.end = end;
  ev.delivery = tr.delivery;
  ev.transport_status = tr.status;
  ev.timings = tr.timings;
  if (tr.response.has_value()) {
    ev.http_status = tr.response->status_code;
    std::optional<std::string_view> id;
    ExtractServerHintsInto(tr.response->headers, clock, options.hints, ev.hints,
                           options.request_id_header, id);
    if (id.has_value()) ev.downstream_request_id.assign(id->data(), id->size());
  }
}

bool MayHedge(const HedgingOptions& hedging, const RequestTraits& traits,
              bool server_deduplicates) {
  return hedging.enabled && hedging.max_hedges > 0 &&
         (traits.safe || traits.idempotent || (traits.keyed && server_deduplicates));
}

void AssignCircuitBreakers(const ClientOptions& client, const Request& request,
                           std::string_view query_template, CallPolicy& policy) {
  if (client.circuit_breakers == nullptr) return;
  policy.circuit_breaker = client.circuit_breakers->ForUrl(request.url);
  if (policy.has_status_query && !query_template.empty()) {
    // A template whose host holds the placeholder has no fixed host: its
    // queries count against the request's host.
    const std::string query_key = CircuitBreakerKey(query_template);
    if (!query_key.empty() && query_key.find('{') == std::string::npos) {
      CircuitBreaker* query_breaker = client.circuit_breakers->ForKey(query_key);
      if (query_breaker != policy.circuit_breaker) {
        policy.status_query_circuit_breaker = query_breaker;
      }
    }
  }
}

absl::Status PrepareCall(const ClientOptions& client, KeyFingerprints& fingerprints,
                         const Request& request, const CallOptions& options, TimePoint start,
                         PreparedCall& call, RequestScan* scan) {
  // The policy was validated when it was built: nothing of it is checked
  // here, and `call` was built with its part for the machine.
  const RetryPolicy& retry = *call.retry;
  const RetryPolicyOptions& p = retry.options();
  // Each status lives in its own test: an OK one is never assigned over.
  if (absl::Status s = ValidateRequest(request); !s.ok()) return s;
  if (absl::Status s = ValidateCallOptions(options); !s.ok()) return s;
  if (!request.headers.empty()) *scan = ScanRequestHeaders(request.headers, p.idempotency_header);
  if (!options.idempotency_key.empty() && p.key_mode == KeyMode::kNever) {
    return absl::InvalidArgumentError(
        "call.idempotency_key: set while the policy's key_mode is kNever");
  }

  // One key per logical call: supplied in the options, already present in
  // the request's headers, or minted here.
  const bool idempotent = IsIdempotent(request);
  std::string& key = call.key;  // empty: none
  bool key_in_request = false;
  bool key_minted = false;
  if (p.key_mode != KeyMode::kNever) {
    if (scan->key_header > 0) {
      std::string_view v = request.headers[scan->key_header - 1].second;
      if (p.key_form == KeyForm::kQuotedString && v.size() >= 2 && v.front() == '"' &&
          v.back() == '"') {
        v = v.substr(1, v.size() - 2);
      }
      if (!options.idempotency_key.empty() && options.idempotency_key != v) {
        return absl::InvalidArgumentError(
            "call.idempotency_key: differs from the request's own idempotency header");
      }
      if (absl::Status s = ValidateIdempotencyKey(v); !s.ok()) {
        return Prefixed("request.headers.", s);
      }
      key = std::string(v);
      key_in_request = true;
    } else if (!options.idempotency_key.empty()) {
      key = options.idempotency_key;
    } else if (p.key_mode == KeyMode::kAlways || (p.key_mode == KeyMode::kAuto && !idempotent)) {
      if (client.key_source == ClientOptions::KeySource::kRandomSeam) {
        key = GenerateUuidV4(*client.random);
      } else {
        absl::StatusOr<std::string> minted = MintIdempotencyKey();
        // Could not even start: nothing is sent without a key.
        if (!minted.ok()) return Prefixed("idempotency key: ", minted.status());
        key = *std::move(minted);
      }
      key_minted = true;
    }
  }
  // A freshly minted key cannot have been used before; only a caller's key
  // can be reused for another request by mistake.
  if (!key.empty() && !key_minted) {
    if (absl::Status s =
            fingerprints.CheckAndRemember(key, request.method, request.url, request.body);
        !s.ok()) {
      return s;
    }
  }

  // The call's status URL (its endpoint's) replaces the policy's template
  // and callback; without one, the policy's (`has_status_query`, built once).
  const bool own_url = !options.status_url.empty();
  call.status_url = own_url ? &options.status_url : &p.status_query.url_template;
  const bool has_query = own_url || retry.has_status_query();

  // What the policy decides was written once, when it was built, and
  // copied into `call` with it: then what this call decides.
  CallPolicy& policy = call.policy;
  policy.deadline =
      options.deadline.value_or(Deadline::After(start, options.timeout.value_or(p.timeout)));
  policy.traits.idempotent = idempotent;
  policy.traits.safe = IsSafeMethod(request.method);
  policy.traits.keyed = !key.empty();
  policy.has_status_query = !key.empty() && has_query;
  // A call's own status URL wins over the policy's callback.
  call.use_callback = !own_url && static_cast<bool>(p.status_query.callback);
  if (call.use_callback) policy.fence_when_giving_up = false;
  policy.key_minted = key_minted;
  policy.hedging = MayHedge(p.hedging, policy.traits, p.server_deduplicates);
  if (client.circuit_breakers != nullptr) {
    AssignCircuitBreakers(client, request,
                          call.use_callback ? std::string_view() : call.status_url_template(),
                          policy);
  }
  BuildExtraHeaders(p, key_in_request, call);
  return absl::OkStatus();
}

namespace {

// The key header, then the deadline header with `timeout` (`DeadlineHeaderMillis`).
void StampCommon(const PreparedCall& call, Duration timeout, SendHeaders& out) {
  std::size_t n = 0;
  const RetryPolicyOptions& names = call.retry->options();
  if (call.send_key_header) {
    const std::string_view quoted = call.quoted_key();
    out.refs[n++] = {names.idempotency_header,
                     quoted.empty() ? std::string_view(call.key) : quoted};
  }
  if (call.send_deadline_header) {
    char* const begin = out.deadline_value.data();
    const std::to_chars_result r =
        std::to_chars(begin, begin + out.deadline_value.size(), DeadlineHeaderMillis(timeout));
    out.refs[n++] = {names.deadline_header,
                     std::string_view(begin, static_cast<std::size_t>(r.ptr - begin))};
  }
  out.count = n;
}

}  // namespace

void StampAttemptHeaders(const PreparedCall& call, const CallAction& action, SendHeaders& out) {
  // The attempt's own timeout is what the server may spend.
  StampCommon(call, action.timeout, out);
  if (call.send_attempt_header) {
    constexpr std::string_view kAttempt = "attempt=";
    constexpr std::string_view kMax = "; max=";
    char* const begin = out.attempt_value.data();
    char* const end = begin + out.attempt_value.size();
    std::memcpy(begin, kAttempt.data(), kAttempt.size());
    char* p = std::to_chars(begin + kAttempt.size(), end, action.number).ptr;
    std::memcpy(p, kMax.data(), kMax.size());
    p = std::to_chars(p + kMax.size(), end, call.policy.max_attempts).ptr;
    out.refs[out.count++] = {call.retry->options().attempt_header,
                             std::string_view(begin, static_cast<std::size_t>(p - begin))};
  }
}

void StampStatusQueryHeaders(const PreparedCall& call, const CallAction& action, SendHeaders& out) {
  StampCommon(call, action.timeout, out);
  if (action.fence) out.refs[out.count++] = {kFenceHeader, "true"};
}

Request StatusQueryRequest(const PreparedCall& call, const Request& original) {
  StatusQuery query;
  query.url_template = std::string(call.status_url_template());
  return BuildStatusQueryRequest(query, original, call.key);
}

}  // namespace internal
}  // namespace saferetry

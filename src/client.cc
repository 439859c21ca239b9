// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The blocking driver: runs a CallStateMachine, performing its actions with
// the transport and the clock.

#include "saferetry/client.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "saferetry/internal/call_setup.h"
#include "saferetry/settlement.h"

namespace saferetry {
namespace {

absl::Status Prefixed(std::string_view prefix, const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), std::string(prefix) + std::string(s.message()));
}

}  // namespace

absl::Status ValidateCallOptions(const CallOptions& options) {
  if (options.max_attempts < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("call.max_attempts: must be >= 1, got ", options.max_attempts));
  }
  if (options.max_status_queries < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "call.max_status_queries: must be >= 0 (0: derived from the deadline), got ",
        options.max_status_queries));
  }
  if (!options.deadline.has_value() && options.timeout <= Duration::zero()) {
    return absl::InvalidArgumentError("call.timeout: must be > 0");
  }
  absl::Status s = ValidateBackoffParams(options.backoff);
  if (!s.ok()) return Prefixed("call.backoff.", s);
  s = ValidateBackoffParams(options.poll_backoff);
  if (!s.ok()) return Prefixed("call.poll_backoff.", s);
  s = ValidateDeadlineOptions(options.deadline_options);
  if (!s.ok()) return Prefixed("call.deadline_options.", s);
  if (!options.idempotency_key.empty()) {
    if (options.key_mode == KeyMode::kNever) {
      return absl::InvalidArgumentError(
          "call.idempotency_key: set while call.key_mode is kNever");
    }
    s = ValidateIdempotencyKey(options.idempotency_key);
    if (!s.ok()) return Prefixed("call.", s);
  }
  if (options.status_query.callback || !options.status_query.url_template.empty()) {
    s = ValidateStatusQuery(options.status_query);
    if (!s.ok()) return Prefixed("call.", s);
  }
  return absl::OkStatus();
}

namespace internal {

absl::Status CompleteClientOptions(ClientOptions& options) {
  if (options.clock == nullptr) options.clock = SystemClock();
  if (options.random == nullptr) options.random = DefaultRandom();
  if (options.classifier == nullptr) options.classifier = DefaultClassifierInstance();
  if (options.budget == nullptr) {
    auto budget = RatioBudget::Create(RatioBudgetOptions{});
    if (!budget.ok()) return budget.status();
    options.budget = *std::move(budget);
  }
  if (options.status_query_budget == nullptr) {
    auto allowance = RatioBudget::Create(DefaultStatusQueryAllowance());
    if (!allowance.ok()) return allowance.status();
    options.status_query_budget = *std::move(allowance);
  }
  absl::Status s = ValidateHeader({options.idempotency_header, "k"}, "idempotency_header");
  if (!s.ok()) return s;
  if (!options.deadline_header.empty()) {
    s = ValidateHeader({options.deadline_header, "0"}, "deadline_header");
    if (!s.ok()) return s;
  }
  if (options.hints.max_retry_after <= Duration::zero()) {
    return absl::InvalidArgumentError("hints.max_retry_after: must be > 0");
  }
  if (!options.attempt_header.empty()) {
    s = ValidateHeader({options.attempt_header, "0"}, "attempt_header");
    if (!s.ok()) return s;
  }
  if (!options.request_id_header.empty()) {
    s = ValidateHeader({options.request_id_header, "0"}, "request_id_header");
    if (!s.ok()) return s;
  }
  if (!options.hints.do_not_retry_header.empty()) {
    s = ValidateHeader({options.hints.do_not_retry_header, "x"}, "hints.do_not_retry_header");
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace internal

absl::StatusOr<std::unique_ptr<Client>> Client::Create(ClientOptions options) {
  if (options.transport == nullptr) {
    return absl::InvalidArgumentError("transport: required");
  }
  if (absl::Status s = internal::CompleteClientOptions(options); !s.ok()) return s;
  return std::unique_ptr<Client>(new Client(std::move(options)));
}

Client::Client(ClientOptions options)
    : options_(std::move(options)), fingerprints_(options_.fingerprint_capacity) {}

CallResult Client::Execute(const Request& request, const CallOptions& options) {
  Clock& clock = *options_.clock;
  const TimePoint start = clock.Now();
  absl::StatusOr<internal::PreparedCall> prepared =
      internal::PrepareCall(options_, fingerprints_, request, options, start);
  if (!prepared.ok()) return internal::InvalidCall(prepared.status());
  internal::PreparedCall& call = *prepared;
  if (std::optional<CallResult> early =
          internal::JournalBegin(options_, call, request, options, start)) {
    if (options.listener != nullptr) options.listener->OnFinish(*early);
    return *std::move(early);
  }

  CallStateMachine machine(call.policy, options_.budget.get(), options_.classifier.get(),
                           options_.random.get(), options.cancellation,
                           options_.status_query_budget.get());
  std::optional<Request> query_request;
  CallListener* listener = options.listener;

  CallAction action = machine.Start(start);
  while (action.kind != CallAction::Kind::kFinish) {
    switch (action.kind) {
      case CallAction::Kind::kSendAttempt: {
        internal::StampAttemptHeaders(call, action);
        if (listener != nullptr) listener->OnAttemptStart(action.number, false);
        AttemptOptions ao;
        ao.timeout = action.timeout;
        ao.extra_headers = &call.extra;
        ao.cancellation = options.cancellation;
        const TimePoint t0 = clock.Now();
        std::optional<TransportResult> unmarked = internal::JournalBeforeSend(call, action.number);
        TransportResult tr =
            unmarked.has_value() ? *std::move(unmarked) : options_.transport->Send(request, ao);
        const TimePoint t1 = clock.Now();
        AttemptEvidence ev = internal::EvidenceOf(tr, t0, t1, clock.WallNow(), options_);
        action = machine.OnAttemptDone(std::move(ev), std::move(tr.response), t1);
        if (listener != nullptr) listener->OnAttemptEnd(machine.result().evidence.back());
        break;
      }
      case CallAction::Kind::kSendStatusQuery: {
        if (listener != nullptr) listener->OnAttemptStart(action.number, true);
        StatusQueryReply reply;
        const TimePoint t0 = clock.Now();
        if (options.status_query.callback) {
          reply = options.status_query.callback(*call.key, action.timeout);
        } else {
          if (!query_request.has_value()) {
            query_request = internal::StatusQueryRequest(call, options.status_query, request);
          }
          const Headers query_extra = internal::StatusQueryHeaders(call, action);
          AttemptOptions ao;
          ao.timeout = action.timeout;
          ao.extra_headers = &query_extra;
          ao.cancellation = options.cancellation;
          reply.result = options_.transport->Send(*query_request, ao);
          reply.answer = MapStatusAnswer(reply.result);
        }
        const TimePoint t1 = clock.Now();
        AttemptEvidence ev = internal::EvidenceOf(reply.result, t0, t1, clock.WallNow(), options_);
        action = machine.OnStatusAnswer(reply.answer, std::move(ev), std::move(reply.result.response),
                                        t1);
        if (listener != nullptr) listener->OnAttemptEnd(machine.result().evidence.back());
        break;
      }
      case CallAction::Kind::kWait: {
        if (listener != nullptr) {
          listener->OnWaitScheduled(action.delay, action.delay_from_server_hint);
        }
        if (options.cancellation != nullptr) {
          clock.SleepFor(action.delay, *options.cancellation);
        } else {
          clock.SleepFor(action.delay);
        }
        action = machine.OnWaitOver(clock.Now());
        break;
      }
      case CallAction::Kind::kNone:
      case CallAction::Kind::kFinish:
        // One attempt at a time: the machine never waits on another here.
        break;
    }
  }

  CallResult result = machine.TakeResult();
  internal::JournalFinish(call, result);
  result.idempotency_key = std::move(call.key);
  if (listener != nullptr) listener->OnFinish(result);
  return result;
}

}  // namespace saferetry

namespace saferetry {
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

}  // namespace

absl::Status ValidateResolveOptions(const ResolveOptions& options) {
  if (options.timeout <= Duration::zero()) {
    return absl::InvalidArgumentError("resolve.timeout: must be > 0");
  }
  if (options.max_status_queries < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "resolve.max_status_queries: must be >= 1, got ", options.max_status_queries));
  }
  absl::Status s = ValidateBackoffParams(options.poll_backoff);
  if (!s.ok()) return Prefixed("resolve.poll_backoff.", s);
  for (const Header& h : options.headers) {
    s = ValidateHeader(h, "resolve.headers");
    if (!s.ok()) return s;
  }
  if (!options.status_url_template.empty()) {
    StatusQuery q;
    q.url_template = options.status_url_template;
    s = ValidateStatusQuery(q);
    if (!s.ok()) return Prefixed("resolve.", s);
  }
  return absl::OkStatus();
}

CallResult Client::Resolve(std::string_view key, const ResolveOptions& options) {
  if (options_.journal == nullptr) {
    return Unresolved(key, StopReason::kInvalidArgument,
                      absl::InvalidArgumentError("journal: the client has none"));
  }
  if (absl::Status s = ValidateResolveOptions(options); !s.ok()) {
    return Unresolved(key, StopReason::kInvalidArgument, s);
  }
  IntentJournal& journal = *options_.journal;
  Clock& clock = *options_.clock;
  const TimePoint start = clock.Now();

  absl::StatusOr<Intent> intent = journal.Get(key);
  if (!intent.ok()) {
    const bool missing = intent.status().code() == absl::StatusCode::kNotFound ||
                         intent.status().code() == absl::StatusCode::kInvalidArgument;
    return Unresolved(key, missing ? StopReason::kInvalidArgument : StopReason::kJournalUnavailable,
                      intent.status());
  }
  if (IsResolved(intent->state)) return internal::StoredOutcome(*intent);

  StatusQuery query_spec;
  query_spec.url_template = options.status_url_template.empty() ? intent->status_url_template
                                                                : options.status_url_template;
  if (query_spec.url_template.empty()) {
    return Unresolved(key, StopReason::kInvalidArgument,
                      absl::InvalidArgumentError(
                          "resolve.status_url_template: the intent has none; give one"));
  }
  if (absl::Status s = ValidateStatusQuery(query_spec); !s.ok()) {
    return Unresolved(key, StopReason::kInvalidArgument, Prefixed("resolve.", s));
  }

  const std::string owner =
      options.owner.empty() ? "reconciler:" + journal.Owner() : options.owner;
  absl::StatusOr<bool> claimed =
      journal.Claim(key, owner, clock.WallNow() + options.timeout + kResolveClaimGrace);
  if (!claimed.ok()) {
    return Unresolved(key, StopReason::kJournalUnavailable, claimed.status());
  }
  if (!*claimed) {
    return Unresolved(key, StopReason::kAmbiguousUnresolved,
                      absl::FailedPreconditionError(
                          "idempotency_key: another owner holds the intent, or it was resolved"));
  }

  Request original{intent->method, intent->url, intent->headers, ""};
  original.headers.insert(original.headers.end(), options.headers.begin(), options.headers.end());
  const Request query = BuildStatusQueryRequest(query_spec, original, key);
  Headers key_header;
  if (!FindHeader(original.headers, options_.idempotency_header).has_value()) {
    key_header.emplace_back(options_.idempotency_header,
                            FormatIdempotencyKey(key, options_.key_form));
  }

  CallResult r = Unresolved(key, StopReason::kStatusQueriesExhausted, absl::OkStatus());
  const Deadline deadline = Deadline::After(start, options.timeout);
  RetryBudget& allowance = *options_.status_query_budget;
  allowance.OnCallStart(start);
  bool fence_next = false;
  bool resent = false;
  int polls = 0;
  Duration delay{0};
  for (bool done = false; !done;) {
    TimePoint now = clock.Now();
    if (!fence_next) {
      // The fence query follows a "not found" at once; every other query
      // is paced, counted and paid for.
      if (polls >= options.max_status_queries) {
        r.stop_reason = StopReason::kStatusQueriesExhausted;
        break;
      }
      if (polls > 0) {
        if (!allowance.OnFailureTryRetry(AttemptClass::kInProgress, now).allowed) {
          r.stop_reason = StopReason::kBudgetExhausted;
          break;
        }
        delay = ComputeBackoff(options.poll_backoff, polls, delay, options_.random->Uniform());
        if (deadline.Remaining(now) <= delay) {
          r.stop_reason = StopReason::kDeadlineExceeded;
          break;
        }
        clock.SleepFor(delay);
        now = clock.Now();
      }
      ++polls;
    }
    const Duration left = deadline.Remaining(now);
    if (left <= Duration::zero()) {
      r.stop_reason = StopReason::kDeadlineExceeded;
      break;
    }
    Headers extra = key_header;
    const bool fenced_query = fence_next;
    if (fenced_query) extra.emplace_back(std::string(kFenceHeader), "true");
    fence_next = false;
    AttemptOptions ao;
    ao.timeout = left;
    ao.extra_headers = &extra;
    TransportResult tr = options_.transport->Send(query, ao);
    const TimePoint t1 = clock.Now();
    AttemptEvidence ev = internal::EvidenceOf(tr, now, t1, clock.WallNow(), options_);
    ev.number = ++r.status_queries;
    ev.is_status_query = true;
    r.evidence.push_back(std::move(ev));
    r.last_transport_status = tr.status;
    const StatusAnswer answer = MapStatusAnswer(tr);
    switch (ProofOfStatusAnswer(answer)) {
      case Proof::kTookEffect:
        r.outcome = Outcome::kSucceeded;
        r.stop_reason = StopReason::kSuccess;
        done = true;
        break;
      case Proof::kNoEffect:
        r.outcome = Outcome::kFailed;
        r.stop_reason =
            answer == StatusAnswer::kFenced ? StopReason::kFenced : StopReason::kPermanentError;
        done = true;
        break;
      case Proof::kNothing:
        break;
    }
    if (answer == StatusAnswer::kExpired) {
      // The record was reaped, perhaps after its effect: never a resend.
      r.stop_reason = StopReason::kKeyExpired;
      done = true;
    } else if (answer == StatusAnswer::kNotFound) {
      if (options.fence && !fenced_query) {
        fence_next = true;
      } else if (options.resend_if_server_deduplicates && intent->body.has_value() && !resent) {
        // One same-key resend; its answer is judged by the one rule for
        // "definite" (saferetry/settlement.h), and one that proves nothing
        // leaves the intent to the next status query.
        resent = true;
        if (!journal.MarkSent(key, intent->attempt + 1).ok()) continue;
        Request again{intent->method, intent->url, original.headers, *intent->body};
        Headers resend_extra = key_header;
        AttemptOptions rao;
        rao.timeout = deadline.Remaining(clock.Now());
        rao.extra_headers = &resend_extra;
        if (rao.timeout <= Duration::zero()) continue;
        const TimePoint s0 = clock.Now();
        TransportResult rr = options_.transport->Send(again, rao);
        AttemptEvidence rev = internal::EvidenceOf(rr, s0, clock.Now(), clock.WallNow(), options_);
        rev.number = ++r.attempts;
        r.last_transport_status = rr.status;
        const Proof proof = ProofOfAnswer(rev);
        if (proof != Proof::kNothing) {
          r.outcome = proof == Proof::kTookEffect ? Outcome::kSucceeded : Outcome::kFailed;
          r.stop_reason = proof == Proof::kTookEffect ? StopReason::kSuccess
                          : IsFencedAnswer(rev)       ? StopReason::kFenced
                                                      : StopReason::kPermanentError;
          r.resolved_by = ResolvedBy::kResponse;
          r.last_response = std::move(rr.response);
          done = true;
        } else if (IsExpiredKeyAnswer(rev)) {
          r.stop_reason = StopReason::kKeyExpired;
          done = true;
        }
        r.evidence.push_back(std::move(rev));
      } else if (!done) {
        // An unfenced "not found" proves nothing: it stays UNKNOWN.
        r.stop_reason = StopReason::kNotFoundNoAttemptsLeft;
        done = true;
      }
    }
    if (done && r.outcome != Outcome::kUnknown && r.resolved_by == ResolvedBy::kNone) {
      r.resolved_by = ResolvedBy::kStatusQuery;
      r.resolved_by_status_query = true;
      r.last_response = std::move(tr.response);
    }
  }
  r.elapsed = clock.Now() - start;

  const IntentState state = r.outcome == Outcome::kSucceeded ? IntentState::kSucceeded
                            : r.outcome == Outcome::kFailed  ? IntentState::kFailed
                                                             : IntentState::kUnknown;
  absl::Status written = journal.Finish(key, state, internal::SummaryOf(r));
  if (written.code() == absl::StatusCode::kFailedPrecondition) {
    // Resolved meanwhile by the call itself: the first resolution stands.
    absl::StatusOr<Intent> now_stored = journal.Get(key);
    if (now_stored.ok() && IsResolved(now_stored->state)) {
      (void)journal.Release(key, owner);
      return internal::StoredOutcome(*now_stored);
    }
  }
  if (!written.ok()) {
    r.status = absl::Status(written.code(), absl::StrCat("journal: ", written.message()));
  }
  (void)journal.Release(key, owner);
  return r;
}

}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "call/call_session.h"

#include <algorithm>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status_internal.h"
#include "common/strings_internal.h"

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

}  // namespace

CallResult CallSession::EndEarly(CallResult result) const {
  if (listener_ != nullptr) listener_->OnFinish(result);
  return result;
}

std::optional<CallResult> CallSession::Begin(KeyFingerprints& fingerprints, UnsentRecords& unsent,
                                             const CallOptions& options, TimePoint start) {
  // Bad input never reaches the listener: nothing started.
  RequestScan scan;
  if (absl::Status s = PrepareCall(client_, fingerprints, *request_, options, start, call_, &scan);
      !s.ok()) {
    return InvalidCall(std::move(s));
  }
  request_validated_ = true;
  if (std::optional<CallResult> early = JournalBegin(client_, call_, *request_, start, &unsent)) {
    return EndEarly(*std::move(early));
  }
  SetUpTrace(options.tracer, options.trace_context, scan);
  // Only in-memory work between the start and the first send without a
  // listener, a tracer or a journal: that send's start is the call's.
  start_unused_ = listener_ == nullptr && active_ == nullptr && call_.journal() == nullptr;
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

  StatusQuery& query = rare().resolve_query;
  query.url_template = options.status_url_template.empty() ? intent->status_url_template
                                                           : options.status_url_template;
  query.fence_when_giving_up = options.fence;
  if (query.url_template.empty()) {
    return Unresolved(
        key, StopReason::kInvalidArgument,
        absl::InvalidArgumentError("resolve.status_url_template: the intent has none; give one"));
  }
  if (absl::Status s = ValidateStatusQuery(query); !s.ok()) {
    return Unresolved(key, StopReason::kInvalidArgument, Prefixed("resolve.", s));
  }

  const std::string owner = options.owner.empty() ? "reconciler:" + journal.Owner() : options.owner;
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
  request_ = &rare().resolve_request.emplace(std::move(original));

  // A resolve's policy is its own, from the machine's defaults: not the one
  // the session was built with for a call.
  CallPolicy& policy = call_.policy;
  policy = CallPolicy{};
  // Status queries only, unless the caller allows one same-key resend to a
  // deduplicating server: the intent's attempt may have taken effect.
  policy.start_with_status_query = true;
  policy.max_attempts = may_resend ? 1 : 0;
  policy.max_status_queries = std::min(options.max_status_queries, kMaxStatusQueriesHardCap);
  policy.poll_backoff = &options.poll_backoff;
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
  const CallPolicy& decided = client_.policy->call_policy();  // built with the policy
  policy.response_predicate = decided.response_predicate;
  policy.response_predicate_max_body_bytes = decided.response_predicate_max_body_bytes;
  call_.status_url = &query.url_template;
  AssignCircuitBreakers(client_, *request_, query.url_template, policy);

  call_.key = std::string(key);
  const RetryPolicyOptions& names = client_.policy->options();
  const RequestScan scan = ScanRequestHeaders(request_->headers, names.idempotency_header);
  BuildExtraHeaders(names, scan.key_header > 0, call_);
  call_.extra().journal = &journal;
  call_.extra().attempt_offset = intent->attempt;
  call_.extra().journal_owner = owner;
  SetUpTrace(nullptr, options.trace_context, scan);
  return std::nullopt;
}

void CallSession::KeepCallOptions(CallOptions& options) {
  if (options.policy != nullptr) call_.extra().policy = std::move(options.policy);
  std::string& url = options.status_url;
  if (url.empty()) return;
  // The template is that URL whole, or the policy's (another string).
  const bool is_template = call_.status_url == &url;
  std::string& kept = call_.extra().status_url;
  kept = std::move(url);
  if (is_template) call_.status_url = &kept;
}

void CallSession::ReadTraceContext(AttemptTracer* tracer,
                                   const std::optional<TraceContext>& given_context,
                                   const RequestScan& scan) {
  AttemptTracer* const chosen = tracer != nullptr ? tracer : client_.tracer.get();
  const bool active = chosen != nullptr || given_context.has_value();
  const std::size_t parents = scan.traceparents;
  const std::size_t states = scan.tracestates;
  const std::size_t parent_index = scan.traceparent > 0 ? scan.traceparent - 1 : 0;
  const std::string_view parent = scan.traceparent > 0
                                      ? std::string_view(request_->headers[parent_index].second)
                                      : std::string_view();
  if (!active) {
    // The request goes as it is; the evidence records a valid context. Two
    // traceparent headers are no valid context. Its header's place is kept,
    // not its parse: the request stays where it is, and the evidence reads
    // the header again (`RecordTrace`).
    if (parents == 1 && ParseTraceParent(parent).has_value()) {
      caller_trace_header_ = static_cast<std::uint32_t>(parent_index + 1);
    }
    return;
  }

  std::string_view given;
  std::string state;
  if (given_context.has_value()) {
    given = given_context->traceparent;
    state = given_context->tracestate;
  } else if (parents == 1) {
    given = parent;
    // Several tracestate headers are one list.
    for (const Header& h : request_->headers) {
      if (!EqualsIgnoreCase(h.first, kTraceStateHeader)) continue;
      if (!state.empty()) state.push_back(',');
      state.append(h.second);
    }
  }
  // A traceparent that does not parse is not propagated, and neither is its
  // tracestate (W3C Trace Context, "Processing model"): the tracer, if any,
  // is told there is no caller context.
  active_ = std::make_unique<ActiveTrace>();
  active_->tracer = chosen;
  active_->caller = ParseTraceParent(given);
  if (active_->caller.has_value()) {
    const absl::string_view trimmed = absl::StripAsciiWhitespace(AsAbsl(given));
    active_->traceparent.assign(trimmed.data(), trimmed.size());
    if (std::optional<std::string> sanitised = SanitizeTraceState(state)) {
      active_->tracestate = *std::move(sanitised);
    }
  }
  if (parents > 0 || states > 0) {
    // saferetry writes the headers: the request's own are taken out, so that
    // no request carries two.
    Request& stripped = active_->request.emplace(*request_);
    stripped.headers.erase(std::remove_if(stripped.headers.begin(), stripped.headers.end(),
                                          [](const Header& h) {
                                            return EqualsIgnoreCase(h.first, kTraceParentHeader) ||
                                                   EqualsIgnoreCase(h.first, kTraceStateHeader);
                                          }),
                           stripped.headers.end());
    request_ = &*active_->request;
  }
}

void CallSession::StampTrace(const AttemptSpanStart& start, std::size_t slot,
                             SendHeaders& headers) {
  std::optional<TraceParent>& sent = active_->sent[slot];
  sent = active_->caller;
  std::string_view parent_value = active_->traceparent;
  std::string_view state = active_->tracestate;
  if (AttemptTracer* const tracer = active_->tracer; tracer != nullptr) {
    std::optional<AttemptSpan> span = tracer->OnAttemptStart(start);
    // A span that is not valid is ignored: the caller's context goes.
    if (span.has_value() && span->traceparent.version != 0xff &&
        IsValidTraceId(span->traceparent.trace_id) && IsValidSpanId(span->traceparent.parent_id)) {
      sent = span->traceparent;
      sent->version = 0;  // the version written
      active_->sent_traceparent = FormatTraceParent(*sent);
      parent_value = active_->sent_traceparent;
      if (span->tracestate.has_value()) {
        std::optional<std::string> span_state = SanitizeTraceState(*span->tracestate);
        active_->sent_tracestate = span_state.has_value() ? *std::move(span_state) : std::string();
        state = active_->sent_tracestate;
      }
    }
  }
  if (!sent.has_value()) return;
  headers.refs[headers.count++] = {kTraceParentHeader, parent_value};
  if (!state.empty()) headers.refs[headers.count++] = {kTraceStateHeader, state};
}

std::size_t CallSession::TraceSlot(std::uint32_t attempt_id) const {
  if (first_trace_.attempt_id == attempt_id) return 0;
  if (rare_ == nullptr) {
    return attempt_id == 0 ? 1 : kTraceSlots;  // the hedges' are all free
  }
  for (std::size_t i = 1; i < kQuerySlot; ++i) {
    if (rare_->hedge_traces[i - 1].attempt_id == attempt_id) return i;
  }
  return kTraceSlots;
}

void CallSession::RecordTraceContext(std::size_t slot, AttemptEvidence& ev) const {
  const std::optional<TraceParent> sent =
      active_ != nullptr ? active_->sent[slot]
      : caller_trace_header_ > 0
          ? ParseTraceParent(request_->headers[caller_trace_header_ - 1].second)
          : std::nullopt;
  if (sent.has_value()) {
    ev.trace_id = sent->trace_id;
    ev.span_id = sent->parent_id;
    ev.trace_flags = sent->flags;
  }
}

std::optional<CallAction> CallSession::BeforeAttempt(CallStateMachine& machine,
                                                     const CallAction& action, SendHeaders& headers,
                                                     AttemptOptions& ao) {
  StampAttemptHeaders(call_, action, headers);
  ao.phase_limits = call_.retry->options().phase_limits;
  if (listener_ != nullptr) listener_->OnAttemptStart(action.number, false);
  // A free slot: at most 1 + max_hedges attempts are in flight.
  std::size_t slot = TraceSlot(0);
  if (slot == kTraceSlots) slot = 0;
  SentTrace& trace = TraceAt(slot);
  trace.attempt_id = action.attempt_id;
  trace.resend_count = request_sends_++;
  if (active_ != nullptr) {
    AttemptSpanStart start;
    start.caller = active_->caller.has_value() ? &*active_->caller : nullptr;
    start.caller_tracestate = active_->tracestate;
    start.number = action.number;
    start.resend_count = trace.resend_count;
    start.method = request_->method;
    start.url = request_->url;
    StampTrace(start, slot, headers);
  }
  ao.timeout = action.timeout;
  ao.extra_headers = headers.view();
  if (std::optional<TransportResult> unmarked = JournalBeforeSend(call_, action.number)) {
    // Not journaled, not sent: the machine sees an attempt that never left.
    --request_sends_;
    return AfterAttempt(machine, action.attempt_id, *std::move(unmarked), client_.clock->Now());
  }
  return std::nullopt;
}

void CallSession::HoldResolve(std::string key, ResolveOptions options) {
  rare().held_resolve.emplace(std::move(key), std::move(options));
}

CallSession::Rare& CallSession::rare() {
  if (rare_ == nullptr) rare_ = std::make_unique<Rare>();
  return *rare_;
}

CallAction CallSession::AfterAttempt(CallStateMachine& machine, std::uint32_t attempt_id,
                                     TransportResult&& tr, TimePoint t0) {
  Clock& clock = *client_.clock;
  const TimePoint t1 = clock.Now();
  AttemptEvidence ev;
  FillEvidence(tr, t0, t1, clock, call_.retry->options(), ev);
  if (const std::size_t slot = TraceSlot(attempt_id); slot != kTraceSlots && attempt_id != 0) {
    RecordTrace(slot, tr.redirects, ev);
    TraceAt(slot).attempt_id = 0;
  }
  request_sends_ += tr.redirects;
  CallAction next = machine.OnAttemptDone(attempt_id, std::move(ev), std::move(tr.response), t1);
  AttemptTracer* const t = tracer();
  if ((listener_ != nullptr || t != nullptr) && !machine.result().evidence.empty()) {
    const AttemptEvidence& recorded = machine.result().evidence.back();
    if (listener_ != nullptr) listener_->OnAttemptEnd(recorded);
    if (t != nullptr) t->OnAttemptEnd(recorded);
  }
  return next;
}

std::optional<CallAction> CallSession::BeforeStatusQuery(CallStateMachine& machine,
                                                         const CallAction& action,
                                                         const Request** query,
                                                         SendHeaders& headers, AttemptOptions& ao) {
  if (listener_ != nullptr) listener_->OnAttemptStart(action.number, true);
  if (call_.use_callback) {
    const StatusQuery& spec = call_.retry->options().status_query;
    // A callback answers synchronously, on the driver's thread.
    Clock& clock = *client_.clock;
    const TimePoint t0 = clock.Now();
    StatusQueryReply reply = spec.callback(call_.key, action.timeout);
    const TimePoint t1 = clock.Now();
    AttemptEvidence ev;
    FillEvidence(reply.result, t0, t1, clock, call_.retry->options(), ev);
    // Not a request: no trace context, but counted with the queries.
    ev.resend_count = query_sends_++;
    CallAction next =
        machine.OnStatusAnswer(reply.answer, std::move(ev), std::move(reply.result.response), t1);
    if (listener_ != nullptr) {
      listener_->OnAttemptEnd(machine.result().evidence.back());
    }
    return next;
  }
  std::optional<Request>& query_request = rare().query_request;
  if (!query_request.has_value()) query_request = StatusQueryRequest(call_, *request_);
  StampStatusQueryHeaders(call_, action, headers);
  const int resend_count = query_sends_++;
  if (active_ != nullptr) {
    AttemptSpanStart start;
    start.caller = active_->caller.has_value() ? &*active_->caller : nullptr;
    start.caller_tracestate = active_->tracestate;
    start.number = action.number;
    start.is_status_query = true;
    start.resend_count = resend_count;
    start.method = query_request->method;
    start.url = query_request->url;
    StampTrace(start, kQuerySlot, headers);
  }
  *query = &*query_request;
  ao.timeout = action.timeout;
  ao.phase_limits = call_.retry->options().phase_limits;
  ao.extra_headers = headers.view();
  return std::nullopt;
}

CallAction CallSession::AfterStatusQuery(CallStateMachine& machine, TransportResult&& tr,
                                         TimePoint t0) {
  Clock& clock = *client_.clock;
  const TimePoint t1 = clock.Now();
  AttemptEvidence ev;
  FillEvidence(tr, t0, t1, clock, call_.retry->options(), ev);
  RecordTrace(kQuerySlot, tr.redirects, ev);
  query_sends_ += tr.redirects;
  const StatusAnswer answer = MapStatusAnswer(tr);
  CallAction next = machine.OnStatusAnswer(answer, std::move(ev), std::move(tr.response), t1);
  if (listener_ != nullptr) {
    listener_->OnAttemptEnd(machine.result().evidence.back());
  }
  if (AttemptTracer* const t = tracer(); t != nullptr)
    t->OnAttemptEnd(machine.result().evidence.back());
  return next;
}

void CallSession::OnWait(const CallAction& action) const {
  if (listener_ != nullptr) {
    listener_->OnWaitScheduled(action.delay, action.delay_from_server_hint);
  }
}

void CallSession::FinishIn(CallResult& result) {
  if (AttemptTracer* const t = tracer(); t != nullptr) t->OnCallEnd();
  if (resolve_) {
    result = FinishResolve(std::move(result));
    return;
  }
  JournalFinish(call_, result);
  if (!call_.key.empty()) result.idempotency_key = std::move(call_.key);
  if (listener_ != nullptr) listener_->OnFinish(result);
}

CallResult CallSession::FinishResolve(CallResult result) {
  IntentJournal& journal = *call_.journal();
  const std::string& key = call_.key;
  result.idempotency_key = key;
  const IntentState state = result.outcome == Outcome::kSucceeded ? IntentState::kSucceeded
                            : result.outcome == Outcome::kFailed  ? IntentState::kFailed
                                                                  : IntentState::kUnknown;
  absl::Status written = journal.Finish(key, state, SummaryOf(result));
  if (written.code() == absl::StatusCode::kFailedPrecondition) {
    // Resolved meanwhile by the call itself: the first resolution stands.
    absl::StatusOr<Intent> now_stored = journal.Get(key);
    if (now_stored.ok() && IsResolved(now_stored->state)) {
      (void)journal.Release(key, call_.journal_owner());
      return StoredOutcome(*now_stored);
    }
  }
  if (!written.ok()) {
    result.status = absl::Status(written.code(), absl::StrCat("journal: ", written.message()));
  }
  (void)journal.Release(key, call_.journal_owner());
  return result;
}

}  // namespace internal
}  // namespace saferetry

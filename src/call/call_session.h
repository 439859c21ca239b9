// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Not API: one call's session, shared by every driver (the blocking `Client`,
// `Client::Resolve`, the event-loop `AsyncClient`). The state machine makes
// the decisions; the session does the product work around each of them, in
// one place so that drivers cannot drift apart:
//
//   Begin / BeginResolve   the key, the fingerprint guard, the machine's
//                          policy, the intent journal's record or claim
//   BeforeAttempt          attempt headers (trace context included, from
//                          the tracer if any), listener, journal mark
//   BeforeStatusQuery      the status-query request and headers, listener,
//                          or the policy's status-query callback
//   AfterAttempt / AfterStatusQuery
//                          evidence (resend count, trace ids), the
//                          machine, listener, tracer
//   FinishIn               the journal's outcome and claim, the key,
//                          listener
//
// A driver's loop holds only what its I/O needs: it sends what the session
// prepared, with its transport, and waits with its clock or its timers.

#ifndef SAFERETRY_SRC_CALL_CALL_SESSION_H_
#define SAFERETRY_SRC_CALL_CALL_SESSION_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "call/call_setup.h"
#include "saferetry/call_state_machine.h"
#include "saferetry/client.h"
#include "saferetry/request.h"
#include "saferetry/trace_context.h"
#include "saferetry/transport.h"

namespace saferetry {
namespace internal {

class CallSession {
 public:
  /// `client` and `request` must outlive the session. Of `options` the
  /// constructor keeps only the listener; `Begin` reads the same options.
  /// After `Begin` the session reads only what the prepared call points
  /// into, which must then stay where it is: the pointee of
  /// `options.policy` (the call's policy) and the characters of
  /// `options.status_url` (the call's status-query template) unless
  /// `KeepCallOptions` took them. A driver whose call outlives its options
  /// (the event loop's) hands those two to the session and drops the rest. For a resolve, `request`
  /// is unused (the session rebuilds it from the journal) and may be any request.
  CallSession(const ClientOptions& client, const Request& request, const CallOptions& options)
      : client_(client),
        request_(&request),
        listener_(options.listener),
        call_(CallPolicyOf(client, options)) {}
  CallSession(const CallSession&) = delete;
  CallSession& operator=(const CallSession&) = delete;
  // Few calls have a rare block or a trace context: the checks are laid
  // out for that.
  ~CallSession() {
    if (rare_ != nullptr) rare_.reset();
    if (active_ != nullptr) active_.reset();
  }

  /// Prepares a call: validation, key, fingerprint guard, policy, headers,
  /// the journal's record. A result when the call must end before anything
  /// is sent (the listener has been told).
  /// `unsent`: the driver's record of intents whose record it could not
  /// confirm (shared by its calls).
  /// `options`: the call's, those given to the constructor.
  std::optional<CallResult> Begin(KeyFingerprints& fingerprints, UnsentRecords& unsent,
                                  const CallOptions& options, TimePoint start);

  /// Prepares the resolve of journaled intent `key`: reads it, claims it,
  /// and sets up a call that starts with a status query and the doubt that
  /// the intent took effect (`CallPolicy::start_with_status_query`). A
  /// result when it must end now (no journal, unknown key, resolved,
  /// claimed by another owner).
  std::optional<CallResult> BeginResolve(std::string_view key, const ResolveOptions& options,
                                         TimePoint start);
  /// For a driver whose resolve begins later (on its loop): keeps `key` and
  /// `options` in the session, which the resolve reads for its whole life,
  /// until `BeginHeldResolve`. Allocates the session's rare block, as the
  /// resolve would.
  void HoldResolve(std::string key, ResolveOptions options);
  /// Whether `HoldResolve` was called.
  bool holds_resolve() const { return rare_ != nullptr && rare_->held_resolve.has_value(); }
  /// `BeginResolve` of what `HoldResolve` kept.
  std::optional<CallResult> BeginHeldResolve(TimePoint start) {
    return BeginResolve(rare_->held_resolve->first, rare_->held_resolve->second, start);
  }

  /// The machine's policy for this call (valid after a Begin that returned
  /// nullopt).
  const CallPolicy& policy() const { return call_.policy; }
  /// The same policy, for the call's machine to run on and complete in place
  /// (`CallStateMachine(CallPolicy*, ...)`): never copied.
  CallPolicy* machine_policy() { return &call_.policy; }
  /// The request each attempt sends.
  const Request& request() const { return *request_; }
  /// Whether `request()` is the caller's request this call validated when it
  /// began (or that request without its trace headers): the drivers send it
  /// through `internal::PrevalidatedSender` / `PrevalidatedStarter` when the
  /// transport has them, so it is not checked again. Not a
  /// resolve's request, rebuilt from the journal.
  bool request_validated() const { return request_validated_; }
  /// The call's retry policy (valid after a Begin that returned nullopt).
  const RetryPolicyOptions& retry_policy() const { return call_.retry->options(); }

  /// Before a send of the request (`action` is kSendAttempt): stamps the
  /// attempt headers into `headers` (the driver's, held for the send), sets
  /// `ao` to send them and tells the listener, then marks the attempt in the
  /// journal. When the journal cannot, the attempt is not sent: the machine
  /// is told so and its next action returned.
  std::optional<CallAction> BeforeAttempt(CallStateMachine& machine, const CallAction& action,
                                          SendHeaders& headers, AttemptOptions& ao);
  /// The start time of the send about to leave: the call's start (the
  /// machine's, which `machine.Start` was given) when this is the call's first send and only
  /// in-memory work ran since it was read (no journal, listener or tracer), else the clock's
  /// reading. A call that succeeds at once reads the clock twice: its start and the end of the
  /// attempt (the wall clock too only for a `Retry-After` date that comes
  /// with no `Date`).
  TimePoint SendStart(const CallStateMachine& machine) {
    // Only in-memory work ran since the start was read unless the journal, a
    // listener or a tracer did (each may take time): `Begin` set the flag
    // only without them.
    const bool fresh = start_unused_;
    start_unused_ = false;
    return fresh ? machine.start() : client_.clock->Now();
  }

  /// After a send of the request: its evidence to the machine, the listener.
  CallAction AfterAttempt(CallStateMachine& machine, std::uint32_t attempt_id, TransportResult&& tr,
                          TimePoint t0);

  /// Before a status query (`action` is kSendStatusQuery): tells the
  /// listener. With the policy's callback, asks it, feeds the machine and
  /// returns the next action; otherwise returns nullopt with `*query`,
  /// `headers` and `ao` set for the transport.
  std::optional<CallAction> BeforeStatusQuery(CallStateMachine& machine, const CallAction& action,
                                              const Request** query, SendHeaders& headers,
                                              AttemptOptions& ao);
  /// After a status query sent by the transport.
  CallAction AfterStatusQuery(CallStateMachine& machine, TransportResult&& tr, TimePoint t0);

  /// Tells the listener about a wait.
  void OnWait(const CallAction& action) const;

  /// Finishes the machine's result in place, never moved (the blocking
  /// driver's, built there by `CallStateMachine::BuildResultIn`; the event
  /// loop's, where the machine built it, `finished_result()`): the journal's
  /// outcome written (a
  /// resolve's write error is reported in `status`; the first resolution of
  /// an intent stands), the claim released, the key set, the listener told.
  void FinishIn(CallResult& result);

  CallListener* listener() const { return listener_; }

  /// Moves what the prepared call points into out of the call options and
  /// into the session (a driver whose call outlives its options, after
  /// `Begin`): the policy (its pointee stays where it is) and the status
  /// URL (the call's status-query template, when it is that URL, then reads
  /// the session's copy). Neither given: nothing kept, nothing allocated.
  void KeepCallOptions(CallOptions& options);

 private:
  CallResult EndEarly(CallResult result) const;
  CallResult FinishResolve(CallResult result);

  // One send in flight: its resend count. The traceparent it carried is
  // the caller's (`caller_trace_header_`), or with an active context
  // `ActiveTrace::sent`'s entry of the same index.
  struct SentTrace {
    std::uint32_t attempt_id = 0;  // 0: a free slot
    int resend_count = 0;
  };
  // Attempts in flight: one, or with hedges up to 1 + 3 (`max_hedges`);
  // then the status query.
  static constexpr std::size_t kTraceSlots = 5;
  static constexpr std::size_t kQuerySlot = kTraceSlots - 1;
  // Reads the caller's context (`given`: the call's or the resolve's, else
  // the request's headers) and, when saferetry writes the headers, takes
  // them out of the request. `tracer`: the call's, else null.
  // `scan`: where the request's trace headers are.
  void SetUpTrace(AttemptTracer* tracer, const std::optional<TraceContext>& given_context,
                  const RequestScan& scan) {
    // Without a tracer, a context or a trace header, there is nothing to
    // read: one test of the five, not five tests.
    const bool any = (tracer != nullptr) | (client_.tracer != nullptr) | given_context.has_value() |
                     ((scan.traceparents | scan.tracestates) != 0);
    if (any) {
      ReadTraceContext(tracer, given_context, scan);
    }
  }
  void ReadTraceContext(AttemptTracer* tracer, const std::optional<TraceContext>& given_context,
                        const RequestScan& scan);
  // Asks the tracer, appends this send's headers to `headers`; records the
  // traceparent sent in slot `slot`.
  void StampTrace(const AttemptSpanStart& start, std::size_t slot, SendHeaders& headers);
  std::size_t TraceSlot(std::uint32_t attempt_id) const;  // kTraceSlots: none
  // Slot `slot` (< kQuerySlot) of an attempt: the first inline, a hedge's in
  // `Rare` (allocated when a hedge is first sent).
  SentTrace& TraceAt(std::size_t slot) {
    return slot == 0 ? first_trace_ : rare().hedge_traces[slot - 1];
  }
  // The status query's (kQuerySlot) is the count before its send, read
  // while its own redirects are not counted yet (`AfterStatusQuery`).
  int ResendCount(std::size_t slot) const {
    return slot == kQuerySlot ? query_sends_ - 1
           : slot == 0        ? first_trace_.resend_count
                              : rare_->hedge_traces[slot - 1].resend_count;
  }
  // Writes slot `slot`'s trace context into `ev`.
  void RecordTrace(std::size_t slot, int redirects, AttemptEvidence& ev) const {
    ev.resend_count = ResendCount(slot);
    ev.redirects = redirects;
    if (active_ != nullptr || caller_trace_header_ > 0) {
      RecordTraceContext(slot, ev);
    }
  }
  // The trace context part of `RecordTrace`, when the call has one.
  void RecordTraceContext(std::size_t slot, AttemptEvidence& ev) const;

  const ClientOptions& client_;
  const Request* request_;
  CallListener* listener_;
  PreparedCall call_;
  // What only a call that queries or a resolve needs, allocated when first
  // needed: a call that succeeds at once neither allocates nor initialises
  // it.
  struct Rare {
    std::optional<Request> query_request;
    // A resolve: the request rebuilt from the journal, the template asked.
    std::optional<Request> resolve_request;
    StatusQuery resolve_query;
    // A resolve held for a driver's loop (`HoldResolve`): the key and the
    // options, read for the resolve's whole life.
    std::optional<std::pair<std::string, ResolveOptions>> held_resolve;
    // The trace slots of hedges (1 .. kQuerySlot - 1).
    std::array<SentTrace, kQuerySlot - 1> hedge_traces{};
  };
  Rare& rare();
  std::unique_ptr<Rare> rare_;

  // Trace context (trace_context.h). Active when a context was given or a
  // tracer is set: saferetry then writes `traceparent` and `tracestate`
  // itself, from `active_`. Inactive (the default), the request's own
  // headers go as they are, the caller's traceparent header
  // (`caller_trace_header_`) only feeds the evidence, and nothing is
  // allocated.
  struct ActiveTrace {
    std::optional<TraceParent> caller;  // the caller's context, parsed; none: not valid
    std::string traceparent;            // the caller's, as given, without white space
    std::string tracestate;             // the caller's, sanitised; empty: none
    std::optional<Request> request;     // the request without its own trace headers
    AttemptTracer* tracer = nullptr;    // null: a context without a tracer
    std::string sent_traceparent;       // the tracer's, for the send being prepared
    std::string sent_tracestate;
    // The traceparent each send in flight carried, by trace slot.
    std::array<std::optional<TraceParent>, kTraceSlots> sent;
  };
  // The call's tracer (the call's, else the client's), kept with the active
  // context: a tracer makes the context active.
  AttemptTracer* tracer() const { return active_ != nullptr ? active_->tracer : nullptr; }
  std::unique_ptr<ActiveTrace> active_;
  // Inactive: 1 + the index of the request's one traceparent header when
  // it is valid, else 0. Read again for each send's evidence rather than
  // kept parsed (27 bytes of every call for the few that carry one).
  std::uint32_t caller_trace_header_ = 0;
  bool resolve_ = false;
  bool request_validated_ = false;  // `request_validated()`
  // A call without a listener, a tracer or a journal whose first send has
  // not used the call's start yet (`SendStart`).
  bool start_unused_ = false;
  int request_sends_ = 0;  // redirect hops included
  int query_sends_ = 0;
  SentTrace first_trace_;  // slot 0; hedges' in `Rare`
};

}  // namespace internal
}  // namespace saferetry

#endif  // SAFERETRY_SRC_CALL_CALL_SESSION_H_

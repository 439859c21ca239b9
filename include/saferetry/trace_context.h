// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// W3C Trace Context (https://www.w3.org/TR/trace-context/) for the attempts
// and status queries of a call: the caller's context passes through
// unchanged, and an optional per-attempt hook (`AttemptTracer`) lets a tracer
// give each attempt its own span. docs/operations.md ("Trace context") and
// docs/adr/0017-trace-context.md explain the rules.
//
// With no context given and no tracer (the defaults) nothing changes: the
// request's own `traceparent` and `tracestate` headers, if any, are sent as
// they are, and each attempt's evidence records the ids of a valid one.
//
// @code
//   saferetry::CallOptions call;
//   call.trace_context = saferetry::TraceContext{
//       "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "congo=t61rcWkgMzE"};
//   saferetry::CallResult r = client->Execute(request, call);
//   // every attempt and status query carried exactly that traceparent and tracestate
// @endcode

#ifndef SAFERETRY_TRACE_CONTEXT_H_
#define SAFERETRY_TRACE_CONTEXT_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "saferetry/trace_ids.h"  // kTraceParentHeader, kTraceStateHeader, TraceId, SpanId

namespace saferetry {

struct AttemptEvidence;

/// The length of a version-00 `traceparent` value.
inline constexpr std::size_t kTraceParentLength = 55;
/// The longest `tracestate` propagated, in characters without optional white
/// space: the specification's limit. A longer one is truncated as it says:
/// members longer than 128 characters go first, then members from the end.
inline constexpr std::size_t kMaxTraceStateLength = 512;
/// The most `tracestate` list members; a value with more is invalid.
inline constexpr std::size_t kMaxTraceStateMembers = 32;

/// The fields of a `traceparent` value, in binary.
struct TraceParent {
  /// The version read (0 for values this library writes).
  std::uint8_t version = 0;
  TraceId trace_id{};
  /// The span id of the parent: for a value sent with an attempt, the span
  /// of that attempt.
  SpanId parent_id{};
  /// Trace flags; bit 0 is "sampled".
  std::uint8_t flags = 0;

  bool sampled() const { return (flags & 1) != 0; }
  friend bool operator==(const TraceParent& a, const TraceParent& b) {
    return a.version == b.version && a.trace_id == b.trace_id && a.parent_id == b.parent_id &&
           a.flags == b.flags;
  }
  friend bool operator!=(const TraceParent& a, const TraceParent& b) { return !(a == b); }
};

/// Parses a `traceparent` value by the specification's rules, ignoring
/// leading and trailing spaces and tabs: two lower-case hex digits of
/// version (not "ff"), a 32-digit trace id and a 16-digit parent id (neither
/// all zeros) and two digits of flags, separated by '-', lower-case hex
/// only. Version 00 must be exactly 55 characters; a higher version may go
/// on after a '-' (its first four fields are read). nullopt when invalid.
/// Never throws, never allocates.
std::optional<TraceParent> ParseTraceParent(std::string_view value);

/// The version-00 value of `parent` ("00-<trace id>-<parent id>-<flags>"),
/// whatever `parent.version` says: the only version this library writes.
std::string FormatTraceParent(const TraceParent& parent);
/// The same, written into `out` (no terminating NUL); never allocates.
void FormatTraceParent(const TraceParent& parent, std::array<char, kTraceParentLength>& out);

/// True when `id` is not all zeros.
bool IsValidTraceId(const TraceId& id);
bool IsValidSpanId(const SpanId& id);
/// Lower-case hex of an id (32 or 16 characters).
std::string TraceIdHex(const TraceId& id);
std::string SpanIdHex(const SpanId& id);

/// The `tracestate` value to propagate, or nullopt when it must be dropped.
/// `value` may be several headers' values joined by ','. Invalid (dropped):
/// a list member that is not `key=value` by the specification's grammar, a
/// key that appears twice, more than `kMaxTraceStateMembers` members. Empty
/// members and optional white space are allowed. A valid value of at most
/// `kMaxTraceStateLength` characters (without optional white space) comes
/// back unchanged; a longer one is truncated as the specification says and
/// its members rejoined with ','. An empty value (no member) gives nullopt.
/// Never throws.
std::optional<std::string> SanitizeTraceState(std::string_view value);

/// A trace context as the caller holds it: the values of its `traceparent`
/// and `tracestate` headers (e.g. from OpenTelemetry's propagator, or from the
/// inbound request).
struct TraceContext {
  /// A `traceparent` value. A value that does not parse
  /// (`ParseTraceParent`) is not sent, and neither is `tracestate`: the
  /// specification's rule for a context one cannot parse. The call goes on.
  std::string traceparent;
  /// A `tracestate` value, sent with a valid `traceparent` only, after
  /// `SanitizeTraceState`. Empty: none.
  std::string tracestate;
};

/// What a tracer is told before each attempt or status query sent by the
/// transport. The pointer and views are valid during `OnAttemptStart` only.
struct AttemptSpanStart {
  /// The caller's valid context (`CallOptions::trace_context`, else the
  /// request's own headers); null when there is none or it is invalid.
  const TraceParent* caller = nullptr;
  /// The caller's sanitised `tracestate`; empty when none.
  std::string_view caller_tracestate;
  /// The attempt's (or status query's) number, 1-based; requests and status
  /// queries are numbered separately.
  int number = 0;
  bool is_status_query = false;
  /// OpenTelemetry's `http.request.resend_count`: sends of this request (or
  /// of this status query) before this one, redirect hops followed by the
  /// transport included. 0 on the first.
  int resend_count = 0;
  /// The request's (or status query's) method and URL.
  std::string_view method;
  std::string_view url;
};

/// The context a tracer wants sent with one attempt.
struct AttemptSpan {
  /// The attempt's span: usually the caller's trace id, a new span id and
  /// the caller's flags. Sent in place of the caller's `traceparent`; an
  /// invalid one (a zero id, version 0xff) is ignored and the caller's
  /// context is sent.
  TraceParent traceparent;
  /// Replaces the caller's `tracestate` when set (sanitised first; an
  /// invalid one sends none).
  std::optional<std::string> tracestate;
};

/// The per-attempt hook of a tracer, e.g. an OpenTelemetry bridge that makes
/// one client span per attempt (examples/trace_bridge.cc shows the shape).
/// Called on the driver's thread (the calling thread, or the event loop's),
/// for every send of the request and every status query sent by the
/// transport — not for a status query answered by the policy's callback.
/// Each `OnAttemptStart` is followed by one `OnAttemptEnd` of the same
/// attempt (an attempt the journal could not mark ends not sent), except a
/// hedge still in flight when the call finishes (`AsyncClient`), which is
/// abandoned unreported: `OnCallEnd` comes last, so a bridge ends what is
/// still open there. With hedging attempts overlap. Must not throw. A tracer
/// shared by clients or threads must be thread-safe.
class AttemptTracer {
 public:
  virtual ~AttemptTracer() = default;
  /// The context to send with this attempt; nullopt: the caller's.
  virtual std::optional<AttemptSpan> OnAttemptStart(const AttemptSpanStart& start) = 0;
  /// The attempt ended; `evidence` is classified and carries the ids sent
  /// (`AttemptEvidence::trace_id`, `span_id`) and the resend count.
  virtual void OnAttemptEnd(const AttemptEvidence& /*evidence*/) {}
  /// The call finished (after its last `OnAttemptEnd`). Called once for
  /// every call that got past its setup, even one that sent nothing (an
  /// open circuit); not for a call refused before (bad input, the journal).
  virtual void OnCallEnd() {}
};

}  // namespace saferetry

#endif  // SAFERETRY_TRACE_CONTEXT_H_

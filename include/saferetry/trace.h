// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The per-call trace: a structured JSON record of what one call did and why,
// so every side-effecting call leaves evidence (docs/operations.md explains
// how to read it). Secrets never reach it (see redaction.h): the values of
// `Authorization`, `Proxy-Authorization`, `Cookie`, `Set-Cookie` and of the
// names in `TraceOptions::redact_headers` are replaced wherever a header
// value could be printed, and the userinfo (`user:password@`) of every URL
// is removed, in URLs and in transport messages alike.
//
// @code
//   saferetry::TraceRecorder trace({}, [](const std::string& json) { LOG(INFO) << json; });
//   saferetry::CallOptions call;
//   call.listener = &trace;
//   saferetry::CallResult r = client->Execute(request, call);
//   // or, with no listener: saferetry::TraceToJson(r, {});
// @endcode

#ifndef SAFERETRY_TRACE_H_
#define SAFERETRY_TRACE_H_

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "saferetry/call_listener.h"
#include "saferetry/redaction.h"
#include "saferetry/request.h"
#include "saferetry/result.h"

namespace saferetry {

// `kRedacted`, `Redactor`, `RedactHeaderValue`: see saferetry/redaction.h.

/// What the trace contains.
struct TraceOptions {
  /// The caller's id for this call (e.g. the inbound request's id). Empty:
  /// the idempotency key is used; with no key either, `request_id` is null.
  std::string request_id;
  /// When set, the request's method, URL and headers are recorded (redacted).
  /// Must outlive the `TraceToJson` call.
  const Request* request = nullptr;
  /// Record the last response's headers (redacted). Default false.
  bool include_response_headers = false;
  /// More secret header names (e.g. "X-Api-Key"), redacted besides the
  /// built-in ones (`IsSecretHeader`); case-insensitive. Default: none.
  std::vector<std::string> redact_headers;
  /// Times are milliseconds relative to this point; default: the start of
  /// the first attempt.
  std::optional<TimePoint> call_start;
  /// Indentation: -1 (default) prints one line, n >= 0 pretty-prints.
  int indent = -1;
};

/// The trace of one call as a JSON object (schema in docs/operations.md):
///
///   {"request_id", "idempotency_key", "outcome", "stop_reason", "status",
///    "attempts", "status_queries", "resolved_by_status_query", "elapsed_ms",
///    "request"?, "response_headers"?,
///    "events": [{"number", "kind": "attempt"|"status_query", "start_ms",
///                "end_ms", "timings_ms": {...}, "delivery",
///                "transport_status": {"code", "message"}, "http_status",
///                "classification", "reason", "retry_after_ms", "do_not_retry",
///                "downstream_request_id", "budget_balance",
///                "deadline_remaining_ms", "delay_after_ms", "delay_source",
///                "resend_count", "redirects", "trace_id", "span_id",
///                "trace_flags"}]}
///
/// Durations are milliseconds (fractional when not whole); absent values are
/// null (`deadline_remaining_ms` is null when there was no deadline; the
/// trace ids, lower-case hex, are null when the attempt carried no valid
/// `traceparent`). Never
/// throws; invalid UTF-8 is replaced.
std::string TraceToJson(const CallResult& result, const TraceOptions& options = {});

/// A `CallListener` that renders the call's trace when it finishes and hands
/// it to `sink` (if any); `json()` returns the last one. One recorder per call
/// at a time (not thread-safe); chain it with other listeners through
/// `ListenerChain` (metrics.h).
class TraceRecorder final : public CallListener {
 public:
  explicit TraceRecorder(TraceOptions options = {},
                         std::function<void(const std::string&)> sink = nullptr)
      : options_(std::move(options)), sink_(std::move(sink)) {}

  void OnFinish(const CallResult& result) override;

  /// The last call's trace; empty before any call finished.
  const std::string& json() const { return json_; }
  TraceOptions& options() { return options_; }

 private:
  TraceOptions options_;
  std::function<void(const std::string&)> sink_;
  std::string json_;
};

}  // namespace saferetry

#endif  // SAFERETRY_TRACE_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/trace.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "nlohmann/json.hpp"
#include "saferetry/redaction.h"
#include "saferetry/trace_context.h"

namespace saferetry {
namespace {

using nlohmann::json;

// Milliseconds: an integer when whole, else fractional.
json Ms(Duration d) {
  if (d.count() % 1000000 == 0) return json(d.count() / 1000000);
  return json(static_cast<double>(d.count()) / 1e6);
}

json StatusJson(const absl::Status& s, const Redactor& redactor) {
  return json{{"code", absl::StatusCodeToString(s.code())},
              {"message", redactor.Text(std::string(s.message()))}};
}

json HeadersJson(const Headers& headers, const Redactor& redactor) {
  json out = json::array();
  for (const auto& [name, value] : headers) out.push_back({name, redactor.Value(name, value)});
  return out;
}

json EventJson(const AttemptEvidence& ev, TimePoint origin, const Redactor& redactor) {
  json e = json::object();
  e["number"] = ev.number;
  e["kind"] = ev.is_status_query ? "status_query" : "attempt";
  e["start_ms"] = Ms(ev.start - origin);
  e["end_ms"] = Ms(ev.end - origin);
  e["timings_ms"] = {{"dns", Ms(ev.timings.dns)},
                     {"connect", Ms(ev.timings.connect)},
                     {"tls", Ms(ev.timings.tls)},
                     {"request_written", Ms(ev.timings.request_written)},
                     {"first_byte", Ms(ev.timings.first_byte)},
                     {"total", Ms(ev.timings.total)}};
  // The phase in which the attempt's time ran out; null when it did not.
  e["timed_out_phase"] = ev.timings.timed_out == Phase::kNone
                             ? json(nullptr)
                             : json(std::string(PhaseName(ev.timings.timed_out)));
  e["delivery"] = DeliveryName(ev.delivery);
  e["transport_status"] = StatusJson(ev.transport_status, redactor);
  e["http_status"] = ev.http_status.has_value() ? json(*ev.http_status) : json(nullptr);
  e["classification"] = AttemptClassName(ev.classification);
  e["reason"] = std::string(ev.reason);
  e["retry_after_ms"] =
      ev.hints.retry_after.has_value() ? Ms(*ev.hints.retry_after) : json(nullptr);
  e["do_not_retry"] = ev.hints.do_not_retry;
  e["downstream_request_id"] =
      ev.downstream_request_id.empty() ? json(nullptr) : json(ev.downstream_request_id);
  e["budget_balance"] = ev.budget_balance;
  e["deadline_remaining_ms"] =
      ev.deadline_remaining == Duration::max() ? json(nullptr) : Ms(ev.deadline_remaining);
  if (ev.delay_after.has_value()) {
    e["delay_after_ms"] = Ms(*ev.delay_after);
    e["delay_source"] = ev.delay_from_server_hint ? "server_hint" : "backoff";
  } else {
    e["delay_after_ms"] = nullptr;
    e["delay_source"] = nullptr;
  }
  e["resend_count"] = ev.resend_count;
  e["redirects"] = ev.redirects;
  // The traceparent sent with the attempt; null when none.
  if (IsValidTraceId(ev.trace_id)) {
    static constexpr char kHex[] = "0123456789abcdef";
    e["trace_id"] = TraceIdHex(ev.trace_id);
    e["span_id"] = SpanIdHex(ev.span_id);
    e["trace_flags"] = std::string{kHex[ev.trace_flags >> 4], kHex[ev.trace_flags & 0xf]};
  } else {
    e["trace_id"] = nullptr;
    e["span_id"] = nullptr;
    e["trace_flags"] = nullptr;
  }
  return e;
}

}  // namespace

std::string TraceToJson(const CallResult& result, const TraceOptions& options) {
  const Redactor redactor(options.redact_headers);
  TimePoint origin{};
  if (options.call_start.has_value()) {
    origin = *options.call_start;
  } else if (!result.evidence.empty()) {
    origin = result.evidence.front().start;
  }

  json t = json::object();
  if (!options.request_id.empty()) {
    t["request_id"] = options.request_id;
  } else if (result.idempotency_key.has_value()) {
    t["request_id"] = *result.idempotency_key;
  } else {
    t["request_id"] = nullptr;
  }
  t["idempotency_key"] =
      result.idempotency_key.has_value() ? json(*result.idempotency_key) : json(nullptr);
  t["outcome"] = OutcomeName(result.outcome);
  t["stop_reason"] = StopReasonName(result.stop_reason);
  if (!result.budget_refusal.empty()) t["budget_refusal"] = result.budget_refusal;
  t["status"] = StatusJson(result.status, redactor);
  t["attempts"] = result.attempts;
  t["status_queries"] = result.status_queries;
  t["resolved_by_status_query"] = result.resolved_by_status_query;
  t["elapsed_ms"] = Ms(result.elapsed);
  t["final_http_status"] =
      result.last_response.has_value() ? json(result.last_response->status_code) : json(nullptr);
  if (options.request != nullptr) {
    t["request"] = {{"method", options.request->method},
                    {"url", redactor.Url(options.request->url)},
                    {"headers", HeadersJson(options.request->headers, redactor)}};
  }
  if (options.include_response_headers) {
    t["response_headers"] = result.last_response.has_value()
                                ? HeadersJson(result.last_response->headers, redactor)
                                : json(nullptr);
  }
  json events = json::array();
  for (const AttemptEvidence& ev : result.evidence)
    events.push_back(EventJson(ev, origin, redactor));
  t["events"] = std::move(events);
  return t.dump(options.indent, ' ', false, json::error_handler_t::replace);
}

void TraceRecorder::OnFinish(const CallResult& result) {
  json_ = TraceToJson(result, options_);
  if (sink_) sink_(json_);
}

}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "tools/cli/report.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "saferetry/journal.h"
#include "saferetry/redaction.h"
#include "saferetry/trace_context.h"

namespace saferetry {
namespace internal {
namespace {

absl::string_view AsAbsl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string Millis(Duration d) {
  return absl::StrFormat("%.1fms", std::chrono::duration<double, std::milli>(d).count());
}

std::string Count(int n, std::string_view one, std::string_view many) {
  return absl::StrCat(n, " ", AsAbsl(n == 1 ? one : many));
}

}  // namespace

int ExitCodeFor(Outcome outcome) {
  switch (outcome) {
    case Outcome::kSucceeded:
      return kExitSucceeded;
    case Outcome::kFailed:
      return kExitFailed;
    case Outcome::kUnknown:
      return kExitUnknown;
  }
  return kExitUnknown;
}

std::optional<std::string_view> ResolvedBy(const CallResult& result) {
  // The library's one vocabulary (saferetry::ResolvedBy), as the journal
  // stores it.
  if (result.outcome == Outcome::kUnknown || result.resolved_by == saferetry::ResolvedBy::kNone) {
    return std::nullopt;
  }
  return ResolvedByName(result.resolved_by);
}

nlohmann::ordered_json ReconcileJson(std::string_view key, const CallResult& result) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  j["idempotency_key"] = std::string(key);
  j["outcome"] = std::string(OutcomeName(result.outcome));
  j["stop_reason"] = std::string(StopReasonName(result.stop_reason));
  if (std::optional<std::string_view> by = ResolvedBy(result)) {
    j["resolved_by"] = std::string(*by);
  } else {
    j["resolved_by"] = nullptr;
  }
  if (result.last_response.has_value()) {
    j["http_status"] = result.last_response->status_code;
  } else if (!result.evidence.empty() && result.evidence.back().http_status.has_value()) {
    j["http_status"] = *result.evidence.back().http_status;
  } else {
    j["http_status"] = nullptr;
  }
  return j;
}

std::string ReconcileText(std::string_view key, const CallResult& result) {
  return ReconcileJson(key, result)
      .dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string FormatWallTime(WallTime t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromChrono(t), absl::UTCTimeZone());
}

std::string SkippedText(const SkippedIntent& skipped) {
  const Intent& intent = skipped.intent;
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  j["idempotency_key"] = intent.key;
  j["skipped"] = std::string(SkipReasonName(skipped.why));
  j["state"] = std::string(IntentStateName(intent.state));
  const bool claimed = !intent.claim_owner.empty();
  j["claim_owner"] = claimed ? nlohmann::ordered_json(intent.claim_owner) : nullptr;
  j["claim_until"] = claimed ? nlohmann::ordered_json(FormatWallTime(intent.claim_until)) : nullptr;
  j["created"] = FormatWallTime(intent.created);
  j["updated"] = FormatWallTime(intent.updated);
  j["deadline"] = FormatWallTime(intent.deadline);
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string ReconcileSummaryLine(const ReconcileReport& report) {
  const int resolved = report.succeeded + report.failed;
  std::optional<WallTime> next_claim_end;
  for (const SkippedIntent& s : report.skipped) {
    if (s.why != SkipReason::kClaimed) continue;
    if (!next_claim_end.has_value() || s.intent.claim_until < *next_claim_end) {
      next_claim_end = s.intent.claim_until;
    }
  }
  std::string claimed = absl::StrCat(report.CountSkipped(SkipReason::kClaimed), " claimed");
  if (next_claim_end.has_value()) {
    absl::StrAppend(&claimed, " (the next claim ends ", FormatWallTime(*next_claim_end), ")");
  }
  return absl::StrCat("saferetry: reconcile: ", report.tried.size(), " tried (", resolved,
                      " resolved: ", report.succeeded, " succeeded, ", report.failed, " failed; ",
                      report.unknown, " still unknown), ", claimed, ", ",
                      report.CountSkipped(SkipReason::kInFlight), " in flight, ",
                      report.CountSkipped(SkipReason::kTooRecent), " too recent, ",
                      report.CountSkipped(SkipReason::kNotReached), " not reached");
}

nlohmann::ordered_json SummaryJson(const CallResult& result, Duration elapsed) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  j["outcome"] = std::string(OutcomeName(result.outcome));
  j["stop_reason"] = std::string(StopReasonName(result.stop_reason));
  j["attempts"] = result.attempts;
  j["status_queries"] = result.status_queries;
  if (result.last_response.has_value()) {
    j["http_status"] = result.last_response->status_code;
  } else {
    j["http_status"] = nullptr;
  }
  if (result.idempotency_key.has_value()) {
    j["idempotency_key"] = *result.idempotency_key;
  } else {
    j["idempotency_key"] = nullptr;
  }
  if (std::optional<std::string_view> by = ResolvedBy(result)) {
    j["resolved_by"] = std::string(*by);
  } else {
    j["resolved_by"] = nullptr;
  }
  j["elapsed_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count();
  if (result.last_response.has_value()) {
    j["body"] = result.last_response->body;
  } else {
    j["body"] = nullptr;
  }
  return j;
}

std::string SummaryText(const CallResult& result, Duration elapsed) {
  return SummaryJson(result, elapsed)
      .dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string OutcomeLine(const CallResult& result) {
  std::string line = absl::StrCat("saferetry: ", AsAbsl(OutcomeName(result.outcome)), " (",
                                  AsAbsl(StopReasonName(result.stop_reason)), ") after ",
                                  Count(result.attempts, "attempt", "attempts"));
  if (result.status_queries > 0) {
    absl::StrAppend(&line, " and ", Count(result.status_queries, "status query", "status queries"));
  }
  if (result.last_response.has_value()) {
    absl::StrAppend(&line, ", HTTP ", result.last_response->status_code);
    if (result.resolved_by_status_query) absl::StrAppend(&line, " from the status query");
  } else if (!result.last_transport_status.ok()) {
    // Transport messages may quote the URL: never with its credentials.
    absl::StrAppend(&line, ", ",
                    RedactUrlsInText(std::string(result.last_transport_status.message())));
  }
  if (result.idempotency_key.has_value()) {
    absl::StrAppend(&line, "; idempotency key ", *result.idempotency_key);
  }
  if (result.outcome == Outcome::kUnknown) {
    absl::StrAppend(&line,
                    "; the request may have taken effect: check with the server using this key "
                    "before sending it again");
  }
  return line;
}

std::string DescribeEvidence(const AttemptEvidence& ev) {
  std::string line = absl::StrCat(ev.is_status_query ? "status query " : "attempt ", ev.number,
                                  ": delivery=", AsAbsl(DeliveryName(ev.delivery)));
  if (ev.http_status.has_value()) absl::StrAppend(&line, " http=", *ev.http_status);
  if (!ev.transport_status.ok()) {
    absl::StrAppend(&line, " transport=\"", RedactUrlsInText(ev.transport_status.ToString()), "\"");
  }
  absl::StrAppend(&line, " class=", AsAbsl(AttemptClassName(ev.classification)), " (",
                  AsAbsl(ev.reason), ")", " took=", Millis(ev.end - ev.start));
  if (ev.timings.timed_out != Phase::kNone) {
    absl::StrAppend(&line, " timed_out=", AsAbsl(PhaseName(ev.timings.timed_out)));
  }
  if (ev.deadline_remaining != Duration::max()) {
    absl::StrAppend(&line, " remaining=", Millis(ev.deadline_remaining));
  }
  if (ev.hints.retry_after.has_value()) {
    absl::StrAppend(&line, " retry_after=", Millis(*ev.hints.retry_after));
  }
  if (ev.hints.do_not_retry) absl::StrAppend(&line, " do_not_retry");
  if (!ev.downstream_request_id.empty()) {
    absl::StrAppend(&line, " request_id=", ev.downstream_request_id);
  }
  if (ev.redirects > 0) absl::StrAppend(&line, " redirects=", ev.redirects);
  // The traceparent sent (e.g. given with -H): find the attempt in a tracing backend.
  if (IsValidTraceId(ev.trace_id)) {
    absl::StrAppend(&line, " trace=", TraceIdHex(ev.trace_id), " span=", SpanIdHex(ev.span_id));
  }
  if (ev.delay_after.has_value()) {
    absl::StrAppend(&line, " next_wait=", Millis(*ev.delay_after),
                    ev.delay_from_server_hint ? " (server hint)" : " (backoff)");
  }
  return line;
}

}  // namespace internal
}  // namespace saferetry

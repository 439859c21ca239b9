// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// What the command-line tool reports about a finished call: the exit code,
// the --summary-json object, the outcome line and the --verbose evidence
// lines. Pure functions of a `CallResult`, so each row of the summary is
// testable without a server.

#ifndef SAFERETRY_TOOLS_CLI_REPORT_H_
#define SAFERETRY_TOOLS_CLI_REPORT_H_

#include <optional>
#include <string>
#include <string_view>

#include "nlohmann/json.hpp"
#include "saferetry/reconciler.h"
#include "saferetry/result.h"

namespace saferetry {
namespace internal {

/// Exit codes of the tool.
inline constexpr int kExitSucceeded = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUnknown = 2;
/// Usage error or bad input (BSD sysexits EX_USAGE).
inline constexpr int kExitUsage = 64;

/// The journal (--journal) cannot be opened, read or written (BSD sysexits
/// EX_IOERR).
inline constexpr int kExitJournal = 74;
/// 0 for kSucceeded, 1 for kFailed, 2 for kUnknown.
int ExitCodeFor(Outcome outcome);

/// "response" when the outcome rests on a response to the request,
/// "status_query" when a status answer proved the effect, nullopt when
/// nothing decided it: always nullopt for kUnknown, and for a kFailed call
/// that never got a response (refused connections, a deadline too short).
std::optional<std::string_view> ResolvedBy(const CallResult& result);

/// The --summary-json object: outcome, stop_reason, attempts,
/// status_queries, http_status, idempotency_key, resolved_by, elapsed_ms and
/// body. `elapsed` is what the tool reports as elapsed_ms (whole
/// milliseconds, rounded down). A body that is not valid UTF-8 is written
/// with U+FFFD replacements by `SummaryText`.
nlohmann::ordered_json SummaryJson(const CallResult& result, Duration elapsed);

/// `SummaryJson` as one line of text (no trailing newline); never throws.
std::string SummaryText(const CallResult& result, Duration elapsed);

/// One line of `saferetry reconcile`'s output for an intent it tried:
/// idempotency_key, outcome, stop_reason, resolved_by ("status_query",
/// "response" or null) and http_status (the answer that decided it, else the
/// last answer seen, else null), in that order.
nlohmann::ordered_json ReconcileJson(std::string_view key, const CallResult& result);
/// `ReconcileJson` as one line of text (no trailing newline); never throws.
std::string ReconcileText(std::string_view key, const CallResult& result);

/// One line of `saferetry reconcile`'s output for an unfinished intent it
/// did not try: idempotency_key, skipped ("claimed", "in_flight",
/// "too_recent", "not_reached"), state, claim_owner (null when none),
/// claim_until, created, updated and deadline (RFC 3339 UTC with
/// milliseconds; claim_until null when none), in that order; never throws.
std::string SkippedText(const SkippedIntent& skipped);

/// The run's last line on stderr: "saferetry: reconcile: 3 tried (2
/// resolved: 1 succeeded, 1 failed; 1 still unknown), 1 claimed (the next
/// claim ends 2026-12-01T12:00:02.000Z), 0 in flight, 0 too recent, 0 not
/// reached".
std::string ReconcileSummaryLine(const ReconcileReport& report);

/// RFC 3339 UTC with milliseconds: "2026-12-01T12:00:02.000Z".
std::string FormatWallTime(WallTime t);

/// The line printed on stderr when --summary-json is not given, e.g.
/// "saferetry: SUCCEEDED (success) after 1 attempt, HTTP 201" or
/// "saferetry: UNKNOWN (ambiguous_unresolved) after 1 attempt; idempotency
/// key 8e03...: the request may have taken effect, ...".
std::string OutcomeLine(const CallResult& result);

/// One --verbose line for an attempt or status query, e.g.
/// "attempt 1: delivery=response_received http=503 class=retryable_transient
/// (503: ...) took=3.1ms remaining=1996.2ms retry_after=1000.0ms
/// next_wait=1000.0ms (server hint)".
std::string DescribeEvidence(const AttemptEvidence& evidence);

}  // namespace internal
}  // namespace saferetry

#endif  // SAFERETRY_TOOLS_CLI_REPORT_H_

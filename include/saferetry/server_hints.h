// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Server hints: `Retry-After` (RFC 9110 §10.2.3), its millisecond variants
// `retry-after-ms` and `x-ms-retry-after-ms`, a configurable "do not retry"
// header, and what the server says about the idempotency key
// (`Idempotency-Key-State`, `Idempotent-Replayed`; docs/server-contract.md).
// A delay hint is a floor under the backoff: the call waits the longer of
// the two (docs/adr/0014-retry-after-is-a-floor.md). A hint above a maximum
// stops the call (`kRetryAfterTooLong`) instead of being shortened; the
// deadline beats both (the call gives up at once when the hint alone would
// overshoot it).
//
// An HTTP-date `Retry-After` is measured against the response's own `Date`
// header when present, so the client's clock skew does not matter; else
// against the local wall clock.
//
// Which delay header wins. When several are present the first valid one in
// this order is used:
//   1. `retry-after-ms`       (milliseconds, 1*DIGIT)
//   2. `x-ms-retry-after-ms`  (milliseconds, 1*DIGIT)
//   3. `Retry-After`          (delta-seconds or an HTTP-date)
// The millisecond headers come first because they are the more precise
// statement of the same wish (servers that send them send a rounded-up
// `Retry-After` beside them for older clients). An invalid value counts as
// absent, so the next header in the order is tried. Each header's first
// occurrence decides for that header.
//
// @code
//   Headers h = {{"Retry-After", "2"}, {"retry-after-ms", "1500"}};
//   ExtractServerHints(h, wall_now, {}).retry_after;  // 1500 ms
// @endcode

#ifndef SAFERETRY_SERVER_HINTS_H_
#define SAFERETRY_SERVER_HINTS_H_

#include <optional>
#include <string>
#include <string_view>

#include "saferetry/clock.h"
#include "saferetry/request.h"
#include "saferetry/result.h"

namespace saferetry {

/// How hints are read. Defaults: `Retry-After` honoured up to 60 s, no
/// do-not-retry header.
struct HintOptions {
  /// The longest hint the call honours. A longer one is reported clamped
  /// (`ServerHints::retry_after_above_max`) and stops the call. > 0.
  Duration max_retry_after = std::chrono::seconds(60);
  /// A response header whose presence means "do not retry" (e.g.
  /// "X-Should-Retry: false" style APIs use a value; here presence with any
  /// value other than "true" counts). Empty = none.
  std::string do_not_retry_header;
};

/// Parses an HTTP-date in the three forms RFC 9110 §5.6.7 requires recipients
/// to accept: IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT"), RFC 850
/// ("Sunday, 06-Nov-94 08:49:37 GMT") and asctime ("Sun Nov  6 08:49:37 1994").
/// The zone of the IMF-fixdate and RFC 850 forms may also be written `UTC`
/// (as some servers do); it is read as `GMT`. Any other zone is rejected.
/// Returns nullopt for anything else.
std::optional<WallTime> ParseHttpDate(std::string_view value);

/// Parses a `Retry-After` value: delta-seconds (1*DIGIT) or an HTTP-date.
/// A date is measured against `date_header` when it parses, else against
/// `wall_now`; a past date gives 0. Invalid values ("-1", "1.0", garbage)
/// give nullopt, i.e. no hint. Not clamped.
std::optional<Duration> ParseRetryAfter(std::string_view value,
                                        std::optional<std::string_view> date_header,
                                        WallTime wall_now);

/// Parses a `retry-after-ms` / `x-ms-retry-after-ms` value: a non-negative
/// integer count of milliseconds (1*DIGIT, optional surrounding whitespace).
/// A sign, a fraction, an exponent or an empty value gives nullopt (no hint).
/// Values too large for `Duration` saturate at `Duration::max()`. Not clamped.
std::optional<Duration> ParseRetryAfterMs(std::string_view value);

/// Parses an `Idempotency-Key-State` value, ignoring case and surrounding
/// whitespace: "completed", "processing", "abandoned", "expired", "unknown",
/// "fenced", "rejected". Anything else (including empty) is `KeyState::kNone`.
KeyState ParseKeyState(std::string_view value);

/// Reads the hints of one response:
/// - `retry_after` from `retry-after-ms`, `x-ms-retry-after-ms` or
///   `Retry-After` (with `Date`), in that order of precedence (see the top of
///   this file), clamped to `options.max_retry_after`, with
///   `retry_after_above_max` set when it was longer;
/// - `do_not_retry` from `options.do_not_retry_header`;
/// - `key_state` from `Idempotency-Key-State` (see `ParseKeyState`);
/// - `replayed` from `Idempotent-Replayed`: true only for the value "true" in
///   any case (surrounding whitespace ignored).
/// Header names are matched without regard to case; the first occurrence of
/// each name decides. Never fails: unreadable headers give no hint.
/// Thread-safe (a pure function).
ServerHints ExtractServerHints(const Headers& headers, WallTime wall_now,
                               const HintOptions& options);
/// The same, reading `clock.WallNow()` only when a `Retry-After` date needs
/// it (no valid `Date` header to measure it against): what a call does, so
/// that an answer without such a date costs no clock read. One pass over the
/// headers.
ServerHints ExtractServerHints(const Headers& headers, Clock& clock, const HintOptions& options);

}  // namespace saferetry

#endif  // SAFERETRY_SERVER_HINTS_H_

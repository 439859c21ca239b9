// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Server hints: `Retry-After` (RFC 9110 §10.2.3) and a configurable
// "do not retry" header. A hint replaces the backoff delay; hints above a
// maximum are clamped; the deadline beats both (the call gives up at once when
// the hint would overshoot it).
//
// An HTTP-date `Retry-After` is measured against the response's own `Date`
// header when present, so the client's clock skew does not matter; else
// against the local wall clock.

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
  /// Longer hints are clamped to this. > 0.
  Duration max_retry_after = std::chrono::seconds(60);
  /// A response header whose presence means "do not retry" (e.g.
  /// "X-Should-Retry: false" style APIs use a value; here presence with any
  /// value other than "true" counts). Empty = none.
  std::string do_not_retry_header;
};

/// Parses an HTTP-date in the three forms RFC 9110 §5.6.7 requires recipients
/// to accept: IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT"), RFC 850
/// ("Sunday, 06-Nov-94 08:49:37 GMT") and asctime ("Sun Nov  6 08:49:37 1994").
std::optional<WallTime> ParseHttpDate(std::string_view value);

/// Parses a `Retry-After` value: delta-seconds (1*DIGIT) or an HTTP-date.
/// A date is measured against `date_header` when it parses, else against
/// `wall_now`; a past date gives 0. Invalid values ("-1", "1.0", garbage)
/// give nullopt, i.e. no hint. Not clamped.
std::optional<Duration> ParseRetryAfter(std::string_view value,
                                        std::optional<std::string_view> date_header,
                                        WallTime wall_now);

/// Reads `Retry-After`, `Date` and the do-not-retry header from `headers`,
/// clamping the delay to `options.max_retry_after`.
ServerHints ExtractServerHints(const Headers& headers, WallTime wall_now,
                               const HintOptions& options);

}  // namespace saferetry

#endif  // SAFERETRY_SERVER_HINTS_H_

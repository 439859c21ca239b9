// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Retry-After, HTTP-date and deadline-header parsing. Input: the header value,
// optionally followed by '\n' and a Date header value.
//
// Properties: no crash; a parsed Retry-After is never negative; hints are
// clamped to max_retry_after; a parsed HTTP-date re-formatted as an
// IMF-fixdate parses back to the same instant.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "absl/time/time.h"
#include "saferetry/deadline.h"
#include "saferetry/server_hints.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const std::size_t nl = in.find('\n');
  const std::string_view value = in.substr(0, nl);
  std::optional<std::string_view> date;
  if (nl != std::string_view::npos) date = in.substr(nl + 1);
  // 2026-01-01T00:00:00Z.
  const saferetry::WallTime now = saferetry::WallTime{} + std::chrono::seconds(1767225600);

  const std::optional<saferetry::Duration> delay = saferetry::ParseRetryAfter(value, date, now);
  if (delay.has_value() && *delay < saferetry::Duration::zero()) std::abort();

  const std::optional<saferetry::WallTime> when = saferetry::ParseHttpDate(value);
  if (when.has_value()) {
    const absl::Time t = absl::FromChrono(*when);
    const std::string again = absl::FormatTime("%a, %d %b %Y %H:%M:%S GMT", t, absl::UTCTimeZone());
    const absl::CivilSecond cs = absl::ToCivilSecond(t, absl::UTCTimeZone());
    // Far dates saturate at the ends of the clock's range; only dates well inside it
    // must round-trip.
    if (cs.year() >= 1700 && cs.year() <= 2200) {
      const std::optional<saferetry::WallTime> back = saferetry::ParseHttpDate(again);
      if (!back.has_value() || *back != *when) std::abort();
    }
  }

  saferetry::Headers headers{{"Retry-After", std::string(value)}};
  if (date.has_value()) headers.emplace_back("Date", std::string(*date));
  saferetry::HintOptions options;
  const saferetry::ServerHints hints = saferetry::ExtractServerHints(headers, now, options);
  if (hints.retry_after.has_value() && (*hints.retry_after < saferetry::Duration::zero() ||
                                        *hints.retry_after > options.max_retry_after)) {
    std::abort();
  }
  // A hint above the maximum is reported at the maximum, and flagged.
  if (hints.retry_after_above_max && hints.retry_after != options.max_retry_after) std::abort();

  const saferetry::TimePoint steady = saferetry::TimePoint{} + std::chrono::seconds(1000);
  auto deadline = saferetry::DeadlineFromHeader(value, steady);
  if (deadline.ok() && !deadline->is_infinite() && deadline->at() < steady) std::abort();
  return 0;
}

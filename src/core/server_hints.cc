// Copyright 2026 The saferetry Authors. Licensed under the Apache License,
// Version 2.0.

#include "saferetry/server_hints.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "common/strings_internal.h"
#include "core/saturating.h"
#include "core/server_hints_internal.h"
#include "saferetry/request.h"

namespace saferetry {
namespace {

static_assert(std::is_same_v<WallTime::duration, Duration>, "system_clock must count nanoseconds");

using Rep = Duration::rep;

// Dates saturate to WallTime::min()/max(), so their difference must too.
using internal::SaturatingSub;

// Optional whitespace around a field value (RFC 9110 §5.6.3: SP / HTAB).
std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool AllDigits(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); });
}

// delta-seconds of any length: once the value passes what Duration can hold it
// saturates to Duration::max() (it is clamped to the configured maximum
// later anyway).
Duration ParseDeltaSeconds(std::string_view digits) {
  constexpr Rep kMaxSeconds = std::numeric_limits<Rep>::max() / std::nano::den;
  Rep seconds = 0;
  for (char c : digits) {
    seconds = seconds * 10 + (c - '0');
    if (seconds > kMaxSeconds) return Duration::max();
  }
  return std::chrono::seconds(seconds);
}

// The same for milliseconds.
Duration ParseDeltaMillis(std::string_view digits) {
  constexpr Rep kMaxMillis = std::numeric_limits<Rep>::max() / (std::nano::den / std::milli::den);
  Rep millis = 0;
  for (char c : digits) {
    millis = millis * 10 + (c - '0');
    if (millis > kMaxMillis) return Duration::max();
  }
  return std::chrono::milliseconds(millis);
}

using internal::EqualsIgnoreCase;

// Some servers write the zone of an IMF-fixdate or RFC 850 date as "UTC".
// It names the same instant as "GMT", so it is rewritten before parsing; the
// formats below then stay the strict RFC 9110 ones. Only a final " UTC"
// token is touched, so asctime (which has no zone) still rejects it.
// Where the wall time comes from: given, or read from a clock when needed.
struct WallSource {
  std::optional<WallTime> given;
  Clock* clock = nullptr;
  WallTime Get() const { return given.has_value() ? *given : clock->WallNow(); }
};

std::string NormalizeUtcZone(std::string_view trimmed) {
  std::string out(trimmed);
  constexpr std::string_view kUtc = "UTC";
  if (out.size() > kUtc.size() && std::string_view(out).substr(out.size() - kUtc.size()) == kUtc) {
    char const before = out[out.size() - kUtc.size() - 1];
    if (before == ' ' || before == '\t') {
      out.replace(out.size() - kUtc.size(), kUtc.size(), "GMT");
    }
  }
  return out;
}

// absl::Time spans far more than WallTime (nanoseconds since 1970, about
// ±292 years), so clamp before converting.
WallTime ToWallTime(absl::Time t) {
  if (t >= absl::FromChrono(WallTime::max())) return WallTime::max();
  if (t <= absl::FromChrono(WallTime::min())) return WallTime::min();
  return absl::ToChronoTime(t);
}

// The three forms of RFC 9110 §5.6.7. absl::ParseTime matches a space in the
// format against any run of whitespace (also none), skips whitespace at both
// ends, rejects trailing data and impossible dates ("31 Feb"), and reads
// weekday and month names case-insensitively, abbreviated or in full. It does
// not check the weekday against the date: a wrong weekday is accepted, since
// the date fields alone say which instant is meant.
constexpr char kImfFixdate[] = "%a, %d %b %Y %H:%M:%S GMT";
constexpr char kRfc850[] = "%A, %d-%b-%y %H:%M:%S GMT";
constexpr char kAsctime[] = "%a %b %e %H:%M:%S %Y";

// IMF-fixdate and asctime carry a four-digit year; %Y alone would also take
// "94" or "-1994".
bool FourDigitYear(absl::Time t) {
  auto const year = absl::ToCivilSecond(t, absl::UTCTimeZone()).year();
  return year >= 1000 && year <= 9999;
}

}  // namespace

std::optional<WallTime> ParseHttpDate(std::string_view value) {
  absl::TimeZone const utc = absl::UTCTimeZone();
  std::string const input = NormalizeUtcZone(TrimOws(value));
  absl::Time t;
  std::string error;
  if (absl::ParseTime(kImfFixdate, input, utc, &t, &error)) {
    if (!FourDigitYear(t)) return std::nullopt;
    return ToWallTime(t);
  }
  if (absl::ParseTime(kRfc850, input, utc, &t, &error)) {
    // RFC 850 has a two-digit year. RFC 9110 resolves it against the current
    // date, but this function has no clock, so the window is fixed:
    // 70-99 -> 1970-1999, 00-69 -> 2000-2069. Remap explicitly instead of
    // relying on the parser's own pivot.
    auto const cs = absl::ToCivilSecond(t, utc);
    auto const yy = static_cast<int>(((cs.year() % 100) + 100) % 100);
    auto const year = yy >= 70 ? 1900 + yy : 2000 + yy;
    absl::CivilSecond const fixed(year, cs.month(), cs.day(), cs.hour(), cs.minute(), cs.second());
    return ToWallTime(absl::FromCivil(fixed, utc));
  }
  if (absl::ParseTime(kAsctime, input, utc, &t, &error)) {
    if (!FourDigitYear(t)) return std::nullopt;
    return ToWallTime(t);
  }
  return std::nullopt;
}

namespace {

std::optional<Duration> RetryAfterFrom(std::string_view value,
                                       std::optional<std::string_view> date_header,
                                       const WallSource& wall) {
  auto const trimmed = TrimOws(value);
  if (trimmed.empty()) return std::nullopt;
  // delta-seconds = 1*DIGIT: no sign, no fraction, no exponent.
  if (AllDigits(trimmed)) return ParseDeltaSeconds(trimmed);

  auto const date = ParseHttpDate(trimmed);
  if (!date.has_value()) return std::nullopt;
  // Measure against the server's own clock when it told us what time it is:
  // then the client's clock skew cancels out. Ours is read only otherwise.
  std::optional<WallTime> reference;
  if (date_header.has_value()) reference = ParseHttpDate(*date_header);
  if (!reference.has_value()) reference = wall.Get();
  auto const delta =
      SaturatingSub(date->time_since_epoch().count(), reference->time_since_epoch().count());
  return Duration(std::max<Rep>(0, delta));
}

}  // namespace

std::optional<Duration> ParseRetryAfter(std::string_view value,
                                        std::optional<std::string_view> date_header,
                                        WallTime wall_now) {
  WallSource wall;
  wall.given = wall_now;
  return RetryAfterFrom(value, date_header, wall);
}

std::optional<Duration> ParseRetryAfterMs(std::string_view value) {
  auto const trimmed = TrimOws(value);
  if (trimmed.empty() || !AllDigits(trimmed)) return std::nullopt;
  return ParseDeltaMillis(trimmed);
}

KeyState ParseKeyState(std::string_view value) {
  struct Name {
    std::string_view text;
    KeyState state;
  };
  static constexpr Name kNames[] = {
      {"completed", KeyState::kCompleted}, {"processing", KeyState::kProcessing},
      {"abandoned", KeyState::kAbandoned}, {"expired", KeyState::kExpired},
      {"unknown", KeyState::kUnknown},     {"fenced", KeyState::kFenced},
      {"rejected", KeyState::kRejected},   {"pending_confirmation", KeyState::kPendingConfirmation},
  };
  auto const trimmed = TrimOws(value);
  for (auto const& name : kNames) {
    if (EqualsIgnoreCase(trimmed, name.text)) return name.state;
  }
  return KeyState::kNone;
}

namespace {

// ASCII case-insensitive equality with a lower-case `lower`, lengths first:
// most header names differ in length from the one looked for.
bool NameIs(std::string_view name, std::string_view lower) {
  if (name.size() != lower.size()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (absl::ascii_tolower(static_cast<unsigned char>(name[i])) != lower[i]) return false;
  }
  return true;
}

// Writes the hints of `headers` into `hints`, every field of it. `also`: a
// further header to find in the same pass (none when empty), its first value
// into `*also_value`.
void Extract(const Headers& headers, const WallSource& wall, const HintOptions& options,
             ServerHints& hints, std::string_view also = {},
             std::optional<std::string_view>* also_value = nullptr) {
  // One pass: the first occurrence of each name.
  std::optional<std::string_view> retry_after_ms, ms_retry_after_ms, retry_after, date, key_state,
      replayed, do_not_retry;
  const std::string_view do_not_retry_name = options.do_not_retry_header;
  for (const Header& h : headers) {
    const std::string_view name = h.first;
    switch (name.size()) {
      case 4:
        if (!date.has_value() && NameIs(name, "date")) date = h.second;
        break;
      case 11:
        if (!retry_after.has_value() && NameIs(name, "retry-after")) retry_after = h.second;
        break;
      case 14:
        if (!retry_after_ms.has_value() && NameIs(name, "retry-after-ms"))
          retry_after_ms = h.second;
        break;
      case 19:
        if (!ms_retry_after_ms.has_value() && NameIs(name, "x-ms-retry-after-ms")) {
          ms_retry_after_ms = h.second;
        } else if (!replayed.has_value() && NameIs(name, "idempotent-replayed")) {
          replayed = h.second;
        }
        break;
      case 21:
        if (!key_state.has_value() && NameIs(name, "idempotency-key-state")) key_state = h.second;
        break;
      default:
        break;
    }
    if (also_value != nullptr && !also.empty() && !also_value->has_value() &&
        EqualsIgnoreCase(name, also)) {
      *also_value = h.second;
    }
    if (!do_not_retry.has_value() && !do_not_retry_name.empty() &&
        EqualsIgnoreCase(name, do_not_retry_name)) {
      do_not_retry = h.second;
    }
  }

  // Field by field, in the caller's record: a record returned by value and
  // copied into it would be read back with wide loads that the processor
  // cannot forward from these narrow stores (a stall of a dozen cycles on
  // every answer).
  // Precedence (documented in server_hints.h): the millisecond headers first,
  // then Retry-After. An invalid value is as good as absent.
  std::optional<Duration> delay;
  if (retry_after_ms.has_value()) delay = ParseRetryAfterMs(*retry_after_ms);
  if (!delay.has_value() && ms_retry_after_ms.has_value()) {
    delay = ParseRetryAfterMs(*ms_retry_after_ms);
  }
  if (!delay.has_value() && retry_after.has_value()) {
    delay = RetryAfterFrom(*retry_after, date, wall);
  }
  hints.retry_after_above_max = false;
  if (delay.has_value()) {
    const Duration max = std::max(Duration::zero(), options.max_retry_after);
    hints.retry_after = std::min(*delay, max);
    hints.retry_after_above_max = *delay > max;
  } else {
    hints.retry_after.reset();
  }
  hints.key_state = key_state.has_value() ? ParseKeyState(*key_state) : KeyState::kNone;
  hints.replayed = replayed.has_value() && EqualsIgnoreCase(TrimOws(*replayed), "true");
  // Presence is the signal; only an explicit "true" (any case) keeps
  // retries allowed, so "X-Should-Retry: true" style headers also work.
  hints.do_not_retry =
      do_not_retry.has_value() && !EqualsIgnoreCase(TrimOws(*do_not_retry), "true");
}

}  // namespace

ServerHints ExtractServerHints(const Headers& headers, WallTime wall_now,
                               const HintOptions& options) {
  WallSource wall;
  wall.given = wall_now;
  ServerHints hints;
  Extract(headers, wall, options, hints);
  return hints;
}

ServerHints ExtractServerHints(const Headers& headers, Clock& clock, const HintOptions& options) {
  WallSource wall;
  wall.clock = &clock;
  ServerHints hints;
  Extract(headers, wall, options, hints);
  return hints;
}

namespace internal {

void ExtractServerHintsInto(const Headers& headers, Clock& clock, const HintOptions& options,
                            ServerHints& hints, std::string_view also,
                            std::optional<std::string_view>& also_value) {
  WallSource wall;
  wall.clock = &clock;
  Extract(headers, wall, options, hints, also, &also_value);
}

}  // namespace internal
}  // namespace saferetry

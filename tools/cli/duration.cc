// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "tools/cli/duration.h"

#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace saferetry {
namespace internal {
namespace {

constexpr std::size_t kMaxShown = 64;

absl::string_view AsAbsl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string Quoted(std::string_view text) {
  return absl::StrCat("\"", absl::CHexEscape(AsAbsl(text.substr(0, kMaxShown))),
                      text.size() > kMaxShown ? "\"..." : "\"");
}

absl::Status Invalid(std::string_view text, std::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid duration ", Quoted(text), ": ", AsAbsl(why),
                   " (expected a whole number and a unit: ms, s, m or h, e.g. 1500ms, 2s, 1m)"));
}

// Nanoseconds per unit; 0 when `unit` is not one.
std::int64_t UnitNanos(std::string_view unit) {
  if (unit == "ms") return 1'000'000;
  if (unit == "s") return 1'000'000'000;
  if (unit == "m") return 60'000'000'000;
  if (unit == "h") return 3'600'000'000'000;
  return 0;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

absl::StatusOr<Duration> ParseDuration(std::string_view text) {
  if (text.empty()) return Invalid(text, "empty");
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  std::int64_t total = 0;
  std::size_t i = 0;
  while (i < text.size()) {
    if (!IsDigit(text[i])) {
      if (text[i] == '-') return Invalid(text, "must not be negative");
      if (text[i] == '.') return Invalid(text, "fractions are not supported");
      return Invalid(text, absl::StrCat("expected a digit at position ", i));
    }
    // The number: accumulate while it fits; remember overflow.
    std::int64_t number = 0;
    bool too_large = false;
    while (i < text.size() && IsDigit(text[i])) {
      const int digit = text[i] - '0';
      if (number > (kMax - digit) / 10) too_large = true;
      if (!too_large) number = number * 10 + digit;
      ++i;
    }
    const std::size_t unit_start = i;
    while (i < text.size() && !IsDigit(text[i])) ++i;
    const std::string_view unit = text.substr(unit_start, i - unit_start);
    if (unit.empty()) return Invalid(text, "missing unit");
    const std::int64_t nanos = UnitNanos(unit);
    if (nanos == 0) {
      if (!unit.empty() && unit.front() == '.') return Invalid(text, "fractions are not supported");
      return Invalid(text, absl::StrCat("unknown unit ", Quoted(unit)));
    }
    if (too_large || number > kMax / nanos || total > kMax - number * nanos) {
      return Invalid(text, "too large");
    }
    total += number * nanos;
  }
  if (total == 0) return Invalid(text, "must be > 0");
  return Duration(total);
}

}  // namespace internal
}  // namespace saferetry

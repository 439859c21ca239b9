// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include <chrono>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "saferetry/transport.h"

namespace saferetry {
namespace {

std::string Nanos(Duration d) { return absl::StrCat(static_cast<long long>(d.count()), "ns"); }

}  // namespace

absl::Status ValidatePhaseLimits(const PhaseLimits& limits, std::string_view prefix) {
  const auto error = [&](std::string_view field, const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(absl::string_view(prefix.data(), prefix.size()),
                                                   absl::string_view(field.data(), field.size()),
                                                   ": ", what));
  };
  // At most a year: a longer limit is none, and would overflow the
  // arithmetic of the transports' timers.
  constexpr Duration kYear = std::chrono::hours(24 * 365);
  const std::pair<std::string_view, Duration> durations[] = {{"connect", limits.connect},
                                                             {"first_byte", limits.first_byte}};
  for (const auto& [field, d] : durations) {
    if (d < Duration(0)) return error(field, "must be >= 0, got " + Nanos(d));
    if (d > kYear) return error(field, "must be at most a year, got " + Nanos(d));
  }
  if (limits.speed_limit < 0) {
    return error("speed_limit",
                 absl::StrCat("must be >= 0 bytes per second, got ", limits.speed_limit));
  }
  if (limits.speed_time < Duration(0)) {
    return error("speed_time", "must be >= 0, got " + Nanos(limits.speed_time));
  }
  if (limits.speed_time % std::chrono::seconds(1) != Duration(0)) {
    return error("speed_time", "libcurl counts whole seconds, got " + Nanos(limits.speed_time));
  }
  if (limits.speed_time > kYear) {
    return error("speed_time", "must be at most a year, got " + Nanos(limits.speed_time));
  }
  if ((limits.speed_limit > 0) != (limits.speed_time > Duration(0))) {
    return limits.speed_limit > 0 ? error("speed_limit", "given without speed_time")
                                  : error("speed_time", "given without speed_limit");
  }
  return absl::OkStatus();
}

PhaseLimits MergePhaseLimits(const PhaseLimits& limits, const PhaseLimits& defaults) {
  PhaseLimits out = limits;
  if (out.connect == Duration(0)) out.connect = defaults.connect;
  if (out.first_byte == Duration(0)) out.first_byte = defaults.first_byte;
  // The low-speed pair goes together.
  if (out.speed_limit == 0 && out.speed_time == Duration(0)) {
    out.speed_limit = defaults.speed_limit;
    out.speed_time = defaults.speed_time;
  }
  return out;
}

}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "orders_service/duration_flag.h"

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"

namespace saferetry {
namespace example {

absl::StatusOr<std::chrono::milliseconds> ParseDurationFlag(std::string_view value,
                                                            std::string_view field) {
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(field),
                     ": expected a whole number with ms, s, m or h (e.g. 250ms, 30s), got \"",
                     std::string(value), "\""));
  };
  std::size_t digits = 0;
  while (digits < value.size() && value[digits] >= '0' && value[digits] <= '9') ++digits;
  if (digits == 0 || digits > 12) return bad();
  std::int64_t n = 0;
  for (std::size_t i = 0; i < digits; ++i) n = n * 10 + (value[i] - '0');
  const std::string_view unit = value.substr(digits);
  std::int64_t scale;
  if (unit == "ms") {
    scale = 1;
  } else if (unit.empty() || unit == "s") {
    scale = 1000;
  } else if (unit == "m") {
    scale = 60 * 1000;
  } else if (unit == "h") {
    scale = 3600 * 1000;
  } else {
    return bad();
  }
  return std::chrono::milliseconds(n * scale);
}

}  // namespace example
}  // namespace saferetry

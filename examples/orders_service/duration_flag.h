// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Duration flags for the example executables: "250ms", "30s", "5m", "24h",
// or a bare number of seconds.

#ifndef SAFERETRY_EXAMPLES_ORDERS_SERVICE_DURATION_FLAG_H_
#define SAFERETRY_EXAMPLES_ORDERS_SERVICE_DURATION_FLAG_H_

#include <chrono>
#include <string_view>

#include "absl/status/statusor.h"

namespace saferetry {
namespace example {

/// A non-negative whole number followed by ms, s, m, h or nothing (seconds).
/// InvalidArgument naming `field` otherwise.
absl::StatusOr<std::chrono::milliseconds> ParseDurationFlag(std::string_view value,
                                                            std::string_view field);

}  // namespace example
}  // namespace saferetry

#endif  // SAFERETRY_EXAMPLES_ORDERS_SERVICE_DURATION_FLAG_H_

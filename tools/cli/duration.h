// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Command-line durations: a positive whole number followed by a unit, or a
// sequence of them ("1500ms", "2s", "1m", "1h", "1m30s"). Units: ms, s, m, h.
// Kept apart from the command line so it can be tested (and fuzzed) alone.

#ifndef SAFERETRY_TOOLS_CLI_DURATION_H_
#define SAFERETRY_TOOLS_CLI_DURATION_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "saferetry/clock.h"

namespace saferetry {
namespace internal {

/// Parses `text` as above. The total must be > 0 and fit in `Duration`.
/// Anything else (empty, a sign, a missing or unknown unit, a fraction,
/// spaces, zero, overflow) is InvalidArgument with a message that quotes the
/// input; the caller prefixes the flag name.
absl::StatusOr<Duration> ParseDuration(std::string_view text);

}  // namespace internal
}  // namespace saferetry

#endif  // SAFERETRY_TOOLS_CLI_DURATION_H_

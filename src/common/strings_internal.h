// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Not API. Debian's Abseil has an `absl::string_view` distinct from
// `std::string_view`; these adapters let the library call absl's string
// helpers on the `std::string_view`s of its public types, in one place.
#ifndef SAFERETRY_SRC_COMMON_STRINGS_INTERNAL_H_
#define SAFERETRY_SRC_COMMON_STRINGS_INTERNAL_H_

#include <string_view>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace saferetry {
namespace internal {

inline absl::string_view AsAbsl(std::string_view s) { return {s.data(), s.size()}; }

/// ASCII case-insensitive equality (header names, tokens).
inline bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return absl::EqualsIgnoreCase(AsAbsl(a), AsAbsl(b));
}

}  // namespace internal
}  // namespace saferetry

#endif  // SAFERETRY_SRC_COMMON_STRINGS_INTERNAL_H_

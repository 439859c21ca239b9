// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Not API. Debian's Abseil has an `absl::string_view` distinct from
// `std::string_view`; these adapters let the library call absl's string
// helpers on the `std::string_view`s of its public types, in one place.
#ifndef SAFERETRY_SRC_COMMON_STRINGS_INTERNAL_H_
#define SAFERETRY_SRC_COMMON_STRINGS_INTERNAL_H_

#include <cstddef>
#include <string_view>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace saferetry {
namespace internal {

inline absl::string_view AsAbsl(std::string_view s) { return {s.data(), s.size()}; }

/// `c` in ASCII lower case; any other byte unchanged.
constexpr char AsciiLower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c + ('a' - 'A')) : c;
}

/// ASCII case-insensitive equality (header names, tokens, schemes). Inline
/// and length-first: it runs on every call, over every response header.
inline bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  // Most names arrive spelled as they are looked for: one compare of bytes.
  if (a == b) return true;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i] && AsciiLower(a[i]) != AsciiLower(b[i])) return false;
  }
  return true;
}

}  // namespace internal
}  // namespace saferetry

#endif  // SAFERETRY_SRC_COMMON_STRINGS_INTERNAL_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Not API. Status helpers shared by the validators.
#ifndef SAFERETRY_SRC_COMMON_STATUS_INTERNAL_H_
#define SAFERETRY_SRC_COMMON_STATUS_INTERNAL_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace saferetry {
namespace internal {

/// `s` with `prefix` before its message (the field's path, such as
/// "policy."); OK stays OK.
inline absl::Status Prefixed(std::string_view prefix, const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), std::string(prefix) + std::string(s.message()));
}

}  // namespace internal
}  // namespace saferetry

#endif  // SAFERETRY_SRC_COMMON_STATUS_INTERNAL_H_

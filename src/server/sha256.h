// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// SHA-256 (FIPS 180-4) for request digests, so that saferetry::server needs
// no cryptography library. Not for secrets: it is not constant-time.

#ifndef SAFERETRY_SRC_SERVER_SHA256_H_
#define SAFERETRY_SRC_SERVER_SHA256_H_

#include <string>
#include <string_view>

namespace saferetry {
namespace server {
namespace internal {

/// The digest of the concatenation of `parts`, as 64 lower-case hex digits.
std::string Sha256Hex(std::initializer_list<std::string_view> parts);

}  // namespace internal
}  // namespace server
}  // namespace saferetry

#endif  // SAFERETRY_SRC_SERVER_SHA256_H_

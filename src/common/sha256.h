// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// SHA-256 (FIPS 180-4) for body digests, so that the core needs no
// cryptography library. Not for secrets: it is not constant-time.

#ifndef SAFERETRY_SRC_SHA256_H_
#define SAFERETRY_SRC_SHA256_H_

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace saferetry {
namespace internal {

/// Incremental SHA-256.
class Sha256 {
 public:
  Sha256();
  void Update(std::string_view bytes);
  /// The digest; the object must not be updated afterwards.
  std::array<std::uint8_t, 32> Finish();

 private:
  void Block(const std::uint8_t* p);

  std::array<std::uint32_t, 8> h_;
  std::array<std::uint8_t, 64> buffer_{};
  std::size_t buffered_ = 0;
  std::uint64_t length_ = 0;  // bytes
};

/// SHA-256 of `bytes` as 64 lower-case hex digits.
std::string Sha256Hex(std::string_view bytes);
/// SHA-256 of the concatenation of `parts`, as 64 lower-case hex digits.
std::string Sha256Hex(std::initializer_list<std::string_view> parts);

}  // namespace internal
}  // namespace saferetry

#endif  // SAFERETRY_SRC_SHA256_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Idempotency keys: one stable key per logical intent, sent on every attempt
// and status query, so the server can deduplicate and answer "what happened
// to this intent?". See docs/server-contract.md for the server's half.

#ifndef SAFERETRY_IDEMPOTENCY_H_
#define SAFERETRY_IDEMPOTENCY_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "absl/status/status.h"
#include "saferetry/random.h"

namespace saferetry {

/// The default header name, as in the IETF httpapi Idempotency-Key draft.
inline constexpr std::string_view kDefaultIdempotencyHeader = "Idempotency-Key";

/// How the key is written in the header.
enum class KeyForm {
  /// The key as is: `Idempotency-Key: 8e03978e-...` (what most APIs accept).
  kBare,
  /// The draft's structured-field string: `Idempotency-Key: "8e03978e-..."`.
  kQuotedString,
};

/// Whether a call sends a key.
enum class KeyMode {
  /// Mint one for non-idempotent requests (POST, PATCH, ...); none otherwise.
  kAuto,
  /// Always send one (minted unless the caller supplies it).
  kAlways,
  /// Never send one.
  kNever,
};

/// 1 to 255 visible ASCII characters (0x21-0x7E). InvalidArgument naming
/// "idempotency_key" otherwise.
absl::Status ValidateIdempotencyKey(std::string_view key);

/// A random (version 4, RFC 9562) UUID in lower-case 8-4-4-4-12 form, from two
/// `Bits64()` draws.
std::string GenerateUuidV4(Random& random);

/// The header value for `key` in `form` (quoted form escapes `"` and `\`).
std::string FormatIdempotencyKey(std::string_view key, KeyForm form);

/// Remembers which body each key was first used with, so a key reused for a
/// different body is refused before anything is sent. Bounded: the oldest
/// keys are forgotten past `capacity`. Thread-safe.
class KeyFingerprints {
 public:
  explicit KeyFingerprints(std::size_t capacity = 10000) : capacity_(capacity) {}
  /// OK the first time and whenever `key` comes back with the same method,
  /// URL and body; InvalidArgument naming "idempotency_key" when it was used
  /// for a different request.
  absl::Status CheckAndRemember(std::string_view key, std::string_view method,
                                std::string_view url, std::string_view body);

 private:
  std::size_t capacity_;
  std::mutex mu_;
  std::unordered_map<std::string, std::uint64_t> by_key_;
  std::deque<std::string> order_;
};

}  // namespace saferetry

#endif  // SAFERETRY_IDEMPOTENCY_H_

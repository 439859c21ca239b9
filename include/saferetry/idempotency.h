// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Idempotency keys: one stable key per logical intent, sent on every attempt
// and status query, so the server can deduplicate and answer "what happened
// to this intent?". See docs/server-contract.md for the server's half.
//
// Where keys come from. A key must be unguessable: another client that can
// predict it can replay or poison the intent. `MintIdempotencyKey()` draws
// from the operating system's CSPRNG (getrandom(2)); that is the default for
// production. `GenerateUuidV4(Random&)` draws from the injected `Random`
// seam so tests get scripted, repeatable keys; the library's `DefaultRandom()`
// is `absl::BitGen`, which Abseil documents as not suitable for
// cryptographic or security uses, so it is fine for jitter and tests but not
// the right source for production keys.
//
// @code
//   absl::StatusOr<std::string> key = saferetry::MintIdempotencyKey();
//   if (!key.ok()) return key.status();   // the OS CSPRNG was unavailable
//   // *key == "1b4e28ba-2fa1-4d2e-883f-0016d3cca427" (random)
// @endcode

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
#include "absl/status/statusor.h"
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
/// `Bits64()` draws. For tests and simulations: the key is only as
/// unpredictable as `random` (see the top of this file); production keys
/// come from `MintIdempotencyKey()`.
std::string GenerateUuidV4(Random& random);

/// A version 4 UUID (RFC 9562) in lower-case 8-4-4-4-12 form, whose 122
/// random bits come from the operating system's CSPRNG: getrandom(2),
/// retried on EINTR and short reads; /dev/urandom only when the kernel has
/// no getrandom (ENOSYS). It never touches any `Random`. Thread-safe; may
/// block only in early boot, until the kernel's pool is first seeded.
/// Each thread draws 512 bytes at a time (32 keys per system call) into a
/// page the kernel zeroes in a child process (MADV_WIPEONFORK), so a forked
/// child never repeats its parent's keys; used bytes are zeroed. Where the
/// kernel cannot wipe the page, every key is one getrandom(2) call.
/// Errors (nothing else is returned): `kInternal` whose message starts with
/// "getrandom:" or "/dev/urandom:" and names the errno, when the OS cannot
/// supply randomness.
absl::StatusOr<std::string> MintIdempotencyKey();

namespace internal {

/// The getrandom(2) call, replaceable in tests: returns the bytes written or
/// -1 with `errno` set.
using GetRandomFn = long (*)(void* buffer, std::size_t length, unsigned int flags);
/// Fills `length` bytes from the fallback source (/dev/urandom).
using FallbackFillFn = absl::Status (*)(unsigned char* buffer, std::size_t length);

/// Fills `buffer` with `length` bytes: calls `get_random` until every byte is
/// written, retrying EINTR and continuing after short reads; on ENOSYS hands
/// the rest to `fallback`; any other error (or a call that returns 0 bytes)
/// is `kInternal` "getrandom: ...". Not API: exposed for tests.
absl::Status FillFromOsRandom(unsigned char* buffer, std::size_t length, GetRandomFn get_random,
                              FallbackFillFn fallback);

/// The UUIDv4 text of 16 bytes, after setting the version and variant bits.
std::string UuidV4FromBytes(const unsigned char (&bytes)[16]);

}  // namespace internal

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
  absl::Status CheckAndRemember(std::string_view key, std::string_view method, std::string_view url,
                                std::string_view body);

 private:
  std::size_t capacity_;
  std::mutex mu_;
  std::unordered_map<std::string, std::uint64_t> by_key_;
  std::deque<std::string> order_;
};

}  // namespace saferetry

#endif  // SAFERETRY_IDEMPOTENCY_H_

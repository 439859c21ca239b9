// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/idempotency.h"

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace saferetry {

absl::Status ValidateIdempotencyKey(std::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError("idempotency_key: must not be empty");
  if (key.size() > 255) {
    return absl::InvalidArgumentError(
        absl::StrCat("idempotency_key: at most 255 characters, got ", key.size()));
  }
  for (std::size_t i = 0; i < key.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(key[i]);
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "idempotency_key: character %d (0x%02x) is not visible ASCII", i, c));
    }
  }
  return absl::OkStatus();
}

std::string GenerateUuidV4(Random& random) {
  std::uint64_t hi = random.Bits64();
  std::uint64_t lo = random.Bits64();
  hi = (hi & ~0x000000000000f000ULL) | 0x0000000000004000ULL;  // version 4
  lo = (lo & ~0xc000000000000000ULL) | 0x8000000000000000ULL;  // variant 10
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(36, '-');
  std::size_t pos = 0;
  auto put = [&](std::uint64_t bits, int nibbles) {
    for (int i = nibbles - 1; i >= 0; --i) out[pos++] = kHex[(bits >> (4 * i)) & 0xf];
  };
  put(hi >> 32, 8);
  ++pos;
  put(hi >> 16, 4);
  ++pos;
  put(hi, 4);
  ++pos;
  put(lo >> 48, 4);
  ++pos;
  put(lo, 12);
  return out;
}

std::string FormatIdempotencyKey(std::string_view key, KeyForm form) {
  if (form == KeyForm::kBare) return std::string(key);
  std::string out;
  out.reserve(key.size() + 2);
  out.push_back('"');
  for (char c : key) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

absl::Status KeyFingerprints::CheckAndRemember(std::string_view key, std::string_view method,
                                               std::string_view url, std::string_view body) {
  const std::uint64_t fp = absl::HashOf(method, url, body);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_key_.find(std::string(key));
  if (it != by_key_.end()) {
    if (it->second != fp) {
      return absl::InvalidArgumentError(
          "idempotency_key: already used by this client for a different request (method, URL or "
          "body differ); a new intent needs a new key");
    }
    return absl::OkStatus();
  }
  if (capacity_ == 0) return absl::OkStatus();
  while (by_key_.size() >= capacity_ && !order_.empty()) {
    by_key_.erase(order_.front());
    order_.pop_front();
  }
  by_key_.emplace(std::string(key), fp);
  order_.emplace_back(key);
  return absl::OkStatus();
}

}  // namespace saferetry

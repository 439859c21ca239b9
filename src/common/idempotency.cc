// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/idempotency.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/random.h>
#endif

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace saferetry {
namespace {

// "00" to "ff": the two hex digits of each byte value.
struct HexPairs {
  char text[512];
};
constexpr HexPairs MakeHexPairs() {
  constexpr char kHex[] = "0123456789abcdef";
  HexPairs pairs{};
  for (int i = 0; i < 256; ++i) {
    pairs.text[2 * i] = kHex[i >> 4];
    pairs.text[2 * i + 1] = kHex[i & 0xf];
  }
  return pairs;
}
constexpr HexPairs kHexPairs = MakeHexPairs();

long SystemGetRandom(void* buffer, std::size_t length, unsigned int flags) {
#if defined(__linux__)
  return static_cast<long>(getrandom(buffer, length, flags));
#else
  (void)buffer;
  (void)length;
  (void)flags;
  errno = ENOSYS;
  return -1;
#endif
}

absl::Status ReadDevUrandom(unsigned char* buffer, std::size_t length) {
  int fd;
  do {
    fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("/dev/urandom: open failed, errno ", errno));
  }
  std::size_t filled = 0;
  absl::Status status;
  while (filled < length) {
    const ssize_t n = read(fd, buffer + filled, length - filled);
    if (n > 0) {
      filled += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      status =
          absl::InternalError(n == 0 ? std::string("/dev/urandom: unexpected end of file")
                                     : absl::StrCat("/dev/urandom: read failed, errno ", errno));
      break;
    }
  }
  close(fd);
  return status;
}

// Each thread keeps OS random bytes for a few dozen keys, so that minting a
// key costs a copy rather than a system call. The bytes sit on a page of
// their own that the kernel zeroes in a child process (MADV_WIPEONFORK,
// Linux 4.14): a child of fork, vfork or clone finds the pool empty and
// draws its own bytes, so it never repeats its parent's keys. Where the
// kernel cannot wipe the page, no pool is kept and every key is one
// getrandom(2) call. Bytes are zeroed as they are used.
class KeyRandomPool {
 public:
  static constexpr std::size_t kBytes = 512;  // 32 keys per system call

  KeyRandomPool() {
#if defined(__linux__) && defined(MADV_WIPEONFORK)
    void* page =
        mmap(nullptr, kPageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) return;
    if (madvise(page, kPageBytes, MADV_WIPEONFORK) != 0) {
      munmap(page, kPageBytes);
      return;
    }
    page_ = static_cast<Page*>(page);  // zero-filled: nothing left
#endif
  }
  ~KeyRandomPool() {
    if (page_ != nullptr) munmap(page_, kPageBytes);
  }
  KeyRandomPool(const KeyRandomPool&) = delete;
  KeyRandomPool& operator=(const KeyRandomPool&) = delete;

  // Fills `out` from the pool, drawing from the OS when it is empty.
  absl::Status Take(unsigned char (&out)[16]) {
    if (page_ == nullptr) {
      return internal::FillFromOsRandom(out, sizeof(out), &SystemGetRandom, &ReadDevUrandom);
    }
    if (page_->left < sizeof(out)) {
      absl::Status s =
          internal::FillFromOsRandom(page_->bytes, kBytes, &SystemGetRandom, &ReadDevUrandom);
      if (!s.ok()) return s;
      page_->left = kBytes;
    }
    unsigned char* from = page_->bytes + (kBytes - page_->left);
    std::memcpy(out, from, sizeof(out));
    std::memset(from, 0, sizeof(out));
    page_->left -= sizeof(out);
    return absl::OkStatus();
  }

 private:
  static constexpr std::size_t kPageBytes = 4096;
  struct Page {
    std::size_t left;  // bytes not used yet, at the end of `bytes`; 0 after a wipe
    unsigned char bytes[kBytes];
  };
  static_assert(sizeof(Page) <= kPageBytes, "the pool fits one page");
  Page* page_ = nullptr;
};

}  // namespace

namespace internal {

absl::Status FillFromOsRandom(unsigned char* buffer, std::size_t length, GetRandomFn get_random,
                              FallbackFillFn fallback) {
  std::size_t filled = 0;
  while (filled < length) {
    errno = 0;
    const long n = get_random(buffer + filled, length - filled, 0);
    if (n > 0) {
      // A short read (possible for large requests or after a signal) just
      // continues where it stopped.
      filled += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == ENOSYS) return fallback(buffer + filled, length - filled);
    if (n == 0) return absl::InternalError("getrandom: returned no bytes");
    return absl::InternalError(absl::StrCat("getrandom: failed, errno ", errno));
  }
  return absl::OkStatus();
}

// Two digits per byte from a table, written into a buffer and copied into
// the string once.
std::string UuidV4FromBytes(const unsigned char (&bytes)[16]) {
  char text[36];
  char* p = text;
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) *p++ = '-';
    unsigned char b = bytes[i];
    if (i == 6) b = static_cast<unsigned char>((b & 0x0f) | 0x40);  // version 4
    if (i == 8) b = static_cast<unsigned char>((b & 0x3f) | 0x80);  // variant 10
    std::memcpy(p, &kHexPairs.text[2 * b], 2);
    p += 2;
  }
  return std::string(text, sizeof(text));
}

}  // namespace internal

absl::StatusOr<std::string> MintIdempotencyKey() {
  thread_local KeyRandomPool pool;
  unsigned char bytes[16];
  absl::Status status = pool.Take(bytes);
  if (!status.ok()) return status;
  return internal::UuidV4FromBytes(bytes);
}

absl::Status ValidateIdempotencyKey(std::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError("idempotency_key: must not be empty");
  if (key.size() > 255) {
    return absl::InvalidArgumentError(
        absl::StrCat("idempotency_key: at most 255 characters, got ", key.size()));
  }
  for (std::size_t i = 0; i < key.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(key[i]);
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrFormat("idempotency_key: character %d (0x%02x) is not visible ASCII", i, c));
    }
  }
  return absl::OkStatus();
}

std::string GenerateUuidV4(Random& random) {
  const std::uint64_t hi = random.Bits64();
  const std::uint64_t lo = random.Bits64();
  unsigned char bytes[16];
  for (int i = 0; i < 8; ++i) {
    bytes[i] = static_cast<unsigned char>(hi >> (56 - 8 * i));
    bytes[8 + i] = static_cast<unsigned char>(lo >> (56 - 8 * i));
  }
  return internal::UuidV4FromBytes(bytes);
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

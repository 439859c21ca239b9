// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/idempotency.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "saferetry/testing/fake_random.h"

namespace saferetry {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(IdempotencyKeyTest, Validation) {
  EXPECT_TRUE(ValidateIdempotencyKey("a").ok());
  EXPECT_TRUE(ValidateIdempotencyKey(std::string(255, '~')).ok());
  EXPECT_TRUE(ValidateIdempotencyKey("!#$%&'()*+,-./:;<=>?@[\\]^_`{|}").ok());
  for (std::string bad :
       {std::string(), std::string(256, 'k'), std::string("a b"), std::string("tab\t"),
        std::string("nl\n"), std::string("\x7f"), std::string("caf\xc3\xa9")}) {
    absl::Status s = ValidateIdempotencyKey(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.message()), StartsWith("idempotency_key:"));
  }
  EXPECT_THAT(std::string(ValidateIdempotencyKey("a b").message()),
              HasSubstr("character 1 (0x20)"));
}

TEST(IdempotencyKeyTest, UuidV4FromTheRandomSeam) {
  testkit::ScriptedRandom random({}, /*seed=*/0);
  // SplitMix64 from 0: 0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4.
  EXPECT_EQ(GenerateUuidV4(random), "e220a839-7b1d-4daf-ae78-9e6aa1b965f4");
  testkit::ScriptedRandom again({}, 0);
  EXPECT_EQ(GenerateUuidV4(again), "e220a839-7b1d-4daf-ae78-9e6aa1b965f4");
}

// ---- MintIdempotencyKey: the OS CSPRNG ------------------------------------

bool IsLowerHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

// 8-4-4-4-12 lower-case hex, version nibble 4, variant nibble 8, 9, a or b.
void ExpectUuidV4(const std::string& key) {
  ASSERT_EQ(key.size(), 36u) << key;
  for (std::size_t i = 0; i < key.size(); ++i) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      EXPECT_EQ(key[i], '-') << key;
    } else {
      EXPECT_TRUE(IsLowerHex(key[i])) << key;
    }
  }
  EXPECT_EQ(key[14], '4') << key;
  EXPECT_NE(std::string("89ab").find(key[19]), std::string::npos) << key;
  EXPECT_TRUE(ValidateIdempotencyKey(key).ok());
}

TEST(MintIdempotencyKeyTest, FormatIsUuidV4) {
  for (int i = 0; i < 200; ++i) {
    absl::StatusOr<std::string> key = MintIdempotencyKey();
    ASSERT_TRUE(key.ok()) << key.status();
    ExpectUuidV4(*key);
  }
}

TEST(MintIdempotencyKeyTest, TenThousandKeysAreDistinct) {
  std::set<std::string> keys;
  for (int i = 0; i < 10000; ++i) {
    absl::StatusOr<std::string> key = MintIdempotencyKey();
    ASSERT_TRUE(key.ok()) << key.status();
    keys.insert(*key);
  }
  EXPECT_EQ(keys.size(), 10000u);
}

TEST(MintIdempotencyKeyTest, EveryRandomNibbleVaries) {
  // 122 random bits: over 1000 keys each random hex position takes more than
  // one value (the chance that one does not is 16 * 16^-999). The version
  // position never varies; the variant position stays within 8-b.
  std::vector<std::set<char>> seen(36);
  for (int i = 0; i < 1000; ++i) {
    absl::StatusOr<std::string> key = MintIdempotencyKey();
    ASSERT_TRUE(key.ok());
    for (std::size_t p = 0; p < 36; ++p) seen[p].insert((*key)[p]);
  }
  for (std::size_t p = 0; p < 36; ++p) {
    if (p == 8 || p == 13 || p == 18 || p == 23) continue;
    if (p == 14) {
      EXPECT_EQ(seen[p], std::set<char>({'4'}));
    } else if (p == 19) {
      EXPECT_EQ(seen[p], std::set<char>({'8', '9', 'a', 'b'}));
    } else {
      EXPECT_GT(seen[p].size(), 1u) << "position " << p;
    }
  }
}

// Keys come from a per-thread pool of OS random bytes: a forked child must
// draw its own, never the parent's next ones. The parent mints a key first so
// its pool holds unused bytes at the fork; then both sides mint 40 keys (more
// than one pool's worth). A pool copied into the child would make the first
// child keys equal the parent's.
TEST(MintIdempotencyKeyTest, AForkedChildNeverRepeatsItsParentsKeys) {
  ASSERT_TRUE(MintIdempotencyKey().ok());
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  constexpr int kKeys = 40;
  if (child == 0) {
    close(fds[0]);
    std::string all;
    for (int i = 0; i < kKeys; ++i) {
      absl::StatusOr<std::string> key = MintIdempotencyKey();
      all += key.ok() ? *key : std::string("error");
      all += '\n';
    }
    const char* p = all.data();
    std::size_t left = all.size();
    while (left > 0) {
      const ssize_t n = write(fds[1], p, left);
      if (n <= 0) _exit(2);
      p += n;
      left -= static_cast<std::size_t>(n);
    }
    _exit(0);
  }
  close(fds[1]);
  std::set<std::string> parent;
  for (int i = 0; i < kKeys; ++i) {
    absl::StatusOr<std::string> key = MintIdempotencyKey();
    ASSERT_TRUE(key.ok()) << key.status();
    parent.insert(*key);
  }
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;)
    text.append(buf, static_cast<std::size_t>(n));
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::set<std::string> from_child;
  for (std::size_t start = 0, end; (end = text.find('\n', start)) != std::string::npos;
       start = end + 1) {
    const std::string key = text.substr(start, end - start);
    ExpectUuidV4(key);
    from_child.insert(key);
    EXPECT_EQ(parent.count(key), 0u) << "the child repeated its parent's key " << key;
  }
  EXPECT_EQ(from_child.size(), static_cast<std::size_t>(kKeys));
  EXPECT_EQ(parent.size(), static_cast<std::size_t>(kKeys));
}

// Threads have pools of their own: keys minted on eight threads at once are
// all distinct.
TEST(MintIdempotencyKeyTest, ThreadsMintDistinctKeysConcurrently) {
  constexpr int kThreads = 8;
  constexpr int kKeys = 500;
  std::vector<std::vector<std::string>> keys(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&keys, t] {
      for (int i = 0; i < kKeys; ++i) {
        absl::StatusOr<std::string> key = MintIdempotencyKey();
        keys[static_cast<std::size_t>(t)].push_back(key.ok() ? *key : "error");
      }
    });
  }
  for (auto& th : threads) th.join();
  std::set<std::string> all;
  for (const auto& v : keys) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), static_cast<std::size_t>(kThreads * kKeys));
  EXPECT_EQ(all.count("error"), 0u);
}

TEST(MintIdempotencyKeyTest, DoesNotConsumeTheInjectedRandom) {
  // Minting keys from the OS leaves a scripted Random untouched: its next
  // draws are exactly the ones a fresh copy gives.
  testkit::ScriptedRandom used({0.25, 0.75}, /*seed=*/0);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(MintIdempotencyKey().ok());
  EXPECT_EQ(used.uniform_draws(), 0);
  EXPECT_EQ(used.Uniform(), 0.25);
  EXPECT_EQ(used.Bits64(), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(GenerateUuidV4(used).substr(0, 8), "6e789e6a");
}

TEST(UuidV4FromBytesTest, SetsVersionAndVariantOnly) {
  const unsigned char zeros[16] = {};
  EXPECT_EQ(internal::UuidV4FromBytes(zeros), "00000000-0000-4000-8000-000000000000");
  unsigned char ones[16];
  std::memset(ones, 0xff, sizeof(ones));
  EXPECT_EQ(internal::UuidV4FromBytes(ones), "ffffffff-ffff-4fff-bfff-ffffffffffff");
  const unsigned char counting[16] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
                                      0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff};
  EXPECT_EQ(internal::UuidV4FromBytes(counting), "00112233-4455-4677-8899-aabbccddeeff");
}

// A scripted getrandom(2): each call pops one step.
struct Step {
  long result;  // bytes written (filled with `fill`), or -1
  int error;    // errno when result is -1
  unsigned char fill;
};
std::vector<Step> g_steps;
std::size_t g_next_step = 0;
std::vector<std::size_t> g_requested;
std::size_t g_fallback_length = 0;

long FakeGetRandom(void* buffer, std::size_t length, unsigned int flags) {
  EXPECT_EQ(flags, 0u);
  g_requested.push_back(length);
  if (g_next_step >= g_steps.size()) {
    ADD_FAILURE() << "getrandom called more often than scripted";
    errno = EIO;
    return -1;
  }
  const Step step = g_steps[g_next_step++];
  if (step.result < 0) {
    errno = step.error;
    return -1;
  }
  std::memset(buffer, step.fill, static_cast<std::size_t>(step.result));
  return step.result;
}

absl::Status FakeFallback(unsigned char* buffer, std::size_t length) {
  g_fallback_length = length;
  std::memset(buffer, 0xee, length);
  return absl::OkStatus();
}

void Script(std::vector<Step> steps) {
  g_steps = std::move(steps);
  g_next_step = 0;
  g_requested.clear();
  g_fallback_length = 0;
}

TEST(FillFromOsRandomTest, RetriesEintrAndContinuesShortReads) {
  Script({{-1, EINTR, 0}, {5, 0, 0xa1}, {-1, EINTR, 0}, {3, 0, 0xb2}, {8, 0, 0xc3}});
  unsigned char bytes[16] = {};
  ASSERT_TRUE(internal::FillFromOsRandom(bytes, 16, &FakeGetRandom, &FakeFallback).ok());
  EXPECT_EQ(g_requested, std::vector<std::size_t>({16, 16, 11, 11, 8}));
  EXPECT_EQ(g_fallback_length, 0u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(bytes[i], 0xa1) << i;
  for (int i = 5; i < 8; ++i) EXPECT_EQ(bytes[i], 0xb2) << i;
  for (int i = 8; i < 16; ++i) EXPECT_EQ(bytes[i], 0xc3) << i;
}

TEST(FillFromOsRandomTest, FallsBackOnlyOnEnosys) {
  Script({{4, 0, 0x11}, {-1, ENOSYS, 0}});
  unsigned char bytes[16] = {};
  ASSERT_TRUE(internal::FillFromOsRandom(bytes, 16, &FakeGetRandom, &FakeFallback).ok());
  EXPECT_EQ(g_fallback_length, 12u);
  EXPECT_EQ(bytes[3], 0x11);
  EXPECT_EQ(bytes[4], 0xee);
  EXPECT_EQ(bytes[15], 0xee);
}

TEST(FillFromOsRandomTest, OtherErrorsAreReportedWithoutFallback) {
  for (int error : {EIO, EFAULT, EAGAIN, EINVAL}) {
    Script({{-1, error, 0}});
    unsigned char bytes[16] = {};
    absl::Status s = internal::FillFromOsRandom(bytes, 16, &FakeGetRandom, &FakeFallback);
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
    EXPECT_EQ(std::string(s.message()), "getrandom: failed, errno " + std::to_string(error));
    EXPECT_EQ(g_fallback_length, 0u);
  }
  Script({{0, 0, 0}});
  unsigned char bytes[16] = {};
  absl::Status s = internal::FillFromOsRandom(bytes, 16, &FakeGetRandom, &FakeFallback);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(std::string(s.message()), "getrandom: returned no bytes");
}

TEST(FillFromOsRandomTest, ZeroLengthCallsNothing) {
  Script({});
  EXPECT_TRUE(internal::FillFromOsRandom(nullptr, 0, &FakeGetRandom, &FakeFallback).ok());
  EXPECT_TRUE(g_requested.empty());
}

TEST(IdempotencyKeyTest, Forms) {
  EXPECT_EQ(FormatIdempotencyKey("abc", KeyForm::kBare), "abc");
  EXPECT_EQ(FormatIdempotencyKey("abc", KeyForm::kQuotedString), "\"abc\"");
  EXPECT_EQ(FormatIdempotencyKey("a\"b\\c", KeyForm::kQuotedString), "\"a\\\"b\\\\c\"");
}

TEST(KeyFingerprintsTest, RefusesAnotherRequestUnderTheSameKey) {
  KeyFingerprints fp(10);
  EXPECT_TRUE(fp.CheckAndRemember("k", "POST", "http://h/orders", "a").ok());
  EXPECT_TRUE(fp.CheckAndRemember("k", "POST", "http://h/orders", "a").ok());
  EXPECT_THAT(std::string(fp.CheckAndRemember("k", "POST", "http://h/orders", "b").message()),
              StartsWith("idempotency_key:"));
  EXPECT_FALSE(fp.CheckAndRemember("k", "PUT", "http://h/orders", "a").ok());
  EXPECT_FALSE(fp.CheckAndRemember("k", "POST", "http://h/other", "a").ok());
  EXPECT_TRUE(fp.CheckAndRemember("k2", "POST", "http://h/orders", "b").ok());
}

TEST(KeyFingerprintsTest, BoundedOldestForgottenFirst) {
  KeyFingerprints fp(2);
  ASSERT_TRUE(fp.CheckAndRemember("k1", "POST", "u", "a").ok());
  ASSERT_TRUE(fp.CheckAndRemember("k2", "POST", "u", "a").ok());
  ASSERT_TRUE(fp.CheckAndRemember("k3", "POST", "u", "a").ok());  // forgets k1
  EXPECT_TRUE(fp.CheckAndRemember("k1", "POST", "u", "other").ok());
  EXPECT_FALSE(fp.CheckAndRemember("k3", "POST", "u", "other").ok());
}

TEST(KeyFingerprintsTest, ConcurrentUseFromThreads) {
  KeyFingerprints fp(100000);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&fp, t] {
      for (int i = 0; i < 1000; ++i) {
        const std::string key = "k" + std::to_string(i);
        // Every thread uses the same body per key: never refused.
        EXPECT_TRUE(fp.CheckAndRemember(key, "POST", "u", "body" + std::to_string(i)).ok()) << t;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_FALSE(fp.CheckAndRemember("k7", "POST", "u", "different").ok());
}

}  // namespace
}  // namespace saferetry

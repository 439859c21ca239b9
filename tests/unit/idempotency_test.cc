// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/idempotency.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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
  for (std::string bad : {std::string(), std::string(256, 'k'), std::string("a b"),
                          std::string("tab\t"), std::string("nl\n"), std::string("\x7f"),
                          std::string("caf\xc3\xa9")}) {
    absl::Status s = ValidateIdempotencyKey(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.message()), StartsWith("idempotency_key:"));
  }
  EXPECT_THAT(std::string(ValidateIdempotencyKey("a b").message()), HasSubstr("character 1 (0x20)"));
}

TEST(IdempotencyKeyTest, UuidV4FromTheRandomSeam) {
  testing::ScriptedRandom random({}, /*seed=*/0);
  // SplitMix64 from 0: 0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4.
  EXPECT_EQ(GenerateUuidV4(random), "e220a839-7b1d-4daf-ae78-9e6aa1b965f4");
  testing::ScriptedRandom again({}, 0);
  EXPECT_EQ(GenerateUuidV4(again), "e220a839-7b1d-4daf-ae78-9e6aa1b965f4");
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

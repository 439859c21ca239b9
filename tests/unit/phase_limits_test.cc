// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// PhaseLimits: what is refused (naming the field) and how a policy's limits
// are merged with a transport's.

#include <chrono>

#include "gtest/gtest.h"
#include "saferetry/transport.h"

namespace saferetry {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(PhaseLimitsTest, TheDefaultIsNoLimitAndIsValid) {
  const PhaseLimits none;
  EXPECT_TRUE(none.empty());
  EXPECT_TRUE(ValidatePhaseLimits(none).ok());
}

TEST(PhaseLimitsTest, EachBadFieldIsNamedWithThePrefix) {
  PhaseLimits l;
  l.connect = milliseconds(-1);
  EXPECT_EQ(ValidatePhaseLimits(l, "x.").message(), "x.connect: must be >= 0, got -1000000ns");
  l = {};
  l.first_byte = Duration::max();
  EXPECT_EQ(ValidatePhaseLimits(l).message(),
            "first_byte: must be at most a year, got 9223372036854775807ns");
  l = {};
  l.first_byte = milliseconds(-2);
  EXPECT_EQ(ValidatePhaseLimits(l).message(), "first_byte: must be >= 0, got -2000000ns");
  l = {};
  l.speed_limit = -1;
  EXPECT_EQ(ValidatePhaseLimits(l).message(), "speed_limit: must be >= 0 bytes per second, got -1");
  l = {};
  l.speed_limit = 1;
  EXPECT_EQ(ValidatePhaseLimits(l).message(), "speed_limit: given without speed_time");
  l = {};
  l.speed_time = seconds(3);
  EXPECT_EQ(ValidatePhaseLimits(l).message(), "speed_time: given without speed_limit");
  l.speed_limit = 1;
  l.speed_time = milliseconds(2500);
  EXPECT_EQ(ValidatePhaseLimits(l).message(),
            "speed_time: libcurl counts whole seconds, got 2500000000ns");
  l.speed_time = seconds(3);
  EXPECT_TRUE(ValidatePhaseLimits(l).ok());
}

// Field by field, the policy's limit wins; the low-speed pair goes together.
TEST(PhaseLimitsTest, APolicysFieldsWinAndTheRestComeFromTheTransport) {
  PhaseLimits transport;
  transport.connect = milliseconds(500);
  transport.first_byte = seconds(2);
  transport.speed_limit = 100;
  transport.speed_time = seconds(10);
  PhaseLimits policy;
  policy.first_byte = milliseconds(300);
  const PhaseLimits merged = MergePhaseLimits(policy, transport);
  EXPECT_EQ(merged.connect, milliseconds(500));
  EXPECT_EQ(merged.first_byte, milliseconds(300));
  EXPECT_EQ(merged.speed_limit, 100);
  EXPECT_EQ(merged.speed_time, seconds(10));
  policy.speed_limit = 5;
  policy.speed_time = seconds(1);
  const PhaseLimits own = MergePhaseLimits(policy, transport);
  EXPECT_EQ(own.speed_limit, 5);
  EXPECT_EQ(own.speed_time, seconds(1));
  EXPECT_EQ(MergePhaseLimits(PhaseLimits{}, PhaseLimits{}), PhaseLimits{});
}

}  // namespace
}  // namespace saferetry

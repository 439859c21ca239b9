// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/backoff.h"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "saferetry/testing/fake_random.h"

namespace saferetry {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::seconds;
using testkit::kJustBelowOne;

BackoffParams Params(JitterKind jitter) {
  BackoffParams p;
  p.jitter = jitter;
  return p;
}

TEST(BackoffTest, JustBelowOneIsTheLargestDoubleBelowOne) {
  EXPECT_LT(kJustBelowOne, 1.0);
  EXPECT_EQ(std::nextafter(1.0, 0.0), kJustBelowOne);
}

TEST(BackoffTest, DefaultsAreFullJitter100msTimesTwoCappedAt10s) {
  BackoffParams p;
  EXPECT_EQ(p.jitter, JitterKind::kFull);
  EXPECT_EQ(p.base, milliseconds(100));
  EXPECT_EQ(p.multiplier, 2.0);
  EXPECT_EQ(p.cap, seconds(10));
  EXPECT_TRUE(ValidateBackoffParams(p).ok());
}

TEST(BackoffTest, HeaderExample) {
  BackoffParams p;
  EXPECT_EQ(ComputeBackoff(p, 3, Duration{0}, 0.5), milliseconds(200));
}

TEST(BackoffTest, NoJitterIsTheCeiling) {
  BackoffParams p = Params(JitterKind::kNone);
  const std::vector<Duration> expected = {
      milliseconds(100),  milliseconds(200),  milliseconds(400),
      milliseconds(800),  milliseconds(1600), milliseconds(3200),
      milliseconds(6400), seconds(10),        seconds(10)};
  for (int n = 1; n <= static_cast<int>(expected.size()); ++n) {
    for (double u : {0.0, 0.5, kJustBelowOne}) {
      EXPECT_EQ(ComputeBackoff(p, n, Duration{0}, u), expected[n - 1]) << "n=" << n << " u=" << u;
    }
  }
}

TEST(BackoffTest, FullJitterExactValues) {
  BackoffParams p = Params(JitterKind::kFull);
  // u = 0: the lower bound, 0.
  EXPECT_EQ(ComputeBackoff(p, 1, Duration{0}, 0.0), nanoseconds(0));
  EXPECT_EQ(ComputeBackoff(p, 8, Duration{0}, 0.0), nanoseconds(0));
  // u = 0.5: half the ceiling.
  EXPECT_EQ(ComputeBackoff(p, 1, Duration{0}, 0.5), milliseconds(50));
  EXPECT_EQ(ComputeBackoff(p, 2, Duration{0}, 0.5), milliseconds(100));
  EXPECT_EQ(ComputeBackoff(p, 4, Duration{0}, 0.5), milliseconds(400));
  EXPECT_EQ(ComputeBackoff(p, 8, Duration{0}, 0.5), seconds(5));
  // u just below 1: truncation leaves the ceiling minus one nanosecond.
  EXPECT_EQ(ComputeBackoff(p, 1, Duration{0}, kJustBelowOne), nanoseconds(99'999'999));
  EXPECT_EQ(ComputeBackoff(p, 3, Duration{0}, kJustBelowOne), nanoseconds(399'999'999));
  EXPECT_EQ(ComputeBackoff(p, 8, Duration{0}, kJustBelowOne), nanoseconds(9'999'999'999));
}

TEST(BackoffTest, EqualJitterExactValues) {
  BackoffParams p = Params(JitterKind::kEqual);
  EXPECT_EQ(ComputeBackoff(p, 1, Duration{0}, 0.0), milliseconds(50));
  EXPECT_EQ(ComputeBackoff(p, 1, Duration{0}, 0.5), milliseconds(75));
  EXPECT_EQ(ComputeBackoff(p, 1, Duration{0}, kJustBelowOne), nanoseconds(99'999'999));
  EXPECT_EQ(ComputeBackoff(p, 3, Duration{0}, 0.0), milliseconds(200));
  EXPECT_EQ(ComputeBackoff(p, 3, Duration{0}, 0.5), milliseconds(300));
  EXPECT_EQ(ComputeBackoff(p, 3, Duration{0}, kJustBelowOne), nanoseconds(399'999'999));
  EXPECT_EQ(ComputeBackoff(p, 8, Duration{0}, 0.0), seconds(5));
  EXPECT_EQ(ComputeBackoff(p, 8, Duration{0}, 0.5), milliseconds(7500));
  EXPECT_EQ(ComputeBackoff(p, 8, Duration{0}, kJustBelowOne), nanoseconds(9'999'999'999));
}

TEST(BackoffTest, EqualJitterOfAnOddCeilingTruncates) {
  BackoffParams p = Params(JitterKind::kEqual);
  p.base = nanoseconds(3);
  p.cap = nanoseconds(1000);
  // 3/2 + 0 = 1.5 -> 1; 1.5 + 0.5 * 1.5 = 2.25 -> 2; just below 3 -> 2.
  EXPECT_EQ(ComputeBackoff(p, 1, Duration{0}, 0.0), nanoseconds(1));
  EXPECT_EQ(ComputeBackoff(p, 1, Duration{0}, 0.5), nanoseconds(2));
  EXPECT_EQ(ComputeBackoff(p, 1, Duration{0}, kJustBelowOne), nanoseconds(2));
}

TEST(BackoffTest, DecorrelatedJitterExactValuesFromBase) {
  BackoffParams p = Params(JitterKind::kDecorrelated);
  // previous <= 0 means base: the range is [base, 3 * base).
  for (Duration previous : {Duration{0}, Duration{-5}, Duration{milliseconds(100)}}) {
    EXPECT_EQ(ComputeBackoff(p, 1, previous, 0.0), milliseconds(100));
    EXPECT_EQ(ComputeBackoff(p, 1, previous, 0.5), milliseconds(200));
    EXPECT_EQ(ComputeBackoff(p, 1, previous, kJustBelowOne), nanoseconds(299'999'999));
  }
  // The retry number does not matter, only the previous delay.
  EXPECT_EQ(ComputeBackoff(p, 9, milliseconds(1000), 0.5), milliseconds(1550));
  EXPECT_EQ(ComputeBackoff(p, 9, milliseconds(1000), 0.0), milliseconds(100));
  EXPECT_EQ(ComputeBackoff(p, 9, milliseconds(1000), kJustBelowOne), nanoseconds(2'999'999'999));
}

TEST(BackoffTest, DecorrelatedSequence) {
  BackoffParams p = Params(JitterKind::kDecorrelated);
  const std::vector<Duration> expected = {nanoseconds(200'000'000),
                                          nanoseconds(350'000'000),
                                          nanoseconds(575'000'000),
                                          nanoseconds(912'500'000),
                                          nanoseconds(1'418'750'000),
                                          nanoseconds(2'178'125'000),
                                          nanoseconds(3'317'187'500),
                                          nanoseconds(5'025'781'250),
                                          nanoseconds(7'588'671'875),
                                          seconds(10),
                                          seconds(10)};
  Duration previous{0};
  std::vector<Duration> got;
  for (int n = 1; n <= static_cast<int>(expected.size()); ++n) {
    previous = ComputeBackoff(p, n, previous, 0.5);
    got.push_back(previous);
  }
  EXPECT_EQ(got, expected);
}

TEST(BackoffTest, DecorrelatedWithHugePreviousDoesNotOverflow) {
  BackoffParams p = Params(JitterKind::kDecorrelated);
  Duration huge = Duration::max();
  EXPECT_EQ(ComputeBackoff(p, 1, huge, 0.5), seconds(10));
  EXPECT_EQ(ComputeBackoff(p, 1, huge, 0.0), milliseconds(100));
  EXPECT_EQ(ComputeBackoff(p, 1, huge, kJustBelowOne), seconds(10));
}

TEST(BackoffTest, DecorrelatedWithTinyPreviousNeverGoesBelowBase) {
  BackoffParams p = Params(JitterKind::kDecorrelated);
  // 3 * 1 ns - 100 ms is negative: the range collapses to base.
  EXPECT_EQ(ComputeBackoff(p, 1, nanoseconds(1), kJustBelowOne), milliseconds(100));
}

TEST(BackoffTest, Retry10000IsExactlyTheCap) {
  for (JitterKind kind : {JitterKind::kNone, JitterKind::kFull, JitterKind::kEqual}) {
    BackoffParams p = Params(kind);
    for (int n : {64, 1025, 10000, std::numeric_limits<int>::max()}) {
      SCOPED_TRACE(::testing::Message() << JitterKindName(kind) << " n=" << n);
      const Duration none = seconds(10);
      Duration at_half = kind == JitterKind::kNone   ? none
                         : kind == JitterKind::kFull ? seconds(5)
                                                     : milliseconds(7500);
      EXPECT_EQ(ComputeBackoff(p, n, Duration{0}, 0.5), at_half);
      if (kind == JitterKind::kNone) {
        EXPECT_EQ(ComputeBackoff(p, n, Duration{0}, kJustBelowOne), none);
      } else {
        EXPECT_EQ(ComputeBackoff(p, n, Duration{0}, kJustBelowOne), nanoseconds(9'999'999'999));
      }
    }
  }
}

TEST(BackoffTest, HugeCapIsExactNearInt64Limits) {
  BackoffParams p = Params(JitterKind::kNone);
  p.base = nanoseconds(1);
  p.cap = Duration::max();
  EXPECT_EQ(ComputeBackoff(p, 63, Duration{0}, 0.0), nanoseconds(std::int64_t{1} << 62));
  EXPECT_EQ(ComputeBackoff(p, 64, Duration{0}, 0.0), Duration::max());
  EXPECT_EQ(ComputeBackoff(p, 10000, Duration{0}, 0.0), Duration::max());
  // Half of 2^63 - 1 is ...903.5: truncated.
  p.jitter = JitterKind::kFull;
  EXPECT_EQ(ComputeBackoff(p, 10000, Duration{0}, 0.5), nanoseconds(4'611'686'018'427'387'903));
  p.jitter = JitterKind::kEqual;
  EXPECT_EQ(ComputeBackoff(p, 10000, Duration{0}, 0.0), nanoseconds(4'611'686'018'427'387'903));
  // Just below 1 takes half * 2^-53 = 512 - 2^-54 ns off the cap, truncated.
  EXPECT_EQ(ComputeBackoff(p, 10000, Duration{0}, kJustBelowOne), Duration::max() - Duration{512});
}

// Doubling is a shifted integer below 2^63 and ldexp above: every retry on
// both sides of the switch gives base * 2^(retry-1), or the cap once that
// passes it, as the power computed apart does.
TEST(BackoffTest, DoublingIsExactOnBothSidesOfTheShift) {
  BackoffParams p = Params(JitterKind::kNone);
  p.cap = Duration::max();
  for (std::int64_t base : {1, 3, 1'000'000}) {
    p.base = nanoseconds(base);
    for (int retry = 1; retry <= 70; ++retry) {
      SCOPED_TRACE(::testing::Message() << "base=" << base << " retry=" << retry);
      const long double want = static_cast<long double>(base) * std::pow(2.0L, retry - 1);
      const Duration expected = want >= static_cast<long double>(Duration::max().count())
                                    ? Duration::max()
                                    : nanoseconds(static_cast<std::int64_t>(want));
      EXPECT_EQ(ComputeBackoff(p, retry, Duration{0}, 0.0), expected);
    }
  }
}

TEST(BackoffTest, HugeMultiplierCaps) {
  BackoffParams p = Params(JitterKind::kNone);
  p.multiplier = 1e300;
  EXPECT_EQ(ComputeBackoff(p, 1, Duration{0}, 0.0), milliseconds(100));
  EXPECT_EQ(ComputeBackoff(p, 2, Duration{0}, 0.0), seconds(10));
  EXPECT_EQ(ComputeBackoff(p, 10000, Duration{0}, 0.0), seconds(10));
}

TEST(BackoffTest, MultiplierOneIsConstantAndFractionalMultiplierIsExact) {
  BackoffParams p = Params(JitterKind::kNone);
  p.multiplier = 1.0;
  EXPECT_EQ(ComputeBackoff(p, 1, Duration{0}, 0.0), milliseconds(100));
  EXPECT_EQ(ComputeBackoff(p, 10000, Duration{0}, 0.0), milliseconds(100));
  p.multiplier = 1.5;
  EXPECT_EQ(ComputeBackoff(p, 2, Duration{0}, 0.0), milliseconds(150));
  EXPECT_EQ(ComputeBackoff(p, 3, Duration{0}, 0.0), milliseconds(225));
  EXPECT_EQ(ComputeBackoff(p, 4, Duration{0}, 0.0), nanoseconds(337'500'000));
}

TEST(BackoffTest, CapEqualToBase) {
  BackoffParams p = Params(JitterKind::kFull);
  p.cap = p.base;
  EXPECT_TRUE(ValidateBackoffParams(p).ok());
  EXPECT_EQ(ComputeBackoff(p, 5, Duration{0}, 0.5), milliseconds(50));
}

TEST(BackoffTest, RetryBelowOneActsAsOne) {
  BackoffParams p = Params(JitterKind::kNone);
  EXPECT_EQ(ComputeBackoff(p, 0, Duration{0}, 0.0), milliseconds(100));
  EXPECT_EQ(ComputeBackoff(p, -7, Duration{0}, 0.0), milliseconds(100));
}

TEST(BackoffTest, SampleIsClampedIntoHalfOpenUnitInterval) {
  BackoffParams p = Params(JitterKind::kFull);
  EXPECT_EQ(ComputeBackoff(p, 1, Duration{0}, -0.5), nanoseconds(0));
  EXPECT_EQ(ComputeBackoff(p, 1, Duration{0}, std::nan("")), nanoseconds(0));
  EXPECT_EQ(ComputeBackoff(p, 1, Duration{0}, 1.0), nanoseconds(99'999'999));
  EXPECT_EQ(ComputeBackoff(p, 1, Duration{0}, 7.0), nanoseconds(99'999'999));
  EXPECT_EQ(ComputeBackoff(p, 1, Duration{0}, std::numeric_limits<double>::infinity()),
            nanoseconds(99'999'999));
}

TEST(BackoffTest, AlwaysWithinZeroAndCap) {
  for (JitterKind kind :
       {JitterKind::kNone, JitterKind::kFull, JitterKind::kEqual, JitterKind::kDecorrelated}) {
    BackoffParams p = Params(kind);
    p.multiplier = 1.7;
    p.cap = milliseconds(2500);
    Duration previous{0};
    for (int n = 1; n <= 200; ++n) {
      for (double u : {0.0, 0.1, 0.5, 0.9, kJustBelowOne}) {
        Duration d = ComputeBackoff(p, n, previous, u);
        ASSERT_GE(d, Duration{0});
        ASSERT_LE(d, p.cap);
        if (kind == JitterKind::kDecorrelated) {
          ASSERT_GE(d, p.base);
        }
        previous = d;
      }
    }
  }
}

TEST(BackoffTest, InvalidParamsStillGiveABoundedDelay) {
  BackoffParams p = Params(JitterKind::kNone);
  p.cap = Duration{0};
  EXPECT_EQ(ComputeBackoff(p, 3, Duration{0}, 0.5), Duration{0});
  p.cap = seconds(1);
  p.base = seconds(5);
  EXPECT_EQ(ComputeBackoff(p, 1, Duration{0}, 0.5), seconds(1));
  p.base = milliseconds(100);
  p.multiplier = 0.5;
  EXPECT_EQ(ComputeBackoff(p, 3, Duration{0}, 0.5), milliseconds(100));
  p.multiplier = std::nan("");
  EXPECT_EQ(ComputeBackoff(p, 3, Duration{0}, 0.5), milliseconds(100));
}

TEST(BackoffTest, ValidationNamesTheField) {
  BackoffParams p;
  p.base = Duration{0};
  EXPECT_EQ(ValidateBackoffParams(p).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateBackoffParams(p).message(), "base: must be > 0, got 0");
  p.base = milliseconds(-5);
  EXPECT_EQ(ValidateBackoffParams(p).message(), "base: must be > 0, got -5ms");

  p = BackoffParams{};
  p.multiplier = 0.5;
  EXPECT_EQ(ValidateBackoffParams(p).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateBackoffParams(p).message(), "multiplier: must be >= 1, got 0.5");
  p.multiplier = std::numeric_limits<double>::infinity();
  EXPECT_EQ(ValidateBackoffParams(p).message(), "multiplier: must be finite, got inf");
  p.multiplier = std::nan("");
  EXPECT_EQ(ValidateBackoffParams(p).message(), "multiplier: must be finite, got nan");
  p.multiplier = 1.0;
  EXPECT_TRUE(ValidateBackoffParams(p).ok());

  p = BackoffParams{};
  p.cap = Duration{0};
  EXPECT_EQ(ValidateBackoffParams(p).message(), "cap: must be > 0, got 0");
  p.cap = milliseconds(50);
  EXPECT_EQ(ValidateBackoffParams(p).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateBackoffParams(p).message(), "cap: must be >= base (100ms), got 50ms");

  p = BackoffParams{};
  p.jitter = static_cast<JitterKind>(42);
  EXPECT_EQ(ValidateBackoffParams(p).message(), "jitter: unknown kind 42");
}

TEST(BackoffTest, JitterKindNamesRoundTrip) {
  EXPECT_EQ(JitterKindName(JitterKind::kNone), "none");
  EXPECT_EQ(JitterKindName(JitterKind::kFull), "full");
  EXPECT_EQ(JitterKindName(JitterKind::kEqual), "equal");
  EXPECT_EQ(JitterKindName(JitterKind::kDecorrelated), "decorrelated");
  for (JitterKind kind :
       {JitterKind::kNone, JitterKind::kFull, JitterKind::kEqual, JitterKind::kDecorrelated}) {
    JitterKind parsed = kind == JitterKind::kNone ? JitterKind::kFull : JitterKind::kNone;
    ASSERT_TRUE(ParseJitterKind(JitterKindName(kind), &parsed));
    EXPECT_EQ(parsed, kind);
  }
  JitterKind untouched = JitterKind::kEqual;
  EXPECT_FALSE(ParseJitterKind("Full", &untouched));
  EXPECT_FALSE(ParseJitterKind("", &untouched));
  EXPECT_FALSE(ParseJitterKind("full ", &untouched));
  EXPECT_EQ(untouched, JitterKind::kEqual);
}

}  // namespace
}  // namespace saferetry

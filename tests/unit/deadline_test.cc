// Copyright 2026 The saferetry Authors. Licensed under the Apache License,
// Version 2.0.

#include "saferetry/deadline.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace saferetry {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// An arbitrary steady-clock reading.
TimePoint const kNow = TimePoint(seconds(1000));

// ---- Deadline -------------------------------------------------------------

TEST(Deadline, DefaultIsInfinite) {
  Deadline const d;
  EXPECT_TRUE(d.is_infinite());
  EXPECT_EQ(d.at(), TimePoint::max());
  EXPECT_EQ(d.Remaining(kNow), Duration::max());
  EXPECT_FALSE(d.Expired(kNow));
  EXPECT_FALSE(d.Expired(TimePoint::max()));
  EXPECT_TRUE(Deadline::Infinite().is_infinite());
}

TEST(Deadline, AfterIsNowPlusTimeout) {
  auto const d = Deadline::After(kNow, seconds(2));
  EXPECT_FALSE(d.is_infinite());
  EXPECT_EQ(d.at(), kNow + seconds(2));
  EXPECT_EQ(d.Remaining(kNow), seconds(2));
  EXPECT_EQ(d.Remaining(kNow + milliseconds(300)), milliseconds(1700));
  EXPECT_EQ(d.Remaining(kNow + seconds(2) - nanoseconds(1)), nanoseconds(1));
}

TEST(Deadline, RemainingNeverNegative) {
  auto const d = Deadline::At(kNow);
  EXPECT_EQ(d.Remaining(kNow), Duration::zero());
  EXPECT_EQ(d.Remaining(kNow + seconds(5)), Duration::zero());
  EXPECT_EQ(d.Remaining(TimePoint::max()), Duration::zero());
}

TEST(Deadline, Expired) {
  auto const d = Deadline::At(kNow);
  EXPECT_FALSE(d.Expired(kNow - nanoseconds(1)));
  EXPECT_TRUE(d.Expired(kNow));
  EXPECT_TRUE(d.Expired(kNow + nanoseconds(1)));
}

TEST(Deadline, AfterSaturates) {
  // Saturated at the end of time: the infinite deadline, which no clock
  // reaches (nothing to propagate, no attempt cut short).
  auto const d = Deadline::After(kNow, Duration::max());
  EXPECT_TRUE(d.is_infinite());
  EXPECT_EQ(d.at(), TimePoint::max());
  EXPECT_EQ(d.Remaining(kNow), Duration::max());
  EXPECT_FALSE(d.Expired(TimePoint::max()));
  EXPECT_FALSE(Deadline::After(kNow, Duration::max() - seconds(2000)).is_infinite());
  EXPECT_EQ(Deadline::After(TimePoint::max(), seconds(1)).at(), TimePoint::max());
  EXPECT_EQ(Deadline::After(TimePoint::min(), Duration::min()).at(), TimePoint::min());
  EXPECT_EQ(Deadline::After(kNow, -seconds(1)).at(), kNow - seconds(1));
}

TEST(Deadline, RemainingSaturates) {
  // at - now would overflow: max minus a very early reading.
  EXPECT_EQ(Deadline::At(TimePoint::max()).Remaining(TimePoint::min()), Duration::max());
}

// ---- ValidateDeadlineOptions ---------------------------------------------

TEST(ValidateDeadlineOptions, DefaultsAreValid) {
  DeadlineOptions const options;
  EXPECT_EQ(options.margin, milliseconds(10));
  EXPECT_EQ(options.min_useful_attempt, milliseconds(50));
  EXPECT_EQ(options.attempt_cap, std::nullopt);
  EXPECT_TRUE(ValidateDeadlineOptions(options).ok());
}

TEST(ValidateDeadlineOptions, ZeroMarginIsValid) {
  DeadlineOptions options;
  options.margin = Duration::zero();
  EXPECT_TRUE(ValidateDeadlineOptions(options).ok());
}

TEST(ValidateDeadlineOptions, NegativeMargin) {
  DeadlineOptions options;
  options.margin = milliseconds(-1);
  auto const status = ValidateDeadlineOptions(options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "margin: must be >= 0, got -1ms");
}

TEST(ValidateDeadlineOptions, MinUsefulAttempt) {
  for (auto bad : {Duration::zero(), Duration(milliseconds(-5))}) {
    DeadlineOptions options;
    options.min_useful_attempt = bad;
    auto const status = ValidateDeadlineOptions(options);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()), StartsWith("min_useful_attempt: must be > 0"));
  }
}

TEST(ValidateDeadlineOptions, AttemptCap) {
  for (auto bad : {Duration::zero(), Duration(seconds(-1))}) {
    DeadlineOptions options;
    options.attempt_cap = bad;
    auto const status = ValidateDeadlineOptions(options);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()), StartsWith("attempt_cap: must be > 0"));
  }
  DeadlineOptions options;
  options.attempt_cap = nanoseconds(1);
  EXPECT_TRUE(ValidateDeadlineOptions(options).ok());
}

// ---- AttemptTimeout -------------------------------------------------------

TEST(AttemptTimeout, RemainingMinusMargin) {
  auto const d = Deadline::After(kNow, seconds(2));
  EXPECT_EQ(AttemptTimeout(d, kNow, DeadlineOptions{}), milliseconds(1990));
  EXPECT_EQ(AttemptTimeout(d, kNow + milliseconds(300), DeadlineOptions{}), milliseconds(1690));
}

TEST(AttemptTimeout, CapWins) {
  DeadlineOptions options;
  options.attempt_cap = milliseconds(500);
  auto const d = Deadline::After(kNow, seconds(2));
  EXPECT_EQ(AttemptTimeout(d, kNow, options), milliseconds(500));
  // Near the end the deadline wins again.
  EXPECT_EQ(AttemptTimeout(d, kNow + milliseconds(1700), options), milliseconds(290));
}

TEST(AttemptTimeout, NeverNegative) {
  auto const d = Deadline::After(kNow, milliseconds(5));
  EXPECT_EQ(AttemptTimeout(d, kNow, DeadlineOptions{}), Duration::zero());
  EXPECT_EQ(AttemptTimeout(d, kNow + seconds(10), DeadlineOptions{}), Duration::zero());
  auto const exact = Deadline::After(kNow, milliseconds(10));
  EXPECT_EQ(AttemptTimeout(exact, kNow, DeadlineOptions{}), Duration::zero());
}

TEST(AttemptTimeout, InfiniteDeadline) {
  EXPECT_EQ(AttemptTimeout(Deadline::Infinite(), kNow, DeadlineOptions{}), Duration::max());
  DeadlineOptions options;
  options.attempt_cap = seconds(3);
  EXPECT_EQ(AttemptTimeout(Deadline::Infinite(), kNow, options), seconds(3));
}

TEST(AttemptTimeout, SaturatedDeadline) {
  auto const d = Deadline::After(kNow, Duration::max() - seconds(2000));
  EXPECT_EQ(AttemptTimeout(d, kNow, DeadlineOptions{}),
            Duration::max() - seconds(2000) - milliseconds(10));
  DeadlineOptions options;
  options.margin = Duration::zero();
  EXPECT_EQ(AttemptTimeout(Deadline::At(TimePoint::max()), TimePoint::min(), options),
            Duration::max());
}

// ---- WaitFits -------------------------------------------------------------

TEST(WaitFits, ExactBoundary) {
  // 100 ms wait + 50 ms attempt + 10 ms margin = 160 ms.
  DeadlineOptions const options;
  EXPECT_TRUE(WaitFits(Deadline::After(kNow, milliseconds(160)), kNow, milliseconds(100), options));
  EXPECT_FALSE(WaitFits(Deadline::After(kNow, milliseconds(160) - nanoseconds(1)), kNow,
                        milliseconds(100), options));
  EXPECT_TRUE(WaitFits(Deadline::After(kNow, milliseconds(60)), kNow, Duration::zero(), options));
  EXPECT_FALSE(WaitFits(Deadline::After(kNow, milliseconds(59)), kNow, Duration::zero(), options));
}

TEST(WaitFits, LaterNow) {
  DeadlineOptions const options;
  auto const d = Deadline::After(kNow, seconds(1));
  EXPECT_TRUE(WaitFits(d, kNow + milliseconds(840), milliseconds(100), options));
  EXPECT_FALSE(WaitFits(d, kNow + milliseconds(841), milliseconds(100), options));
  EXPECT_FALSE(WaitFits(d, kNow + seconds(2), Duration::zero(), options));
}

TEST(WaitFits, NegativeDelayCountsAsNoWait) {
  DeadlineOptions const options;
  auto const d = Deadline::After(kNow, milliseconds(60));
  EXPECT_TRUE(WaitFits(d, kNow, -seconds(10), options));
  EXPECT_FALSE(WaitFits(Deadline::After(kNow, milliseconds(59)), kNow, -seconds(10), options));
}

TEST(WaitFits, InfiniteDeadlineAlwaysFits) {
  EXPECT_TRUE(WaitFits(Deadline::Infinite(), kNow, Duration::max(), DeadlineOptions{}));
  EXPECT_TRUE(WaitFits(Deadline::Infinite(), TimePoint::max(), seconds(1), DeadlineOptions{}));
}

TEST(WaitFits, HugeDelaySaturates) {
  auto const d = Deadline::After(kNow, seconds(3600));
  EXPECT_FALSE(WaitFits(d, kNow, Duration::max(), DeadlineOptions{}));
  EXPECT_FALSE(WaitFits(d, TimePoint::max(), Duration::max(), DeadlineOptions{}));
}

// ---- Propagation header ---------------------------------------------------

TEST(DeadlineHeader, DefaultName) { EXPECT_EQ(kDefaultDeadlineHeader, "X-Request-Timeout-Ms"); }

TEST(DeadlineHeader, EncodeWholeMillisecondsRoundedDown) {
  EXPECT_EQ(EncodeDeadlineHeader(milliseconds(1500)), "1500");
  EXPECT_EQ(EncodeDeadlineHeader(milliseconds(1500) + nanoseconds(999999)), "1500");
  EXPECT_EQ(EncodeDeadlineHeader(nanoseconds(999999)), "0");
  EXPECT_EQ(EncodeDeadlineHeader(Duration::zero()), "0");
  EXPECT_EQ(EncodeDeadlineHeader(-seconds(3)), "0");
  EXPECT_EQ(EncodeDeadlineHeader(Duration::min()), "0");
  EXPECT_EQ(EncodeDeadlineHeader(Duration::max()), "9223372036854");
  // The number the call writes into its own buffer is the same rule.
  EXPECT_EQ(DeadlineHeaderMillis(milliseconds(1500) + nanoseconds(999999)), 1500);
  EXPECT_EQ(DeadlineHeaderMillis(-seconds(3)), 0);
  EXPECT_EQ(DeadlineHeaderMillis(Duration::max()), 9223372036854);
}

TEST(DeadlineHeader, Decode) {
  auto d = DeadlineFromHeader("1500", kNow);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->at(), kNow + milliseconds(1500));
  d = DeadlineFromHeader("0", kNow);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->at(), kNow);
  EXPECT_TRUE(d->Expired(kNow));
  d = DeadlineFromHeader("000000000000000042", kNow);  // 18 digits
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->at(), kNow + milliseconds(42));
}

TEST(DeadlineHeader, DecodeSaturates) {
  // Past the end of the clock: the infinite deadline (nothing to pass on).
  auto d = DeadlineFromHeader("999999999999999999", kNow);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->is_infinite());
  EXPECT_EQ(d->at(), TimePoint::max());
  // The largest count of milliseconds that still fits in nanoseconds.
  d = DeadlineFromHeader("9223372036854", TimePoint(Duration::zero()));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->at(), TimePoint(milliseconds(9223372036854)));
  d = DeadlineFromHeader("9223372036855", TimePoint(Duration::zero()));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->at(), TimePoint::max());
}

TEST(DeadlineHeader, RoundTrip) {
  // caller (2 s) -> orders spends 300 ms -> stock sees 1700 ms.
  auto const caller = Deadline::After(kNow, seconds(2));
  auto const orders_now = kNow + milliseconds(300);
  auto const value = EncodeDeadlineHeader(caller.Remaining(orders_now));
  EXPECT_EQ(value, "1700");
  TimePoint const stock_now = TimePoint(seconds(77));  // another process, another clock
  auto const stock = DeadlineFromHeader(value, stock_now);
  ASSERT_TRUE(stock.ok()) << stock.status();
  EXPECT_EQ(stock->Remaining(stock_now), milliseconds(1700));
  // Rounding down never extends the deadline.
  auto const odd = Deadline::After(kNow, milliseconds(1234) + nanoseconds(567890));
  auto const back = DeadlineFromHeader(EncodeDeadlineHeader(odd.Remaining(kNow)), kNow);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->at(), kNow + milliseconds(1234));
  EXPECT_LE(back->at(), odd.at());
}

TEST(DeadlineHeader, RejectsInvalidValuesNamingTheField) {
  for (auto const* bad : {"", " 1500", "1500 ", "-1", "+1", "1.5", "1e3", "abc", "15OO", "0x10",
                          "1234567890123456789" /* 19 digits */}) {
    auto const d = DeadlineFromHeader(bad, kNow);
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(d.status().message()),
                StartsWith("X-Request-Timeout-Ms: must be 1 to 18 ASCII digits"))
        << bad;
  }
}

TEST(DeadlineHeader, ErrorNamesCustomFieldAndShowsValue) {
  auto const d = DeadlineFromHeader("soon", kNow, "grpc-timeout-ms");
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(d.status().message()), StartsWith("grpc-timeout-ms: "));
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("\"soon\""));
  // Control characters are escaped, long values are cut.
  auto const nul = DeadlineFromHeader(std::string_view("1\0"
                                                       "2",
                                                       3),
                                      kNow);
  EXPECT_THAT(std::string(nul.status().message()), HasSubstr("\"1\\x00\\x32\""));
  auto const long_value = DeadlineFromHeader(std::string(100, 'x'), kNow);
  EXPECT_THAT(std::string(long_value.status().message()),
              HasSubstr("\"" + std::string(32, 'x') + "\"..."));
}

}  // namespace
}  // namespace saferetry

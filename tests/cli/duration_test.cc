// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "tools/cli/duration.h"

#include <chrono>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace saferetry {
namespace internal {
namespace {

using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::StartsWith;

Duration Parsed(std::string_view text) {
  absl::StatusOr<Duration> d = ParseDuration(text);
  EXPECT_TRUE(d.ok()) << text << ": " << d.status();
  return d.value_or(Duration(-1));
}

std::string ErrorOf(std::string_view text) {
  absl::StatusOr<Duration> d = ParseDuration(text);
  EXPECT_FALSE(d.ok()) << text << " parsed as " << d->count() << "ns";
  if (d.ok()) return "";
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(d.status().message());
}

TEST(ParseDurationTest, EachUnit) {
  EXPECT_EQ(Parsed("1500ms"), milliseconds(1500));
  EXPECT_EQ(Parsed("2s"), seconds(2));
  EXPECT_EQ(Parsed("1m"), minutes(1));
  EXPECT_EQ(Parsed("3h"), hours(3));
  EXPECT_EQ(Parsed("1ms"), milliseconds(1));
}

TEST(ParseDurationTest, SequencesAdd) {
  EXPECT_EQ(Parsed("1m30s"), seconds(90));
  EXPECT_EQ(Parsed("1h1m1s1ms"), hours(1) + minutes(1) + seconds(1) + milliseconds(1));
  EXPECT_EQ(Parsed("0s500ms"), milliseconds(500));
}

TEST(ParseDurationTest, LeadingZerosAreDecimal) {
  EXPECT_EQ(Parsed("007s"), seconds(7));
  EXPECT_EQ(Parsed("010ms"), milliseconds(10));
}

TEST(ParseDurationTest, LargestValuesThatFit) {
  // 2562047h is the largest whole number of hours in int64 nanoseconds.
  EXPECT_EQ(Parsed("2562047h"), hours(2562047));
  EXPECT_EQ(Parsed("9223372036854ms"), milliseconds(9223372036854));
}

TEST(ParseDurationTest, ExactMessage) {
  EXPECT_EQ(ErrorOf("5"),
            "invalid duration \"5\": missing unit (expected a whole number and a unit: ms, s, m "
            "or h, e.g. 1500ms, 2s, 1m)");
}

TEST(ParseDurationTest, RejectsEmptyZeroNegativeAndFractions) {
  EXPECT_THAT(ErrorOf(""), StartsWith("invalid duration \"\": empty"));
  EXPECT_THAT(ErrorOf("0s"), StartsWith("invalid duration \"0s\": must be > 0"));
  EXPECT_THAT(ErrorOf("0ms0s"), StartsWith("invalid duration \"0ms0s\": must be > 0"));
  EXPECT_THAT(ErrorOf("-1s"), StartsWith("invalid duration \"-1s\": must not be negative"));
  EXPECT_THAT(ErrorOf("1.5s"),
              StartsWith("invalid duration \"1.5s\": fractions are not supported"));
  EXPECT_THAT(ErrorOf(".5s"), StartsWith("invalid duration \".5s\": fractions are not supported"));
  EXPECT_THAT(ErrorOf("+1s"),
              StartsWith("invalid duration \"+1s\": expected a digit at position 0"));
}

TEST(ParseDurationTest, RejectsMissingAndUnknownUnits) {
  EXPECT_THAT(ErrorOf("1500"), StartsWith("invalid duration \"1500\": missing unit"));
  EXPECT_THAT(ErrorOf("1m30"), StartsWith("invalid duration \"1m30\": missing unit"));
  EXPECT_THAT(ErrorOf("1us"), StartsWith("invalid duration \"1us\": unknown unit \"us\""));
  EXPECT_THAT(ErrorOf("1MS"), StartsWith("invalid duration \"1MS\": unknown unit \"MS\""));
  EXPECT_THAT(ErrorOf("1 s"), StartsWith("invalid duration \"1 s\": unknown unit \" s\""));
  EXPECT_THAT(ErrorOf("1d"), StartsWith("invalid duration \"1d\": unknown unit \"d\""));
  EXPECT_THAT(ErrorOf("s"), StartsWith("invalid duration \"s\": expected a digit at position 0"));
  EXPECT_THAT(ErrorOf(" 1s"),
              StartsWith("invalid duration \" 1s\": expected a digit at position 0"));
  EXPECT_THAT(ErrorOf("1s "), StartsWith("invalid duration \"1s \": unknown unit \"s \""));
}

TEST(ParseDurationTest, RejectsOverflow) {
  EXPECT_THAT(ErrorOf("2562048h"), StartsWith("invalid duration \"2562048h\": too large"));
  EXPECT_THAT(ErrorOf("9223372036855ms"), HasSubstr(": too large"));
  EXPECT_THAT(ErrorOf("2562047h2562047h"), HasSubstr(": too large"));
  EXPECT_THAT(ErrorOf("99999999999999999999999999s"), HasSubstr(": too large"));
}

TEST(ParseDurationTest, ControlBytesAreEscapedAndLongInputCut) {
  EXPECT_THAT(ErrorOf(std::string("1\n", 2)), StartsWith("invalid duration \"1\\n\""));
  EXPECT_THAT(ErrorOf(std::string("1\0s", 3)), StartsWith("invalid duration \"1\\x00s\""));
  const std::string longer(100, 'x');
  EXPECT_THAT(ErrorOf(longer), StartsWith("invalid duration \"" + std::string(64, 'x') + "\"...:"));
}

}  // namespace
}  // namespace internal
}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License,
// Version 2.0.

#include "saferetry/server_hints.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>

namespace saferetry {
namespace {

using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;
using ::testing::Optional;

WallTime Epoch(std::int64_t s) { return WallTime(seconds(s)); }

// Sun, 06 Nov 1994 08:49:37 GMT, the example date of RFC 9110.
constexpr std::int64_t kRfcExample = 784111777;
// Fri, 17 May 2024 12:00:00 GMT.
constexpr std::int64_t kNoon = 1715947200;

// ---- ParseHttpDate --------------------------------------------------------

TEST(ParseHttpDate, ImfFixdate) {
  EXPECT_THAT(ParseHttpDate("Sun, 06 Nov 1994 08:49:37 GMT"),
              Optional(Epoch(kRfcExample)));
  EXPECT_THAT(ParseHttpDate("Thu, 01 Jan 1970 00:00:00 GMT"),
              Optional(Epoch(0)));
  EXPECT_THAT(ParseHttpDate("Tue, 29 Feb 2000 12:00:00 GMT"),
              Optional(Epoch(951825600)));
}

TEST(ParseHttpDate, Rfc850) {
  EXPECT_THAT(ParseHttpDate("Sunday, 06-Nov-94 08:49:37 GMT"),
              Optional(Epoch(kRfcExample)));
}

TEST(ParseHttpDate, Rfc850TwoDigitYearWindow) {
  // 70-99 -> 19xx, 00-69 -> 20xx.
  EXPECT_THAT(ParseHttpDate("Thursday, 01-Jan-70 00:00:00 GMT"),
              Optional(Epoch(0)));
  EXPECT_THAT(ParseHttpDate("Tuesday, 01-Jan-69 00:00:00 GMT"),
              Optional(Epoch(3124224000)));
  EXPECT_THAT(ParseHttpDate("Tuesday, 29-Feb-00 12:00:00 GMT"),
              Optional(Epoch(951825600)));
  EXPECT_THAT(ParseHttpDate("Friday, 17-May-24 12:00:00 GMT"),
              Optional(Epoch(kNoon)));
}

TEST(ParseHttpDate, Asctime) {
  // Single-digit days are padded with a space, giving two spaces.
  EXPECT_THAT(ParseHttpDate("Sun Nov  6 08:49:37 1994"),
              Optional(Epoch(kRfcExample)));
  // A single space is accepted too.
  EXPECT_THAT(ParseHttpDate("Sun Nov 6 08:49:37 1994"),
              Optional(Epoch(kRfcExample)));
  EXPECT_THAT(ParseHttpDate("Fri May 17 12:00:00 2024"),
              Optional(Epoch(kNoon)));
}

TEST(ParseHttpDate, SurroundingWhitespaceIgnored) {
  EXPECT_THAT(ParseHttpDate("  Sun, 06 Nov 1994 08:49:37 GMT\t"),
              Optional(Epoch(kRfcExample)));
}

TEST(ParseHttpDate, WrongWeekdayIsAccepted) {
  // The date fields decide the instant; a mismatched weekday is tolerated.
  EXPECT_THAT(ParseHttpDate("Mon, 06 Nov 1994 08:49:37 GMT"),
              Optional(Epoch(kRfcExample)));
}

TEST(ParseHttpDate, RejectsMalformed) {
  for (auto const* bad : {
           "",
           "   ",
           "Sun, 06 Nov 1994 08:49:37 GMT garbage",
           "Sun, 06 Nov 1994 08:49:37 GMTx",
           "Sun, 06 Nov 1994 08:49:37",      // no GMT
           "Sun, 06 Nov 1994 08:49:37 UTC",  // only GMT is allowed
           "Sun, 06 Nov 1994 08:49:37 +0000",
           "Xyz, 06 Nov 1994 08:49:37 GMT",  // not a weekday
           "Sun, 06 Foo 1994 08:49:37 GMT",  // not a month
           "Sun, 31 Feb 1994 08:49:37 GMT",  // no such day
           "Sun, 06 Nov 1994 25:49:37 GMT",  // no such hour
           "Sun, 06 Nov 94 08:49:37 GMT",    // IMF-fixdate needs four digits
           "Sun, 06 Nov -1994 08:49:37 GMT",
           "Sun, 06 Nov 19940 08:49:37 GMT",
           "Sunday, 06-Nov-1994 08:49:37 GMT",  // RFC 850 has two digits
           "Sun Nov  6 08:49:37 1994 GMT",      // asctime has no zone
           "Sun Nov  6 08:49:37 94",
           "1994-11-06T08:49:37Z",
           "120",
       }) {
    EXPECT_EQ(ParseHttpDate(bad), std::nullopt) << bad;
  }
}

TEST(ParseHttpDate, FarFutureSaturates) {
  // Year 9999 is past what a nanosecond system_clock can hold.
  EXPECT_THAT(ParseHttpDate("Fri, 31 Dec 9999 23:59:59 GMT"),
              Optional(WallTime::max()));
}

// ---- ParseRetryAfter ------------------------------------------------------

TEST(ParseRetryAfter, DeltaSeconds) {
  auto const now = Epoch(kNoon);
  EXPECT_THAT(ParseRetryAfter("120", std::nullopt, now),
              Optional(Duration(seconds(120))));
  EXPECT_THAT(ParseRetryAfter("0", std::nullopt, now), Optional(Duration(0)));
  EXPECT_THAT(ParseRetryAfter("007", std::nullopt, now),
              Optional(Duration(seconds(7))));
  EXPECT_THAT(ParseRetryAfter(" \t5 ", std::nullopt, now),
              Optional(Duration(seconds(5))));
}

TEST(ParseRetryAfter, DeltaSecondsIgnoresDateHeader) {
  EXPECT_THAT(
      ParseRetryAfter("3", "Fri, 17 May 2024 11:00:00 GMT", Epoch(kNoon)),
      Optional(Duration(seconds(3))));
}

TEST(ParseRetryAfter, InvalidValuesGiveNoHint) {
  for (auto const* bad :
       {"", " ", "-1", "+5", "1.0", "1e3", " 5x", "5 5", "0x10", "soon",
        "Sun, 06 Nov 1994 08:49:37 GMT trailing"}) {
    EXPECT_EQ(ParseRetryAfter(bad, std::nullopt, Epoch(kNoon)), std::nullopt)
        << bad;
  }
}

TEST(ParseRetryAfter, HugeDeltaSaturates) {
  auto const now = Epoch(kNoon);
  // The largest whole number of seconds a nanosecond Duration holds.
  EXPECT_THAT(ParseRetryAfter("9223372036", std::nullopt, now),
              Optional(Duration(seconds(9223372036))));
  EXPECT_THAT(ParseRetryAfter("9223372037", std::nullopt, now),
              Optional(Duration::max()));
  EXPECT_THAT(ParseRetryAfter("99999999999999999999999999999999999999",
                              std::nullopt, now),
              Optional(Duration::max()));
}

TEST(ParseRetryAfter, DateAgainstWallClock) {
  EXPECT_THAT(ParseRetryAfter("Fri, 17 May 2024 12:00:30 GMT", std::nullopt,
                              Epoch(kNoon)),
              Optional(Duration(seconds(30))));
  // Sub-second wall time: the delay is exact, not rounded.
  EXPECT_THAT(ParseRetryAfter("Fri, 17 May 2024 12:00:30 GMT", std::nullopt,
                              Epoch(kNoon) + milliseconds(250)),
              Optional(Duration(milliseconds(29750))));
  EXPECT_THAT(ParseRetryAfter("Friday, 17-May-24 12:01:00 GMT", std::nullopt,
                              Epoch(kNoon)),
              Optional(Duration(minutes(1))));
  EXPECT_THAT(
      ParseRetryAfter("Fri May 17 12:00:05 2024", std::nullopt, Epoch(kNoon)),
      Optional(Duration(seconds(5))));
}

TEST(ParseRetryAfter, PastDateIsZero) {
  EXPECT_THAT(ParseRetryAfter("Fri, 17 May 2024 11:59:00 GMT", std::nullopt,
                              Epoch(kNoon)),
              Optional(Duration(0)));
  EXPECT_THAT(ParseRetryAfter("Sun, 06 Nov 1994 08:49:37 GMT", std::nullopt,
                              Epoch(kNoon)),
              Optional(Duration(0)));
  EXPECT_THAT(ParseRetryAfter("Fri, 17 May 2024 12:00:00 GMT", std::nullopt,
                              Epoch(kNoon)),
              Optional(Duration(0)));
}

TEST(ParseRetryAfter, SkewMeasuredAgainstDateHeader) {
  // The server's clock is one hour behind the client's wall clock. Its
  // Retry-After date is 30 s after its own Date; against the wall clock that
  // date is 59.5 minutes in the past and would give 0.
  auto const wall_now = Epoch(kNoon);
  EXPECT_THAT(ParseRetryAfter("Fri, 17 May 2024 11:00:30 GMT",
                              "Fri, 17 May 2024 11:00:00 GMT", wall_now),
              Optional(Duration(seconds(30))));
  // A server one hour ahead: against the wall clock this would be 1 h 30 s.
  EXPECT_THAT(ParseRetryAfter("Fri, 17 May 2024 13:00:30 GMT",
                              "Fri, 17 May 2024 13:00:00 GMT", wall_now),
              Optional(Duration(seconds(30))));
  // Date may use another form than Retry-After.
  EXPECT_THAT(ParseRetryAfter("Fri, 17 May 2024 11:00:30 GMT",
                              "Fri May 17 11:00:00 2024", wall_now),
              Optional(Duration(seconds(30))));
}

TEST(ParseRetryAfter, UnparseableDateHeaderFallsBackToWallClock) {
  EXPECT_THAT(ParseRetryAfter("Fri, 17 May 2024 12:00:30 GMT", "yesterday",
                              Epoch(kNoon)),
              Optional(Duration(seconds(30))));
  EXPECT_THAT(
      ParseRetryAfter("Fri, 17 May 2024 12:00:30 GMT", "", Epoch(kNoon)),
      Optional(Duration(seconds(30))));
}

TEST(ParseRetryAfter, ExtremeDatesDoNotOverflow) {
  // Far-future date against a very early wall clock saturates.
  EXPECT_THAT(ParseRetryAfter("Fri, 31 Dec 9999 23:59:59 GMT", std::nullopt,
                              WallTime::min()),
              Optional(Duration::max()));
  EXPECT_THAT(ParseRetryAfter("Sun, 06 Nov 1994 08:49:37 GMT", std::nullopt,
                              WallTime::max()),
              Optional(Duration(0)));
}

// ---- ExtractServerHints ---------------------------------------------------

TEST(ExtractServerHints, NoHeadersNoHints) {
  auto const hints = ExtractServerHints({}, Epoch(kNoon), HintOptions{});
  EXPECT_EQ(hints.retry_after, std::nullopt);
  EXPECT_FALSE(hints.do_not_retry);
}

TEST(ExtractServerHints, ReadsRetryAfterCaseInsensitively) {
  Headers const headers = {{"Content-Type", "text/plain"},
                           {"retry-after", "7"}};
  auto const hints = ExtractServerHints(headers, Epoch(kNoon), HintOptions{});
  EXPECT_THAT(hints.retry_after, Optional(Duration(seconds(7))));
  EXPECT_FALSE(hints.do_not_retry);
}

TEST(ExtractServerHints, FirstRetryAfterWins) {
  Headers const headers = {{"Retry-After", "2"}, {"Retry-After", "9"}};
  EXPECT_THAT(
      ExtractServerHints(headers, Epoch(kNoon), HintOptions{}).retry_after,
      Optional(Duration(seconds(2))));
}

TEST(ExtractServerHints, ClampsToDefaultMaximum) {
  Headers const headers = {{"Retry-After", "3600"}};
  EXPECT_THAT(
      ExtractServerHints(headers, Epoch(kNoon), HintOptions{}).retry_after,
      Optional(Duration(seconds(60))));
}

TEST(ExtractServerHints, ClampsToConfiguredMaximum) {
  HintOptions options;
  options.max_retry_after = milliseconds(1500);
  EXPECT_THAT(ExtractServerHints({{"Retry-After", "2"}}, Epoch(kNoon), options)
                  .retry_after,
              Optional(Duration(milliseconds(1500))));
  EXPECT_THAT(ExtractServerHints({{"Retry-After", "1"}}, Epoch(kNoon), options)
                  .retry_after,
              Optional(Duration(seconds(1))));
  EXPECT_THAT(ExtractServerHints({{"Retry-After", "999999999999999999999"}},
                                 Epoch(kNoon), options)
                  .retry_after,
              Optional(Duration(milliseconds(1500))));
}

TEST(ExtractServerHints, UsesDateHeaderForSkew) {
  // Server one hour behind; 45 s after its own Date.
  Headers const headers = {{"date", "Fri, 17 May 2024 11:00:00 GMT"},
                           {"RETRY-AFTER", "Fri, 17 May 2024 11:00:45 GMT"}};
  EXPECT_THAT(
      ExtractServerHints(headers, Epoch(kNoon), HintOptions{}).retry_after,
      Optional(Duration(seconds(45))));
}

TEST(ExtractServerHints, DateHintIsClamped) {
  Headers const headers = {{"Date", "Fri, 17 May 2024 12:00:00 GMT"},
                           {"Retry-After", "Fri, 17 May 2024 14:00:00 GMT"}};
  EXPECT_THAT(
      ExtractServerHints(headers, Epoch(kNoon), HintOptions{}).retry_after,
      Optional(Duration(seconds(60))));
}

TEST(ExtractServerHints, InvalidRetryAfterIgnored) {
  for (auto const* bad : {"-1", "1.0", "garbage", ""}) {
    Headers const headers = {{"Retry-After", bad}};
    EXPECT_EQ(
        ExtractServerHints(headers, Epoch(kNoon), HintOptions{}).retry_after,
        std::nullopt)
        << bad;
  }
}

TEST(ExtractServerHints, DoNotRetryHeaderOffByDefault) {
  Headers const headers = {{"X-Should-Retry", "false"}};
  EXPECT_FALSE(
      ExtractServerHints(headers, Epoch(kNoon), HintOptions{}).do_not_retry);
}

TEST(ExtractServerHints, DoNotRetryHeaderPresence) {
  HintOptions options;
  options.do_not_retry_header = "X-Should-Retry";
  auto do_not_retry = [&](Headers const& headers) {
    return ExtractServerHints(headers, Epoch(kNoon), options).do_not_retry;
  };
  EXPECT_FALSE(do_not_retry({}));
  EXPECT_FALSE(do_not_retry({{"X-Other", "false"}}));
  EXPECT_TRUE(do_not_retry({{"x-should-retry", "false"}}));
  EXPECT_TRUE(do_not_retry({{"X-Should-Retry", ""}}));
  EXPECT_TRUE(do_not_retry({{"X-Should-Retry", "no"}}));
  EXPECT_TRUE(do_not_retry({{"X-Should-Retry", "1"}}));
  // Only "true", in any case and with optional whitespace, allows retries.
  EXPECT_FALSE(do_not_retry({{"X-Should-Retry", "true"}}));
  EXPECT_FALSE(do_not_retry({{"X-Should-Retry", " TRUE "}}));
  EXPECT_FALSE(do_not_retry({{"X-Should-Retry", "True"}}));
  // The first occurrence decides.
  EXPECT_TRUE(
      do_not_retry({{"X-Should-Retry", "false"}, {"X-Should-Retry", "true"}}));
}

TEST(ExtractServerHints, BothHintsTogether) {
  HintOptions options;
  options.do_not_retry_header = "X-No-Retry";
  Headers const headers = {{"Retry-After", "4"}, {"X-No-Retry", "1"}};
  auto const hints = ExtractServerHints(headers, Epoch(kNoon), options);
  EXPECT_THAT(hints.retry_after, Optional(Duration(seconds(4))));
  EXPECT_TRUE(hints.do_not_retry);
}

}  // namespace
}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License,
// Version 2.0.

#include "saferetry/server_hints.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

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
  EXPECT_THAT(ParseHttpDate("Sun, 06 Nov 1994 08:49:37 GMT"), Optional(Epoch(kRfcExample)));
  EXPECT_THAT(ParseHttpDate("Thu, 01 Jan 1970 00:00:00 GMT"), Optional(Epoch(0)));
  EXPECT_THAT(ParseHttpDate("Tue, 29 Feb 2000 12:00:00 GMT"), Optional(Epoch(951825600)));
}

TEST(ParseHttpDate, Rfc850) {
  EXPECT_THAT(ParseHttpDate("Sunday, 06-Nov-94 08:49:37 GMT"), Optional(Epoch(kRfcExample)));
}

TEST(ParseHttpDate, Rfc850TwoDigitYearWindow) {
  // 70-99 -> 19xx, 00-69 -> 20xx.
  EXPECT_THAT(ParseHttpDate("Thursday, 01-Jan-70 00:00:00 GMT"), Optional(Epoch(0)));
  EXPECT_THAT(ParseHttpDate("Tuesday, 01-Jan-69 00:00:00 GMT"), Optional(Epoch(3124224000)));
  EXPECT_THAT(ParseHttpDate("Tuesday, 29-Feb-00 12:00:00 GMT"), Optional(Epoch(951825600)));
  EXPECT_THAT(ParseHttpDate("Friday, 17-May-24 12:00:00 GMT"), Optional(Epoch(kNoon)));
}

TEST(ParseHttpDate, Asctime) {
  // Single-digit days are padded with a space, giving two spaces.
  EXPECT_THAT(ParseHttpDate("Sun Nov  6 08:49:37 1994"), Optional(Epoch(kRfcExample)));
  // A single space is accepted too.
  EXPECT_THAT(ParseHttpDate("Sun Nov 6 08:49:37 1994"), Optional(Epoch(kRfcExample)));
  EXPECT_THAT(ParseHttpDate("Fri May 17 12:00:00 2024"), Optional(Epoch(kNoon)));
}

TEST(ParseHttpDate, UtcZoneReadAsGmt) {
  EXPECT_THAT(ParseHttpDate("Sun, 06 Nov 1994 08:49:37 UTC"), Optional(Epoch(kRfcExample)));
  EXPECT_THAT(ParseHttpDate("Sunday, 06-Nov-94 08:49:37 UTC"), Optional(Epoch(kRfcExample)));
  EXPECT_THAT(ParseHttpDate(" Fri, 17 May 2024 12:00:00 UTC\t"), Optional(Epoch(kNoon)));
}

TEST(ParseHttpDate, OtherZonesRejected) {
  for (auto const* bad : {
           "Sun, 06 Nov 1994 08:49:37 utc",
           "Sun, 06 Nov 1994 08:49:37 UT",
           "Sun, 06 Nov 1994 08:49:37 CET",
           "Sun, 06 Nov 1994 08:49:37 +0000",
           "Sun, 06 Nov 1994 08:49:37UTC",
           "Sun, 06 Nov 1994 08:49:37 GMT UTC",
           "Sun Nov  6 08:49:37 1994 UTC",
           "UTC",
       }) {
    EXPECT_EQ(ParseHttpDate(bad), std::nullopt) << bad;
  }
}

TEST(ParseHttpDate, SurroundingWhitespaceIgnored) {
  EXPECT_THAT(ParseHttpDate("  Sun, 06 Nov 1994 08:49:37 GMT\t"), Optional(Epoch(kRfcExample)));
}

TEST(ParseHttpDate, WrongWeekdayIsAccepted) {
  // The date fields decide the instant; a mismatched weekday is tolerated.
  EXPECT_THAT(ParseHttpDate("Mon, 06 Nov 1994 08:49:37 GMT"), Optional(Epoch(kRfcExample)));
}

TEST(ParseHttpDate, RejectsMalformed) {
  for (auto const* bad : {
           "",
           "   ",
           "Sun, 06 Nov 1994 08:49:37 GMT garbage",
           "Sun, 06 Nov 1994 08:49:37 GMTx",
           "Sun, 06 Nov 1994 08:49:37",       // no GMT
           "Sun, 06 Nov 1994 08:49:37 CEST",  // only GMT (or UTC) is allowed
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
  EXPECT_THAT(ParseHttpDate("Fri, 31 Dec 9999 23:59:59 GMT"), Optional(WallTime::max()));
}

// ---- ParseRetryAfter ------------------------------------------------------

TEST(ParseRetryAfter, DeltaSeconds) {
  auto const now = Epoch(kNoon);
  EXPECT_THAT(ParseRetryAfter("120", std::nullopt, now), Optional(Duration(seconds(120))));
  EXPECT_THAT(ParseRetryAfter("0", std::nullopt, now), Optional(Duration(0)));
  EXPECT_THAT(ParseRetryAfter("007", std::nullopt, now), Optional(Duration(seconds(7))));
  EXPECT_THAT(ParseRetryAfter(" \t5 ", std::nullopt, now), Optional(Duration(seconds(5))));
}

TEST(ParseRetryAfter, DeltaSecondsIgnoresDateHeader) {
  EXPECT_THAT(ParseRetryAfter("3", "Fri, 17 May 2024 11:00:00 GMT", Epoch(kNoon)),
              Optional(Duration(seconds(3))));
}

TEST(ParseRetryAfter, InvalidValuesGiveNoHint) {
  for (auto const* bad : {"", " ", "-1", "+5", "1.0", "1e3", " 5x", "5 5", "0x10", "soon",
                          "Sun, 06 Nov 1994 08:49:37 GMT trailing"}) {
    EXPECT_EQ(ParseRetryAfter(bad, std::nullopt, Epoch(kNoon)), std::nullopt) << bad;
  }
}

TEST(ParseRetryAfter, HugeDeltaSaturates) {
  auto const now = Epoch(kNoon);
  // The largest whole number of seconds a nanosecond Duration holds.
  EXPECT_THAT(ParseRetryAfter("9223372036", std::nullopt, now),
              Optional(Duration(seconds(9223372036))));
  EXPECT_THAT(ParseRetryAfter("9223372037", std::nullopt, now), Optional(Duration::max()));
  EXPECT_THAT(ParseRetryAfter("99999999999999999999999999999999999999", std::nullopt, now),
              Optional(Duration::max()));
}

TEST(ParseRetryAfter, DateAgainstWallClock) {
  EXPECT_THAT(ParseRetryAfter("Fri, 17 May 2024 12:00:30 GMT", std::nullopt, Epoch(kNoon)),
              Optional(Duration(seconds(30))));
  // Sub-second wall time: the delay is exact, not rounded.
  EXPECT_THAT(ParseRetryAfter("Fri, 17 May 2024 12:00:30 GMT", std::nullopt,
                              Epoch(kNoon) + milliseconds(250)),
              Optional(Duration(milliseconds(29750))));
  EXPECT_THAT(ParseRetryAfter("Friday, 17-May-24 12:01:00 GMT", std::nullopt, Epoch(kNoon)),
              Optional(Duration(minutes(1))));
  EXPECT_THAT(ParseRetryAfter("Fri May 17 12:00:05 2024", std::nullopt, Epoch(kNoon)),
              Optional(Duration(seconds(5))));
}

TEST(ParseRetryAfter, PastDateIsZero) {
  EXPECT_THAT(ParseRetryAfter("Fri, 17 May 2024 11:59:00 GMT", std::nullopt, Epoch(kNoon)),
              Optional(Duration(0)));
  EXPECT_THAT(ParseRetryAfter("Sun, 06 Nov 1994 08:49:37 GMT", std::nullopt, Epoch(kNoon)),
              Optional(Duration(0)));
  EXPECT_THAT(ParseRetryAfter("Fri, 17 May 2024 12:00:00 GMT", std::nullopt, Epoch(kNoon)),
              Optional(Duration(0)));
}

TEST(ParseRetryAfter, SkewMeasuredAgainstDateHeader) {
  // The server's clock is one hour behind the client's wall clock. Its
  // Retry-After date is 30 s after its own Date; against the wall clock that
  // date is 59.5 minutes in the past and would give 0.
  auto const wall_now = Epoch(kNoon);
  EXPECT_THAT(
      ParseRetryAfter("Fri, 17 May 2024 11:00:30 GMT", "Fri, 17 May 2024 11:00:00 GMT", wall_now),
      Optional(Duration(seconds(30))));
  // A server one hour ahead: against the wall clock this would be 1 h 30 s.
  EXPECT_THAT(
      ParseRetryAfter("Fri, 17 May 2024 13:00:30 GMT", "Fri, 17 May 2024 13:00:00 GMT", wall_now),
      Optional(Duration(seconds(30))));
  // Date may use another form than Retry-After.
  EXPECT_THAT(
      ParseRetryAfter("Fri, 17 May 2024 11:00:30 GMT", "Fri May 17 11:00:00 2024", wall_now),
      Optional(Duration(seconds(30))));
}

TEST(ParseRetryAfter, UnparseableDateHeaderFallsBackToWallClock) {
  EXPECT_THAT(ParseRetryAfter("Fri, 17 May 2024 12:00:30 GMT", "yesterday", Epoch(kNoon)),
              Optional(Duration(seconds(30))));
  EXPECT_THAT(ParseRetryAfter("Fri, 17 May 2024 12:00:30 GMT", "", Epoch(kNoon)),
              Optional(Duration(seconds(30))));
}

TEST(ParseRetryAfter, ExtremeDatesDoNotOverflow) {
  // Far-future date against a very early wall clock saturates.
  EXPECT_THAT(ParseRetryAfter("Fri, 31 Dec 9999 23:59:59 GMT", std::nullopt, WallTime::min()),
              Optional(Duration::max()));
  EXPECT_THAT(ParseRetryAfter("Sun, 06 Nov 1994 08:49:37 GMT", std::nullopt, WallTime::max()),
              Optional(Duration(0)));
}

TEST(ParseRetryAfter, UtcDate) {
  EXPECT_THAT(ParseRetryAfter("Fri, 17 May 2024 12:00:30 UTC", std::nullopt, Epoch(kNoon)),
              Optional(Duration(seconds(30))));
  // A Date header written in UTC is used for the skew too.
  EXPECT_THAT(ParseRetryAfter("Fri, 17 May 2024 11:00:10 GMT", "Fri, 17 May 2024 11:00:00 UTC",
                              Epoch(kNoon)),
              Optional(Duration(seconds(10))));
}

// ---- ParseRetryAfterMs ----------------------------------------------------

TEST(ParseRetryAfterMs, Milliseconds) {
  EXPECT_THAT(ParseRetryAfterMs("0"), Optional(Duration(0)));
  EXPECT_THAT(ParseRetryAfterMs("1"), Optional(Duration(milliseconds(1))));
  EXPECT_THAT(ParseRetryAfterMs("1500"), Optional(Duration(milliseconds(1500))));
  EXPECT_THAT(ParseRetryAfterMs(" 250\t"), Optional(Duration(milliseconds(250))));
  EXPECT_THAT(ParseRetryAfterMs("007"), Optional(Duration(milliseconds(7))));
}

TEST(ParseRetryAfterMs, InvalidValuesGiveNoHint) {
  for (auto const* bad :
       {"", " ", "-1", "+5", "1.5", "1e3", "5ms", "abc", "Fri, 17 May 2024 12:00:00 GMT"}) {
    EXPECT_EQ(ParseRetryAfterMs(bad), std::nullopt) << bad;
  }
}

TEST(ParseRetryAfterMs, HugeValueSaturates) {
  // 9223372036854 ms is the largest whole millisecond count that fits.
  EXPECT_THAT(ParseRetryAfterMs("9223372036854"), Optional(Duration(milliseconds(9223372036854))));
  EXPECT_THAT(ParseRetryAfterMs("9223372036855"), Optional(Duration::max()));
  EXPECT_THAT(ParseRetryAfterMs("99999999999999999999999999999"), Optional(Duration::max()));
}

// ---- ParseKeyState --------------------------------------------------------

TEST(ParseKeyState, EveryValueAnyCase) {
  EXPECT_EQ(ParseKeyState("completed"), KeyState::kCompleted);
  EXPECT_EQ(ParseKeyState("processing"), KeyState::kProcessing);
  EXPECT_EQ(ParseKeyState("abandoned"), KeyState::kAbandoned);
  EXPECT_EQ(ParseKeyState("expired"), KeyState::kExpired);
  EXPECT_EQ(ParseKeyState("unknown"), KeyState::kUnknown);
  EXPECT_EQ(ParseKeyState("fenced"), KeyState::kFenced);
  EXPECT_EQ(ParseKeyState("rejected"), KeyState::kRejected);
  EXPECT_EQ(ParseKeyState("COMPLETED"), KeyState::kCompleted);
  EXPECT_EQ(ParseKeyState("Rejected"), KeyState::kRejected);
  EXPECT_EQ(ParseKeyState(" fenced\t"), KeyState::kFenced);
}

TEST(ParseKeyState, AnythingElseIsNone) {
  for (auto const* other :
       {"", "complete", "done", "completed,", "in-progress", "fenced rejected", "1"}) {
    EXPECT_EQ(ParseKeyState(other), KeyState::kNone) << other;
  }
}

// ---- ExtractServerHints ---------------------------------------------------

TEST(ExtractServerHints, NoHeadersNoHints) {
  auto const hints = ExtractServerHints({}, Epoch(kNoon), HintOptions{});
  EXPECT_EQ(hints.retry_after, std::nullopt);
  EXPECT_FALSE(hints.do_not_retry);
  EXPECT_EQ(hints.key_state, KeyState::kNone);
  EXPECT_FALSE(hints.replayed);
}

TEST(ExtractServerHints, ReadsRetryAfterCaseInsensitively) {
  Headers const headers = {{"Content-Type", "text/plain"}, {"retry-after", "7"}};
  auto const hints = ExtractServerHints(headers, Epoch(kNoon), HintOptions{});
  EXPECT_THAT(hints.retry_after, Optional(Duration(seconds(7))));
  EXPECT_FALSE(hints.do_not_retry);
}

TEST(ExtractServerHints, FirstRetryAfterWins) {
  Headers const headers = {{"Retry-After", "2"}, {"Retry-After", "9"}};
  EXPECT_THAT(ExtractServerHints(headers, Epoch(kNoon), HintOptions{}).retry_after,
              Optional(Duration(seconds(2))));
}

TEST(ExtractServerHints, ClampsToDefaultMaximum) {
  Headers const headers = {{"Retry-After", "3600"}};
  EXPECT_THAT(ExtractServerHints(headers, Epoch(kNoon), HintOptions{}).retry_after,
              Optional(Duration(seconds(60))));
}

TEST(ExtractServerHints, ClampsToConfiguredMaximum) {
  HintOptions options;
  options.max_retry_after = milliseconds(1500);
  EXPECT_THAT(ExtractServerHints({{"Retry-After", "2"}}, Epoch(kNoon), options).retry_after,
              Optional(Duration(milliseconds(1500))));
  EXPECT_THAT(ExtractServerHints({{"Retry-After", "1"}}, Epoch(kNoon), options).retry_after,
              Optional(Duration(seconds(1))));
  EXPECT_THAT(ExtractServerHints({{"Retry-After", "999999999999999999999"}}, Epoch(kNoon), options)
                  .retry_after,
              Optional(Duration(milliseconds(1500))));
}

// The clamp is reported, so the call can stop instead of coming back early.
TEST(ExtractServerHints, SaysWhenTheHintWasAboveTheMaximum) {
  HintOptions options;
  options.max_retry_after = milliseconds(1500);
  EXPECT_TRUE(
      ExtractServerHints({{"Retry-After", "2"}}, Epoch(kNoon), options).retry_after_above_max);
  EXPECT_TRUE(ExtractServerHints({{"retry-after-ms", "1501"}}, Epoch(kNoon), options)
                  .retry_after_above_max);
  EXPECT_FALSE(ExtractServerHints({{"retry-after-ms", "1500"}}, Epoch(kNoon), options)
                   .retry_after_above_max);
  EXPECT_FALSE(
      ExtractServerHints({{"Retry-After", "1"}}, Epoch(kNoon), options).retry_after_above_max);
  EXPECT_FALSE(ExtractServerHints({}, Epoch(kNoon), options).retry_after_above_max);
}

TEST(ExtractServerHints, UsesDateHeaderForSkew) {
  // Server one hour behind; 45 s after its own Date.
  Headers const headers = {{"date", "Fri, 17 May 2024 11:00:00 GMT"},
                           {"RETRY-AFTER", "Fri, 17 May 2024 11:00:45 GMT"}};
  EXPECT_THAT(ExtractServerHints(headers, Epoch(kNoon), HintOptions{}).retry_after,
              Optional(Duration(seconds(45))));
}

TEST(ExtractServerHints, DateHintIsClamped) {
  Headers const headers = {{"Date", "Fri, 17 May 2024 12:00:00 GMT"},
                           {"Retry-After", "Fri, 17 May 2024 14:00:00 GMT"}};
  EXPECT_THAT(ExtractServerHints(headers, Epoch(kNoon), HintOptions{}).retry_after,
              Optional(Duration(seconds(60))));
}

TEST(ExtractServerHints, InvalidRetryAfterIgnored) {
  for (auto const* bad : {"-1", "1.0", "garbage", ""}) {
    Headers const headers = {{"Retry-After", bad}};
    EXPECT_EQ(ExtractServerHints(headers, Epoch(kNoon), HintOptions{}).retry_after, std::nullopt)
        << bad;
  }
}

TEST(ExtractServerHints, DoNotRetryHeaderOffByDefault) {
  Headers const headers = {{"X-Should-Retry", "false"}};
  EXPECT_FALSE(ExtractServerHints(headers, Epoch(kNoon), HintOptions{}).do_not_retry);
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
  EXPECT_TRUE(do_not_retry({{"X-Should-Retry", "false"}, {"X-Should-Retry", "true"}}));
}

TEST(ExtractServerHints, BothHintsTogether) {
  HintOptions options;
  options.do_not_retry_header = "X-No-Retry";
  Headers const headers = {{"Retry-After", "4"}, {"X-No-Retry", "1"}};
  auto const hints = ExtractServerHints(headers, Epoch(kNoon), options);
  EXPECT_THAT(hints.retry_after, Optional(Duration(seconds(4))));
  EXPECT_TRUE(hints.do_not_retry);
}

TEST(ExtractServerHints, MillisecondHeaders) {
  auto retry_after = [](Headers const& headers) {
    return ExtractServerHints(headers, Epoch(kNoon), HintOptions{}).retry_after;
  };
  EXPECT_THAT(retry_after({{"retry-after-ms", "1500"}}), Optional(Duration(milliseconds(1500))));
  EXPECT_THAT(retry_after({{"Retry-After-Ms", "20"}}), Optional(Duration(milliseconds(20))));
  EXPECT_THAT(retry_after({{"x-ms-retry-after-ms", "750"}}), Optional(Duration(milliseconds(750))));
  EXPECT_THAT(retry_after({{"X-MS-Retry-After-MS", "0"}}), Optional(Duration(0)));
}

TEST(ExtractServerHints, MillisecondPrecedence) {
  auto retry_after = [](Headers const& headers) {
    return ExtractServerHints(headers, Epoch(kNoon), HintOptions{}).retry_after;
  };
  // retry-after-ms beats x-ms-retry-after-ms beats Retry-After, whatever the
  // order of the headers.
  EXPECT_THAT(
      retry_after(
          {{"Retry-After", "2"}, {"x-ms-retry-after-ms", "300"}, {"retry-after-ms", "100"}}),
      Optional(Duration(milliseconds(100))));
  EXPECT_THAT(retry_after({{"Retry-After", "2"}, {"x-ms-retry-after-ms", "300"}}),
              Optional(Duration(milliseconds(300))));
  // A millisecond hint of 0 still wins over a longer Retry-After.
  EXPECT_THAT(retry_after({{"Retry-After", "2"}, {"retry-after-ms", "0"}}), Optional(Duration(0)));
  // An invalid value counts as absent: the next header is tried.
  EXPECT_THAT(
      retry_after(
          {{"retry-after-ms", "1.5"}, {"x-ms-retry-after-ms", "300"}, {"Retry-After", "2"}}),
      Optional(Duration(milliseconds(300))));
  EXPECT_THAT(
      retry_after(
          {{"retry-after-ms", "soon"}, {"x-ms-retry-after-ms", "-1"}, {"Retry-After", "2"}}),
      Optional(Duration(seconds(2))));
  EXPECT_EQ(retry_after({{"retry-after-ms", "x"}, {"x-ms-retry-after-ms", ""}}), std::nullopt);
  // The first occurrence of a name decides for that name.
  EXPECT_THAT(retry_after({{"retry-after-ms", "40"}, {"retry-after-ms", "90"}}),
              Optional(Duration(milliseconds(40))));
}

TEST(ExtractServerHints, MillisecondHintsAreClamped) {
  HintOptions options;
  options.max_retry_after = milliseconds(1500);
  auto retry_after = [&](Headers const& headers) {
    return ExtractServerHints(headers, Epoch(kNoon), options).retry_after;
  };
  EXPECT_THAT(retry_after({{"retry-after-ms", "1501"}}), Optional(Duration(milliseconds(1500))));
  EXPECT_THAT(retry_after({{"retry-after-ms", "1499"}}), Optional(Duration(milliseconds(1499))));
  EXPECT_THAT(retry_after({{"x-ms-retry-after-ms", "99999999999999999999"}}),
              Optional(Duration(milliseconds(1500))));
  // Default maximum: 60 s.
  EXPECT_THAT(
      ExtractServerHints({{"retry-after-ms", "3600000"}}, Epoch(kNoon), HintOptions{}).retry_after,
      Optional(Duration(seconds(60))));
}

TEST(ExtractServerHints, UtcRetryAfterDate) {
  Headers const headers = {{"Date", "Fri, 17 May 2024 12:00:00 UTC"},
                           {"Retry-After", "Fri, 17 May 2024 12:00:05 UTC"}};
  EXPECT_THAT(ExtractServerHints(headers, Epoch(kNoon), HintOptions{}).retry_after,
              Optional(Duration(seconds(5))));
}

TEST(ExtractServerHints, KeyState) {
  auto key_state = [](Headers const& headers) {
    return ExtractServerHints(headers, Epoch(kNoon), HintOptions{}).key_state;
  };
  EXPECT_EQ(key_state({{"Idempotency-Key-State", "completed"}}), KeyState::kCompleted);
  EXPECT_EQ(key_state({{"idempotency-key-state", "PROCESSING"}}), KeyState::kProcessing);
  EXPECT_EQ(key_state({{"IDEMPOTENCY-KEY-STATE", "Abandoned"}}), KeyState::kAbandoned);
  EXPECT_EQ(key_state({{"Idempotency-Key-State", "expired"}}), KeyState::kExpired);
  EXPECT_EQ(key_state({{"Idempotency-Key-State", "unknown"}}), KeyState::kUnknown);
  EXPECT_EQ(key_state({{"Idempotency-Key-State", " fenced "}}), KeyState::kFenced);
  EXPECT_EQ(key_state({{"Idempotency-Key-State", "rejected"}}), KeyState::kRejected);
  EXPECT_EQ(key_state({{"Idempotency-Key-State", "gone"}}), KeyState::kNone);
  EXPECT_EQ(key_state({{"Idempotency-Key", "completed"}}), KeyState::kNone);
  // The first occurrence decides.
  EXPECT_EQ(
      key_state({{"Idempotency-Key-State", "rejected"}, {"Idempotency-Key-State", "completed"}}),
      KeyState::kRejected);
}

TEST(ExtractServerHints, Replayed) {
  auto replayed = [](Headers const& headers) {
    return ExtractServerHints(headers, Epoch(kNoon), HintOptions{}).replayed;
  };
  EXPECT_FALSE(replayed({}));
  EXPECT_TRUE(replayed({{"Idempotent-Replayed", "true"}}));
  EXPECT_TRUE(replayed({{"idempotent-replayed", "TRUE"}}));
  EXPECT_TRUE(replayed({{"Idempotent-Replayed", " True "}}));
  EXPECT_FALSE(replayed({{"Idempotent-Replayed", "false"}}));
  EXPECT_FALSE(replayed({{"Idempotent-Replayed", "1"}}));
  EXPECT_FALSE(replayed({{"Idempotent-Replayed", "yes"}}));
  EXPECT_FALSE(replayed({{"Idempotent-Replayed", ""}}));
  EXPECT_FALSE(replayed({{"Idempotent-Replayed", "false"}, {"Idempotent-Replayed", "true"}}));
}

TEST(ExtractServerHints, AllHintsTogether) {
  HintOptions options;
  options.do_not_retry_header = "X-No-Retry";
  Headers const headers = {{"Retry-After", "4"},
                           {"x-ms-retry-after-ms", "1200"},
                           {"X-No-Retry", "1"},
                           {"Idempotency-Key-State", "rejected"},
                           {"Idempotent-Replayed", "true"}};
  auto const hints = ExtractServerHints(headers, Epoch(kNoon), options);
  EXPECT_THAT(hints.retry_after, Optional(Duration(milliseconds(1200))));
  EXPECT_TRUE(hints.do_not_retry);
  EXPECT_EQ(hints.key_state, KeyState::kRejected);
  EXPECT_TRUE(hints.replayed);
}

// A clock that counts its wall-clock readings.
class WallCountingClock final : public Clock {
 public:
  TimePoint Now() override { return TimePoint(seconds(1000)); }
  WallTime WallNow() override {
    ++wall_reads;
    return WallTime(seconds(1767225600));  // 2026-01-01T00:00:00Z
  }
  void SleepFor(Duration) override {}
  using Clock::SleepFor;
  int wall_reads = 0;
};

TEST(ExtractServerHintsFromClockTest, ReadsTheWallClockOnlyForARetryAfterDateWithoutADate) {
  WallCountingClock clock;
  const Headers plain = {{"Content-Type", "application/json"},
                         {"Retry-After", "3"},
                         {"Idempotency-Key-State", "completed"}};
  ServerHints hints = ExtractServerHints(plain, clock, {});
  EXPECT_THAT(hints.retry_after, Optional(seconds(3)));
  EXPECT_EQ(hints.key_state, KeyState::kCompleted);
  EXPECT_EQ(clock.wall_reads, 0);

  // Measured against the server's Date: our clock is not read.
  const Headers dated = {{"Date", "Thu, 01 Jan 2026 00:00:00 GMT"},
                         {"Retry-After", "Thu, 01 Jan 2026 00:00:07 GMT"}};
  EXPECT_THAT(ExtractServerHints(dated, clock, {}).retry_after, Optional(seconds(7)));
  EXPECT_EQ(clock.wall_reads, 0);

  // No Date to measure against: ours, once.
  const Headers undated = {{"retry-after", "Thu, 01 Jan 2026 00:00:05 GMT"}};
  EXPECT_THAT(ExtractServerHints(undated, clock, {}).retry_after, Optional(seconds(5)));
  EXPECT_EQ(clock.wall_reads, 1);
}

TEST(ExtractServerHintsFromClockTest, GivesWhatTheWallTimeFormGives) {
  WallCountingClock clock;
  HintOptions options;
  options.do_not_retry_header = "X-Should-Retry";
  const std::vector<Headers> cases = {
      {},
      {{"RETRY-AFTER-MS", "1500"}, {"Retry-After", "2"}},
      {{"x-ms-retry-after-ms", "bad"}, {"Retry-After", "2"}, {"retry-after", "9"}},
      {{"Idempotent-Replayed", " TRUE "}, {"x-should-retry", "false"}},
      {{"Idempotency-Key-State", "fenced"}, {"Idempotency-Key-State", "completed"}},
      {{"Retry-After", "Thu, 01 Jan 2026 00:10:00 GMT"}, {"Date", "garbage"}},
      {{"Retry-After", "99999999999999999999"}},
  };
  for (const Headers& h : cases) {
    const ServerHints a = ExtractServerHints(h, clock, options);
    const ServerHints b = ExtractServerHints(h, WallTime(seconds(1767225600)), options);
    EXPECT_EQ(a.retry_after, b.retry_after);
    EXPECT_EQ(a.retry_after_above_max, b.retry_after_above_max);
    EXPECT_EQ(a.key_state, b.key_state);
    EXPECT_EQ(a.replayed, b.replayed);
    EXPECT_EQ(a.do_not_retry, b.do_not_retry);
  }
}

}  // namespace
}  // namespace saferetry

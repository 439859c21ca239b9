// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Every row of the --summary-json definition, from hand-built results.

#include "tools/cli/report.h"

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace saferetry {
namespace internal {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

Response MakeResponse(int status, std::string body) {
  Response r;
  r.status_code = status;
  r.body = std::move(body);
  return r;
}

CallResult Result(Outcome outcome, StopReason reason, int attempts, int queries) {
  CallResult r;
  r.outcome = outcome;
  r.stop_reason = reason;
  r.status = absl::OkStatus();
  r.attempts = attempts;
  r.status_queries = queries;
  return r;
}

TEST(ExitCodeTest, OnePerOutcome) {
  EXPECT_EQ(ExitCodeFor(Outcome::kSucceeded), 0);
  EXPECT_EQ(ExitCodeFor(Outcome::kFailed), 1);
  EXPECT_EQ(ExitCodeFor(Outcome::kUnknown), 2);
  EXPECT_EQ(kExitUsage, 64);
}

TEST(SummaryTest, SucceededByResponseExactText) {
  CallResult r = Result(Outcome::kSucceeded, StopReason::kSuccess, 2, 0);
  r.last_response = MakeResponse(201, R"({"order":1})");
  r.resolved_by = ResolvedBy::kResponse;
  r.idempotency_key = "k-1";
  EXPECT_EQ(SummaryText(r, milliseconds(1234)),
            R"({"outcome":"SUCCEEDED","stop_reason":"success","attempts":2,"status_queries":0,)"
            R"("http_status":201,"idempotency_key":"k-1","resolved_by":"response",)"
            R"("elapsed_ms":1234,"body":"{\"order\":1}"})");
}

TEST(SummaryTest, SucceededByStatusQueryReportsTheStatusAnswer) {
  CallResult r = Result(Outcome::kSucceeded, StopReason::kSuccess, 1, 2);
  r.last_response = MakeResponse(200, "found");
  r.resolved_by_status_query = true;
  r.resolved_by = ResolvedBy::kStatusQuery;
  r.idempotency_key = "k";
  nlohmann::ordered_json j = SummaryJson(r, milliseconds(5));
  EXPECT_EQ(j["resolved_by"], "status_query");
  EXPECT_EQ(j["http_status"], 200);
  EXPECT_EQ(j["body"], "found");
  EXPECT_EQ(j["attempts"], 1);
  EXPECT_EQ(j["status_queries"], 2);
}

TEST(SummaryTest, FailedWithAResponseIsResolvedByTheResponse) {
  CallResult r = Result(Outcome::kFailed, StopReason::kPermanentError, 1, 0);
  r.last_response = MakeResponse(422, "bad sku");
  r.resolved_by = ResolvedBy::kResponse;
  nlohmann::ordered_json j = SummaryJson(r, milliseconds(3));
  EXPECT_EQ(j["outcome"], "FAILED");
  EXPECT_EQ(j["stop_reason"], "permanent_error");
  EXPECT_EQ(j["http_status"], 422);
  EXPECT_EQ(j["resolved_by"], "response");
  EXPECT_EQ(j["body"], "bad sku");
  EXPECT_TRUE(j["idempotency_key"].is_null());
}

TEST(SummaryTest, FailedWithNoResponseHasNulls) {
  CallResult r = Result(Outcome::kFailed, StopReason::kAttemptsExhausted, 3, 0);
  r.last_transport_status = absl::UnavailableError("connection refused");
  r.idempotency_key = "k";
  EXPECT_EQ(SummaryText(r, milliseconds(7)),
            R"({"outcome":"FAILED","stop_reason":"attempts_exhausted","attempts":3,)"
            R"("status_queries":0,"http_status":null,"idempotency_key":"k","resolved_by":null,)"
            R"("elapsed_ms":7,"body":null})");
}

TEST(SummaryTest, DefiniteStatusAnswerOfAFailedCallIsNamed) {
  // The key's stored final error (404 `completed`) or a fenced "not found":
  // a status answer decided the FAILED outcome.
  CallResult r = Result(Outcome::kFailed, StopReason::kPermanentError, 1, 1);
  r.last_response = MakeResponse(404, "");
  r.resolved_by_status_query = true;
  r.resolved_by = ResolvedBy::kStatusQuery;
  EXPECT_EQ(SummaryJson(r, milliseconds(0))["resolved_by"], "status_query");
  r.stop_reason = StopReason::kFenced;
  EXPECT_EQ(SummaryJson(r, milliseconds(0))["resolved_by"], "status_query");
}

TEST(SummaryTest, UnknownNeverHasResolvedByButKeepsTheLastResponse) {
  CallResult r = Result(Outcome::kUnknown, StopReason::kAmbiguousUnresolved, 1, 0);
  r.last_response = MakeResponse(500, "oops");
  r.idempotency_key = "k";
  nlohmann::ordered_json j = SummaryJson(r, milliseconds(9));
  EXPECT_EQ(j["outcome"], "UNKNOWN");
  EXPECT_TRUE(j["resolved_by"].is_null());
  EXPECT_EQ(j["http_status"], 500);
  EXPECT_EQ(j["body"], "oops");
  EXPECT_EQ(j["idempotency_key"], "k");

  CallResult none = Result(Outcome::kUnknown, StopReason::kCancelled, 1, 0);
  nlohmann::ordered_json n = SummaryJson(none, milliseconds(9));
  EXPECT_TRUE(n["resolved_by"].is_null());
  EXPECT_TRUE(n["http_status"].is_null());
  EXPECT_TRUE(n["body"].is_null());
}

TEST(SummaryTest, EmptyBodyIsAnEmptyStringNotNull) {
  CallResult r = Result(Outcome::kSucceeded, StopReason::kSuccess, 1, 0);
  r.last_response = MakeResponse(204, "");
  EXPECT_EQ(SummaryJson(r, milliseconds(0))["body"], "");
}

TEST(SummaryTest, ElapsedIsWholeMillisecondsRoundedDown) {
  CallResult r = Result(Outcome::kSucceeded, StopReason::kSuccess, 1, 0);
  EXPECT_EQ(SummaryJson(r, microseconds(1999999))["elapsed_ms"], 1999);
  EXPECT_EQ(SummaryJson(r, microseconds(999))["elapsed_ms"], 0);
}

TEST(SummaryTest, EveryStopReasonByName) {
  const std::vector<std::pair<StopReason, std::string>> reasons = {
      {StopReason::kSuccess, "success"},
      {StopReason::kPermanentError, "permanent_error"},
      {StopReason::kAttemptsExhausted, "attempts_exhausted"},
      {StopReason::kDeadlineExceeded, "deadline_exceeded"},
      {StopReason::kBudgetExhausted, "budget_exhausted"},
      {StopReason::kAmbiguousUnresolved, "ambiguous_unresolved"},
      {StopReason::kNotFoundNoAttemptsLeft, "not_found_no_attempts_left"},
      {StopReason::kCancelled, "cancelled"},
      {StopReason::kServerDoNotRetry, "server_do_not_retry"},
  };
  for (const auto& [reason, name] : reasons) {
    CallResult r = Result(Outcome::kFailed, reason, 1, 0);
    EXPECT_EQ(SummaryJson(r, milliseconds(0))["stop_reason"], name);
  }
}

TEST(SummaryTest, BodyBytesThatAreNotUtf8AreReplaced) {
  CallResult r = Result(Outcome::kSucceeded, StopReason::kSuccess, 1, 0);
  r.last_response = MakeResponse(200, std::string("a\xff"
                                                  "b\n\"",
                                                  5));
  const std::string text = SummaryText(r, milliseconds(0));
  EXPECT_THAT(text, ::testing::HasSubstr(R"("body":"a)"
                                         "\xEF\xBF\xBD"
                                         R"(b\n\""})"));
  EXPECT_EQ(nlohmann::json::parse(text)["body"],
            "a\xEF\xBF\xBD"
            "b\n\"");
}

TEST(OutcomeLineTest, Succeeded) {
  CallResult r = Result(Outcome::kSucceeded, StopReason::kSuccess, 1, 0);
  r.last_response = MakeResponse(201, "");
  r.idempotency_key = "k-1";
  EXPECT_EQ(OutcomeLine(r),
            "saferetry: SUCCEEDED (success) after 1 attempt, HTTP 201; "
            "idempotency key k-1");
}

TEST(OutcomeLineTest, SucceededByStatusQuery) {
  CallResult r = Result(Outcome::kSucceeded, StopReason::kSuccess, 1, 1);
  r.last_response = MakeResponse(200, "");
  r.resolved_by_status_query = true;
  r.idempotency_key = "k";
  EXPECT_EQ(OutcomeLine(r),
            "saferetry: SUCCEEDED (success) after 1 attempt and 1 status query, "
            "HTTP 200 from the status query; idempotency key k");
}

TEST(OutcomeLineTest, FailedWithTransportError) {
  CallResult r = Result(Outcome::kFailed, StopReason::kAttemptsExhausted, 3, 0);
  r.last_transport_status = absl::UnavailableError("connection refused");
  EXPECT_EQ(OutcomeLine(r),
            "saferetry: FAILED (attempts_exhausted) after 3 attempts, connection refused");
}

TEST(OutcomeLineTest, UnknownSaysWhatToDo) {
  CallResult r = Result(Outcome::kUnknown, StopReason::kAmbiguousUnresolved, 1, 2);
  r.last_transport_status = absl::DeadlineExceededError("timed out");
  r.idempotency_key = "k";
  EXPECT_EQ(OutcomeLine(r),
            "saferetry: UNKNOWN (ambiguous_unresolved) after 1 attempt and 2 status queries, "
            "timed out; idempotency key k; the request may have taken effect: check with the "
            "server using this key before sending it again");
}

TEST(DescribeEvidenceTest, AttemptWithHintAndWait) {
  AttemptEvidence ev;
  ev.number = 2;
  ev.start = TimePoint(milliseconds(100));
  ev.end = TimePoint(microseconds(103500));
  ev.delivery = Delivery::kResponseReceived;
  ev.http_status = 503;
  ev.hints.retry_after = milliseconds(1000);
  ev.classification = AttemptClass::kRetryableTransient;
  ev.reason = "503: not processed";
  ev.downstream_request_id = "req-7";
  ev.deadline_remaining = milliseconds(2500);
  ev.delay_after = milliseconds(1000);
  ev.delay_from_server_hint = true;
  EXPECT_EQ(DescribeEvidence(ev),
            "attempt 2: delivery=response_received http=503 class=retryable_transient "
            "(503: not processed) took=3.5ms remaining=2500.0ms retry_after=1000.0ms "
            "request_id=req-7 next_wait=1000.0ms (server hint)");
}

TEST(DescribeEvidenceTest, RedirectsAndTheTraceparentSent) {
  AttemptEvidence ev;
  ev.number = 1;
  ev.delivery = Delivery::kResponseReceived;
  ev.http_status = 200;
  ev.classification = AttemptClass::kSuccess;
  ev.reason = "2xx";
  ev.redirects = 2;
  ev.trace_id =
      ParseTraceParent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")->trace_id;
  ev.span_id = SpanId{0, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7};
  EXPECT_EQ(DescribeEvidence(ev),
            "attempt 1: delivery=response_received http=200 class=success (2xx) took=0.0ms "
            "redirects=2 trace=4bf92f3577b34da6a3ce929d0e0e4736 span=00f067aa0ba902b7");
}

TEST(DescribeEvidenceTest, StatusQueryWithTransportFailureAndNoDeadline) {
  AttemptEvidence ev;
  ev.number = 1;
  ev.is_status_query = true;
  ev.delivery = Delivery::kNotSent;
  ev.transport_status = absl::UnavailableError("refused");
  ev.classification = AttemptClass::kAmbiguous;
  ev.reason = "status query: no usable answer";
  EXPECT_EQ(DescribeEvidence(ev),
            "status query 1: delivery=not_sent transport=\"UNAVAILABLE: refused\" "
            "class=ambiguous (status query: no usable answer) took=0.0ms");
}

}  // namespace
}  // namespace internal
}  // namespace saferetry

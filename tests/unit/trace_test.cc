// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The per-call trace of a scripted call (a refused connection, a 503 with
// Retry-After marked refused before any work, a lost response resolved by a
// status query), compared with an
// exact expected record; and redaction of every secret.

#include "saferetry/trace.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>

#include "nlohmann/json.hpp"
#include "saferetry/client.h"
#include "saferetry/testing/fake_clock.h"
#include "saferetry/testing/fake_random.h"
#include "saferetry/testing/fake_transport.h"

namespace saferetry {
namespace {

using nlohmann::json;
using std::chrono::microseconds;
using std::chrono::milliseconds;
using testkit::FakeClock;
using testkit::FakeTransport;
using testkit::ScriptedRandom;
using testkit::Step;

constexpr const char* kSecrets[] = {"s3cr3t-token", "session=abc123", "sid=zzz",    "key-999",
                                    "pa55word",     "bob:",           "pr0xy-pass", "tok3n"};

class TraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ClientOptions o;
    o.transport = transport_;
    o.clock = clock_;
    o.random = std::make_shared<ScriptedRandom>();  // u = 0.5
    o.budget = *MakeTokenThrottle({});              // 10 tokens
    auto c = Client::Create(std::move(o));
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = *std::move(c);

    request_.method = "POST";
    request_.url = "http://127.0.0.1:8080/orders";
    request_.headers = {{"Authorization", "Bearer s3cr3t-token"},
                        {"Cookie", "session=abc123"},
                        {"X-Api-Key", "key-999"},
                        {"Content-Type", "application/json"}};
    request_.body = R"({"sku":"sku-42"})";

    Step refused = Step::NotSent();
    refused.result.status =
        absl::UnavailableError("connect to http://bob:pa55word@127.0.0.1:8080 refused");
    Step busy = Step::RespondRejected(503, {{"Retry-After", "2"}, {"X-Request-Id", "down-1"}});
    busy.result.timings.connect = microseconds(250);
    busy.result.timings.first_byte = microseconds(750);
    Step lost = Step::CommitThenLost();
    Step found = Step::Respond(200, {{"X-Request-Id", "down-2"}, {"Set-Cookie", "sid=zzz"}},
                               R"({"order":1})");
    transport_->Push(refused).Push(busy).Push(lost).Push(found);

    call_.status_url = "http://127.0.0.1:8080/orders/by-key/{key}";
  }

  std::shared_ptr<FakeClock> clock_ = std::make_shared<FakeClock>();
  std::shared_ptr<FakeTransport> transport_ = std::make_shared<FakeTransport>(clock_);
  std::unique_ptr<Client> client_;
  Request request_;
  CallOptions call_;
};

TEST_F(TraceTest, ScriptedCallProducesTheExactRecord) {
  std::string sunk;
  TraceRecorder recorder({}, [&sunk](const std::string& j) { sunk = j; });
  call_.listener = &recorder;
  CallResult r = client_->Execute(request_, call_);
  ASSERT_EQ(r.outcome, Outcome::kSucceeded);
  ASSERT_TRUE(r.idempotency_key.has_value());
  const std::string key = *r.idempotency_key;

  TraceOptions options;
  options.request_id = "req-7";
  options.request = &request_;
  options.include_response_headers = true;
  options.redact_headers = {"x-api-key"};
  const json trace = json::parse(TraceToJson(r, options));

  json expected = json::parse(R"({
    "request_id": "req-7",
    "idempotency_key": "KEY",
    "outcome": "SUCCEEDED",
    "stop_reason": "success",
    "status": {"code": "OK", "message": ""},
    "attempts": 3,
    "status_queries": 1,
    "resolved_by_status_query": true,
    "elapsed_ms": 2091.5,
    "final_http_status": 200,
    "request": {
      "method": "POST",
      "url": "http://127.0.0.1:8080/orders",
      "headers": [["Authorization", "[REDACTED]"], ["Cookie", "[REDACTED]"],
                  ["X-Api-Key", "[REDACTED]"], ["Content-Type", "application/json"]]
    },
    "response_headers": [["X-Request-Id", "down-2"], ["Set-Cookie", "[REDACTED]"]],
    "events": [
      {"number": 1, "kind": "attempt", "start_ms": 0, "end_ms": 1,
       "timings_ms": {"dns": 0, "connect": 0, "tls": 0, "request_written": 0,
                      "first_byte": 0, "total": 1}, "timed_out_phase": null,
       "delivery": "not_sent",
       "transport_status": {"code": "UNAVAILABLE",
                            "message": "connect to http://127.0.0.1:8080 refused"},
       "http_status": null,
       "classification": "retryable_not_delivered",
       "reason": "not delivered: no request byte was sent",
       "retry_after_ms": null, "do_not_retry": false, "downstream_request_id": null,
       "budget_balance": 9.0, "deadline_remaining_ms": 29999,
       "delay_after_ms": 50, "delay_source": "backoff",
       "resend_count": 0, "redirects": 0, "trace_id": null, "span_id": null,
       "trace_flags": null},
      {"number": 2, "kind": "attempt", "start_ms": 51, "end_ms": 52,
       "timings_ms": {"dns": 0, "connect": 0.25, "tls": 0, "request_written": 0,
                      "first_byte": 0.75, "total": 1}, "timed_out_phase": null,
       "delivery": "response_received",
       "transport_status": {"code": "OK", "message": ""},
       "http_status": 503,
       "classification": "retryable_transient",
       "reason": "rejected before any work (Idempotency-Key-State): not applied, retryable status",
       "retry_after_ms": 2000, "do_not_retry": false, "downstream_request_id": "down-1",
       "budget_balance": 8.0, "deadline_remaining_ms": 29948,
       "delay_after_ms": 2000, "delay_source": "server_hint",
       "resend_count": 1, "redirects": 0, "trace_id": null, "span_id": null,
       "trace_flags": null},
      {"number": 3, "kind": "attempt", "start_ms": 2052, "end_ms": 2053,
       "timings_ms": {"dns": 0, "connect": 0, "tls": 0, "request_written": 0,
                      "first_byte": 0, "total": 1}, "timed_out_phase": null,
       "delivery": "maybe_delivered",
       "transport_status": {"code": "UNAVAILABLE",
                            "message": "connection reset before any response byte"},
       "http_status": null,
       "classification": "ambiguous",
       "reason": "sent, then no complete response: may have taken effect",
       "retry_after_ms": null, "do_not_retry": false, "downstream_request_id": null,
       "budget_balance": 8.0, "deadline_remaining_ms": 27947,
       "delay_after_ms": 37.5, "delay_source": "backoff",
       "resend_count": 2, "redirects": 0, "trace_id": null, "span_id": null,
       "trace_flags": null},
      {"number": 1, "kind": "status_query", "start_ms": 2090.5, "end_ms": 2091.5,
       "timings_ms": {"dns": 0, "connect": 0, "tls": 0, "request_written": 0,
                      "first_byte": 0, "total": 1}, "timed_out_phase": null,
       "delivery": "response_received",
       "transport_status": {"code": "OK", "message": ""},
       "http_status": 200,
       "classification": "success",
       "reason": "status query: found, the request took effect",
       "retry_after_ms": null, "do_not_retry": false, "downstream_request_id": "down-2",
       "budget_balance": 8.0, "deadline_remaining_ms": 27908.5,
       "delay_after_ms": null, "delay_source": null,
       "resend_count": 0, "redirects": 0, "trace_id": null, "span_id": null,
       "trace_flags": null}
    ]
  })");
  expected["idempotency_key"] = key;
  EXPECT_EQ(trace, expected) << trace.dump(2);

  // The recorder saw the same call; without a caller id the key is the id.
  const json recorded = json::parse(sunk);
  EXPECT_EQ(recorded["request_id"], key);
  EXPECT_EQ(recorded["events"], expected["events"]);
  EXPECT_FALSE(recorded.contains("request"));
  EXPECT_EQ(recorder.json(), sunk);
}

TEST_F(TraceTest, SecretsNeverAppear) {
  CallResult r = client_->Execute(request_, call_);
  ASSERT_EQ(r.outcome, Outcome::kSucceeded);
  TraceOptions options;
  options.request = &request_;
  options.include_response_headers = true;
  options.redact_headers = {"X-API-KEY"};
  for (int indent : {-1, 2}) {
    options.indent = indent;
    const std::string text = TraceToJson(r, options);
    for (const char* secret : kSecrets) {
      EXPECT_EQ(text.find(secret), std::string::npos) << secret << " in " << text;
    }
  }
}

TEST_F(TraceTest, CallWithoutKeyOrDeadlineHasNulls) {
  CallResult r;
  r.outcome = Outcome::kFailed;
  r.stop_reason = StopReason::kInvalidArgument;
  r.status = absl::InvalidArgumentError("request.url: unsupported scheme \"ftp\"");
  const json trace = json::parse(TraceToJson(r));
  EXPECT_EQ(trace, json::parse(R"({
    "request_id": null, "idempotency_key": null, "outcome": "FAILED",
    "stop_reason": "invalid_argument",
    "status": {"code": "INVALID_ARGUMENT", "message": "request.url: unsupported scheme \"ftp\""},
    "attempts": 0, "status_queries": 0, "resolved_by_status_query": false, "elapsed_ms": 0,
    "final_http_status": null, "events": []})"));

  AttemptEvidence ev;
  ev.deadline_remaining = Duration::max();
  ev.reason = "bad \xff byte";
  r.evidence.push_back(ev);
  const json with_event = json::parse(TraceToJson(r));
  EXPECT_TRUE(with_event["events"][0]["deadline_remaining_ms"].is_null());
  EXPECT_EQ(with_event["events"][0]["reason"], "bad \xef\xbf\xbd byte");  // replaced, no throw
}

// The trace ids sent with each attempt and query, and the resend counts: the
// caller's context on the first two attempts, a tracer's span on the others.
TEST_F(TraceTest, EventsCarryTheTraceIdsSentAndTheResendCount) {
  struct OddSpans final : AttemptTracer {
    std::optional<AttemptSpan> OnAttemptStart(const AttemptSpanStart& start) override {
      if (start.number < 3 && !start.is_status_query) return std::nullopt;  // the caller's
      AttemptSpan span;
      span.traceparent = *start.caller;
      span.traceparent.parent_id = {0, 0, 0,    0,
                                    0, 0, 0xab, static_cast<std::uint8_t>(start.number)};
      span.traceparent.flags = 0;
      return span;
    }
  } tracer;
  call_.trace_context =
      TraceContext{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "congo=t61rcWkgMzE"};
  call_.tracer = &tracer;
  CallResult r = client_->Execute(request_, call_);
  ASSERT_EQ(r.outcome, Outcome::kSucceeded);
  const json events = json::parse(TraceToJson(r))["events"];
  ASSERT_EQ(events.size(), 4u);
  const std::string trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  const json expected = json::parse(R"([
    {"resend_count": 0, "redirects": 0, "span_id": "00f067aa0ba902b7", "trace_flags": "01"},
    {"resend_count": 1, "redirects": 0, "span_id": "00f067aa0ba902b7", "trace_flags": "01"},
    {"resend_count": 2, "redirects": 0, "span_id": "000000000000ab03", "trace_flags": "00"},
    {"resend_count": 0, "redirects": 0, "span_id": "000000000000ab01", "trace_flags": "00"}
  ])");
  for (std::size_t i = 0; i < events.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(events[i]["trace_id"], trace_id);
    for (const char* field : {"resend_count", "redirects", "span_id", "trace_flags"}) {
      EXPECT_EQ(events[i][field], expected[i][field]) << field;
    }
  }
}

TEST(RedactorTest, HeadersUrlsAndText) {
  Redactor r({"X-Session"});
  EXPECT_TRUE(r.IsSecret("authorization"));
  EXPECT_TRUE(r.IsSecret("PROXY-AUTHORIZATION"));
  EXPECT_TRUE(r.IsSecret("cookie"));
  EXPECT_TRUE(r.IsSecret("Set-Cookie"));
  EXPECT_TRUE(r.IsSecret("x-session"));
  EXPECT_FALSE(r.IsSecret("Idempotency-Key"));
  EXPECT_EQ(r.Value("Cookie", "a=b"), "[REDACTED]");
  EXPECT_EQ(r.Value("Accept", "*/*"), "*/*");
  EXPECT_EQ(r.Redact({{"Accept", "*/*"}, {"X-Session", "s"}}),
            (Headers{{"Accept", "*/*"}, {"X-Session", "[REDACTED]"}}));
  EXPECT_EQ(r.Url("https://bob:hunter2@api.example:8443/x?y=1"), "https://api.example:8443/x?y=1");
  EXPECT_EQ(r.Url("https://bob@api.example/"), "https://api.example/");
  EXPECT_EQ(r.Url("https://api.example/a:b@c"), "https://api.example/a:b@c");
  EXPECT_EQ(r.Text("GET http://a:1@h/ then http://c:2@d"), "GET http://h/ then http://d");
  EXPECT_EQ(r.Text("no url here"), "no url here");
  EXPECT_EQ(r.Text("trailing ://"), "trailing ://");
  EXPECT_EQ(RedactHeaderValue("Authorization", "Basic Ym9iOmh1bnRlcjI="), "[REDACTED]");
  EXPECT_EQ(RedactHeaderValue("X-Token", "t", {"x-token"}), "[REDACTED]");
  EXPECT_EQ(RedactHeaderValue("X-Token", "t"), "t");
}

TEST(RedactionTest, IsSecretHeader) {
  for (const char* name : {"Authorization", "authorization", "AUTHORIZATION", "Cookie", "cookie",
                           "Proxy-Authorization", "proxy-authorization", "Set-Cookie"}) {
    EXPECT_TRUE(IsSecretHeader(name)) << name;
  }
  for (const char* name : {"Accept", "X-Api-Key", "Authorization2", "Cookies", "",
                           "Idempotency-Key", "Content-Type"}) {
    EXPECT_FALSE(IsSecretHeader(name)) << name;
  }
  const std::vector<std::string> extra = {"X-Api-Key", "x-session-token", ""};
  EXPECT_TRUE(IsSecretHeader("x-api-key", extra));
  EXPECT_TRUE(IsSecretHeader("X-API-KEY", extra));
  EXPECT_TRUE(IsSecretHeader("X-Session-Token", extra));
  EXPECT_TRUE(IsSecretHeader("Cookie", extra));
  EXPECT_FALSE(IsSecretHeader("X-Api-Keys", extra));
  EXPECT_FALSE(IsSecretHeader("", extra));  // an empty configured name matches nothing
}

TEST(RedactionTest, RedactUrlRemovesTheUserinfo) {
  EXPECT_EQ(RedactUrl("https://user:pass@host/"), "https://host/");
  EXPECT_EQ(RedactUrl("https://user:pass@host"), "https://host");
  EXPECT_EQ(RedactUrl("http://tok3n@host:8080/orders?x=1#f"), "http://host:8080/orders?x=1#f");
  EXPECT_EQ(RedactUrl("https://:pa55word@host/"), "https://host/");
  EXPECT_EQ(RedactUrl("https://user:p@ss@host/"), "https://host/");  // last '@' ends it
  EXPECT_EQ(RedactUrl("https://user:pass@[::1]:8443/p"), "https://[::1]:8443/p");
  EXPECT_EQ(RedactUrl("https://u:p@host?q=a@b"), "https://host?q=a@b");
  // A URL carried in the query is cleaned too.
  EXPECT_EQ(RedactUrl("https://h/login?next=https://u:p@other/x"),
            "https://h/login?next=https://other/x");
  // Unchanged: no userinfo, '@' only after the authority, not a URL.
  EXPECT_EQ(RedactUrl("https://host/path@x"), "https://host/path@x");
  EXPECT_EQ(RedactUrl("https://host:8443/a:b@c"), "https://host:8443/a:b@c");
  EXPECT_EQ(RedactUrl("mailto:bob@example.com"), "mailto:bob@example.com");
  EXPECT_EQ(RedactUrl(""), "");
  EXPECT_EQ(RedactUrl("://"), "://");
}

TEST(RedactionTest, RedactUrlsInText) {
  EXPECT_EQ(RedactUrlsInText("Failed to connect to https://bob:pa55word@h:443 after 3 ms"),
            "Failed to connect to https://h:443 after 3 ms");
  EXPECT_EQ(RedactUrlsInText("\"http://a:b@x\" and 'https://c@y/z'"),
            "\"http://x\" and 'https://y/z'");
  // Whitespace ends an authority in text: a later '@' is not userinfo.
  EXPECT_EQ(RedactUrlsInText("http://h mail bob@example.com"), "http://h mail bob@example.com");
  EXPECT_EQ(RedactUrlsInText("no url"), "no url");
}

TEST_F(TraceTest, UrlCredentialsAndConfiguredHeadersNeverAppear) {
  request_.url = "http://bob:pa55word@127.0.0.1:8080/orders";
  request_.headers.push_back({"Proxy-Authorization", "Basic pr0xy-pass"});
  request_.headers.push_back({"X-Session-Token", "tok3n"});
  CallResult r = client_->Execute(request_, call_);
  TraceOptions options;
  options.request = &request_;
  options.include_response_headers = true;
  options.redact_headers = {"x-api-key", "X-SESSION-TOKEN"};
  const json trace = json::parse(TraceToJson(r, options));
  EXPECT_EQ(trace["request"]["url"], "http://127.0.0.1:8080/orders");
  EXPECT_EQ(trace["request"]["headers"],
            json::parse(R"([["Authorization", "[REDACTED]"], ["Cookie", "[REDACTED]"],
                            ["X-Api-Key", "[REDACTED]"], ["Content-Type", "application/json"],
                            ["Proxy-Authorization", "[REDACTED]"],
                            ["X-Session-Token", "[REDACTED]"]])"));
  const std::string text = trace.dump();
  for (const char* secret : kSecrets) {
    EXPECT_EQ(text.find(secret), std::string::npos) << secret << " in " << text;
  }
}

TEST_F(TraceTest, WithoutTheConfiguredListTheHeaderIsPrinted) {
  // The configurable list is what makes X-Api-Key secret: it is not built in.
  CallResult r = client_->Execute(request_, call_);
  TraceOptions options;
  options.request = &request_;
  const json trace = json::parse(TraceToJson(r, options));
  EXPECT_EQ(trace["request"]["headers"][2], json::parse(R"(["X-Api-Key", "key-999"])"));
}

}  // namespace
}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License,
// Version 2.0.
//
// Whole calls: saferetry::Client over the libcurl transport against the
// scripted loopback server, on the real clock. Each test asserts the outcome,
// the stop reason, the attempt count and exactly what the server read.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loopback_server.h"
#include "saferetry/client.h"
#include "saferetry/curl_transport.h"

namespace saferetry {
namespace {

using ::saferetry::testkit::AfterRequest;
using ::saferetry::testkit::FullBacklogListener;
using ::saferetry::testkit::LoopbackConnection;
using ::saferetry::testkit::LoopbackServer;
using ::saferetry::testkit::ReceivedRequest;
using ::saferetry::testkit::UnusedLoopbackPort;
using std::chrono::milliseconds;

std::unique_ptr<Client> MakeClient() {
  ClientOptions options;
  options.transport = MakeCurlTransport({}).value();
  auto client = Client::Create(std::move(options));
  EXPECT_TRUE(client.ok()) << client.status();
  return std::move(*client);
}

CallOptions FastCall() {
  CallOptions call;
  call.timeout = std::chrono::seconds(3);
  saferetry::RetryPolicyOptions call_policy;
  call_policy.max_attempts = 3;
  call_policy.backoff.base = milliseconds(5);
  call_policy.backoff.cap = milliseconds(20);
  call_policy.deadline_options.attempt_cap = milliseconds(500);
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  return call;
}

Request Post(std::string url, std::string body) {
  Request r;
  r.method = "POST";
  r.url = std::move(url);
  r.headers = {{"Content-Type", "application/json"}};
  r.body = std::move(body);
  return r;
}

Request Get(std::string url) {
  Request r;
  r.url = std::move(url);
  return r;
}

std::string HttpDate(std::time_t t) {
  char buf[64];
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof(buf), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return buf;
}

std::vector<std::string> Paths(const std::vector<ReceivedRequest>& rs) {
  std::vector<std::string> out;
  for (const auto& r : rs) out.push_back(r.method + " " + r.target);
  return out;
}

TEST(CurlClientTest, ConnectionRefusedIsRetriedAndFails) {
  auto client = MakeClient();
  CallResult r = client->Execute(
      Post("http://127.0.0.1:" + std::to_string(UnusedLoopbackPort()) + "/orders", "{}"),
      FastCall());
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kAttemptsExhausted);
  EXPECT_EQ(r.attempts, 3);
  for (const auto& e : r.evidence) {
    EXPECT_EQ(e.delivery, Delivery::kNotSent);
    EXPECT_EQ(e.transport_status.code(), absl::StatusCode::kUnavailable);
  }
}

TEST(CurlClientTest, AcceptedThenClosedUnreadIsUnknown) {
  LoopbackServer server(
      [](const ReceivedRequest&, LoopbackConnection&) { return AfterRequest::kClose; },
      [](int) { return false; });
  auto client = MakeClient();
  CallResult r = client->Execute(Post(server.Url("/orders"), "{\"sku\":1}"), FastCall());
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kAmbiguousUnresolved);
  EXPECT_EQ(r.attempts, 1);
  ASSERT_EQ(r.evidence.size(), 1u);
  EXPECT_EQ(r.evidence[0].delivery, Delivery::kMaybeDelivered);
  EXPECT_TRUE(server.requests().empty());
  EXPECT_EQ(server.connections(), 1);
}

TEST(CurlClientTest, RequestReadThenClosedIsUnknownWithOneCopy) {
  LoopbackServer server(
      [](const ReceivedRequest&, LoopbackConnection&) { return AfterRequest::kClose; });
  auto client = MakeClient();
  CallResult r = client->Execute(Post(server.Url("/orders"), "{\"sku\":1}"), FastCall());
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kAmbiguousUnresolved);
  EXPECT_EQ(r.attempts, 1);
  ASSERT_TRUE(r.idempotency_key.has_value());
  auto got = server.requests();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].body, "{\"sku\":1}");
  EXPECT_EQ(got[0].Header("Idempotency-Key"), *r.idempotency_key);
}

TEST(CurlClientTest, CommittedThenResponseLostIsResolvedByStatusQuery) {
  std::atomic<int> orders{0};
  LoopbackServer server([&](const ReceivedRequest& req, LoopbackConnection& conn) {
    if (req.method == "POST") {
      orders.fetch_add(1);
      conn.Write("HTTP/1.1 201 Cre");  // Committed; the answer is lost.
      return AfterRequest::kClose;
    }
    conn.Write(LoopbackServer::Reply(200, {}, "{\"order\":1}"));
    return AfterRequest::kKeepAlive;
  });
  auto client = MakeClient();
  CallOptions call = FastCall();
  call.status_url = server.Url("/orders/by-key/{key}");
  CallResult r = client->Execute(Post(server.Url("/orders"), "{\"sku\":1}"), call);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.stop_reason, StopReason::kSuccess);
  EXPECT_TRUE(r.resolved_by_status_query);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.status_queries, 1);
  ASSERT_TRUE(r.last_response.has_value());
  EXPECT_EQ(r.last_response->body, "{\"order\":1}");
  EXPECT_EQ(orders.load(), 1);
  auto got = server.requests();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].method, "POST");
  EXPECT_EQ(got[1].method, "GET");
  EXPECT_EQ(got[1].target, "/orders/by-key/" + *r.idempotency_key);
  EXPECT_EQ(got[1].body, "");
}

TEST(CurlClientTest, HeadersDelayedPastAttemptTimeoutThenRetriedGet) {
  std::atomic<int> seen{0};
  LoopbackServer server([&](const ReceivedRequest&, LoopbackConnection& conn) {
    if (seen.fetch_add(1) == 0) {
      conn.WaitForPeerClose(milliseconds(2000));
      return AfterRequest::kClose;
    }
    conn.Write(LoopbackServer::Reply(200, {}, "fresh"));
    return AfterRequest::kKeepAlive;
  });
  auto client = MakeClient();
  CallOptions call = FastCall();
  saferetry::RetryPolicyOptions call_policy;
  call_policy.deadline_options.attempt_cap = milliseconds(150);
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  CallResult r = client->Execute(Get(server.Url("/items/1")), call);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.stop_reason, StopReason::kSuccess);
  EXPECT_EQ(r.attempts, 2);
  ASSERT_EQ(r.evidence.size(), 2u);
  EXPECT_EQ(r.evidence[0].transport_status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(r.evidence[0].delivery, Delivery::kMaybeDelivered);
  EXPECT_EQ(r.last_response->body, "fresh");
  EXPECT_EQ(server.requests().size(), 2u);
}

TEST(CurlClientTest, PostHeadersDelayedPastTimeoutIsUnknown) {
  LoopbackServer server([&](const ReceivedRequest&, LoopbackConnection& conn) {
    conn.WaitForPeerClose(milliseconds(2000));
    return AfterRequest::kClose;
  });
  auto client = MakeClient();
  CallOptions call = FastCall();
  saferetry::RetryPolicyOptions call_policy;
  call_policy.deadline_options.attempt_cap = milliseconds(150);
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  CallResult r = client->Execute(Post(server.Url("/orders"), "{}"), call);
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kAmbiguousUnresolved);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(server.requests().size(), 1u);
}

TEST(CurlClientTest, BodyStalledMidwayThenRetriedGet) {
  std::atomic<int> seen{0};
  LoopbackServer server([&](const ReceivedRequest&, LoopbackConnection& conn) {
    if (seen.fetch_add(1) == 0) {
      conn.Write("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello");
      conn.WaitForPeerClose(milliseconds(2000));
      return AfterRequest::kClose;
    }
    conn.Write(LoopbackServer::Reply(200, {}, "helloworld"));
    return AfterRequest::kKeepAlive;
  });
  auto client = MakeClient();
  CallOptions call = FastCall();
  saferetry::RetryPolicyOptions call_policy;
  call_policy.deadline_options.attempt_cap = milliseconds(150);
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  CallResult r = client->Execute(Get(server.Url("/items/1")), call);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.attempts, 2);
  ASSERT_EQ(r.evidence.size(), 2u);
  EXPECT_EQ(r.evidence[0].delivery, Delivery::kResponseReceived);
  EXPECT_EQ(r.evidence[0].transport_status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(r.last_response->body, "helloworld");
  EXPECT_EQ(server.requests().size(), 2u);
}

TEST(CurlClientTest, RetryAfterSecondsIsHonoured) {
  std::atomic<int> seen{0};
  LoopbackServer server([&](const ReceivedRequest&, LoopbackConnection& conn) {
    if (seen.fetch_add(1) == 0) {
      // The server's own 503, marked as refused before any work.
      conn.Write(LoopbackServer::Reply(
          503, {{"Retry-After", "1"}, {"Idempotency-Key-State", "rejected"}}, ""));
    } else {
      conn.Write(LoopbackServer::Reply(201, {}, "made"));
    }
    return AfterRequest::kKeepAlive;
  });
  auto client = MakeClient();
  const auto start = std::chrono::steady_clock::now();
  CallResult r = client->Execute(Post(server.Url("/orders"), "{}"), FastCall());
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.attempts, 2);
  ASSERT_EQ(r.evidence.size(), 2u);
  EXPECT_EQ(r.evidence[0].http_status, 503);
  EXPECT_EQ(r.evidence[0].hints.retry_after, std::chrono::seconds(1));
  EXPECT_EQ(r.evidence[0].delay_after, std::chrono::seconds(1));
  EXPECT_TRUE(r.evidence[0].delay_from_server_hint);
  EXPECT_GE(took, std::chrono::seconds(1));
  auto got = server.requests();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].Header("Idempotency-Key"), got[1].Header("Idempotency-Key"));
}

TEST(CurlClientTest, RetryAfterDateIsMeasuredAgainstTheDateHeader) {
  std::atomic<int> seen{0};
  // The server's clock is 1 hour off: only the difference counts.
  const std::time_t server_now = std::time(nullptr) - 3600;
  LoopbackServer server([&](const ReceivedRequest&, LoopbackConnection& conn) {
    if (seen.fetch_add(1) == 0) {
      conn.Write(LoopbackServer::Reply(
          503, {{"Date", HttpDate(server_now)}, {"Retry-After", HttpDate(server_now + 1)}}, ""));
    } else {
      conn.Write(LoopbackServer::Reply(200, {}, "ok"));
    }
    return AfterRequest::kKeepAlive;
  });
  auto client = MakeClient();
  CallResult r = client->Execute(Get(server.Url("/items")), FastCall());
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.attempts, 2);
  ASSERT_EQ(r.evidence.size(), 2u);
  EXPECT_EQ(r.evidence[0].hints.retry_after, std::chrono::seconds(1));
  EXPECT_EQ(r.evidence[0].delay_after, std::chrono::seconds(1));
  EXPECT_EQ(server.requests().size(), 2u);
}

TEST(CurlClientTest, UnprocessableOnKeyedPostIsPermanent) {
  LoopbackServer server([](const ReceivedRequest&, LoopbackConnection& conn) {
    conn.Write(LoopbackServer::Reply(422, {}, "{\"error\":\"sku\"}"));
    return AfterRequest::kKeepAlive;
  });
  auto client = MakeClient();
  CallResult r = client->Execute(Post(server.Url("/orders"), "{}"), FastCall());
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kPermanentError);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.last_response->status_code, 422);
  EXPECT_EQ(server.requests().size(), 1u);
}

TEST(CurlClientTest, ConflictOnKeyedPostPollsTheStatus) {
  LoopbackServer server([](const ReceivedRequest& req, LoopbackConnection& conn) {
    if (req.method == "POST") {
      conn.Write(LoopbackServer::Reply(409, {}, "in progress"));
    } else {
      conn.Write(LoopbackServer::Reply(200, {}, "{\"order\":7}"));
    }
    return AfterRequest::kKeepAlive;
  });
  auto client = MakeClient();
  CallOptions call = FastCall();
  call.status_url = server.Url("/orders/by-key/{key}");
  CallResult r = client->Execute(Post(server.Url("/orders"), "{}"), call);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_TRUE(r.resolved_by_status_query);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.status_queries, 1);
  EXPECT_EQ(r.evidence[0].classification, AttemptClass::kInProgress);
  EXPECT_THAT(Paths(server.requests()),
              ::testing::ElementsAre("POST /orders", "GET /orders/by-key/" + *r.idempotency_key));
}

TEST(CurlClientTest, BodyOverTheCapIsASucceededTruncatedCall) {
  LoopbackServer server([](const ReceivedRequest&, LoopbackConnection& conn) {
    conn.Write(LoopbackServer::Reply(200, {}, std::string(5000, 'q')));
    return AfterRequest::kKeepAlive;
  });
  ClientOptions options;
  CurlTransportOptions curl;
  curl.max_response_body = 1000;
  options.transport = MakeCurlTransport(curl).value();
  auto client = Client::Create(std::move(options)).value();
  CallResult r = client->Execute(Get(server.Url("/big")), FastCall());
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.attempts, 1);
  ASSERT_TRUE(r.last_response.has_value());
  EXPECT_TRUE(r.last_response->body_truncated);
  EXPECT_EQ(r.last_response->body, std::string(1000, 'q'));
  EXPECT_EQ(server.requests().size(), 1u);
}

TEST(CurlClientTest, ChunkedResponseSucceeds) {
  LoopbackServer server([](const ReceivedRequest&, LoopbackConnection& conn) {
    conn.Write(LoopbackServer::ChunkedReply(201, {}, {"{\"or", "der\":", "3}"}));
    return AfterRequest::kKeepAlive;
  });
  auto client = MakeClient();
  CallResult r = client->Execute(Post(server.Url("/orders"), "{}"), FastCall());
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.last_response->status_code, 201);
  EXPECT_EQ(r.last_response->body, "{\"order\":3}");
  EXPECT_EQ(server.requests().size(), 1u);
}

TEST(CurlClientTest, DeadlineHeaderDecreasesAcrossAttempts) {
  LoopbackServer server([](const ReceivedRequest&, LoopbackConnection& conn) {
    std::this_thread::sleep_for(milliseconds(30));
    conn.Write(LoopbackServer::Reply(503, {{"Idempotency-Key-State", "rejected"}}, ""));
    return AfterRequest::kKeepAlive;
  });
  auto client = MakeClient();
  CallOptions call = FastCall();
  call.timeout = milliseconds(2000);
  saferetry::RetryPolicyOptions call_policy;
  call_policy.deadline_options.attempt_cap.reset();
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  CallResult r = client->Execute(Post(server.Url("/orders"), "{}"), call);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kAttemptsExhausted);
  EXPECT_EQ(r.attempts, 3);
  auto got = server.requests();
  ASSERT_EQ(got.size(), 3u);
  std::vector<long> remaining;
  for (const auto& req : got) {
    auto h = req.Header("X-Request-Timeout-Ms");
    ASSERT_TRUE(h.has_value());
    remaining.push_back(std::stol(*h));
    EXPECT_EQ(req.Header("Idempotency-Key"), *r.idempotency_key);
  }
  EXPECT_LE(remaining[0], 2000);
  EXPECT_GT(remaining[0], 1500);
  // Each attempt waited >= 30 ms at the server: at least that much less.
  EXPECT_LE(remaining[1], remaining[0] - 30);
  EXPECT_LE(remaining[2], remaining[1] - 30);
  EXPECT_GT(remaining[2], 0);
}

TEST(CurlClientTest, HiddenResendOnKeptAliveConnectionLeavesOneCopy) {
  LoopbackServer server([](const ReceivedRequest& req, LoopbackConnection& conn) {
    if (req.body == "{\"n\":2}") return AfterRequest::kClose;  // Committed; answer lost.
    conn.Write(LoopbackServer::Reply(201, {}, "ok"));
    return AfterRequest::kKeepAlive;
  });
  auto client = MakeClient();
  CallResult first = client->Execute(Post(server.Url("/orders"), "{\"n\":1}"), FastCall());
  ASSERT_EQ(first.outcome, Outcome::kSucceeded);
  CallResult r = client->Execute(Post(server.Url("/orders"), "{\"n\":2}"), FastCall());
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kAmbiguousUnresolved);
  EXPECT_EQ(r.attempts, 1);
  ASSERT_EQ(r.evidence.size(), 1u);
  EXPECT_EQ(r.evidence[0].delivery, Delivery::kMaybeDelivered);
  auto got = server.requests();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].body, "{\"n\":2}");
  EXPECT_EQ(got[1].connection, 0);
}

TEST(CurlClientTest, BadUrlSendsNothing) {
  auto client = MakeClient();
  CallResult r = client->Execute(Get("ftp://127.0.0.1/x"), FastCall());
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kInvalidArgument);
  EXPECT_EQ(r.attempts, 0);
  EXPECT_THAT(std::string(r.status.message()), ::testing::StartsWith("request.url"));
}

// Limits per phase on the blocking driver, from the policy of the endpoint:
// a connect that hangs ends each attempt at the connect limit, proven not
// sent, so a keyless POST is sent again; a server that never answers is let
// go at the first-byte limit, the phase named. Tolerances for a loaded
// two-core machine.
CallOptions WithPhaseLimits(int max_attempts, const PhaseLimits& limits) {
  RetryPolicyOptions o;
  o.max_attempts = max_attempts;
  o.key_mode = KeyMode::kNever;
  o.backoff.base = milliseconds(5);
  o.backoff.cap = milliseconds(20);
  o.deadline_options.attempt_cap = std::chrono::seconds(3);
  o.phase_limits = limits;
  CallOptions call;
  call.timeout = std::chrono::seconds(20);
  call.policy = RetryPolicy::Create(o).value();
  return call;
}

TEST(CurlClientTest, APolicysConnectLimitRetriesAKeylessPost) {
  FullBacklogListener blackhole;
  ASSERT_TRUE(blackhole.full()) << "the accept queue could not be filled";
  PhaseLimits limits;
  limits.connect = milliseconds(300);
  CallResult r =
      MakeClient()->Execute(Post(blackhole.Url("/orders"), "{}"), WithPhaseLimits(2, limits));
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kAttemptsExhausted);
  ASSERT_EQ(r.evidence.size(), 2u);
  for (const AttemptEvidence& ev : r.evidence) {
    EXPECT_EQ(ev.delivery, Delivery::kNotSent);
    EXPECT_EQ(ev.timings.timed_out, Phase::kConnect);
    EXPECT_GE(ev.end - ev.start, milliseconds(295));
    EXPECT_LT(ev.end - ev.start, milliseconds(1500));
  }
}

TEST(CurlClientTest, APolicysFirstByteLimitEndsAnUnansweredPostUnknown) {
  LoopbackServer server([](const ReceivedRequest&, LoopbackConnection& conn) {
    conn.WaitForPeerClose(milliseconds(10000));
    return AfterRequest::kClose;
  });
  PhaseLimits limits;
  limits.first_byte = milliseconds(300);
  CallResult r =
      MakeClient()->Execute(Post(server.Url("/orders"), "{}"), WithPhaseLimits(3, limits));
  // Keyless and maybe delivered: never sent again, UNKNOWN.
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  ASSERT_EQ(r.evidence.size(), 1u);
  EXPECT_EQ(r.evidence[0].delivery, Delivery::kMaybeDelivered);
  EXPECT_EQ(r.evidence[0].timings.timed_out, Phase::kFirstByte);
  EXPECT_LT(r.evidence[0].end - r.evidence[0].start, milliseconds(1500));
  EXPECT_EQ(server.requests().size(), 1u);
}

}  // namespace
}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Trace context on the wire: a retried, status-queried call over the libcurl
// transport against the loopback server. The server reads the caller's trace
// id on every attempt and status query, exactly one `traceparent` per
// request, and, with a tracer, each attempt's own span id; redirect hops the
// transport follows carry their attempt's span and count as resends.

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loopback_server.h"
#include "saferetry/client.h"
#include "saferetry/curl_transport.h"
#include "saferetry/trace_context.h"

namespace saferetry {
namespace {

using ::saferetry::testkit::AfterRequest;
using ::saferetry::testkit::LoopbackConnection;
using ::saferetry::testkit::LoopbackServer;
using ::saferetry::testkit::ReceivedRequest;
using std::chrono::milliseconds;
using ::testing::ElementsAre;

constexpr char kParent[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
constexpr char kTraceId[] = "4bf92f3577b34da6a3ce929d0e0e4736";
constexpr char kState[] = "congo=t61rcWkgMzE";

std::unique_ptr<Client> MakeClient(bool follow_redirects = false) {
  CurlTransportOptions transport;
  transport.follow_redirects = follow_redirects;
  ClientOptions options;
  options.transport = MakeCurlTransport(transport).value();
  auto client = Client::Create(std::move(options));
  EXPECT_TRUE(client.ok()) << client.status();
  return std::move(*client);
}

CallOptions FastCall(std::string status_url) {
  CallOptions call;
  call.timeout = std::chrono::seconds(5);
  RetryPolicyOptions policy;
  policy.max_attempts = 3;
  policy.backoff.base = milliseconds(5);
  policy.backoff.cap = milliseconds(20);
  policy.deadline_options.attempt_cap = milliseconds(1000);
  call.policy = RetryPolicy::Create(policy).value();
  call.status_url = std::move(status_url);
  return call;
}

// The values of every `name` header the server read in `r`.
std::vector<std::string> Values(const ReceivedRequest& r, std::string_view name) {
  std::vector<std::string> out;
  for (const Header& h : r.headers) {
    if (absl::EqualsIgnoreCase(h.first, std::string(name))) out.push_back(h.second);
  }
  return out;
}

// POST /orders: 503 refused before any work (marked), then read and closed
// unanswered (may have taken effect); GET /orders/by-key/...: 202, then 200.
class RetriedCallServer {
 public:
  RetriedCallServer()
      : server_([this](const ReceivedRequest& req, LoopbackConnection& conn) {
          if (req.method == "POST") {
            if (posts_.fetch_add(1) == 0) {
              conn.Write(LoopbackServer::Reply(503, {{"Idempotency-Key-State", "rejected"}}, ""));
              return AfterRequest::kKeepAlive;
            }
            return AfterRequest::kClose;  // read, then gone: ambiguous
          }
          if (queries_.fetch_add(1) == 0) {
            conn.Write(LoopbackServer::Reply(202, {}, ""));
            return AfterRequest::kKeepAlive;
          }
          conn.Write(LoopbackServer::Reply(200, {}, R"({"order":1})"));
          return AfterRequest::kKeepAlive;
        }) {}

  LoopbackServer& server() { return server_; }

 private:
  std::atomic<int> posts_{0};
  std::atomic<int> queries_{0};
  LoopbackServer server_;
};

Request PostWithItsOwnTraceparent(const std::string& url) {
  // The request already carries a traceparent (of another trace): the call's
  // context replaces it, never a second one.
  return Request{"POST",
                 url,
                 {{"Content-Type", "application/json"},
                  {"traceparent", "00-11111111111111111111111111111111-2222222222222222-01"}},
                 R"({"sku":"a"})"};
}

TEST(CurlTraceContextTest, EveryAttemptAndQueryCarriesTheCallersContextOnce) {
  RetriedCallServer s;
  auto client = MakeClient();
  CallOptions call = FastCall(s.server().Url("/orders/by-key/{key}"));
  call.trace_context = TraceContext{kParent, kState};
  CallResult r = client->Execute(PostWithItsOwnTraceparent(s.server().Url("/orders")), call);
  ASSERT_EQ(r.outcome, Outcome::kSucceeded) << r.status;
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(r.status_queries, 2);

  const std::vector<ReceivedRequest> seen = s.server().requests();
  ASSERT_EQ(seen.size(), 4u);
  std::vector<std::string> methods;
  for (const ReceivedRequest& req : seen) {
    methods.push_back(req.method);
    EXPECT_THAT(Values(req, "traceparent"), ElementsAre(kParent)) << req.method << req.target;
    EXPECT_THAT(Values(req, "tracestate"), ElementsAre(kState)) << req.method << req.target;
  }
  EXPECT_THAT(methods, ElementsAre("POST", "POST", "GET", "GET"));
  std::vector<int> resends;
  for (const AttemptEvidence& ev : r.evidence) {
    EXPECT_EQ(TraceIdHex(ev.trace_id), kTraceId);
    EXPECT_EQ(SpanIdHex(ev.span_id), "00f067aa0ba902b7");
    resends.push_back(ev.resend_count);
  }
  EXPECT_THAT(resends, ElementsAre(0, 1, 0, 1));
}

// A tracer in the shape of an OpenTelemetry bridge: a new span id per send,
// under the caller's trace.
class CountingTracer final : public AttemptTracer {
 public:
  std::optional<AttemptSpan> OnAttemptStart(const AttemptSpanStart& start) override {
    std::lock_guard<std::mutex> lock(mu_);
    AttemptSpan span;
    span.traceparent = *start.caller;
    span.traceparent.parent_id = SpanId{0x5a, 0, 0, 0, 0, 0, 0, ++next_};
    minted_.push_back(SpanIdHex(span.traceparent.parent_id));
    return span;
  }
  void OnAttemptEnd(const AttemptEvidence& evidence) override {
    std::lock_guard<std::mutex> lock(mu_);
    ended_.push_back(SpanIdHex(evidence.span_id));
  }
  std::vector<std::string> minted() const {
    std::lock_guard<std::mutex> lock(mu_);
    return minted_;
  }
  std::vector<std::string> ended() const {
    std::lock_guard<std::mutex> lock(mu_);
    return ended_;
  }

 private:
  mutable std::mutex mu_;
  std::uint8_t next_ = 0;
  std::vector<std::string> minted_;
  std::vector<std::string> ended_;
};

TEST(CurlTraceContextTest, ATracersSpanIdsReachTheServerOnePerAttempt) {
  RetriedCallServer s;
  auto client = MakeClient();
  CountingTracer tracer;
  CallOptions call = FastCall(s.server().Url("/orders/by-key/{key}"));
  call.trace_context = TraceContext{kParent, kState};
  call.tracer = &tracer;
  CallResult r = client->Execute(PostWithItsOwnTraceparent(s.server().Url("/orders")), call);
  ASSERT_EQ(r.outcome, Outcome::kSucceeded) << r.status;

  const std::vector<ReceivedRequest> seen = s.server().requests();
  ASSERT_EQ(seen.size(), 4u);
  std::vector<std::string> on_the_wire;
  for (const ReceivedRequest& req : seen) {
    const std::vector<std::string> parents = Values(req, "traceparent");
    ASSERT_EQ(parents.size(), 1u) << req.method << req.target;
    const std::optional<TraceParent> p = ParseTraceParent(parents[0]);
    ASSERT_TRUE(p.has_value()) << parents[0];
    EXPECT_EQ(TraceIdHex(p->trace_id), kTraceId);  // the caller's trace
    EXPECT_TRUE(p->sampled());                     // and its flags
    on_the_wire.push_back(SpanIdHex(p->parent_id));
    EXPECT_THAT(Values(req, "tracestate"), ElementsAre(kState));
  }
  EXPECT_THAT(on_the_wire, ElementsAre("5a00000000000001", "5a00000000000002", "5a00000000000003",
                                       "5a00000000000004"));
  EXPECT_EQ(tracer.minted(), on_the_wire);
  EXPECT_EQ(tracer.ended(), on_the_wire);
  std::vector<std::string> recorded;
  for (const AttemptEvidence& ev : r.evidence) recorded.push_back(SpanIdHex(ev.span_id));
  EXPECT_EQ(recorded, on_the_wire);
}

// The request's own traceparent, with no context given and no tracer, goes
// as it is: once, on every attempt and status query.
TEST(CurlTraceContextTest, TheRequestsOwnTraceparentPassesThroughByDefault) {
  RetriedCallServer s;
  auto client = MakeClient();
  CallOptions call = FastCall(s.server().Url("/orders/by-key/{key}"));
  Request req{"POST", s.server().Url("/orders"), {{"traceparent", kParent}}, "{}"};
  CallResult r = client->Execute(req, call);
  ASSERT_EQ(r.outcome, Outcome::kSucceeded) << r.status;
  const std::vector<ReceivedRequest> seen = s.server().requests();
  ASSERT_EQ(seen.size(), 4u);
  for (const ReceivedRequest& got : seen) {
    EXPECT_THAT(Values(got, "traceparent"), ElementsAre(kParent));
    EXPECT_THAT(Values(got, "tracestate"), ElementsAre());
  }
  for (const AttemptEvidence& ev : r.evidence) EXPECT_EQ(TraceIdHex(ev.trace_id), kTraceId);
}

// A malformed context from the caller: dropped, and the call succeeds.
TEST(CurlTraceContextTest, AMalformedContextIsDroppedAndTheCallGoesOn) {
  RetriedCallServer s;
  auto client = MakeClient();
  CallOptions call = FastCall(s.server().Url("/orders/by-key/{key}"));
  call.trace_context =
      TraceContext{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", kState};
  CallResult r = client->Execute(PostWithItsOwnTraceparent(s.server().Url("/orders")), call);
  ASSERT_EQ(r.outcome, Outcome::kSucceeded) << r.status;
  const std::vector<ReceivedRequest> seen = s.server().requests();
  ASSERT_EQ(seen.size(), 4u);
  for (const ReceivedRequest& got : seen) {
    EXPECT_THAT(Values(got, "traceparent"), ElementsAre());
    EXPECT_THAT(Values(got, "tracestate"), ElementsAre());
  }
}

// A redirect hop is a resend: both hops carry the attempt's span, and the
// next attempt's resend count includes the hop.
TEST(CurlTraceContextTest, RedirectHopsCarryTheAttemptsSpanAndCountAsResends) {
  std::atomic<int> hits{0};
  LoopbackServer server([&](const ReceivedRequest& req, LoopbackConnection& conn) {
    const int n = hits.fetch_add(1);
    if (req.target == "/a") {
      conn.Write(LoopbackServer::Reply(307, {{"Location", "/b"}}, ""));
    } else {
      conn.Write(LoopbackServer::Reply(n < 2 ? 503 : 200, {}, "ok"));
    }
    return AfterRequest::kKeepAlive;
  });
  auto client = MakeClient(/*follow_redirects=*/true);
  CountingTracer tracer;
  CallOptions call = FastCall("");
  call.trace_context = TraceContext{kParent, ""};
  call.tracer = &tracer;
  CallResult r = client->Execute(Request{"GET", server.Url("/a"), {}, ""}, call);
  ASSERT_EQ(r.outcome, Outcome::kSucceeded) << r.status;
  const std::vector<ReceivedRequest> seen = server.requests();
  std::vector<std::string> trail;
  for (const ReceivedRequest& got : seen) {
    const std::vector<std::string> parents = Values(got, "traceparent");
    ASSERT_EQ(parents.size(), 1u);
    trail.push_back(got.target + " " + SpanIdHex(ParseTraceParent(parents[0])->parent_id));
  }
  EXPECT_THAT(trail, ElementsAre("/a 5a00000000000001", "/b 5a00000000000001",
                                 "/a 5a00000000000002", "/b 5a00000000000002"));
  ASSERT_EQ(r.evidence.size(), 2u);
  EXPECT_EQ(r.evidence[0].redirects, 1);
  EXPECT_EQ(r.evidence[0].resend_count, 0);
  EXPECT_EQ(r.evidence[1].redirects, 1);
  EXPECT_EQ(r.evidence[1].resend_count, 2);
}

}  // namespace
}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The cases of the transport conformance suite (transport_conformance.h) and
// the misbehaving loopback server they run against.

#include "transport_conformance.h"

#include <chrono>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "saferetry/cancellation.h"

namespace saferetry {
namespace testkit {

using std::chrono::milliseconds;
using ::testing::ElementsAreArray;
using ::testing::IsEmpty;

std::string_view ScenarioName(Scenario s) {
  switch (s) {
    case Scenario::kAnswer:
      return "answer";
    case Scenario::kRefused:
      return "refused";
    case Scenario::kResetBeforeRead:
      return "reset before read";
    case Scenario::kResetAfterRead:
      return "reset after read";
    case Scenario::kHang:
      return "hang";
    case Scenario::kPartialStatusLine:
      return "partial status line";
    case Scenario::kPartialHeaders:
      return "partial headers";
    case Scenario::kPartialBody:
      return "partial body";
    case Scenario::kSlowBody:
      return "slow body";
    case Scenario::kStalledBody:
      return "stalled body";
    case Scenario::kOverCap:
      return "over the body cap";
    case Scenario::kIdleCloseAfterAnswer:
      return "idle close after the answer";
    case Scenario::kCloseAfterReadingNext:
      return "close after reading the next request";
  }
  return "?";
}

Headers AnswerHeaders() {
  return {{"X-Trace", "abc"},
          {"Set-Cookie", "a=1"},
          {"Set-Cookie", "b=2"},
          {"Content-Length", std::to_string(AnswerBody().size())}};
}

std::string AnswerBody() { return std::string("bin\0\r\n\xff end", 12); }

std::vector<std::string> SlowBodyPieces() { return {"slow", "-bod", "y..."}; }

void PrintTo(const TransportFactory& factory, std::ostream* os) { *os << factory.name; }

std::string TransportFactoryName(const ::testing::TestParamInfo<TransportFactory>& info) {
  return info.param.name;
}

std::vector<std::string> DeliveryViolations(const Request& request, const TransportResult& result,
                                            const ServerView& before, const ServerView& after) {
  std::vector<std::string> out;
  const std::size_t bytes = after.bytes - before.bytes;
  if (result.delivery == Delivery::kNotSent && bytes > 0) {
    out.push_back(
        absl::StrCat("delivery kNotSent, but ", bytes, " bytes of the request reached the server"));
  }
  if (result.response.has_value() != (result.delivery == Delivery::kResponseReceived)) {
    out.push_back(result.response.has_value() ? "a response without kResponseReceived"
                                              : "kResponseReceived without a response");
  }
  if (result.status.ok() && !result.response.has_value()) {
    out.push_back("an OK status without a response");
  }
  if (!IsIdempotent(request)) {
    int copies = 0;
    for (std::size_t i = before.requests.size(); i < after.requests.size(); ++i) {
      const ReceivedRequest& got = after.requests[i];
      copies += got.method == request.method && got.body == request.body &&
                absl::EndsWith(request.url, got.target);
    }
    if (copies > 1) {
      out.push_back(absl::StrCat(request.method, " (not idempotent) written ", copies, " times"));
    }
  }
  return out;
}

std::vector<std::string> TimingViolations(const PhaseTimings& t) {
  std::vector<std::string> out;
  const std::pair<const char*, Duration> phases[] = {
      {"dns", t.dns}, {"connect", t.connect}, {"tls", t.tls}, {"first_byte", t.first_byte}};
  const char* last_name = nullptr;
  Duration last{0};
  for (const auto& [name, d] : phases) {
    if (d < Duration::zero()) out.push_back(absl::StrCat(name, " is negative"));
    if (d <= Duration::zero()) continue;
    if (last_name != nullptr && d < last) {
      out.push_back(
          absl::StrCat(name, " (", d.count(), "ns) before ", last_name, " (", last.count(), "ns)"));
    }
    if (d > t.total) out.push_back(absl::StrCat(name, " after total"));
    last_name = name;
    last = d;
  }
  if (t.total < Duration::zero()) out.push_back("total is negative");
  return out;
}

// ---------------------------------------------------------------------------
// The misbehaving loopback server.

namespace {

std::string Head(int status, const Headers& headers) {
  std::string out = absl::StrCat("HTTP/1.1 ", status, status == 200 ? " OK" : " Status", "\r\n");
  for (const auto& h : headers) absl::StrAppend(&out, h.first, ": ", h.second, "\r\n");
  return out + "\r\n";
}

LoopbackServer::Handler HandlerFor(Scenario scenario) {
  return [scenario](const ReceivedRequest& req, LoopbackConnection& conn) -> AfterRequest {
    switch (scenario) {
      case Scenario::kAnswer:
        conn.Write(Head(200, AnswerHeaders()) + AnswerBody());
        return AfterRequest::kKeepAlive;
      case Scenario::kRefused:
      case Scenario::kResetBeforeRead:
        return AfterRequest::kClose;  // Never reached.
      case Scenario::kResetAfterRead:
        return AfterRequest::kReset;
      case Scenario::kHang:
        conn.WaitForPeerClose(milliseconds(5000));
        return AfterRequest::kClose;
      case Scenario::kPartialStatusLine:
        conn.Write("HTTP/1.1 20");
        return AfterRequest::kClose;
      case Scenario::kPartialHeaders:
        conn.Write("HTTP/1.1 200 OK\r\nContent-Length: 10\r\nX-Tr");
        return AfterRequest::kClose;
      case Scenario::kPartialBody:
        conn.Write(Head(200, {{"X-Trace", "abc"}, {"Content-Length", "10"}}) + "hel");
        return AfterRequest::kClose;
      case Scenario::kSlowBody: {
        std::size_t size = 0;
        for (const auto& p : SlowBodyPieces()) size += p.size();
        conn.Write(Head(200, {{"Content-Length", std::to_string(size)}}));
        conn.WriteSlowly(SlowBodyPieces(), kSlowGap);
        return AfterRequest::kKeepAlive;
      }
      case Scenario::kStalledBody:
        conn.Write(Head(200, {{"Content-Length", "10"}}) + "hello");
        conn.WaitForPeerClose(milliseconds(5000));
        return AfterRequest::kClose;
      case Scenario::kOverCap:
        conn.Write(LoopbackServer::Reply(200, {}, std::string(kOverCapSize, 'z')));
        return AfterRequest::kKeepAlive;
      case Scenario::kIdleCloseAfterAnswer:
        // No "Connection: close": the client keeps the connection, which
        // the server then closes while it is idle.
        conn.Write(LoopbackServer::Reply(200, {}, req.body));
        return AfterRequest::kClose;
      case Scenario::kCloseAfterReadingNext:
        if (req.target == "/second" && req.connection == 0) return AfterRequest::kClose;
        conn.Write(LoopbackServer::Reply(200, {}, "ok"));
        return AfterRequest::kKeepAlive;
    }
    return AfterRequest::kClose;
  };
}

}  // namespace

LoopbackHarness::LoopbackHarness(Scenario scenario) : scenario_(scenario) {
  if (scenario == Scenario::kRefused) {
    refused_port_ = UnusedLoopbackPort();
    return;
  }
  LoopbackServer::AcceptHook on_accept;
  if (scenario == Scenario::kResetBeforeRead) on_accept = [](int) { return false; };
  server_ = std::make_unique<LoopbackServer>(HandlerFor(scenario), std::move(on_accept));
  if (scenario == Scenario::kResetBeforeRead) server_->ResetRefusedConnections();
}

std::string LoopbackHarness::Url(std::string_view path) {
  if (server_ == nullptr)
    return absl::StrCat("http://127.0.0.1:", refused_port_, std::string(path));
  return server_->Url(path);
}

ServerView LoopbackHarness::Server() {
  ServerView v;
  if (server_ == nullptr) return v;
  v.requests = server_->requests();
  v.bytes = server_->bytes_received();
  v.connections = server_->connections();
  return v;
}

void LoopbackHarness::AwaitServerClosed(int n) {
  for (int i = 0; i < 200 && server_ != nullptr && server_->closed_connections() < n; ++i) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  // The client sees the FIN at once on loopback; a little more for its
  // socket to be readable before the next request looks at it.
  std::this_thread::sleep_for(milliseconds(20));
}

TimePoint LoopbackHarness::Now() { return std::chrono::steady_clock::now(); }

// ---------------------------------------------------------------------------
// The cases.

namespace {

constexpr milliseconds kShortTimeout{300};
constexpr milliseconds kLongTimeout{3000};
// libcurl's timers may fire this much before the timeout asked for (it
// counts whole milliseconds from its own start).
constexpr milliseconds kTimerSlack{5};

// Milliseconds, with a fraction: readable in failure messages.
double Ms(Duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

Request Get(TransportHarness& h, std::string_view path = "/o") {
  Request r;
  r.url = h.Url(path);
  return r;
}

Request Post(TransportHarness& h, std::string_view path = "/o", std::string body = "pay=1") {
  Request r;
  r.method = "POST";
  r.url = h.Url(path);
  r.headers = {{"Content-Type", "application/x-test"}};
  r.body = std::move(body);
  return r;
}

AttemptOptions Within(Duration timeout, HeaderRefs extra = {}) {
  AttemptOptions o;
  o.timeout = timeout;
  o.extra_headers = extra;
  return o;
}

// One attempt with what the server saw around it.
struct Sent {
  TransportResult result;
  ServerView before;
  ServerView after;
  Duration took{0};
};

Sent SendOne(TransportHarness& h, const Request& request, const AttemptOptions& options) {
  Sent s;
  s.before = h.Server();
  const TimePoint t0 = h.Now();
  s.result = h.Send(request, options);
  s.took = h.Now() - t0;
  s.after = h.Server();
  return s;
}

// The rules every attempt keeps.
void ExpectRulesKept(const Request& request, const Sent& s) {
  EXPECT_THAT(DeliveryViolations(request, s.result, s.before, s.after), IsEmpty());
  EXPECT_THAT(TimingViolations(s.result.timings), IsEmpty());
}

// The copies of `request` the server read during `s`.
int Copies(const Request& request, const Sent& s) {
  int n = 0;
  for (std::size_t i = s.before.requests.size(); i < s.after.requests.size(); ++i) {
    const ReceivedRequest& got = s.after.requests[i];
    n += got.method == request.method && got.body == request.body &&
         absl::EndsWith(request.url, got.target);
  }
  return n;
}

}  // namespace

TEST_P(TransportConformance, AnswerArrivesByteForByte) {
  auto h = Make(Scenario::kAnswer);
  const HeaderRef extra[] = {{"Idempotency-Key", "k-1"}, {"X-Retry-Attempt", "attempt=1; max=3"}};
  for (Request request : {Get(*h, "/items?id=1"), Post(*h, "/orders", std::string("a\0b", 3))}) {
    SCOPED_TRACE(request.method);
    Sent s = SendOne(*h, request, Within(kLongTimeout, extra));
    ExpectRulesKept(request, s);
    ASSERT_TRUE(s.result.status.ok()) << s.result.status;
    EXPECT_EQ(s.result.delivery, Delivery::kResponseReceived);
    ASSERT_TRUE(s.result.response.has_value());
    EXPECT_EQ(s.result.response->status_code, 200);
    EXPECT_THAT(s.result.response->headers, ElementsAreArray(AnswerHeaders()));
    EXPECT_EQ(s.result.response->body, AnswerBody());
    EXPECT_FALSE(s.result.response->body_truncated);
    EXPECT_LE(Ms(s.result.timings.total), Ms(s.took));
    // The server read exactly one copy, with the caller's and the extra
    // headers and the body as given.
    EXPECT_EQ(Copies(request, s), 1);
    ASSERT_EQ(s.after.requests.size(), s.before.requests.size() + 1);
    const ReceivedRequest& got = s.after.requests.back();
    EXPECT_EQ(got.method, request.method);
    EXPECT_TRUE(absl::EndsWith(request.url, got.target)) << got.target;
    EXPECT_EQ(got.body, request.body);
    for (const auto& header : request.headers) EXPECT_EQ(got.Header(header.first), header.second);
    for (const HeaderRef& header : extra) EXPECT_EQ(got.Header(header.name), header.value);
  }
}

TEST_P(TransportConformance, ConnectionRefusedIsNotSent) {
  auto h = Make(Scenario::kRefused);
  const Request request = Post(*h);
  Sent s = SendOne(*h, request, Within(kLongTimeout));
  ExpectRulesKept(request, s);
  EXPECT_EQ(s.result.status.code(), absl::StatusCode::kUnavailable) << s.result.status;
  EXPECT_EQ(s.result.delivery, Delivery::kNotSent);
  EXPECT_FALSE(s.result.response.has_value());
  EXPECT_LT(Ms(s.took), Ms(kLongTimeout));
}

TEST_P(TransportConformance, ResetBeforeTheRequestIsReadMayHaveBeenDelivered) {
  auto h = Make(Scenario::kResetBeforeRead);
  const Request request = Post(*h);
  Sent s = SendOne(*h, request, Within(kLongTimeout));
  ExpectRulesKept(request, s);
  EXPECT_EQ(s.result.status.code(), absl::StatusCode::kUnavailable) << s.result.status;
  // The request was written: the server cannot be proven not to have it.
  EXPECT_EQ(s.result.delivery, Delivery::kMaybeDelivered);
  EXPECT_FALSE(s.result.response.has_value());
  EXPECT_GT(s.after.bytes, s.before.bytes);
  EXPECT_EQ(Copies(request, s), 0);
  EXPECT_LT(Ms(s.took), Ms(kLongTimeout));
  EXPECT_EQ(s.result.timings.first_byte, Duration(0));  // No byte of an answer came.
}

TEST_P(TransportConformance, ResetAfterTheRequestIsReadMayHaveBeenDelivered) {
  auto h = Make(Scenario::kResetAfterRead);
  const Request request = Post(*h);
  Sent s = SendOne(*h, request, Within(kLongTimeout));
  ExpectRulesKept(request, s);
  EXPECT_EQ(s.result.status.code(), absl::StatusCode::kUnavailable) << s.result.status;
  EXPECT_EQ(s.result.delivery, Delivery::kMaybeDelivered);
  EXPECT_FALSE(s.result.response.has_value());
  EXPECT_EQ(Copies(request, s), 1);
  EXPECT_LT(Ms(s.took), Ms(kLongTimeout));
  EXPECT_EQ(s.result.timings.first_byte, Duration(0));
}

TEST_P(TransportConformance, HangEndsAtTheAttemptTimeout) {
  auto h = Make(Scenario::kHang);
  const Request request = Post(*h);
  Sent s = SendOne(*h, request, Within(kShortTimeout));
  ExpectRulesKept(request, s);
  EXPECT_EQ(s.result.status.code(), absl::StatusCode::kDeadlineExceeded) << s.result.status;
  EXPECT_EQ(s.result.delivery, Delivery::kMaybeDelivered);
  EXPECT_FALSE(s.result.response.has_value());
  EXPECT_EQ(Copies(request, s), 1);
  EXPECT_GE(Ms(s.took), Ms(kShortTimeout - kTimerSlack));
  EXPECT_LE(Ms(s.took), Ms(kShortTimeout + traits().slack));
  EXPECT_GE(Ms(s.result.timings.total), Ms(kShortTimeout - kTimerSlack));
  EXPECT_LE(Ms(s.result.timings.total), Ms(s.took));
  EXPECT_EQ(s.result.timings.first_byte, Duration(0));
}

TEST_P(TransportConformance, PartialStatusLineIsNoResponse) {
  auto h = Make(Scenario::kPartialStatusLine);
  const Request request = Post(*h);
  Sent s = SendOne(*h, request, Within(kLongTimeout));
  ExpectRulesKept(request, s);
  EXPECT_EQ(s.result.status.code(), absl::StatusCode::kUnavailable) << s.result.status;
  EXPECT_EQ(s.result.delivery, Delivery::kMaybeDelivered);
  EXPECT_FALSE(s.result.response.has_value());
  EXPECT_EQ(Copies(request, s), 1);
}

TEST_P(TransportConformance, PartialHeadersAreNoResponse) {
  auto h = Make(Scenario::kPartialHeaders);
  const Request request = Post(*h);
  Sent s = SendOne(*h, request, Within(kLongTimeout));
  ExpectRulesKept(request, s);
  EXPECT_EQ(s.result.status.code(), absl::StatusCode::kUnavailable) << s.result.status;
  EXPECT_EQ(s.result.delivery, Delivery::kMaybeDelivered);
  EXPECT_FALSE(s.result.response.has_value());
  EXPECT_EQ(Copies(request, s), 1);
}

TEST_P(TransportConformance, PartialBodyKeepsTheResponseAndFails) {
  auto h = Make(Scenario::kPartialBody);
  const Request request = Post(*h);
  Sent s = SendOne(*h, request, Within(kLongTimeout));
  ExpectRulesKept(request, s);
  EXPECT_EQ(s.result.status.code(), absl::StatusCode::kUnavailable) << s.result.status;
  EXPECT_EQ(s.result.delivery, Delivery::kResponseReceived);
  ASSERT_TRUE(s.result.response.has_value());
  EXPECT_EQ(s.result.response->status_code, 200);
  EXPECT_THAT(s.result.response->headers,
              ElementsAreArray(Headers{{"X-Trace", "abc"}, {"Content-Length", "10"}}));
  EXPECT_EQ(s.result.response->body, "hel");
  EXPECT_EQ(Copies(request, s), 1);
}

TEST_P(TransportConformance, SlowBodyArrivesWhole) {
  auto h = Make(Scenario::kSlowBody);
  const Request request = Get(*h);
  Sent s = SendOne(*h, request, Within(kLongTimeout));
  ExpectRulesKept(request, s);
  ASSERT_TRUE(s.result.status.ok()) << s.result.status;
  ASSERT_TRUE(s.result.response.has_value());
  std::string whole;
  for (const auto& p : SlowBodyPieces()) whole += p;
  EXPECT_EQ(s.result.response->body, whole);
  const Duration gaps = kSlowGap * (kSlowPieces - 1);
  EXPECT_GE(Ms(s.took), Ms(gaps));
  EXPECT_LE(Ms(s.took), Ms(gaps + traits().slack));
  EXPECT_GE(Ms(s.result.timings.total), Ms(gaps - kTimerSlack));
  EXPECT_LE(Ms(s.result.timings.total), Ms(s.took));
  EXPECT_EQ(Copies(request, s), 1);
}

TEST_P(TransportConformance, StalledBodyEndsAtTheTimeoutWithThePartialResponse) {
  auto h = Make(Scenario::kStalledBody);
  const Request request = Post(*h);
  Sent s = SendOne(*h, request, Within(kShortTimeout));
  ExpectRulesKept(request, s);
  EXPECT_EQ(s.result.status.code(), absl::StatusCode::kDeadlineExceeded) << s.result.status;
  EXPECT_EQ(s.result.delivery, Delivery::kResponseReceived);
  ASSERT_TRUE(s.result.response.has_value());
  EXPECT_EQ(s.result.response->status_code, 200);
  EXPECT_EQ(s.result.response->body, "hello");
  EXPECT_GE(Ms(s.took), Ms(kShortTimeout - kTimerSlack));
  EXPECT_LE(Ms(s.took), Ms(kShortTimeout + traits().slack));
  EXPECT_EQ(Copies(request, s), 1);
}

TEST_P(TransportConformance, AnswerOverTheBodyCapIsCutAndStillSucceeds) {
  auto h = Make(Scenario::kOverCap);
  const Request request = Get(*h);
  Sent s = SendOne(*h, request, Within(kLongTimeout));
  ExpectRulesKept(request, s);
  ASSERT_TRUE(s.result.status.ok()) << s.result.status;
  EXPECT_EQ(s.result.delivery, Delivery::kResponseReceived);
  ASSERT_TRUE(s.result.response.has_value());
  EXPECT_EQ(s.result.response->status_code, 200);
  EXPECT_EQ(s.result.response->body, std::string(kBodyCap, 'z'));
  EXPECT_TRUE(s.result.response->body_truncated);
}

TEST_P(TransportConformance, KeptAliveConnectionClosedWhileIdleIsNotReusedBlindly) {
  auto h = Make(Scenario::kIdleCloseAfterAnswer);
  const Request first = Post(*h, "/first", "one");
  Sent a = SendOne(*h, first, Within(kLongTimeout));
  ExpectRulesKept(first, a);
  ASSERT_TRUE(a.result.status.ok()) << a.result.status;
  EXPECT_EQ(a.result.response->body, "one");
  h->AwaitServerClosed(1);
  const Request second = Post(*h, "/second", "two");
  Sent b = SendOne(*h, second, Within(kLongTimeout));
  ExpectRulesKept(second, b);
  ASSERT_TRUE(b.result.status.ok()) << b.result.status;
  EXPECT_EQ(b.result.response->body, "two");
  EXPECT_EQ(Copies(first, a), 1);
  EXPECT_EQ(Copies(second, b), 1);
}

TEST_P(TransportConformance, KeptAliveConnectionClosedAfterReadingAPostSendsItOnce) {
  auto h = Make(Scenario::kCloseAfterReadingNext);
  const Request first = Post(*h, "/first", "one");
  Sent a = SendOne(*h, first, Within(kLongTimeout));
  ASSERT_TRUE(a.result.status.ok()) << a.result.status;
  const Request second = Post(*h, "/second", "two");
  Sent b = SendOne(*h, second, Within(kLongTimeout));
  ExpectRulesKept(second, b);
  EXPECT_EQ(b.result.status.code(), absl::StatusCode::kUnavailable) << b.result.status;
  EXPECT_EQ(b.result.delivery, Delivery::kMaybeDelivered);
  EXPECT_FALSE(b.result.response.has_value());
  EXPECT_EQ(Copies(second, b), 1);
  EXPECT_EQ(b.result.timings.first_byte, Duration(0));
}

TEST_P(TransportConformance, KeptAliveConnectionClosedAfterReadingAGetMayResendIt) {
  auto h = Make(Scenario::kCloseAfterReadingNext);
  const Request first = Get(*h, "/first");
  ASSERT_TRUE(SendOne(*h, first, Within(kLongTimeout)).result.status.ok());
  const Request second = Get(*h, "/second");
  Sent b = SendOne(*h, second, Within(kLongTimeout));
  ExpectRulesKept(second, b);
  const int copies = traits().idempotent_copies_on_dead_reused_connection;
  EXPECT_EQ(Copies(second, b), copies);
  if (copies > 1) {
    // Resent on a new connection, and answered there.
    ASSERT_TRUE(b.result.status.ok()) << b.result.status;
    EXPECT_EQ(b.result.response->body, "ok");
  } else {
    EXPECT_EQ(b.result.status.code(), absl::StatusCode::kUnavailable) << b.result.status;
    EXPECT_EQ(b.result.delivery, Delivery::kMaybeDelivered);
  }
}

TEST_P(TransportConformance, CancelledBeforeTheAttemptSendsNothing) {
  auto h = Make(Scenario::kAnswer);
  const Request request = Post(*h);
  const ServerView before = h->Server();
  CancelledAttempt c = h->SendAndCancel(request, Within(kLongTimeout), std::nullopt);
  ASSERT_TRUE(c.result.has_value());
  EXPECT_FALSE(c.callback_ran);
  EXPECT_EQ(c.result->status.code(), absl::StatusCode::kCancelled) << c.result->status;
  EXPECT_EQ(c.result->delivery, traits().delivery_when_cancelled_before_send);
  EXPECT_FALSE(c.result->response.has_value());
  const ServerView after = h->Server();
  EXPECT_THAT(DeliveryViolations(request, *c.result, before, after), IsEmpty());
  EXPECT_EQ(after.bytes, before.bytes);
  EXPECT_EQ(after.connections, before.connections);
}

TEST_P(TransportConformance, CancelledInFlightMayHaveBeenDeliveredAndEndsAtOnce) {
  if (!traits().cancels_in_flight) GTEST_SKIP() << GetParam().name << ": attempts take no time";
  auto h = Make(Scenario::kHang);
  const Request request = Post(*h);
  const ServerView before = h->Server();
  const TimePoint t0 = h->Now();
  CancelledAttempt c = h->SendAndCancel(request, Within(kLongTimeout), milliseconds(100));
  const Duration took = h->Now() - t0;
  ASSERT_TRUE(c.result.has_value());
  EXPECT_FALSE(c.callback_ran);
  EXPECT_EQ(c.result->status.code(), absl::StatusCode::kCancelled) << c.result->status;
  EXPECT_EQ(c.result->delivery, Delivery::kMaybeDelivered);
  EXPECT_FALSE(c.result->response.has_value());
  EXPECT_GE(Ms(took), 100);
  EXPECT_LT(Ms(took), Ms(milliseconds(100) + traits().slack));
  const ServerView after = h->Server();
  EXPECT_THAT(DeliveryViolations(request, *c.result, before, after), IsEmpty());
}

}  // namespace testkit
}  // namespace saferetry

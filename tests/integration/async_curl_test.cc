// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// AsyncClient on the libcurl multi transport against the loopback server:
// real sockets, the client's own epoll loop thread, bounded timeouts.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "loopback_server.h"
#include "saferetry/async_client.h"
#include "saferetry/curl_async_transport.h"

namespace saferetry {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testkit::AfterRequest;
using testkit::FullBacklogListener;
using testkit::LoopbackConnection;
using testkit::LoopbackServer;
using testkit::ReceivedRequest;

std::unique_ptr<AsyncClient> CurlAsyncClient(std::size_t max_in_flight = 10000,
                                             CurlMultiTransportOptions transport_options = {}) {
  auto loop = MakeEpollEventLoop();
  EXPECT_TRUE(loop.ok()) << loop.status();
  auto transport = MakeCurlMultiTransport(*loop, std::move(transport_options));
  EXPECT_TRUE(transport.ok()) << transport.status();
  AsyncClientOptions o;
  o.client.budget = MakeUnlimitedBudget();
  o.client.status_query_budget = MakeUnlimitedBudget();
  o.loop = *loop;
  o.transport = *transport;
  o.max_in_flight = max_in_flight;
  auto c = AsyncClient::Create(std::move(o));
  EXPECT_TRUE(c.ok()) << c.status();
  return *std::move(c);
}

Request Get(const LoopbackServer& server, std::string_view path = "/orders/1") {
  Request r;
  r.url = server.Url(path);
  return r;
}

CallOptions Bounded() {
  CallOptions call;
  call.timeout = seconds(5);
  return call;
}

CallResult Await(std::future<CallResult> f) {
  EXPECT_EQ(f.wait_for(seconds(20)), std::future_status::ready);
  return f.get();
}

TEST(AsyncCurlTest, GetSucceeds) {
  LoopbackServer server([](const ReceivedRequest&, LoopbackConnection& conn) {
    conn.Write(LoopbackServer::Reply(200, {{"X-Request-Id", "r-1"}}, "order 1"));
    return AfterRequest::kKeepAlive;
  });
  auto client = CurlAsyncClient();
  CallResult r = Await(client->Execute(Get(server), Bounded()));
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  ASSERT_TRUE(r.last_response.has_value());
  EXPECT_EQ(r.last_response->status_code, 200);
  EXPECT_EQ(r.last_response->body, "order 1");
  EXPECT_EQ(r.evidence[0].downstream_request_id, "r-1");
  ASSERT_EQ(server.requests().size(), 1u);
  EXPECT_TRUE(server.requests()[0].Header("X-Request-Timeout-Ms").has_value());
}

TEST(AsyncCurlTest, UnavailableThenSuccessRetriesOnTheLoop) {
  std::atomic<int> seen{0};
  LoopbackServer server([&](const ReceivedRequest&, LoopbackConnection& conn) {
    conn.Write(seen++ == 0 ? LoopbackServer::Reply(503, {}, "busy")
                           : LoopbackServer::Reply(200, {}, "ok"));
    return AfterRequest::kKeepAlive;
  });
  auto client = CurlAsyncClient();
  CallResult r = Await(client->Execute(Get(server), Bounded()));
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(server.requests().size(), 2u);
  EXPECT_EQ(server.requests()[1].Header("X-Retry-Attempt"), "attempt=2; max=3");
}

// The server commits the POST and closes without answering; a status query
// with the same key finds the order. Exactly one POST arrives.
TEST(AsyncCurlTest, CommitThenLostIsResolvedByStatusQuery) {
  LoopbackServer server([](const ReceivedRequest& req, LoopbackConnection& conn) {
    if (req.method == "POST") return AfterRequest::kClose;
    conn.Write(LoopbackServer::Reply(200, {}, R"({"order_id":1})"));
    return AfterRequest::kKeepAlive;
  });
  auto client = CurlAsyncClient();
  Request post{"POST", server.Url("/orders"), {{"Content-Type", "application/json"}}, "{}"};
  CallOptions call = Bounded();
  call.status_url = server.Url("/orders/by-key/{key}");
  CallResult r = Await(client->Execute(post, call));
  EXPECT_EQ(r.outcome, Outcome::kSucceeded) << StopReasonName(r.stop_reason);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kStatusQuery);
  EXPECT_EQ(r.evidence[0].delivery, Delivery::kMaybeDelivered);
  int posts = 0;
  for (const auto& q : server.requests()) posts += q.method == "POST";
  EXPECT_EQ(posts, 1);
}

TEST(AsyncCurlTest, ManyCallsInFlightOnOneLoop) {
  LoopbackServer server([](const ReceivedRequest&, LoopbackConnection& conn) {
    conn.Write(LoopbackServer::Reply(200, {}, "ok"));
    return AfterRequest::kKeepAlive;
  });
  auto client = CurlAsyncClient();
  std::vector<std::future<CallResult>> futures;
  for (int i = 0; i < 64; ++i) futures.push_back(client->Execute(Get(server), Bounded()));
  int ok = 0;
  for (auto& f : futures) ok += Await(std::move(f)).outcome == Outcome::kSucceeded;
  EXPECT_EQ(ok, 64);
  EXPECT_EQ(server.requests().size(), 64u);
}

// The first copy hangs; the hedge is answered; the loser's transfer is
// removed mid-response and its connection closed (the server sees the
// close), never returned to the pool.
TEST(AsyncCurlTest, HedgeWinsAndTheLosersConnectionIsClosed) {
  std::atomic<int> seen{0};
  std::atomic<bool> loser_closed{false};
  LoopbackServer server([&](const ReceivedRequest&, LoopbackConnection& conn) {
    if (seen++ == 0) {
      loser_closed = conn.WaitForPeerClose(milliseconds(5000));
      return AfterRequest::kClose;
    }
    conn.Write(LoopbackServer::Reply(200, {}, "hedge"));
    return AfterRequest::kKeepAlive;
  });
  auto client = CurlAsyncClient();
  CallOptions call = Bounded();
  saferetry::RetryPolicyOptions call_policy;
  call_policy.hedging.enabled = true;
  call_policy.hedging.delay = milliseconds(50);
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  CallResult r = Await(client->Execute(Get(server), call));
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.last_response->body, "hedge");
  EXPECT_EQ(r.attempts, 2);
  for (int i = 0; i < 500 && !loser_closed; ++i) std::this_thread::sleep_for(milliseconds(10));
  EXPECT_TRUE(loser_closed);
  EXPECT_EQ(server.connections(), 2);
}

TEST(AsyncCurlTest, ConcurrentCancelAbortsTheTransfer) {
  std::atomic<bool> closed{false};
  LoopbackServer server([&](const ReceivedRequest&, LoopbackConnection& conn) {
    closed = conn.WaitForPeerClose(milliseconds(5000));
    return AfterRequest::kClose;
  });
  auto client = CurlAsyncClient();
  AsyncClient::CallId id = 0;
  auto f = client->Execute(Get(server), Bounded(), &id);
  while (server.requests().empty()) std::this_thread::sleep_for(milliseconds(1));
  std::thread canceller([&] { client->Cancel(id); });
  canceller.join();
  CallResult r = Await(std::move(f));
  EXPECT_EQ(r.stop_reason, StopReason::kCancelled);
  EXPECT_EQ(r.outcome, Outcome::kFailed);  // a GET: no effect
  for (int i = 0; i < 500 && !closed; ++i) std::this_thread::sleep_for(milliseconds(10));
  EXPECT_TRUE(closed);
}

TEST(AsyncCurlTest, ConnectionRefusedIsNotSent) {
  auto client = CurlAsyncClient();
  Request r;
  r.url = "http://127.0.0.1:" + std::to_string(testkit::UnusedLoopbackPort()) + "/x";
  CallOptions call = Bounded();
  saferetry::RetryPolicyOptions call_policy;
  call_policy.max_attempts = 1;
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  CallResult result = Await(client->Execute(r, call));
  EXPECT_EQ(result.outcome, Outcome::kFailed);
  ASSERT_EQ(result.evidence.size(), 1u);
  EXPECT_EQ(result.evidence[0].delivery, Delivery::kNotSent);
}

TEST(AsyncCurlTest, MaxConnectionsIsValidated) {
  auto loop = MakeEpollEventLoop();
  ASSERT_TRUE(loop.ok()) << loop.status();
  for (std::size_t bad : {std::size_t{0}, std::size_t{1000001}}) {
    CurlMultiTransportOptions o;
    o.max_connections = bad;
    auto transport = MakeCurlMultiTransport(*loop, o);
    ASSERT_FALSE(transport.ok()) << bad;
    EXPECT_EQ(transport.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(transport.status().message()),
                ::testing::StartsWith("max_connections: must be in 1..1000000, got " +
                                      std::to_string(bad)));
  }
  CurlMultiTransportOptions one;
  one.max_connections = 1;
  EXPECT_TRUE(MakeCurlMultiTransport(*loop, one).ok());
  // The blocking transport's options are accepted as they are.
  CurlTransportOptions plain;
  plain.max_idle_handles = 4;
  EXPECT_TRUE(MakeCurlMultiTransport(*loop, plain).ok());
}

// Waves of calls in flight, each wave started when the previous one has
// finished: every wave reuses the connections of the first. The transfers
// in flight dip as each wave ends, which must not shrink the connection
// cache (libcurl's default size follows the transfers added at the moment).
TEST(AsyncCurlTest, ConnectionsAreReusedAcrossCalls) {
  constexpr int kWave = 16;
  constexpr int kWaves = 20;
  LoopbackServer server([](const ReceivedRequest&, LoopbackConnection& conn) {
    conn.Write(LoopbackServer::Reply(200, {}, "ok"));
    return AfterRequest::kKeepAlive;
  });
  auto client = CurlAsyncClient();
  for (int wave = 0; wave < kWaves; ++wave) {
    std::vector<std::future<CallResult>> futures;
    for (int i = 0; i < kWave; ++i) futures.push_back(client->Execute(Get(server), Bounded()));
    for (auto& f : futures) {
      CallResult r = Await(std::move(f));
      EXPECT_EQ(r.outcome, Outcome::kSucceeded);
      EXPECT_EQ(r.attempts, 1);
    }
  }
  EXPECT_EQ(server.requests().size(), static_cast<std::size_t>(kWave * kWaves));
  // At most one connection per call of a wave, opened in the first wave and
  // reused by the other 19. Fewer is reuse too: on a loaded machine an
  // answer can come back before the wave's last call starts, and libcurl
  // hands that call the freed connection.
  EXPECT_GE(server.connections(), 1);
  EXPECT_LE(server.connections(), kWave);
}

// As a user runs it: the default policy with an 8 s deadline, on the built-in
// loop's real timers. The POST commits and then hangs until the attempt
// times out; the status query answers "still processing" twice (a long
// "in progress"), then finds the order. One POST reaches the server, every
// query asks for its key, and the call ends SUCCEEDED by the status query.
TEST(AsyncCurlTest, DefaultsRideOutAHangAfterCommitAndALongInProgress) {
  std::mutex mu;
  std::string committed_key;  // guarded by mu
  int queries = 0;            // guarded by mu
  LoopbackServer server([&](const ReceivedRequest& req, LoopbackConnection& conn) {
    if (req.method == "POST") {
      {
        std::lock_guard<std::mutex> lock(mu);
        committed_key = req.Header("Idempotency-Key").value_or("");
      }
      conn.WaitForPeerClose(milliseconds(10000));  // the client gives up first
      return AfterRequest::kClose;
    }
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(req.target, "/orders/by-key/" + committed_key);
    conn.Write(++queries <= 2 ? LoopbackServer::Reply(202, {}, "")
                              : LoopbackServer::Reply(200, {}, R"({"order_id":7})"));
    return AfterRequest::kKeepAlive;
  });
  auto client = CurlAsyncClient();
  Request post{"POST", server.Url("/orders"), {{"Content-Type", "application/json"}}, "{}"};
  CallOptions call;
  call.timeout = seconds(8);  // the attempt gets about 70 %, the rest is for resolving
  call.status_url = server.Url("/orders/by-key/{key}");
  CallResult r = Await(client->Execute(post, call));
  EXPECT_EQ(r.outcome, Outcome::kSucceeded) << StopReasonName(r.stop_reason);
  EXPECT_EQ(r.resolved_by, ResolvedBy::kStatusQuery);
  ASSERT_FALSE(r.evidence.empty());
  EXPECT_EQ(r.evidence[0].delivery, Delivery::kMaybeDelivered);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.status_queries, 3);
  int posts = 0;
  for (const auto& q : server.requests()) posts += q.method == "POST";
  EXPECT_EQ(posts, 1);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_FALSE(committed_key.empty());
  EXPECT_EQ(r.idempotency_key, committed_key);
}

// The multi transport's attempt ids: an attempt's id goes stale once it
// finished, and cancelling it then cancels nothing, not even the next
// attempt that took its place; an attempt refused before it started has a
// non-zero id that cancels nothing either.
TEST(AsyncCurlTest, AFinishedAttemptsIdCancelsNothingLater) {
  LoopbackServer server([](const ReceivedRequest&, LoopbackConnection& conn) {
    conn.Write(LoopbackServer::Reply(200, {}, "ok"));
    return AfterRequest::kKeepAlive;
  });
  auto loop = MakeEpollEventLoop();
  ASSERT_TRUE(loop.ok()) << loop.status();
  auto made = MakeCurlMultiTransport(*loop);
  ASSERT_TRUE(made.ok()) << made.status();
  std::shared_ptr<AsyncTransport> transport = *made;
  std::shared_ptr<RunnableEventLoop> runner = *loop;
  const Request request = Get(server);
  AttemptOptions options;
  options.timeout = seconds(5);
  // All on the loop thread, read after it stopped.
  std::vector<std::string> log;
  AsyncTransport::AttemptId first = 0;
  AsyncTransport::AttemptId second = 0;
  AsyncTransport::AttemptId refused = 0;
  auto on_refused = [&](TransportResult r) {
    log.push_back(r.delivery == Delivery::kNotSent ? "refused" : "sent");
    runner->Stop();
  };
  auto on_second = [&](TransportResult r) {
    log.push_back(r.response.has_value() ? "second " + r.response->body : "second failed");
    AttemptOptions none;  // no time left: refused before it starts
    none.timeout = Duration::zero();
    refused = transport->Start(request, none, on_refused);
    EXPECT_NE(refused, 0u);
    EXPECT_FALSE(transport->Cancel(refused).has_value());
  };
  auto on_first = [&](TransportResult r) {
    log.push_back(r.response.has_value() ? "first " + r.response->body : "first failed");
    // The next attempt takes the first one's place.
    second = transport->Start(request, options, on_second);
    EXPECT_NE(second, 0u);
    EXPECT_NE(second, first);
    EXPECT_FALSE(transport->Cancel(first).has_value()) << "a finished attempt's id";
  };
  runner->Post([&] {
    first = transport->Start(request, options, on_first);
    EXPECT_NE(first, 0u);
  });
  runner->Post([&] { runner->AddTimer(seconds(20), [&] { runner->Stop(); }); });  // a bound
  runner->Run();
  EXPECT_THAT(log, ::testing::ElementsAre("first ok", "second ok", "refused"));
  EXPECT_EQ(server.requests().size(), 2u);
}

// Limits per phase on the event loop: the policy's, per endpoint. A
// server that accepts and never answers; the attempt ends at the
// first-byte limit, not at its own 3 s timeout, with the phase named.
// Tolerances for a loaded two-core machine.
CallOptions WithLimits(int max_attempts, const PhaseLimits& limits, KeyMode key_mode) {
  RetryPolicyOptions o;
  o.max_attempts = max_attempts;
  o.key_mode = key_mode;
  o.deadline_options.attempt_cap = seconds(3);
  o.phase_limits = limits;
  CallOptions call;
  call.timeout = seconds(20);
  call.policy = RetryPolicy::Create(o).value();
  return call;
}

TEST(AsyncCurlTest, APolicysFirstByteLimitEndsTheAttemptAndNamesThePhase) {
  LoopbackServer server([](const ReceivedRequest&, LoopbackConnection& conn) {
    conn.WaitForPeerClose(milliseconds(10000));
    return AfterRequest::kClose;
  });
  auto client = CurlAsyncClient();
  PhaseLimits limits;
  limits.first_byte = milliseconds(300);
  CallResult r = Await(client->Execute(Get(server), WithLimits(1, limits, KeyMode::kAuto)));
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  ASSERT_EQ(r.evidence.size(), 1u);
  const AttemptEvidence& ev = r.evidence[0];
  EXPECT_EQ(ev.delivery, Delivery::kMaybeDelivered);
  EXPECT_EQ(ev.transport_status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(ev.timings.timed_out, Phase::kFirstByte);
  EXPECT_GT(ev.timings.request_written, Duration(0));
  EXPECT_EQ(ev.timings.first_byte, Duration(0));
  EXPECT_GE(ev.end - ev.start, milliseconds(295));
  EXPECT_LT(ev.end - ev.start, milliseconds(1500));
  EXPECT_EQ(server.requests().size(), 1u);
}

// The transport's own first-byte limit applies when the policy sets none.
TEST(AsyncCurlTest, TheTransportsFirstByteLimitIsTheDefault) {
  LoopbackServer server([](const ReceivedRequest&, LoopbackConnection& conn) {
    conn.WaitForPeerClose(milliseconds(10000));
    return AfterRequest::kClose;
  });
  CurlMultiTransportOptions options;
  options.phase_limits.first_byte = milliseconds(300);
  auto client = CurlAsyncClient(10000, options);
  CallResult r = Await(client->Execute(Get(server), WithLimits(1, {}, KeyMode::kAuto)));
  ASSERT_EQ(r.evidence.size(), 1u);
  EXPECT_EQ(r.evidence[0].timings.timed_out, Phase::kFirstByte);
  EXPECT_LT(r.evidence[0].end - r.evidence[0].start, milliseconds(1500));
}

// A connect that never completes: each attempt ends at the connect limit,
// proven not sent, and a keyless POST is sent again.
TEST(AsyncCurlTest, APolicysConnectLimitEndsTheAttemptAndAKeylessPostIsRetried) {
  FullBacklogListener blackhole;
  ASSERT_TRUE(blackhole.full()) << "the accept queue could not be filled";
  auto client = CurlAsyncClient();
  PhaseLimits limits;
  limits.connect = milliseconds(300);
  Request post{"POST", blackhole.Url("/orders"), {}, "x"};
  CallResult r = Await(client->Execute(post, WithLimits(2, limits, KeyMode::kNever)));
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kAttemptsExhausted);
  EXPECT_EQ(r.attempts, 2);
  ASSERT_EQ(r.evidence.size(), 2u);
  for (const AttemptEvidence& ev : r.evidence) {
    EXPECT_EQ(ev.delivery, Delivery::kNotSent);
    EXPECT_EQ(ev.transport_status.code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_EQ(ev.timings.timed_out, Phase::kConnect);
    EXPECT_GE(ev.end - ev.start, milliseconds(295));
    EXPECT_LT(ev.end - ev.start, milliseconds(1500));
  }
}

// A hedge answers while the first copy waits for its first byte: the loser
// is cancelled with its first-byte timer, which never fires on a transfer
// that is gone, and the next call on the loop is untouched.
TEST(AsyncCurlTest, ACancelledHedgeTakesItsFirstByteTimerWithIt) {
  std::atomic<int> seen{0};
  LoopbackServer server([&](const ReceivedRequest&, LoopbackConnection& conn) {
    if (seen++ == 0) {
      conn.WaitForPeerClose(milliseconds(5000));
      return AfterRequest::kClose;
    }
    conn.Write(LoopbackServer::Reply(200, {}, "hedge"));
    return AfterRequest::kKeepAlive;
  });
  auto client = CurlAsyncClient();
  RetryPolicyOptions o;
  o.hedging.enabled = true;
  o.hedging.delay = milliseconds(50);
  o.phase_limits.first_byte = milliseconds(400);
  CallOptions call = Bounded();
  call.policy = RetryPolicy::Create(o).value();
  CallResult r = Await(client->Execute(Get(server), call));
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.attempts, 2);
  // Past the loser's limit: a second call still gets its answer.
  std::this_thread::sleep_for(milliseconds(500));
  CallResult again = Await(client->Execute(Get(server), call));
  EXPECT_EQ(again.outcome, Outcome::kSucceeded);
  EXPECT_EQ(again.attempts, 1);
  EXPECT_EQ(again.evidence[0].timings.timed_out, Phase::kNone);
}

// A response that arrives in time is untouched by the limits, and every
// phase it went through is measured in order.
TEST(AsyncCurlTest, AnAnswerInTimeIsMeasuredPhaseByPhase) {
  LoopbackServer server([](const ReceivedRequest&, LoopbackConnection& conn) {
    conn.Write(LoopbackServer::Reply(200, {}, "ok"));
    return AfterRequest::kKeepAlive;
  });
  auto client = CurlAsyncClient();
  PhaseLimits limits;
  limits.connect = milliseconds(2000);
  limits.first_byte = milliseconds(2000);
  Request post{"POST", server.Url("/orders"), {}, "x"};
  CallResult r = Await(client->Execute(post, WithLimits(1, limits, KeyMode::kAuto)));
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  const PhaseTimings& t = r.evidence[0].timings;
  EXPECT_EQ(t.timed_out, Phase::kNone);
  EXPECT_GT(t.connect, Duration(0));
  EXPECT_GE(t.request_written, t.connect);
  EXPECT_GE(t.first_byte, t.request_written);
  EXPECT_GE(t.total, t.first_byte);
}

}  // namespace
}  // namespace saferetry

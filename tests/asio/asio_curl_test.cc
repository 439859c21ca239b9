// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// AsyncClient over the libcurl multi transport on the Asio adapter, with an
// io_context run by two threads, against the loopback server: real sockets
// that libcurl opens and closes itself, bounded counts and timeouts.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "loopback_server.h"
#include "saferetry/asio_event_loop.h"
#include "saferetry/async_client.h"
#include "saferetry/curl_async_transport.h"

namespace saferetry {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testkit::AfterRequest;
using testkit::LoopbackConnection;
using testkit::LoopbackServer;
using testkit::ReceivedRequest;

// A client on an AsioEventLoop whose context `threads` threads run.
class ThreadedContext {
 public:
  explicit ThreadedContext(int threads) {
    loop_ = std::make_shared<AsioEventLoop>(io_);
    auto transport = MakeCurlMultiTransport(loop_);
    EXPECT_TRUE(transport.ok()) << transport.status();
    transport_ = *transport;
    AsyncClientOptions o;
    o.client.budget = MakeUnlimitedBudget();
    o.client.status_query_budget = MakeUnlimitedBudget();
    o.loop = loop_;
    o.transport = transport_;
    o.run_loop_thread = false;
    auto c = AsyncClient::Create(std::move(o));
    EXPECT_TRUE(c.ok()) << c.status();
    client_ = *std::move(c);
    for (int i = 0; i < threads; ++i) runners_.emplace_back([this] { io_.run(); });
  }
  // Destroys the client and the transport on the strand (the loop thread);
  // then nothing is left and the runners return.
  ~ThreadedContext() {
    std::promise<void> destroyed;
    asio::post(loop_->strand(), [&] {
      client_.reset();
      transport_.reset();
      destroyed.set_value();
    });
    destroyed.get_future().wait();
    guard_.reset();
    for (auto& t : runners_) t.join();
  }

  AsyncClient& client() { return *client_; }
  AsioEventLoop& loop() { return *loop_; }

 private:
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_ = asio::make_work_guard(io_);
  std::shared_ptr<AsioEventLoop> loop_;
  std::shared_ptr<AsyncTransport> transport_;
  std::unique_ptr<AsyncClient> client_;
  std::vector<std::thread> runners_;
};

Request Get(const LoopbackServer& server) {
  Request r;
  r.url = server.Url("/orders/1");
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

// 200 calls in waves of 20 on a two-thread context: every call succeeds at
// the first attempt, and every wave reuses the first wave's connections.
TEST(AsioCurlThreadTest, ManyCallsOnATwoThreadContextReuseConnections) {
  constexpr int kWave = 20;
  constexpr int kWaves = 10;
  LoopbackServer server([](const ReceivedRequest&, LoopbackConnection& conn) {
    conn.Write(LoopbackServer::Reply(200, {}, "ok"));
    return AfterRequest::kKeepAlive;
  });
  ThreadedContext ctx(2);
  int succeeded = 0;
  for (int wave = 0; wave < kWaves; ++wave) {
    std::vector<std::future<CallResult>> futures;
    for (int i = 0; i < kWave; ++i) futures.push_back(ctx.client().Execute(Get(server), Bounded()));
    for (auto& f : futures) {
      CallResult r = Await(std::move(f));
      EXPECT_EQ(r.outcome, Outcome::kSucceeded) << StopReasonName(r.stop_reason);
      EXPECT_EQ(r.attempts, 1);
      ASSERT_TRUE(r.last_response.has_value());
      EXPECT_EQ(r.last_response->status_code, 200);
      succeeded += r.outcome == Outcome::kSucceeded ? 1 : 0;
    }
  }
  EXPECT_EQ(succeeded, kWave * kWaves);
  EXPECT_EQ(server.requests().size(), static_cast<std::size_t>(kWave * kWaves));
  EXPECT_EQ(server.connections(), kWave);
}

// Each call's first answer is a 503: every call retries after a backoff
// timer on the strand and succeeds at its second attempt, 40 calls at once.
TEST(AsioCurlThreadTest, RetriesWaitOnStrandTimersWithTwoThreads) {
  constexpr int kCalls = 40;
  std::mutex mu;
  std::set<std::string> seen;  // request targets answered 503 once
  LoopbackServer server([&](const ReceivedRequest& req, LoopbackConnection& conn) {
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      first = seen.insert(req.target).second;
    }
    conn.Write(first ? LoopbackServer::Reply(503, {}, "busy")
                     : LoopbackServer::Reply(200, {}, "ok"));
    return AfterRequest::kKeepAlive;
  });
  ThreadedContext ctx(2);
  std::vector<std::future<CallResult>> futures;
  for (int i = 0; i < kCalls; ++i) {
    Request r;
    r.url = server.Url("/orders/" + std::to_string(i));
    futures.push_back(ctx.client().Execute(std::move(r), Bounded()));
  }
  for (auto& f : futures) {
    CallResult r = Await(std::move(f));
    EXPECT_EQ(r.outcome, Outcome::kSucceeded) << StopReasonName(r.stop_reason);
    EXPECT_EQ(r.attempts, 2);
    ASSERT_EQ(r.evidence.size(), 2u);
    EXPECT_EQ(r.evidence[0].http_status, 503);
    EXPECT_TRUE(r.evidence[0].delay_after.has_value());
    EXPECT_GE(r.evidence[1].start - r.evidence[0].end, *r.evidence[0].delay_after);
    EXPECT_EQ(r.evidence[1].http_status, 200);
  }
  EXPECT_EQ(server.requests().size(), static_cast<std::size_t>(2 * kCalls));
}

// Cancel from another thread while the server stalls: the call ends at once,
// and its connection is closed.
TEST(AsioCurlThreadTest, ConcurrentCancelEndsTheCallAndClosesItsConnection) {
  LoopbackServer server([](const ReceivedRequest&, LoopbackConnection& conn) {
    conn.WaitForPeerClose(milliseconds(5000));
    return AfterRequest::kClose;
  });
  ThreadedContext ctx(2);
  AsyncClient::CallId id = 0;
  const auto start = std::chrono::steady_clock::now();
  auto f = ctx.client().Execute(Get(server), Bounded(), &id);
  ASSERT_NE(id, 0u);
  const auto deadline = start + seconds(5);
  while (server.requests().empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(2));
  }
  ASSERT_EQ(server.requests().size(), 1u);
  ctx.client().Cancel(id);
  CallResult r = Await(std::move(f));
  EXPECT_EQ(r.outcome, Outcome::kFailed);  // a GET: no effect to be unknown about
  EXPECT_EQ(r.stop_reason, StopReason::kCancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(4));
  while (server.closed_connections() < 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(2));
  }
  EXPECT_EQ(server.closed_connections(), 1);
}

// The first-byte limit on the Asio adapter: the transport's timer on the
// strand ends an attempt the server never answers, at the limit, with the
// phase named. Tolerances for a loaded two-core machine.
TEST(AsioCurlThreadTest, TheFirstByteLimitEndsAnUnansweredAttempt) {
  LoopbackServer server([](const ReceivedRequest&, LoopbackConnection& conn) {
    conn.WaitForPeerClose(milliseconds(10000));
    return AfterRequest::kClose;
  });
  ThreadedContext ctx(2);
  RetryPolicyOptions o;
  o.max_attempts = 1;
  o.deadline_options.attempt_cap = seconds(3);
  o.phase_limits.first_byte = milliseconds(300);
  CallOptions call;
  call.timeout = seconds(20);
  call.policy = RetryPolicy::Create(o).value();
  CallResult r = Await(ctx.client().Execute(Get(server), call));
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  ASSERT_EQ(r.evidence.size(), 1u);
  const AttemptEvidence& ev = r.evidence[0];
  EXPECT_EQ(ev.delivery, Delivery::kMaybeDelivered);
  EXPECT_EQ(ev.timings.timed_out, Phase::kFirstByte);
  EXPECT_GE(ev.end - ev.start, milliseconds(295));
  EXPECT_LT(ev.end - ev.start, milliseconds(1500));
}

}  // namespace
}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// One client over one curl transport shared by 8 threads making mixed calls.
// Run under ThreadSanitizer in a -DSAFERETRY_SANITIZE=thread build.

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "loopback_server.h"
#include "saferetry/client.h"
#include "saferetry/curl_transport.h"

namespace saferetry {
namespace {

using ::saferetry::testkit::AfterRequest;
using ::saferetry::testkit::LoopbackConnection;
using ::saferetry::testkit::LoopbackServer;
using ::saferetry::testkit::ReceivedRequest;

TEST(CurlConcurrencyTest, EightThreadsShareOneClient) {
  constexpr int kThreads = 8;
  constexpr int kCallsPerThread = 25;
  LoopbackServer server([](const ReceivedRequest& req, LoopbackConnection& conn) {
    if (req.target == "/fail") {
      conn.Write(LoopbackServer::Reply(422, {}, "no"));
    } else if (req.target == "/lost") {
      return AfterRequest::kClose;
    } else {
      conn.Write(LoopbackServer::Reply(200, {{"X-Echo", req.method}}, req.body));
    }
    return AfterRequest::kKeepAlive;
  });
  ClientOptions options;
  CurlTransportOptions curl;
  curl.max_idle_handles = 4;  // Fewer than threads: handles are created and dropped.
  options.transport = MakeCurlTransport(curl).value();
  auto client = Client::Create(std::move(options)).value();

  std::atomic<int> succeeded{0}, failed{0}, unknown{0}, wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCallsPerThread; ++i) {
        Request req;
        const int kind = (t + i) % 4;
        const std::string tag = std::to_string(t) + "-" + std::to_string(i);
        req.url = server.Url(kind == 2 ? "/fail" : kind == 3 ? "/lost" : "/ok");
        if (kind != 0) {
          req.method = "POST";
          req.body = "body-" + tag;
        }
        CallOptions call;
        call.timeout = std::chrono::seconds(5);
        saferetry::RetryPolicyOptions call_policy;
        call_policy.max_attempts = 1;
        call.policy = saferetry::RetryPolicy::Create(call_policy).value();
        CallResult r = client->Execute(req, call);
        switch (r.outcome) {
          case Outcome::kSucceeded:
            ++succeeded;
            if (r.last_response->body != req.body) ++wrong;
            break;
          case Outcome::kFailed:
            ++failed;
            break;
          case Outcome::kUnknown:
            ++unknown;
            break;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  // kinds 0 and 1 succeed, 2 fails (422), 3 is unknown (closed unanswered).
  EXPECT_EQ(succeeded.load(), kThreads * kCallsPerThread / 2);
  EXPECT_EQ(failed.load(), kThreads * kCallsPerThread / 4);
  EXPECT_EQ(unknown.load(), kThreads * kCallsPerThread / 4);
  EXPECT_EQ(wrong.load(), 0);
  // One request per call, each body exactly once.
  auto got = server.requests();
  EXPECT_EQ(got.size(), static_cast<std::size_t>(kThreads * kCallsPerThread));
  std::map<std::string, int> copies;
  for (const auto& r : got) {
    if (!r.body.empty()) ++copies[r.body];
  }
  for (const auto& [body, n] : copies) EXPECT_EQ(n, 1) << body;
  EXPECT_EQ(copies.size(), static_cast<std::size_t>(kThreads * kCallsPerThread * 3 / 4));
}

}  // namespace
}  // namespace saferetry

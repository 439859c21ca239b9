// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// A thousand order calls in flight at once on one event-loop thread. The
// server is simulated (an asynchronous fake on the real epoll loop and the
// real clock): answers take 5-40 ms, some are 503, some orders commit and
// lose their response, and a status query with the same key finds them. No
// thread sleeps through a backoff; the main thread only waits for results.
//
// With a real server, build the transport with
// `saferetry::MakeCurlMultiTransport(loop)` (saferetry/curl_async_transport.h,
// link saferetry::curl) instead of the fake.

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "saferetry/async_client.h"
#include "saferetry/testing/async_fake_transport.h"

namespace {

using std::chrono::milliseconds;

constexpr int kCalls = 1000;

}  // namespace

int main() {
  auto loop = saferetry::MakeEpollEventLoop();
  if (!loop.ok()) {
    std::fprintf(stderr, "event loop: %s\n", std::string(loop.status().message()).c_str());
    return 1;
  }
  auto transport =
      std::make_shared<saferetry::testkit::AsyncFakeTransport>(*loop, saferetry::SystemClock());
  // The simulated server, on the loop thread: every 7th POST commits and
  // loses its response, every 11th answers 503 marked `rejected`; status queries find orders
  // that committed.
  std::mutex mu;
  std::map<std::string, bool> committed;  // by key
  int posts = 0;
  transport->SetHandler(
      [&](const saferetry::Request& request, const saferetry::AttemptOptions& options) {
        std::lock_guard<std::mutex> lock(mu);
        std::string key;
        auto k = saferetry::FindHeaderRef(options.extra_headers, "Idempotency-Key");
        if (k.has_value()) key = std::string(*k);
        const milliseconds latency(5 + (posts * 13) % 36);
        if (request.method == "GET") {
          key = request.url.substr(request.url.rfind('/') + 1);
          return (committed.count(key) != 0 ? saferetry::testkit::Step::Respond(200, {}, "found")
                                            : saferetry::testkit::Step::Respond(404, {}, "unknown"))
              .After(latency);
        }
        ++posts;
        // Refused before any work, and marked so: retried as transient.
        if (posts % 11 == 0) return saferetry::testkit::Step::RespondRejected().After(latency);
        committed[key] = true;
        if (posts % 7 == 0) return saferetry::testkit::Step::CommitThenLost().After(latency);
        return saferetry::testkit::Step::Respond(201, {}, "created").After(latency);
      });

  saferetry::AsyncClientOptions options;
  options.loop = *loop;
  options.transport = transport;
  options.max_in_flight = 2 * kCalls;
  auto client = saferetry::AsyncClient::Create(std::move(options));
  if (!client.ok()) {
    std::fprintf(stderr, "client: %s\n", std::string(client.status().message()).c_str());
    return 1;
  }

  saferetry::CallOptions call;
  call.timeout = std::chrono::seconds(5);
  call.status_url = "http://orders.internal/orders/by-key/{key}";

  const auto start = std::chrono::steady_clock::now();
  std::vector<std::future<saferetry::CallResult>> results;
  results.reserve(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    saferetry::Request order{"POST",
                             "http://orders.internal/orders",
                             {{"Content-Type", "application/json"}},
                             "{\"sku\":\"sku-" + std::to_string(i) + "\",\"quantity\":1}"};
    results.push_back((*client)->Execute(std::move(order), call));
  }
  std::map<std::string, int> outcomes;
  int resolved = 0;
  for (auto& f : results) {
    saferetry::CallResult r = f.get();
    ++outcomes[std::string(saferetry::OutcomeName(r.outcome))];
    resolved += r.resolved_by_status_query ? 1 : 0;
  }
  const auto wall =
      std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start);

  std::printf("calls                      %d (all in flight at once, one loop thread)\n", kCalls);
  for (const auto& [name, n] : outcomes) std::printf("%-26s %d\n", name.c_str(), n);
  std::printf("resolved by status query   %d\n", resolved);
  std::printf("orders created             %zu\n", committed.size());
  std::printf("wall time                  %lld ms\n", static_cast<long long>(wall.count()));
  return 0;
}

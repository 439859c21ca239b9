// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Places orders through a flaky in-process order server and prints each
// attempt's evidence and the final outcome. No network: the server is
// saferetry::testkit::SimulatedOrderServer and time is a FakeClock, so the
// run is instant and the same every time.

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "saferetry/client.h"
#include "saferetry/testing/fake_clock.h"
#include "saferetry/testing/fake_random.h"
#include "saferetry/testing/simulated_order_server.h"

namespace {

using saferetry::testkit::OrderFault;

struct Scenario {
  const char* title;
  std::vector<OrderFault> faults;
  bool status_query;
  bool send_key;
};

long long Ms(saferetry::Duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

void PrintEvidence(const saferetry::AttemptEvidence& e, saferetry::TimePoint start) {
  std::printf("    %-6s #%d  t=%5lldms  %-17s http=%-4s %-24s %s",
              e.is_status_query ? "query" : "send", e.number, Ms(e.start - start),
              std::string(saferetry::DeliveryName(e.delivery)).c_str(),
              e.http_status ? std::to_string(*e.http_status).c_str() : "-",
              std::string(saferetry::AttemptClassName(e.classification)).c_str(),
              std::string(e.reason).c_str());
  if (e.delay_after) {
    std::printf("  -> wait %lldms (%s)", Ms(*e.delay_after),
                e.delay_from_server_hint ? "server hint" : "backoff");
  }
  std::printf("\n");
}

}  // namespace

int main() {
  const std::vector<Scenario> scenarios = {
      {"order committed, response lost; status query",
       {OrderFault::kCommitThenLoseResponse},
       true,
       true},
      {"connection refused twice", {OrderFault::kRefuse, OrderFault::kRefuse}, true, true},
      {"dropped before commit; status says not found", {OrderFault::kDropBeforeCommit}, true, true},
      {"still processing (409), then done", {OrderFault::kInProgressThenCommit}, false, true},
      {"overloaded: 503 + Retry-After", {OrderFault::kUnavailable}, true, true},
      {"committed, response lost; no key (careless)",
       {OrderFault::kCommitThenLoseResponse},
       false,
       false},
  };
  int failures = 0;
  for (const Scenario& s : scenarios) {
    auto clock = std::make_shared<saferetry::testkit::FakeClock>();
    auto server = std::make_shared<saferetry::testkit::SimulatedOrderServer>(clock);
    server->ScriptFaults(s.faults);
    saferetry::ClientOptions options;
    options.transport = server;
    options.clock = clock;
    options.random = std::make_shared<saferetry::testkit::ScriptedRandom>();
    auto client = saferetry::Client::Create(std::move(options));
    if (!client.ok()) {
      std::fprintf(stderr, "client: %s\n", std::string(client.status().message()).c_str());
      return 1;
    }
    saferetry::Request order{"POST",
                             "http://orders.example/orders",
                             {{"Content-Type", "application/json"}},
                             R"({"sku":"sku-42","quantity":1})"};
    saferetry::CallOptions call;
    call.timeout = std::chrono::seconds(5);
    if (s.status_query) call.status_url = "http://orders.example/orders/by-key/{key}";
    saferetry::RetryPolicyOptions call_policy;
    if (!s.send_key) call_policy.key_mode = saferetry::KeyMode::kNever;
    const saferetry::TimePoint start = clock->Now();
    call.policy = saferetry::RetryPolicy::Create(call_policy).value();
    saferetry::CallResult r = (*client)->Execute(order, call);

    std::printf("%s\n", s.title);
    for (const auto& e : r.evidence) PrintEvidence(e, start);
    std::printf("    => %s (%s), attempts=%d, status queries=%d, orders created=%d, key=%s\n\n",
                std::string(saferetry::OutcomeName(r.outcome)).c_str(),
                std::string(saferetry::StopReasonName(r.stop_reason)).c_str(), r.attempts,
                r.status_queries, server->total_effects(),
                r.idempotency_key ? r.idempotency_key->c_str() : "(none)");
    if (server->total_effects() > 1) ++failures;
  }
  return failures == 0 ? 0 : 1;
}

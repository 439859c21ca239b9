// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Uses the installed headers and libraries: a call through the simulated order
// server, and the libcurl transport factory.

#include <cstdio>
#include <string_view>

#include "saferetry/client.h"
#include "saferetry/curl_transport.h"
#include "saferetry/testing/fake_clock.h"
#include "saferetry/testing/simulated_order_server.h"
#include "saferetry/version.h"

int main() {
#ifdef SAFERETRY_EXPECTED_VERSION
  // The installed saferetry/version.h is the package's version (find_package's saferetry_VERSION).
  if (std::string_view(saferetry::kVersion) != SAFERETRY_EXPECTED_VERSION) {
    std::printf("saferetry/version.h says %s, the package %s\n", saferetry::kVersion,
                SAFERETRY_EXPECTED_VERSION);
    return 1;
  }
#endif
  auto curl = saferetry::MakeCurlTransport({});
  if (!curl.ok()) return 1;
  auto clock = std::make_shared<saferetry::testkit::FakeClock>();
  auto server = std::make_shared<saferetry::testkit::SimulatedOrderServer>(clock);
  server->ScriptFaults({saferetry::testkit::OrderFault::kCommitThenLoseResponse});
  saferetry::ClientOptions options;
  options.transport = server;
  options.clock = clock;
  auto client = saferetry::Client::Create(std::move(options));
  if (!client.ok()) return 1;
  saferetry::CallOptions call;
  call.status_url = "http://orders.test/orders/by-key/{key}";
  saferetry::CallResult r =
      (*client)->Execute({"POST", "http://orders.test/orders", {}, "{}"}, call);
  std::printf("%s %d\n", std::string(saferetry::OutcomeName(r.outcome)).c_str(),
              server->total_effects());
  return r.outcome == saferetry::Outcome::kSucceeded && server->total_effects() == 1 ? 0 : 1;
}

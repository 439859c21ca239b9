// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The installed saferetry::prometheus component: a service's own
// prometheus-cpp registry and saferetry's collectable side by side. Calls
// (a GET retried after a 503, a POST resolved by a status query) run on the
// testing kit's fake transport; a scrape — what an Exposer does: collect
// every collectable, serialize with prometheus-cpp's TextSerializer — must
// carry the endpoint attributes (http_request_method, server_address,
// server_port) and the per-call retry metrics.

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "saferetry/client.h"
#include "saferetry/metrics.h"
#include "saferetry/prometheus_collectable.h"
#include "saferetry/testing/fake_clock.h"
#include "saferetry/testing/fake_transport.h"

namespace {

int failures = 0;

void Expect(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "prometheus consumer: %s\n", what.c_str());
    ++failures;
  }
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

int main() {
  using saferetry::testkit::Step;
  auto clock = std::make_shared<saferetry::testkit::FakeClock>();
  auto transport = std::make_shared<saferetry::testkit::FakeTransport>(clock);
  saferetry::ClientOptions options;
  options.transport = transport;
  options.clock = clock;
  auto client = saferetry::Client::Create(std::move(options));
  if (!client.ok()) {
    std::fprintf(stderr, "prometheus consumer: %s\n", client.status().ToString().c_str());
    return 1;
  }

  // The service's own metrics, and saferetry's collectable next to them.
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildCounter().Name("service_requests_total").Register(*registry).Add({}).Increment();
  auto metrics = std::make_shared<saferetry::Metrics>();
  auto collectable = std::make_shared<saferetry::PrometheusCollectable>(metrics);
  const std::vector<std::weak_ptr<prometheus::Collectable>> scraped = {registry, collectable};

  const saferetry::Request get{"GET", "http://orders.internal:8080/orders/1", {}, ""};
  const saferetry::Request post{"POST", "http://orders.internal:8080/orders", {}, "{}"};
  saferetry::MetricsListener get_metrics(metrics, saferetry::EndpointOfUrl(get.method, get.url));
  saferetry::MetricsListener post_metrics(metrics, saferetry::EndpointOfUrl(post.method, post.url));

  saferetry::CallOptions get_call;
  get_call.listener = &get_metrics;
  transport->Push(Step::Respond(503)).Push(Step::Respond(200));
  Expect((*client)->Execute(get, get_call).outcome == saferetry::Outcome::kSucceeded,
         "the GET did not succeed");
  saferetry::CallOptions post_call;
  post_call.listener = &post_metrics;
  post_call.status_url = "http://orders.internal:8080/orders/by-key/{key}";
  transport->Push(Step::CommitThenLost()).Push(Step::Respond(200));
  Expect((*client)->Execute(post, post_call).outcome == saferetry::Outcome::kSucceeded,
         "the POST did not succeed");

  // The scrape.
  std::vector<prometheus::MetricFamily> families;
  for (const auto& weak : scraped) {
    if (auto c = weak.lock()) {
      std::vector<prometheus::MetricFamily> more = c->Collect();
      families.insert(families.end(), more.begin(), more.end());
    }
  }
  const std::string text = prometheus::TextSerializer().Serialize(families);

  Expect(Contains(text, "service_requests_total 1"), "the service's own counter is missing");
  const std::string get_labels =
      "http_request_method=\"GET\",server_address=\"orders.internal\",server_port=\"8080\"";
  const std::string post_labels =
      "http_request_method=\"POST\",server_address=\"orders.internal\",server_port=\"8080\"";
  // Per-call retry metrics, with the endpoint attributes.
  Expect(Contains(text, "saferetry_call_attempts_count{" + get_labels + "} 1"),
         "saferetry_call_attempts for the GET endpoint is missing");
  Expect(Contains(text, "saferetry_call_attempts_sum{" + get_labels + "} 2"),
         "the GET endpoint's attempts per call is not 2");
  Expect(Contains(text, "saferetry_call_retries_sum{" + get_labels + "} 1"),
         "the GET endpoint's retries per call is not 1");
  Expect(Contains(text, "saferetry_call_attempts_count{" + post_labels + "} 1"),
         "saferetry_call_attempts for the POST endpoint is missing");
  Expect(Contains(text, "saferetry_call_retries_sum{" + post_labels + "} 0"),
         "the POST endpoint's retries per call is not 0");
  Expect(Contains(text, "saferetry_client_attempt_started_total{" + get_labels +
                            ",saferetry_attempt_type=\"retry\"} 1"),
         "the GET endpoint's retry attempt is missing");
  Expect(Contains(text, "saferetry_status_queries_total 1"), "the status query is missing");
  Expect(Contains(text, "saferetry_calls_total{saferetry_outcome=\"SUCCEEDED\""),
         "the finished calls are missing");
  if (failures > 0) {
    std::fprintf(stderr, "--- scrape ---\n%s", text.c_str());
    return 1;
  }
  std::printf("prometheus consumer: ok\n");
  return 0;
}

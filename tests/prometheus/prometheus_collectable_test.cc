// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// saferetry::prometheus: after calls through a Client, the collectable's
// families, labels and values are exact, and prometheus-cpp's text
// serialization carries the same numbers as ToPrometheusText.

#include "saferetry/prometheus_collectable.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "saferetry/client.h"
#include "saferetry/testing/fake_clock.h"
#include "saferetry/testing/fake_random.h"
#include "saferetry/testing/fake_transport.h"

namespace saferetry {
namespace {

using ::testing::ElementsAre;
using testkit::FakeClock;
using testkit::FakeTransport;
using testkit::ScriptedRandom;
using testkit::Step;

class PrometheusCollectableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ClientOptions o;
    o.transport = transport_;
    o.clock = clock_;
    o.random = std::make_shared<ScriptedRandom>();
    o.budget = MakeUnlimitedBudget();
    client_ = *Client::Create(std::move(o));
  }

  // GET: 503 then 200, and a 200; POST: lost, then a status query's 200.
  void RunCalls() {
    Request get;
    get.url = "http://orders.internal:8080/orders/1?secret=x";
    Request post;
    post.method = "POST";
    post.url = "http://orders.internal:8080/orders";
    post.body = "{}";
    MetricsListener get_listener(metrics_, EndpointOfUrl(get.method, get.url));
    MetricsListener post_listener(metrics_, EndpointOfUrl(post.method, post.url));
    CallOptions get_call;
    get_call.listener = &get_listener;
    transport_->Push(Step::Respond(503)).Push(Step::Respond(200)).Push(Step::Respond(200));
    EXPECT_EQ(client_->Execute(get, get_call).outcome, Outcome::kSucceeded);
    EXPECT_EQ(client_->Execute(get, get_call).outcome, Outcome::kSucceeded);
    CallOptions post_call;
    post_call.listener = &post_listener;
    post_call.status_url = "http://orders.internal:8080/orders/by-key/{key}";
    transport_->Push(Step::CommitThenLost()).Push(Step::Respond(200));
    EXPECT_EQ(client_->Execute(post, post_call).outcome, Outcome::kSucceeded);
    EXPECT_EQ(transport_->remaining_steps(), 0u);
  }

  std::shared_ptr<FakeClock> clock_ = std::make_shared<FakeClock>();
  std::shared_ptr<FakeTransport> transport_ = std::make_shared<FakeTransport>(clock_);
  std::shared_ptr<Metrics> metrics_ = std::make_shared<Metrics>();
  std::unique_ptr<Client> client_;
};

using Labels = std::vector<::prometheus::ClientMetric::Label>;

const ::prometheus::MetricFamily& FamilyNamed(
    const std::vector<::prometheus::MetricFamily>& families, const std::string& name) {
  for (const auto& f : families) {
    if (f.name == name) return f;
  }
  static const ::prometheus::MetricFamily kNone;
  ADD_FAILURE() << "no family " << name;
  return kNone;
}

// Every sample line "name{labels} value" of a text exposition, comments
// dropped, as name{labels} -> value.
std::map<std::string, double> Samples(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const std::size_t space = line.rfind(' ');
    out[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return out;
}

TEST_F(PrometheusCollectableTest, FamiliesLabelsAndValuesAreExact) {
  RunCalls();
  // The service's own registry, next to saferetry's collectable, as an
  // Exposer would collect them.
  auto registry = std::make_shared<::prometheus::Registry>();
  ::prometheus::BuildCounter()
      .Name("service_requests_total")
      .Help("h")
      .Register(*registry)
      .Add({})
      .Increment();
  auto collectable = std::make_shared<PrometheusCollectable>(metrics_);
  std::vector<::prometheus::MetricFamily> families = collectable->Collect();

  std::vector<std::string> names;
  for (const auto& f : families) names.push_back(f.name);
  EXPECT_THAT(
      names,
      ElementsAre("saferetry_calls_total", "saferetry_attempts_total", "saferetry_retries_total",
                  "saferetry_status_queries_total", "saferetry_unknown_resolved_total",
                  "saferetry_waits_total", "http_client_request_duration_seconds",
                  "saferetry_call_duration_seconds", "saferetry_client_attempt_started_total",
                  "saferetry_call_attempts", "saferetry_call_retries", "saferetry_call_hedges",
                  "saferetry_call_retry_delay_seconds"));

  const Labels get{{"http_request_method", "GET"},
                   {"server_address", "orders.internal"},
                   {"server_port", "8080"}};
  const Labels post{{"http_request_method", "POST"},
                    {"server_address", "orders.internal"},
                    {"server_port", "8080"}};
  const auto with = [](Labels l, const char* k, const char* v) {
    l.push_back({k, v});
    return l;
  };
  const auto& duration = FamilyNamed(families, "http_client_request_duration_seconds");
  EXPECT_EQ(duration.type, ::prometheus::MetricType::Histogram);
  ASSERT_EQ(duration.metric.size(), 4u);
  EXPECT_EQ(duration.metric[0].label, with(get, "http_response_status_code", "200"));
  EXPECT_EQ(duration.metric[0].histogram.sample_count, 2u);
  EXPECT_DOUBLE_EQ(duration.metric[0].histogram.sample_sum, 0.002);  // 1 ms each
  EXPECT_EQ(duration.metric[0].histogram.bucket.size(), kLatencyBucketsSeconds.size());
  EXPECT_EQ(duration.metric[0].histogram.bucket[0].cumulative_count, 2u);
  EXPECT_DOUBLE_EQ(duration.metric[0].histogram.bucket[0].upper_bound, 0.005);
  EXPECT_EQ(duration.metric[1].label,
            with(with(get, "http_response_status_code", "503"), "error_type", "503"));
  EXPECT_EQ(duration.metric[1].histogram.sample_count, 1u);
  EXPECT_EQ(duration.metric[2].label, with(post, "http_response_status_code", "200"));
  EXPECT_EQ(duration.metric[3].label, with(post, "error_type", "UNAVAILABLE"));

  const auto& started = FamilyNamed(families, "saferetry_client_attempt_started_total");
  EXPECT_EQ(started.type, ::prometheus::MetricType::Counter);
  ASSERT_EQ(started.metric.size(), 3u);
  EXPECT_EQ(started.metric[0].label, with(get, "saferetry_attempt_type", "original"));
  EXPECT_DOUBLE_EQ(started.metric[0].counter.value, 2);
  EXPECT_EQ(started.metric[1].label, with(get, "saferetry_attempt_type", "retry"));
  EXPECT_DOUBLE_EQ(started.metric[1].counter.value, 1);
  EXPECT_EQ(started.metric[2].label, with(post, "saferetry_attempt_type", "original"));
  EXPECT_DOUBLE_EQ(started.metric[2].counter.value, 1);

  const auto& retries = FamilyNamed(families, "saferetry_call_retries");
  ASSERT_EQ(retries.metric.size(), 2u);
  EXPECT_EQ(retries.metric[0].label, get);
  EXPECT_EQ(retries.metric[0].histogram.sample_count, 2u);
  EXPECT_DOUBLE_EQ(retries.metric[0].histogram.sample_sum, 1);
  EXPECT_EQ(retries.metric[0].histogram.bucket[0].cumulative_count, 1u);  // le=0: the plain call
  EXPECT_EQ(retries.metric[0].histogram.bucket[1].cumulative_count, 2u);  // le=1

  const auto& delay = FamilyNamed(families, "saferetry_call_retry_delay_seconds");
  ASSERT_EQ(delay.metric.size(), 2u);  // the retried GET and the queried POST
  EXPECT_EQ(delay.metric[0].histogram.sample_count, 1u);
  EXPECT_GT(delay.metric[0].histogram.sample_sum, 0);

  // No path or query in any label value.
  for (const auto& f : families) {
    for (const auto& m : f.metric) {
      for (const auto& l : m.label) EXPECT_EQ(l.value.find('/'), std::string::npos) << l.value;
    }
  }

  // Serialized with prometheus-cpp: the registry's family and every sample
  // of the built-in exposition, same numbers.
  std::vector<::prometheus::MetricFamily> scraped = registry->Collect();
  scraped.insert(scraped.end(), families.begin(), families.end());
  const std::string text = ::prometheus::TextSerializer().Serialize(scraped);
  const std::map<std::string, double> theirs = Samples(text);
  const std::map<std::string, double> ours = Samples(ToPrometheusText(metrics_->Snapshot()));
  ASSERT_FALSE(ours.empty());
  EXPECT_EQ(theirs.size(), ours.size() + 1);  // + service_requests_total
  EXPECT_DOUBLE_EQ(theirs.at("service_requests_total"), 1);
  for (const auto& [series, value] : ours) {
    auto it = theirs.find(series);
    ASSERT_NE(it, theirs.end()) << series;
    EXPECT_DOUBLE_EQ(it->second, value) << series;
  }
}

TEST_F(PrometheusCollectableTest, ScrapesConcurrentWithCallsSeeWholeCounts) {
  Metrics metrics;
  const MetricsRoute route = metrics.Register({"GET", "h", 80});
  CallResult r;
  r.outcome = Outcome::kSucceeded;
  r.stop_reason = StopReason::kSuccess;
  AttemptEvidence ev;
  ev.number = 1;
  ev.http_status = 200;
  r.evidence = {ev};
  PrometheusCollectable collectable(
      std::shared_ptr<const Metrics>(&metrics, [](const Metrics*) {}));
  constexpr int kCalls = 20000;
  std::thread writer([&] {
    for (int i = 0; i < kCalls; ++i) metrics.RecordCall(route, r);
  });
  double last = 0;
  for (int i = 0; i < 50; ++i) {
    for (const auto& f : collectable.Collect()) {
      if (f.name != "saferetry_calls_total") continue;
      EXPECT_GE(f.metric.at(0).counter.value, last);
      last = f.metric.at(0).counter.value;
    }
  }
  writer.join();
  const auto families = collectable.Collect();
  EXPECT_DOUBLE_EQ(FamilyNamed(families, "saferetry_calls_total").metric.at(0).counter.value,
                   kCalls);
  EXPECT_TRUE(PrometheusCollectable(std::shared_ptr<const Metrics>()).Collect().empty());
}

// The server half's gauges (saferetry/server/metrics.h fills them) are
// collected as gauges, zeros included.
TEST(PrometheusCollectableServerTest, ServerGaugesAreCollectedAsGauges) {
  MetricsSnapshot s;
  s.server_gauges = MetricsSnapshot::ServerGauges{3, std::chrono::milliseconds(12500), 1, 0};
  PrometheusCollectable collectable([s] { return s; });
  std::map<std::string, double> values;
  for (const auto& f : collectable.Collect()) {
    if (f.name.rfind("saferetry_server_", 0) != 0) continue;
    EXPECT_EQ(f.type, ::prometheus::MetricType::Gauge) << f.name;
    ASSERT_EQ(f.metric.size(), 1u) << f.name;
    values[f.name] = f.metric[0].gauge.value;
  }
  EXPECT_EQ(values,
            (std::map<std::string, double>{{"saferetry_server_abandoned_records", 1},
                                           {"saferetry_server_oldest_processing_age_seconds", 12.5},
                                           {"saferetry_server_pending_confirmation_records", 0},
                                           {"saferetry_server_processing_records", 3}}));
}

}  // namespace
}  // namespace saferetry

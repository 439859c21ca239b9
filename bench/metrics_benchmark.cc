// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The cost of metrics on the success path: one Execute of a GET answered 200
// at once, with and without a MetricsListener (and with metrics plus a trace
// recorder chained). No clock advances and the budget is unlimited, so what
// is measured is the call machinery and the listener.
//
// Two transports: `FakeTransport` (records every request, so the runs are
// bounded to keep memory flat) and a minimal canned transport.

#include <benchmark/benchmark.h>

#include <memory>

#include "saferetry/client.h"
#include "saferetry/metrics.h"
#include "saferetry/retry_budget.h"
#include "saferetry/testing/fake_transport.h"
#include "saferetry/trace.h"

namespace saferetry {
namespace {

// Answers every attempt with 200 and records nothing.
class CannedTransport final : public Transport {
 public:
  TransportResult Send(const Request&, const AttemptOptions&) override {
    TransportResult r;
    r.delivery = Delivery::kResponseReceived;
    Response resp;
    resp.status_code = 200;
    r.response = std::move(resp);
    return r;
  }
};

enum class Mode { kNone, kMetrics, kMetricsAndTrace };

std::unique_ptr<Client> MakeClient(std::shared_ptr<Transport> transport) {
  ClientOptions o;
  o.transport = std::move(transport);
  o.budget = MakeUnlimitedBudget();
  return *Client::Create(std::move(o));
}

void Run(benchmark::State& state, std::shared_ptr<Transport> transport, Mode mode) {
  auto client = MakeClient(std::move(transport));
  auto metrics = std::make_shared<Metrics>();
  MetricsListener listener(metrics);
  TraceRecorder trace;
  ListenerChain chain({&listener, &trace});
  Request get;
  get.url = "http://127.0.0.1:8080/orders/1";
  CallOptions call;
  if (mode == Mode::kMetrics) call.listener = &listener;
  if (mode == Mode::kMetricsAndTrace) call.listener = &chain;
  for (auto _ : state) {
    CallResult r = client->Execute(get, call);
    benchmark::DoNotOptimize(r);
  }
  if (mode != Mode::kNone &&
      metrics->Snapshot().calls != static_cast<std::int64_t>(state.iterations())) {
    state.SkipWithError("metrics lost calls");
  }
}

void BM_FakeTransport_NoMetrics(benchmark::State& state) {
  auto t = std::make_shared<testkit::FakeTransport>();
  t->SetHandler(
      [](const Request&, const AttemptOptions&) { return testkit::Step::Respond(200).result; });
  Run(state, t, Mode::kNone);
}
void BM_FakeTransport_Metrics(benchmark::State& state) {
  auto t = std::make_shared<testkit::FakeTransport>();
  t->SetHandler(
      [](const Request&, const AttemptOptions&) { return testkit::Step::Respond(200).result; });
  Run(state, t, Mode::kMetrics);
}
void BM_Canned_NoMetrics(benchmark::State& state) {
  Run(state, std::make_shared<CannedTransport>(), Mode::kNone);
}
void BM_Canned_Metrics(benchmark::State& state) {
  Run(state, std::make_shared<CannedTransport>(), Mode::kMetrics);
}
void BM_Canned_MetricsAndTrace(benchmark::State& state) {
  Run(state, std::make_shared<CannedTransport>(), Mode::kMetricsAndTrace);
}

// Recording alone, on a one-attempt success result.
void BM_RecordCall(benchmark::State& state) {
  Metrics metrics;
  CallResult r;
  r.outcome = Outcome::kSucceeded;
  r.stop_reason = StopReason::kSuccess;
  r.attempts = 1;
  AttemptEvidence ev;
  ev.number = 1;
  ev.delivery = Delivery::kResponseReceived;
  ev.http_status = 200;
  ev.end = ev.start + std::chrono::milliseconds(3);
  r.evidence.push_back(ev);
  for (auto _ : state) metrics.RecordCall(r);
}

// FakeTransport keeps every request it sees: bound the runs.
BENCHMARK(BM_FakeTransport_NoMetrics)->Iterations(200000)->Repetitions(3)->ReportAggregatesOnly();
BENCHMARK(BM_FakeTransport_Metrics)->Iterations(200000)->Repetitions(3)->ReportAggregatesOnly();
BENCHMARK(BM_Canned_NoMetrics)->Repetitions(3)->ReportAggregatesOnly();
BENCHMARK(BM_Canned_Metrics)->Repetitions(3)->ReportAggregatesOnly();
BENCHMARK(BM_Canned_MetricsAndTrace)->Repetitions(3)->ReportAggregatesOnly();
BENCHMARK(BM_RecordCall);

}  // namespace
}  // namespace saferetry

BENCHMARK_MAIN();

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The cost of one successful call through Client::Execute with an in-memory
// transport: everything saferetry does per call (validation, key, headers,
// state machine, evidence) and nothing else. Goal: <= 1 us. After the table,
// prints one line per scenario: `allocations_per_call=<x> scenario=<name>`
// (heap allocations through operator new, counted on every iteration).

#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <new>

#include "saferetry/client.h"
#include "saferetry/testing/fake_clock.h"
#include "saferetry/testing/fake_random.h"

namespace {

std::atomic<long long> g_allocations{0};

// Scenario name -> allocations per call, from the last run of each.
std::map<std::string, double>& AllocationsPerCall() {
  static auto* const kResults = new std::map<std::string, double>();
  return *kResults;
}

// Answers 200 with a fixed response; the copy of the response is the only
// work, as a real transport must produce one too.
class CannedTransport final : public saferetry::Transport {
 public:
  saferetry::TransportResult Send(const saferetry::Request&,
                                  const saferetry::AttemptOptions&) override {
    saferetry::TransportResult r;
    r.delivery = saferetry::Delivery::kResponseReceived;
    r.response = response_;
    return r;
  }

 private:
  saferetry::Response response_{200, {}, "{}", false};
};

std::unique_ptr<saferetry::Client> MakeClient() {
  saferetry::ClientOptions o;
  o.transport = std::make_shared<CannedTransport>();
  o.clock = std::make_shared<saferetry::testkit::FakeClock>();
  o.random = std::make_shared<saferetry::testkit::ScriptedRandom>();
  return saferetry::Client::Create(std::move(o)).value();
}

// Runs `req` through a fresh client once per iteration and reports the heap
// allocations per call.
void RunCalls(benchmark::State& state, const char* scenario, const saferetry::Request& req) {
  auto client = MakeClient();
  saferetry::CallOptions call;
  long long allocs = 0;
  for (auto _ : state) {
    const long long before = g_allocations.load(std::memory_order_relaxed);
    saferetry::CallResult r = client->Execute(req, call);
    allocs += g_allocations.load(std::memory_order_relaxed) - before;
    benchmark::DoNotOptimize(r);
  }
  const double per_call = static_cast<double>(allocs) / static_cast<double>(state.iterations());
  state.counters["allocs_per_call"] = benchmark::Counter(per_call);
  AllocationsPerCall()[scenario] = per_call;
}

void BM_SuccessfulGet(benchmark::State& state) {
  RunCalls(state, "successful_get", {"GET", "http://127.0.0.1:8080/orders/1", {}, "", {}});
}
BENCHMARK(BM_SuccessfulGet);

void BM_SuccessfulKeyedPost(benchmark::State& state) {
  RunCalls(state, "successful_keyed_post",
           {"POST", "http://127.0.0.1:8080/orders", {{"Content-Type", "application/json"}},
            R"({"sku":"a","quantity":1})", {}});
}
BENCHMARK(BM_SuccessfulKeyedPost);

}  // namespace

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  for (const auto& [scenario, per_call] : AllocationsPerCall()) {
    std::printf("allocations_per_call=%.2f scenario=%s\n", per_call, scenario.c_str());
  }
  return 0;
}

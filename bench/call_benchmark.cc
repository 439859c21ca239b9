// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The cost of one successful call through Client::Execute with an in-memory
// transport: everything saferetry does per call (validation, key, headers,
// state machine, evidence, result) and nothing else.
//
// The canned transport answers with a response it built beforehand: 200, six
// headers and a 200-byte body, as a small JSON API answers. `Transport::Send`
// returns the response by value, so the transport copies it on every call;
// those allocations are the transport's, counted apart
// (`transport_allocations_per_call`), and `allocations_per_call` is
// saferetry's own (total minus the transport's).
//
// Scenarios, each with the real `SystemClock` (what a service runs) and with
// `FakeClock`:
//   get                     a GET, no key
//   keyed_post_minted       a POST with a key minted from the OS CSPRNG
//   keyed_post_caller_key   a POST with the caller's key (the fingerprint
//                           guard's work included; a new key each call)
// After the table, one line per scenario:
//   `call scenario=<name> clock=<system|fake> cpu_ns_per_call=<x> allocations_per_call=<y>
//    transport_allocations_per_call=<z> clock_reads_per_call=<w>`
// (CPU time per iteration from Google Benchmark; allocations through
// operator new, on every iteration; clock reads through a counting clock in a
// separate pass).

#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <new>
#include <string>

#include "canned_call.h"
#include "saferetry/client.h"
#include "saferetry/testing/fake_clock.h"
#include "saferetry/testing/fake_random.h"

namespace {

struct Figures {
  double cpu_ns = 0;
  double allocations = 0;
  double transport_allocations = 0;
  double clock_reads = 0;
};

// "<scenario> <clock>" -> figures of its last run.
std::map<std::string, Figures>& Results() {
  static auto* const kResults = new std::map<std::string, Figures>();
  return *kResults;
}

using saferetry::cost::CannedTransport;
using saferetry::cost::CountingClock;

enum class Scenario { kGet, kKeyedPostMinted, kKeyedPostCallerKey };

const char* Name(Scenario s) {
  switch (s) {
    case Scenario::kGet:
      return "get";
    case Scenario::kKeyedPostMinted:
      return "keyed_post_minted";
    case Scenario::kKeyedPostCallerKey:
      return "keyed_post_caller_key";
  }
  return "?";
}

saferetry::Request RequestOf(Scenario s) {
  if (s == Scenario::kGet) return {"GET", "http://127.0.0.1:8080/orders/1", {}, "", {}};
  return {"POST",
          "http://127.0.0.1:8080/orders",
          {{"Content-Type", "application/json"}},
          R"({"sku":"sku-42","quantity":1})",
          {}};
}

std::unique_ptr<saferetry::Client> MakeClient(std::shared_ptr<saferetry::Transport> transport,
                                              std::shared_ptr<saferetry::Clock> clock) {
  saferetry::ClientOptions o;
  o.transport = std::move(transport);
  o.clock = std::move(clock);
  o.random = std::make_shared<saferetry::testkit::ScriptedRandom>();
  return saferetry::Client::Create(std::move(o)).value();
}

// The caller's keys, made before the timed loop (a service has its key
// already): distinct, so the guard records each.
std::vector<std::string> CallerKeys(std::size_t n) {
  std::vector<std::string> keys;
  keys.reserve(n);
  // Short enough to be stored inline: assigning one allocates nothing.
  for (std::size_t i = 0; i < n; ++i) keys.push_back("k-" + std::to_string(i));
  return keys;
}

void RunCalls(benchmark::State& state, Scenario scenario, bool system_clock) {
  auto transport = std::make_shared<CannedTransport>();
  std::shared_ptr<saferetry::Clock> clock =
      system_clock
          ? saferetry::SystemClock()
          : std::shared_ptr<saferetry::Clock>(std::make_shared<saferetry::testkit::FakeClock>());
  auto client = MakeClient(transport, clock);
  const saferetry::Request request = RequestOf(scenario);
  static const std::vector<std::string> kKeys = CallerKeys(1 << 16);
  saferetry::CallOptions call;
  std::size_t next_key = 0;
  long long allocs = 0;
  for (auto _ : state) {
    // Assigning a short key is a copy into inline storage (a few ns).
    if (scenario == Scenario::kKeyedPostCallerKey)
      call.idempotency_key = kKeys[next_key++ % kKeys.size()];
    const long long before = saferetry::cost::Allocations();
    saferetry::CallResult r = client->Execute(request, call);
    allocs += saferetry::cost::Allocations() - before;
    benchmark::DoNotOptimize(r);
  }
  const double n = static_cast<double>(state.iterations());
  Figures f;
  f.transport_allocations = static_cast<double>(transport->own_allocations()) / n;
  f.allocations = static_cast<double>(allocs) / n - f.transport_allocations;
  state.counters["allocs_per_call"] = benchmark::Counter(f.allocations);
  state.counters["transport_allocs"] = benchmark::Counter(f.transport_allocations);

  // Clock reads, in a pass of their own (the counting clock costs a call).
  auto counting = std::make_shared<CountingClock>(clock);
  auto counted = MakeClient(std::make_shared<CannedTransport>(), counting);
  constexpr int kCounted = 100;
  for (int i = 0; i < kCounted; ++i) {
    if (scenario == Scenario::kKeyedPostCallerKey) call.idempotency_key = "c-" + std::to_string(i);
    saferetry::CallResult r = counted->Execute(request, call);
    benchmark::DoNotOptimize(r);
  }
  f.clock_reads = static_cast<double>(counting->reads()) / kCounted;
  state.counters["clock_reads"] = benchmark::Counter(f.clock_reads);
  Results()[std::string(Name(scenario)) + (system_clock ? " system" : " fake")] = f;
}

void BM_Get_SystemClock(benchmark::State& s) { RunCalls(s, Scenario::kGet, true); }
void BM_KeyedPostMinted_SystemClock(benchmark::State& s) {
  RunCalls(s, Scenario::kKeyedPostMinted, true);
}
void BM_KeyedPostCallerKey_SystemClock(benchmark::State& s) {
  RunCalls(s, Scenario::kKeyedPostCallerKey, true);
}
void BM_Get_FakeClock(benchmark::State& s) { RunCalls(s, Scenario::kGet, false); }
void BM_KeyedPostMinted_FakeClock(benchmark::State& s) {
  RunCalls(s, Scenario::kKeyedPostMinted, false);
}
void BM_KeyedPostCallerKey_FakeClock(benchmark::State& s) {
  RunCalls(s, Scenario::kKeyedPostCallerKey, false);
}
BENCHMARK(BM_Get_SystemClock);
BENCHMARK(BM_KeyedPostMinted_SystemClock);
BENCHMARK(BM_KeyedPostCallerKey_SystemClock);
BENCHMARK(BM_Get_FakeClock);
BENCHMARK(BM_KeyedPostMinted_FakeClock);
BENCHMARK(BM_KeyedPostCallerKey_FakeClock);

// Keeps the CPU time per iteration of every run (the median, with
// repetitions) for the summary lines.
class Collector final : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.error_occurred || run.iterations == 0) continue;
      const bool aggregate = run.run_type == Run::RT_Aggregate;
      if (aggregate && run.aggregate_name != "median") continue;
      cpu_ns_[run.run_name.function_name] = run.GetAdjustedCPUTime();
    }
    ConsoleReporter::ReportRuns(runs);
  }
  double CpuNs(const std::string& function) const {
    auto it = cpu_ns_.find(function);
    return it == cpu_ns_.end() ? 0 : it->second;
  }

 private:
  std::map<std::string, double> cpu_ns_;
};

std::string FunctionOf(const std::string& key) {
  static const std::map<std::string, std::string> kNames = {
      {"get system", "BM_Get_SystemClock"},
      {"keyed_post_minted system", "BM_KeyedPostMinted_SystemClock"},
      {"keyed_post_caller_key system", "BM_KeyedPostCallerKey_SystemClock"},
      {"get fake", "BM_Get_FakeClock"},
      {"keyed_post_minted fake", "BM_KeyedPostMinted_FakeClock"},
      {"keyed_post_caller_key fake", "BM_KeyedPostCallerKey_FakeClock"}};
  auto it = kNames.find(key);
  return it == kNames.end() ? key : it->second;
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  Collector collector;
  benchmark::RunSpecifiedBenchmarks(&collector);
  benchmark::Shutdown();
  for (const auto& [key, f] : Results()) {
    const std::size_t space = key.find(' ');
    std::printf(
        "call scenario=%s clock=%s cpu_ns_per_call=%.0f allocations_per_call=%.2f "
        "transport_allocations_per_call=%.2f clock_reads_per_call=%.1f\n",
        key.substr(0, space).c_str(), key.substr(space + 1).c_str(),
        collector.CpuNs(FunctionOf(key)), f.allocations, f.transport_allocations, f.clock_reads);
  }
  return 0;
}

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The cost of one successful call through Client::Execute with an in-memory
// transport: everything saferetry does per call (validation, key, headers,
// state machine, evidence, result) and nothing else.
//
// The canned transport answers with a response it built beforehand: 200, six
// headers and a 200-byte body, as a small JSON API answers. `Transport::Send`
// returns the response by value: the loop hands each call's response back to
// the transport (`Recycle`, a move), which hands it out again, so the
// transport allocates nothing once warm. What it does allocate is counted
// apart (`transport_allocations_per_call`, 0 after the first call), and
// `allocations_per_call` is saferetry's own.
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
// (CPU time per iteration from Google Benchmark, the median with
// repetitions; allocations through operator new, on every iteration; clock
// reads through a counting clock in a separate pass). bench/run_all.sh reads
// these lines.

#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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

enum class Scenario { kGet, kKeyedPostMinted, kKeyedPostCallerKey };

// (scenario, SystemClock?) -> figures of its last run.
std::map<std::pair<Scenario, bool>, Figures>& Results() {
  static auto* const kResults = new std::map<std::pair<Scenario, bool>, Figures>();
  return *kResults;
}

using saferetry::cost::CannedTransport;
using saferetry::cost::CountingClock;

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

// The benchmark's name: "BM_" + "Get" (...) + "_SystemClock" or "_FakeClock",
// e.g. BM_Get_SystemClock.
std::string BenchName(Scenario s, bool system_clock) {
  const char* camel = s == Scenario::kGet               ? "Get"
                      : s == Scenario::kKeyedPostMinted ? "KeyedPostMinted"
                                                        : "KeyedPostCallerKey";
  return std::string("BM_") + camel + (system_clock ? "_SystemClock" : "_FakeClock");
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
// already): distinct, so the guard records each. Made once, by the first
// scenario that needs them.
std::vector<std::string> MakeCallerKeys(std::size_t n) {
  std::vector<std::string> keys;
  keys.reserve(n);
  // Short enough to be stored inline: assigning one allocates nothing.
  for (std::size_t i = 0; i < n; ++i) keys.push_back("k-" + std::to_string(i));
  return keys;
}

const std::vector<std::string>& CallerKeys() {
  static const std::vector<std::string> kKeys = MakeCallerKeys(1 << 16);
  return kKeys;
}

// One call of a loop, the same in every loop of either side: the caller's
// key for call `i` (the caller-key scenario only: a copy of a short key into
// inline storage, a few ns), the call (`side`), its response back to the
// transport. Returns the call's outcome.
template <typename Side>
saferetry::Outcome OneCall(Scenario scenario, std::size_t i, saferetry::CallOptions& call,
                           CannedTransport& transport, Side&& side) {
  if (scenario == Scenario::kKeyedPostCallerKey) {
    const std::vector<std::string>& keys = CallerKeys();
    call.idempotency_key = keys[i % keys.size()];
  }
  saferetry::CallResult r = side();
  benchmark::DoNotOptimize(r);
  transport.Recycle(r.last_response);
  return r.outcome;
}

void RunCalls(benchmark::State& state, Scenario scenario, bool system_clock) {
  auto transport = std::make_shared<CannedTransport>();
  std::shared_ptr<saferetry::Clock> clock =
      system_clock
          ? saferetry::SystemClock()
          : std::shared_ptr<saferetry::Clock>(std::make_shared<saferetry::testkit::FakeClock>());
  auto client = MakeClient(transport, clock);
  const saferetry::Request request = RequestOf(scenario);
  saferetry::CallOptions call;
  if (scenario == Scenario::kKeyedPostCallerKey) CallerKeys();  // made outside the timing
  std::size_t next_key = 0;
  long long allocs = 0;
  for (auto _ : state) {
    OneCall(scenario, next_key++, call, *transport, [&] {
      const long long before = saferetry::cost::Allocations();
      saferetry::CallResult r = client->Execute(request, call);
      allocs += saferetry::cost::Allocations() - before;
      return r;
    });
  }
  const double n = static_cast<double>(state.iterations());
  Figures f;
  f.transport_allocations = static_cast<double>(transport->own_allocations()) / n;
  f.allocations = static_cast<double>(allocs) / n - f.transport_allocations;
  state.counters["allocs_per_call"] = benchmark::Counter(f.allocations);
  state.counters["transport_allocs"] = benchmark::Counter(f.transport_allocations);

  // Clock reads, in a pass of their own (the counting clock costs a call).
  // Its responses go back to its transport as in the timed loop, so that
  // its calls, which a profile of `Client::Execute` averages in with the
  // timed ones, do the same work.
  auto counting = std::make_shared<CountingClock>(clock);
  auto counted_transport = std::make_shared<CannedTransport>();
  auto counted = MakeClient(counted_transport, counting);
  constexpr int kCounted = 100;
  for (int i = 0; i < kCounted; ++i) {
    OneCall(scenario, next_key++, call, *counted_transport,
            [&] { return counted->Execute(request, call); });
  }
  f.clock_reads = static_cast<double>(counting->reads()) / kCounted;
  state.counters["clock_reads"] = benchmark::Counter(f.clock_reads);
  Results()[{scenario, system_clock}] = f;
}

// Keeps the CPU time per iteration of every run (the median, with
// repetitions) for the summary lines.
class Collector final : public benchmark::ConsoleReporter {
 public:
  // Without colours: the console reporter's default would colour its table
  // whatever `--benchmark_color` says (the flag sets only the reporter the
  // library makes itself), and its last escape would run into the first
  // summary line.
  Collector() : ConsoleReporter(OO_Tabular) {}
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

}  // namespace

int main(int argc, char** argv) {
  // Each scenario with each clock.
  constexpr Scenario kScenarios[] = {Scenario::kGet, Scenario::kKeyedPostMinted,
                                     Scenario::kKeyedPostCallerKey};
  for (const bool system_clock : {true, false}) {
    for (const Scenario scenario : kScenarios) {
      benchmark::RegisterBenchmark(BenchName(scenario, system_clock).c_str(), RunCalls, scenario,
                                   system_clock);
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  Collector collector;
  benchmark::RunSpecifiedBenchmarks(&collector);
  benchmark::Shutdown();
  for (const auto& [which, f] : Results()) {
    const auto [scenario, system_clock] = which;
    std::printf(
        "call scenario=%s clock=%s cpu_ns_per_call=%.0f allocations_per_call=%.2f "
        "transport_allocations_per_call=%.2f clock_reads_per_call=%.1f\n",
        Name(scenario), system_clock ? "system" : "fake",
        collector.CpuNs(BenchName(scenario, system_clock)), f.allocations, f.transport_allocations,
        f.clock_reads);
  }
  return 0;
}

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The per-retry decision: classify the attempt, ask the shared budget, compute
// the backoff. Target: <= 200 ns and no heap allocation.
//
// Global operator new/delete are replaced by counting versions. Counting is
// armed only around the measured calls (so the framework's own bookkeeping is
// not charged), and every benchmark reports `allocs_per_iter`; a non-zero
// count turns the run into an error ("heap allocation on the decision path").

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

#include "benchmark/benchmark.h"
#include "saferetry/backoff.h"
#include "saferetry/classifier.h"
#include "saferetry/result.h"
#include "saferetry/retry_budget.h"

namespace {

thread_local bool g_armed = false;
std::atomic<std::int64_t> g_allocations{0};

void* CountedAlloc(std::size_t size, std::size_t alignment) {
  if (g_armed) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (size == 0) size = 1;
  void* p = nullptr;
  if (alignment <= alignof(std::max_align_t)) {
    p = std::malloc(size);
  } else {
    size = (size + alignment - 1) / alignment * alignment;
    p = std::aligned_alloc(alignment, size);
  }
  return p;
}

void* CountedAllocOrThrow(std::size_t size, std::size_t alignment) {
  void* p = CountedAlloc(size, alignment);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

}  // namespace

void* operator new(std::size_t n) { return CountedAllocOrThrow(n, 0); }
void* operator new[](std::size_t n) { return CountedAllocOrThrow(n, 0); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return CountedAlloc(n, 0); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return CountedAlloc(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) {
  return CountedAllocOrThrow(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return CountedAllocOrThrow(n, static_cast<std::size_t>(a));
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return CountedAlloc(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return CountedAlloc(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }

namespace saferetry {
namespace {

enum class BudgetKind { kThrottle, kRatio, kQuota };

// Budgets sized so every decision of a run takes the same path (the throttle
// sits at its floor and refuses; the other two always allow).
std::shared_ptr<RetryBudget> MakeBudget(BudgetKind kind) {
  switch (kind) {
    case BudgetKind::kThrottle:
      return *MakeTokenThrottle({});
    case BudgetKind::kRatio:
      return *MakeRatioBudget({0.1, 1e9, std::chrono::seconds(10)});
    case BudgetKind::kQuota:
      return *MakeCostQuota({std::int64_t{1} << 60, 5, 10, 1});
  }
  return nullptr;
}

AttemptEvidence Evidence503() {
  AttemptEvidence e;
  e.number = 1;
  e.delivery = Delivery::kResponseReceived;
  e.http_status = 503;
  return e;
}

void ReportAllocations(benchmark::State& state, std::int64_t allocations) {
  state.counters["allocs_per_iter"] =
      benchmark::Counter(static_cast<double>(allocations), benchmark::Counter::kAvgIterations);
  if (allocations != 0) state.SkipWithError("heap allocation on the decision path");
}

// Classify + OnFailure + ComputeBackoff: one retry decision.
void BM_Decision(benchmark::State& state, BudgetKind kind) {
  const DefaultClassifier classifier;
  const AttemptEvidence evidence = Evidence503();
  const RequestTraits traits{/*idempotent=*/false, /*safe=*/false, /*keyed=*/true};
  const BackoffParams params;  // full jitter, 100 ms x2, 10 s cap
  std::shared_ptr<RetryBudget> budget = MakeBudget(kind);
  TimePoint now = TimePoint{} + std::chrono::seconds(1000);
  int retry = 1;
  Duration previous{0};
  double u = 0.25;
  std::int64_t allowed = 0;
  const std::int64_t before = g_allocations.load();
  for (auto _ : state) {
    g_armed = true;
    Classification c = classifier.Classify(evidence, traits);
    BudgetDecision d = budget->OnFailure({c.cls}, now);
    Duration delay = ComputeBackoff(params, retry, previous, u);
    g_armed = false;
    benchmark::DoNotOptimize(c);
    benchmark::DoNotOptimize(delay);
    allowed += d.allowed;
    previous = delay;
    retry = retry % 16 + 1;  // every ceiling from 100 ms to the cap
    u = u < 0.75 ? u + 0.125 : 0.0;
    now += std::chrono::milliseconds(1);  // the ratio budget's window rotates
  }
  ReportAllocations(state, g_allocations.load() - before);
  state.counters["allowed_per_iter"] =
      benchmark::Counter(static_cast<double>(allowed), benchmark::Counter::kAvgIterations);
}
BENCHMARK_CAPTURE(BM_Decision, token_throttle, BudgetKind::kThrottle);
BENCHMARK_CAPTURE(BM_Decision, ratio_budget, BudgetKind::kRatio);
BENCHMARK_CAPTURE(BM_Decision, cost_quota, BudgetKind::kQuota);

// The three pieces alone, to see where the time goes.
void BM_ClassifyOnly(benchmark::State& state) {
  const DefaultClassifier classifier;
  const AttemptEvidence evidence = Evidence503();
  const RequestTraits traits{false, false, true};
  const std::int64_t before = g_allocations.load();
  for (auto _ : state) {
    g_armed = true;
    Classification c = classifier.Classify(evidence, traits);
    g_armed = false;
    benchmark::DoNotOptimize(c);
  }
  ReportAllocations(state, g_allocations.load() - before);
}
BENCHMARK(BM_ClassifyOnly);

void BM_BudgetOnly(benchmark::State& state, BudgetKind kind) {
  std::shared_ptr<RetryBudget> budget = MakeBudget(kind);
  TimePoint now = TimePoint{} + std::chrono::seconds(1000);
  const std::int64_t before = g_allocations.load();
  for (auto _ : state) {
    g_armed = true;
    BudgetDecision d = budget->OnFailure({AttemptClass::kRetryableTransient}, now);
    g_armed = false;
    benchmark::DoNotOptimize(d);
    now += std::chrono::milliseconds(1);
  }
  ReportAllocations(state, g_allocations.load() - before);
}
BENCHMARK_CAPTURE(BM_BudgetOnly, token_throttle, BudgetKind::kThrottle);
BENCHMARK_CAPTURE(BM_BudgetOnly, ratio_budget, BudgetKind::kRatio);
BENCHMARK_CAPTURE(BM_BudgetOnly, cost_quota, BudgetKind::kQuota);

void BM_BackoffOnly(benchmark::State& state, JitterKind jitter) {
  BackoffParams params;
  params.jitter = jitter;
  int retry = 1;
  Duration previous{0};
  double u = 0.25;
  const std::int64_t before = g_allocations.load();
  for (auto _ : state) {
    g_armed = true;
    Duration delay = ComputeBackoff(params, retry, previous, u);
    g_armed = false;
    benchmark::DoNotOptimize(delay);
    previous = delay;
    retry = retry % 16 + 1;
    u = u < 0.75 ? u + 0.125 : 0.0;
  }
  ReportAllocations(state, g_allocations.load() - before);
}
BENCHMARK_CAPTURE(BM_BackoffOnly, full, JitterKind::kFull);
BENCHMARK_CAPTURE(BM_BackoffOnly, decorrelated, JitterKind::kDecorrelated);

// The counter itself must work, or a zero above proves nothing.
void BM_CounterSelfCheck(benchmark::State& state) {
  const std::int64_t before = g_allocations.load();
  for (auto _ : state) {
    g_armed = true;
    auto* p = new int(7);
    g_armed = false;
    benchmark::DoNotOptimize(p);
    delete p;
  }
  const std::int64_t allocations = g_allocations.load() - before;
  state.counters["allocs_per_iter"] =
      benchmark::Counter(static_cast<double>(allocations), benchmark::Counter::kAvgIterations);
  if (allocations != static_cast<std::int64_t>(state.iterations())) {
    state.SkipWithError("allocation counter is broken");
  }
}
BENCHMARK(BM_CounterSelfCheck);

}  // namespace
}  // namespace saferetry

BENCHMARK_MAIN();

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Not API: what measures one in-process call, shared by the allocation test
// (tests/cost/call_allocation_test.cc) and the timing benchmark
// (bench/call_benchmark.cc), so both measure the same call:
//   - a replacement global operator new that counts (`Allocations()`);
//   - `CannedTransport`: answers 200 with six headers and a 200-byte body
//     built beforehand. It hands out a response it holds and takes it back
//     from the caller after the call (`Recycle`), so it allocates nothing
//     itself once warm; it counts what it does allocate (a copy when none is
//     spare), the transport's, not the call's;
//   - `CountingClock`: counts its readings, for the clock-read budget.
//
// Include it in exactly one source file of an executable: it defines the
// replacement operator new and delete.
#ifndef SAFERETRY_TESTS_COST_CANNED_CALL_H_
#define SAFERETRY_TESTS_COST_CANNED_CALL_H_

#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <optional>
#include <utility>
#include <vector>

#include "saferetry/clock.h"
#include "saferetry/transport.h"

namespace saferetry {
namespace cost {

inline std::atomic<long long> g_allocations{0};
inline std::atomic<long long> g_live_bytes{0};

/// Allocations through operator new so far, in this process.
inline long long Allocations() { return g_allocations.load(std::memory_order_relaxed); }
/// Bytes of the blocks operator new handed out and operator delete has not
/// taken back, as malloc sized them (`malloc_usable_size`).
inline long long LiveBytes() { return g_live_bytes.load(std::memory_order_relaxed); }

/// Answers 200 with a response built once. `Send` moves out a spare copy when
/// the caller has returned one through `Recycle`, and copies the canned
/// response (counted as the transport's allocations) only when none is spare.
class CannedTransport final : public Transport {
 public:
  CannedTransport() {
    spare_.reserve(kMaxSpare);
    response_.status_code = 200;
    response_.headers = {{"Content-Type", "application/json"},
                         {"Content-Length", "200"},
                         {"Date", "Wed, 02 Dec 2026 04:00:00 GMT"},
                         {"X-Request-Id", "req-7f3a9c2e"},
                         {"Cache-Control", "no-store"},
                         {"Server", "orders/1.4"}};
    response_.body = R"({"order_id":"ord-000123","status":"created","sku":"sku-42",)";
    response_.body.resize(199, ' ');
    response_.body += '}';
  }
  TransportResult Send(const Request&, const AttemptOptions&) override {
    const long long before = Allocations();
    TransportResult r;
    r.delivery = Delivery::kResponseReceived;
    if (spare_.empty()) {
      r.response = response_;
    } else {
      r.response = std::move(spare_.back());
      spare_.pop_back();
    }
    own_allocations_ += Allocations() - before;
    return r;
  }
  /// Takes back a response `Send` handed out (the call's `last_response`), to
  /// hand out again: what a transport that owns its buffers does.
  void Recycle(std::optional<Response>& response) {
    if (response && spare_.size() < kMaxSpare) spare_.push_back(std::move(*response));
    response.reset();
  }
  /// What copying the response allocated, over every send so far.
  long long own_allocations() const { return own_allocations_; }
  /// The response it answers with.
  const Response& response() const { return response_; }

 private:
  static constexpr std::size_t kMaxSpare = 4;
  Response response_;
  std::vector<Response> spare_;
  long long own_allocations_ = 0;
};

/// A clock that counts its readings (steady and wall).
class CountingClock final : public Clock {
 public:
  explicit CountingClock(std::shared_ptr<Clock> inner) : inner_(std::move(inner)) {}
  TimePoint Now() override {
    ++reads_;
    return inner_->Now();
  }
  WallTime WallNow() override {
    ++reads_;
    return inner_->WallNow();
  }
  void SleepFor(Duration d) override { inner_->SleepFor(d); }
  using Clock::SleepFor;
  long long reads() const { return reads_; }

 private:
  std::shared_ptr<Clock> inner_;
  long long reads_ = 0;
};

}  // namespace cost
}  // namespace saferetry

// The replacement operator delete frees what the replacement operator new
// took from malloc; GCC, seeing both inlined, takes free() for a mismatch.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  saferetry::cost::g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) {
    saferetry::cost::g_live_bytes.fetch_add(static_cast<long long>(malloc_usable_size(p)),
                                            std::memory_order_relaxed);
    return p;
  }
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  if (p == nullptr) return;
  saferetry::cost::g_live_bytes.fetch_sub(static_cast<long long>(malloc_usable_size(p)),
                                          std::memory_order_relaxed);
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept { operator delete(p); }
#pragma GCC diagnostic pop

#endif  // SAFERETRY_TESTS_COST_CANNED_CALL_H_

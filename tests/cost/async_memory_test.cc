// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// What an `AsyncClient` call costs in memory while it waits for its answer:
// the live bytes of `operator new` per call in flight, with a transport that
// holds each send's callback in storage it reserved beforehand (so the bytes
// are the client's alone) and a fake event loop. A GET with the default
// policy; the caller's request (its URL is longer than a string's inline
// storage) is moved into the call and counted with it, as the benchmark
// does. bench/async_benchmark measures the same over libcurl, with the
// transfer's bytes; docs/performance.md breaks both down by block.
//
// Built only without sanitizers (their allocators count differently).

#include <cstdio>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "canned_call.h"
#include "gtest/gtest.h"
#include "saferetry/async_client.h"
#include "saferetry/testing/async_fake_transport.h"
#include "saferetry/testing/fake_clock.h"

namespace saferetry {
namespace {

using cost::LiveBytes;

// Holds every send until the test answers it; allocates nothing per send.
class HoldingTransport final : public AsyncTransport {
 public:
  explicit HoldingTransport(std::size_t capacity) { held_.reserve(capacity); }
  AttemptId Start(const Request&, const AttemptOptions&, Callback done) override {
    held_.push_back(std::move(done));
    return held_.size();
  }
  std::optional<TransportResult> Cancel(AttemptId) override { return std::nullopt; }
  // Answers every send held so far with 200.
  void AnswerAll() {
    std::vector<Callback> held = std::move(held_);
    held_.clear();
    for (Callback& done : held) {
      TransportResult r;
      r.delivery = Delivery::kResponseReceived;
      r.response.emplace();
      r.response->status_code = 200;
      done(std::move(r));
    }
  }
  std::size_t held() const { return held_.size(); }

 private:
  std::vector<Callback> held_;
};

TEST(AsyncMemoryTest, AGetInFlightHoldsAtMostItsRecordAndItsTableEntry) {
  constexpr int kCalls = 512;
  auto clock = std::make_shared<testkit::FakeClock>();
  auto loop = std::make_shared<testkit::FakeEventLoop>(clock);
  auto transport = std::make_shared<HoldingTransport>(kCalls);
  AsyncClientOptions o;
  o.client.clock = clock;
  o.loop = loop;
  o.transport = transport;
  o.run_loop_thread = false;
  auto client = AsyncClient::Create(std::move(o));
  ASSERT_TRUE(client.ok()) << client.status();

  int succeeded = 0;
  auto done = [&succeeded](CallResult r) { succeeded += r.outcome == Outcome::kSucceeded; };
  Request get;
  get.url = "http://127.0.0.1:8080/orders/1";  // 30 bytes: not inline
  // One call first, answered: the client's queue has its kept capacity.
  (*client)->Execute(get, {}, done);
  loop->RunUntilIdle();
  transport->AnswerAll();
  loop->RunUntilIdle();
  ASSERT_EQ(succeeded, 1);

  const long long before = LiveBytes();
  for (int i = 0; i < kCalls; ++i) (*client)->Execute(get, {}, done);
  loop->RunUntilIdle();
  const long long in_flight = LiveBytes() - before;
  ASSERT_EQ(transport->held(), static_cast<std::size_t>(kCalls));
  const double per_call = static_cast<double>(in_flight) / kCalls;
  // The goal (docs/performance.md): a call in flight on the event loop holds
  // at most 1 KiB. Today about 640 bytes: the call record (the request, the
  // session, the machine, the driver's fields), the request's URL (40), the
  // calls table's node (24) and the tables' share at this count. The
  // machine's and the session's retry blocks are not allocated: no call has
  // waited.
  EXPECT_LE(per_call, 1024);
  EXPECT_GE(per_call, 520 + 40 + 24);  // the counting works
  RecordProperty("bytes_per_call_in_flight", std::to_string(per_call));
  std::printf("bytes_per_call_in_flight=%.1f\n", per_call);

  transport->AnswerAll();
  loop->RunUntilIdle();
  EXPECT_EQ(succeeded, 1 + kCalls);
  EXPECT_LE(LiveBytes() - before, in_flight / 8);  // the calls' records are gone
}

}  // namespace
}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The transport conformance suite (transport_conformance.h) instantiated for
// the four transports saferetry ships: the blocking libcurl transport, the
// libcurl multi transport through the asynchronous interface, and the two
// fakes, whose "server" is the scripted step each scenario comes down to.
// Then the suite's own check, shown to catch transports that break the
// delivery rule.

#include "transport_conformance.h"

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loopback_server.h"
#include "saferetry/async_transport.h"
#include "saferetry/cancellation.h"
#include "saferetry/curl_async_transport.h"
#include "saferetry/curl_transport.h"
#include "saferetry/testing/async_fake_transport.h"
#include "saferetry/testing/fake_clock.h"
#include "saferetry/testing/fake_transport.h"

namespace saferetry {
namespace testkit {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

CurlTransportOptions SuiteCurlOptions() {
  CurlTransportOptions o;
  o.max_response_body = kBodyCap;
  return o;
}

// ---------------------------------------------------------------------------
// The blocking libcurl transport.

class BlockingHarness final : public LoopbackHarness {
 public:
  BlockingHarness(Scenario scenario, std::shared_ptr<Transport> transport)
      : LoopbackHarness(scenario), transport_(std::move(transport)) {}

  TransportResult Send(const Request& request, const AttemptOptions& options) override {
    return transport_->Send(request, options);
  }

  CancelledAttempt SendAndCancel(const Request& request, const AttemptOptions& options,
                                 std::optional<Duration> after) override {
    CancellationToken token;
    AttemptOptions o = options;
    o.cancellation = &token;
    CancelledAttempt c;
    if (!after.has_value()) {
      token.Cancel();
      c.result = transport_->Send(request, o);
      return c;
    }
    std::thread canceller([&] {
      std::this_thread::sleep_for(*after);
      token.Cancel();
    });
    c.result = transport_->Send(request, o);
    canceller.join();
    return c;
  }

 private:
  std::shared_ptr<Transport> transport_;
};

std::shared_ptr<Transport> CurlTransport() {
  auto t = MakeCurlTransport(SuiteCurlOptions());
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : nullptr;
}

// ---------------------------------------------------------------------------
// The libcurl multi transport on an epoll loop running on its own thread.

class MultiHarness final : public LoopbackHarness {
 public:
  explicit MultiHarness(Scenario scenario) : LoopbackHarness(scenario) {
    auto loop = MakeEpollEventLoop();
    EXPECT_TRUE(loop.ok()) << loop.status();
    loop_ = *loop;
    auto transport = MakeCurlMultiTransport(loop_, SuiteCurlOptions());
    EXPECT_TRUE(transport.ok()) << transport.status();
    transport_ = *transport;
    thread_ = std::thread([this] { loop_->Run(); });
  }

  ~MultiHarness() override {
    // The transport is destroyed on the loop thread, which it belongs to.
    loop_->Post([this] {
      transport_.reset();
      loop_->Stop();
    });
    thread_.join();
  }

  TransportResult Send(const Request& request, const AttemptOptions& options) override {
    // Shared with the loop, so a late callback after a failed wait is harmless.
    struct State {
      Request request;
      std::promise<TransportResult> done;
    };
    auto state = std::make_shared<State>();
    state->request = request;
    std::future<TransportResult> done = state->done.get_future();
    loop_->Post([this, state, options] {
      transport_->Start(state->request, options,
                        [state](TransportResult r) { state->done.set_value(std::move(r)); });
    });
    if (done.wait_for(seconds(20)) != std::future_status::ready) {
      ADD_FAILURE() << "no callback within 20 s";
      TransportResult r;
      r.delivery = Delivery::kMaybeDelivered;
      r.status = absl::InternalError("harness: no callback");
      return r;
    }
    return done.get();
  }

  CancelledAttempt SendAndCancel(const Request& request, const AttemptOptions& options,
                                 std::optional<Duration> after) override {
    struct State {
      Request request;
      std::atomic<bool> callback_ran{false};
      std::promise<std::optional<TransportResult>> cancelled;
    };
    auto state = std::make_shared<State>();
    state->request = request;
    auto cancelled = state->cancelled.get_future();
    loop_->Post([this, state, options, after] {
      const AsyncTransport::AttemptId id = transport_->Start(
          state->request, options, [state](TransportResult) { state->callback_ran = true; });
      if (!after.has_value()) {
        state->cancelled.set_value(transport_->Cancel(id));
        return;
      }
      loop_->AddTimer(*after,
                      [this, state, id] { state->cancelled.set_value(transport_->Cancel(id)); });
    });
    CancelledAttempt c;
    if (cancelled.wait_for(seconds(20)) != std::future_status::ready) {
      ADD_FAILURE() << "no cancel within 20 s";
      return c;
    }
    c.result = cancelled.get();
    // One more turn of the loop, then a short wait: a callback of the
    // cancelled attempt would have run by then.
    std::promise<void> turned;
    loop_->Post([&turned] { turned.set_value(); });
    turned.get_future().wait_for(seconds(5));
    std::this_thread::sleep_for(milliseconds(50));
    c.callback_ran = state->callback_ran.load();
    return c;
  }

 private:
  std::shared_ptr<RunnableEventLoop> loop_;
  std::shared_ptr<AsyncTransport> transport_;
  std::thread thread_;
};

// ---------------------------------------------------------------------------
// The fakes. Their server is the step each scenario comes down to; what it
// "read" is recorded as a real server would.

class FakeServer {
 public:
  explicit FakeServer(Scenario scenario) : scenario_(scenario) {}

  // The step the fake takes for `request`, recording what the server sees.
  Step Take(const Request& request, HeaderRefs extra) {
    ReceivedRequest got;
    got.method = request.method;
    const std::size_t path = request.url.find('/', request.url.find("//") + 2);
    got.target = path == std::string::npos ? "/" : request.url.substr(path);
    got.headers = request.headers;
    for (const HeaderRef& h : extra) got.headers.emplace_back(h.name, h.value);
    got.body = request.body;
    got.connection = view_.connections;
    std::size_t size = got.method.size() + got.target.size() + got.body.size();
    for (const auto& h : got.headers) size += h.first.size() + h.second.size() + 4;
    auto arrive = [&] {
      view_.bytes += size;
      ++view_.connections;
    };
    auto read = [&] {
      arrive();
      view_.requests.push_back(got);
    };
    switch (scenario_) {
      case Scenario::kAnswer:
        read();
        return Step::Respond(200, AnswerHeaders(), AnswerBody());
      case Scenario::kRefused:
        return Step::NotSent();
      case Scenario::kResetBeforeRead:
        arrive();
        return Step::CommitThenLost();
      case Scenario::kResetAfterRead:
      case Scenario::kPartialStatusLine:
      case Scenario::kPartialHeaders:
        read();
        return Step::CommitThenLost();
      case Scenario::kHang:
        read();
        return Step::TimeoutAfterSend();
      case Scenario::kPartialBody: {
        read();
        Step s = Step::Respond(200, {{"X-Trace", "abc"}, {"Content-Length", "10"}}, "hel");
        s.result.status = absl::UnavailableError("body cut short by the server's close");
        return s;
      }
      case Scenario::kSlowBody: {
        read();
        std::string whole;
        for (const auto& p : SlowBodyPieces()) whole += p;
        return Step::Respond(200, {{"Content-Length", std::to_string(whole.size())}}, whole)
            .After(kSlowGap * (kSlowPieces - 1));
      }
      case Scenario::kStalledBody: {
        read();
        Step s = Step::Respond(200, {{"Content-Length", "10"}}, "hello");
        s.result.status = absl::DeadlineExceededError("attempt timed out during the body");
        s.consumes_timeout = true;
        return s;
      }
      case Scenario::kOverCap: {
        read();
        Step s = Step::Respond(200, {{"Content-Length", std::to_string(kOverCapSize)}},
                               std::string(kBodyCap, 'z'));
        s.result.response->body_truncated = true;
        return s;
      }
      case Scenario::kIdleCloseAfterAnswer:
        read();
        return Step::Respond(200, {{"Content-Length", std::to_string(request.body.size())}},
                             request.body);
      case Scenario::kCloseAfterReadingNext:
        read();
        if (got.target == "/second") return Step::CommitThenLost();
        return Step::Respond(200, {{"Content-Length", "2"}}, "ok");
    }
    return Step::NotSent();
  }

  const ServerView& view() const { return view_; }

 private:
  Scenario scenario_;
  ServerView view_;
};

class FakeHarness final : public TransportHarness {
 public:
  explicit FakeHarness(Scenario scenario)
      : server_(scenario),
        clock_(std::make_shared<FakeClock>()),
        transport_(std::make_shared<FakeTransport>(clock_)) {}

  std::string Url(std::string_view path) override { return "http://fake.test" + std::string(path); }
  ServerView Server() override { return server_.view(); }
  void AwaitServerClosed(int) override {}
  TimePoint Now() override { return clock_->Now(); }

  TransportResult Send(const Request& request, const AttemptOptions& options) override {
    transport_->Push(server_.Take(request, options.extra_headers));
    return transport_->Send(request, options);
  }

  CancelledAttempt SendAndCancel(const Request& request, const AttemptOptions& options,
                                 std::optional<Duration> after) override {
    CancelledAttempt c;
    if (after.has_value()) return c;  // Attempts take no wall time: see the traits.
    CancellationToken token;
    token.Cancel();
    AttemptOptions o = options;
    o.cancellation = &token;
    // No step: an attempt the fake took would answer "script exhausted".
    c.result = transport_->Send(request, o);
    return c;
  }

 private:
  FakeServer server_;
  std::shared_ptr<FakeClock> clock_;
  std::shared_ptr<FakeTransport> transport_;
};

class AsyncFakeHarness final : public TransportHarness {
 public:
  explicit AsyncFakeHarness(Scenario scenario)
      : server_(scenario),
        clock_(std::make_shared<FakeClock>()),
        loop_(std::make_shared<FakeEventLoop>(clock_)),
        transport_(std::make_shared<AsyncFakeTransport>(loop_, clock_)) {}

  std::string Url(std::string_view path) override { return "http://fake.test" + std::string(path); }
  ServerView Server() override { return server_.view(); }
  void AwaitServerClosed(int) override {}
  TimePoint Now() override { return clock_->Now(); }

  TransportResult Send(const Request& request, const AttemptOptions& options) override {
    transport_->Push(server_.Take(request, options.extra_headers));
    std::optional<TransportResult> result;
    transport_->Start(request, options, [&](TransportResult r) { result = std::move(r); });
    loop_->RunUntilIdle();
    if (!result.has_value()) {
      ADD_FAILURE() << "no callback";
      return TransportResult{};
    }
    return *std::move(result);
  }

  CancelledAttempt SendAndCancel(const Request& request, const AttemptOptions& options,
                                 std::optional<Duration> after) override {
    CancelledAttempt c;
    // Cancelled before its step ran, the attempt never reached the server.
    Step step =
        after.has_value() ? server_.Take(request, options.extra_headers) : Step::TimeoutAfterSend();
    transport_->Push(std::move(step));
    const AsyncTransport::AttemptId id =
        transport_->Start(request, options, [&](TransportResult) { c.callback_ran = true; });
    if (!after.has_value()) {
      c.result = transport_->Cancel(id);
    } else {
      loop_->AddTimer(*after, [&] { c.result = transport_->Cancel(id); });
    }
    loop_->RunUntilIdle();
    return c;
  }

 private:
  FakeServer server_;
  std::shared_ptr<FakeClock> clock_;
  std::shared_ptr<FakeEventLoop> loop_;
  std::shared_ptr<AsyncFakeTransport> transport_;
};

// ---------------------------------------------------------------------------
// The four transports.

TransportTraits LibcurlTraits() {
  TransportTraits t;
  t.idempotent_copies_on_dead_reused_connection = 2;  // libcurl's own resend, allowed.
  return t;
}

TransportTraits FakeTraits() {
  TransportTraits t;
  t.cancels_in_flight = false;
  return t;
}

TransportTraits AsyncFakeTraits() {
  TransportTraits t;
  // The fake decides an attempt's delivery when it starts.
  t.delivery_when_cancelled_before_send = Delivery::kMaybeDelivered;
  return t;
}

INSTANTIATE_TEST_SUITE_P(
    Transports, TransportConformance,
    ::testing::Values(TransportFactory{"BlockingCurl",
                                       [](Scenario s) -> std::unique_ptr<TransportHarness> {
                                         return std::make_unique<BlockingHarness>(s,
                                                                                  CurlTransport());
                                       },
                                       LibcurlTraits()},
                      TransportFactory{"MultiCurl",
                                       [](Scenario s) -> std::unique_ptr<TransportHarness> {
                                         return std::make_unique<MultiHarness>(s);
                                       },
                                       LibcurlTraits()},
                      TransportFactory{"Fake",
                                       [](Scenario s) -> std::unique_ptr<TransportHarness> {
                                         return std::make_unique<FakeHarness>(s);
                                       },
                                       FakeTraits()},
                      TransportFactory{"AsyncFake",
                                       [](Scenario s) -> std::unique_ptr<TransportHarness> {
                                         return std::make_unique<AsyncFakeHarness>(s);
                                       },
                                       AsyncFakeTraits()}),
    TransportFactoryName);

// ---------------------------------------------------------------------------
// The suite's check catches broken transports.

// Reports "not sent" whenever the real transport said "maybe delivered".
class HidesDeliveryTransport final : public Transport {
 public:
  explicit HidesDeliveryTransport(std::shared_ptr<Transport> real) : real_(std::move(real)) {}
  TransportResult Send(const Request& request, const AttemptOptions& options) override {
    TransportResult r = real_->Send(request, options);
    if (r.delivery == Delivery::kMaybeDelivered) r.delivery = Delivery::kNotSent;
    return r;
  }

 private:
  std::shared_ptr<Transport> real_;
};

// Sends once more whenever no response came back: a hidden resend.
class ResendsTransport final : public Transport {
 public:
  explicit ResendsTransport(std::shared_ptr<Transport> real) : real_(std::move(real)) {}
  TransportResult Send(const Request& request, const AttemptOptions& options) override {
    TransportResult r = real_->Send(request, options);
    if (r.delivery != Delivery::kResponseReceived) r = real_->Send(request, options);
    return r;
  }

 private:
  std::shared_ptr<Transport> real_;
};

Request PostTo(TransportHarness& h) {
  Request r;
  r.method = "POST";
  r.url = h.Url("/orders");
  r.body = "pay=1";
  return r;
}

AttemptOptions Bounded() {
  AttemptOptions o;
  o.timeout = seconds(3);
  return o;
}

TEST(TransportConformanceCheck, TheHonestTransportKeepsTheRules) {
  BlockingHarness h(Scenario::kResetAfterRead, CurlTransport());
  const Request request = PostTo(h);
  const ServerView before = h.Server();
  TransportResult r = h.Send(request, Bounded());
  EXPECT_EQ(r.delivery, Delivery::kMaybeDelivered);
  EXPECT_THAT(DeliveryViolations(request, r, before, h.Server()), ::testing::IsEmpty());
}

TEST(TransportConformanceCheck, CatchesATransportThatReportsNotSentAfterTheRequestWasRead) {
  for (Scenario s : {Scenario::kResetBeforeRead, Scenario::kResetAfterRead, Scenario::kHang}) {
    SCOPED_TRACE(std::string(ScenarioName(s)));
    BlockingHarness h(s, std::make_shared<HidesDeliveryTransport>(CurlTransport()));
    const Request request = PostTo(h);
    const ServerView before = h.Server();
    AttemptOptions o = Bounded();
    if (s == Scenario::kHang) o.timeout = milliseconds(200);
    TransportResult r = h.Send(request, o);
    ASSERT_EQ(r.delivery, Delivery::kNotSent);
    EXPECT_THAT(DeliveryViolations(request, r, before, h.Server()),
                ElementsAre(HasSubstr("delivery kNotSent, but")));
  }
}

TEST(TransportConformanceCheck, CatchesATransportThatWritesAPostTwice) {
  BlockingHarness h(Scenario::kResetAfterRead, std::make_shared<ResendsTransport>(CurlTransport()));
  const Request request = PostTo(h);
  const ServerView before = h.Server();
  TransportResult r = h.Send(request, Bounded());
  EXPECT_THAT(DeliveryViolations(request, r, before, h.Server()),
              ElementsAre("POST (not idempotent) written 2 times"));
}

TEST(TransportConformanceCheck, TimingsOutOfOrderAreReported) {
  PhaseTimings t;
  t.connect = milliseconds(5);
  t.first_byte = milliseconds(3);
  t.total = milliseconds(4);
  EXPECT_THAT(TimingViolations(t), ElementsAre(HasSubstr("connect after total"),
                                               HasSubstr("first_byte (3000000ns) before connect")));
}

}  // namespace
}  // namespace testkit
}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The transport conformance suite: one set of cases that every `Transport` and
// `AsyncTransport` must pass, against a server that misbehaves at every point
// of an exchange (refused, reset unread, reset after reading, hanging, cut in
// the status line, the headers or the body, slow, too big, closing a
// kept-alive connection). Each case asserts the delivery evidence, the
// status, the timings' order, cancellation and timeout behaviour, headers and
// body byte for byte, and that no request that is not idempotent was written
// twice.
//
// A transport proves itself by instantiating the suite with a factory of
// `TransportHarness`es (transport_conformance_test.cc holds the four
// saferetry ships):
//
//   INSTANTIATE_TEST_SUITE_P(Mine, TransportConformance,
//                            ::testing::Values(TransportFactory{"Mine", MakeMyHarness, {}}),
//                            TransportFactoryName);
//
// A transport on real sockets derives its harness from `LoopbackHarness`,
// which runs the misbehaving server; it only says how to send and cancel.

#ifndef SAFERETRY_TESTS_INTEGRATION_TRANSPORT_CONFORMANCE_H_
#define SAFERETRY_TESTS_INTEGRATION_TRANSPORT_CONFORMANCE_H_

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"
#include "loopback_server.h"
#include "saferetry/clock.h"
#include "saferetry/request.h"
#include "saferetry/result.h"
#include "saferetry/transport.h"

namespace saferetry {
namespace testkit {

/// How the server behaves for the whole of one case.
enum class Scenario {
  kAnswer,                 ///< Answers 200 with `kAnswerHeaders` and `AnswerBody()`.
  kRefused,                ///< Nothing listens: connection refused.
  kResetBeforeRead,        ///< Accepts, lets the request arrive, resets it unread.
  kResetAfterRead,         ///< Reads the whole request, resets before any answer.
  kHang,                   ///< Reads the request and never answers.
  kPartialStatusLine,      ///< "HTTP/1.1 20", then closes.
  kPartialHeaders,         ///< The status line and half the headers, then closes.
  kPartialBody,            ///< Headers (Content-Length 10), "hel", then closes.
  kSlowBody,               ///< Headers, then the body in `kSlowPieces` pieces, `kSlowGap` apart.
  kStalledBody,            ///< Headers (Content-Length 10), "hello", then nothing.
  kOverCap,                ///< A 200 whose body is `kOverCapSize` bytes, above `kBodyCap`.
  kIdleCloseAfterAnswer,   ///< Answers (keep-alive), then closes the idle connection.
  kCloseAfterReadingNext,  ///< Answers "/first"; reads "/second" on that connection, closes.
};

/// The scenario's name, for messages.
std::string_view ScenarioName(Scenario s);

/// The response body limit every transport under test is configured with.
inline constexpr std::size_t kBodyCap = 64;
inline constexpr std::size_t kOverCapSize = 100;
inline constexpr int kSlowPieces = 3;
inline constexpr std::chrono::milliseconds kSlowGap{40};

/// The headers of the kAnswer response, in order, as sent.
Headers AnswerHeaders();
/// The kAnswer body: binary, with NUL, CR, LF and a byte above 0x7f.
std::string AnswerBody();
/// The body of the kSlowBody response (`kSlowPieces` pieces).
std::vector<std::string> SlowBodyPieces();

/// What the server side saw, read at one moment.
struct ServerView {
  /// Complete requests read, in arrival order.
  std::vector<ReceivedRequest> requests;
  /// Bytes of requests that reached the server: read, or waiting unread.
  std::size_t bytes = 0;
  /// Connections accepted.
  int connections = 0;
};

/// What an attempt cancelled by the harness reported.
struct CancelledAttempt {
  /// The result the transport gave for the cancelled attempt (the blocking
  /// `Send`'s return value, or what `AsyncTransport::Cancel` returned).
  std::optional<TransportResult> result;
  /// An asynchronous transport ran the attempt's callback as well (it must
  /// not). Always false for a blocking one.
  bool callback_ran = false;
};

/// One transport under test with its server, made fresh for every case.
/// The harness drives the transport the way its interface asks (a blocking
/// `Send`, or `Start` and a loop), so one case body tests every transport.
class TransportHarness {
 public:
  virtual ~TransportHarness() = default;
  /// A URL on the server with `path` ("/o").
  virtual std::string Url(std::string_view path) = 0;
  /// What the server has seen so far.
  virtual ServerView Server() = 0;
  /// Waits (bounded) until the server has closed `n` connections.
  virtual void AwaitServerClosed(int n) = 0;
  /// Sends one attempt and returns its result.
  virtual TransportResult Send(const Request& request, const AttemptOptions& options) = 0;
  /// Sends one attempt and cancels it: before it starts when `after` is
  /// nullopt (a token already cancelled, or `Cancel` right after `Start`),
  /// else `after` into the attempt.
  virtual CancelledAttempt SendAndCancel(const Request& request, const AttemptOptions& options,
                                         std::optional<Duration> after) = 0;
  /// Now, on the clock the transport's time passes on.
  virtual TimePoint Now() = 0;
};

/// What a transport legitimately does differently from another; everything
/// else is the same for all.
struct TransportTraits {
  /// A kept-alive connection that dies before any answer to an idempotent
  /// request: how many copies of it the server reads (libcurl resends once
  /// on a new connection; a transport that never resends, 1).
  int idempotent_copies_on_dead_reused_connection = 1;
  /// Cancellation can fire while an attempt is in flight (false for a
  /// transport whose attempts take no wall time).
  bool cancels_in_flight = true;
  /// What a cancel before anything was written reports: kNotSent, or a
  /// transport that decides delivery at the start may conservatively say
  /// kMaybeDelivered.
  Delivery delivery_when_cancelled_before_send = Delivery::kNotSent;
  /// Worst lateness of a result past what it waited for (timeouts, the slow
  /// body), on the harness's clock.
  Duration slack = std::chrono::milliseconds(400);
};

/// A transport under test: its name (the test's name), how to make a
/// harness for a scenario, and its traits.
struct TransportFactory {
  std::string name;
  std::function<std::unique_ptr<TransportHarness>(Scenario)> make;
  TransportTraits traits;
};

void PrintTo(const TransportFactory& factory, std::ostream* os);
std::string TransportFactoryName(const ::testing::TestParamInfo<TransportFactory>& info);

/// The rules every attempt keeps, checked against what the server saw
/// before (`before`) and after (`after`) it. Returns every violation, empty
/// when none:
/// - `kNotSent` although a byte of the request reached the server;
/// - a response without `kResponseReceived`, or the reverse;
/// - an OK status without a response;
/// - a request that is not idempotent read more than once by the server.
std::vector<std::string> DeliveryViolations(const Request& request, const TransportResult& result,
                                            const ServerView& before, const ServerView& after);

/// The timings' violations: every phase that happened (non-zero) is at most
/// the next one that happened, and all are at most `total`. Empty when none.
std::vector<std::string> TimingViolations(const PhaseTimings& timings);

/// A harness on real loopback sockets: the server misbehaves as the
/// scenario says. Derived classes send through their transport.
class LoopbackHarness : public TransportHarness {
 public:
  explicit LoopbackHarness(Scenario scenario);
  std::string Url(std::string_view path) override;
  ServerView Server() override;
  void AwaitServerClosed(int n) override;
  TimePoint Now() override;

 private:
  Scenario scenario_;
  int refused_port_ = 0;
  std::unique_ptr<LoopbackServer> server_;
};

/// The suite. Cases are in transport_conformance.cc.
class TransportConformance : public ::testing::TestWithParam<TransportFactory> {
 protected:
  std::unique_ptr<TransportHarness> Make(Scenario scenario) { return GetParam().make(scenario); }
  const TransportTraits& traits() const { return GetParam().traits; }
};

}  // namespace testkit
}  // namespace saferetry

#endif  // SAFERETRY_TESTS_INTEGRATION_TRANSPORT_CONFORMANCE_H_

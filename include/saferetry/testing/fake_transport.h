// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// A scripted transport: each attempt takes the next step of a script (or a
// handler decides), time passes on a `FakeClock`, and every request sent is
// recorded with the headers saferetry added.
//
// @code
//   auto clock = std::make_shared<FakeClock>();
//   auto transport = std::make_shared<FakeTransport>(clock);
//   transport->Push(Step::CommitThenLost());   // timeout after the server committed
//   transport->Push(Step::Respond(201));
// @endcode

#ifndef SAFERETRY_TESTING_FAKE_TRANSPORT_H_
#define SAFERETRY_TESTING_FAKE_TRANSPORT_H_

#include <algorithm>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "saferetry/testing/fake_clock.h"
#include "saferetry/transport.h"

namespace saferetry {
namespace testkit {

/// One scripted attempt result.
struct Step {
  /// Connection refused: certainly not delivered. Takes `latency`.
  static Step NotSent();
  /// Sent, then no answer until the attempt timeout: maybe delivered. The
  /// clock advances by the whole attempt timeout.
  static Step TimeoutAfterSend();
  /// The server committed, then the response was lost (connection reset):
  /// maybe delivered. Takes `latency`.
  static Step CommitThenLost();
  /// A response with `status`, `headers` and `body`. Takes `latency`.
  static Step Respond(int status, Headers headers = {}, std::string body = {});
  /// A `status` response carrying `Retry-After: <retry_after>`.
  static Step RespondRetryAfter(int status, std::string retry_after);
  /// A `status` response (503 by default) marked `Idempotency-Key-State:
  /// rejected`: the server refused it before any work, as the server half
  /// marks every 503 it sends. An unmarked 503 is doubt for a write
  /// (docs/adr/0031-unmarked-503-is-doubt.md); this one is not.
  static Step RespondRejected(int status = 503, Headers headers = {});

  /// Sets the time the step takes (default 1 ms; capped by the timeout).
  Step& After(Duration d) {
    latency = d;
    return *this;
  }

  /// The time the step takes for an attempt with `timeout`: the whole timeout
  /// for a hang, else the latency capped by the timeout.
  Duration TimeTaken(Duration timeout) const {
    return consumes_timeout ? timeout : std::min(latency, timeout);
  }

  TransportResult result;
  Duration latency = std::chrono::milliseconds(1);
  bool consumes_timeout = false;
};

/// What the transport saw of one attempt.
struct SentRequest {
  /// What the transport saw of `request` sent with `options` at `at`.
  static SentRequest Of(const Request& request, const AttemptOptions& options, TimePoint at) {
    SentRequest sent;
    sent.request = request;
    for (const HeaderRef& h : options.extra_headers) {
      sent.request.headers.emplace_back(std::string(h.name), std::string(h.value));
    }
    sent.timeout = options.timeout;
    sent.at = at;
    return sent;
  }

  /// The request with the extra headers appended.
  Request request;
  Duration timeout{0};
  TimePoint at{};
};

/// Thread-safe scripted transport. An attempt whose cancellation token is
/// already cancelled sends nothing (kCancelled, `Delivery::kNotSent`), is not
/// recorded and takes no step; a step takes no wall time, so a token cannot
/// fire during one.
class FakeTransport final : public Transport {
 public:
  using Handler = std::function<TransportResult(const Request&, const AttemptOptions&)>;

  /// `clock` may be null (then no time passes).
  explicit FakeTransport(std::shared_ptr<FakeClock> clock = nullptr);

  /// Appends a step to the script.
  FakeTransport& Push(Step step);
  /// Used when the script is empty. Without one, an empty script answers
  /// "not sent" with kFailedPrecondition "FakeTransport: script exhausted".
  void SetHandler(Handler handler);

  TransportResult Send(const Request& request, const AttemptOptions& options) override;

  /// Every attempt seen, in order.
  std::vector<SentRequest> sent() const;
  int send_count() const;
  /// Steps not used yet.
  std::size_t remaining_steps() const;

 private:
  std::shared_ptr<FakeClock> clock_;
  mutable std::mutex mu_;
  std::deque<Step> script_;
  Handler handler_;
  std::vector<SentRequest> sent_;
};

}  // namespace testkit
}  // namespace saferetry

#endif  // SAFERETRY_TESTING_FAKE_TRANSPORT_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/testing/fake_transport.h"

#include <algorithm>
#include <utility>

#include "saferetry/cancellation.h"

namespace saferetry {
namespace testkit {

Step Step::NotSent() {
  Step s;
  s.result.delivery = Delivery::kNotSent;
  s.result.status = absl::UnavailableError("connection refused");
  return s;
}

Step Step::TimeoutAfterSend() {
  Step s;
  s.result.delivery = Delivery::kMaybeDelivered;
  s.result.status = absl::DeadlineExceededError("attempt timed out after the request was sent");
  s.consumes_timeout = true;
  return s;
}

Step Step::CommitThenLost() {
  Step s;
  s.result.delivery = Delivery::kMaybeDelivered;
  s.result.status = absl::UnavailableError("connection reset before any response byte");
  return s;
}

Step Step::Respond(int status, Headers headers, std::string body) {
  Step s;
  s.result.delivery = Delivery::kResponseReceived;
  s.result.status = absl::OkStatus();
  Response r;
  r.status_code = status;
  r.headers = std::move(headers);
  r.body = std::move(body);
  s.result.response = std::move(r);
  return s;
}

Step Step::RespondRetryAfter(int status, std::string retry_after) {
  return Respond(status, {{"Retry-After", std::move(retry_after)}});
}

Step Step::RespondRejected(int status, Headers headers) {
  headers.emplace_back("Idempotency-Key-State", "rejected");
  return Respond(status, std::move(headers));
}

FakeTransport::FakeTransport(std::shared_ptr<FakeClock> clock) : clock_(std::move(clock)) {}

FakeTransport& FakeTransport::Push(Step step) {
  std::lock_guard<std::mutex> lock(mu_);
  script_.push_back(std::move(step));
  return *this;
}

void FakeTransport::SetHandler(Handler handler) {
  std::lock_guard<std::mutex> lock(mu_);
  handler_ = std::move(handler);
}

TransportResult FakeTransport::Send(const Request& request, const AttemptOptions& options) {
  if (options.cancellation != nullptr && options.cancellation->IsCancelled()) {
    // As every transport: a token cancelled before the attempt sends nothing.
    TransportResult r;
    r.delivery = Delivery::kNotSent;
    r.status = absl::CancelledError("cancelled before the attempt; nothing sent");
    return r;
  }
  std::optional<Step> step;
  Handler handler;
  {
    std::lock_guard<std::mutex> lock(mu_);
    sent_.push_back(SentRequest::Of(request, options, clock_ ? clock_->Now() : TimePoint{}));
    if (!script_.empty()) {
      step = std::move(script_.front());
      script_.pop_front();
    } else {
      handler = handler_;
    }
  }
  if (!step.has_value()) {
    if (handler) return handler(request, options);
    TransportResult r;
    r.delivery = Delivery::kNotSent;
    r.status = absl::FailedPreconditionError("FakeTransport: script exhausted");
    return r;
  }
  if (clock_ != nullptr) {
    const Duration spent = step->TimeTaken(options.timeout);
    if (spent != Duration::max()) clock_->Advance(spent);
  }
  step->result.timings.total = step->consumes_timeout ? options.timeout : step->latency;
  return std::move(step->result);
}

std::vector<SentRequest> FakeTransport::sent() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sent_;
}

int FakeTransport::send_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(sent_.size());
}

std::size_t FakeTransport::remaining_steps() const {
  std::lock_guard<std::mutex> lock(mu_);
  return script_.size();
}

}  // namespace testkit
}  // namespace saferetry

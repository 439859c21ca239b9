// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/testing/async_fake_transport.h"

#include <algorithm>
#include <utility>

namespace saferetry {
namespace testkit {

FakeEventLoop::FakeEventLoop(std::shared_ptr<FakeClock> clock) : clock_(std::move(clock)) {}

void FakeEventLoop::Post(Task task) {
  std::lock_guard<std::mutex> lock(mu_);
  posted_.push_back(std::move(task));
}

EventLoop::TimerId FakeEventLoop::AddTimer(Duration delay, Task task) {
  std::lock_guard<std::mutex> lock(mu_);
  const TimerId id = ++next_timer_;
  const TimePoint due = clock_->Now() + std::max(delay, Duration::zero());
  timers_.emplace(std::make_pair(due, id), std::move(task));
  timer_due_.emplace(id, due);
  return id;
}

void FakeEventLoop::CancelTimer(TimerId id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = timer_due_.find(id);
  if (it == timer_due_.end()) return;
  timers_.erase(std::make_pair(it->second, id));
  timer_due_.erase(it);
}

absl::Status FakeEventLoop::WatchFd(int, int, FdCallback) {
  return absl::UnimplementedError("FakeEventLoop: no file descriptors");
}

int FakeEventLoop::RunUntilIdle() { return RunSome(std::nullopt); }

int FakeEventLoop::RunUntil(TimePoint until) { return RunSome(until); }

std::size_t FakeEventLoop::pending_timers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return timers_.size();
}

int FakeEventLoop::RunSome(std::optional<TimePoint> until) {
  int ran = 0;
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!posted_.empty()) {
        task = std::move(posted_.front());
        posted_.pop_front();
      } else if (!timers_.empty()) {
        auto first = timers_.begin();
        const TimePoint due = first->first.first;
        if (until.has_value() && due > *until) break;
        task = std::move(first->second);
        timer_due_.erase(first->first.second);
        timers_.erase(first);
        lock.unlock();
        const TimePoint now = clock_->Now();
        if (due > now) clock_->Advance(due - now + clock_->NextWakeLateness());
      } else {
        break;
      }
    }
    task();
    ++ran;
  }
  if (until.has_value()) {
    const TimePoint now = clock_->Now();
    if (*until > now) clock_->Advance(*until - now);
  }
  return ran;
}

AsyncFakeTransport::AsyncFakeTransport(std::shared_ptr<EventLoop> loop,
                                       std::shared_ptr<Clock> clock)
    : loop_(std::move(loop)), clock_(std::move(clock)) {}

AsyncFakeTransport& AsyncFakeTransport::Push(Step step) {
  std::lock_guard<std::mutex> lock(mu_);
  script_.push_back(std::move(step));
  return *this;
}

void AsyncFakeTransport::SetHandler(Handler handler) {
  std::lock_guard<std::mutex> lock(mu_);
  handler_ = std::move(handler);
}

void AsyncFakeTransport::SetBackend(std::shared_ptr<Transport> backend) {
  std::lock_guard<std::mutex> lock(mu_);
  backend_ = std::move(backend);
}

AsyncTransport::AttemptId AsyncFakeTransport::Start(const Request& request,
                                                    const AttemptOptions& options, Callback done) {
  std::optional<Step> step;
  Handler handler;
  std::shared_ptr<Transport> backend;
  AttemptId id = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = ++next_id_;
    sent_.push_back(SentRequest::Of(request, options, clock_ ? clock_->Now() : TimePoint{}));
    if (!script_.empty()) {
      step = std::move(script_.front());
      script_.pop_front();
    } else {
      handler = handler_;
      backend = backend_;
    }
  }
  Duration latency = Duration::zero();
  if (!step.has_value() && handler) step = handler(request, options);
  TransportResult result;
  if (step.has_value()) {
    latency = step->TimeTaken(options.timeout);
    step->result.timings.total = latency;
    result = std::move(step->result);
  } else if (backend != nullptr) {
    // The backend runs now, taking whatever time it takes on its clock.
    result = backend->Send(request, options);
  } else {
    result.delivery = Delivery::kNotSent;
    result.status = absl::FailedPreconditionError("AsyncFakeTransport: script exhausted");
  }
  Pending pending;
  pending.delivery_if_cancelled =
      result.delivery == Delivery::kNotSent ? Delivery::kNotSent : Delivery::kMaybeDelivered;
  if (latency == Duration::max()) latency = std::chrono::hours(24 * 365);
  // The timer is added before it is recorded; it cannot run before Start
  // returns (timers never run inline).
  pending.timer = loop_->AddTimer(
      latency, [this, id, result = std::move(result), done = std::move(done)]() mutable {
        Complete(id, std::move(result), std::move(done));
      });
  std::lock_guard<std::mutex> lock(mu_);
  pending_.emplace(id, pending);
  return id;
}

void AsyncFakeTransport::Complete(AttemptId id, TransportResult result, Callback done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (pending_.erase(id) == 0) return;
  }
  done(std::move(result));
}

std::optional<TransportResult> AsyncFakeTransport::Cancel(AttemptId id) {
  Pending pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(id);
    if (it == pending_.end()) return std::nullopt;
    pending = it->second;
    pending_.erase(it);
    ++cancelled_;
  }
  loop_->CancelTimer(pending.timer);
  TransportResult r;
  r.delivery = pending.delivery_if_cancelled;
  r.status = absl::CancelledError(r.delivery == Delivery::kNotSent
                                      ? "cancelled before the request was sent"
                                      : "cancelled during the attempt; the request may have been "
                                        "delivered");
  return r;
}

std::vector<SentRequest> AsyncFakeTransport::sent() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sent_;
}

int AsyncFakeTransport::send_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(sent_.size());
}

int AsyncFakeTransport::cancelled_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

int AsyncFakeTransport::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(pending_.size());
}

std::size_t AsyncFakeTransport::remaining_steps() const {
  std::lock_guard<std::mutex> lock(mu_);
  return script_.size();
}

}  // namespace testkit
}  // namespace saferetry

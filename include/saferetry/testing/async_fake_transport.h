// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The asynchronous test kit: an event loop whose timers run on a `FakeClock`
// (time jumps to the next timer, so a call with seconds of backoff runs in
// zero wall time and exactly), and a scripted asynchronous transport whose
// attempts complete after their step's latency on that loop.
//
// @code
//   auto clock = std::make_shared<FakeClock>();
//   auto loop = std::make_shared<FakeEventLoop>(clock);
//   auto transport = std::make_shared<AsyncFakeTransport>(loop, clock);
//   transport->Push(Step::Respond(503)).Push(Step::Respond(200));
//   ... AsyncClient with options.loop = loop, run_loop_thread = false ...
//   auto future = client->Execute(request, call);
//   loop->RunUntilIdle();
//   CallResult r = future.get();
// @endcode

#ifndef SAFERETRY_TESTING_ASYNC_FAKE_TRANSPORT_H_
#define SAFERETRY_TESTING_ASYNC_FAKE_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "saferetry/async_transport.h"
#include "saferetry/testing/fake_clock.h"
#include "saferetry/testing/fake_transport.h"

namespace saferetry {
namespace testkit {

/// An event loop driven by a `FakeClock`. `Post` is thread-safe; the rest,
/// and `Run*`, belong to the one thread that runs the loop (the test's).
class FakeEventLoop final : public EventLoop {
 public:
  explicit FakeEventLoop(std::shared_ptr<FakeClock> clock);

  void Post(Task task) override;
  TimerId AddTimer(Duration delay, Task task) override;
  void CancelTimer(TimerId id) override;
  /// Unimplemented: the fake has no descriptors.
  absl::Status WatchFd(int fd, int events, FdCallback callback) override;

  /// Runs posted tasks; when none is left, advances the clock to the next
  /// timer (`FakeClock::Advance`, not a recorded sleep; plus the clock's
  /// wake-up lateness, `FakeClock::SetWakeLateness`) and runs it; until
  /// neither is left. Returns how many tasks and timers ran.
  int RunUntilIdle();
  /// Like `RunUntilIdle`, but never advances the clock past `until`; timers
  /// due later stay pending.
  int RunUntil(TimePoint until);
  /// Timers not run yet.
  std::size_t pending_timers() const;

 private:
  int RunSome(std::optional<TimePoint> until);

  std::shared_ptr<FakeClock> clock_;
  mutable std::mutex mu_;
  std::deque<Task> posted_;  // Guarded by mu_.
  std::map<std::pair<TimePoint, TimerId>, Task> timers_;
  std::unordered_map<TimerId, TimePoint> timer_due_;
  TimerId next_timer_ = 0;
};

/// A scripted `AsyncTransport`. Each attempt takes the next `Step`; its
/// result arrives after the step's latency (the attempt timeout for
/// `Step::TimeoutAfterSend`), on the loop's timers. When the script is empty
/// a handler decides, else a blocking backend (e.g. `SimulatedOrderServer`)
/// answers: it runs inside `Start` (advancing its fake clock as it likes)
/// and its result arrives at the next turn of the loop, so a backend suits
/// one attempt at a time (no hedging). Every attempt is recorded with the
/// headers saferetry added.
///
/// `Start` and `Cancel` on the loop thread; the accessors are thread-safe.
class AsyncFakeTransport final : public AsyncTransport {
 public:
  using Handler = std::function<Step(const Request&, const AttemptOptions&)>;

  /// `clock` stamps `SentRequest::at`; may be null.
  AsyncFakeTransport(std::shared_ptr<EventLoop> loop, std::shared_ptr<Clock> clock);

  /// Appends a step to the script.
  AsyncFakeTransport& Push(Step step);
  /// Decides attempts once the script is empty.
  void SetHandler(Handler handler);
  /// Answers attempts once the script is empty and there is no handler.
  /// Without either, an empty script answers "not sent" with
  /// kFailedPrecondition "AsyncFakeTransport: script exhausted".
  void SetBackend(std::shared_ptr<Transport> backend);

  AttemptId Start(const Request& request, const AttemptOptions& options, Callback done) override;
  std::optional<TransportResult> Cancel(AttemptId id) override;

  /// Every attempt seen, in order.
  std::vector<SentRequest> sent() const;
  int send_count() const;
  /// Attempts cancelled while in flight.
  int cancelled_count() const;
  /// Attempts started and neither completed nor cancelled.
  int in_flight() const;
  /// Steps not used yet.
  std::size_t remaining_steps() const;

 private:
  struct Pending {
    EventLoop::TimerId timer = 0;
    Delivery delivery_if_cancelled = Delivery::kNotSent;
  };
  void Complete(AttemptId id, TransportResult result, Callback done);

  std::shared_ptr<EventLoop> loop_;
  std::shared_ptr<Clock> clock_;
  mutable std::mutex mu_;
  std::deque<Step> script_;
  Handler handler_;
  std::shared_ptr<Transport> backend_;
  std::vector<SentRequest> sent_;
  std::unordered_map<AttemptId, Pending> pending_;
  AttemptId next_id_ = 0;
  int cancelled_ = 0;
};

}  // namespace testkit
}  // namespace saferetry

#endif  // SAFERETRY_TESTING_ASYNC_FAKE_TRANSPORT_H_

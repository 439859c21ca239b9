// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The Asio adapter (component `saferetry::asio`, header-only): an
// `EventLoop` on a user's `asio::io_context`, so that `AsyncClient` and the
// libcurl multi transport run on the threads that already run the service's
// own Asio work. Standalone Asio (Debian `libasio-dev`, 1.22); define
// `SAFERETRY_ASIO_USE_BOOST` before including this header to build it on
// Boost.Asio instead.
//
// @code
//   asio::io_context io;
//   auto loop = std::make_shared<saferetry::AsioEventLoop>(io);
//   saferetry::AsyncClientOptions options;
//   options.loop = loop;
//   options.transport = saferetry::MakeCurlMultiTransport(loop).value();
//   options.run_loop_thread = false;  // io.run() runs it
//   auto client = saferetry::AsyncClient::Create(std::move(options)).value();
//   client->Execute(order, call, [](saferetry::CallResult r) { ... });
//   io.run();  // on one thread or several
// @endcode
//
// Threads: every task, timer and descriptor callback runs on one strand of
// the context (`strand()`), so with `io.run()` on several threads the
// client's loop-thread state is still touched by one thread at a time: "the
// loop thread" of `EventLoop` means "inside this strand". `Post` may be
// called from any thread; `AddTimer`, `CancelTimer`, `WatchFd` and the
// accessors only on the strand (or while no thread runs the context).
//
// Descriptors: `WatchFd` never owns the descriptor. It is wrapped in an Asio
// stream descriptor that is released (never closed) when the watch ends, so
// the owner (libcurl) closes its own sockets; unwatch (`events == 0`) before
// closing, as libcurl does. Readiness holds until it is consumed, as with
// the epoll loop: the adapter keeps one `async_wait` queued per direction
// watched and queues the next one after each callback, and Asio's reactor
// re-arms the descriptor's registration when a wait starts, so readiness
// that is already there (or was left unconsumed) is reported at once
// (tests/asio/asio_event_loop_test.cc checks it). A socket error completes
// the waits in progress: it arrives as readiness, and libcurl finds the
// error when it reads or writes; `kError` is added when the wait itself
// fails.
//
// Timers: one Asio timer waits for the earliest of the loop's timers, which
// are kept ordered by (due time, order added): timers due at the same time
// run in the order they were added. At most one timer runs per completion,
// so posted tasks and socket callbacks interleave with a burst of due
// timers. Time is read only through `ChronoClock` (`steady_clock` by
// default, which is what `SystemClock()` reads); a test instantiates
// `BasicAsioEventLoop` with a clock over `testkit::FakeClock` and wait traits
// that never block, and drives the context with `poll()` (see
// tests/unit/async_parity_test.cc).
//
// Failure paths: nothing here throws (the error-code overloads are used).
// `WatchFd` returns InvalidArgument for a negative descriptor and Internal
// when Asio cannot register it (the epoll registration failed); libcurl then
// fails the transfers on that socket.
//
// Destruction: destroy the loop on the strand or while no thread runs the
// context, after the client and transport that use it, and before the
// `io_context`. Pending timers are dropped unrun, watches are released
// (descriptors left open), and tasks posted but not yet run are dropped when
// the context reaches them (or is destroyed).

#ifndef SAFERETRY_ASIO_EVENT_LOOP_H_
#define SAFERETRY_ASIO_EVENT_LOOP_H_

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#if defined(SAFERETRY_ASIO_USE_BOOST)
#include <boost/asio/basic_waitable_timer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/wait_traits.hpp>
#else
#include <asio/basic_waitable_timer.hpp>
#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/post.hpp>
#include <asio/strand.hpp>
#include <asio/wait_traits.hpp>
#endif

#include "absl/status/status.h"
#include "saferetry/async_seams.h"

namespace saferetry {
namespace asio_compat {
#if defined(SAFERETRY_ASIO_USE_BOOST)
namespace net = ::boost::asio;
using error_code = ::boost::system::error_code;
#else
namespace net = ::asio;
using error_code = ::asio::error_code;
#endif
}  // namespace asio_compat

/// An `EventLoop` on an Asio `io_context`, with timers on `ChronoClock`
/// (a C++ chrono clock type) and `WaitTraits` (Asio's wait traits for it).
/// See the file comment for threads, descriptors, timers and destruction.
template <typename ChronoClock = std::chrono::steady_clock,
          typename WaitTraits = asio_compat::net::wait_traits<ChronoClock>>
class BasicAsioEventLoop final : public EventLoop {
 public:
  using Strand = asio_compat::net::strand<asio_compat::net::io_context::executor_type>;
  using ClockTimePoint = typename ChronoClock::time_point;

  /// Runs on `context`, which must outlive the loop.
  explicit BasicAsioEventLoop(asio_compat::net::io_context& context)
      : state_(std::make_shared<State>(context)) {}

  ~BasicAsioEventLoop() override { state_->Close(); }

  BasicAsioEventLoop(const BasicAsioEventLoop&) = delete;
  BasicAsioEventLoop& operator=(const BasicAsioEventLoop&) = delete;

  /// Posts `task` to the strand (FIFO, never inline). Thread-safe.
  void Post(Task task) override {
    asio_compat::net::post(state_->strand,
                           [weak = std::weak_ptr<State>(state_), task = std::move(task)]() mutable {
                             std::shared_ptr<State> s = weak.lock();
                             if (s != nullptr && !s->closed) task();
                           });
  }

  TimerId AddTimer(Duration delay, Task task) override {
    State& s = *state_;
    const TimerId id = ++s.next_timer;
    const ClockTimePoint now = ChronoClock::now();
    using ClockDuration = typename ChronoClock::duration;
    // Rounded up, so that a timer never runs before `delay` has passed;
    // clamped to the clock's range.
    const ClockDuration max_left = ClockTimePoint::max() - now;
    ClockDuration left = ClockDuration::zero();
    if (delay > Duration::zero()) {
      left = std::chrono::duration_cast<ClockDuration>(delay) >= max_left
                 ? max_left
                 : std::chrono::ceil<ClockDuration>(delay);
    }
    const ClockTimePoint due = now + left;
    s.timers.emplace(std::make_pair(due, id), std::move(task));
    s.timer_due.emplace(id, due);
    s.ArmTimer();
    return id;
  }

  void CancelTimer(TimerId id) override {
    State& s = *state_;
    auto it = s.timer_due.find(id);
    if (it == s.timer_due.end()) return;
    Task task;  // destroyed after the maps are consistent again
    auto timer = s.timers.find(std::make_pair(it->second, id));
    if (timer != s.timers.end()) {
      task = std::move(timer->second);
      s.timers.erase(timer);
    }
    s.timer_due.erase(it);
    s.ArmTimer();
  }

  absl::Status WatchFd(int fd, int events, FdCallback callback) override {
    if (fd < 0) return absl::InvalidArgumentError("WatchFd: negative descriptor");
    State& s = *state_;
    auto it = s.watches.find(fd);
    if (events == 0) {
      if (it != s.watches.end()) s.watches.erase(it);  // released, not closed
      return absl::OkStatus();
    }
    std::shared_ptr<Watch> w;
    if (it != s.watches.end()) {
      w = it->second;
    } else {
      w = std::make_shared<Watch>(s.strand, fd);
      asio_compat::error_code ec;
      w->descriptor.assign(fd, ec);
      if (ec) {
        return absl::InternalError("WatchFd: asio cannot watch descriptor " + std::to_string(fd) +
                                   ": " + ec.message());
      }
      s.watches.emplace(fd, w);
    }
    w->events = events & (kReadable | kWritable);
    w->callback = std::make_shared<FdCallback>(std::move(callback));
    s.Arm(w);
    return absl::OkStatus();
  }

  /// The strand every callback runs on; post the service's own work that
  /// shares state with the client's callbacks here.
  const Strand& strand() const { return state_->strand; }
  /// When the earliest pending timer is due, if any. On the strand.
  std::optional<ClockTimePoint> next_timer_due() const {
    if (state_->timers.empty()) return std::nullopt;
    return state_->timers.begin()->first.first;
  }
  /// Timers not run yet. On the strand.
  std::size_t pending_timers() const { return state_->timers.size(); }
  /// Descriptors watched now. On the strand.
  std::size_t watched_fds() const { return state_->watches.size(); }

 private:
  using Descriptor = asio_compat::net::posix::basic_stream_descriptor<Strand>;
  using Timer = asio_compat::net::basic_waitable_timer<ChronoClock, WaitTraits, Strand>;

  struct Watch {
    Watch(const Strand& strand, int descriptor_fd) : descriptor(strand), fd(descriptor_fd) {}
    // Released, never closed: the descriptor belongs to whoever watches it.
    ~Watch() { descriptor.release(); }
    Descriptor descriptor;
    int fd;
    int events = 0;
    std::shared_ptr<FdCallback> callback;
    bool read_waiting = false;
    bool write_waiting = false;
  };

  // Shared with the handlers through weak pointers, so that a handler
  // completing after the loop is gone does nothing.
  struct State : std::enable_shared_from_this<State> {
    explicit State(asio_compat::net::io_context& context)
        : strand(asio_compat::net::make_strand(context)), timer(strand) {}

    void Close() {
      closed = true;
      // Cancelling a timer cannot fail; `cancel()` reports nothing else.
      timer.cancel();
      timers.clear();
      timer_due.clear();
      watches.clear();
    }

    // Points the Asio timer at the earliest timer, if it moved.
    void ArmTimer() {
      if (closed) return;
      if (timers.empty()) {
        if (armed.has_value()) {
          armed.reset();
          ++arm_generation;
          timer.cancel();
        }
        return;
      }
      const ClockTimePoint earliest = timers.begin()->first.first;
      if (armed.has_value() && *armed == earliest) return;
      armed = earliest;
      const std::uint64_t generation = ++arm_generation;
      timer.expires_at(earliest);  // cancels the wait in progress
      timer.async_wait(
          [weak = this->weak_from_this(), generation](const asio_compat::error_code& ec) {
            std::shared_ptr<State> s = weak.lock();
            if (s == nullptr || s->closed || ec || generation != s->arm_generation) return;
            s->armed.reset();
            s->RunOneTimer();
            s->ArmTimer();
          });
    }

    // Runs the earliest timer if it is due.
    void RunOneTimer() {
      if (timers.empty()) return;
      auto first = timers.begin();
      if (first->first.first > ChronoClock::now()) return;
      Task task = std::move(first->second);
      timer_due.erase(first->first.second);
      timers.erase(first);
      // Re-armed before the task runs: the task may add or cancel timers.
      ArmTimer();
      task();
    }

    // Queues the waits `w` wants that are not queued yet.
    void Arm(const std::shared_ptr<Watch>& w) {
      if (closed) return;
      if ((w->events & kReadable) != 0 && !w->read_waiting) {
        w->read_waiting = true;
        Wait(w, kReadable);
      }
      if ((w->events & kWritable) != 0 && !w->write_waiting) {
        w->write_waiting = true;
        Wait(w, kWritable);
      }
    }

    void Wait(const std::shared_ptr<Watch>& w, int direction) {
      const auto wait_type = direction == kReadable
                                 ? asio_compat::net::posix::descriptor_base::wait_read
                                 : asio_compat::net::posix::descriptor_base::wait_write;
      w->descriptor.async_wait(
          wait_type, [weak = this->weak_from_this(), weak_watch = std::weak_ptr<Watch>(w),
                      direction](const asio_compat::error_code& ec) {
            std::shared_ptr<State> s = weak.lock();
            std::shared_ptr<Watch> watch = weak_watch.lock();
            if (s == nullptr || watch == nullptr) return;
            (direction == kReadable ? watch->read_waiting : watch->write_waiting) = false;
            if (ec == asio_compat::net::error::operation_aborted) return;
            s->Report(watch, direction | (ec ? kError : 0));
          });
    }

    // Calls the watch's callback with the bits it still wants, then re-arms
    // it if it is still watched.
    void Report(const std::shared_ptr<Watch>& w, int ready) {
      if (closed) return;
      auto it = watches.find(w->fd);
      if (it == watches.end() || it->second != w) return;  // unwatched meanwhile
      const int wanted = ready & (w->events | kError);
      if (wanted == 0) {
        Arm(w);
        return;
      }
      // Held while it runs: the callback may unwatch (and so destroy) it.
      std::shared_ptr<FdCallback> callback = w->callback;
      (*callback)(wanted);
      it = watches.find(w->fd);
      if (it != watches.end() && it->second == w) Arm(w);
    }

    Strand strand;
    Timer timer;
    bool closed = false;
    std::map<std::pair<ClockTimePoint, TimerId>, Task> timers;
    std::unordered_map<TimerId, ClockTimePoint> timer_due;
    TimerId next_timer = 0;
    // The expiry the Asio timer waits for, if it waits.
    std::optional<ClockTimePoint> armed;
    std::uint64_t arm_generation = 0;
    std::unordered_map<int, std::shared_ptr<Watch>> watches;
  };

  std::shared_ptr<State> state_;
};

/// The adapter on the steady clock (what `SystemClock()` reads): use it
/// with `ClientOptions::clock` left at its default.
using AsioEventLoop = BasicAsioEventLoop<>;

}  // namespace saferetry

#endif  // SAFERETRY_ASIO_EVENT_LOOP_H_

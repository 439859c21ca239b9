// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The built-in event loop: epoll for file descriptors, an eventfd to wake the
// loop when another thread posts a task, and timers ordered by due time.
//
// Wake-ups: a task posted on the loop thread itself needs none (the loop
// looks at the queue before it waits), and from other threads one eventfd
// write stands for every task posted until the loop has read it.

#include "saferetry/async_transport.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace saferetry {
namespace {

class EpollEventLoop final : public RunnableEventLoop {
 public:
  EpollEventLoop(std::shared_ptr<Clock> clock, int epfd, int wakefd)
      : clock_(std::move(clock)), epfd_(epfd), wakefd_(wakefd) {}
  ~EpollEventLoop() override {
    close(wakefd_);
    close(epfd_);
  }

  void Post(Task task) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      posted_.push_back(std::move(task));
    }
    // On the loop thread: Run() finds the task before it waits next.
    if (std::this_thread::get_id() == loop_thread_.load(std::memory_order_relaxed)) return;
    // Else one write until the loop reads it: the loop takes the queue
    // after reading the eventfd, so a task pushed before this flag was
    // seen set is taken with the wake-up already pending.
    if (!wake_pending_.exchange(true, std::memory_order_acq_rel)) Wake();
  }

  TimerId AddTimer(Duration delay, Task task) override {
    const TimerId id = ++next_timer_;
    const TimePoint due = clock_->Now() + std::max(delay, Duration::zero());
    // Nodes of earlier timers are reused: a transport that moves its timer
    // at every step (libcurl's) allocates nothing for it.
    if (!spare_timers_.empty()) {
      Timers::node_type node = std::move(spare_timers_.back());
      spare_timers_.pop_back();
      node.key() = std::make_pair(due, id);
      node.mapped() = std::move(task);
      timers_.insert(std::move(node));
    } else {
      timers_.emplace(std::make_pair(due, id), std::move(task));
    }
    if (!spare_dues_.empty()) {
      TimerDues::node_type node = std::move(spare_dues_.back());
      spare_dues_.pop_back();
      node.key() = id;
      node.mapped() = due;
      timer_due_.insert(std::move(node));
    } else {
      timer_due_.emplace(id, due);
    }
    return id;
  }

  void CancelTimer(TimerId id) override {
    auto it = timer_due_.find(id);
    if (it == timer_due_.end()) return;
    auto timer = timers_.find(std::make_pair(it->second, id));
    Task task;
    if (timer != timers_.end()) task = RemoveTimer(timer);
    RemoveDue(it);
    // `task` (what it holds) is destroyed here, after the maps are
    // consistent again.
  }

  absl::Status WatchFd(int fd, int events, FdCallback callback) override {
    auto it = watches_.find(fd);
    // The watch whose callback is running is neither erased nor given its
    // new callback until that callback returns (`Run`).
    const bool running = fd == running_fd_ && it != watches_.end();
    if (events == 0) {
      if (it != watches_.end() && !(running && running_unwatched_)) {
        epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
        if (running) {
          running_unwatched_ = true;
          running_replacement_ = nullptr;
        } else {
          watches_.erase(it);
        }
      }
      return absl::OkStatus();
    }
    epoll_event ev{};
    ev.events =
        ((events & kReadable) != 0 ? EPOLLIN : 0u) | ((events & kWritable) != 0 ? EPOLLOUT : 0u);
    // The generation tells a stale event (for an fd closed and reopened
    // within one epoll_wait batch) from a current one.
    const std::uint32_t generation = ++next_generation_;
    ev.data.u64 = (static_cast<std::uint64_t>(generation) << 32) | static_cast<std::uint32_t>(fd);
    const bool in_epoll = it != watches_.end() && !(running && running_unwatched_);
    if (epoll_ctl(epfd_, in_epoll ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev) != 0) {
      return absl::InternalError(absl::StrCat("epoll_ctl: ", std::strerror(errno)));
    }
    if (running) {
      it->second.generation = generation;
      running_unwatched_ = false;
      running_replacement_ = std::move(callback);
      return absl::OkStatus();
    }
    Watch& w = it != watches_.end() ? it->second : watches_[fd];
    w.generation = generation;
    w.callback = std::move(callback);
    return absl::OkStatus();
  }

  void Run() override {
    loop_thread_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    std::vector<epoll_event> events(256);
    std::deque<Task> batch;
    while (!stopping_.load(std::memory_order_acquire)) {
      int timeout_ms = -1;
      if (!timers_.empty()) {
        const Duration left = timers_.begin()->first.first - clock_->Now();
        timeout_ms =
            left <= Duration::zero()
                ? 0
                : static_cast<int>(std::min<std::int64_t>(
                      std::chrono::ceil<std::chrono::milliseconds>(left).count(), 1 << 30));
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!posted_.empty()) timeout_ms = 0;
      }
      const int n = epoll_wait(epfd_, events.data(), static_cast<int>(events.size()), timeout_ms);
      for (int i = 0; i < n && !stopping_.load(std::memory_order_acquire); ++i) {
        const std::uint64_t data = events[static_cast<std::size_t>(i)].data.u64;
        const int fd = static_cast<int>(data & 0xffffffffu);
        if (fd == wakefd_) {
          std::uint64_t count = 0;
          [[maybe_unused]] ssize_t r = read(wakefd_, &count, sizeof(count));
          // After the read: a Post that still sees the flag set pushed its
          // task before this point, and the queue is taken below.
          wake_pending_.store(false, std::memory_order_release);
          continue;
        }
        auto it = watches_.find(fd);
        if (it == watches_.end() ||
            it->second.generation != static_cast<std::uint32_t>(data >> 32)) {
          continue;  // Unwatched since the batch was read.
        }
        const std::uint32_t e = events[static_cast<std::size_t>(i)].events;
        int ready = 0;
        if ((e & EPOLLIN) != 0) ready |= kReadable;
        if ((e & EPOLLOUT) != 0) ready |= kWritable;
        if ((e & (EPOLLERR | EPOLLHUP)) != 0) ready |= kError;
        // The callback may unwatch or re-watch its own descriptor: `WatchFd`
        // then leaves the watch (and the running callable) in place, and it
        // is erased or given its new callback here, after the call.
        Watch& watch = it->second;  // node-based: stays where it is meanwhile
        running_fd_ = fd;
        watch.callback(ready);
        running_fd_ = -1;
        if (running_unwatched_) {
          running_unwatched_ = false;
          watches_.erase(fd);
        } else if (running_replacement_ != nullptr) {
          watch.callback = std::move(running_replacement_);
          running_replacement_ = nullptr;
        }
      }
      if (n == static_cast<int>(events.size())) events.resize(events.size() * 2);
      // Posted tasks, then due timers; tasks posted meanwhile wait a turn.
      {
        std::lock_guard<std::mutex> lock(mu_);
        batch.swap(posted_);
      }
      while (!batch.empty() && !stopping_.load(std::memory_order_acquire)) {
        Task task = std::move(batch.front());
        batch.pop_front();
        task();
      }
      if (!batch.empty()) {
        std::lock_guard<std::mutex> lock(mu_);
        while (!batch.empty()) {
          posted_.push_front(std::move(batch.back()));
          batch.pop_back();
        }
      }
      // Timers added by these callbacks wait a turn, so a zero-delay timer
      // that re-arms itself cannot starve the descriptors.
      const TimePoint now = clock_->Now();
      const TimerId newest = next_timer_;
      while (!timers_.empty() && timers_.begin()->first.first <= now &&
             !stopping_.load(std::memory_order_acquire)) {
        auto first = timers_.begin();
        if (first->first.second > newest) {
          auto older = std::find_if(timers_.begin(), timers_.end(), [&](const auto& t) {
            return t.first.first > now || t.first.second <= newest;
          });
          if (older == timers_.end() || older->first.first > now) break;
          first = older;
        }
        auto due = timer_due_.find(first->first.second);
        if (due != timer_due_.end()) RemoveDue(due);
        Task task = RemoveTimer(first);
        task();
      }
    }
    loop_thread_.store(std::thread::id(), std::memory_order_relaxed);
  }

  void Stop() override {
    stopping_.store(true, std::memory_order_release);
    Wake();
  }

 private:
  // Held in the table itself (one block per descriptor, none per change of
  // its events).
  struct Watch {
    std::uint32_t generation = 0;
    FdCallback callback;
  };

  using Timers = std::map<std::pair<TimePoint, TimerId>, Task>;
  using TimerDues = std::unordered_map<TimerId, TimePoint>;
  // Spare map nodes kept for reuse, at most this many of each kind.
  static constexpr std::size_t kSpareTimerNodes = 64;

  // Takes a timer's task out of timers_, keeping the node for reuse.
  Task RemoveTimer(Timers::iterator it) {
    Timers::node_type node = timers_.extract(it);
    Task task = std::move(node.mapped());
    node.mapped() = nullptr;
    if (spare_timers_.size() < kSpareTimerNodes) spare_timers_.push_back(std::move(node));
    return task;
  }

  void RemoveDue(TimerDues::iterator it) {
    TimerDues::node_type node = timer_due_.extract(it);
    if (spare_dues_.size() < kSpareTimerNodes) spare_dues_.push_back(std::move(node));
  }

  void Wake() {
    const std::uint64_t one = 1;
    [[maybe_unused]] ssize_t r = write(wakefd_, &one, sizeof(one));
  }

  std::shared_ptr<Clock> clock_;
  const int epfd_;
  const int wakefd_;
  std::atomic<bool> stopping_{false};
  // The thread in Run(), or none.
  std::atomic<std::thread::id> loop_thread_{};
  // An eventfd write that the loop has not read yet.
  std::atomic<bool> wake_pending_{false};
  std::mutex mu_;
  std::deque<Task> posted_;  // Guarded by mu_.
  // Loop thread only.
  Timers timers_;
  TimerDues timer_due_;
  std::vector<Timers::node_type> spare_timers_;
  std::vector<TimerDues::node_type> spare_dues_;
  TimerId next_timer_ = 0;
  std::unordered_map<int, Watch> watches_;
  std::uint32_t next_generation_ = 0;
  // The descriptor whose callback is running (-1: none), and what that
  // callback did to its own watch meanwhile: unwatched it, or gave it a
  // new callback (null: none).
  int running_fd_ = -1;
  bool running_unwatched_ = false;
  FdCallback running_replacement_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<RunnableEventLoop>> MakeEpollEventLoop(
    std::shared_ptr<Clock> clock) {
  if (clock == nullptr) clock = SystemClock();
  const int epfd = epoll_create1(EPOLL_CLOEXEC);
  if (epfd < 0) return absl::InternalError(absl::StrCat("epoll_create1: ", std::strerror(errno)));
  const int wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wakefd < 0) {
    const int err = errno;
    close(epfd);
    return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(err)));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = static_cast<std::uint32_t>(wakefd);
  if (epoll_ctl(epfd, EPOLL_CTL_ADD, wakefd, &ev) != 0) {
    const int err = errno;
    close(wakefd);
    close(epfd);
    return absl::InternalError(absl::StrCat("epoll_ctl: ", std::strerror(err)));
  }
  return std::shared_ptr<RunnableEventLoop>(
      std::make_shared<EpollEventLoop>(std::move(clock), epfd, wakefd));
}

}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The built-in event loop: epoll for file descriptors, an eventfd to wake the
// loop when another thread posts a task, and timers ordered by due time.
//
// Wake-ups: a task posted on the loop thread itself needs none (the loop
// looks at the queue before it waits), and from other threads one eventfd
// write stands for every task posted until the loop has read it.

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/slot_map.h"
#include "common/table_growth.h"
#include "saferetry/async_transport.h"

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
    const TimePoint due = clock_->Now() + std::max(delay, Duration::zero());
    // Slots of earlier timers are reused: a transport that moves its timer
    // at every step (libcurl's) allocates nothing for it.
    const TimerId id = timers_.Insert(Timer{std::move(task), 0});
    HeapPush(HeapEntry{due, ++next_timer_seq_, Timers::SlotOf(id)});  // just issued: live
    return id;
  }

  void CancelTimer(TimerId id) override {
    const std::uint32_t index = timers_.IndexOf(id);
    if (index == Timers::kNoIndex) return;  // ran, cancelled, or never existed
    HeapErase(timers_.at(index).heap_pos);
    Task task = timers_.Take(index).task;
    // `task` (what it holds) is destroyed here, after the tables are
    // consistent again.
  }

  absl::Status WatchFd(int fd, int events, FdCallback callback) override {
    Watch* const watch = WatchOf(fd);
    // The watch whose callback is running is neither cleared nor given its
    // new callback until that callback returns (`Run`).
    const bool running = fd == running_fd_ && watch != nullptr;
    if (events == 0) {
      if (watch != nullptr && !(running && running_unwatched_)) {
        epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
        if (running) {
          running_unwatched_ = true;
          running_replacement_ = nullptr;
        } else {
          *watch = Watch{};
        }
      }
      return absl::OkStatus();
    }
    epoll_event ev{};
    ev.events =
        ((events & kReadable) != 0 ? EPOLLIN : 0u) | ((events & kWritable) != 0 ? EPOLLOUT : 0u);
    // The generation tells a stale event (for an fd closed and reopened
    // within one epoll_wait batch) from a current one.
    const std::uint32_t generation = NextGeneration();
    ev.data.u64 = (static_cast<std::uint64_t>(generation) << 32) | static_cast<std::uint32_t>(fd);
    const bool in_epoll = watch != nullptr && !(running && running_unwatched_);
    // A descriptor that is not one (negative, closed) fails here, before
    // the table is touched.
    if (epoll_ctl(epfd_, in_epoll ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev) != 0) {
      return absl::InternalError(absl::StrCat("epoll_ctl: ", std::strerror(errno)));
    }
    if (running) {
      watch->generation = generation;
      running_unwatched_ = false;
      running_replacement_ = std::move(callback);
      return absl::OkStatus();
    }
    const auto index = static_cast<std::size_t>(fd);
    if (index >= watches_.size()) {
      internal::ReserveGrowingByAQuarter(watches_, index + kWatchSlack);
      watches_.resize(index + kWatchSlack);
    }
    Watch& w = watches_[index];
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
      if (!heap_.empty()) {
        const Duration left = heap_.front().due - clock_->Now();
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
        Watch* const watch = WatchOf(fd);
        if (watch == nullptr || watch->generation != static_cast<std::uint32_t>(data >> 32)) {
          continue;  // Unwatched since the batch was read.
        }
        const std::uint32_t e = events[static_cast<std::size_t>(i)].events;
        int ready = 0;
        if ((e & EPOLLIN) != 0) ready |= kReadable;
        if ((e & EPOLLOUT) != 0) ready |= kWritable;
        if ((e & (EPOLLERR | EPOLLHUP)) != 0) ready |= kError;
        // The callback may unwatch or re-watch its own descriptor: `WatchFd`
        // then leaves the watch in place, and it is cleared or given its new
        // callback here, after the call. The callback runs from a local: a
        // watch of a new descriptor may grow the table meanwhile.
        FdCallback callback = std::move(watch->callback);
        running_fd_ = fd;
        callback(ready);
        running_fd_ = -1;
        Watch& after = watches_[static_cast<std::size_t>(fd)];
        if (running_unwatched_) {
          running_unwatched_ = false;
          after = Watch{};
        } else if (running_replacement_ != nullptr) {
          after.callback = std::move(running_replacement_);
          running_replacement_ = nullptr;
        } else {
          after.callback = std::move(callback);
        }
        // `callback`, if it was replaced or unwatched, is destroyed here,
        // after it returned.
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
      // A timer added meanwhile is due no earlier than `now`, so every due
      // timer added before it comes first in the heap: the first one added
      // meanwhile ends the turn's timers.
      const std::uint64_t newest = next_timer_seq_;
      while (!heap_.empty() && heap_.front().due <= now && heap_.front().seq <= newest &&
             !stopping_.load(std::memory_order_acquire)) {
        const std::uint32_t slot = heap_.front().slot;
        HeapErase(0);
        Task task = timers_.Take(slot).task;
        task();
      }
      // A burst's storage goes back once no timer is queued.
      if (heap_.empty()) {
        timers_.TrimIfEmpty(kKeptTimerSlots);
        if (heap_.capacity() > kKeptTimerSlots) std::vector<HeapEntry>().swap(heap_);
      }
    }
    loop_thread_.store(std::thread::id(), std::memory_order_relaxed);
  }

  void Stop() override {
    stopping_.store(true, std::memory_order_release);
    Wake();
  }

 private:
  // Watches by descriptor, in a table indexed by it (descriptors are small
  // and dense): no node and no hash per socket, nothing allocated when a
  // socket's events change. A generation of 0 is a descriptor not watched.
  // The table grows to the largest descriptor watched and is kept.
  struct Watch {
    std::uint32_t generation = 0;
    FdCallback callback;
  };
  static constexpr std::size_t kWatchSlack = 64;  // room added past a new largest descriptor
  Watch* WatchOf(int fd) {
    if (fd < 0 || static_cast<std::size_t>(fd) >= watches_.size()) return nullptr;
    Watch& w = watches_[static_cast<std::size_t>(fd)];
    return w.generation != 0 ? &w : nullptr;
  }
  // Never 0 (which marks a free entry), also after the counter wraps.
  std::uint32_t NextGeneration() {
    if (++next_generation_ == 0) ++next_generation_;
    return next_generation_;
  }

  // Timers: a binary heap of (due, sequence) entries over the slots that
  // hold the tasks (internal::SlotMap: a timer's id is its slot and the
  // slot's generation, so a cancel finds it without a lookup table).
  struct Timer {
    Task task;
    std::uint32_t heap_pos = 0;  // its entry's index in heap_
  };
  using Timers = internal::SlotMap<Timer>;
  static constexpr std::size_t kKeptTimerSlots = 256;
  struct HeapEntry {
    TimePoint due;
    std::uint64_t seq;  // the order added: ties run first added, first
    std::uint32_t slot;
  };
  static bool Before(const HeapEntry& a, const HeapEntry& b) {
    return a.due < b.due || (a.due == b.due && a.seq < b.seq);
  }
  void Place(std::size_t pos, const HeapEntry& e) {
    heap_[pos] = e;
    timers_.at(e.slot).heap_pos = static_cast<std::uint32_t>(pos);
  }
  void SiftUp(std::size_t pos, HeapEntry e) {
    while (pos > 0) {
      const std::size_t parent = (pos - 1) / 2;
      if (!Before(e, heap_[parent])) break;
      Place(pos, heap_[parent]);
      pos = parent;
    }
    Place(pos, e);
  }
  void SiftDown(std::size_t pos, HeapEntry e) {
    const std::size_t n = heap_.size();
    for (;;) {
      std::size_t child = 2 * pos + 1;
      if (child >= n) break;
      if (child + 1 < n && Before(heap_[child + 1], heap_[child])) ++child;
      if (!Before(heap_[child], e)) break;
      Place(pos, heap_[child]);
      pos = child;
    }
    Place(pos, e);
  }
  void HeapPush(const HeapEntry& e) {
    heap_.push_back(e);
    SiftUp(heap_.size() - 1, e);
  }
  // Removes the entry at `pos`; its slot's position is left to the caller.
  void HeapErase(std::size_t pos) {
    const HeapEntry last = heap_.back();
    heap_.pop_back();
    if (pos == heap_.size()) return;
    if (pos > 0 && Before(last, heap_[(pos - 1) / 2])) {
      SiftUp(pos, last);
    } else {
      SiftDown(pos, last);
    }
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
  std::vector<HeapEntry> heap_;
  Timers timers_;
  std::uint64_t next_timer_seq_ = 0;
  std::vector<Watch> watches_;
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

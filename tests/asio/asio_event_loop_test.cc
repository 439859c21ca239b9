// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The Asio adapter as an EventLoop: timer order and cancellation on exact
// fake time, Post on the context, descriptors watched without being owned
// (and readiness that was there before the wait), destruction, real time,
// and a multi-threaded io_context on which everything runs one at a time.

#include "saferetry/asio_event_loop.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "saferetry/testing/asio_fake_clock.h"

namespace saferetry {
namespace {

using std::chrono::milliseconds;
using ::testing::ElementsAre;
using testkit::FakeAsioClock;
using testkit::FakeAsioEventLoop;
using testkit::FakeClock;
using testkit::RunFakeAsio;

class FakeTimeTest : public ::testing::Test {
 protected:
  FakeTimeTest() { FakeAsioClock::Use(clock_); }
  ~FakeTimeTest() override { FakeAsioClock::Use(nullptr); }
  // Runs until nothing is left.
  void RunAll() {
    RunFakeAsio(io_, *loop_, *clock_, [] { return false; });
  }
  Duration Elapsed() const { return clock_->Now() - start_; }

  std::shared_ptr<FakeClock> clock_ = std::make_shared<FakeClock>();
  const TimePoint start_ = clock_->Now();
  asio::io_context io_;
  std::shared_ptr<FakeAsioEventLoop> loop_ = std::make_shared<FakeAsioEventLoop>(io_);
};

TEST_F(FakeTimeTest, TimersRunByDueTimeThenInTheOrderAdded) {
  std::vector<std::string> ran;
  std::vector<Duration> at;
  auto record = [&](std::string name) {
    return [&, name] {
      ran.push_back(name);
      at.push_back(Elapsed());
    };
  };
  loop_->Post([&] {
    loop_->AddTimer(milliseconds(30), record("a"));
    loop_->AddTimer(milliseconds(10), record("b"));
    loop_->AddTimer(milliseconds(10), record("c"));
    loop_->AddTimer(Duration::zero(), record("d"));
    loop_->AddTimer(milliseconds(-5), record("e"));
    loop_->AddTimer(milliseconds(10), record("f"));
  });
  RunAll();
  EXPECT_THAT(ran, ElementsAre("d", "e", "b", "c", "f", "a"));
  EXPECT_THAT(at, ElementsAre(Duration::zero(), Duration::zero(), milliseconds(10),
                              milliseconds(10), milliseconds(10), milliseconds(30)));
  EXPECT_EQ(loop_->pending_timers(), 0u);
  EXPECT_TRUE(clock_->sleeps().empty());  // time moved by Advance, not by sleeps
}

TEST_F(FakeTimeTest, CancelledTimersNeverRunAndTheNextOneStillDoes) {
  std::vector<std::string> ran;
  EventLoop::TimerId first = 0;
  EventLoop::TimerId third = 0;
  loop_->Post([&] {
    first = loop_->AddTimer(milliseconds(10), [&] { ran.push_back("first"); });
    loop_->AddTimer(milliseconds(20), [&] {
      ran.push_back("second");
      loop_->CancelTimer(third);
    });
    third = loop_->AddTimer(milliseconds(25), [&] { ran.push_back("third"); });
    loop_->AddTimer(milliseconds(40), [&] { ran.push_back("fourth"); });
    loop_->CancelTimer(first);  // the earliest: the Asio timer moves to the next
    loop_->CancelTimer(first);  // twice: no-op
    loop_->CancelTimer(12345);  // unknown: no-op
  });
  RunAll();
  EXPECT_THAT(ran, ElementsAre("second", "fourth"));
  EXPECT_EQ(Elapsed(), milliseconds(40));
  EXPECT_NE(first, 0u);
}

TEST_F(FakeTimeTest, PostedTasksRunOnTheStrandInOrderNeverInline) {
  std::vector<int> ran;
  bool on_strand = true;
  loop_->Post([&] {
    loop_->Post([&] { ran.push_back(3); });
    ran.push_back(1);
    // A zero-delay timer added now runs after the task posted before it.
    loop_->AddTimer(Duration::zero(), [&] { ran.push_back(4); });
    ran.push_back(2);
    on_strand = on_strand && loop_->strand().running_in_this_thread();
  });
  EXPECT_TRUE(ran.empty());
  RunAll();
  EXPECT_THAT(ran, ElementsAre(1, 2, 3, 4));
  EXPECT_TRUE(on_strand);
}

TEST_F(FakeTimeTest, DestructionDropsTimersAndPostedTasksAndLeavesDescriptorsOpen) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  int ran = 0;
  loop_->Post([&] {
    loop_->AddTimer(milliseconds(5), [&] { ++ran; });
    ASSERT_TRUE(loop_->WatchFd(fds[0], EventLoop::kReadable, [&](int) { ++ran; }).ok());
  });
  io_.poll();
  loop_->Post([&] { ++ran; });
  loop_.reset();
  ASSERT_EQ(write(fds[1], "x", 1), 1);
  clock_->Advance(milliseconds(10));
  io_.restart();
  io_.poll();
  EXPECT_EQ(ran, 0);
  EXPECT_NE(fcntl(fds[0], F_GETFD), -1) << "the watched descriptor was closed";
  close(fds[0]);
  close(fds[1]);
}

class DescriptorTest : public FakeTimeTest {
 protected:
  void SetUp() override { ASSERT_EQ(pipe(fds_), 0); }
  void TearDown() override {
    close(fds_[0]);
    close(fds_[1]);
  }
  int fds_[2] = {-1, -1};
};

TEST_F(DescriptorTest, ReadinessIsReportedAndTheDescriptorIsNotOwned) {
  std::vector<int> reports;
  loop_->Post([&] {
    ASSERT_TRUE(loop_
                    ->WatchFd(fds_[0], EventLoop::kReadable,
                              [&](int events) {
                                reports.push_back(events);
                                char c;
                                ASSERT_EQ(read(fds_[0], &c, 1), 1);
                                loop_->WatchFd(fds_[0], 0, nullptr).IgnoreError();
                              })
                    .ok());
  });
  io_.poll();
  EXPECT_TRUE(reports.empty());  // nothing to read yet
  ASSERT_EQ(write(fds_[1], "x", 1), 1);
  RunFakeAsio(io_, *loop_, *clock_, [&] { return !reports.empty(); });
  EXPECT_THAT(reports, ElementsAre(EventLoop::kReadable));
  EXPECT_EQ(loop_->watched_fds(), 0u);
  // Unwatched: released, not closed.
  EXPECT_NE(fcntl(fds_[0], F_GETFD), -1);
  ASSERT_EQ(write(fds_[1], "y", 1), 1);
  char c;
  EXPECT_EQ(read(fds_[0], &c, 1), 1);
  EXPECT_EQ(c, 'y');
}

// Level semantics on an edge-triggered reactor: readiness that is there
// before the watch, and readiness left unconsumed, are reported (again).
TEST_F(DescriptorTest, ReadinessPresentBeforeTheWatchAndLeftUnreadIsReported) {
  ASSERT_EQ(write(fds_[1], "x", 1), 1);
  int reports = 0;
  loop_->Post([&] {
    ASSERT_TRUE(loop_
                    ->WatchFd(fds_[0], EventLoop::kReadable,
                              [&](int events) {
                                EXPECT_EQ(events, EventLoop::kReadable);
                                if (++reports == 3)
                                  loop_->WatchFd(fds_[0], 0, nullptr).IgnoreError();
                              })
                    .ok());
  });
  RunFakeAsio(io_, *loop_, *clock_, [&] { return reports >= 3; });
  EXPECT_EQ(reports, 3);
  io_.restart();
  io_.poll();
  EXPECT_EQ(reports, 3);  // unwatched: no more
}

TEST_F(DescriptorTest, ANewWatchReplacesTheEventsAndTheCallback) {
  std::vector<std::string> reports;
  loop_->Post([&] {
    ASSERT_TRUE(
        loop_->WatchFd(fds_[1], EventLoop::kReadable, [&](int) { reports.push_back("old"); }).ok());
    // The pipe's write end is writable at once.
    ASSERT_TRUE(loop_
                    ->WatchFd(fds_[1], EventLoop::kWritable,
                              [&](int events) {
                                reports.push_back(events == EventLoop::kWritable ? "writable"
                                                                                 : "other");
                                loop_->WatchFd(fds_[1], 0, nullptr).IgnoreError();
                              })
                    .ok());
  });
  RunFakeAsio(io_, *loop_, *clock_, [&] { return !reports.empty(); });
  io_.restart();
  io_.poll();
  EXPECT_THAT(reports, ElementsAre("writable"));
}

TEST_F(FakeTimeTest, BadDescriptorsAreRefused) {
  absl::Status negative;
  absl::Status closed;
  loop_->Post([&] {
    negative = loop_->WatchFd(-1, EventLoop::kReadable, [](int) {});
    closed = loop_->WatchFd(1000, EventLoop::kReadable, [](int) {});  // not open
  });
  io_.poll();
  EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(closed.code(), absl::StatusCode::kInternal) << closed;
  EXPECT_EQ(loop_->watched_fds(), 0u);
}

TEST(AsioEventLoopRealTime, ATimerWaitsItsDelayOnTheSteadyClock) {
  asio::io_context io;
  auto loop = std::make_shared<AsioEventLoop>(io);
  std::chrono::steady_clock::time_point fired;
  const auto start = std::chrono::steady_clock::now();
  loop->Post(
      [&] { loop->AddTimer(milliseconds(30), [&] { fired = std::chrono::steady_clock::now(); }); });
  io.run();  // returns once the timer ran: nothing else is left
  EXPECT_GE(fired - start, milliseconds(30));
  EXPECT_LT(fired - start, milliseconds(3000));
  EXPECT_EQ(loop->pending_timers(), 0u);
}

TEST(AsioEventLoopRealTime, CancellingTheLastTimerLetsRunReturn) {
  asio::io_context io;
  auto loop = std::make_shared<AsioEventLoop>(io);
  bool ran = false;
  const auto start = std::chrono::steady_clock::now();
  loop->Post([&] {
    const EventLoop::TimerId id = loop->AddTimer(std::chrono::seconds(30), [&] { ran = true; });
    loop->CancelTimer(id);
  });
  io.run();
  EXPECT_FALSE(ran);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

// Four threads run the context; tasks posted from two other threads, timers
// and pipe readiness all run on the strand, never two at once.
TEST(AsioEventLoopThreads, EverythingRunsOnTheStrandOneAtATime) {
  asio::io_context io;
  auto guard = asio::make_work_guard(io);
  auto loop = std::make_shared<AsioEventLoop>(io);
  std::atomic<int> inside{0};
  std::atomic<bool> overlapped{false};
  // Strand only: plain ints on purpose (TSan checks them).
  int counter = 0;
  int posts_ran = 0;
  int timers_added = 0;
  int timers_ran = 0;
  auto enter = [&] {
    if (inside.fetch_add(1) != 0) overlapped = true;
    if (!loop->strand().running_in_this_thread()) overlapped = true;
    ++counter;
    inside.fetch_sub(1);
  };
  std::vector<std::thread> runners;
  for (int i = 0; i < 4; ++i) runners.emplace_back([&] { io.run(); });

  constexpr int kPosts = 2000;
  std::vector<std::thread> posters;
  for (int p = 0; p < 2; ++p) {
    posters.emplace_back([&] {
      for (int i = 0; i < kPosts; ++i) {
        loop->Post([&] {
          enter();
          ++posts_ran;
          if (posts_ran % 10 == 0) {
            ++timers_added;
            loop->AddTimer(Duration::zero(), [&] {
              enter();
              ++timers_ran;
            });
          }
        });
      }
    });
  }
  for (auto& t : posters) t.join();
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  std::atomic<int> bytes{0};
  loop->Post([&] {
    ASSERT_TRUE(loop->WatchFd(fds[0], EventLoop::kReadable,
                              [&](int) {
                                enter();
                                char buf[64];
                                const ssize_t n = read(fds[0], buf, sizeof(buf));
                                if (n > 0) bytes += static_cast<int>(n);
                              })
                    .ok());
  });
  for (int i = 0; i < 50; ++i) ASSERT_EQ(write(fds[1], "x", 1), 1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::atomic<bool> drained{false};
  while (std::chrono::steady_clock::now() < deadline) {
    loop->Post([&] {
      if (bytes.load() == 50 && loop->pending_timers() == 0) drained = true;
    });
    if (drained.load()) break;
    std::this_thread::sleep_for(milliseconds(5));
  }
  loop->Post([&] { loop->WatchFd(fds[0], 0, nullptr).IgnoreError(); });
  guard.reset();
  for (auto& t : runners) t.join();
  EXPECT_TRUE(drained.load());
  EXPECT_FALSE(overlapped.load());
  EXPECT_EQ(bytes.load(), 50);
  EXPECT_EQ(posts_ran, 2 * kPosts);
  EXPECT_EQ(timers_added, 2 * kPosts / 10);
  EXPECT_EQ(timers_ran, timers_added);
  EXPECT_GE(counter, posts_ran + timers_ran + 1);
  loop.reset();
  close(fds[0]);
  close(fds[1]);
}

}  // namespace
}  // namespace saferetry

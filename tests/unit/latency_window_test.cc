// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "call/latency_window.h"

#include <gtest/gtest.h>

namespace saferetry {
namespace internal {
namespace {

using std::chrono::milliseconds;

TEST(LatencyWindowTest, FewerThanTwentySamplesGiveNoP95) {
  LatencyWindow w;
  EXPECT_FALSE(w.P95().has_value());
  for (int i = 1; i < static_cast<int>(LatencyWindow::kMinSamples); ++i) {
    w.Add(milliseconds(i));
    EXPECT_FALSE(w.P95().has_value()) << i << " samples";
  }
  w.Add(milliseconds(20));
  ASSERT_TRUE(w.P95().has_value());
  // 20 samples 1..20 ms: rank ceil(0.95 x 20) = 19.
  EXPECT_EQ(*w.P95(), milliseconds(19));
}

TEST(LatencyWindowTest, NearestRankOnKnownSamples) {
  LatencyWindow w;
  // 100 samples 1..100 ms, added in a scrambled order: rank 95.
  for (int i = 0; i < 100; ++i) w.Add(milliseconds((i * 37) % 100 + 1));
  EXPECT_EQ(w.size(), 100u);
  EXPECT_EQ(*w.P95(), milliseconds(95));
  // 101 samples: rank ceil(95.95) = 96, the 96th smallest.
  w.Add(milliseconds(0));
  EXPECT_EQ(*w.P95(), milliseconds(95));
  // 21 samples of 10 ms and one change: the cached value is recomputed.
  LatencyWindow v;
  for (int i = 0; i < 21; ++i) v.Add(milliseconds(10));
  EXPECT_EQ(*v.P95(), milliseconds(10));
  v.Add(milliseconds(500));
  // 22 samples: rank ceil(20.9) = 21, still 10 ms; the 22nd is the outlier.
  EXPECT_EQ(*v.P95(), milliseconds(10));
  v.Add(milliseconds(400));
  // 23 samples: rank ceil(21.85) = 22: 400 ms.
  EXPECT_EQ(*v.P95(), milliseconds(400));
}

TEST(LatencyWindowTest, RingWrapsAtFiveHundredTwelve) {
  LatencyWindow w;
  // 512 slow samples, then 512 fast ones overwrite all of them.
  for (std::size_t i = 0; i < LatencyWindow::kSize; ++i) w.Add(milliseconds(1000));
  EXPECT_EQ(*w.P95(), milliseconds(1000));
  for (std::size_t i = 0; i < LatencyWindow::kSize - 1; ++i) w.Add(milliseconds(5));
  EXPECT_EQ(w.size(), LatencyWindow::kSize);
  // One slow sample left of 512: below the 95th percentile's rank.
  EXPECT_EQ(*w.P95(), milliseconds(5));
  w.Add(milliseconds(5));
  EXPECT_EQ(*w.P95(), milliseconds(5));
  // New slow samples replace the oldest fast ones: 26 slow of 512 put the
  // p95 (rank ceil(486.4) = 487) on a slow one; 25 do not.
  for (int i = 0; i < 25; ++i) w.Add(milliseconds(1000));
  EXPECT_EQ(*w.P95(), milliseconds(5));
  w.Add(milliseconds(1000));
  EXPECT_EQ(*w.P95(), milliseconds(1000));
  EXPECT_EQ(w.size(), LatencyWindow::kSize);
}

}  // namespace
}  // namespace internal
}  // namespace saferetry

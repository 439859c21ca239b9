// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// internal::SlotMap against a model: seeded runs of inserts, removals,
// lookups of live, removed and never-issued ids, and storage given back;
// an id never 0, never names a value other than its own, and goes stale
// for good once its value is removed.

#include "common/slot_map.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/table_growth.h"

namespace saferetry {
namespace internal {
namespace {

using Map = SlotMap<std::unique_ptr<std::string>>;

TEST(SlotMapTest, AnIdFindsItsOwnValueUntilRemovedAndNeverAgain) {
  Map map;
  const Map::Id a = map.Insert(std::make_unique<std::string>("a"));
  const Map::Id b = map.Insert(std::make_unique<std::string>("b"));
  ASSERT_NE(a, 0u);
  ASSERT_NE(b, 0u);
  ASSERT_NE(map.IndexOf(a), Map::kNoIndex);
  EXPECT_EQ(*map.at(map.IndexOf(a)), "a");
  EXPECT_EQ(*map.at(map.IndexOf(b)), "b");
  EXPECT_EQ(map.size(), 2u);
  EXPECT_EQ(*map.Take(map.IndexOf(a)), "a");
  EXPECT_EQ(map.IndexOf(a), Map::kNoIndex);
  // The freed slot is reused under a new generation: the old id stays stale.
  const Map::Id c = map.Insert(std::make_unique<std::string>("c"));
  EXPECT_EQ(c & 0xffffffffu, a & 0xffffffffu);
  EXPECT_NE(c, a);
  EXPECT_EQ(map.IndexOf(a), Map::kNoIndex);
  EXPECT_EQ(*map.at(map.IndexOf(c)), "c");
  EXPECT_EQ(map.IndexOf(0), Map::kNoIndex);
  EXPECT_EQ(map.IndexOf((Map::Id{5} << 32) | 999), Map::kNoIndex);  // never issued
  // A slot names the id of its live value, and none once it is removed.
  EXPECT_EQ(map.IdAt(Map::SlotOf(c)), c);
  EXPECT_EQ(map.IdAt(Map::SlotOf(b)), b);
  map.Take(map.IndexOf(b));
  EXPECT_EQ(map.IdAt(Map::SlotOf(b)), 0u);
  EXPECT_EQ(map.IdAt(999), 0u);  // never made
}

TEST(SlotMapTest, IdsStayStaleAfterTheStorageIsGivenBack) {
  Map map;
  std::vector<Map::Id> old;
  for (int i = 0; i < 100; ++i) old.push_back(map.Insert(std::make_unique<std::string>("old")));
  map.TrimIfEmpty(10);  // not empty: nothing happens
  EXPECT_EQ(map.size(), 100u);
  for (Map::Id id : old) map.Take(map.IndexOf(id));
  map.TrimIfEmpty(10);
  std::vector<Map::Id> fresh;
  for (int i = 0; i < 100; ++i) fresh.push_back(map.Insert(std::make_unique<std::string>("new")));
  for (Map::Id id : old) EXPECT_EQ(map.IndexOf(id), Map::kNoIndex) << id;
  for (Map::Id id : fresh) EXPECT_EQ(*map.at(map.IndexOf(id)), "new");
}

// A table in flight grows by a quarter, not double: its slack stays under a
// quarter of what it holds.
TEST(TableGrowthTest, GrowsByAQuarterOrToWhatIsNeeded) {
  std::vector<int> v;
  v.reserve(100);
  ReserveGrowingByAQuarter(v, 100);  // room already: nothing moves
  EXPECT_EQ(v.capacity(), 100u);
  ReserveGrowingByAQuarter(v, 101);
  EXPECT_EQ(v.capacity(), 125u);
  ReserveGrowingByAQuarter(v, 1000);  // more than a quarter: what is needed
  EXPECT_EQ(v.capacity(), 1000u);
  Map map;
  for (int i = 0; i < 1000; ++i) map.Insert(std::make_unique<std::string>("x"));
  EXPECT_EQ(map.size(), 1000u);
}

TEST(SlotMapTest, SeededRunsAgreeWithAModel) {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    Map map;
    std::map<Map::Id, std::string> live;  // the model
    std::vector<Map::Id> issued;
    auto pick = [&](std::size_t n) {
      return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng);
    };
    for (int step = 0; step < 1500; ++step) {
      const std::size_t op = pick(10);
      if (op < 5 || issued.empty()) {
        const std::string value = std::to_string(step);
        const Map::Id id = map.Insert(std::make_unique<std::string>(value));
        ASSERT_NE(id, 0u);
        ASSERT_EQ(live.count(id), 0u) << "an id issued twice while live";
        for (Map::Id earlier : issued) ASSERT_NE(earlier, id) << "an id issued twice";
        live[id] = value;
        issued.push_back(id);
      } else if (op < 8) {
        const Map::Id id = issued[pick(issued.size())];
        const std::uint32_t index = map.IndexOf(id);
        if (live.count(id) == 0) {
          ASSERT_EQ(index, Map::kNoIndex);
          continue;
        }
        ASSERT_NE(index, Map::kNoIndex);
        ASSERT_EQ(*map.Take(index), live[id]);
        live.erase(id);
      } else if (op == 8) {
        // Empties the map now and then, so that its storage goes back.
        if (pick(20) == 0) {
          for (const auto& [id, value] : live) map.Take(map.IndexOf(id));
          live.clear();
        }
        map.TrimIfEmpty(4);
      }
      ASSERT_EQ(map.size(), live.size());
      for (Map::Id id : issued) {
        const std::uint32_t index = map.IndexOf(id);
        if (live.count(id) == 0) {
          ASSERT_EQ(index, Map::kNoIndex) << "a stale id " << id << " finds a value";
        } else {
          ASSERT_NE(index, Map::kNoIndex);
          ASSERT_EQ(*map.at(index), live[id]);
        }
      }
    }
    std::size_t seen = 0;
    map.ForEach([&](std::unique_ptr<std::string>& v) {
      ASSERT_NE(v, nullptr);
      ++seen;
    });
    EXPECT_EQ(seen, live.size());
  }
}

}  // namespace
}  // namespace internal
}  // namespace saferetry

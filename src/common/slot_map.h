// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Values addressed by 64-bit ids without a lookup table: an id is the
// value's slot index and the slot's generation. Finding a value is one
// bounds check and one compare; removing one makes its id stale for good
// (the slot's generation moves on, and slots made after the storage was
// given back start past every generation issued). The built-in event loop
// keeps its timers in one, the libcurl multi transport its transfers.

#ifndef SAFERETRY_COMMON_SLOT_MAP_H_
#define SAFERETRY_COMMON_SLOT_MAP_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/table_growth.h"

namespace saferetry {
namespace internal {

template <typename T>
class SlotMap {
 public:
  using Id = std::uint64_t;
  static constexpr std::uint32_t kNoIndex = 0xffffffffu;

  /// Stores `value`; its id is never 0.
  Id Insert(T&& value) {
    std::uint32_t index;
    if (!free_.empty()) {
      index = free_.back();
      free_.pop_back();
    } else {
      index = static_cast<std::uint32_t>(slots_.size());
      ReserveGrowingByAQuarter(slots_, slots_.size() + 1);
      slots_.emplace_back().generation = first_generation_;
    }
    Slot& s = slots_[index];
    s.value = std::move(value);
    s.live = true;
    ++live_;
    return IdOf(s.generation, index);
  }

  /// The slot an id was issued for, live or not (`IndexOf` checks).
  static std::uint32_t SlotOf(Id id) { return static_cast<std::uint32_t>(id & 0xffffffffu); }

  /// The index of the live value `id` names; kNoIndex for an id removed,
  /// never issued, or 0.
  std::uint32_t IndexOf(Id id) const {
    const std::uint32_t index = SlotOf(id);
    if (index >= slots_.size()) return kNoIndex;
    const Slot& s = slots_[index];
    return s.live && s.generation == static_cast<std::uint32_t>(id >> 32) ? index : kNoIndex;
  }

  /// The id of the live value at `index`; 0 when the slot holds none.
  Id IdAt(std::uint32_t index) const {
    if (index >= slots_.size() || !slots_[index].live) return 0;
    return IdOf(slots_[index].generation, index);
  }

  /// The live value at `index`.
  T& at(std::uint32_t index) { return slots_[index].value; }

  /// Removes the live value at `index` and returns it; its id goes stale.
  T Take(std::uint32_t index) {
    Slot& s = slots_[index];
    T value = std::move(s.value);
    s.value = T();
    s.live = false;
    if (++s.generation == 0) s.generation = 1;
    last_generation_ = std::max(last_generation_, s.generation);
    free_.push_back(index);
    --live_;
    return value;
  }

  std::size_t size() const { return live_; }
  bool empty() const { return live_ == 0; }

  /// With no value stored and more than `keep` slots made, gives back the
  /// storage (a burst's). Ids issued before stay stale.
  void TrimIfEmpty(std::size_t keep) {
    if (live_ != 0 || slots_.size() <= keep) return;
    std::vector<Slot>().swap(slots_);
    std::vector<std::uint32_t>().swap(free_);
    first_generation_ = last_generation_ + 1 == 0 ? 1 : last_generation_ + 1;
  }

  /// Calls `f(value)` for every live value.
  template <typename F>
  void ForEach(F&& f) {
    for (Slot& s : slots_) {
      if (s.live) f(s.value);
    }
  }

 private:
  static Id IdOf(std::uint32_t generation, std::uint32_t index) {
    return (static_cast<Id>(generation) << 32) | index;
  }
  struct Slot {
    T value{};
    std::uint32_t generation = 1;  // never 0: an id is never 0
    bool live = false;
  };
  std::vector<Slot> slots_;
  std::vector<std::uint32_t> free_;
  std::size_t live_ = 0;
  std::uint32_t first_generation_ = 1;  // of a slot made now
  std::uint32_t last_generation_ = 1;   // the highest a slot reached
};

}  // namespace internal
}  // namespace saferetry

#endif  // SAFERETRY_COMMON_SLOT_MAP_H_

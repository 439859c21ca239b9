// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Growth of the tables whose entries live as long as a call is in flight
// (the event loop's descriptors, the libcurl multi transport's transfers):
// by a quarter, not double. A doubled table holds up to twice the entries
// it needs, and at 10 000 calls in flight that slack alone was ~75 bytes of
// every call's memory; a quarter keeps it under 25 % for the same amortised
// cost per insert (each entry is moved a few times more while the table
// grows, never in steady state).

#ifndef SAFERETRY_COMMON_TABLE_GROWTH_H_
#define SAFERETRY_COMMON_TABLE_GROWTH_H_

#include <algorithm>
#include <cstddef>
#include <vector>

namespace saferetry {
namespace internal {

/// Makes room in `v` for `size` entries: when its capacity is short, grows
/// it to `size`, or by a quarter when that is more.
template <typename T>
void ReserveGrowingByAQuarter(std::vector<T>& v, std::size_t size) {
  if (size <= v.capacity()) return;
  v.reserve(std::max(size, v.capacity() + v.capacity() / 4));
}

}  // namespace internal
}  // namespace saferetry

#endif  // SAFERETRY_COMMON_TABLE_GROWTH_H_

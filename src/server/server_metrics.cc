// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/server/metrics.h"

namespace saferetry {
namespace server {

absl::Status AddServerGauges(IdempotencyStore& store, MetricsSnapshot* snapshot) {
  if (snapshot == nullptr) return absl::InvalidArgumentError("snapshot: must not be null");
  auto gauges = store.Gauges();
  if (!gauges.ok()) return gauges.status();
  MetricsSnapshot::ServerGauges g;
  g.processing = gauges->processing;
  g.oldest_processing_age = std::chrono::milliseconds(gauges->oldest_processing_age_ms);
  g.abandoned = gauges->abandoned;
  g.pending_confirmation = gauges->pending_confirmation;
  snapshot->server_gauges = g;
  return absl::OkStatus();
}

}  // namespace server
}  // namespace saferetry

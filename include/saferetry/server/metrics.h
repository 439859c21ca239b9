// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The server half's gauges in the library's metrics: read from an idempotency
// store into a `MetricsSnapshot`, exported by `ToPrometheusText` and the
// `PrometheusCollectable` beside the client's series.
//
// @code
//   saferetry::MetricsSnapshot s = metrics->Snapshot();   // or an empty one
//   (void)saferetry::server::AddServerGauges(*store, &s);
//   std::string text = saferetry::ToPrometheusText(s);
//   // saferetry_server_oldest_processing_age_seconds 12.5
//   // saferetry_server_pending_confirmation_records 1
// @endcode

#ifndef SAFERETRY_SERVER_METRICS_H_
#define SAFERETRY_SERVER_METRICS_H_

#include "absl/status/status.h"
#include "saferetry/metrics.h"
#include "saferetry/server/idempotency_store.h"

namespace saferetry {
namespace server {

/// Reads `store->Gauges()` into `snapshot->server_gauges`. A direct read of
/// the database (two small aggregate queries on an index): call it when
/// exporting, or after each sweep. Errors: the store's (the snapshot is then
/// unchanged); InvalidArgument naming "snapshot" when it is null.
absl::Status AddServerGauges(IdempotencyStore& store, MetricsSnapshot* snapshot);

}  // namespace server
}  // namespace saferetry

#endif  // SAFERETRY_SERVER_METRICS_H_

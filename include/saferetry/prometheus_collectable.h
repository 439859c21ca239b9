// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// saferetry's metrics in a prometheus-cpp registry (target
// saferetry::prometheus, built when prometheus-cpp is found). The
// collectable reads a `Metrics` snapshot at scrape time: recording stays the
// lock-free `MetricsListener`, and nothing is added to a `Family` per call.
// The families, labels and values are those of `ToPrometheusText`
// (docs/operations.md has the table).
//
// @code
//   auto metrics = std::make_shared<saferetry::Metrics>();
//   auto saferetry_metrics = std::make_shared<saferetry::PrometheusCollectable>(metrics);
//   prometheus::Exposer exposer("127.0.0.1:9464");
//   exposer.RegisterCollectable(registry);            // the service's own registry
//   exposer.RegisterCollectable(saferetry_metrics);   // next to it, same endpoint
// @endcode

#ifndef SAFERETRY_PROMETHEUS_COLLECTABLE_H_
#define SAFERETRY_PROMETHEUS_COLLECTABLE_H_

#include <functional>
#include <memory>
#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "saferetry/metrics.h"

namespace saferetry {

/// The snapshot as prometheus-cpp metric families: the same names (counters
/// ending in `_total`), label names and values, series order and numbers as
/// `ToPrometheusText`, only non-zero series. Histograms carry cumulative
/// buckets without the +Inf one (the serializer adds it from the count).
std::vector<::prometheus::MetricFamily> ToPrometheusFamilies(const MetricsSnapshot& snapshot);

/// A `prometheus::Collectable` over saferetry's metrics, registered with the
/// user's own `prometheus::Exposer` next to their `prometheus::Registry`
/// (prometheus-cpp 1.0's `Registry` holds families only). Thread-safe: a scrape may run
/// concurrently with calls being recorded. Never throws (a snapshot
/// function that throws is the caller's bug).
class PrometheusCollectable final : public ::prometheus::Collectable {
 public:
  /// Where each scrape's snapshot comes from, e.g. `Metrics::Snapshot` plus
  /// `AddCircuitBreakers` and `AddJournalGauge`.
  using SnapshotFunction = std::function<MetricsSnapshot()>;

  /// Collects `metrics->Snapshot()`; a null `metrics` collects nothing.
  explicit PrometheusCollectable(std::shared_ptr<const Metrics> metrics);
  /// Collects what `snapshot` returns; an empty function collects nothing.
  explicit PrometheusCollectable(SnapshotFunction snapshot);

  std::vector<::prometheus::MetricFamily> Collect() const override;

 private:
  SnapshotFunction snapshot_;
};

}  // namespace saferetry

#endif  // SAFERETRY_PROMETHEUS_COLLECTABLE_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Metrics: lock-free counters and fixed-bucket latency histograms, fed by a
// `CallListener`, read through a snapshot, exported as Prometheus text.
// Names follow OpenTelemetry's HTTP semantic conventions where they exist
// (`http.client.request.duration`, `http.response.status_code`,
// `http.request.resend_count`, `error.type`) and use `saferetry.*` elsewhere.
//
// @code
//   auto metrics = std::make_shared<saferetry::Metrics>();
//   saferetry::MetricsListener metrics_listener(metrics);    // share across calls
//   saferetry::TraceRecorder trace;                          // one per call
//   saferetry::ListenerChain chain({&metrics_listener, &trace});
//   call.listener = &chain;
//   ...
//   std::string text = saferetry::ToPrometheusText(metrics->Snapshot());
// @endcode

#ifndef SAFERETRY_METRICS_H_
#define SAFERETRY_METRICS_H_

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "saferetry/client.h"
#include "saferetry/result.h"

namespace saferetry {

/// Upper bounds (seconds) of the latency histograms: OpenTelemetry's
/// recommended buckets for `http.client.request.duration`.
inline constexpr std::array<double, 14> kLatencyBucketsSeconds = {
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10};

/// One histogram series. `counts[i]` counts observations in
/// (bounds[i-1], bounds[i]]; the last entry counts those above every bound
/// (+Inf). Not cumulative.
struct HistogramSnapshot {
  std::vector<double> bounds;
  std::vector<std::int64_t> counts;
  std::int64_t count = 0;
  /// Sum of the observations in nanoseconds (exact).
  std::int64_t sum_nanos = 0;
};

/// A point-in-time copy of the counters. Each counter is read atomically,
/// but the snapshot is not one consistent cut while calls are running.
struct MetricsSnapshot {
  // --- Counters ----------------------------------------------------------------
  /// `saferetry.calls`: finished calls, by (outcome, stop reason).
  std::map<std::pair<Outcome, StopReason>, std::int64_t> calls_by_outcome_and_stop;
  /// `saferetry.attempts`: sends of the request (not status queries), by
  /// `http.request.resend_count` (0 = first send).
  std::map<int, std::int64_t> attempts_by_resend_count;
  /// `saferetry.status_queries`: status queries sent.
  std::int64_t status_queries = 0;
  /// `saferetry.waits`: waits scheduled, by source (false = backoff,
  /// true = server hint).
  std::int64_t waits_backoff = 0;
  std::int64_t waits_server_hint = 0;
  /// `saferetry.unknown_resolved`: calls whose ambiguous attempt was settled
  /// by a status query's "found" answer.
  std::int64_t unknown_resolved_by_status_query = 0;

  // --- Histograms ----------------------------------------------------------------
  /// `http.client.request.duration`: every HTTP exchange (attempts and status
  /// queries), keyed by `http.response.status_code` ("503") or, with no
  /// response, by `error.type` (the transport status code name, e.g.
  /// "DEADLINE_EXCEEDED"). Keys are the label values.
  std::map<std::string, HistogramSnapshot> request_duration_by_status;
  /// `saferetry.call.duration`: whole calls, by outcome.
  std::map<Outcome, HistogramSnapshot> call_duration_by_outcome;

  // --- Derived ---------------------------------------------------------------
  /// All finished calls (`invalid_argument` included).
  std::int64_t calls = 0;
  /// Calls that sent at least one attempt.
  std::int64_t calls_started = 0;
  std::int64_t attempts = 0;
  /// attempts - first attempts.
  std::int64_t retries = 0;
  /// attempts / calls_started (0 when no call started): how much load the
  /// retries add. 1.0 = no retries.
  double amplification = 0;
  /// Calls stopped by the retry budget.
  std::int64_t budget_refusals = 0;
  /// Calls that ended UNKNOWN.
  std::int64_t unknown_outcomes = 0;
  std::map<StopReason, std::int64_t> stops_by_reason;
  std::map<Outcome, std::int64_t> calls_by_outcome;

  // --- Circuit breakers --------------------------------------------------------
  /// Each host's breaker (`saferetry.circuit.state`, `.refusals`,
  /// `.opened`), by key ("http://orders.internal:80"). Not filled by
  /// `Metrics::Snapshot`: the breakers live in their registry, so add them
  /// with `AddCircuitBreakers`. Empty without a registry.
  std::map<std::string, CircuitBreakerSnapshot> circuit_breakers;

  // --- Intent journal --------------------------------------------------------
  /// `saferetry.journal.oldest_unresolved_age`: how long ago the oldest
  /// unresolved intent (PENDING, SENT, UNKNOWN) was created; zero when there
  /// is none. Not filled by `Metrics::Snapshot`: read from the journal by
  /// `AddJournalGauge`. nullopt without a journal. Alert when it grows past
  /// the reconciler's period plus the longest deadline
  /// (docs/reconciliation.md).
  std::optional<std::chrono::milliseconds> journal_oldest_unresolved_age;
};

/// Thread-safe metrics. Recording is lock-free (relaxed atomics); a series
/// of the request-duration histogram is allocated the first time its label
/// value is seen. Use one `Metrics` per client (or per process).
class Metrics {
 public:
  Metrics();
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  /// Records one finished call: its outcome and stop reason, every attempt
  /// and status query, and its waits (from the evidence).
  void RecordCall(const CallResult& result);

  MetricsSnapshot Snapshot() const;

 private:
  struct Histogram;
  static constexpr int kOutcomes = static_cast<int>(Outcome::kUnknown) + 1;
  static constexpr int kStopReasons = kStopReasonCount;
  static constexpr int kStatusSlots = 600;  // HTTP status codes 0..599
  static constexpr int kErrorSlots = 17;    // absl status codes 0..16
  static constexpr int kResendSlots = 16;

  Histogram& RequestSeries(int slot);

  std::array<std::atomic<std::int64_t>, kOutcomes * kStopReasons> calls_{};
  std::array<std::atomic<std::int64_t>, kResendSlots> attempts_{};
  std::atomic<std::int64_t> status_queries_{0};
  std::atomic<std::int64_t> waits_backoff_{0};
  std::atomic<std::int64_t> waits_hint_{0};
  std::atomic<std::int64_t> resolved_{0};
  std::array<std::atomic<Histogram*>, kStatusSlots + kErrorSlots> request_duration_{};
  std::array<std::unique_ptr<Histogram>, kOutcomes> call_duration_;
};

/// Feeds a `Metrics` from the calls it is attached to. Stateless, so one
/// listener may be shared by every call and thread.
class MetricsListener final : public CallListener {
 public:
  explicit MetricsListener(std::shared_ptr<Metrics> metrics) : metrics_(std::move(metrics)) {}
  void OnFinish(const CallResult& result) override;

 private:
  std::shared_ptr<Metrics> metrics_;
};

/// Fans every hook out to several listeners, in the order given, since
/// `CallOptions::listener` holds one. Null entries are skipped. The chain
/// does not own the listeners; they must outlive it. Thread-safe to call
/// when the listeners are (the chain itself is immutable after setup).
class ListenerChain final : public CallListener {
 public:
  ListenerChain() = default;
  explicit ListenerChain(std::vector<CallListener*> listeners) : listeners_(std::move(listeners)) {}
  /// Appends a listener (not while a call is running).
  void Add(CallListener* listener) { listeners_.push_back(listener); }

  void OnAttemptStart(int number, bool is_status_query) override;
  void OnAttemptEnd(const AttemptEvidence& evidence) override;
  void OnWaitScheduled(Duration delay, bool from_server_hint) override;
  void OnFinish(const CallResult& result) override;

 private:
  std::vector<CallListener*> listeners_;
};

/// Copies every breaker of `registry`, as of `now` (read it from the
/// client's clock), into `snapshot->circuit_breakers`: a direct read of the
/// registry, not a listener, so the state is current even for a host no call
/// has reached lately (an open breaker turns half-open by time alone).
/// Thread-safe.
///
/// @code
///   saferetry::MetricsSnapshot s = metrics->Snapshot();
///   saferetry::AddCircuitBreakers(*options.circuit_breakers, clock->Now(), &s);
///   std::string text = saferetry::ToPrometheusText(s);
/// @endcode
void AddCircuitBreakers(const CircuitBreakerRegistry& registry, TimePoint now,
                        MetricsSnapshot* snapshot);

/// Reads the age of the oldest unresolved intent from `journal` into
/// `snapshot->journal_oldest_unresolved_age` (zero when there is none). A
/// direct read, like `AddCircuitBreakers`; call it when exporting, or from
/// the reconciler after each run. Errors: the journal's (the snapshot is
/// then unchanged). Thread-safe.
///
/// @code
///   saferetry::MetricsSnapshot s = metrics->Snapshot();
///   (void)saferetry::AddJournalGauge(*options.journal, &s);
///   std::string text = saferetry::ToPrometheusText(s);
/// @endcode
absl::Status AddJournalGauge(IntentJournal& journal, MetricsSnapshot* snapshot);

/// The snapshot in the Prometheus text exposition format, version 0.0.4:
/// `# HELP` and `# TYPE` lines, dots in names and labels become
/// underscores, counters end in `_total`, histograms in `_seconds` with
/// cumulative `_bucket{le="..."}`, `_sum` and `_count`. Only non-zero series
/// are written, in a fixed order. Circuit breakers: the gauge
/// `saferetry_circuit_state{host="..."}` (0 closed, 1 half-open, 2 open) for
/// every host, and the counters `saferetry_circuit_refusals_total` and
/// `saferetry_circuit_opened_total` by host when non-zero. The journal:
/// the gauge `saferetry_journal_oldest_unresolved_age_seconds` when
/// `journal_oldest_unresolved_age` is set.
std::string ToPrometheusText(const MetricsSnapshot& snapshot);

}  // namespace saferetry

#endif  // SAFERETRY_METRICS_H_

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
//   // One listener per endpoint (method, host and port, never a path), shared
//   // across calls; `MetricsListener(metrics)` records without those labels.
//   saferetry::MetricsListener metrics_listener(
//       metrics, saferetry::EndpointOfUrl("POST", "https://orders.internal/orders"));
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
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "saferetry/call_listener.h"
#include "saferetry/circuit_breaker.h"
#include "saferetry/journal.h"
#include "saferetry/result.h"

namespace saferetry {

/// Upper bounds (seconds) of the latency histograms: OpenTelemetry's
/// recommended buckets for `http.client.request.duration`.
inline constexpr std::array<double, 14> kLatencyBucketsSeconds = {
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10};

/// The phases measured per exchange (`Phase` less `kNone`): dns, connect,
/// tls, request_write, first_byte, transfer.
inline constexpr int kPhaseCount = static_cast<int>(Phase::kTransfer);

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

/// Upper bounds of the per-call count histograms (`saferetry.call.attempts`,
/// `.retries`, `.hedges`).
inline constexpr std::array<std::int64_t, 7> kCountBuckets = {0, 1, 2, 3, 4, 5, 10};

/// One count histogram series (attempts, retries or hedges per call), laid
/// out as `HistogramSnapshot`: `counts[i]` counts values in
/// (bounds[i-1], bounds[i]], the last entry those above every bound.
struct CountHistogramSnapshot {
  std::vector<std::int64_t> bounds;
  std::vector<std::int64_t> counts;
  std::int64_t count = 0;
  std::int64_t sum = 0;
};

/// The endpoint attributes of a series: OpenTelemetry's
/// `http.request.method`, `server.address` and `server.port`. Host and port
/// only, never a path or a query. All empty/zero for series recorded
/// without an endpoint (`MetricsListener(metrics)`).
struct MetricsEndpoint {
  /// One of GET, HEAD, POST, PUT, DELETE, CONNECT, OPTIONS, TRACE, PATCH
  /// (case-sensitive), else "_OTHER", as OpenTelemetry says.
  std::string method;
  /// The host, lower case; "_other" for a server past
  /// `MetricsOptions::max_servers`.
  std::string server_address;
  /// The port (80/443 when the URL has none); 0 for the "_other" series.
  int server_port = 0;

  friend bool operator==(const MetricsEndpoint& a, const MetricsEndpoint& b) {
    return a.method == b.method && a.server_address == b.server_address &&
           a.server_port == b.server_port;
  }
};

/// The endpoint of a request to `url`: `method` as given (normalised when
/// registered), the URL's host in lower case and its port (80 for http, 443
/// for https when absent). Userinfo, path, query and fragment are dropped.
/// An URL that is not absolute http(s) gives an empty address and port 0.
MetricsEndpoint EndpointOfUrl(std::string_view method, std::string_view url);

/// One series of `http.client.request.duration`.
struct RequestDurationSeries {
  MetricsEndpoint endpoint;
  /// `http.response.status_code`, when a response arrived.
  std::optional<int> status_code;
  /// `error.type`: the status code ("503") for a response >= 400, the
  /// transport status code name ("DEADLINE_EXCEEDED") without a response,
  /// empty otherwise.
  std::string error_type;
  HistogramSnapshot histogram;
};

/// The per-call retry series of one endpoint (gRPC proposal A96's
/// `attempt.started` by attempt type and `call.retry_delay`, and the
/// per-call attempts, retries and hedges of its predecessor A45).
struct EndpointCallSeries {
  MetricsEndpoint endpoint;
  /// `saferetry.client.attempt.started` by `saferetry.attempt_type`: the
  /// first send of a call, a send after an earlier one ended (retry), a send
  /// while an earlier one was still in flight (hedge). Status queries
  /// excluded.
  std::int64_t attempts_original = 0;
  std::int64_t attempts_retry = 0;
  std::int64_t attempts_hedge = 0;
  /// `saferetry.call.attempts`, `.retries`, `.hedges`: one value per call
  /// that sent at least one attempt (zeros included).
  CountHistogramSnapshot attempts_per_call;
  CountHistogramSnapshot retries_per_call;
  CountHistogramSnapshot hedges_per_call;
  /// `saferetry.call.retry_delay`: per call with more than one exchange
  /// (attempt or status query), the time between its first exchange's start
  /// and its last one's end during which none was in flight.
  HistogramSnapshot retry_delay;
  /// `saferetry.client.attempt.phase.duration` by `saferetry.phase`: per
  /// exchange (attempt or status query), the time it spent in each phase it
  /// went through (`PhaseTimings::Spent`), at index `Phase` - 1 (dns first,
  /// transfer last). A phase not reached, or not needed (the connect of a
  /// kept-alive connection), is not observed (docs/operations.md).
  std::array<HistogramSnapshot, kPhaseCount> phase_duration;
  /// `saferetry.client.attempt.timeouts` by `saferetry.phase`: exchanges
  /// whose time ran out, by the phase it ran out in (same index).
  std::array<std::int64_t, kPhaseCount> timeouts_by_phase{};
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
  /// queries), by endpoint (in the order the endpoints were registered, the
  /// unlabelled one first), then status code ascending, then error type.
  std::vector<RequestDurationSeries> request_duration;
  /// The same summed over endpoints, keyed by `http.response.status_code`
  /// ("503") or, with no response, by `error.type` (e.g.
  /// "DEADLINE_EXCEEDED").
  std::map<std::string, HistogramSnapshot> request_duration_by_status;
  /// The per-call retry series, by endpoint (same order); endpoints with no
  /// finished call are left out.
  std::vector<EndpointCallSeries> call_series;
  /// `saferetry.metrics.servers_folded`: endpoint registrations whose
  /// server (address and port) was past `MetricsOptions::max_servers` and
  /// so recorded as `server.address` "_other".
  std::int64_t servers_folded = 0;
  /// `saferetry.call.duration`: whole calls, by outcome.
  std::map<Outcome, HistogramSnapshot> call_duration_by_outcome;

  // --- Derived ---------------------------------------------------------------
  /// All finished calls (`invalid_argument` included).
  std::int64_t calls = 0;
  /// Calls that sent at least one attempt.
  std::int64_t calls_started = 0;
  std::int64_t attempts = 0;
  /// attempts - first attempts (hedges included).
  std::int64_t retries = 0;
  /// Sends made while an earlier send of the same call was in flight.
  std::int64_t hedges = 0;
  /// attempts / calls_started (0 when no call started): how much load the
  /// retries add. 1.0 = no retries.
  double amplification = 0;
  /// Calls stopped by the retry budget.
  std::int64_t budget_refusals = 0;
  /// The same calls by the budget's name for the refusal
  /// (`CallResult::budget_refusal`: "ratio_exhausted", a name of your own
  /// budget, ...). The first `Metrics::kMaxRefusalNames` names seen are kept;
  /// calls refused under any later name count under "_other".
  std::map<std::string, std::int64_t> budget_refusals_by_name;
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

  // --- Server half -----------------------------------------------------------
  /// The idempotency store's gauges (`saferetry.server.*`): records
  /// PROCESSING, the age of the oldest (alert past a few leases: seed 000
  /// §七), those whose lease ran out, and those waiting for a person's
  /// decision. Not filled by `Metrics::Snapshot`: read from the store by
  /// `saferetry::server::AddServerGauges` (saferetry/server/metrics.h).
  /// nullopt without a store.
  struct ServerGauges {
    std::int64_t processing = 0;
    std::chrono::milliseconds oldest_processing_age{0};
    std::int64_t abandoned = 0;
    std::int64_t pending_confirmation = 0;
  };
  std::optional<ServerGauges> server_gauges;
};

/// Bounds on the label values of a `Metrics`.
struct MetricsOptions {
  /// Distinct servers (`server.address` and `server.port` pairs) with series
  /// of their own, >= 0. Endpoints of further servers are recorded as
  /// `server.address` "_other" (port 0) and counted in
  /// `MetricsSnapshot::servers_folded`. Default 64. Methods are bounded by
  /// OpenTelemetry's list, so an endpoint is one of 10 methods per server.
  int max_servers = 64;
};

/// A registered endpoint of a `Metrics` (`Metrics::Register`); cheap to
/// copy. The default value records without endpoint labels.
class MetricsRoute {
 public:
  MetricsRoute() = default;

 private:
  friend class Metrics;
  explicit MetricsRoute(int index) : index_(index) {}
  int index_ = 0;
};

/// Thread-safe metrics. Recording is lock-free (relaxed atomics) and
/// allocation-free once a series exists: an endpoint's series are allocated
/// when it is registered, a request-duration series the first time its
/// status or error is seen for that endpoint. Use one `Metrics` per client
/// (or per process).
class Metrics {
 public:
  /// `options.max_servers` below 0 is taken as 0.
  explicit Metrics(MetricsOptions options = {});
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  /// The route of `endpoint`'s series, created on the first registration of
  /// its (method, server) and the same ever after. Takes a lock and may
  /// allocate: register once per endpoint, not per call. The method is
  /// normalised (see `MetricsEndpoint::method`); a server past the cap gets
  /// the "_other" route. Thread-safe.
  MetricsRoute Register(const MetricsEndpoint& endpoint);

  /// Records one finished call: its outcome and stop reason, every attempt
  /// and status query, and its waits (from the evidence), without endpoint
  /// labels.
  void RecordCall(const CallResult& result) { RecordCall(MetricsRoute(), result); }
  /// The same, under `route`'s endpoint labels.
  void RecordCall(MetricsRoute route, const CallResult& result);

  MetricsSnapshot Snapshot() const;

  /// How many distinct budget refusal names are counted apart
  /// (`MetricsSnapshot::budget_refusals_by_name`); further names fold into
  /// "_other", so a budget cannot grow the label set without bound.
  static constexpr std::size_t kMaxRefusalNames = 16;

 private:
  struct Histogram;
  struct CountHistogram;
  struct RouteSeries;
  static constexpr int kOutcomes = static_cast<int>(Outcome::kUnknown) + 1;
  static constexpr int kStopReasons = kStopReasonCount;
  static constexpr int kStatusSlots = 600;  // HTTP status codes 0..599
  static constexpr int kErrorSlots = 17;    // absl status codes 0..16
  static constexpr int kResendSlots = 16;

  static constexpr int kMethods = 10;

  static Histogram& RequestSeries(RouteSeries& route, int slot);
  RouteSeries& RouteAt(int index);

  std::array<std::atomic<std::int64_t>, kOutcomes * kStopReasons> calls_{};
  std::array<std::atomic<std::int64_t>, kResendSlots> attempts_{};
  std::atomic<std::int64_t> status_queries_{0};
  std::atomic<std::int64_t> waits_backoff_{0};
  std::atomic<std::int64_t> waits_hint_{0};
  std::atomic<std::int64_t> resolved_{0};
  std::array<std::unique_ptr<Histogram>, kOutcomes> call_duration_;
  std::atomic<std::int64_t> servers_folded_{0};
  const int max_servers_;
  // Route 0: no endpoint; route 1 + server * kMethods + method otherwise,
  // server `max_servers_` being "_other". Published with release under mu_.
  std::unique_ptr<std::atomic<RouteSeries*>[]> routes_;
  const int route_count_;
  mutable std::mutex mu_;
  // (address, port) by server index; guarded by mu_.
  std::vector<std::pair<std::string, int>> servers_;
  // The order the routes were created in; guarded by mu_.
  std::vector<int> route_order_;
  // Budget refusals by name; guarded by mu_ (a refusal ends a call, so the
  // lock is taken at most once per call, and only by refused calls).
  std::map<std::string, std::int64_t> refusals_by_name_;
};

/// Feeds a `Metrics` from the calls it is attached to. Immutable after
/// construction, so one listener may be shared by every call and thread.
/// The hooks do not see the request: a listener built with an endpoint
/// labels every call it records with that endpoint, so use one listener per
/// endpoint (method and server) the calls go to.
class MetricsListener final : public CallListener {
 public:
  /// Records without endpoint labels.
  explicit MetricsListener(std::shared_ptr<Metrics> metrics) : metrics_(std::move(metrics)) {}
  /// Records under `endpoint` (registered now, once).
  MetricsListener(std::shared_ptr<Metrics> metrics, const MetricsEndpoint& endpoint)
      : metrics_(std::move(metrics)),
        route_(metrics_ != nullptr ? metrics_->Register(endpoint) : MetricsRoute()) {}
  void OnFinish(const CallResult& result) override;

 private:
  std::shared_ptr<Metrics> metrics_;
  MetricsRoute route_;
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
/// `journal_oldest_unresolved_age` is set. The server half: the gauges
/// `saferetry_server_processing_records`,
/// `saferetry_server_oldest_processing_age_seconds`,
/// `saferetry_server_abandoned_records` and
/// `saferetry_server_pending_confirmation_records` when `server_gauges` is
/// set.
std::string ToPrometheusText(const MetricsSnapshot& snapshot);

}  // namespace saferetry

#endif  // SAFERETRY_METRICS_H_

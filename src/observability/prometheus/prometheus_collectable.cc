// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Mirrors ToPrometheusText (src/observability/metrics.cc) family by family: same names,
// label names, order and non-zero rule. prometheus_collectable_test checks
// that the two agree number for number.

#include "saferetry/prometheus_collectable.h"

#include <string>
#include <utility>

namespace saferetry {
namespace {

using ::prometheus::ClientMetric;
using ::prometheus::MetricFamily;
using ::prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

constexpr double kNanosPerSecond = 1e9;

MetricFamily Family(std::string name, std::string help, MetricType type) {
  MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

Labels EndpointLabels(const MetricsEndpoint& e) {
  if (e.method.empty()) return {};
  return {{"http_request_method", e.method},
          {"server_address", e.server_address},
          {"server_port", std::to_string(e.server_port)}};
}

Labels With(Labels labels, std::string name, std::string value) {
  labels.push_back({std::move(name), std::move(value)});
  return labels;
}

void AddValue(MetricFamily& f, Labels labels, double value) {
  ClientMetric m;
  m.label = std::move(labels);
  if (f.type == MetricType::Gauge) {
    m.gauge.value = value;
  } else {
    m.counter.value = value;
  }
  f.metric.push_back(std::move(m));
}

void AddHistogram(MetricFamily& f, Labels labels, const HistogramSnapshot& h) {
  ClientMetric m;
  m.label = std::move(labels);
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < h.bounds.size(); ++i) {
    cumulative += static_cast<std::uint64_t>(h.counts[i]);
    m.histogram.bucket.push_back({cumulative, h.bounds[i]});
  }
  m.histogram.sample_count = static_cast<std::uint64_t>(h.count);
  m.histogram.sample_sum = static_cast<double>(h.sum_nanos) / kNanosPerSecond;
  f.metric.push_back(std::move(m));
}

void AddCountHistogram(MetricFamily& f, Labels labels, const CountHistogramSnapshot& h) {
  ClientMetric m;
  m.label = std::move(labels);
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < h.bounds.size(); ++i) {
    cumulative += static_cast<std::uint64_t>(h.counts[i]);
    m.histogram.bucket.push_back({cumulative, static_cast<double>(h.bounds[i])});
  }
  m.histogram.sample_count = static_cast<std::uint64_t>(h.count);
  m.histogram.sample_sum = static_cast<double>(h.sum);
  f.metric.push_back(std::move(m));
}

void Counter(std::vector<MetricFamily>& out, const char* name, const char* help, std::int64_t n) {
  if (n == 0) return;
  MetricFamily f = Family(name, help, MetricType::Counter);
  AddValue(f, {}, static_cast<double>(n));
  out.push_back(std::move(f));
}

}  // namespace

std::vector<MetricFamily> ToPrometheusFamilies(const MetricsSnapshot& s) {
  std::vector<MetricFamily> out;
  if (!s.calls_by_outcome_and_stop.empty()) {
    MetricFamily f =
        Family("saferetry_calls_total", "Logical calls finished, by outcome and stop reason.",
               MetricType::Counter);
    for (const auto& [key, n] : s.calls_by_outcome_and_stop) {
      AddValue(f,
               {{"saferetry_outcome", std::string(OutcomeName(key.first))},
                {"saferetry_stop_reason", std::string(StopReasonName(key.second))}},
               static_cast<double>(n));
    }
    out.push_back(std::move(f));
  }
  if (!s.attempts_by_resend_count.empty()) {
    MetricFamily f =
        Family("saferetry_attempts_total",
               "Sends of the request (status queries excluded), by resend count (0 = first send).",
               MetricType::Counter);
    for (const auto& [resend, n] : s.attempts_by_resend_count) {
      AddValue(f, {{"http_request_resend_count", std::to_string(resend)}}, static_cast<double>(n));
    }
    out.push_back(std::move(f));
  }
  Counter(out, "saferetry_retries_total", "Sends of the request after the first.", s.retries);
  Counter(out, "saferetry_status_queries_total",
          "Status queries sent to resolve an ambiguous attempt.", s.status_queries);
  Counter(out, "saferetry_budget_refusals_total", "Calls stopped because the retry budget refused.",
          s.budget_refusals);
  if (!s.budget_refusals_by_name.empty()) {
    MetricFamily f =
        Family("saferetry_budget_refusals_by_name_total",
               "Calls stopped because the retry budget refused, by the budget's name for why.",
               MetricType::Counter);
    for (const auto& [refusal, n] : s.budget_refusals_by_name) {
      AddValue(f, {{"saferetry_budget_refusal", refusal}}, static_cast<double>(n));
    }
    out.push_back(std::move(f));
  }
  Counter(out, "saferetry_unknown_outcomes_total", "Calls that ended UNKNOWN.", s.unknown_outcomes);
  Counter(out, "saferetry_unknown_resolved_total",
          "Calls whose ambiguous attempt a status query resolved as found.",
          s.unknown_resolved_by_status_query);
  if (s.waits_backoff + s.waits_server_hint > 0) {
    MetricFamily f = Family("saferetry_waits_total",
                            "Waits before a retry or status query, by source of the delay.",
                            MetricType::Counter);
    if (s.waits_backoff > 0) {
      AddValue(f, {{"saferetry_delay_source", "backoff"}}, static_cast<double>(s.waits_backoff));
    }
    if (s.waits_server_hint > 0) {
      AddValue(f, {{"saferetry_delay_source", "server_hint"}},
               static_cast<double>(s.waits_server_hint));
    }
    out.push_back(std::move(f));
  }
  if (!s.request_duration.empty()) {
    MetricFamily f = Family("http_client_request_duration_seconds",
                            "Duration of HTTP client requests (every attempt and status query).",
                            MetricType::Histogram);
    for (const RequestDurationSeries& r : s.request_duration) {
      Labels labels = EndpointLabels(r.endpoint);
      if (r.status_code.has_value()) {
        labels =
            With(std::move(labels), "http_response_status_code", std::to_string(*r.status_code));
      }
      if (!r.error_type.empty()) labels = With(std::move(labels), "error_type", r.error_type);
      AddHistogram(f, std::move(labels), r.histogram);
    }
    out.push_back(std::move(f));
  }
  if (!s.call_duration_by_outcome.empty()) {
    MetricFamily f =
        Family("saferetry_call_duration_seconds",
               "Duration of logical calls, retries and waits included.", MetricType::Histogram);
    for (const auto& [o, h] : s.call_duration_by_outcome) {
      AddHistogram(f, {{"saferetry_outcome", std::string(OutcomeName(o))}}, h);
    }
    out.push_back(std::move(f));
  }
  if (!s.call_series.empty()) {
    MetricFamily started = Family("saferetry_client_attempt_started_total",
                                  "Sends of the request by attempt type (original, retry, hedge).",
                                  MetricType::Counter);
    for (const EndpointCallSeries& c : s.call_series) {
      const std::pair<const char*, std::int64_t> types[] = {{"original", c.attempts_original},
                                                            {"retry", c.attempts_retry},
                                                            {"hedge", c.attempts_hedge}};
      for (const auto& [type, n] : types) {
        if (n == 0) continue;
        AddValue(started, With(EndpointLabels(c.endpoint), "saferetry_attempt_type", type),
                 static_cast<double>(n));
      }
    }
    if (!started.metric.empty()) out.push_back(std::move(started));
    const auto per_call = [&out, &s](const char* name, const char* help,
                                     CountHistogramSnapshot EndpointCallSeries::*field) {
      MetricFamily f = Family(name, help, MetricType::Histogram);
      for (const EndpointCallSeries& c : s.call_series) {
        if ((c.*field).count == 0) continue;
        AddCountHistogram(f, EndpointLabels(c.endpoint), c.*field);
      }
      if (!f.metric.empty()) out.push_back(std::move(f));
    };
    per_call("saferetry_call_attempts", "Sends of the request per call.",
             &EndpointCallSeries::attempts_per_call);
    per_call("saferetry_call_retries", "Sends after an earlier one ended, per call.",
             &EndpointCallSeries::retries_per_call);
    per_call("saferetry_call_hedges", "Sends while an earlier one was in flight, per call.",
             &EndpointCallSeries::hedges_per_call);
    MetricFamily delay =
        Family("saferetry_call_retry_delay_seconds",
               "Time per call during which no attempt or status query was in flight.",
               MetricType::Histogram);
    for (const EndpointCallSeries& c : s.call_series) {
      if (c.retry_delay.count == 0) continue;
      AddHistogram(delay, EndpointLabels(c.endpoint), c.retry_delay);
    }
    if (!delay.metric.empty()) out.push_back(std::move(delay));
    MetricFamily phases =
        Family("saferetry_client_attempt_phase_duration_seconds",
               "Time spent per phase of an attempt or status query (dns, connect, tls, "
               "request_write, first_byte, transfer).",
               MetricType::Histogram);
    MetricFamily timeouts =
        Family("saferetry_client_attempt_timeouts_total",
               "Attempts and status queries whose time ran out, by the phase it ran out in.",
               MetricType::Counter);
    for (const EndpointCallSeries& c : s.call_series) {
      for (std::size_t p = 0; p < kPhaseCount; ++p) {
        const std::string phase(PhaseName(static_cast<Phase>(p + 1)));
        if (c.phase_duration[p].count > 0) {
          AddHistogram(phases, With(EndpointLabels(c.endpoint), "saferetry_phase", phase),
                       c.phase_duration[p]);
        }
        if (c.timeouts_by_phase[p] > 0) {
          AddValue(timeouts, With(EndpointLabels(c.endpoint), "saferetry_phase", phase),
                   static_cast<double>(c.timeouts_by_phase[p]));
        }
      }
    }
    if (!phases.metric.empty()) out.push_back(std::move(phases));
    if (!timeouts.metric.empty()) out.push_back(std::move(timeouts));
  }
  Counter(out, "saferetry_metrics_servers_folded_total",
          "Endpoint registrations past the server cap, recorded as server_address=\"_other\".",
          s.servers_folded);
  if (!s.circuit_breakers.empty()) {
    MetricFamily state =
        Family("saferetry_circuit_state",
               "Circuit breaker state by host: 0 closed, 1 half-open, 2 open.", MetricType::Gauge);
    MetricFamily refusals =
        Family("saferetry_circuit_refusals_total", "Sends refused by the host's circuit breaker.",
               MetricType::Counter);
    MetricFamily opened = Family("saferetry_circuit_opened_total",
                                 "Times the host's circuit breaker opened.", MetricType::Counter);
    for (const auto& [host, b] : s.circuit_breakers) {
      AddValue(state, {{"host", host}}, static_cast<double>(static_cast<int>(b.state)));
      if (b.refusals != 0) AddValue(refusals, {{"host", host}}, static_cast<double>(b.refusals));
      if (b.opened != 0) AddValue(opened, {{"host", host}}, static_cast<double>(b.opened));
    }
    out.push_back(std::move(state));
    if (!refusals.metric.empty()) out.push_back(std::move(refusals));
    if (!opened.metric.empty()) out.push_back(std::move(opened));
  }
  if (s.journal_oldest_unresolved_age.has_value()) {
    MetricFamily f =
        Family("saferetry_journal_oldest_unresolved_age_seconds",
               "Age of the oldest unresolved journaled intent (0 when none).", MetricType::Gauge);
    AddValue(f, {}, static_cast<double>(s.journal_oldest_unresolved_age->count()) / 1000.0);
    out.push_back(std::move(f));
  }
  if (s.server_gauges.has_value()) {
    const MetricsSnapshot::ServerGauges& g = *s.server_gauges;
    auto gauge = [&](const char* name, const char* help, double value) {
      MetricFamily f = Family(name, help, MetricType::Gauge);
      AddValue(f, {}, value);
      out.push_back(std::move(f));
    };
    gauge("saferetry_server_processing_records", "Idempotency records PROCESSING.",
          static_cast<double>(g.processing));
    gauge("saferetry_server_oldest_processing_age_seconds",
          "Age of the oldest PROCESSING idempotency record (0 when none).",
          static_cast<double>(g.oldest_processing_age.count()) / 1000.0);
    gauge("saferetry_server_abandoned_records",
          "PROCESSING idempotency records whose lease ran out.", static_cast<double>(g.abandoned));
    gauge("saferetry_server_pending_confirmation_records",
          "Idempotency records waiting for a person's decision.",
          static_cast<double>(g.pending_confirmation));
  }
  return out;
}

PrometheusCollectable::PrometheusCollectable(std::shared_ptr<const Metrics> metrics) {
  if (metrics != nullptr) {
    snapshot_ = [metrics = std::move(metrics)] { return metrics->Snapshot(); };
  }
}

PrometheusCollectable::PrometheusCollectable(SnapshotFunction snapshot)
    : snapshot_(std::move(snapshot)) {}

std::vector<MetricFamily> PrometheusCollectable::Collect() const {
  if (!snapshot_) return {};
  return ToPrometheusFamilies(snapshot_());
}

}  // namespace saferetry

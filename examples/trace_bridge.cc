// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The shape of an OpenTelemetry bridge, without the OpenTelemetry SDK: an
// `AttemptTracer` that opens one client span per attempt and status query
// under the caller's span, puts that span's context on the wire, and ends it
// with the attempt's outcome. A real bridge does the same with
// `tracer->StartSpan(method, {kind: kClient, parent: caller})` in
// `OnAttemptStart` and `span->End()` in `OnAttemptEnd`.
//
// The call: an order placed on an in-process server that answers 503 first,
// then commits and loses the response; a status query finds it. No network,
// fake time: the run is the same every time. The exit code is 0 when the
// server saw each span's context exactly once, every one in the caller's
// trace, and 1 otherwise.

#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "saferetry/client.h"
#include "saferetry/testing/fake_clock.h"
#include "saferetry/testing/fake_random.h"
#include "saferetry/testing/simulated_order_server.h"
#include "saferetry/trace_context.h"

namespace {

// One client span, as a bridge would hold it until it ends.
struct Span {
  std::string name;  // the method, as OpenTelemetry names HTTP client spans
  saferetry::TraceParent context;
  std::string parent_span_id;
  std::map<std::string, std::string> attributes;
};

// The bridge. Span ids come from a counter here; a real one draws them from
// the SDK's id generator.
class SpanPerAttempt final : public saferetry::AttemptTracer {
 public:
  std::optional<saferetry::AttemptSpan> OnAttemptStart(
      const saferetry::AttemptSpanStart& start) override {
    Span span;
    span.name = std::string(start.method);
    if (start.caller != nullptr) {
      span.context = *start.caller;  // same trace, same sampling decision
      span.parent_span_id = saferetry::SpanIdHex(start.caller->parent_id);
    } else {
      span.context.trace_id[15] = 1;  // a root span: the SDK would mint a trace id
      span.context.flags = 1;
    }
    span.context.parent_id = saferetry::SpanId{0xb1, 0xd9, 0, 0, 0, 0, 0, ++next_id_};
    span.attributes["http.request.method"] = std::string(start.method);
    span.attributes["url.full"] = std::string(start.url);
    // OpenTelemetry: set on resends only (redirect hops included).
    if (start.resend_count > 0) {
      span.attributes["http.request.resend_count"] = std::to_string(start.resend_count);
    }
    if (start.is_status_query) span.attributes["saferetry.status_query"] = "true";
    open_[saferetry::SpanIdHex(span.context.parent_id)] = span;
    saferetry::AttemptSpan out;
    out.traceparent = span.context;
    return out;
  }

  void OnAttemptEnd(const saferetry::AttemptEvidence& evidence) override {
    auto it = open_.find(saferetry::SpanIdHex(evidence.span_id));
    if (it == open_.end()) return;
    Span span = std::move(it->second);
    open_.erase(it);
    if (evidence.http_status.has_value()) {
      span.attributes["http.response.status_code"] = std::to_string(*evidence.http_status);
      if (*evidence.http_status >= 400) {
        span.attributes["error.type"] = std::to_string(*evidence.http_status);
      }
    } else if (!evidence.transport_status.ok()) {
      span.attributes["error.type"] =
          std::string(absl::StatusCodeToString(evidence.transport_status.code()));
    }
    span.attributes["saferetry.classification"] =
        std::string(saferetry::AttemptClassName(evidence.classification));
    ended_.push_back(std::move(span));
  }

  void OnCallEnd() override {
    // A hedge abandoned when the call finished would still be open here.
    for (auto& [id, span] : open_) ended_.push_back(std::move(span));
    open_.clear();
  }

  const std::vector<Span>& ended() const { return ended_; }

 private:
  std::uint8_t next_id_ = 0;
  std::map<std::string, Span> open_;
  std::vector<Span> ended_;
};

// What reached the server: the traceparent of each request.
class WireTap final : public saferetry::Transport {
 public:
  explicit WireTap(std::shared_ptr<saferetry::Transport> next) : next_(std::move(next)) {}
  saferetry::TransportResult Send(const saferetry::Request& request,
                                  const saferetry::AttemptOptions& options) override {
    std::vector<std::string> parents;
    for (const auto& [name, value] : request.headers) {
      if (name == saferetry::kTraceParentHeader) parents.push_back(value);
    }
    for (const saferetry::HeaderRef& h : options.extra_headers) {
      if (h.name == saferetry::kTraceParentHeader) parents.emplace_back(h.value);
    }
    seen_.push_back(
        request.method + " " + request.url + "  traceparent: " +
        (parents.size() == 1 ? parents[0] : std::to_string(parents.size()) + " headers"));
    traceparents_.push_back(parents);
    return next_->Send(request, options);
  }
  const std::vector<std::string>& seen() const { return seen_; }
  const std::vector<std::vector<std::string>>& traceparents() const { return traceparents_; }

 private:
  std::shared_ptr<saferetry::Transport> next_;
  std::vector<std::string> seen_;
  std::vector<std::vector<std::string>> traceparents_;
};

}  // namespace

int main() {
  auto clock = std::make_shared<saferetry::testkit::FakeClock>();
  auto server = std::make_shared<saferetry::testkit::SimulatedOrderServer>(clock);
  server->ScriptFaults({saferetry::testkit::OrderFault::kUnavailable,
                        saferetry::testkit::OrderFault::kCommitThenLoseResponse});
  auto tap = std::make_shared<WireTap>(server);
  auto bridge = std::make_shared<SpanPerAttempt>();

  saferetry::ClientOptions options;
  options.transport = tap;
  options.clock = clock;
  options.random = std::make_shared<saferetry::testkit::ScriptedRandom>();
  options.tracer = bridge;  // every call of this client
  auto client = saferetry::Client::Create(std::move(options));
  if (!client.ok()) {
    std::fprintf(stderr, "client: %s\n", std::string(client.status().message()).c_str());
    return 1;
  }

  // The caller's context: in a service, the current span's, from
  // OpenTelemetry's propagator or the inbound request.
  const std::string caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  saferetry::CallOptions call;
  call.timeout = std::chrono::seconds(5);
  call.status_url = "http://orders.example/orders/by-key/{key}";
  call.trace_context = saferetry::TraceContext{caller, "congo=t61rcWkgMzE"};
  saferetry::Request order{"POST",
                           "http://orders.example/orders",
                           {{"Content-Type", "application/json"}},
                           R"({"sku":"sku-42"})"};
  saferetry::CallResult r = (*client)->Execute(order, call);

  std::printf("caller: %s\n\non the wire:\n", caller.c_str());
  for (const std::string& line : tap->seen()) std::printf("  %s\n", line.c_str());
  std::printf("\nspans:\n");
  for (const Span& s : bridge->ended()) {
    std::printf("  %s  trace=%s span=%s parent=%s\n", s.name.c_str(),
                saferetry::TraceIdHex(s.context.trace_id).c_str(),
                saferetry::SpanIdHex(s.context.parent_id).c_str(), s.parent_span_id.c_str());
    for (const auto& [k, v] : s.attributes) std::printf("      %s = %s\n", k.c_str(), v.c_str());
  }
  std::printf("\n=> %s (%s), attempts=%d, status queries=%d, orders created=%d\n",
              std::string(saferetry::OutcomeName(r.outcome)).c_str(),
              std::string(saferetry::StopReasonName(r.stop_reason)).c_str(), r.attempts,
              r.status_queries, server->total_effects());

  // Each span's context reached the server once, in the caller's trace.
  int failures = 0;
  const auto& wire = tap->traceparents();
  if (r.outcome != saferetry::Outcome::kSucceeded || server->total_effects() != 1) ++failures;
  if (wire.size() != bridge->ended().size()) ++failures;
  for (std::size_t i = 0; i < wire.size() && i < bridge->ended().size(); ++i) {
    const Span& s = bridge->ended()[i];
    if (wire[i].size() != 1 || wire[i][0] != saferetry::FormatTraceParent(s.context)) ++failures;
    if (saferetry::TraceIdHex(s.context.trace_id) != "4bf92f3577b34da6a3ce929d0e0e4736") ++failures;
  }
  if (failures > 0) std::fprintf(stderr, "trace bridge: %d check(s) failed\n", failures);
  return failures == 0 ? 0 : 1;
}

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The cost of one successful call through Client::Execute with an in-memory
// transport: everything saferetry does per call (validation, key, headers,
// state machine, evidence, result) and nothing else.
//
// The canned transport answers with a response it built beforehand: 200, six
// headers and a 200-byte body, as a small JSON API answers. `Transport::Send`
// returns the response by value: the loop hands each call's response back to
// the transport (`Recycle`, a move), which hands it out again, so the
// transport allocates nothing once warm. What it does allocate is counted
// apart (`transport_allocations_per_call`, 0 after the first call), and
// `allocations_per_call` is saferetry's own.
//
// Scenarios, each with the real `SystemClock` (what a service runs) and with
// `FakeClock`:
//   get                     a GET, no key
//   keyed_post_minted       a POST with a key minted from the OS CSPRNG
//   keyed_post_caller_key   a POST with the caller's key (the fingerprint
//                           guard's work included; a new key each call)
// After the table, one line per scenario:
//   `call scenario=<name> clock=<system|fake> cpu_ns_per_call=<x> allocations_per_call=<y>
//    transport_allocations_per_call=<z> clock_reads_per_call=<w>
//    floor_cpu_ns_per_call=<f> floor_ratio=<x/f>`
// (CPU time per iteration from Google Benchmark; allocations through
// operator new, on every iteration; clock reads through a counting clock in a
// separate pass; the floor is `BM_Floor_*`, the same scenario through the
// stripped-down call below, in the same run). Before anything is timed, one
// line per scenario says whether the floor put the same headers on the wire
// and returned the same result as the call (`floor_matches_call scenario=<name>
// true`); when it did not, the line names what differs and the run stops.

#include <benchmark/benchmark.h>

#include <array>
#include <atomic>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "canned_call.h"
#include "common/request_scan.h"
#include "core/server_hints_internal.h"
#include "saferetry/call_state_machine.h"
#include "saferetry/classifier.h"
#include "saferetry/client.h"
#include "saferetry/deadline.h"
#include "saferetry/idempotency.h"
#include "saferetry/retry_budget.h"
#include "saferetry/server_hints.h"
#include "saferetry/testing/fake_clock.h"
#include "saferetry/testing/fake_random.h"
#include "saferetry/testing/fake_transport.h"

namespace {

struct Figures {
  double cpu_ns = 0;
  double allocations = 0;
  double transport_allocations = 0;
  double clock_reads = 0;
};

enum class Scenario { kGet, kKeyedPostMinted, kKeyedPostCallerKey };

// (scenario, SystemClock?) -> figures of its last run.
std::map<std::pair<Scenario, bool>, Figures>& Results() {
  static auto* const kResults = new std::map<std::pair<Scenario, bool>, Figures>();
  return *kResults;
}

using saferetry::cost::CannedTransport;
using saferetry::cost::CountingClock;

const char* Name(Scenario s) {
  switch (s) {
    case Scenario::kGet:
      return "get";
    case Scenario::kKeyedPostMinted:
      return "keyed_post_minted";
    case Scenario::kKeyedPostCallerKey:
      return "keyed_post_caller_key";
  }
  return "?";
}

// The benchmark's name: "BM_" + `prefix` + "Get" (...) + "_SystemClock" or
// "_FakeClock", e.g. BM_Get_SystemClock, BM_Floor_Get_FakeClock.
std::string BenchName(const char* prefix, Scenario s, bool system_clock) {
  const char* camel = s == Scenario::kGet               ? "Get"
                      : s == Scenario::kKeyedPostMinted ? "KeyedPostMinted"
                                                        : "KeyedPostCallerKey";
  return std::string("BM_") + prefix + camel + (system_clock ? "_SystemClock" : "_FakeClock");
}

saferetry::Request RequestOf(Scenario s) {
  if (s == Scenario::kGet) return {"GET", "http://127.0.0.1:8080/orders/1", {}, "", {}};
  return {"POST",
          "http://127.0.0.1:8080/orders",
          {{"Content-Type", "application/json"}},
          R"({"sku":"sku-42","quantity":1})",
          {}};
}

std::unique_ptr<saferetry::Client> MakeClient(std::shared_ptr<saferetry::Transport> transport,
                                              std::shared_ptr<saferetry::Clock> clock) {
  saferetry::ClientOptions o;
  o.transport = std::move(transport);
  o.clock = std::move(clock);
  o.random = std::make_shared<saferetry::testkit::ScriptedRandom>();
  return saferetry::Client::Create(std::move(o)).value();
}

// The caller's keys, made before the timed loop (a service has its key
// already): distinct, so the guard records each. Made once, by the first
// scenario that needs them.
std::vector<std::string> MakeCallerKeys(std::size_t n) {
  std::vector<std::string> keys;
  keys.reserve(n);
  // Short enough to be stored inline: assigning one allocates nothing.
  for (std::size_t i = 0; i < n; ++i) keys.push_back("k-" + std::to_string(i));
  return keys;
}

const std::vector<std::string>& CallerKeys() {
  static const std::vector<std::string> kKeys = MakeCallerKeys(1 << 16);
  return kKeys;
}

// One call of a loop, the same in every loop of either side: the caller's
// key for call `i` (the caller-key scenario only: a copy of a short key into
// inline storage, a few ns), the call (`side`), its response back to the
// transport. Returns the call's outcome.
template <typename Side>
saferetry::Outcome OneCall(Scenario scenario, std::size_t i, saferetry::CallOptions& call,
                           CannedTransport& transport, Side&& side) {
  if (scenario == Scenario::kKeyedPostCallerKey) {
    const std::vector<std::string>& keys = CallerKeys();
    call.idempotency_key = keys[i % keys.size()];
  }
  saferetry::CallResult r = side();
  benchmark::DoNotOptimize(r);
  transport.Recycle(r.last_response);
  return r.outcome;
}

void RunCalls(benchmark::State& state, Scenario scenario, bool system_clock) {
  auto transport = std::make_shared<CannedTransport>();
  std::shared_ptr<saferetry::Clock> clock =
      system_clock
          ? saferetry::SystemClock()
          : std::shared_ptr<saferetry::Clock>(std::make_shared<saferetry::testkit::FakeClock>());
  auto client = MakeClient(transport, clock);
  const saferetry::Request request = RequestOf(scenario);
  saferetry::CallOptions call;
  if (scenario == Scenario::kKeyedPostCallerKey) CallerKeys();  // made outside the timing
  std::size_t next_key = 0;
  long long allocs = 0;
  for (auto _ : state) {
    OneCall(scenario, next_key++, call, *transport, [&] {
      const long long before = saferetry::cost::Allocations();
      saferetry::CallResult r = client->Execute(request, call);
      allocs += saferetry::cost::Allocations() - before;
      return r;
    });
  }
  const double n = static_cast<double>(state.iterations());
  Figures f;
  f.transport_allocations = static_cast<double>(transport->own_allocations()) / n;
  f.allocations = static_cast<double>(allocs) / n - f.transport_allocations;
  state.counters["allocs_per_call"] = benchmark::Counter(f.allocations);
  state.counters["transport_allocs"] = benchmark::Counter(f.transport_allocations);

  // Clock reads, in a pass of their own (the counting clock costs a call).
  // Its responses go back to its transport as in the timed loop, so that
  // its calls, which a profile of `Client::Execute` averages in with the
  // timed ones, do the same work.
  auto counting = std::make_shared<CountingClock>(clock);
  auto counted_transport = std::make_shared<CannedTransport>();
  auto counted = MakeClient(counted_transport, counting);
  constexpr int kCounted = 100;
  for (int i = 0; i < kCounted; ++i) {
    OneCall(scenario, next_key++, call, *counted_transport,
            [&] { return counted->Execute(request, call); });
  }
  f.clock_reads = static_cast<double>(counting->reads()) / kCounted;
  state.counters["clock_reads"] = benchmark::Counter(f.clock_reads);
  Results()[{scenario, system_clock}] = f;
}

// The floor: a stripped-down call that does only the work no safe call can
// skip under 0.3.0's defaults, written straight against the public pieces
// (and the one-pass header scans the call uses), with no session, no state
// machine and no per-call policy: validate the request and the call's
// options; read the options a call must read (its policy, timeout or
// deadline, status URL; it refuses a listener, tracer, trace context or
// cancellation token, which it does not serve, and a policy with parts it
// does not serve: another key mode or form, a response predicate, hedging,
// a header switched off); look for a key the request
// carries itself; read the clock; deposit in the retry budget and the
// status-query allowance; mint or check the key; bound the attempt under the
// call's deadline (the time plan), and refuse an attempt too short to be
// useful, as the call does; stamp the key, deadline and attempt
// headers into a buffer of its own; send; read the clock; extract the
// server's hints and the request id in one pass; record the transport's
// status and redirects; classify; fill the `CallResult` the caller gets
// (outcome and what it rests on, the response, the transport's last status,
// one attempt's evidence with the deadline left and the budget's balance);
// report the success to the budget, as its contract asks of every caller.
// It handles no failure, no retry and no status query, so it is a lower
// bound, not a client. `CheckFloorMatchesCall` proves, before anything is
// timed, that it puts the same headers on the wire and returns the same
// result as `Client::Execute`, field by field; the call is then measured
// against it (`floor_ratio=`).
class Floor {
 public:
  explicit Floor(std::shared_ptr<saferetry::Clock> clock)
      : clock_(std::move(clock)),
        budget_(saferetry::MakeRatioBudget({}).value()),
        query_budget_(saferetry::MakeRatioBudget(saferetry::DefaultStatusQueryAllowance()).value()),
        classifier_(saferetry::DefaultClassifierInstance()) {}

  saferetry::CallResult Call(saferetry::Transport& transport, const saferetry::Request& request,
                             const saferetry::CallOptions& call) {
    saferetry::CallResult r;
    if (absl::Status s = saferetry::ValidateRequest(request); !s.ok()) {
      r.status = std::move(s);
      return r;
    }
    if (absl::Status s = saferetry::ValidateCallOptions(call); !s.ok()) {
      r.status = std::move(s);
      return r;
    }
    // The call's options are honoured as the call must read them: its own
    // policy, timeout or deadline, and status URL. A listener, a tracer, a
    // trace context or a cancellation token the floor does not serve: it
    // refuses such a call (the check is work every call does).
    // (One test of the four: the fastest of the ways tried.)
    if ((call.listener != nullptr) | (call.tracer != nullptr) | (call.cancellation != nullptr) |
        call.trace_context.has_value()) {
      return r;
    }
    const saferetry::RetryPolicy& retry = call.policy != nullptr ? *call.policy : *policy_;
    const saferetry::RetryPolicyOptions& policy = retry.options();
    // The policy's parts the floor does not serve: a key mode other than the
    // default, the quoted key form, a response predicate, hedging, the
    // deadline or attempt header switched off. A correct call under any
    // policy must look at each of them, so the floor looks too, and refuses
    // such a policy (one test of the six, as for the call's options).
    if ((policy.key_mode != saferetry::KeyMode::kAuto) |
        (policy.key_form != saferetry::KeyForm::kBare) | (retry.response_predicate() != nullptr) |
        policy.hedging.enabled | policy.deadline_header.empty() | policy.attempt_header.empty()) {
      return r;
    }
    // A key the request carries itself is the call's key, sent as it is: a
    // safe call must look for one, or it would send a second. Found by the
    // one pass over the request's headers the call makes (none of the
    // benchmark's requests carries one).
    saferetry::internal::RequestScan scan;
    if (!request.headers.empty()) {
      scan = saferetry::internal::ScanRequestHeaders(request.headers, policy.idempotency_header);
      // A trace context the request carries, which the call records in its
      // evidence: not served.
      if ((scan.traceparents | scan.tracestates) != 0) return r;
    }
    const saferetry::TimePoint start = clock_->Now();
    const saferetry::Deadline deadline = call.deadline.value_or(
        saferetry::Deadline::After(start, call.timeout.value_or(policy.timeout)));
    budget_->OnCallStart(start);
    query_budget_->OnCallStart(start);
    const bool safe = saferetry::IsSafeMethod(request.method);
    const bool idempotent = saferetry::IsIdempotent(request);
    // Written before they are read, so not zeroed first (as the call's own).
    union Refs {
      Refs() {}
      saferetry::HeaderRef& operator[](std::size_t i) { return at[i]; }
      const saferetry::HeaderRef* data() const { return at; }
      saferetry::HeaderRef at[3];
    } headers;
    std::size_t n = 0;
    // The call's key, by the call's rule: the request's own, else the
    // caller's (on any method), else one minted for a request that is not
    // idempotent (the default key mode, the only one the floor serves).
    const std::string_view given =
        scan.key_header > 0 ? std::string_view(request.headers[scan.key_header - 1].second)
                            : std::string_view(call.idempotency_key);
    if (!given.empty()) {
      // The caller's key was validated with the call's options; the
      // request's is checked here, and must agree with the caller's.
      if (scan.key_header > 0 &&
          (!saferetry::ValidateIdempotencyKey(given).ok() ||
           (!call.idempotency_key.empty() && call.idempotency_key != given))) {
        return r;
      }
      if (!fingerprints_.CheckAndRemember(given, request.method, request.url, request.body).ok()) {
        return r;
      }
      r.idempotency_key.emplace(given);
    } else if (!idempotent) {
      r.idempotency_key = saferetry::MintIdempotencyKey().value();
    }
    const bool keyed = r.idempotency_key.has_value();
    // A key the request carries goes as it is, in its own header.
    if (keyed && scan.key_header == 0) {
      headers[n++] = {policy.idempotency_header, *r.idempotency_key};
    }
    // The time plan: a keyed write that a status query or the server's
    // deduplication can resolve keeps time for that; a retryable request's
    // attempt gets at most half of the call; any other gets all of it.
    const bool has_query = keyed && (!call.status_url.empty() || retry.has_status_query());
    const saferetry::TimePlanKind kind =
        keyed && !idempotent && (has_query || policy.server_deduplicates)
            ? saferetry::TimePlanKind::kResolve
        : (safe || idempotent) && policy.max_attempts > 1 ? saferetry::TimePlanKind::kRetry
                                                          : saferetry::TimePlanKind::kSingle;
    const saferetry::TimePlan plan =
        saferetry::MakeTimePlan(kind, deadline.Remaining(start), policy.deadline_options);
    const saferetry::Duration timeout =
        saferetry::PlannedAttemptTimeout(plan, deadline, start, policy.deadline_options);
    // No send that could not do useful work before the deadline: a decision
    // every call makes before it sends (the floor refuses such a call).
    if (!deadline.is_infinite() && timeout < policy.deadline_options.min_useful_attempt) return r;
    // The deadline header: the value the policy wrote once for this
    // timeout, else formatted here (as the call does).
    std::string_view deadline_value = retry.deadline_header_value(timeout);
    std::array<char, 24> digits;
    if (deadline_value.empty()) {
      const char* end = std::to_chars(digits.data(), digits.data() + digits.size(),
                                      saferetry::DeadlineHeaderMillis(timeout))
                            .ptr;
      deadline_value = {digits.data(), static_cast<std::size_t>(end - digits.data())};
    }
    headers[n++] = {policy.deadline_header, deadline_value};
    // The first send's attempt header: the value the policy wrote once,
    // when it was built (`first_attempt_header_value`), as the call sends it.
    headers[n++] = {policy.attempt_header, retry.first_attempt_header_value()};
    saferetry::AttemptOptions options;
    options.timeout = timeout;
    options.extra_headers = saferetry::HeaderRefs(headers.data(), n);
    saferetry::TransportResult sent = transport.Send(request, options);
    const saferetry::TimePoint end = clock_->Now();

    saferetry::AttemptEvidence& ev = r.evidence.emplace_back();
    ev.number = 1;
    ev.start = start;
    ev.end = end;
    ev.delivery = sent.delivery;
    // What the transport said, which the classifier reads, and how often it
    // was redirected: recorded as the call records them.
    ev.transport_status = sent.status;
    ev.timings = sent.timings;
    ev.redirects = sent.redirects;
    if (sent.response.has_value()) {
      ev.http_status = sent.response->status_code;
      std::optional<std::string_view> id;
      saferetry::internal::ExtractServerHintsInto(sent.response->headers, *clock_, policy.hints,
                                                  ev.hints, policy.request_id_header, id);
      if (id.has_value()) ev.downstream_request_id.assign(id->data(), id->size());
    }
    const saferetry::Classification c = classifier_->Classify(ev, {idempotent, safe, keyed});
    ev.classification = c.cls;
    // Field by field, as the call does: one wide load of the view the
    // classifier has just stored would stall on those narrower stores.
    ev.reason = std::string_view(c.reason.data(), c.reason.size());
    ev.deadline_remaining = deadline.Remaining(end);
    ev.budget_balance = budget_->Balance(end);
    // A first attempt's success is reported to the budget, with an empty
    // receipt, after its balance is read: the budget's contract (a token
    // throttle earns tokens here).
    if (c.cls == saferetry::AttemptClass::kSuccess) budget_->OnSuccess({}, end);
    r.outcome = c.cls == saferetry::AttemptClass::kSuccess ? saferetry::Outcome::kSucceeded
                                                           : saferetry::Outcome::kUnknown;
    r.stop_reason = saferetry::StopReason::kSuccess;
    // What the outcome rests on: the response (an UNKNOWN rests on nothing).
    if (c.cls == saferetry::AttemptClass::kSuccess) {
      r.resolved_by = saferetry::ResolvedBy::kResponse;
    }
    r.last_transport_status = ev.transport_status;
    r.attempts = 1;
    r.last_response = std::move(sent.response);
    r.elapsed = end - start;
    return r;
  }

 private:
  std::shared_ptr<saferetry::Clock> clock_;
  std::shared_ptr<saferetry::RetryBudget> budget_;
  std::shared_ptr<saferetry::RetryBudget> query_budget_;
  std::shared_ptr<const saferetry::Classifier> classifier_;
  std::shared_ptr<const saferetry::RetryPolicy> policy_ = saferetry::RetryPolicy::Default();
  saferetry::KeyFingerprints fingerprints_;
};

// The floor is a floor of this call only if it does the same: the same
// headers on the wire (a minted key aside, which differs by design) and the
// same result, field by field, for `request` with `options`. `minted`: each
// side mints its own key. Returns what differs, or "" when nothing.
std::string CompareFloorWithCall(const saferetry::Request& request,
                                 const saferetry::CallOptions& options, bool minted) {
  auto clock = std::make_shared<saferetry::testkit::FakeClock>();
  // Each side's send is recorded by the testing kit's transport, which
  // answers with the canned response and lets no time pass.
  const CannedTransport canned_transport;
  const saferetry::Response& canned = canned_transport.response();
  auto script = [&canned] {
    auto t = std::make_shared<saferetry::testkit::FakeTransport>();
    t->Push(saferetry::testkit::Step::Respond(canned.status_code, canned.headers, canned.body)
                .After(saferetry::Duration::zero()));
    return t;
  };
  auto call_transport = script();
  auto floor_transport = script();
  auto client = MakeClient(call_transport, clock);
  Floor floor(clock);
  const saferetry::CallResult a = client->Execute(request, options);
  const saferetry::CallResult b = floor.Call(*floor_transport, request, options);
  if (call_transport->send_count() != 1 || floor_transport->send_count() != 1) return "sends";
  const saferetry::testkit::SentRequest sent_a = call_transport->sent()[0];
  const saferetry::testkit::SentRequest sent_b = floor_transport->sent()[0];
  saferetry::Headers wire_a = sent_a.request.headers;
  const saferetry::Headers& wire_b = sent_b.request.headers;
  if (minted) {
    // The minted keys differ by design: each side sends its own result's.
    const std::optional<std::string_view> key_a = saferetry::FindHeader(wire_a, "Idempotency-Key");
    const std::optional<std::string_view> key_b = saferetry::FindHeader(wire_b, "Idempotency-Key");
    if (!key_a || !key_b || *key_a != a.idempotency_key.value_or("") ||
        *key_b != b.idempotency_key.value_or("") || key_a->size() != key_b->size()) {
      return "the minted key header";
    }
    for (auto& h : wire_a) {
      if (h.first == "Idempotency-Key") h.second = std::string(*key_b);
    }
  }
  if (wire_a != wire_b) return "the headers on the wire";
  if (sent_a.timeout != sent_b.timeout) return "the attempt timeout";
  if (a.outcome != b.outcome || a.stop_reason != b.stop_reason) return "outcome";
  if (a.status != b.status || a.last_transport_status != b.last_transport_status) return "status";
  if (a.attempts != b.attempts || a.status_queries != b.status_queries) return "attempts";
  if (a.resolved_by != b.resolved_by || a.resolved_by_status_query != b.resolved_by_status_query) {
    return "resolved_by";
  }
  if (a.idempotency_key.has_value() != b.idempotency_key.has_value()) return "idempotency_key";
  if (!minted && a.idempotency_key != b.idempotency_key) return "idempotency_key";
  if (!a.last_response || !b.last_response ||
      a.last_response->status_code != b.last_response->status_code ||
      a.last_response->headers != b.last_response->headers ||
      a.last_response->body != b.last_response->body) {
    return "last_response";
  }
  if (a.elapsed != b.elapsed || a.budget_refusal != b.budget_refusal) return "elapsed";
  if (a.evidence.size() != 1 || b.evidence.size() != 1) return "evidence count";
  const saferetry::AttemptEvidence& x = a.evidence[0];
  const saferetry::AttemptEvidence& y = b.evidence[0];
  if (x.number != y.number || x.is_status_query != y.is_status_query || x.start != y.start ||
      x.end != y.end || x.delivery != y.delivery || x.transport_status != y.transport_status ||
      x.http_status != y.http_status) {
    return "evidence: the send";
  }
  if (x.hints.retry_after != y.hints.retry_after ||
      x.hints.retry_after_above_max != y.hints.retry_after_above_max ||
      x.hints.key_state != y.hints.key_state || x.hints.replayed != y.hints.replayed ||
      x.hints.do_not_retry != y.hints.do_not_retry) {
    return "evidence: hints";
  }
  if (x.timings.dns != y.timings.dns || x.timings.connect != y.timings.connect ||
      x.timings.tls != y.timings.tls || x.timings.first_byte != y.timings.first_byte ||
      x.timings.total != y.timings.total) {
    return "evidence: timings";
  }
  if (x.classification != y.classification || x.reason != y.reason) return "evidence: class";
  if (x.downstream_request_id != y.downstream_request_id) return "evidence: request id";
  if (x.budget_balance != y.budget_balance) return "evidence: budget_balance";
  if (x.deadline_remaining != y.deadline_remaining) return "evidence: deadline_remaining";
  if (x.delay_after != y.delay_after || x.delay_from_server_hint != y.delay_from_server_hint ||
      x.resend_count != y.resend_count || x.redirects != y.redirects || x.trace_id != y.trace_id ||
      x.span_id != y.span_id || x.trace_flags != y.trace_flags) {
    return "evidence: the rest";
  }
  // What the floor does not serve it refuses, sending nothing, where the
  // call would act on it: a policy with hedging, and (a decision every call
  // makes) an attempt too short to be useful, which the call does not send
  // either.
  saferetry::RetryPolicyOptions hedged;
  hedged.hedging.enabled = true;
  saferetry::CallOptions refused;
  refused.policy = saferetry::RetryPolicy::Create(hedged).value();
  if (floor.Call(*floor_transport, request, refused).outcome == saferetry::Outcome::kSucceeded ||
      floor_transport->send_count() != 1) {
    return "the floor served a policy with hedging";
  }
  saferetry::CallOptions too_short = options;
  too_short.timeout = std::chrono::milliseconds(1);
  const saferetry::CallResult short_a = client->Execute(request, too_short);
  const saferetry::CallResult short_b = floor.Call(*floor_transport, request, too_short);
  if (call_transport->send_count() != 1 || floor_transport->send_count() != 1 ||
      short_a.outcome == saferetry::Outcome::kSucceeded ||
      short_b.outcome == saferetry::Outcome::kSucceeded) {
    return "an attempt too short to be useful was sent";
  }
  return "";
}

// `CompareFloorWithCall` for the scenario's call and, beside the GET, for a
// GET and a PUT that carry the caller's key (a key on a method that would
// not mint one) and a PUT without one (an idempotent write: no key minted).
std::string CheckFloorMatchesCall(Scenario scenario) {
  const saferetry::Request request = RequestOf(scenario);
  saferetry::CallOptions options;
  if (scenario == Scenario::kKeyedPostCallerKey) options.idempotency_key = "k-floor-check";
  std::string differs =
      CompareFloorWithCall(request, options, scenario == Scenario::kKeyedPostMinted);
  if (!differs.empty() || scenario != Scenario::kGet) return differs;
  saferetry::Request put = RequestOf(Scenario::kKeyedPostMinted);
  put.method = "PUT";
  saferetry::CallOptions keyed;
  keyed.idempotency_key = "k-floor-keyed";
  for (const saferetry::Request* r : {&request, static_cast<const saferetry::Request*>(&put)}) {
    differs = CompareFloorWithCall(*r, keyed, false);
    if (!differs.empty()) return r->method + " with the caller's key: " + differs;
  }
  differs = CompareFloorWithCall(put, saferetry::CallOptions(), false);
  return differs.empty() ? differs : "PUT: " + differs;
}

void RunFloor(benchmark::State& state, Scenario scenario, bool system_clock) {
  auto transport = std::make_shared<CannedTransport>();
  std::shared_ptr<saferetry::Clock> clock =
      system_clock
          ? saferetry::SystemClock()
          : std::shared_ptr<saferetry::Clock>(std::make_shared<saferetry::testkit::FakeClock>());
  Floor floor(clock);
  const saferetry::Request request = RequestOf(scenario);
  saferetry::CallOptions call;
  if (scenario == Scenario::kKeyedPostCallerKey) CallerKeys();  // made outside the timing
  std::size_t next_key = 0;
  for (auto _ : state) {
    if (OneCall(scenario, next_key++, call, *transport, [&] {
          return floor.Call(*transport, request, call);
        }) != saferetry::Outcome::kSucceeded) {
      state.SkipWithError("the floor's call did not succeed");
      break;
    }
  }
}

// `--calls_for_instructions=<scenario>:<call|floor>:<n>`: n calls of one
// side, with `FakeClock` and nothing else, for a count of instructions from
// outside (tests/cost/call_instructions_test.sh runs it under callgrind,
// collecting inside `Client::Execute` or `Floor::Call` only). Returns false
// when the argument does not parse.
bool RunCallsForInstructions(const std::string& arg) {
  const std::size_t a = arg.find(':');
  const std::size_t b = a == std::string::npos ? a : arg.find(':', a + 1);
  if (b == std::string::npos) return false;
  const std::string name = arg.substr(0, a);
  const std::string side = arg.substr(a + 1, b - a - 1);
  int n = 0;
  const char* const first = arg.data() + b + 1;
  const char* const last = arg.data() + arg.size();
  if (std::from_chars(first, last, n).ptr != last || n <= 0) return false;
  Scenario scenario;
  if (name == Name(Scenario::kGet)) {
    scenario = Scenario::kGet;
  } else if (name == Name(Scenario::kKeyedPostMinted)) {
    scenario = Scenario::kKeyedPostMinted;
  } else if (name == Name(Scenario::kKeyedPostCallerKey)) {
    scenario = Scenario::kKeyedPostCallerKey;
  } else {
    return false;
  }
  if (side != "call" && side != "floor") return false;
  auto transport = std::make_shared<CannedTransport>();
  auto clock = std::make_shared<saferetry::testkit::FakeClock>();
  auto client = MakeClient(transport, clock);
  Floor floor(clock);
  const saferetry::Request request = RequestOf(scenario);
  saferetry::CallOptions call;
  CallerKeys();  // made before the first counted call
  const bool through_client = side == "call";
  for (int i = 0; i < n; ++i) {
    if (OneCall(scenario, static_cast<std::size_t>(i), call, *transport, [&] {
          return through_client ? client->Execute(request, call)
                                : floor.Call(*transport, request, call);
        }) != saferetry::Outcome::kSucceeded) {
      return false;
    }
  }
  return true;
}

// Keeps the CPU time per iteration of every run (the median, with
// repetitions) for the summary lines.
class Collector final : public benchmark::ConsoleReporter {
 public:
  // Without colours: the console reporter's default would colour its table
  // whatever `--benchmark_color` says (the flag sets only the reporter the
  // library makes itself), and its last escape would run into the first
  // summary line.
  Collector() : ConsoleReporter(OO_Tabular) {}
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.error_occurred || run.iterations == 0) continue;
      const bool aggregate = run.run_type == Run::RT_Aggregate;
      if (aggregate && run.aggregate_name != "median") continue;
      cpu_ns_[run.run_name.function_name] = run.GetAdjustedCPUTime();
    }
    ConsoleReporter::ReportRuns(runs);
  }
  double CpuNs(const std::string& function) const {
    auto it = cpu_ns_.find(function);
    return it == cpu_ns_.end() ? 0 : it->second;
  }

 private:
  std::map<std::string, double> cpu_ns_;
};

}  // namespace

int main(int argc, char** argv) {
  constexpr std::string_view kInstructions = "--calls_for_instructions=";
  if (argc == 2 && std::string_view(argv[1]).substr(0, kInstructions.size()) == kInstructions) {
    if (RunCallsForInstructions(argv[1] + kInstructions.size())) return 0;
    std::fprintf(stderr,
                 "--calls_for_instructions=<get|keyed_post_minted|keyed_post_caller_key>:"
                 "<call|floor>:<n>: did not parse, or a call failed\n");
    return 1;
  }
  // Each scenario with each clock, through the client and through the floor.
  constexpr Scenario kScenarios[] = {Scenario::kGet, Scenario::kKeyedPostMinted,
                                     Scenario::kKeyedPostCallerKey};
  for (const char* prefix : {"", "Floor_"}) {
    for (const bool system_clock : {true, false}) {
      for (const Scenario scenario : kScenarios) {
        benchmark::RegisterBenchmark(BenchName(prefix, scenario, system_clock).c_str(),
                                     *prefix == '\0' ? RunCalls : RunFloor, scenario, system_clock);
      }
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // A floor that did less than the call would flatter nothing but itself.
  for (const Scenario scenario : kScenarios) {
    const std::string differs = CheckFloorMatchesCall(scenario);
    std::printf("floor_matches_call scenario=%s %s\n", Name(scenario),
                differs.empty() ? "true" : ("false: " + differs).c_str());
    if (!differs.empty()) return 1;
  }
  Collector collector;
  benchmark::RunSpecifiedBenchmarks(&collector);
  benchmark::Shutdown();
  for (const auto& [which, f] : Results()) {
    const auto [scenario, system_clock] = which;
    const double cpu_ns = collector.CpuNs(BenchName("", scenario, system_clock));
    const double floor_ns = collector.CpuNs(BenchName("Floor_", scenario, system_clock));
    std::printf(
        "call scenario=%s clock=%s cpu_ns_per_call=%.0f allocations_per_call=%.2f "
        "transport_allocations_per_call=%.2f clock_reads_per_call=%.1f floor_cpu_ns_per_call=%.0f "
        "floor_ratio=%.2f\n",
        Name(scenario), system_clock ? "system" : "fake", cpu_ns, f.allocations,
        f.transport_allocations, f.clock_reads, floor_ns, floor_ns > 0 ? cpu_ns / floor_ns : 0.0);
  }
  return 0;
}

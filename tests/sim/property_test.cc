// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Property tests: many seeded random fault scripts against an idempotent
// server model, each run through `saferetry::Client` on a `FakeClock`, with
// the invariants that make retries safe checked on every run:
//
//   - at most one effect per key;
//   - SUCCEEDED => the effect exists; FAILED => it does not (also after a
//     late commit lands); UNKNOWN => some attempt may have been delivered;
//     a safe request (GET) is never UNKNOWN;
//   - no attempt starts unless it fits before the deadline, and the call
//     ends by it;
//   - the budget's balance is never negative;
//   - the same seed gives the same trace.
//
// A second property runs the promise of the default options: a POST through
// a client with only the timeout and the status URL set, against
// `testkit::SimulatedOrderServer` with faults that take time (commit then
// hang until the attempt times out, a disconnect while the server goes on
// processing for up to 60 % of the deadline, slow commits), on a grid of
// deadlines. Invariants: no duplicate effect; SUCCEEDED => exactly one
// effect, committed; FAILED => no effect, even after every running request
// has committed; UNKNOWN => the call stopped on a limit with an attempt that
// may have applied and nothing that settled it; every send fits before the
// deadline and the call ends by it.
//
// SAFERETRY_PROPERTY_RUNS sets the number of runs of each property (default
// 100000); SAFERETRY_PROPERTY_SEED=<n> replays one seed of each and prints
// its trace.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "saferetry/client.h"
#include "saferetry/retry_budget.h"
#include "saferetry/testing/fake_clock.h"
#include "saferetry/testing/fake_random.h"
#include "saferetry/testing/simulated_order_server.h"

namespace saferetry {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testkit::FakeClock;
using testkit::OrderFault;
using testkit::ScriptedRandom;
using testkit::SimulatedOrderServer;

constexpr char kOrdersUrl[] = "http://orders.test/orders";
constexpr char kByKey[] = "http://orders.test/orders/by-key/{key}";
constexpr char kByKeyPrefix[] = "http://orders.test/orders/by-key/";

// An unmarked 503 is an answer, not a proof: a gateway may have forwarded
// the request first (docs/adr/0031). Written here, not read from the code.
bool UnmarkedUnavailable(const AttemptEvidence& ev) {
  return ev.http_status == 503 && ev.hints.key_state != KeyState::kRejected;
}

// What the server does with one POST.
enum class Fault {
  kOk,
  kNotDelivered,          // connection refused
  kDropBeforeCommit,      // delivered, reset before the server acted
  kCommitThenLost,        // committed, reply lost (reset)
  kTimeoutNoCommit,       // no reply within the attempt timeout, nothing done
  kTimeoutCommit,         // committed, no reply within the attempt timeout
  kTimeoutLateCommit,     // still running when the client gives up; commits later
  kConflict,              // 409: the key is in progress (commits later)
  kUnprocessable,         // 422
  kTooManyRequests,       // 429 with Retry-After (seconds or HTTP-date)
  kUnavailable,           // 503, nothing done; sometimes with Retry-After, sometimes marked
                          // `Idempotency-Key-State: rejected`
  kCommitThenGateway503,  // committed, then a gateway's own 503 (unmarked)
  kInternalAfterCommit,   // committed, then 500
  kSlow,                  // committed; the reply takes 100 ms to 3 s
  kCount,
};

// Everything observed in one run, folded into a hash for the replay check.
struct Trace {
  std::uint64_t hash = 1469598103934665603ull;
  std::ostringstream text;
  bool verbose = false;
  void Mix(std::int64_t v) {
    for (int i = 0; i < 8; ++i) {
      hash ^= static_cast<std::uint64_t>(v >> (8 * i)) & 0xff;
      hash *= 1099511628211ull;
    }
  }
};

// One key's idempotent server, with faults drawn from the run's generator.
class ScriptedServer final : public Transport {
 public:
  ScriptedServer(std::shared_ptr<FakeClock> clock, std::mt19937_64* rng, Trace* trace,
                 const Deadline* deadline, const DeadlineOptions* deadline_options)
      : clock_(std::move(clock)),
        rng_(rng),
        trace_(trace),
        deadline_(deadline),
        deadline_options_(deadline_options) {}

  TransportResult Send(const Request& request, const AttemptOptions& options) override {
    const TimePoint at = clock_->Now();
    // The deadline rule: an attempt starts only when a useful attempt and
    // the margin still fit, and its timeout never reaches past the margin.
    if (!deadline_->is_infinite()) {
      if (at + deadline_options_->min_useful_attempt + deadline_options_->margin >
          deadline_->at()) {
        violations_.push_back(
            absl::StrCat("attempt started too late: ", (deadline_->at() - at).count(), " ns left"));
      }
      if (options.timeout > deadline_->at() - at - deadline_options_->margin) {
        violations_.push_back("attempt timeout reaches past the deadline margin");
      }
    }
    const bool query = absl::StartsWith(request.url, kByKeyPrefix);
    const int pick = static_cast<int>((*rng_)() % 1000);
    trace_->Mix((at - TimePoint{}).count());
    trace_->Mix(options.timeout.count());
    trace_->Mix(query ? -pick : pick);
    if (trace_->verbose) {
      trace_->text << (query ? "  query " : "  send ") << request.method << " at +"
                   << std::chrono::duration_cast<milliseconds>(at - start_).count() << "ms timeout "
                   << std::chrono::duration_cast<milliseconds>(options.timeout).count() << "ms";
    }
    TransportResult r;
    if (query) {
      r = Query(pick, options);
    } else if (request.method == "GET") {
      r = Get(pick, options);
    } else {
      r = Post(pick, request, options);
    }
    if (trace_->verbose) {
      trace_->text << " -> " << DeliveryName(r.delivery) << " "
                   << (r.response ? r.response->status_code : 0) << " " << r.status.message()
                   << "\n";
    }
    return r;
  }

  void set_start(TimePoint t) { start_ = t; }
  // A request still running server-side finishes eventually.
  void Settle() {
    if (pending_) Commit();
    pending_ = false;
  }
  int effects() const { return effects_; }
  const std::vector<std::string>& violations() const { return violations_; }

 private:
  static TransportResult Answer(int status, Headers headers = {}) {
    TransportResult r;
    r.delivery = Delivery::kResponseReceived;
    r.response = Response{status, std::move(headers), "{}", false};
    return r;
  }
  static TransportResult Lost(absl::Status s) {
    TransportResult r;
    r.delivery = Delivery::kMaybeDelivered;
    r.status = std::move(s);
    return r;
  }
  void Spend(Duration d, const AttemptOptions& o) {
    clock_->Advance(o.timeout == Duration::max() ? d : std::min(d, o.timeout));
  }
  Duration Latency() { return milliseconds(1 + static_cast<int>((*rng_)() % 50)); }
  void Commit() {
    if (!committed_) {
      committed_ = true;
      ++effects_;
    }
  }
  TransportResult TimedOut(const AttemptOptions& o) {
    clock_->Advance(o.timeout == Duration::max() ? seconds(30) : o.timeout);
    return Lost(absl::DeadlineExceededError("no response within the attempt timeout"));
  }
  Headers RetryAfterHeaders() {
    const int secs = static_cast<int>((*rng_)() % 4);
    if ((*rng_)() % 3 == 0) {
      // An HTTP-date measured against the response's Date header.
      const absl::Time now = absl::FromChrono(clock_->WallNow());
      return {{"Date", absl::FormatTime("%a, %d %b %Y %H:%M:%S GMT", now, absl::UTCTimeZone())},
              {"Retry-After", absl::FormatTime("%a, %d %b %Y %H:%M:%S GMT",
                                               now + absl::Seconds(secs), absl::UTCTimeZone())}};
    }
    return {{"Retry-After", absl::StrCat(secs)}};
  }

  TransportResult Post(int pick, const Request&, const AttemptOptions& o) {
    const auto fault = static_cast<Fault>(pick % static_cast<int>(Fault::kCount));
    if (trace_->verbose) trace_->text << " fault " << static_cast<int>(fault);
    if (fault == Fault::kNotDelivered) {
      Spend(Latency(), o);
      TransportResult r;
      r.delivery = Delivery::kNotSent;
      r.status = absl::UnavailableError("connection refused");
      return r;
    }
    // A request still running from an earlier attempt either finishes now
    // or makes this one wait: 409.
    if (pending_) {
      if ((*rng_)() % 2 == 0) {
        pending_ = false;
        Commit();
      } else {
        Spend(Latency(), o);
        return Answer(409);
      }
    }
    switch (fault) {
      case Fault::kOk:
        Spend(Latency(), o);
        Commit();
        return Answer(201);
      case Fault::kDropBeforeCommit:
        Spend(Latency(), o);
        return Lost(absl::UnavailableError("connection reset before commit"));
      case Fault::kCommitThenLost:
        Spend(Latency(), o);
        Commit();
        return Lost(absl::UnavailableError("connection reset after commit"));
      case Fault::kTimeoutNoCommit:
        return TimedOut(o);
      case Fault::kTimeoutCommit:
        Commit();
        return TimedOut(o);
      case Fault::kTimeoutLateCommit:
        if (!committed_) pending_ = true;
        return TimedOut(o);
      case Fault::kConflict:
        Spend(Latency(), o);
        if (!committed_) pending_ = true;
        return Answer(409);
      case Fault::kUnprocessable:
        Spend(Latency(), o);
        return Answer(422);
      case Fault::kTooManyRequests:
        Spend(Latency(), o);
        return Answer(429, RetryAfterHeaders());
      case Fault::kUnavailable: {
        Spend(Latency(), o);
        Headers headers = (*rng_)() % 2 == 0 ? RetryAfterHeaders() : Headers{};
        if ((*rng_)() % 2 == 0) headers.emplace_back("Idempotency-Key-State", "rejected");
        return Answer(503, std::move(headers));
      }
      case Fault::kCommitThenGateway503:
        Spend(Latency(), o);
        Commit();
        return Answer(503);
      case Fault::kInternalAfterCommit:
        Spend(Latency(), o);
        Commit();
        return Answer(500);
      case Fault::kSlow: {
        const Duration slow = milliseconds(100 + static_cast<int>((*rng_)() % 2900));
        Commit();
        if (o.timeout != Duration::max() && slow >= o.timeout) return TimedOut(o);
        clock_->Advance(slow);
        return Answer(201);
      }
      case Fault::kNotDelivered:
      case Fault::kCount:
        break;
    }
    return Answer(500);
  }

  TransportResult Query(int pick, const AttemptOptions& o) {
    Spend(Latency(), o);
    if (pick % 10 == 0) return Lost(absl::UnavailableError("status query reset"));
    if (pick % 10 == 1) return Answer(503);
    if (pending_) {
      if ((*rng_)() % 2 == 0) {
        pending_ = false;
        Commit();
      } else {
        return Answer(409);
      }
    }
    return Answer(committed_ ? 200 : 404);
  }

  // A safe request: no effect whatever happens.
  TransportResult Get(int pick, const AttemptOptions& o) {
    switch (pick % 6) {
      case 0: {
        Spend(Latency(), o);
        TransportResult r;
        r.delivery = Delivery::kNotSent;
        r.status = absl::UnavailableError("connection refused");
        return r;
      }
      case 1:
        return TimedOut(o);
      case 2:
        Spend(Latency(), o);
        return Lost(absl::UnavailableError("reset"));
      case 3:
        Spend(Latency(), o);
        return Answer(503);
      case 4:
        Spend(Latency(), o);
        return Answer(500);
      default:
        Spend(Latency(), o);
        return Answer(200);
    }
  }

  std::shared_ptr<FakeClock> clock_;
  std::mt19937_64* rng_;
  Trace* trace_;
  const Deadline* deadline_;
  const DeadlineOptions* deadline_options_;
  TimePoint start_{};
  bool committed_ = false;
  bool pending_ = false;
  int effects_ = 0;
  std::vector<std::string> violations_;
};

enum class BudgetKind { kUnlimited, kToken, kRatio, kQuota };

struct RunReport {
  std::uint64_t trace_hash = 0;
  Outcome outcome = Outcome::kFailed;
  StopReason stop_reason = StopReason::kSuccess;
  bool resolved_by_status_query = false;
  std::vector<std::string> violations;
  std::string text;
};

template <typename T>
T Pick(std::mt19937_64& rng, std::initializer_list<T> values) {
  return *(values.begin() + static_cast<std::ptrdiff_t>(rng() % values.size()));
}

RunReport RunOne(std::uint64_t seed, bool verbose) {
  std::mt19937_64 rng(seed);
  Trace trace;
  trace.verbose = verbose;
  RunReport report;

  // The policy for this run.
  CallOptions call;
  saferetry::RetryPolicyOptions call_policy;
  call_policy.max_attempts = 1 + static_cast<int>(rng() % 6);
  call_policy.max_status_queries = 1 + static_cast<int>(rng() % 4);
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  call.timeout = Pick<Duration>(
      rng, {milliseconds(100), milliseconds(300), seconds(1), seconds(2), seconds(5), seconds(20)});
  if (rng() % 3 == 0) {
    call_policy.deadline_options.attempt_cap = Pick<Duration>(rng, {milliseconds(200), seconds(1)});
  }
  call_policy.backoff.jitter = Pick(
      rng, {JitterKind::kNone, JitterKind::kFull, JitterKind::kEqual, JitterKind::kDecorrelated});
  call_policy.backoff.base =
      Pick<Duration>(rng, {milliseconds(10), milliseconds(50), milliseconds(200)});
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  if (rng() % 10 < 7) call.status_url = kByKey;
  call_policy.server_deduplicates = rng() % 5 == 0;
  const bool post = rng() % 100 < 85;
  const auto budget_kind = static_cast<BudgetKind>(rng() % 4);

  std::shared_ptr<RetryBudget> budget;
  switch (budget_kind) {
    case BudgetKind::kUnlimited:
      budget = MakeUnlimitedBudget();
      break;
    case BudgetKind::kToken:
      budget = MakeTokenThrottle({static_cast<double>(2 + rng() % 8), 0.1}).value();
      break;
    case BudgetKind::kRatio: {
      RatioBudgetOptions r;
      r.percent = 0.1;
      r.min_per_second = static_cast<double>(rng() % 2);
      budget = MakeRatioBudget(r).value();
      break;
    }
    case BudgetKind::kQuota: {
      CostQuotaOptions q;
      q.capacity = 5 + static_cast<std::int64_t>(rng() % 30);
      budget = MakeCostQuota(q).value();
      break;
    }
  }
  std::vector<double> uniforms;
  for (int i = 0; i < 12; ++i) uniforms.push_back(static_cast<double>(rng() >> 11) * 0x1.0p-53);

  auto clock = std::make_shared<FakeClock>();
  const TimePoint start = clock->Now();
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  const Deadline deadline = Deadline::After(start, *call.timeout);
  auto server = std::make_shared<ScriptedServer>(clock, &rng, &trace, &deadline,
                                                 &call_policy.deadline_options);
  server->set_start(start);

  ClientOptions options;
  options.transport = server;
  options.clock = clock;
  options.random = std::make_shared<ScriptedRandom>(std::move(uniforms), seed);
  options.budget = budget;
  auto client = Client::Create(std::move(options)).value();

  Request request;
  request.method = post ? "POST" : "GET";
  request.url = post ? kOrdersUrl : "http://orders.test/orders/1";
  if (post) request.body = R"({"sku":"a","quantity":1})";

  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  const CallResult r = client->Execute(request, call);
  server->Settle();

  trace.Mix(static_cast<int>(r.outcome));
  trace.Mix(static_cast<int>(r.stop_reason));
  trace.Mix(r.attempts);
  trace.Mix(r.status_queries);
  trace.Mix(r.elapsed.count());
  report.trace_hash = trace.hash;
  report.outcome = r.outcome;
  report.stop_reason = r.stop_reason;
  report.resolved_by_status_query = r.resolved_by_status_query;

  std::vector<std::string>& v = report.violations;
  v = server->violations();
  const int effects = server->effects();
  if (effects > 1) v.push_back(absl::StrCat(effects, " effects for one key"));
  if (!r.status.ok()) v.push_back(absl::StrCat("call did not start: ", r.status.message()));
  if (post) {
    if (r.outcome == Outcome::kSucceeded && effects != 1)
      v.push_back("SUCCEEDED without an effect");
    if (r.outcome == Outcome::kFailed && effects != 0) v.push_back("FAILED but the effect exists");
  } else {
    if (effects != 0) v.push_back("a GET had an effect");
    if (r.outcome == Outcome::kUnknown) v.push_back("a safe request ended UNKNOWN");
  }
  if (r.outcome == Outcome::kUnknown) {
    bool may = false;
    for (const AttemptEvidence& ev : r.evidence) {
      if (ev.is_status_query) continue;
      if (ev.delivery == Delivery::kMaybeDelivered || UnmarkedUnavailable(ev) ||
          ev.classification == AttemptClass::kAmbiguous ||
          ev.classification == AttemptClass::kInProgress) {
        may = true;
      }
    }
    if (!may) v.push_back("UNKNOWN without evidence that an attempt may have been delivered");
  }
  if (r.elapsed > *call.timeout) {
    v.push_back(
        absl::StrCat("call outlived its deadline by ", (r.elapsed - *call.timeout).count(), " ns"));
  }
  // A ratio budget documents transient negative balances once an old deposit
  // expires (after its window); within one window it cannot go below zero.
  const bool balance_checked = budget_kind != BudgetKind::kRatio || r.elapsed < seconds(9);
  for (const AttemptEvidence& ev : r.evidence) {
    if (balance_checked && ev.budget_balance < 0) {
      v.push_back(absl::StrCat("budget balance ", ev.budget_balance, " < 0"));
    }
  }
  if (verbose) {
    call.policy = saferetry::RetryPolicy::Create(call_policy).value();
    report.text = absl::StrCat(
        "seed ", seed, ": ", request.method, " max_attempts=", call_policy.max_attempts,
        " max_status_queries=", call_policy.max_status_queries,
        " timeout_ms=", std::chrono::duration_cast<milliseconds>(*call.timeout).count(),
        " status_query=", !call.status_url.empty(), " dedup=", call_policy.server_deduplicates,
        " budget=", static_cast<int>(budget_kind), "\n", trace.text.str(), "  => ",
        std::string(OutcomeName(r.outcome)), " (", std::string(StopReasonName(r.stop_reason)),
        "), effects=", effects, "\n");
  }
  return report;
}

std::int64_t RunsFromEnv() {
  const char* env = std::getenv("SAFERETRY_PROPERTY_RUNS");
  if (env == nullptr || *env == '\0') return 100000;
  const long long n = std::atoll(env);
  return n > 0 ? n : 100000;
}

TEST(PropertyTest, RandomFaultScriptsKeepTheInvariants) {
  if (const char* one = std::getenv("SAFERETRY_PROPERTY_SEED"); one != nullptr && *one != '\0') {
    const auto seed = static_cast<std::uint64_t>(std::strtoull(one, nullptr, 10));
    const RunReport r = RunOne(seed, /*verbose=*/true);
    std::cout << r.text;
    for (const std::string& s : r.violations) ADD_FAILURE() << "seed " << seed << ": " << s;
    return;
  }
  const std::int64_t runs = RunsFromEnv();
  int failures = 0;
  std::map<Outcome, std::int64_t> outcomes;
  std::map<StopReason, std::int64_t> reasons;
  std::int64_t resolved = 0;
  for (std::int64_t i = 0; i < runs && failures < 10; ++i) {
    const auto seed = static_cast<std::uint64_t>(i + 1);
    const RunReport r = RunOne(seed, false);
    ++outcomes[r.outcome];
    ++reasons[r.stop_reason];
    if (r.resolved_by_status_query) ++resolved;
    for (const std::string& s : r.violations) {
      ADD_FAILURE() << "seed " << seed << ": " << s << " (replay: SAFERETRY_PROPERTY_SEED=" << seed
                    << " ./property_test)";
      ++failures;
    }
    // The same seed gives the same trace (checked on every 10th seed, which
    // covers every fault kind many times over).
    if (i % 10 == 0) {
      const RunReport again = RunOne(seed, false);
      if (again.trace_hash != r.trace_hash) {
        ADD_FAILURE() << "seed " << seed << ": a replay gave a different trace";
        ++failures;
      }
    }
  }
  std::cout << runs << " runs: " << outcomes[Outcome::kSucceeded] << " SUCCEEDED, "
            << outcomes[Outcome::kFailed] << " FAILED, " << outcomes[Outcome::kUnknown]
            << " UNKNOWN; " << resolved << " resolved by a status query\n";
  for (const auto& [reason, n] : reasons)
    std::cout << "  " << StopReasonName(reason) << ": " << n << "\n";
  // The scripts must reach every outcome and the interesting stops, or the
  // invariants above were checked on too narrow a set of histories.
  if (runs >= 1000) {
    EXPECT_GT(outcomes[Outcome::kSucceeded], 0);
    EXPECT_GT(outcomes[Outcome::kFailed], 0);
    EXPECT_GT(outcomes[Outcome::kUnknown], 0);
    EXPECT_GT(resolved, 0);
    for (StopReason reason : {StopReason::kPermanentError, StopReason::kAttemptsExhausted,
                              StopReason::kDeadlineExceeded, StopReason::kBudgetExhausted,
                              StopReason::kAmbiguousUnresolved}) {
      EXPECT_GT(reasons[reason], 0) << StopReasonName(reason);
    }
  }
}

TEST(PropertyTest, VerboseReplayDescribesTheRun) {
  const RunReport r = RunOne(12345, /*verbose=*/true);
  EXPECT_TRUE(absl::StrContains(r.text, "seed 12345"));
  EXPECT_TRUE(absl::StrContains(r.text, "=>"));
  EXPECT_EQ(r.trace_hash, RunOne(12345, false).trace_hash);
  EXPECT_NE(r.trace_hash, RunOne(12346, false).trace_hash);
}

// ---------------------------------------------------------------------------
// Default options against faults that take time.

// Checks that every send starts with a useful attempt left before the
// deadline and that its timeout ends before the margin (the defaults), then
// hands it to the server.
class DeadlineCheckingTransport final : public Transport {
 public:
  DeadlineCheckingTransport(std::shared_ptr<Transport> inner, std::shared_ptr<FakeClock> clock,
                            Deadline deadline, Trace* trace)
      : inner_(std::move(inner)), clock_(std::move(clock)), deadline_(deadline), trace_(trace) {}

  TransportResult Send(const Request& request, const AttemptOptions& options) override {
    const TimePoint at = clock_->Now();
    const DeadlineOptions d;
    // A late clock may take up to half of a useful attempt from a send that
    // follows a wait (the machine forgives it).
    const Duration useful = late_clock_ ? d.min_useful_attempt / 2 : d.min_useful_attempt;
    if (at + useful + d.margin > deadline_.at()) {
      violations_.push_back(
          absl::StrCat("a send started with ", (deadline_.at() - at).count(), " ns left"));
    }
    if (options.timeout > deadline_.at() - at - d.margin) {
      violations_.push_back("a send's timeout reaches past the deadline margin");
    }
    const bool query = absl::StartsWith(request.url, kByKeyPrefix);
    TransportResult r = inner_->Send(request, options);
    trace_->Mix((at - TimePoint{}).count());
    trace_->Mix(options.timeout.count());
    trace_->Mix(r.response ? r.response->status_code : -static_cast<int>(r.delivery));
    if (trace_->verbose) {
      trace_->text << (query ? "  query" : "  send ") << " at +"
                   << std::chrono::duration_cast<milliseconds>(at - start_).count() << "ms timeout "
                   << std::chrono::duration_cast<milliseconds>(options.timeout).count() << "ms -> "
                   << DeliveryName(r.delivery) << " " << (r.response ? r.response->status_code : 0)
                   << " " << r.status.message() << " (+"
                   << std::chrono::duration_cast<milliseconds>(clock_->Now() - start_).count()
                   << "ms)\n";
    }
    return r;
  }

  void set_start(TimePoint t) { start_ = t; }
  void set_late_clock(bool late) { late_clock_ = late; }
  const std::vector<std::string>& violations() const { return violations_; }

 private:
  bool late_clock_ = false;
  std::shared_ptr<Transport> inner_;
  std::shared_ptr<FakeClock> clock_;
  Deadline deadline_;
  Trace* trace_;
  TimePoint start_{};
  std::vector<std::string> violations_;
};

// The stop reasons that name a limit: the only ones an UNKNOWN may end on
// when a status query is configured. A Retry-After that ends past the
// deadline is a limit of time set by the server's hint (503 with
// `Retry-After: 1` under a 1 s deadline), never shortened.
bool IsLimit(StopReason r) {
  switch (r) {
    case StopReason::kRetryAfterBeyondDeadline:
    case StopReason::kDeadlineExceeded:
    case StopReason::kNoTimeForUsefulAttempt:
    case StopReason::kBudgetExhausted:
    case StopReason::kAttemptsExhausted:
    case StopReason::kStatusQueriesExhausted:
    case StopReason::kNotFoundNoAttemptsLeft:
    // Not limits, but not failures either: the server's answer did not
    // settle the doubt (saferetry/settlement.h).
    case StopReason::kAnswerNotDefinite:
    case StopReason::kKeyExpired:
      return true;
    default:
      return false;
  }
}

const char* FaultName(OrderFault f) {
  switch (f) {
    case OrderFault::kNone:
      return "none";
    case OrderFault::kRefuse:
      return "refuse";
    case OrderFault::kDropBeforeCommit:
      return "drop-before-commit";
    case OrderFault::kCommitThenLoseResponse:
      return "commit-then-lose";
    case OrderFault::kCommitThenHang:
      return "commit-then-hang";
    case OrderFault::kUnavailable:
      return "503-retry-after-1";
    case OrderFault::kInternalErrorAfterCommit:
      return "commit-then-500";
    case OrderFault::kCommitThenGatewayUnavailable:
      return "commit-then-gateway-503";
    case OrderFault::kInProgressThenCommit:
      return "409-then-commit";
    case OrderFault::kDisconnectWhileProcessing:
      return "disconnect-while-processing";
    case OrderFault::kStoredFinalErrorThenLose:
      return "stored-400-then-lose";
    case OrderFault::kRejectBeforeWork:
      return "rejected-before-work";
    case OrderFault::kStoredFinalError:
      return "stored-400";
    case OrderFault::kUnmarkedClientError:
      return "gateway-400";
  }
  return "?";
}

RunReport RunDefaultsOne(std::uint64_t seed, bool verbose) {
  // Apart from the first property's seeds, so both explore their own runs.
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  Trace trace;
  trace.verbose = verbose;
  RunReport report;

  const Duration timeout = Pick<Duration>(
      rng, {milliseconds(300), seconds(1), seconds(2), seconds(5), seconds(30), seconds(60)});
  // The faults that take time come three times as often as the others.
  const std::vector<OrderFault> kinds = {
      OrderFault::kNone,
      OrderFault::kNone,
      OrderFault::kNone,
      OrderFault::kCommitThenHang,
      OrderFault::kCommitThenHang,
      OrderFault::kCommitThenHang,
      OrderFault::kDisconnectWhileProcessing,
      OrderFault::kDisconnectWhileProcessing,
      OrderFault::kDisconnectWhileProcessing,
      OrderFault::kCommitThenLoseResponse,
      OrderFault::kDropBeforeCommit,
      OrderFault::kRefuse,
      OrderFault::kUnavailable,
      OrderFault::kCommitThenGatewayUnavailable,
      OrderFault::kInternalErrorAfterCommit,
      OrderFault::kInProgressThenCommit,
      OrderFault::kStoredFinalErrorThenLose,
      OrderFault::kRejectBeforeWork,
      OrderFault::kStoredFinalError,
      OrderFault::kUnmarkedClientError,
  };
  std::vector<OrderFault> faults(rng() % 5);
  for (OrderFault& f : faults) f = kinds[rng() % kinds.size()];
  // The server works 0 to 60 % of the deadline on a new key: a slow commit
  // (or a long "in progress" after a disconnect) when that is longer than
  // the attempt's timeout.
  Duration processing{0};
  if (rng() % 3 != 0) {
    const auto permille = static_cast<std::int64_t>(1 + rng() % 600);
    processing = timeout / 1000 * permille;
  }
  std::vector<double> uniforms;
  for (int i = 0; i < 16; ++i) uniforms.push_back(static_cast<double>(rng() >> 11) * 0x1.0p-53);

  auto clock = std::make_shared<FakeClock>();
  // Half the runs on a clock that wakes 0-5 ms late, as real ones do.
  const bool late_clock = rng() % 2 == 0;
  if (late_clock) clock->SetWakeLateness(milliseconds(5), seed);
  const TimePoint start = clock->Now();
  const Deadline deadline = Deadline::After(start, timeout);
  auto server = std::make_shared<SimulatedOrderServer>(clock);
  server->ScriptFaults(faults);
  server->SetProcessingTime(processing);
  auto transport = std::make_shared<DeadlineCheckingTransport>(server, clock, deadline, &trace);
  transport->set_start(start);
  transport->set_late_clock(late_clock);

  ClientOptions options;  // defaults, but for the seams
  options.transport = transport;
  options.clock = clock;
  options.random = std::make_shared<ScriptedRandom>(std::move(uniforms), seed);
  auto client = Client::Create(std::move(options)).value();

  CallOptions call;  // defaults, but for the timeout and the status URL
  call.timeout = timeout;
  call.status_url = kByKey;

  Request request;
  request.method = "POST";
  request.url = kOrdersUrl;
  request.headers = {{"Content-Type", "application/json"}};
  request.body = R"({"sku":"a","quantity":1})";

  const CallResult r = client->Execute(request, call);
  const TimePoint end = clock->Now();
  const std::string key = r.idempotency_key.value_or("");
  const int committed = server->effects(key);
  // Every request still running server-side commits eventually.
  clock->Advance(std::chrono::hours(1));
  const int eventual = server->total_effects();

  trace.Mix(static_cast<int>(r.outcome));
  trace.Mix(static_cast<int>(r.stop_reason));
  trace.Mix(r.attempts);
  trace.Mix(r.status_queries);
  trace.Mix(r.elapsed.count());
  trace.Mix(eventual);
  report.trace_hash = trace.hash;
  report.outcome = r.outcome;
  report.stop_reason = r.stop_reason;
  report.resolved_by_status_query = r.resolved_by_status_query;

  std::vector<std::string>& v = report.violations;
  v = transport->violations();
  if (!r.status.ok()) v.push_back(absl::StrCat("call did not start: ", r.status.message()));
  if (!r.idempotency_key.has_value()) v.push_back("a POST without an idempotency key");
  if (eventual > 1) v.push_back(absl::StrCat(eventual, " effects for one intent"));
  if (end > deadline.at() || r.elapsed > timeout) {
    v.push_back(
        absl::StrCat("call outlived its deadline by ", (end - deadline.at()).count(), " ns"));
  }
  // A wait the machine scheduled always leads to a send, late clock or not.
  if (r.stop_reason == StopReason::kNoTimeForUsefulAttempt && !r.evidence.empty() &&
      r.evidence.back().delay_after.has_value()) {
    v.push_back("no_time_for_useful_attempt right after a wait the machine chose");
  }
  switch (r.outcome) {
    case Outcome::kSucceeded:
      if (committed != 1 || eventual != 1) {
        v.push_back(absl::StrCat("SUCCEEDED with ", committed, " committed effects"));
      }
      break;
    case Outcome::kFailed:
      if (eventual != 0) v.push_back("FAILED but the effect exists (or lands later)");
      break;
    case Outcome::kUnknown: {
      if (!IsLimit(r.stop_reason)) {
        v.push_back(absl::StrCat("UNKNOWN on a stop that is not a limit: ",
                                 std::string(StopReasonName(r.stop_reason))));
      }
      bool may_have_applied = false;
      for (const AttemptEvidence& ev : r.evidence) {
        if (ev.classification == AttemptClass::kSuccess) {
          v.push_back("UNKNOWN after a success or a \"found\" answer");
        }
        if (!ev.is_status_query &&
            (ev.delivery == Delivery::kMaybeDelivered || UnmarkedUnavailable(ev) ||
             ev.classification == AttemptClass::kAmbiguous ||
             ev.classification == AttemptClass::kInProgress)) {
          may_have_applied = true;
        }
      }
      if (!may_have_applied) v.push_back("UNKNOWN without an attempt that may have applied");
      break;
    }
  }
  if (verbose) {
    std::vector<std::string> names;
    for (OrderFault f : faults) names.emplace_back(FaultName(f));
    report.text = absl::StrCat(
        "seed ", seed,
        ": POST timeout_ms=", std::chrono::duration_cast<milliseconds>(timeout).count(),
        " processing_ms=", std::chrono::duration_cast<milliseconds>(processing).count(),
        " faults=[", absl::StrJoin(names, ","), "]\n", trace.text.str(), "  => ",
        std::string(OutcomeName(r.outcome)), " (", std::string(StopReasonName(r.stop_reason)),
        "), attempts=", r.attempts, " status_queries=", r.status_queries, " effects=", eventual,
        "\n");
  }
  return report;
}

TEST(PropertyTest, DefaultOptionsWithFaultsThatTakeTimeKeepTheInvariants) {
  if (const char* one = std::getenv("SAFERETRY_PROPERTY_SEED"); one != nullptr && *one != '\0') {
    const auto seed = static_cast<std::uint64_t>(std::strtoull(one, nullptr, 10));
    const RunReport r = RunDefaultsOne(seed, /*verbose=*/true);
    std::cout << r.text;
    for (const std::string& s : r.violations) ADD_FAILURE() << "seed " << seed << ": " << s;
    return;
  }
  const std::int64_t runs = RunsFromEnv();
  int failures = 0;
  std::map<Outcome, std::int64_t> outcomes;
  std::map<StopReason, std::int64_t> reasons;
  std::int64_t resolved = 0;
  for (std::int64_t i = 0; i < runs && failures < 10; ++i) {
    const auto seed = static_cast<std::uint64_t>(i + 1);
    const RunReport r = RunDefaultsOne(seed, false);
    ++outcomes[r.outcome];
    ++reasons[r.stop_reason];
    if (r.resolved_by_status_query) ++resolved;
    for (const std::string& s : r.violations) {
      ADD_FAILURE() << "seed " << seed << ": " << s << " (replay: SAFERETRY_PROPERTY_SEED=" << seed
                    << " ./property_test --gtest_filter=*DefaultOptions*)";
      ++failures;
    }
    if (i % 10 == 0 && RunDefaultsOne(seed, false).trace_hash != r.trace_hash) {
      ADD_FAILURE() << "seed " << seed << ": a replay gave a different trace";
      ++failures;
    }
  }
  std::cout << runs << " runs with default options: " << outcomes[Outcome::kSucceeded]
            << " SUCCEEDED, " << outcomes[Outcome::kFailed] << " FAILED, "
            << outcomes[Outcome::kUnknown] << " UNKNOWN; " << resolved
            << " resolved by a status query\n";
  for (const auto& [reason, n] : reasons)
    std::cout << "  " << StopReasonName(reason) << ": " << n << "\n";
  if (runs >= 1000) {
    EXPECT_GT(outcomes[Outcome::kSucceeded], 0);
    EXPECT_GT(outcomes[Outcome::kFailed], 0);
    EXPECT_GT(resolved, 0);
  }
}

TEST(PropertyTest, DefaultOptionsVerboseReplayDescribesTheRun) {
  const RunReport r = RunDefaultsOne(777, /*verbose=*/true);
  EXPECT_TRUE(absl::StrContains(r.text, "seed 777"));
  EXPECT_TRUE(absl::StrContains(r.text, "=>"));
  EXPECT_EQ(r.trace_hash, RunDefaultsOne(777, false).trace_hash);
}

}  // namespace
}  // namespace saferetry

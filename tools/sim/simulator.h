// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The policy simulator's engine: a discrete-event simulation of many calls
// against a model server, on a simulated clock. No threads, no sleeping; one
// seeded generator decides everything, so a seed gives the same run on every
// machine.
//
// Each call runs a real `saferetry::CallStateMachine`; all calls share one
// `RetryBudget`, which is handed the simulated time. The model server is
// idempotent per key (it counts effects per key and answers status queries);
// a "careless" client sends every retry as a fresh, keyless request, so each
// processed attempt is a new effect.
//
//   arrival -> machine.Start -> send --hop--> server (outage? capacity? fail?)
//           <--hop-- reply <-- service time -- commit (effect), maybe lose reply
//   reply -> machine.OnAttemptDone / OnStatusAnswer -> wait -> send ... finish
//
// Faults that take time: a reply can hang (the client learns only when its
// attempt timeout fires; the server committed), and a commit can be slow (the
// key is "in progress" for the whole service time: status queries answer
// processing, same-key resends 409; an attempt whose timeout is shorter times
// out and the server commits later).
//
// Hedging: a client whose `hedging` is enabled and whose request is safe to
// send twice sends a hedge when an attempt is still unanswered after the
// hedge delay (fixed, or the observed p95 of answered attempts, as
// `AsyncClient` does); the first final answer finishes the call and the
// other copies are dropped (the server still processes them). The server's
// latency tail (`tail_rate`, `tail_factor`) is the fault hedging is for.
//
// The contention experiment (optimistic-concurrency writes, "Exponential
// Backoff And Jitter") has its own small model, `RunContention`.

#ifndef SAFERETRY_TOOLS_SIM_SIMULATOR_H_
#define SAFERETRY_TOOLS_SIM_SIMULATOR_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "saferetry/backoff.h"
#include "saferetry/call_state_machine.h"
#include "saferetry/circuit_breaker.h"
#include "saferetry/classifier.h"
#include "saferetry/client.h"
#include "saferetry/clock.h"
#include "saferetry/random.h"
#include "saferetry/result.h"
#include "saferetry/retry_budget.h"

namespace saferetry {
namespace sim {

/// The simulated clock starts here (a positive epoch, so the ratio budget's
/// per-second slots start at second 1000).
inline constexpr TimePoint kSimEpoch = TimePoint{} + std::chrono::seconds(1000);

/// A deterministic generator: `std::mt19937_64` with portable conversions
/// (the standard's distributions differ between libraries; these do not).
class SimRng {
 public:
  explicit SimRng(std::uint64_t seed) : engine_(seed) {}
  /// Uniform in [0, 1), 53 bits.
  double Uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  std::uint64_t Bits64() { return engine_(); }
  /// True with probability `p`.
  bool Bernoulli(double p) { return p > 0 && Uniform() < p; }
  /// A standard normal sample (Box-Muller, one of the pair).
  double Normal();
  /// An exponential sample with the given mean.
  double Exponential(double mean);

 private:
  std::mt19937_64 engine_;
};

/// The `Random` seam over a `SimRng` (single-threaded use only).
class SimRandom final : public Random {
 public:
  explicit SimRandom(SimRng* rng) : rng_(rng) {}
  double Uniform() override { return rng_->Uniform(); }
  std::uint64_t Bits64() override { return rng_->Bits64(); }

 private:
  SimRng* rng_;
};

/// A latency distribution.
struct LatencyModel {
  enum class Kind {
    kConstant,     ///< always `mean`
    kAbsNormal,    ///< |Normal(mean, stddev)|
    kExponential,  ///< Exponential with mean `mean`
    kUniform,      ///< Uniform in [mean - stddev, mean + stddev] (floored at 0)
  };
  Kind kind = Kind::kAbsNormal;
  Duration mean = std::chrono::milliseconds(10);
  Duration stddev = std::chrono::milliseconds(2);

  Duration Sample(SimRng& rng) const;
};

/// The downstream service.
struct ServerModel {
  /// Independent failures: this fraction of processed attempts answers 503
  /// (nothing committed), marked `Idempotency-Key-State: rejected` as the
  /// server half marks every 503 it sends. Status queries are not affected.
  double failure_rate = 0;
  /// Lost responses: this fraction of committed attempts loses its reply (the
  /// client sees a connection reset after sending: maybe delivered).
  double loss_rate = 0;
  /// Hung responses: this fraction of committed attempts (and replays) never
  /// gets its reply: the connection hangs and the client learns only when its
  /// attempt timeout fires. The server committed.
  double hang_rate = 0;
  /// Slow commits: this fraction of processed attempts, when they commit,
  /// takes `slow_service` instead of `service` (replays and failures never
  /// are slow). The key is in progress for all of it (status
  /// queries: processing; same-key resends: 409), and an attempt whose timeout
  /// is shorter times out while the server commits later.
  double slow_rate = 0;
  LatencyModel slow_service{LatencyModel::Kind::kUniform, std::chrono::seconds(15),
                            std::chrono::seconds(10)};
  /// A latency tail: this fraction of processed attempts (one independent
  /// draw each, so a hedge of a slow attempt is usually fast) takes
  /// `tail_factor` times its service time (a pause, a busy replica). Unlike
  /// a slow commit it changes nothing else: no key is held in progress
  /// longer, and status queries are not affected.
  double tail_rate = 0;
  double tail_factor = 100;
  /// For exact scenarios: when not empty, decides the tail instead of the
  /// draw (nothing is drawn): the i-th processed attempt of the run (0-based,
  /// in the order the server takes them) is in the tail iff
  /// `tail_sequence[i]`; attempts beyond the sequence are not.
  std::vector<bool> tail_sequence;
  /// One-way network latency, per hop.
  LatencyModel hop{LatencyModel::Kind::kAbsNormal, std::chrono::milliseconds(5),
                   std::chrono::milliseconds(1)};
  /// Time a request holds a server slot.
  LatencyModel service{LatencyModel::Kind::kExponential, std::chrono::milliseconds(20),
                       Duration{0}};
  /// Concurrent requests (attempts and queries) the server can hold; a
  /// request arriving above it gets 503 `rejected` at once (load-driven overload). 0 =
  /// unlimited.
  int capacity = 0;
  /// An outage: between these offsets from the start every request is
  /// refused (connection refused, not delivered). Empty when start >= end.
  Duration outage_start{0};
  Duration outage_end{0};
};

/// How a client behaves.
struct ClientModel {
  std::string name = "saferetry";
  /// Attempts, status queries, backoff, deadline options, traits, status
  /// query, deduplication. `deadline` is set per call from `timeout`.
  CallPolicy policy;
  /// The retry backoff `policy.backoff` points to.
  std::shared_ptr<const BackoffPolicy> backoff;
  /// The poll pacing and the time plan's options: each simulated call's
  /// policy points at these (`policy.poll_backoff` and
  /// `policy.deadline_options` are set per call; whatever they held here is
  /// replaced).
  BackoffParams poll_backoff = DefaultPollBackoff();
  DeadlineOptions deadline_options;
  /// The per-call deadline.
  Duration timeout = std::chrono::seconds(30);
  /// Keyless requests with every retry a fresh request (declared idempotent):
  /// each processed attempt is a new effect.
  bool careless = false;
  /// Makes the shared budget, once per run. Null = `MakeUnlimitedBudget()`.
  std::function<std::shared_ptr<RetryBudget>()> make_budget;
  /// Makes the shared status-query allowance, once per run. Null = none
  /// (polls limited by their cap and the deadline only).
  std::function<std::shared_ptr<RetryBudget>()> make_query_budget;
  /// Null = the default classifier.
  std::shared_ptr<const Classifier> classifier;
  /// A circuit breaker for the model server (one host), fresh each run and
  /// shared by every call, on the simulated clock. Empty = none.
  std::optional<CircuitBreakerOptions> circuit_breaker;
  /// Hedging, as `CallOptions::hedging` of `AsyncClient`: applied only when
  /// the request is safe to send twice (safe, idempotent, or keyed with
  /// `server_deduplicates`; the rule of the library's call setup). With
  /// `delay_from_p95` the delay is the p95 of the last 512 answered
  /// attempts (`internal::LatencyWindow`, fed with every attempt answered in
  /// the run), `delay` until 20 were seen. Default off.
  HedgingOptions hedging;
};

/// When calls start.
struct Workload {
  enum class Kind {
    kOpenLoop,    ///< Poisson arrivals at `calls_per_second`, `total_calls` in all.
    kClosedLoop,  ///< `clients` each run `calls_per_client` calls back to back.
  };
  Kind kind = Kind::kOpenLoop;
  double calls_per_second = 1000;
  std::int64_t total_calls = 10000;
  int clients = 10;
  int calls_per_client = 10;
  /// Closed loop: pause between a client's calls.
  Duration think_time{0};
  /// Open loop: after the `total_calls` measured arrivals, calls keep
  /// arriving at the same rate, unmeasured, until every measured call has
  /// finished. A service does not go quiet when a measurement ends: without
  /// this, calls that resolve late (a hung attempt queries ~21 s after its
  /// start) would meet a shared budget whose sliding window no longer holds
  /// any call starts.
  bool steady_tail = false;
};

struct SimConfig {
  ServerModel server;
  ClientModel client;
  Workload workload;
  std::uint64_t seed = 1;
  /// Width of a timeline bucket.
  Duration bucket = std::chrono::seconds(1);
};

/// One timeline bucket.
struct TimelineBucket {
  std::int64_t attempts = 0;        ///< sends of a request started in the bucket
  std::int64_t status_queries = 0;  ///< status queries started in the bucket
  std::int64_t arrivals = 0;        ///< calls started in the bucket
  std::int64_t succeeded = 0;       ///< calls that finished SUCCEEDED in the bucket
  std::int64_t rejected = 0;        ///< requests the server turned away (capacity/outage)
};

struct SimResult {
  std::int64_t calls = 0;
  /// Sends of the request: every one is a write (a POST) on the wire,
  /// including same-key resends answered 409 (which the state machine counts
  /// as polls).
  std::int64_t attempts = 0;
  /// Hedges sent (counted in `attempts` too).
  std::int64_t hedges = 0;
  /// Hedge timers armed (a hedge is sent when one fires with the attempt
  /// still unanswered), and the mean of their delays; 0 without hedging.
  std::int64_t hedge_timers = 0;
  Duration hedge_delay_mean{0};
  /// Status queries (reads), counted apart from the writes.
  std::int64_t status_queries = 0;
  /// Sends (attempts and status queries) that ended by their timeout.
  std::int64_t timeouts = 0;
  std::int64_t succeeded = 0;
  std::int64_t failed = 0;
  std::int64_t unknown = 0;
  /// Effects the server applied, in all. A safe request (a read) applies
  /// none, however many copies the server processes.
  std::int64_t effects = 0;
  /// Effects beyond the first, summed over intents (calls): with a key, a
  /// second effect for the same key; for the careless client, extra orders
  /// per intent.
  std::int64_t duplicates = 0;
  /// Calls whose outcome contradicts the server: SUCCEEDED without an
  /// effect, or FAILED with one (must be 0). Reads are not checked.
  std::int64_t outcome_violations = 0;
  /// Calls stopped by the budget (or the status-query allowance).
  std::int64_t budget_exhausted = 0;
  /// Calls by stop reason (index: `StopReason`), and the UNKNOWN ones alone.
  std::array<std::int64_t, kStopReasonCount> stop_reasons{};
  std::array<std::int64_t, kStopReasonCount> unknown_stop_reasons{};
  /// Requests turned away by capacity or the outage.
  std::int64_t rejected = 0;
  /// Requests (attempts and status queries) that reached the server during
  /// the outage: the load on the dead server.
  std::int64_t outage_requests = 0;
  /// Sends the circuit breaker refused (measured calls and the steady tail
  /// alike); 0 without a breaker. Calls it ended are
  /// `stop_reasons[kCircuitOpen]`.
  std::int64_t circuit_refusals = 0;
  /// Simulated time from the first arrival to the last completion.
  Duration duration{0};
  /// Time of the last arrival (the offered-load window).
  Duration arrival_span{0};
  Duration p50{0};
  Duration p99{0};
  Duration p999{0};
  Duration mean_completion{0};
  std::vector<TimelineBucket> timeline;

  /// Total load: (attempts + status queries) / calls.
  double LoadAmplification() const;
  /// Writes only: attempts / calls.
  double WriteAmplification() const;
  double SuccessRate() const;
  /// Calls per second over the arrival window.
  double OfferedLoad() const;
  /// Successful calls per second of simulated time.
  double Goodput() const;
};

/// Runs one simulation. Deterministic for `config.seed`.
SimResult RunSimulation(const SimConfig& config);

/// The contention experiment: `clients` start together, each must perform one
/// optimistic-concurrency write: read the version (two hops), write if
/// unchanged (two hops); a write that finds the version moved on fails, and
/// the client waits a backoff and starts over from the read. There is no
/// attempt limit, as in the published experiment, so the backoff is drawn
/// from `ComputeBackoff` directly rather than through a `CallStateMachine`
/// (which caps attempts at `kMaxAttemptsHardCap`).
struct ContentionConfig {
  int clients = 100;
  JitterKind jitter = JitterKind::kFull;
  /// The published experiment's base and cap. The first retry's ceiling is
  /// 2 x base for none/full/equal; decorrelated starts from base.
  Duration base = std::chrono::milliseconds(5);
  Duration cap = std::chrono::seconds(2);
  LatencyModel hop{LatencyModel::Kind::kAbsNormal, std::chrono::milliseconds(10),
                   std::chrono::milliseconds(2)};
  std::uint64_t seed = 1;
};

struct ContentionResult {
  /// Write requests sent, all clients together.
  std::int64_t writes = 0;
  /// When the last client's write succeeded, from the common start.
  Duration completion{0};
  /// Mean over clients of the time to their successful write.
  Duration mean_client_completion{0};
  /// The most tries any client needed.
  int max_tries = 0;
  /// Clients that needed more than `kMaxAttemptsHardCap` tries.
  int clients_over_attempt_cap = 0;
};

/// Runs one trial. Deterministic for `config.seed`.
ContentionResult RunContention(const ContentionConfig& config);

/// The `BackoffParams` that reproduce the experiment's schedule for `jitter`.
BackoffParams ContentionBackoff(const ContentionConfig& config);

}  // namespace sim
}  // namespace saferetry

#endif  // SAFERETRY_TOOLS_SIM_SIMULATOR_H_

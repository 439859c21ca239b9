// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "tools/sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <queue>
#include <utility>

#include "absl/status/status.h"
#include "call/call_setup.h"
#include "call/latency_window.h"
#include "saferetry/status_query.h"

namespace saferetry {
namespace sim {

double SimRng::Normal() {
  // 1 - u lies in (0, 1], so the logarithm is finite.
  const double u1 = 1.0 - Uniform();
  const double u2 = Uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.14159265358979323846 * u2);
}

double SimRng::Exponential(double mean) { return -mean * std::log(1.0 - Uniform()); }

Duration LatencyModel::Sample(SimRng& rng) const {
  switch (kind) {
    case Kind::kConstant:
      return mean;
    case Kind::kAbsNormal: {
      const double ns =
          static_cast<double>(mean.count()) + static_cast<double>(stddev.count()) * rng.Normal();
      return Duration(static_cast<Duration::rep>(std::fabs(ns)));
    }
    case Kind::kExponential:
      return Duration(
          static_cast<Duration::rep>(rng.Exponential(static_cast<double>(mean.count()))));
    case Kind::kUniform: {
      const double lo = static_cast<double>((mean - stddev).count());
      const double ns = lo + 2.0 * static_cast<double>(stddev.count()) * rng.Uniform();
      return Duration(static_cast<Duration::rep>(std::max(0.0, ns)));
    }
  }
  return mean;
}

double SimResult::LoadAmplification() const {
  return calls == 0 ? 0
                    : static_cast<double>(attempts + status_queries) / static_cast<double>(calls);
}

double SimResult::WriteAmplification() const {
  return calls == 0 ? 0 : static_cast<double>(attempts) / static_cast<double>(calls);
}

double SimResult::SuccessRate() const {
  return calls == 0 ? 0 : static_cast<double>(succeeded) / static_cast<double>(calls);
}

double SimResult::OfferedLoad() const {
  const double s = std::chrono::duration<double>(arrival_span).count();
  return s <= 0 ? 0 : static_cast<double>(calls) / s;
}

double SimResult::Goodput() const {
  const double s = std::chrono::duration<double>(duration).count();
  return s <= 0 ? 0 : static_cast<double>(succeeded) / s;
}

namespace {

// Timeline buckets beyond this are not recorded (a guard on memory only).
constexpr std::size_t kMaxBuckets = 1 << 20;

// A connection that would otherwise hang forever (no attempt timeout, no
// deadline) is given up after this; it also keeps Duration::max() away from
// time point arithmetic.
constexpr Duration kLongestHang = std::chrono::hours(24);

enum class EventType : std::uint8_t {
  kArrival,         // a call starts (closed loop: `call` is the client)
  kServerReceive,   // a request reaches the server
  kServerDone,      // the server finished a request and replies
  kClientReceive,   // the reply reaches the client
  kWaitOver,        // a backoff wait ends
  kAttemptTimeout,  // the attempt timeout fires
  kHedge,           // a hedge timer fires (`send`: the timer's number)
};

enum class Reply : std::uint8_t {
  kNone,
  kCreated,      // 201, a new effect
  kReplayed,     // 201, the stored answer for the key
  kUnavailable,  // 503
  kConflict,     // 409: the key is being processed
  kLost,         // the reply was lost: connection reset after sending
  kHang,         // the reply never comes: the client's attempt timeout decides
  kRefused,      // connection refused: not delivered
  kFound,        // status query: 200
  kNotFound,     // status query: 404
  kProcessing,   // status query: 409
};

struct Event {
  TimePoint at;
  std::uint64_t seq;
  EventType type;
  Reply reply;
  bool query;   // the send is a status query
  bool commit;  // kServerDone: this request applies the effect
  std::int32_t call;
  std::uint32_t send;  // the call's send number the event belongs to
};

// A send in flight: an attempt or a status query.
struct Flight {
  std::uint32_t send = 0;        // the call's send number (events carry it)
  std::uint32_t attempt_id = 0;  // the machine's
  TimePoint start;
  bool query = false;
};

struct Later {
  bool operator()(const Event& a, const Event& b) const {
    if (a.at != b.at) return a.at > b.at;
    return a.seq > b.seq;
  }
};

enum class KeyState : std::uint8_t { kNone, kProcessing, kCommitted };

struct CallState {
  std::unique_ptr<CallStateMachine> machine;
  TimePoint start;
  // Sends in flight: one at a time, more only when hedging. A reply or a
  // timeout for a send not in here (timed out, or cancelled when the call
  // finished) is dropped.
  std::vector<Flight> flights;
  std::uint32_t send = 0;
  // The hedge timer (at most one armed per call, as in AsyncClient): its
  // number, so a timer cancelled by the call going idle is ignored.
  std::uint32_t hedge_timer = 0;
  bool hedge_armed = false;
  bool hedging = false;  // the machine's policy allows hedges
  int hedges = 0;
  bool safe = false;  // a read: applies no effect
  bool done = false;
  KeyState key_state = KeyState::kNone;
  Outcome outcome = Outcome::kFailed;
  std::int32_t client = -1;
  std::int32_t effects = 0;
  // False for the steady tail's calls, which load the server and the budgets
  // but are not reported.
  bool measured = true;
  Duration completion{0};
};

class Engine {
 public:
  explicit Engine(const SimConfig& config)
      : config_(config),
        rng_(config.seed),
        // Arrivals and jitter have streams of their own, so clients compared
        // at one seed see the same arrivals (common random numbers).
        arrival_rng_(config.seed ^ 0x9e3779b97f4a7c15ull),
        jitter_rng_(config.seed ^ 0xd1b54a32d192ed03ull),
        random_(&jitter_rng_),
        budget_(config.client.make_budget ? config.client.make_budget() : MakeUnlimitedBudget()),
        query_budget_(config.client.make_query_budget ? config.client.make_query_budget()
                                                      : nullptr),
        classifier_(config.client.classifier ? config.client.classifier
                                             : DefaultClassifierInstance()),
        breaker_(config.client.circuit_breaker.has_value()
                     ? std::make_unique<CircuitBreaker>(*config.client.circuit_breaker)
                     : nullptr),
        reset_(absl::UnavailableError("connection reset after the request was sent")),
        refused_(absl::UnavailableError("connection refused")),
        timed_out_(absl::DeadlineExceededError("attempt timed out")) {}

  SimResult Run();

 private:
  void Push(TimePoint at, EventType type, std::int32_t call, std::uint32_t send, bool query,
            Reply reply = Reply::kNone, bool commit = false) {
    queue_.push(Event{at, next_seq_++, type, reply, query, commit, call, send});
  }
  TimelineBucket* Bucket(TimePoint t) {
    const auto index = static_cast<std::size_t>((t - kSimEpoch) / config_.bucket);
    if (index >= kMaxBuckets) return nullptr;
    if (result_.timeline.size() <= index) result_.timeline.resize(index + 1);
    return &result_.timeline[index];
  }
  bool InOutage(TimePoint t) const {
    const ServerModel& s = config_.server;
    return s.outage_start < s.outage_end && t >= kSimEpoch + s.outage_start &&
           t < kSimEpoch + s.outage_end;
  }
  Duration Hop() { return config_.server.hop.Sample(rng_); }

  void OnArrival(const Event& e);
  void StartCall(std::int32_t client, TimePoint now, bool measured = true);
  void Perform(std::int32_t call, const CallAction& action, TimePoint now);
  void OnServerReceive(const Event& e);
  void OnServerDone(const Event& e);
  void OnClientReceive(const Event& e);
  void OnTimeout(const Event& e);
  void OnHedge(const Event& e);
  void ArmHedge(std::int32_t call, TimePoint now);
  void Deliver(std::int32_t call, std::size_t flight, Reply reply, TimePoint now);
  void Finish(std::int32_t call, TimePoint now);

  const SimConfig& config_;
  SimRng rng_;
  SimRng arrival_rng_;
  SimRng jitter_rng_;
  SimRandom random_;
  std::shared_ptr<RetryBudget> budget_;
  std::shared_ptr<RetryBudget> query_budget_;
  std::shared_ptr<const Classifier> classifier_;
  std::unique_ptr<CircuitBreaker> breaker_;  // null: no breaker
  const absl::Status reset_;
  const absl::Status refused_;
  const absl::Status timed_out_;

  std::priority_queue<Event, std::vector<Event>, Later> queue_;
  std::uint64_t next_seq_ = 0;
  std::vector<CallState> calls_;
  std::vector<int> calls_left_;  // closed loop, per client
  std::int64_t arrivals_ = 0;
  std::int64_t measured_running_ = 0;  // measured calls not finished yet
  int in_flight_ = 0;
  TimePoint last_arrival_ = kSimEpoch;
  TimePoint last_event_ = kSimEpoch;
  // Answered attempts' latencies, for a hedge delay at the observed p95.
  internal::LatencyWindow latencies_;
  Duration::rep hedge_delay_sum_ = 0;
  std::size_t tail_index_ = 0;  // the next entry of `tail_sequence`
  SimResult result_;
};

SimResult Engine::Run() {
  const Workload& w = config_.workload;
  if (w.kind == Workload::Kind::kOpenLoop) {
    if (w.total_calls > 0 && w.calls_per_second > 0) {
      calls_.reserve(static_cast<std::size_t>(w.total_calls));
      Push(kSimEpoch, EventType::kArrival, -1, 0, false);
    }
  } else {
    calls_left_.assign(static_cast<std::size_t>(std::max(w.clients, 0)), w.calls_per_client);
    calls_.reserve(static_cast<std::size_t>(std::max(w.clients, 0)) *
                   static_cast<std::size_t>(std::max(w.calls_per_client, 0)));
    for (int c = 0; c < w.clients; ++c) {
      if (w.calls_per_client > 0) Push(kSimEpoch, EventType::kArrival, c, 0, false);
    }
  }

  // Every event is bounded: each call sends at most kMaxAttemptsHardCap
  // attempts and kMaxStatusQueriesHardCap polls, each a handful of events,
  // and every send has a timeout.
  while (!queue_.empty()) {
    const Event e = queue_.top();
    queue_.pop();
    last_event_ = e.at;
    switch (e.type) {
      case EventType::kArrival:
        OnArrival(e);
        break;
      case EventType::kServerReceive:
        OnServerReceive(e);
        break;
      case EventType::kServerDone:
        OnServerDone(e);
        break;
      case EventType::kClientReceive:
        OnClientReceive(e);
        break;
      case EventType::kWaitOver: {
        CallState& c = calls_[static_cast<std::size_t>(e.call)];
        Perform(e.call, c.machine->OnWaitOver(e.at), e.at);
        break;
      }
      case EventType::kAttemptTimeout:
        OnTimeout(e);
        break;
      case EventType::kHedge:
        OnHedge(e);
        break;
    }
  }

  if (breaker_ != nullptr) result_.circuit_refusals = breaker_->Snapshot(last_event_).refusals;

  // Outcomes are checked against the server's final state, so a commit that
  // landed after its call gave up still counts.
  std::vector<Duration::rep> completions;
  completions.reserve(calls_.size());
  Duration::rep sum = 0;
  TimePoint last_done = kSimEpoch;
  for (const CallState& c : calls_) {
    if (!c.measured) continue;
    ++result_.calls;
    result_.effects += c.effects;
    if (c.effects > 1) result_.duplicates += c.effects - 1;
    switch (c.outcome) {
      case Outcome::kSucceeded:
        ++result_.succeeded;
        if (c.effects == 0 && !c.safe) ++result_.outcome_violations;
        break;
      case Outcome::kFailed:
        ++result_.failed;
        if (c.effects != 0 && !c.safe) ++result_.outcome_violations;
        break;
      case Outcome::kUnknown:
        ++result_.unknown;
        break;
    }
    completions.push_back(c.completion.count());
    sum += c.completion.count();
    last_done = std::max(last_done, c.start + c.completion);
  }
  if (!completions.empty()) {
    std::sort(completions.begin(), completions.end());
    auto at = [&](double q) {
      const auto i = static_cast<std::size_t>(q * static_cast<double>(completions.size() - 1));
      return Duration(completions[i]);
    };
    result_.p50 = at(0.50);
    result_.p99 = at(0.99);
    result_.p999 = at(0.999);
    result_.mean_completion = Duration(sum / static_cast<Duration::rep>(completions.size()));
  }
  if (result_.hedge_timers > 0) {
    result_.hedge_delay_mean = Duration(hedge_delay_sum_ / result_.hedge_timers);
  }
  result_.duration = last_done - kSimEpoch;
  result_.arrival_span = last_arrival_ - kSimEpoch;
  return std::move(result_);
}

void Engine::OnArrival(const Event& e) {
  const Workload& w = config_.workload;
  if (w.kind == Workload::Kind::kOpenLoop) {
    const bool measured = arrivals_ < w.total_calls;
    StartCall(-1, e.at, measured);
    ++arrivals_;
    // The steady tail keeps arriving while a measured call is still running;
    // every call ends by its deadline, so the tail is finite.
    if (arrivals_ < w.total_calls || (w.steady_tail && measured_running_ > 0)) {
      const double gap_ns = arrival_rng_.Exponential(1e9 / w.calls_per_second);
      Push(e.at + Duration(static_cast<Duration::rep>(gap_ns)), EventType::kArrival, -1, 0, false);
    }
  } else {
    --calls_left_[static_cast<std::size_t>(e.call)];
    StartCall(e.call, e.at);
  }
}

void Engine::StartCall(std::int32_t client, TimePoint now, bool measured) {
  const auto index = static_cast<std::int32_t>(calls_.size());
  calls_.emplace_back();
  CallState& c = calls_.back();
  c.client = client;
  c.start = now;
  c.measured = measured;
  if (measured) {
    ++measured_running_;
    last_arrival_ = now;
    if (TimelineBucket* b = Bucket(now)) ++b->arrivals;
  }

  const ClientModel& m = config_.client;
  CallPolicy policy = m.policy;
  policy.poll_backoff = &m.poll_backoff;
  policy.deadline_options = &m.deadline_options;
  policy.deadline = Deadline::After(now, m.timeout);
  policy.circuit_breaker = breaker_.get();
  policy.key_minted = true;  // each simulated call mints its own key
  if (m.careless) {
    policy.traits = RequestTraits{/*idempotent=*/true, /*safe=*/false, /*keyed=*/false};
    policy.has_status_query = false;
    policy.server_deduplicates = false;
  }
  // Hedge only what is safe to send twice: the drivers' rule, applied to the
  // modelled request's traits.
  policy.hedging = internal::MayHedge(m.hedging, policy.traits, policy.server_deduplicates);
  c.hedging = policy.hedging;
  c.safe = policy.traits.safe;
  c.machine = std::make_unique<CallStateMachine>(policy, budget_.get(), classifier_.get(), &random_,
                                                 nullptr, query_budget_.get());
  const CallAction action = c.machine->Start(now);
  Perform(index, action, now);
}

void Engine::Perform(std::int32_t call, const CallAction& action, TimePoint now) {
  CallState& c = calls_[static_cast<std::size_t>(call)];
  switch (action.kind) {
    case CallAction::Kind::kSendAttempt:
    case CallAction::Kind::kSendStatusQuery: {
      const bool query = action.kind == CallAction::Kind::kSendStatusQuery;
      ++c.send;
      c.flights.push_back(Flight{c.send, action.attempt_id, now, query});
      if (c.measured) {
        ++(query ? result_.status_queries : result_.attempts);
        if (TimelineBucket* b = Bucket(now)) ++(query ? b->status_queries : b->attempts);
      }
      Push(now + Hop(), EventType::kServerReceive, call, c.send, query);
      Push(now + std::min(action.timeout, kLongestHang), EventType::kAttemptTimeout, call, c.send,
           query);
      if (!query) ArmHedge(call, now);
      break;
    }
    case CallAction::Kind::kWait:
      Push(now + action.delay, EventType::kWaitOver, call, c.send, false);
      break;
    case CallAction::Kind::kFinish:
      Finish(call, now);
      break;
    case CallAction::Kind::kNone:
      break;  // another attempt in flight decides (only when hedging)
  }
}

void Engine::ArmHedge(std::int32_t call, TimePoint now) {
  CallState& c = calls_[static_cast<std::size_t>(call)];
  const HedgingOptions& h = config_.client.hedging;
  if (!c.hedging || c.hedge_armed || c.hedges >= h.max_hedges) return;
  Duration delay = h.delay;
  if (h.delay_from_p95) {
    if (std::optional<Duration> p95 = latencies_.P95(); p95.has_value()) delay = *p95;
  }
  c.hedge_armed = true;
  ++c.hedge_timer;
  if (c.measured) {
    ++result_.hedge_timers;
    hedge_delay_sum_ += delay.count();
  }
  Push(now + delay, EventType::kHedge, call, c.hedge_timer, false);
}

void Engine::OnHedge(const Event& e) {
  CallState& c = calls_[static_cast<std::size_t>(e.call)];
  if (c.done || !c.hedge_armed || e.send != c.hedge_timer) return;  // cancelled
  c.hedge_armed = false;
  if (c.flights.empty() || c.flights.front().query) return;
  const CallAction action = c.machine->StartHedge(e.at);
  if (action.kind != CallAction::Kind::kSendAttempt) return;  // refused: no more hedges
  ++c.hedges;
  if (c.measured) ++result_.hedges;
  Perform(e.call, action, e.at);
}

void Engine::OnServerReceive(const Event& e) {
  const ServerModel& s = config_.server;
  CallState& c = calls_[static_cast<std::size_t>(e.call)];
  const TimePoint now = e.at;
  if (InOutage(now)) {
    if (c.measured) {
      ++result_.outage_requests;
      ++result_.rejected;
      if (TimelineBucket* b = Bucket(now)) ++b->rejected;
    }
    Push(now + Hop(), EventType::kClientReceive, e.call, e.send, e.query, Reply::kRefused);
    return;
  }
  if (s.capacity > 0 && in_flight_ >= s.capacity) {
    if (c.measured) {
      ++result_.rejected;
      if (TimelineBucket* b = Bucket(now)) ++b->rejected;
    }
    Push(now + Hop(), EventType::kClientReceive, e.call, e.send, e.query, Reply::kUnavailable);
    return;
  }
  if (e.query) {
    ++in_flight_;
    Push(now + s.service.Sample(rng_), EventType::kServerDone, e.call, e.send, true);
    return;
  }
  const bool keyed = !config_.client.careless && config_.client.policy.traits.keyed;
  if (keyed && c.key_state == KeyState::kProcessing) {
    Push(now + Hop(), EventType::kClientReceive, e.call, e.send, false, Reply::kConflict);
    return;
  }
  // Every draw whose rate is set is made for every processed attempt, so a
  // change in one rate does not shift the others' random stream (a rate of 0
  // draws nothing, which keeps older presets' streams as they were).
  const bool fail = rng_.Bernoulli(s.failure_rate);
  const bool lose = rng_.Bernoulli(s.loss_rate);
  const bool hang = rng_.Bernoulli(s.hang_rate);
  const bool slow = rng_.Bernoulli(s.slow_rate);
  bool tail = false;
  if (!s.tail_sequence.empty()) {
    tail = tail_index_ < s.tail_sequence.size() && s.tail_sequence[tail_index_];
    ++tail_index_;
  } else {
    tail = rng_.Bernoulli(s.tail_rate);
  }
  const Reply lost = lose ? Reply::kLost : (hang ? Reply::kHang : Reply::kNone);
  Reply reply;
  bool commit = false;
  if (fail) {
    reply = Reply::kUnavailable;
  } else if (keyed && c.key_state == KeyState::kCommitted) {
    reply = lost != Reply::kNone ? lost : Reply::kReplayed;
  } else {
    // The key is in progress from here to the commit at kServerDone: for a
    // slow commit, the whole of its service time.
    commit = true;
    if (keyed) c.key_state = KeyState::kProcessing;
    reply = lost != Reply::kNone ? lost : Reply::kCreated;
  }
  ++in_flight_;
  // Only the work that commits is slow; a replay of the stored answer and a
  // failure take the ordinary service time.
  Duration service = slow && commit ? s.slow_service.Sample(rng_) : s.service.Sample(rng_);
  if (tail) {
    service = Duration(static_cast<Duration::rep>(static_cast<double>(service.count()) *
                                                  std::max(s.tail_factor, 0.0)));
  }
  Push(now + service, EventType::kServerDone, e.call, e.send, false, reply, commit);
}

void Engine::OnServerDone(const Event& e) {
  --in_flight_;
  CallState& c = calls_[static_cast<std::size_t>(e.call)];
  Reply reply = e.reply;
  if (e.query) {
    switch (c.key_state) {
      case KeyState::kCommitted:
        reply = Reply::kFound;
        break;
      case KeyState::kProcessing:
        reply = Reply::kProcessing;
        break;
      case KeyState::kNone:
        reply = Reply::kNotFound;
        break;
    }
  } else if (e.commit && !c.safe) {
    if (config_.client.careless || !config_.client.policy.traits.keyed) {
      ++c.effects;
    } else if (c.key_state != KeyState::kCommitted) {
      ++c.effects;
      c.key_state = KeyState::kCommitted;
    }
  }
  // A hung reply never reaches the client: its attempt timeout decides.
  if (reply == Reply::kHang) return;
  Push(e.at + Hop(), EventType::kClientReceive, e.call, e.send, e.query, reply);
}

// The index of send `send` among the call's flights; flights.size() when it
// is not in flight.
std::size_t FindFlight(const CallState& c, std::uint32_t send) {
  std::size_t i = 0;
  while (i < c.flights.size() && c.flights[i].send != send) ++i;
  return i;
}

void Engine::OnClientReceive(const Event& e) {
  CallState& c = calls_[static_cast<std::size_t>(e.call)];
  if (c.done) return;  // a loser's reply: the call finished with another copy
  const std::size_t f = FindFlight(c, e.send);
  if (f == c.flights.size()) return;  // a reply to a timed-out send
  Deliver(e.call, f, e.reply, e.at);
}

void Engine::OnTimeout(const Event& e) {
  CallState& c = calls_[static_cast<std::size_t>(e.call)];
  if (c.done) return;
  const std::size_t f = FindFlight(c, e.send);
  if (f == c.flights.size()) return;
  if (c.measured) ++result_.timeouts;
  Deliver(e.call, f, Reply::kNone, e.at);
}

void Engine::Deliver(std::int32_t call, std::size_t flight, Reply reply, TimePoint now) {
  CallState& c = calls_[static_cast<std::size_t>(call)];
  const Flight sent = c.flights[flight];
  c.flights.erase(c.flights.begin() + static_cast<std::ptrdiff_t>(flight));
  AttemptEvidence ev;
  ev.start = sent.start;
  ev.end = now;
  ev.delivery = Delivery::kResponseReceived;
  switch (reply) {
    case Reply::kNone:  // the attempt timeout fired first
    case Reply::kHang:  // (never delivered: the timeout reports it as kNone)
      ev.delivery = Delivery::kMaybeDelivered;
      ev.transport_status = timed_out_;
      break;
    case Reply::kLost:
      ev.delivery = Delivery::kMaybeDelivered;
      ev.transport_status = reset_;
      break;
    case Reply::kRefused:
      ev.delivery = Delivery::kNotSent;
      ev.transport_status = refused_;
      break;
    case Reply::kCreated:
    case Reply::kReplayed:
      ev.http_status = 201;
      break;
    case Reply::kFound:
      ev.http_status = 200;
      break;
    case Reply::kUnavailable:
      // Refused before any work, and said so as the server half says it
      // (docs/server-contract.md): the client may retry it as transient.
      ev.http_status = 503;
      ev.hints.key_state = saferetry::KeyState::kRejected;
      break;
    case Reply::kConflict:
    case Reply::kProcessing:
      ev.http_status = 409;
      break;
    case Reply::kNotFound:
      ev.http_status = 404;
      break;
  }
  // Every answered attempt (send to answer) feeds the p95, as in AsyncClient.
  if (!sent.query && ev.delivery == Delivery::kResponseReceived) latencies_.Add(now - sent.start);
  CallAction next;
  if (sent.query) {
    StatusAnswer answer = StatusAnswer::kStillUnknown;
    if (reply == Reply::kFound) answer = StatusAnswer::kFound;
    if (reply == Reply::kNotFound) answer = StatusAnswer::kNotFound;
    if (reply == Reply::kProcessing) answer = StatusAnswer::kProcessing;
    next = c.machine->OnStatusAnswer(answer, std::move(ev), std::nullopt, now);
  } else {
    next = c.machine->OnAttemptDone(sent.attempt_id, std::move(ev), std::nullopt, now);
  }
  // Nothing in flight: the hedge timer is cancelled (a retry arms its own).
  if (c.flights.empty()) c.hedge_armed = false;
  Perform(call, next, now);
}

void Engine::Finish(std::int32_t call, TimePoint now) {
  CallState& c = calls_[static_cast<std::size_t>(call)];
  const CallResult r = c.machine->TakeResult();
  c.machine.reset();
  c.done = true;
  // The losers are cancelled: their replies are dropped; the server still
  // processes them. When an answer decided the call, each loser's wait so far
  // feeds the p95 (a lower bound), as in AsyncClient.
  if (r.stop_reason == StopReason::kSuccess || r.stop_reason == StopReason::kPermanentError) {
    for (const Flight& f : c.flights) {
      if (!f.query) latencies_.Add(now - f.start);
    }
  }
  c.flights.clear();
  c.hedge_armed = false;
  c.outcome = r.outcome;
  c.completion = now - c.start;
  if (c.measured) {
    --measured_running_;
    const auto reason = static_cast<std::size_t>(r.stop_reason);
    ++result_.stop_reasons[reason];
    if (r.outcome == Outcome::kUnknown) ++result_.unknown_stop_reasons[reason];
    if (r.stop_reason == StopReason::kBudgetExhausted) ++result_.budget_exhausted;
    if (r.outcome == Outcome::kSucceeded) {
      if (TimelineBucket* b = Bucket(now)) ++b->succeeded;
    }
  }
  const Workload& w = config_.workload;
  if (w.kind == Workload::Kind::kClosedLoop && c.client >= 0 &&
      calls_left_[static_cast<std::size_t>(c.client)] > 0) {
    Push(now + w.think_time, EventType::kArrival, c.client, 0, false);
  }
}

// ---------------------------------------------------------------------------
// Contention

enum class CEvent : std::uint8_t { kReadAtServer, kReadReply, kWriteAtServer, kWriteReply, kWake };

struct ContentionEvent {
  TimePoint at;
  std::uint64_t seq;
  CEvent type;
  std::int32_t client;
  std::int64_t value;  // a version or, for kWriteReply, 1 = written
};

struct ContentionLater {
  bool operator()(const ContentionEvent& a, const ContentionEvent& b) const {
    if (a.at != b.at) return a.at > b.at;
    return a.seq > b.seq;
  }
};

}  // namespace

SimResult RunSimulation(const SimConfig& config) { return Engine(config).Run(); }

BackoffParams ContentionBackoff(const ContentionConfig& config) {
  BackoffParams p;
  p.multiplier = 2.0;
  p.cap = config.cap;
  p.jitter = config.jitter;
  // ComputeBackoff's first ceiling is `base`; the experiment's first retry
  // sleeps up to 2 x base (base * 2^attempt with attempt = 1). Decorrelated
  // jitter starts from base itself (random between base and 3 x base).
  p.base = config.jitter == JitterKind::kDecorrelated ? config.base : 2 * config.base;
  return p;
}

ContentionResult RunContention(const ContentionConfig& config) {
  struct Client {
    std::int64_t read_version = 0;
    int tries = 0;
    Duration previous{0};
  };
  SimRng rng(config.seed);
  const BackoffParams params = ContentionBackoff(config);
  std::vector<Client> clients(static_cast<std::size_t>(std::max(config.clients, 0)));
  std::priority_queue<ContentionEvent, std::vector<ContentionEvent>, ContentionLater> queue;
  std::uint64_t seq = 0;
  auto push = [&](TimePoint at, CEvent type, std::int32_t client, std::int64_t value) {
    queue.push(ContentionEvent{at, seq++, type, client, value});
  };
  auto hop = [&] { return config.hop.Sample(rng); };

  for (std::int32_t i = 0; i < config.clients; ++i) {
    clients[static_cast<std::size_t>(i)].tries = 1;
    push(kSimEpoch + hop(), CEvent::kReadAtServer, i, 0);
  }
  ContentionResult result;
  std::int64_t version = 0;
  Duration::rep completion_sum = 0;
  // Bounded: a client's delays reach `cap` after a few dozen tries, and every
  // try ends with a write that succeeds unless another write landed first,
  // so the writes form a finite sequence.
  while (!queue.empty()) {
    const ContentionEvent e = queue.top();
    queue.pop();
    Client& c = clients[static_cast<std::size_t>(e.client)];
    switch (e.type) {
      case CEvent::kReadAtServer:
        push(e.at + hop(), CEvent::kReadReply, e.client, version);
        break;
      case CEvent::kReadReply:
        c.read_version = e.value;
        ++result.writes;
        push(e.at + hop(), CEvent::kWriteAtServer, e.client, 0);
        break;
      case CEvent::kWriteAtServer: {
        const bool ok = version == c.read_version;
        if (ok) ++version;
        push(e.at + hop(), CEvent::kWriteReply, e.client, ok ? 1 : 0);
        break;
      }
      case CEvent::kWriteReply:
        if (e.value == 1) {
          const Duration took = e.at - kSimEpoch;
          result.completion = std::max(result.completion, took);
          completion_sum += took.count();
          result.max_tries = std::max(result.max_tries, c.tries);
          if (c.tries > kMaxAttemptsHardCap) ++result.clients_over_attempt_cap;
        } else {
          const Duration delay = ComputeBackoff(params, c.tries, c.previous, rng.Uniform());
          c.previous = delay;
          ++c.tries;
          push(e.at + delay, CEvent::kWake, e.client, 0);
        }
        break;
      case CEvent::kWake:
        push(e.at + hop(), CEvent::kReadAtServer, e.client, 0);
        break;
    }
  }
  if (config.clients > 0) {
    result.mean_client_completion = Duration(completion_sum / config.clients);
  }
  return result;
}

}  // namespace sim
}  // namespace saferetry

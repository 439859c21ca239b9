// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The event-loop driver: runs a CallStateMachine per call, performing its
// actions with an AsyncTransport and the loop's timers. It does what the
// blocking driver (client.cc) does for each action, from callbacks instead
// of a loop: the same call setup (internal::PrepareCall), the same headers,
// the same evidence, the same listener calls in the same order.

#include "saferetry/async_client.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "call/call_session.h"
#include "call/latency_window.h"
#include "common/validated_send.h"
#include "saferetry/cancellation.h"

namespace saferetry {
namespace {

CallResult Refused() {
  CallResult r;
  r.outcome = Outcome::kFailed;
  r.stop_reason = StopReason::kTooManyCalls;
  r.status = absl::ResourceExhaustedError(
      "AsyncClient: max_in_flight calls already in flight; nothing sent");
  return r;
}

}  // namespace

class AsyncClient::Core : public std::enable_shared_from_this<AsyncClient::Core> {
  struct Call;

 public:
  explicit Core(AsyncClientOptions options)
      : options_(std::move(options)),
        services_(internal::MachineServices(options_.client)),
        loop_(options_.loop),
        transport_(options_.transport),
        prevalidated_(dynamic_cast<internal::PrevalidatedStarter*>(options_.transport.get())),
        fingerprints_(options_.client.fingerprint_capacity) {}

  const AsyncClientOptions& options() const { return options_; }
  std::size_t in_flight() const { return in_flight_.load(std::memory_order_acquire); }

  // By reference: the public overloads own the values and move them once:
  // the request into the call record, the options into the loop's queue.
  CallId Execute(Request&& request, CallOptions&& options, Callback&& done) {
    auto call = std::make_unique<Call>(std::move(request), options_.client, services_, options);
    return Accept(std::move(call), std::move(options), std::move(done));
  }

  CallId Resolve(std::string&& key, ResolveOptions&& options, Callback&& done) {
    auto call = std::make_unique<Call>(Request(), options_.client, services_, CallOptions());
    call->session.HoldResolve(std::move(key), std::move(options));
    return Accept(std::move(call), CallOptions(), std::move(done));
  }

  // Queues `call` with its options for the loop, or refuses it over the cap.
  CallId Accept(std::unique_ptr<Call>&& call, CallOptions&& options, Callback&& done) {
    // Back-pressure: refused at once, before anything is queued.
    if (in_flight_.fetch_add(1, std::memory_order_acq_rel) >= options_.max_in_flight) {
      in_flight_.fetch_sub(1, std::memory_order_acq_rel);
      done(Refused());
      return 0;
    }
    const CallId id = next_id_.fetch_add(1, std::memory_order_relaxed) + 1;
    call->id = id;
    call->done = std::move(done);
    // Calls accepted meanwhile join the queue of the task already posted:
    // one task (and one allocation for it) per batch rather than per call.
    // Order is kept: a Cancel posted after this Execute returned runs after
    // that task, which takes every call queued by then.
    bool post = false;
    {
      std::lock_guard<std::mutex> lock(pending_mu_);
      post = pending_.empty();
      // A batch starts with room for a steady flow's calls, not growing
      // one by one (each growth moves every queued call's options).
      if (post && pending_.capacity() < kKeptQueue) pending_.reserve(kKeptQueue);
      pending_.push_back(Pending{std::move(call), std::move(options)});
    }
    if (post) {
      std::weak_ptr<Core> weak = weak_from_this();
      loop_->Post([weak] {
        if (auto core = weak.lock()) core->BeginPending();
      });
    }
    return id;
  }

  void Cancel(CallId id) {
    std::weak_ptr<Core> weak = weak_from_this();
    loop_->Post([weak, id] {
      if (auto core = weak.lock()) core->CancelCall(id);
    });
  }

  // Loop thread: cancels every call in flight; later calls are cancelled
  // as they begin.
  void Shutdown() {
    shutting_down_ = true;
    std::vector<CallId> ids;
    ids.reserve(calls_.size());
    for (const auto& entry : calls_) ids.push_back(entry.first);
    for (CallId id : ids) CancelCall(id);
  }

 private:
  struct Flight {
    AsyncTransport::AttemptId transport_id = 0;
    TimePoint start{};
    std::uint32_t attempt_id = 0;  // the machine's
    bool status_query = false;
  };

  // The session and the machine are built with the record (neither
  // constructor does more than keep its pointers) and begin on the loop.
  struct Call {
    Call(Request&& r, const ClientOptions& client, const CallServices& services,
         const CallOptions& options)
        : request(std::move(r)),
          session(client, request, options),
          machine(session.machine_policy(), &services, options.cancellation) {}
    CallId id = 0;
    Request request;
    Callback done;
    internal::CallSession session;
    CallStateMachine machine;
    // The sends in flight: one, but for hedges (inline: no allocation per call).
    absl::InlinedVector<Flight, 1> flights;
    // The call's one timer (0: none): its wait's while it waits, when no send
    // is in flight, else the next hedge's while a send of the request is.
    // A wait begins only once every send is back, and a send only once the
    // wait is over, so the two never overlap. The hedges sent are the
    // machine's count (`hedges()`).
    EventLoop::TimerId timer = 0;
  };

  Clock& clock() { return *options_.client.clock; }

  // Loop thread: begins the calls accepted since the last time, in order.
  void BeginPending() {
    {
      std::lock_guard<std::mutex> lock(pending_mu_);
      begin_batch_.swap(pending_);
    }
    for (Pending& p : begin_batch_) Begin(std::move(p.call), p.options);
    begin_batch_.clear();
    // The queue's storage goes back to `pending_` at the next swap: enough
    // for a batch of a steady flow is kept (no allocation per batch), a
    // burst's is freed (its calls' options are not held for their lives).
    if (begin_batch_.capacity() > kKeptQueue) std::vector<Pending>().swap(begin_batch_);
  }

  void Begin(std::unique_ptr<Call> call, CallOptions& options) {
    if (shutting_down_) call->machine.Cancel();
    const TimePoint start = clock().Now();
    std::optional<CallResult> early =
        call->session.holds_resolve() ? call->session.BeginHeldResolve(start)
                                      : call->session.Begin(fingerprints_, unsent_, options, start);
    if (early.has_value()) {
      Deliver(*call, *std::move(early));
      return;
    }
    // The call outlives its options from here: it keeps what it reads.
    call->session.KeepCallOptions(options);
    Call& c = *call;
    // A node of a finished call is reused when there is one.
    if (!spare_nodes_.empty()) {
      Calls::node_type node = std::move(spare_nodes_.back());
      spare_nodes_.pop_back();
      node.key() = c.id;
      node.mapped() = std::move(call);
      calls_.insert(std::move(node));
    } else {
      calls_.emplace(c.id, std::move(call));
    }
    Drive(c, c.machine.Start(start));
  }

  // Performs `action` and what follows it, until the call waits for the
  // transport or a timer, or finishes.
  void Drive(Call& call, CallAction action) {
    CallStateMachine& machine = call.machine;
    internal::CallSession& session = call.session;
    for (;;) {
      switch (action.kind) {
        case CallAction::Kind::kSendAttempt: {
          AttemptOptions ao;
          internal::SendHeaders headers;  // read by the transport's Start only
          if (std::optional<CallAction> next =
                  session.BeforeAttempt(machine, action, headers, ao)) {
            action = *next;
            continue;
          }
          StartFlight(call, session.request(), ao, action.attempt_id, false);
          ArmHedge(call);
          return;
        }
        case CallAction::Kind::kSendStatusQuery: {
          AttemptOptions ao;
          const Request* query = nullptr;
          internal::SendHeaders headers;
          if (std::optional<CallAction> next =
                  session.BeforeStatusQuery(machine, action, &query, headers, ao)) {
            action = *next;
            continue;
          }
          StartFlight(call, *query, ao, action.attempt_id, true);
          return;
        }
        case CallAction::Kind::kWait: {
          session.OnWait(action);
          // A cancelled wait (by `Cancel`, at shutdown, or by the caller's
          // token, which the machine reads) ends at once, as the blocking
          // driver's cancellable sleep does.
          if (machine.cancelled()) {
            action = machine.OnWaitOver(clock().Now());
            continue;
          }
          const CallId id = call.id;
          call.timer = loop_->AddTimer(action.delay, [this, id] { OnWaitTimer(id); });
          return;
        }
        case CallAction::Kind::kNone:
          return;  // Another attempt in flight will decide.
        case CallAction::Kind::kFinish:
          Finish(call);
          return;
      }
    }
  }
  void StartFlight(Call& call, const Request& request, const AttemptOptions& ao,
                   std::uint32_t attempt_id, bool status_query) {
    Flight f;
    f.attempt_id = attempt_id;
    f.status_query = status_query;
    f.start = call.session.SendStart(call.machine);
    const CallId id = call.id;
    // Validated when the call began: a transport that can start a validated
    // request need not check it again.
    f.transport_id =
        prevalidated_ != nullptr && !status_query && call.session.request_validated()
            ? prevalidated_->StartPrevalidated(request, ao, TransportCallback(id, attempt_id))
            : transport_->Start(request, ao, TransportCallback(id, attempt_id));
    call.flights.push_back(f);
  }

  // The callback of one send. It names the call and the attempt, and is
  // looked up by them when it runs: a call may be gone by then. Both fit in
  // one word beside `this` for a call id below 2^48 (any a process reaches:
  // the counter starts at 1) and an attempt id below 2^16 (the machine's
  // caps keep them in the hundreds), so `std::function` holds the callable
  // inline and a send allocates nothing for it; any other takes the general
  // form.
  AsyncTransport::Callback TransportCallback(CallId id, std::uint32_t attempt_id) {
    constexpr int kAttemptBits = 16;
    if (id < (CallId{1} << (64 - kAttemptBits)) && attempt_id < (1u << kAttemptBits)) {
      const std::uint64_t word = (id << kAttemptBits) | attempt_id;
      return [this, word](TransportResult&& r) {
        OnTransportResult(word >> kAttemptBits,
                          static_cast<std::uint32_t>(word & ((1u << kAttemptBits) - 1)),
                          std::move(r));
      };
    }
    return [this, id, attempt_id](TransportResult&& r) {
      OnTransportResult(id, attempt_id, std::move(r));
    };
  }

  void ArmHedge(Call& call) {
    const HedgingOptions& h = call.session.retry_policy().hedging;
    if (!call.session.policy().hedging || call.timer != 0 ||
        call.machine.hedges() >= h.max_hedges) {
      return;
    }
    Duration delay = h.delay;
    if (h.delay_from_p95) {
      if (std::optional<Duration> p95 = latencies_.P95(); p95.has_value()) delay = *p95;
    }
    const CallId id = call.id;
    call.timer = loop_->AddTimer(delay, [this, id] { OnHedgeTimer(id); });
  }

  Call* Find(CallId id) {
    auto it = calls_.find(id);
    return it == calls_.end() ? nullptr : it->second.get();
  }

  void OnTransportResult(CallId id, std::uint32_t attempt_id, TransportResult&& result) {
    Call* call = Find(id);
    if (call == nullptr) return;
    auto it = std::find_if(call->flights.begin(), call->flights.end(),
                           [&](const Flight& f) { return f.attempt_id == attempt_id; });
    if (it == call->flights.end()) return;
    const Flight flight = *it;
    call->flights.erase(it);
    if (result.delivery == Delivery::kResponseReceived && !flight.status_query) {
      latencies_.Add(clock().Now() - flight.start);
    }
    Drive(*call, Feed(*call, flight, std::move(result)));
  }

  // Hands one finished attempt or query to the machine through the session.
  CallAction Feed(Call& call, const Flight& flight, TransportResult&& result) {
    CallStateMachine& machine = call.machine;
    CallAction action =
        flight.status_query
            ? call.session.AfterStatusQuery(machine, std::move(result), flight.start)
            : call.session.AfterAttempt(machine, flight.attempt_id, std::move(result),
                                        flight.start);
    if (call.flights.empty() && call.timer != 0) {  // the hedge's: none is due
      loop_->CancelTimer(call.timer);
      call.timer = 0;
    }
    return action;
  }
  void OnWaitTimer(CallId id) {
    Call* call = Find(id);
    if (call == nullptr) return;
    call->timer = 0;
    Drive(*call, call->machine.OnWaitOver(clock().Now()));
  }

  void OnHedgeTimer(CallId id) {
    Call* call = Find(id);
    if (call == nullptr) return;
    call->timer = 0;
    if (call->flights.empty() || call->flights.front().status_query) return;
    if (call->machine.cancelled()) return;
    CallAction action = call->machine.StartHedge(clock().Now());
    if (action.kind != CallAction::Kind::kSendAttempt) return;  // refused: no more hedges
    Drive(*call, action);
  }

  void CancelCall(CallId id) {
    Call* call = Find(id);
    if (call == nullptr) return;
    call->machine.Cancel();
    if (call->timer != 0 && call->flights.empty()) {  // the wait's
      loop_->CancelTimer(call->timer);
      call->timer = 0;
      Drive(*call, call->machine.OnWaitOver(clock().Now()));
      return;
    }
    if (call->timer != 0) {  // the next hedge's
      loop_->CancelTimer(call->timer);
      call->timer = 0;
    }
    // The first attempt aborted is reported (the history counts it); the
    // machine then finishes, and Finish cancels the others unreported.
    while (!call->flights.empty()) {
      const Flight flight = call->flights.front();
      call->flights.erase(call->flights.begin());
      std::optional<TransportResult> r = transport_->Cancel(flight.transport_id);
      if (!r.has_value()) continue;
      Drive(*call, Feed(*call, flight, *std::move(r)));
      return;
    }
    Drive(*call, call->machine.OnCancelled(clock().Now()));
  }

  void Finish(Call& call) {
    if (call.timer != 0) loop_->CancelTimer(call.timer);
    // The losers: cancelled, their connections closed, never reported. When
    // another copy's answer decided the call, each loser's wait so far feeds
    // the latency window (a lower bound; internal::LatencyWindow::Add).
    const StopReason reason = call.machine.result().stop_reason;
    const bool decided_by_answer =
        reason == StopReason::kSuccess || reason == StopReason::kPermanentError;
    const TimePoint now = call.flights.empty() ? TimePoint{} : clock().Now();
    for (const Flight& f : call.flights) {
      transport_->Cancel(f.transport_id);
      if (decided_by_answer && !f.status_query) latencies_.Add(now - f.start);
    }
    call.flights.clear();
    CallResult result = call.machine.TakeResult();
    call.session.FinishIn(result);
    Calls::node_type node = calls_.extract(call.id);
    std::unique_ptr<Call> keep = std::move(node.mapped());
    if (spare_nodes_.size() < kSpareNodes) spare_nodes_.push_back(std::move(node));
    Deliver(*keep, std::move(result));
  }

  void Deliver(Call& call, CallResult&& result) {
    Callback done = std::move(call.done);
    in_flight_.fetch_sub(1, std::memory_order_acq_rel);
    done(std::move(result));
  }

  const AsyncClientOptions options_;
  // The machines' view of the client's budgets, classifier and random
  // source: built once, pointed at by every call's machine.
  const CallServices services_;
  const std::shared_ptr<EventLoop> loop_;
  const std::shared_ptr<AsyncTransport> transport_;
  // The transport, when it can start a request the call validated without
  // checking it again (saferetry's own can); else null.
  internal::PrevalidatedStarter* const prevalidated_;
  std::atomic<std::size_t> in_flight_{0};
  std::atomic<CallId> next_id_{0};
  // Calls accepted, not begun yet; a task to begin them is posted.
  std::mutex pending_mu_;
  // A call accepted, and its options until it begins.
  struct Pending {
    std::unique_ptr<Call> call;
    CallOptions options;
  };
  std::vector<Pending> pending_;  // Guarded by pending_mu_.
  static constexpr std::size_t kKeptQueue = 32;
  // Loop thread only.
  using Calls = std::unordered_map<CallId, std::unique_ptr<Call>>;
  static constexpr std::size_t kSpareNodes = 64;
  std::vector<Pending> begin_batch_;
  KeyFingerprints fingerprints_;
  internal::UnsentRecords unsent_;
  Calls calls_;
  std::vector<Calls::node_type> spare_nodes_;  // of finished calls, empty
  internal::LatencyWindow latencies_;
  bool shutting_down_ = false;
};

absl::StatusOr<std::unique_ptr<AsyncClient>> AsyncClient::Create(AsyncClientOptions options) {
  if (options.loop == nullptr) return absl::InvalidArgumentError("loop: required");
  if (options.transport == nullptr) return absl::InvalidArgumentError("transport: required");
  if (options.max_in_flight < 1) {
    return absl::InvalidArgumentError("max_in_flight: must be >= 1, got 0");
  }
  RunnableEventLoop* runnable = nullptr;
  if (options.run_loop_thread) {
    runnable = dynamic_cast<RunnableEventLoop*>(options.loop.get());
    if (runnable == nullptr) {
      return absl::InvalidArgumentError(
          "run_loop_thread: the loop is not a RunnableEventLoop; run it yourself and set "
          "run_loop_thread = false");
    }
  }
  // The blocking client's validation and defaults, shared.
  if (absl::Status s = internal::CompleteClientOptions(options.client); !s.ok()) return s;
  auto core = std::make_shared<Core>(std::move(options));
  std::unique_ptr<AsyncClient> client(new AsyncClient(std::move(core)));
  if (runnable != nullptr) {
    client->thread_ = std::thread([runnable] { runnable->Run(); });
  }
  return client;
}

AsyncClient::AsyncClient(std::shared_ptr<Core> core) : core_(std::move(core)) {}

AsyncClient::~AsyncClient() {
  if (thread_.joinable()) {
    auto* runnable = static_cast<RunnableEventLoop*>(core_->options().loop.get());
    std::shared_ptr<Core> core = core_;
    runnable->Post([core, runnable] {
      core->Shutdown();
      runnable->Stop();
    });
    thread_.join();
  } else {
    core_->Shutdown();
  }
}

namespace internal {}  // namespace internal

AsyncClient::CallId AsyncClient::Execute(Request request, CallOptions options, Callback done) {
  return core_->Execute(std::move(request), std::move(options), std::move(done));
}

std::future<CallResult> AsyncClient::Execute(Request request, CallOptions options, CallId* id) {
  auto promise = std::make_shared<std::promise<CallResult>>();
  std::future<CallResult> future = promise->get_future();
  const CallId call_id =
      core_->Execute(std::move(request), std::move(options),
                     [promise](CallResult r) { promise->set_value(std::move(r)); });
  if (id != nullptr) *id = call_id;
  return future;
}

AsyncClient::CallId AsyncClient::Resolve(std::string key, ResolveOptions options, Callback done) {
  return core_->Resolve(std::move(key), std::move(options), std::move(done));
}

std::future<CallResult> AsyncClient::Resolve(std::string key, ResolveOptions options) {
  auto promise = std::make_shared<std::promise<CallResult>>();
  std::future<CallResult> future = promise->get_future();
  core_->Resolve(std::move(key), std::move(options),
                 [promise](CallResult r) { promise->set_value(std::move(r)); });
  return future;
}

void AsyncClient::Cancel(CallId id) { core_->Cancel(id); }

std::size_t AsyncClient::in_flight() const { return core_->in_flight(); }

const AsyncClientOptions& AsyncClient::options() const { return core_->options(); }

}  // namespace saferetry

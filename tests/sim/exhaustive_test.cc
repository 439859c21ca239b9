// Copyright 2026 The saferetry Authors. Licensed under the Apache License,
// Version 2.0.
//
// Exhaustive test: every sequence of transport and server events up to a
// depth, not a sample, through the blocking `Client` with default options
// (only the timeout and the status URL set), on the fake clock.
//
// Each send of the request consumes the next event of the sequence:
//
//   ok              the server processes it as the contract says
//   503             answered 503 without a mark, nothing applied (the
//                   origin, or a gateway before forwarding)
//   commit-503      processed (committed if new), then a gateway in front
//                   of the server answers 503 itself, unmarked
//   marked-503      answered 503 `Idempotency-Key-State: rejected`:
//                   refused before any work, nothing applied
//   lost-before     delivered, reset before the server acted
//   lost-after      processed (committed if new), then the reply is lost
//   (reset) hang-after      processed, then no reply until the attempt timeout
//   409             the request is still being processed: 409 now, the
//                   commit lands `kProcessingTime` later
//   stored-400      a key the server never saw completes with a final 400
//                   (no effect), answered and marked `completed`; a known
//                   key is processed as usual
//   gateway-400     a 400 from something in front of the server: no effect,
//                   nothing recorded, no marker
//   expire          the key's retention ran out: its record is reaped (an
//                   order it made stays) and the POST gets 410 `expired`; a
//                   key the server never saw is processed as usual
//
// and, in the runs with a response predicate (saferetry/response_predicate.h),
// also of:
//
//   throttled       refused before any work: 200 {"error":"throttled"},
//                   nothing recorded
//   stored-throttled
//                   a key the server never saw completes with a stored
//                   "throttled" answer (no effect), replayed to every later
//                   send of the key (200, `Idempotent-Replayed`) and
//                   answered 404 `completed` by the status query; a known
//                   key is processed as usual
//
// Those runs give every call a policy whose predicate says "not applied" to
// a throttled answer (the truth), "retry" to the gateway-400's bad_request (a
// write: treated as ambiguous), and "retry" to the stored-400's out_of_stock
// and "not applied" to every 409 and 410 (answers about the key, which the
// predicate may not change).
//
// and each status query the next of:
//
//   truthful        the model server's answer (200 / 409 / 404 + key state)
//   q-timeout       no answer until the query's timeout
//   q-5xx           503
//
// Once the sequence is used up everything behaves normally (ok, truthful).
// A sequence that ends with a normal event behaves like the same sequence
// without it, so each distinct behaviour is run once: the search runs a
// prefix, learns whether the call sent something more and of which kind,
// and branches on that send's abnormal events.
//
// Invariants checked on every run: no duplicate effect (one key, never a
// fresh request); SUCCEEDED => exactly one effect, committed; FAILED => no
// effect, not even one that lands later, and (rule 1, docs/outcomes.md)
// after an attempt that may have taken effect only on an answer this test's
// own table calls definite; UNKNOWN => the call stopped on a limit or on an
// answer that settled nothing, with an attempt that may have taken effect and
// nothing that settled it; the call and every send stay inside the deadline.
// A GET (safe) is run the same way and must never end UNKNOWN.
//
// The POST is also run as a continued intent: a process sent it with the
// caller's key (and committed it, or not) and was killed; its journal holds
// the intent, and the call is run again with the same key and
// `server_deduplicates`. It must never end FAILED where the first process's
// attempt committed.
//
// SAFERETRY_EXHAUSTIVE_DEPTH sets the depth (default 12: every behaviour of
// the model at the middle and upper jitter samples; at the lower one a few
// thousand of the calls with the shortest waits send more events than that,
// and the search says how many. About 750 000 sequences in 12 s).

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "saferetry/client.h"
#include "saferetry/journal.h"
#include "saferetry/testing/fake_clock.h"
#include "saferetry/testing/fake_random.h"
#include "saferetry/testing/memory_journal.h"

namespace saferetry {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testkit::FakeClock;
using testkit::ScriptedRandom;

constexpr char kOrdersUrl[] = "http://orders.test/orders";
constexpr char kOrderUrl[] = "http://orders.test/orders/1";
constexpr char kByKey[] = "http://orders.test/orders/by-key/{key}";
constexpr char kByKeyPrefix[] = "http://orders.test/orders/by-key/";

constexpr Duration kCallTimeout = seconds(2);
// How long one answered exchange takes.
constexpr Duration kLatency = milliseconds(2);
// How long a request answered 409 keeps working before it commits.
constexpr Duration kProcessingTime = milliseconds(400);
constexpr char kThrottledBody[] = R"({"error":"throttled"})";

enum class Event {
  // Sends of the request.
  kOk,
  kUnavailable,
  kCommitThen503,
  kMarked503,
  kLostBeforeCommit,
  kLostAfterCommit,
  kHangAfterCommit,
  kInProgress,
  kStoredError,
  kGateway400,
  kExpire,
  kThrottled,
  kStoredThrottled,
  // Status queries.
  kTruthful,
  kQueryTimeout,
  kQuery5xx,
};

constexpr Event kSendEvents[] = {Event::kOk,
                                 Event::kUnavailable,
                                 Event::kCommitThen503,
                                 Event::kMarked503,
                                 Event::kLostBeforeCommit,
                                 Event::kLostAfterCommit,
                                 Event::kHangAfterCommit,
                                 Event::kInProgress,
                                 Event::kStoredError,
                                 Event::kGateway400,
                                 Event::kExpire};
// The same, with the events only the runs with a response predicate use.
const std::vector<Event>& PredicateSendEvents() {
  static const std::vector<Event> kEvents = [] {
    std::vector<Event> events(std::begin(kSendEvents), std::end(kSendEvents));
    events.push_back(Event::kThrottled);
    events.push_back(Event::kStoredThrottled);
    return events;
  }();
  return kEvents;
}
constexpr Event kQueryEvents[] = {Event::kTruthful, Event::kQueryTimeout, Event::kQuery5xx};

const char* EventName(Event e) {
  switch (e) {
    case Event::kOk:
      return "ok";
    case Event::kUnavailable:
      return "503";
    case Event::kCommitThen503:
      return "commit-503";
    case Event::kMarked503:
      return "marked-503";
    case Event::kLostBeforeCommit:
      return "lost-before";
    case Event::kLostAfterCommit:
      return "lost-after";
    case Event::kHangAfterCommit:
      return "hang-after";
    case Event::kInProgress:
      return "409";
    case Event::kStoredError:
      return "stored-400";
    case Event::kGateway400:
      return "gateway-400";
    case Event::kExpire:
      return "expire";
    case Event::kThrottled:
      return "throttled";
    case Event::kStoredThrottled:
      return "stored-throttled";
    case Event::kTruthful:
      return "truthful";
    case Event::kQueryTimeout:
      return "q-timeout";
    case Event::kQuery5xx:
      return "q-5xx";
  }
  return "?";
}

bool IsQueryEvent(Event e) {
  return e == Event::kTruthful || e == Event::kQueryTimeout || e == Event::kQuery5xx;
}

std::string Describe(const std::vector<Event>& sequence) {
  if (sequence.empty()) return "(all normal)";
  std::vector<std::string> names;
  for (Event e : sequence) names.emplace_back(EventName(e));
  return absl::StrJoin(names, ",");
}

TransportResult Answer(int status, Headers headers = {}, std::string body = "{}") {
  TransportResult r;
  r.delivery = Delivery::kResponseReceived;
  r.response = Response{status, std::move(headers), std::move(body), false};
  return r;
}

TransportResult Lost(absl::Status status) {
  TransportResult r;
  r.delivery = Delivery::kMaybeDelivered;
  r.status = std::move(status);
  return r;
}

// A server that breaks the contract, for the negative controls: each flaw
// must be caught by one of the invariants.
enum class Flaw {
  kNone,
  // A status query for a key whose order exists answers 404 `completed` (a
  // stored final error): the client's FAILED is then wrong.
  kStoredErrorForAnOrder,
  // A status query for a key it never saw answers 200: the client's
  // SUCCEEDED is then wrong.
  kFoundForAnUnknownKey,
  // The server forgets keys: status queries answer 404 `unknown`, and a
  // POST with a known key creates another order.
  kForgetsKeys,
};

// The server's half of the contract (docs/server-contract.md) for one
// scripted call: per-key records, 201 on a new key, the stored answer
// replayed for the same key, 409 while a key is processing, status answers
// 200 / 409 / 404 with `Idempotency-Key-State`, and the fence. Every effect
// is counted per key, including one whose commit lands after the call.
class ModelServer final : public Transport {
 public:
  ModelServer(std::shared_ptr<FakeClock> clock, std::vector<Event> script, Deadline deadline,
              Flaw flaw = Flaw::kNone)
      : clock_(std::move(clock)), script_(std::move(script)), deadline_(deadline), flaw_(flaw) {}

  TransportResult Send(const Request& request, const AttemptOptions& options) override {
    const TimePoint at = clock_->Now();
    CheckFits(at, options.timeout);
    std::optional<std::string> key;
    bool fence = false;
    auto scan = [&](std::string_view name, std::string_view value) {
      const absl::string_view n(name.data(), name.size());
      const absl::string_view v(value.data(), value.size());
      if (absl::EqualsIgnoreCase(n, "Idempotency-Key")) key = std::string(value);
      if (absl::EqualsIgnoreCase(n, std::string(kFenceHeader))) {
        fence = absl::EqualsIgnoreCase(v, "true");
      }
    };
    for (const Header& h : request.headers) scan(h.first, h.second);
    for (const HeaderRef& h : options.extra_headers) scan(h.name, h.value);

    const bool query = absl::StartsWith(request.url, kByKeyPrefix);
    const std::size_t index = sends_.size();
    sends_.push_back(query);
    Event event = query ? Event::kTruthful : Event::kOk;
    if (index < script_.size()) {
      event = script_[index];
      if (IsQueryEvent(event) != query) {
        violations_.push_back(absl::StrCat("send ", index + 1, " is a ",
                                           query ? "status query" : "request",
                                           " but the script has ", EventName(event)));
      }
    }
    if (query) return Query(event, request.url.substr(sizeof(kByKeyPrefix) - 1), fence, options);
    if (request.method == "GET") return Get(event, options);
    return Post(event, key, options);
  }

  // What the call sent, in order: true for a status query.
  const std::vector<bool>& sends() const { return sends_; }
  const std::vector<std::string>& violations() const { return violations_; }
  // Effects that exist or will exist once every running request commits.
  int EventualEffects() const {
    int n = unkeyed_effects_;
    for (const auto& [key, rec] : records_) n += rec.creates_order && !rec.fenced ? rec.orders : 0;
    return n;
  }
  // Effects committed by `now`.
  int CommittedEffects(TimePoint now) const {
    int n = unkeyed_effects_;
    for (const auto& [key, rec] : records_) {
      n += rec.creates_order && !rec.fenced && rec.commit_at <= now ? rec.orders : 0;
    }
    return n;
  }
  std::size_t keys_seen() const { return keys_.size(); }
  // A request with `key` reached the server before the call and committed.
  void Preload(const std::string& key) { records_[key] = Record{}; }
  int unkeyed_posts() const { return unkeyed_effects_; }

 private:
  struct Record {
    TimePoint commit_at{};  // processing (409) until then
    bool creates_order = true;
    int orders = 1;  // more than one only for a server that forgets keys
    bool fenced = false;
    bool expired = false;    // reaped: 410 `expired`, status 404 `expired`
    bool throttled = false;  // the stored answer is "throttled" (no effect)
  };

  // Every send starts only when a minimum useful attempt and the margin fit,
  // and its timeout ends before the margin (default DeadlineOptions).
  void CheckFits(TimePoint at, Duration timeout) {
    const DeadlineOptions d;
    if (at + d.min_useful_attempt + d.margin > deadline_.at()) {
      violations_.push_back(
          absl::StrCat("a send started with ", (deadline_.at() - at).count(), " ns left"));
    }
    if (timeout > deadline_.at() - at - d.margin) {
      violations_.push_back("a send's timeout reaches past the deadline margin");
    }
  }

  void Spend(Duration d) { clock_->Advance(d); }
  TransportResult Hang(const AttemptOptions& o) {
    Spend(o.timeout);
    return Lost(absl::DeadlineExceededError("no response before the attempt timeout"));
  }

  // The contract's answer to a POST with `key` now, creating the record (and
  // the effect) for a new key; `commit_after` is how long the work takes.
  TransportResult Process(const std::string& key, Duration commit_after) {
    const TimePoint now = clock_->Now();
    auto it = records_.find(key);
    if (it == records_.end()) {
      Record rec;
      rec.commit_at = now + commit_after;
      records_[key] = rec;
      if (commit_after > Duration::zero()) {
        return Answer(409, {{"Idempotency-Key-State", "processing"}},
                      R"({"error":"request_in_progress"})");
      }
      return Answer(201, {{"Idempotency-Key-State", "completed"}}, R"({"order_id":1})");
    }
    Record& rec = it->second;
    if (rec.fenced) return Answer(410, {{"Idempotency-Key-State", "fenced"}});
    if (rec.expired) return Answer(410, {{"Idempotency-Key-State", "expired"}});
    if (now < rec.commit_at) {
      return Answer(409, {{"Idempotency-Key-State", "processing"}},
                    R"({"error":"request_in_progress"})");
    }
    if (flaw_ == Flaw::kForgetsKeys) {
      ++rec.orders;
      return Answer(201, {}, R"({"order_id":2})");
    }
    if (rec.throttled) {
      return Answer(200, {{"Idempotent-Replayed", "true"}, {"Idempotency-Key-State", "completed"}},
                    kThrottledBody);
    }
    if (!rec.creates_order) {
      return Answer(400, {{"Idempotent-Replayed", "true"}, {"Idempotency-Key-State", "completed"}},
                    R"({"error":"out_of_stock"})");
    }
    return Answer(201, {{"Idempotent-Replayed", "true"}, {"Idempotency-Key-State", "completed"}},
                  R"({"order_id":1})");
  }

  TransportResult Post(Event event, const std::optional<std::string>& key,
                       const AttemptOptions& o) {
    if (!key.has_value()) {
      // Without a key the server cannot deduplicate: every delivered POST
      // that is processed is a new order.
      if (event != Event::kUnavailable && event != Event::kMarked503 &&
          event != Event::kLostBeforeCommit) {
        ++unkeyed_effects_;
      }
      violations_.push_back("a POST without an idempotency key");
      Spend(kLatency);
      return Answer(201);
    }
    keys_.insert(*key);
    switch (event) {
      case Event::kOk:
        Spend(kLatency);
        return Process(*key, Duration::zero());
      case Event::kUnavailable:
        Spend(kLatency);
        return Answer(503, {}, R"({"error":"unavailable"})");
      case Event::kCommitThen503:
        Spend(kLatency);
        Process(*key, Duration::zero());
        return Answer(503, {}, "upstream connect error or disconnect/reset before headers");
      case Event::kMarked503:
        Spend(kLatency);
        return Answer(503, {{"Idempotency-Key-State", "rejected"}},
                      R"({"error":"rejected before any work"})");
      case Event::kLostBeforeCommit:
        Spend(kLatency);
        return Lost(absl::UnavailableError("connection reset before the server acted"));
      case Event::kLostAfterCommit:
        Spend(kLatency);
        Process(*key, Duration::zero());
        return Lost(absl::UnavailableError("connection reset after the server acted"));
      case Event::kHangAfterCommit:
        Process(*key, Duration::zero());
        return Hang(o);
      case Event::kInProgress:
        Spend(kLatency);
        return Process(*key, kProcessingTime);
      case Event::kStoredError:
        Spend(kLatency);
        if (records_.count(*key) == 0) {
          Record rec;
          rec.creates_order = false;
          records_[*key] = rec;
          return Answer(400, {{"Idempotency-Key-State", "completed"}},
                        R"({"error":"out_of_stock"})");
        }
        return Process(*key, Duration::zero());
      case Event::kGateway400:
        Spend(kLatency);
        return Answer(400, {}, R"({"error":"bad_request"})");
      case Event::kThrottled:
        Spend(kLatency);
        return Answer(200, {}, kThrottledBody);
      case Event::kStoredThrottled:
        Spend(kLatency);
        if (records_.count(*key) == 0) {
          Record rec;
          rec.creates_order = false;
          rec.throttled = true;
          records_[*key] = rec;
          return Answer(200, {{"Idempotency-Key-State", "completed"}}, kThrottledBody);
        }
        return Process(*key, Duration::zero());
      case Event::kExpire:
        Spend(kLatency);
        if (auto it = records_.find(*key);
            it != records_.end() && !it->second.fenced && clock_->Now() >= it->second.commit_at) {
          it->second.expired = true;
        }
        return Process(*key, Duration::zero());
      default:
        break;
    }
    return Answer(500);
  }

  TransportResult Query(Event event, const std::string& key, bool fence, const AttemptOptions& o) {
    if (event == Event::kQueryTimeout) return Hang(o);
    Spend(kLatency);
    if (event == Event::kQuery5xx) return Answer(503);
    auto it = records_.find(key);
    if (it == records_.end() || flaw_ == Flaw::kForgetsKeys) {
      if (flaw_ == Flaw::kFoundForAnUnknownKey) {
        return Answer(200, {{"Idempotency-Key-State", "completed"}});
      }
      if (fence) {
        Record rec;
        rec.fenced = true;
        rec.creates_order = false;
        records_[key] = rec;
        return Answer(404, {{"Idempotency-Key-State", "fenced"}});
      }
      return Answer(404, {{"Idempotency-Key-State", "unknown"}});
    }
    const Record& rec = it->second;
    if (rec.fenced) return Answer(404, {{"Idempotency-Key-State", "fenced"}});
    if (clock_->Now() < rec.commit_at)
      return Answer(409, {{"Idempotency-Key-State", "processing"}});
    // Reaped: this server has no resource lookup, so it cannot tell.
    if (rec.expired) return Answer(404, {{"Idempotency-Key-State", "expired"}});
    if (!rec.creates_order) {
      return Answer(404, {{"Idempotency-Key-State", "completed"}}, R"({"final_status":400})");
    }
    if (flaw_ == Flaw::kStoredErrorForAnOrder) {
      return Answer(404, {{"Idempotency-Key-State", "completed"}}, R"({"final_status":400})");
    }
    return Answer(200, {{"Idempotency-Key-State", "completed"}}, R"({"order_id":1})");
  }

  // A safe request: no effect, whatever happens.
  TransportResult Get(Event event, const AttemptOptions& o) {
    switch (event) {
      case Event::kOk:
        Spend(kLatency);
        return Answer(200);
      case Event::kUnavailable:
      case Event::kCommitThen503:
        Spend(kLatency);
        return Answer(503);
      case Event::kMarked503:
        Spend(kLatency);
        return Answer(503, {{"Idempotency-Key-State", "rejected"}});
      case Event::kLostBeforeCommit:
      case Event::kLostAfterCommit:
        Spend(kLatency);
        return Lost(absl::UnavailableError("connection reset"));
      case Event::kHangAfterCommit:
        return Hang(o);
      case Event::kInProgress:
        Spend(kLatency);
        return Answer(409);
      case Event::kStoredError:
      case Event::kGateway400:
        Spend(kLatency);
        return Answer(400);
      case Event::kExpire:
        Spend(kLatency);
        return Answer(410);
      case Event::kThrottled:
      case Event::kStoredThrottled:
        Spend(kLatency);
        return Answer(200, {}, kThrottledBody);
      default:
        break;
    }
    return Answer(500);
  }

  std::shared_ptr<FakeClock> clock_;
  std::vector<Event> script_;
  Deadline deadline_;
  Flaw flaw_;
  std::vector<bool> sends_;
  std::map<std::string, Record> records_;
  std::set<std::string> keys_;
  int unkeyed_effects_ = 0;
  std::vector<std::string> violations_;
};

// The stop reasons that name a limit: the only ones an UNKNOWN may end on
// when a status query is configured.
bool IsLimit(StopReason r) {
  switch (r) {
    case StopReason::kDeadlineExceeded:
    case StopReason::kNoTimeForUsefulAttempt:
    case StopReason::kBudgetExhausted:
    case StopReason::kAttemptsExhausted:
    case StopReason::kStatusQueriesExhausted:
    case StopReason::kNotFoundNoAttemptsLeft:
    // Not limits, but no failure either: the server's answer settled
    // nothing (saferetry/settlement.h).
    case StopReason::kAnswerNotDefinite:
    case StopReason::kKeyExpired:
      return true;
    default:
      return false;
  }
}

// Rule 1, written here from docs/outcomes.md and not from the code: the
// answers that prove the intent had no effect.
bool ProvesNoEffect(const AttemptEvidence& ev) {
  if (!ev.http_status.has_value()) return false;
  const int code = *ev.http_status;
  if (ev.is_status_query) {
    return code == 404 &&
           (ev.hints.key_state == KeyState::kCompleted || ev.hints.key_state == KeyState::kFenced);
  }
  if (code == 410) return ev.hints.key_state == KeyState::kFenced;
  if (code < 400 || code > 499 || code == 409 || code == 422 || code == 429) return false;
  return ev.hints.replayed || ev.hints.key_state == KeyState::kCompleted;
}

// An unmarked 503 is an answer, not a proof: a gateway may have forwarded
// the request before answering it. Only `Idempotency-Key-State: rejected`
// says nothing was done.
//
// `key_used_before`: the key did not come from this call (docs/outcomes.md:
// a 410 not fenced for such a key means someone used it before). For a key
// the call minted, a 410 speaks only of this call's own earlier sends, whose
// evidence is judged on its own.
bool MayHaveApplied(const AttemptEvidence& ev, bool key_used_before) {
  return !ev.is_status_query &&
         (ev.delivery == Delivery::kMaybeDelivered ||
          (ev.http_status == 503 && ev.hints.key_state != KeyState::kRejected) ||
          ev.classification == AttemptClass::kAmbiguous ||
          ev.classification == AttemptClass::kInProgress ||
          (key_used_before && ev.http_status == 410 && ev.hints.key_state != KeyState::kFenced));
}

// How the POST's key came to the call.
enum class Prior {
  kNone,          // minted by the call
  kSentLost,      // a killed process sent it; nothing reached the server
  kSentCommitted  // a killed process sent it and the server committed it
};

struct RunReport {
  std::vector<bool> sends;
  Outcome outcome = Outcome::kFailed;
  StopReason stop_reason = StopReason::kInvalidArgument;
  int eventual_effects = 0;
  std::vector<std::string> violations;
};

constexpr char kContinuedKey[] = "order-7f3a-continued";

// The runs' policies with the response predicate the header describes (and
// a deduplicating server, for a continued intent), built once for every run
// as a service builds its policies.
std::shared_ptr<const RetryPolicy> PredicatePolicy(bool deduplicating) {
  static const auto make = [](bool dedup) {
    RetryPolicyOptions p;
    p.server_deduplicates = dedup;
    ResponseRule throttled;
    throttled.json_pointer = "/error";
    throttled.json_value = "throttled";
    throttled.verdict = ResponseVerdict::kNotApplied;
    ResponseRule bad_request;
    bad_request.body_contains = "bad_request";
    bad_request.verdict = ResponseVerdict::kRetry;
    ResponseRule out_of_stock;
    out_of_stock.body_contains = "out_of_stock";
    out_of_stock.verdict = ResponseVerdict::kRetry;
    ResponseRule lie;
    lie.statuses = {409, 410};
    lie.verdict = ResponseVerdict::kNotApplied;
    p.response_predicate.rules = {throttled, bad_request, out_of_stock, lie};
    return RetryPolicy::Create(p).value();
  };
  static const std::shared_ptr<const RetryPolicy> kPlain = make(false);
  static const std::shared_ptr<const RetryPolicy> kDeduplicating = make(true);
  return deduplicating ? kDeduplicating : kPlain;
}

RunReport RunSequence(bool post, const std::vector<Event>& sequence, double u,
                      Flaw flaw = Flaw::kNone, Prior prior = Prior::kNone, bool resolve = false,
                      bool predicate = false) {
  auto clock = std::make_shared<FakeClock>();
  const TimePoint start = clock->Now();
  const Deadline deadline = Deadline::After(start, kCallTimeout);
  auto server = std::make_shared<ModelServer>(clock, sequence, deadline, flaw);

  ClientOptions options;  // defaults, but for the seams
  options.transport = server;
  options.clock = clock;
  options.random = std::make_shared<ScriptedRandom>(std::vector<double>{u});
  Request request;
  if (post) {
    request.method = "POST";
    request.url = kOrdersUrl;
    request.headers = {{"Content-Type", "application/json"}};
    request.body = R"({"sku":"sku-42","quantity":1})";
  } else {
    request.method = "GET";
    request.url = kOrderUrl;
  }
  RunReport run;
  if (prior != Prior::kNone) {
    // The killed process's journal: the intent recorded, its attempt 1
    // marked as sent, never finished.
    JournalOptions jo;
    jo.clock = clock;
    jo.body_cap = 1024;  // a resolve may resend the body, same key
    auto journal = testkit::MakeMemoryJournal(jo);
    if (!journal.ok()) {
      run.violations.push_back(journal.status().ToString());
      return run;
    }
    const absl::StatusOr<RecordResult> recorded = (*journal)->Record(MakeIntent(
        request, kContinuedKey, kByKey, clock->WallNow(), clock->WallNow() + seconds(1)));
    if (!recorded.ok() || !(*journal)->MarkSent(kContinuedKey, 1).ok()) {
      run.violations.push_back("could not prepare the journal");
      return run;
    }
    options.journal = *journal;
    if (prior == Prior::kSentCommitted) server->Preload(kContinuedKey);
  }
  if (predicate) options.policy = PredicatePolicy(prior != Prior::kNone);  // a resolve's too
  auto client = Client::Create(std::move(options));
  if (!client.ok()) {
    run.violations.push_back(absl::StrCat("Client::Create: ", client.status().ToString()));
    return run;
  }

  CallOptions call;  // defaults, but for the timeout and the status URL
  call.timeout = kCallTimeout;
  call.status_url = kByKey;
  if (prior != Prior::kNone) {
    // Built once for every run, as a service builds its policies.
    static const std::shared_ptr<const RetryPolicy> kDeduplicating = [] {
      RetryPolicyOptions p;
      p.server_deduplicates = true;
      return RetryPolicy::Create(p).value();
    }();
    call.idempotency_key = kContinuedKey;
    call.policy = kDeduplicating;
  }
  if (predicate) call.policy = PredicatePolicy(prior != Prior::kNone);

  // A resolve (the reconciler's engine) of the continued intent: status
  // queries first, one same-key resend allowed, the same invariants.
  ResolveOptions ro;
  ro.timeout = kCallTimeout;
  ro.resend_if_server_deduplicates = true;
  // The killed process's claim still holds at this instant; the resolver
  // takes it over under the same owner name (a reconciler would wait for it
  // to expire; what follows is the same).
  if (resolve) ro.owner = (*client)->options().journal->Owner();
  const CallResult r =
      resolve ? (*client)->Resolve(kContinuedKey, ro) : (*client)->Execute(request, call);
  const TimePoint end = clock->Now();

  run.sends = server->sends();
  run.outcome = r.outcome;
  run.stop_reason = r.stop_reason;
  run.eventual_effects = server->EventualEffects();
  std::vector<std::string>& v = run.violations;
  v = server->violations();
  if (!r.status.ok()) v.push_back(absl::StrCat("the call did not start: ", r.status.message()));

  // Time: the call ends by its deadline.
  if (end > deadline.at() || r.elapsed > kCallTimeout) {
    v.push_back(
        absl::StrCat("the call ran past its deadline by ", (end - deadline.at()).count(), " ns"));
  }

  if (!post) {
    if (r.outcome == Outcome::kUnknown) v.push_back("a GET ended UNKNOWN");
    if (run.eventual_effects != 0) v.push_back("a GET had an effect");
    if (r.outcome == Outcome::kSucceeded &&
        (!r.last_response.has_value() || r.last_response->status_code != 200)) {
      v.push_back("a GET SUCCEEDED without a 200");
    }
    return run;
  }

  // One intent, one key: a second key (or none) would be a fresh request.
  if (server->keys_seen() > 1) v.push_back(absl::StrCat(server->keys_seen(), " keys for one call"));
  if (run.eventual_effects > 1) v.push_back(absl::StrCat(run.eventual_effects, " effects"));
  switch (r.outcome) {
    case Outcome::kSucceeded:
      if (run.eventual_effects != 1 || server->CommittedEffects(end) != 1) {
        v.push_back(
            absl::StrCat("SUCCEEDED with ", server->CommittedEffects(end), " committed effects"));
      }
      break;
    case Outcome::kFailed: {
      if (run.eventual_effects != 0) v.push_back("FAILED but the effect exists (or will)");
      // Rule 1: after an attempt that may have taken effect, FAILED only on
      // a definite answer that came after it.
      bool doubt = prior != Prior::kNone;
      for (const AttemptEvidence& ev : r.evidence) {
        if (MayHaveApplied(ev, prior != Prior::kNone)) doubt = true;
        if (ProvesNoEffect(ev)) doubt = false;
      }
      if (doubt) v.push_back("FAILED after an attempt that may have taken effect, unsettled");
      break;
    }
    case Outcome::kUnknown: {
      if (!IsLimit(r.stop_reason)) {
        v.push_back(absl::StrCat("UNKNOWN on a stop that is not a limit: ",
                                 std::string(StopReasonName(r.stop_reason))));
      }
      // From the client's view the effect is unresolved: some send of the
      // request may have taken effect, and nothing it received settles it.
      bool may_have_applied = false;
      for (const AttemptEvidence& ev : r.evidence) {
        if (ev.classification == AttemptClass::kSuccess) {
          v.push_back("UNKNOWN after a success or a \"found\" answer");
        }
        if (ProvesNoEffect(ev)) v.push_back("UNKNOWN after a definite answer");
        if (MayHaveApplied(ev, prior != Prior::kNone)) may_have_applied = true;
      }
      if (!may_have_applied && prior == Prior::kNone)
        v.push_back("UNKNOWN without an attempt that may have applied");
      if (r.resolved_by != ResolvedBy::kNone) v.push_back("UNKNOWN but marked resolved");
      break;
    }
  }
  return run;
}

int DepthFromEnv() {
  const char* env = std::getenv("SAFERETRY_EXHAUSTIVE_DEPTH");
  if (env == nullptr || *env == '\0') return 12;
  const int n = std::atoi(env);
  return n >= 0 ? n : 12;
}

// SAFERETRY_EXHAUSTIVE_LIST=1 prints every sequence with its outcome.
bool ListFromEnv() {
  const char* env = std::getenv("SAFERETRY_EXHAUSTIVE_LIST");
  return env != nullptr && *env != '\0' && *env != '0';
}

struct Tally {
  std::int64_t runs = 0;
  std::map<Outcome, std::int64_t> outcomes;
  std::map<StopReason, std::int64_t> reasons;
  std::int64_t unknown_with_effect = 0;
  std::int64_t unknown_without_effect = 0;
  int max_sends = 0;
  int failures = 0;
  // Runs whose call sent more events than `depth`: the search covered every
  // behaviour of the call, at any depth, when this stays 0.
  std::int64_t cut = 0;
  bool list = false;  // print every sequence and its outcome
  // The negative controls run a flawed server and collect the violations
  // instead of failing.
  Flaw flaw = Flaw::kNone;
  Prior prior = Prior::kNone;
  bool resolve = false;    // Client::Resolve instead of Execute (with a prior)
  bool predicate = false;  // the response predicate's policy and events
  std::vector<std::string> collected;
};

// Runs `prefix` and every extension of it by one abnormal event of the kind
// the call sends next, up to `depth` events.
void Explore(bool post, double u, int depth, std::vector<Event>& prefix, Tally& tally) {
  const RunReport run =
      RunSequence(post, prefix, u, tally.flaw, tally.prior, tally.resolve, tally.predicate);
  ++tally.runs;
  ++tally.outcomes[run.outcome];
  ++tally.reasons[run.stop_reason];
  tally.max_sends = std::max(tally.max_sends, static_cast<int>(run.sends.size()));
  if (run.outcome == Outcome::kUnknown) {
    ++(run.eventual_effects > 0 ? tally.unknown_with_effect : tally.unknown_without_effect);
  }
  if (tally.list) {
    std::cout << (post ? "POST" : "GET") << " u=" << u << " [" << Describe(prefix) << "] -> "
              << OutcomeName(run.outcome) << " (" << StopReasonName(run.stop_reason)
              << "), effects " << run.eventual_effects << ", " << run.sends.size() << " sends\n";
  }
  for (const std::string& s : run.violations) {
    if (tally.flaw != Flaw::kNone) {
      tally.collected.push_back(s);
    } else if (tally.failures < 10) {
      ADD_FAILURE() << (post ? "POST" : "GET") << " u=" << u << " [" << Describe(prefix)
                    << "]: " << s << " (" << OutcomeName(run.outcome) << ", "
                    << StopReasonName(run.stop_reason) << ")";
    }
    ++tally.failures;
  }
  if (run.sends.size() <= prefix.size()) return;  // the call ended: a leaf
  if (static_cast<int>(prefix.size()) >= depth) {
    ++tally.cut;  // the call sent more events than the depth explores
    return;
  }
  const bool next_is_query = run.sends[prefix.size()];
  auto branch = [&](Event e) {
    prefix.push_back(e);
    Explore(post, u, depth, prefix, tally);
    prefix.pop_back();
  };
  // The normal event too: the run of `prefix` + normal behaves like this
  // one, but what the call sends after it has its own abnormal events.
  if (next_is_query) {
    for (Event e : kQueryEvents) branch(e);
  } else if (tally.predicate) {
    for (Event e : PredicateSendEvents()) branch(e);
  } else {
    for (Event e : kSendEvents) branch(e);
  }
}

std::int64_t CountOf(const Tally& t, Outcome o) {
  auto it = t.outcomes.find(o);
  return it == t.outcomes.end() ? 0 : it->second;
}

void Print(const char* what, double u, int depth, const Tally& t) {
  std::cout << what << " u=" << u << " depth " << depth << ": " << t.runs
            << " distinct sequences, up to " << t.max_sends << " sends; "
            << CountOf(t, Outcome::kSucceeded) << " SUCCEEDED, " << CountOf(t, Outcome::kFailed)
            << " FAILED, " << CountOf(t, Outcome::kUnknown) << " UNKNOWN (" << t.unknown_with_effect
            << " with the effect, " << t.unknown_without_effect << " without); "
            << (t.cut == 0 ? std::string("complete: no call sent more events")
                           : absl::StrCat(t.cut, " runs sent more events"))
            << "\n";
  for (const auto& [reason, n] : t.reasons) {
    std::cout << "    " << StopReasonName(reason) << ": " << n << "\n";
  }
}

// The jitter samples each search is run with: the lower bound, the middle
// and the upper bound of every wait.
constexpr double kSamples[] = {0.0, 0.5, testkit::kJustBelowOne};

// Runs the whole search for every jitter sample and adds the tallies up.
Tally ExploreEverySample(bool post, Prior prior, const char* what, int depth, bool resolve = false,
                         bool predicate = false) {
  Tally all;
  for (double u : kSamples) {
    // The predicate's runs take the middle sample only: the waits are the
    // other tests' subject, and the larger alphabet triples the sequences.
    if (predicate && u != 0.5) continue;
    Tally t;
    t.list = ListFromEnv();
    t.prior = prior;
    t.resolve = resolve;
    t.predicate = predicate;
    std::vector<Event> prefix;
    Explore(post, u, depth, prefix, t);
    Print(what, u, depth, t);
    all.runs += t.runs;
    all.failures += t.failures;
    for (const auto& [o, n] : t.outcomes) all.outcomes[o] += n;
  }
  return all;
}

TEST(ExhaustiveTest, EveryEventSequenceOfAPostKeepsTheInvariants) {
  const int depth = DepthFromEnv();
  Tally all = ExploreEverySample(/*post=*/true, Prior::kNone, "POST", depth);
  std::cout << "POST: " << all.runs << " sequences checked, " << all.failures << " violations\n";
  EXPECT_EQ(all.failures, 0);
  // The search must reach every outcome, or the invariants were checked on
  // too narrow a set of histories.
  if (depth >= 3) {
    EXPECT_GT(all.outcomes[Outcome::kSucceeded], 0);
    EXPECT_GT(all.outcomes[Outcome::kUnknown], 0);
  }
}

// Rule 3: a continued intent, whose first process's attempt may have
// committed, never ends FAILED unless a definite answer came.
TEST(ExhaustiveTest, EveryEventSequenceOfAContinuedPostKeepsTheInvariants) {
  const int depth = DepthFromEnv();
  Tally all;
  for (Prior prior : {Prior::kSentLost, Prior::kSentCommitted}) {
    const Tally t = ExploreEverySample(
        /*post=*/true, prior,
        prior == Prior::kSentLost ? "continued POST (lost)" : "continued POST (committed)", depth);
    all.runs += t.runs;
    all.failures += t.failures;
    for (const auto& [o, n] : t.outcomes) all.outcomes[o] += n;
  }
  std::cout << "continued POST: " << all.runs << " sequences checked, " << all.failures
            << " violations\n";
  EXPECT_EQ(all.failures, 0);
  if (depth >= 3) {
    EXPECT_GT(all.outcomes[Outcome::kSucceeded], 0);
    EXPECT_GT(all.outcomes[Outcome::kFailed], 0);
    EXPECT_GT(all.outcomes[Outcome::kUnknown], 0);
  }
}

// One engine: the resolve of a continued intent (status queries first, one
// same-key resend to a deduplicating server) keeps the same invariants on
// every event sequence: FAILED only on a definite answer, never two effects.
TEST(ExhaustiveTest, EveryEventSequenceOfAResolveKeepsTheInvariants) {
  const int depth = DepthFromEnv();
  Tally all;
  for (Prior prior : {Prior::kSentLost, Prior::kSentCommitted}) {
    const Tally t = ExploreEverySample(
        /*post=*/true, prior, prior == Prior::kSentLost ? "resolve (lost)" : "resolve (committed)",
        depth,
        /*resolve=*/true);
    all.runs += t.runs;
    all.failures += t.failures;
    for (const auto& [o, n] : t.outcomes) all.outcomes[o] += n;
  }
  std::cout << "resolve: " << all.runs << " sequences checked, " << all.failures << " violations\n";
  EXPECT_EQ(all.failures, 0);
  if (depth >= 3) {
    EXPECT_GT(all.outcomes[Outcome::kSucceeded], 0);
    EXPECT_GT(all.outcomes[Outcome::kUnknown], 0);
  }
}

TEST(ExhaustiveTest, EveryEventSequenceOfAGetKeepsTheInvariantsAndIsNeverUnknown) {
  const int depth = DepthFromEnv();
  Tally all = ExploreEverySample(/*post=*/false, Prior::kNone, "GET", depth);
  std::cout << "GET: " << all.runs << " sequences checked, " << all.failures << " violations\n";
  EXPECT_EQ(all.failures, 0);
  EXPECT_EQ(all.outcomes[Outcome::kUnknown], 0);
  if (depth >= 3) {
    EXPECT_GT(all.outcomes[Outcome::kSucceeded], 0);
    EXPECT_GT(all.outcomes[Outcome::kFailed], 0);
  }
}

// A response predicate reads the answers (throttled, a stored throttled
// answer replayed, a rule that would declare 409 and 410 "not applied"): the
// same invariants hold for a new POST, a continued one, a resolve and a GET
// (the jitter's middle sample).
TEST(ExhaustiveTest, EveryEventSequenceWithAResponsePredicateKeepsTheInvariants) {
  const int depth = DepthFromEnv();
  Tally all;
  const auto add = [&](const Tally& t) {
    all.runs += t.runs;
    all.failures += t.failures;
    for (const auto& [o, n] : t.outcomes) all.outcomes[o] += n;
  };
  add(ExploreEverySample(true, Prior::kNone, "predicate POST", depth, false, true));
  for (Prior prior : {Prior::kSentLost, Prior::kSentCommitted}) {
    add(ExploreEverySample(true, prior, "predicate continued POST", depth, false, true));
    add(ExploreEverySample(true, prior, "predicate resolve", depth, true, true));
  }
  const Tally get = ExploreEverySample(false, Prior::kNone, "predicate GET", depth, false, true);
  add(get);
  std::cout << "with a response predicate: " << all.runs << " sequences checked, " << all.failures
            << " violations\n";
  EXPECT_EQ(all.failures, 0);
  EXPECT_EQ(get.outcomes.count(Outcome::kUnknown), 0u);
  if (depth >= 3) {
    EXPECT_GT(all.outcomes[Outcome::kSucceeded], 0);
    EXPECT_GT(all.outcomes[Outcome::kFailed], 0);
    EXPECT_GT(all.outcomes[Outcome::kUnknown], 0);
  }
}

// The predicate's runs reach its paths: a throttled answer is resent with the
// same key and the resend's order stands; a stored throttled answer ends
// FAILED at the attempt cap with no order.
TEST(ExhaustiveTest, ThePredicateRunsReachThePredicatesPaths) {
  const RunReport once = RunSequence(true, {Event::kThrottled}, 0.5, Flaw::kNone, Prior::kNone,
                                     false, /*predicate=*/true);
  EXPECT_EQ(once.outcome, Outcome::kSucceeded);
  EXPECT_EQ(once.sends, (std::vector<bool>{false, false}));
  EXPECT_EQ(once.eventual_effects, 1);
  EXPECT_TRUE(once.violations.empty());
  const RunReport stored = RunSequence(true, {Event::kStoredThrottled}, 0.5, Flaw::kNone,
                                       Prior::kNone, false, /*predicate=*/true);
  EXPECT_EQ(stored.outcome, Outcome::kFailed);
  EXPECT_EQ(stored.stop_reason, StopReason::kAttemptsExhausted);
  EXPECT_EQ(stored.sends, (std::vector<bool>{false, false, false}));
  EXPECT_EQ(stored.eventual_effects, 0);
  EXPECT_TRUE(stored.violations.empty());
}

// The search itself: the all-normal sequence is one POST that succeeds, and
// each abnormal first event is explored.
TEST(ExhaustiveTest, SearchBranchesOnEveryAbnormalEvent) {
  const RunReport normal = RunSequence(/*post=*/true, {}, 0.5);
  EXPECT_EQ(normal.outcome, Outcome::kSucceeded);
  EXPECT_EQ(normal.sends, std::vector<bool>{false});
  EXPECT_TRUE(normal.violations.empty());
  Tally t;
  std::vector<Event> prefix;
  Explore(/*post=*/true, 0.5, /*depth=*/1, prefix, t);
  EXPECT_EQ(t.runs, 1 + 11);  // every send event, the normal one too
  Tally zero;
  Explore(/*post=*/true, 0.5, /*depth=*/0, prefix, zero);
  EXPECT_EQ(zero.runs, 1);
}

// Negative controls: a server that breaks the contract is caught, so the
// invariants above can fail.
bool Collected(Flaw flaw, const std::string& violation) {
  Tally t;
  t.flaw = flaw;
  std::vector<Event> prefix;
  Explore(/*post=*/true, 0.5, /*depth=*/3, prefix, t);
  for (const std::string& s : t.collected) {
    if (absl::StrContains(s, violation)) return true;
  }
  return false;
}

TEST(ExhaustiveTest, InvariantsCatchAStoredErrorForAnExistingOrder) {
  EXPECT_TRUE(Collected(Flaw::kStoredErrorForAnOrder, "FAILED but the effect exists"));
}

TEST(ExhaustiveTest, InvariantsCatchAFoundAnswerForAnUnknownKey) {
  EXPECT_TRUE(Collected(Flaw::kFoundForAnUnknownKey, "SUCCEEDED with 0 committed effects"));
}

TEST(ExhaustiveTest, InvariantsCatchAServerThatForgetsKeys) {
  EXPECT_TRUE(Collected(Flaw::kForgetsKeys, "2 effects"));
}

}  // namespace
}  // namespace saferetry

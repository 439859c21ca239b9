// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The blocking driver: runs a CallStateMachine, performing its actions with
// the transport and the clock.

#include "saferetry/client.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace saferetry {
namespace {

absl::Status Prefixed(std::string_view prefix, const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), std::string(prefix) + std::string(s.message()));
}

CallResult InvalidCall(absl::Status status) {
  CallResult r;
  r.outcome = Outcome::kFailed;
  r.stop_reason = StopReason::kInvalidArgument;
  r.status = std::move(status);
  return r;
}

AttemptEvidence EvidenceOf(const TransportResult& tr, TimePoint start, TimePoint end,
                           Clock& clock, const ClientOptions& options) {
  AttemptEvidence ev;
  ev.start = start;
  ev.end = end;
  ev.delivery = tr.delivery;
  ev.transport_status = tr.status;
  ev.timings = tr.timings;
  if (tr.response.has_value()) {
    ev.http_status = tr.response->status_code;
    ev.hints = ExtractServerHints(tr.response->headers, clock.WallNow(), options.hints);
    if (!options.request_id_header.empty()) {
      auto id = FindHeader(tr.response->headers, options.request_id_header);
      if (id.has_value()) ev.downstream_request_id = std::string(*id);
    }
  }
  return ev;
}

}  // namespace

absl::Status ValidateCallOptions(const CallOptions& options) {
  if (options.max_attempts < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("call.max_attempts: must be >= 1, got ", options.max_attempts));
  }
  if (options.max_status_queries < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "call.max_status_queries: must be >= 0 (0: derived from the deadline), got ",
        options.max_status_queries));
  }
  if (!options.deadline.has_value() && options.timeout <= Duration::zero()) {
    return absl::InvalidArgumentError("call.timeout: must be > 0");
  }
  absl::Status s = ValidateBackoffParams(options.backoff);
  if (!s.ok()) return Prefixed("call.backoff.", s);
  s = ValidateBackoffParams(options.poll_backoff);
  if (!s.ok()) return Prefixed("call.poll_backoff.", s);
  s = ValidateDeadlineOptions(options.deadline_options);
  if (!s.ok()) return Prefixed("call.deadline_options.", s);
  if (!options.idempotency_key.empty()) {
    if (options.key_mode == KeyMode::kNever) {
      return absl::InvalidArgumentError(
          "call.idempotency_key: set while call.key_mode is kNever");
    }
    s = ValidateIdempotencyKey(options.idempotency_key);
    if (!s.ok()) return Prefixed("call.", s);
  }
  if (options.status_query.callback || !options.status_query.url_template.empty()) {
    s = ValidateStatusQuery(options.status_query);
    if (!s.ok()) return Prefixed("call.", s);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Client>> Client::Create(ClientOptions options) {
  if (options.transport == nullptr) {
    return absl::InvalidArgumentError("transport: required");
  }
  if (options.clock == nullptr) options.clock = SystemClock();
  if (options.random == nullptr) options.random = DefaultRandom();
  if (options.classifier == nullptr) options.classifier = DefaultClassifierInstance();
  if (options.budget == nullptr) {
    auto budget = RatioBudget::Create(RatioBudgetOptions{});
    if (!budget.ok()) return budget.status();
    options.budget = *std::move(budget);
  }
  if (options.status_query_budget == nullptr) {
    auto allowance = RatioBudget::Create(DefaultStatusQueryAllowance());
    if (!allowance.ok()) return allowance.status();
    options.status_query_budget = *std::move(allowance);
  }
  absl::Status s = ValidateHeader({options.idempotency_header, "k"}, "idempotency_header");
  if (!s.ok()) return s;
  if (!options.deadline_header.empty()) {
    s = ValidateHeader({options.deadline_header, "0"}, "deadline_header");
    if (!s.ok()) return s;
  }
  if (options.hints.max_retry_after <= Duration::zero()) {
    return absl::InvalidArgumentError("hints.max_retry_after: must be > 0");
  }
  if (!options.attempt_header.empty()) {
    s = ValidateHeader({options.attempt_header, "0"}, "attempt_header");
    if (!s.ok()) return s;
  }
  if (!options.request_id_header.empty()) {
    s = ValidateHeader({options.request_id_header, "0"}, "request_id_header");
    if (!s.ok()) return s;
  }
  if (!options.hints.do_not_retry_header.empty()) {
    s = ValidateHeader({options.hints.do_not_retry_header, "x"}, "hints.do_not_retry_header");
    if (!s.ok()) return s;
  }
  return std::make_unique<Client>(std::move(options));
}

Client::Client(ClientOptions options)
    : options_(std::move(options)), fingerprints_(options_.fingerprint_capacity) {}

CallResult Client::Execute(const Request& request, const CallOptions& options) {
  Clock& clock = *options_.clock;
  const TimePoint start = clock.Now();

  absl::Status s = ValidateRequest(request);
  if (!s.ok()) return InvalidCall(std::move(s));
  s = ValidateCallOptions(options);
  if (!s.ok()) return InvalidCall(std::move(s));

  // One key per logical call: supplied in the options, already present in
  // the request's headers, or minted here.
  const bool idempotent = IsIdempotent(request);
  std::optional<std::string> key;
  bool key_in_request = false;
  bool key_minted = false;
  if (options.key_mode != KeyMode::kNever) {
    std::optional<std::string_view> header_key =
        FindHeader(request.headers, options_.idempotency_header);
    if (header_key.has_value()) {
      std::string_view v = *header_key;
      if (options_.key_form == KeyForm::kQuotedString && v.size() >= 2 && v.front() == '"' &&
          v.back() == '"') {
        v = v.substr(1, v.size() - 2);
      }
      if (!options.idempotency_key.empty() && options.idempotency_key != v) {
        return InvalidCall(absl::InvalidArgumentError(
            "call.idempotency_key: differs from the request's own idempotency header"));
      }
      s = ValidateIdempotencyKey(v);
      if (!s.ok()) return InvalidCall(Prefixed("request.headers.", s));
      key = std::string(v);
      key_in_request = true;
    } else if (!options.idempotency_key.empty()) {
      key = options.idempotency_key;
    } else if (options.key_mode == KeyMode::kAlways ||
               (options.key_mode == KeyMode::kAuto && !idempotent)) {
      if (options_.key_source == ClientOptions::KeySource::kRandomSeam) {
        key = GenerateUuidV4(*options_.random);
      } else {
        absl::StatusOr<std::string> minted = MintIdempotencyKey();
        // Could not even start: nothing is sent without a key.
        if (!minted.ok()) return InvalidCall(Prefixed("idempotency key: ", minted.status()));
        key = *std::move(minted);
      }
      key_minted = true;
    }
  }
  // A freshly minted key cannot have been used before; only a caller's key
  // can be reused for another request by mistake.
  if (key.has_value() && !key_minted) {
    s = fingerprints_.CheckAndRemember(*key, request.method, request.url, request.body);
    if (!s.ok()) return InvalidCall(std::move(s));
  }

  const bool has_query =
      static_cast<bool>(options.status_query.callback) || !options.status_query.url_template.empty();

  CallPolicy policy;
  policy.max_attempts = std::min(options.max_attempts, kMaxAttemptsHardCap);
  policy.backoff = options.backoff;
  policy.poll_backoff = options.poll_backoff;
  policy.deadline_options = options.deadline_options;
  policy.deadline = options.deadline.value_or(Deadline::After(start, options.timeout));
  policy.traits.idempotent = idempotent;
  policy.traits.safe = IsSafeMethod(request.method);
  policy.traits.keyed = key.has_value();
  policy.has_status_query = key.has_value() && has_query;
  policy.fence_when_giving_up =
      options.status_query.fence_when_giving_up && !options.status_query.callback;
  policy.server_deduplicates = options.server_deduplicates;
  policy.max_status_queries = std::min(options.max_status_queries, kMaxStatusQueriesHardCap);

  CallStateMachine machine(policy, options_.budget.get(), options_.classifier.get(),
                           options_.random.get(), options.cancellation,
                           options_.status_query_budget.get());

  // Headers saferetry adds to every attempt: the key, the deadline, the
  // attempt number. Status queries carry the key and the deadline only.
  Headers extra;
  extra.reserve(3);
  if (key.has_value() && !key_in_request) {
    extra.emplace_back(options_.idempotency_header, FormatIdempotencyKey(*key, options_.key_form));
  }
  const bool send_deadline = !options_.deadline_header.empty() && !policy.deadline.is_infinite();
  const std::size_t deadline_index = extra.size();
  if (send_deadline) extra.emplace_back(options_.deadline_header, std::string());
  const bool send_attempt = !options_.attempt_header.empty();
  const std::size_t attempt_index = extra.size();
  if (send_attempt) extra.emplace_back(options_.attempt_header, std::string());

  std::optional<Request> query_request;
  Headers query_extra;
  CallListener* listener = options.listener;

  CallAction action = machine.Start(start);
  while (action.kind != CallAction::Kind::kFinish) {
    switch (action.kind) {
      case CallAction::Kind::kSendAttempt: {
        // The attempt's own timeout is what the server may spend: it is at
        // most the remaining deadline less the margin.
        if (send_deadline) extra[deadline_index].second = EncodeDeadlineHeader(action.timeout);
        if (send_attempt) {
          extra[attempt_index].second =
              absl::StrCat("attempt=", action.number, "; max=", policy.max_attempts);
        }
        if (listener != nullptr) listener->OnAttemptStart(action.number, false);
        AttemptOptions ao;
        ao.timeout = action.timeout;
        ao.extra_headers = &extra;
        ao.cancellation = options.cancellation;
        const TimePoint t0 = clock.Now();
        TransportResult tr = options_.transport->Send(request, ao);
        const TimePoint t1 = clock.Now();
        AttemptEvidence ev = EvidenceOf(tr, t0, t1, clock, options_);
        action = machine.OnAttemptDone(std::move(ev), std::move(tr.response), t1);
        if (listener != nullptr) listener->OnAttemptEnd(machine.result().evidence.back());
        break;
      }
      case CallAction::Kind::kSendStatusQuery: {
        if (listener != nullptr) listener->OnAttemptStart(action.number, true);
        StatusQueryReply reply;
        const TimePoint t0 = clock.Now();
        if (options.status_query.callback) {
          reply = options.status_query.callback(*key, action.timeout);
        } else {
          if (!query_request.has_value()) {
            query_request = BuildStatusQueryRequest(options.status_query, request, *key);
            query_extra.assign(extra.begin(), extra.begin() + static_cast<std::ptrdiff_t>(attempt_index));
          }
          if (send_deadline) {
            query_extra[deadline_index].second = EncodeDeadlineHeader(action.timeout);
          }
          if (action.fence) {
            query_extra.emplace_back(std::string(kFenceHeader), "true");
          }
          AttemptOptions ao;
          ao.timeout = action.timeout;
          ao.extra_headers = &query_extra;
          ao.cancellation = options.cancellation;
          reply.result = options_.transport->Send(*query_request, ao);
          reply.answer = MapStatusAnswer(reply.result);
        }
        const TimePoint t1 = clock.Now();
        AttemptEvidence ev = EvidenceOf(reply.result, t0, t1, clock, options_);
        action = machine.OnStatusAnswer(reply.answer, std::move(ev), std::move(reply.result.response),
                                        t1);
        if (listener != nullptr) listener->OnAttemptEnd(machine.result().evidence.back());
        break;
      }
      case CallAction::Kind::kWait: {
        if (listener != nullptr) {
          listener->OnWaitScheduled(action.delay, action.delay_from_server_hint);
        }
        if (options.cancellation != nullptr) {
          clock.SleepFor(action.delay, *options.cancellation);
        } else {
          clock.SleepFor(action.delay);
        }
        action = machine.OnWaitOver(clock.Now());
        break;
      }
      case CallAction::Kind::kFinish:
        break;
    }
  }

  CallResult result = machine.TakeResult();
  result.idempotency_key = std::move(key);
  if (listener != nullptr) listener->OnFinish(result);
  return result;
}

}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The blocking driver: runs a CallStateMachine, performing its actions with
// the transport and the clock.

#include "saferetry/client.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "saferetry/internal/call_setup.h"

namespace saferetry {
namespace {

absl::Status Prefixed(std::string_view prefix, const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), std::string(prefix) + std::string(s.message()));
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
  absl::StatusOr<internal::PreparedCall> prepared =
      internal::PrepareCall(options_, fingerprints_, request, options, start);
  if (!prepared.ok()) return internal::InvalidCall(prepared.status());
  internal::PreparedCall& call = *prepared;

  CallStateMachine machine(call.policy, options_.budget.get(), options_.classifier.get(),
                           options_.random.get(), options.cancellation,
                           options_.status_query_budget.get());
  std::optional<Request> query_request;
  CallListener* listener = options.listener;

  CallAction action = machine.Start(start);
  while (action.kind != CallAction::Kind::kFinish) {
    switch (action.kind) {
      case CallAction::Kind::kSendAttempt: {
        internal::StampAttemptHeaders(call, action);
        if (listener != nullptr) listener->OnAttemptStart(action.number, false);
        AttemptOptions ao;
        ao.timeout = action.timeout;
        ao.extra_headers = &call.extra;
        ao.cancellation = options.cancellation;
        const TimePoint t0 = clock.Now();
        TransportResult tr = options_.transport->Send(request, ao);
        const TimePoint t1 = clock.Now();
        AttemptEvidence ev = internal::EvidenceOf(tr, t0, t1, clock.WallNow(), options_);
        action = machine.OnAttemptDone(std::move(ev), std::move(tr.response), t1);
        if (listener != nullptr) listener->OnAttemptEnd(machine.result().evidence.back());
        break;
      }
      case CallAction::Kind::kSendStatusQuery: {
        if (listener != nullptr) listener->OnAttemptStart(action.number, true);
        StatusQueryReply reply;
        const TimePoint t0 = clock.Now();
        if (options.status_query.callback) {
          reply = options.status_query.callback(*call.key, action.timeout);
        } else {
          if (!query_request.has_value()) {
            query_request = internal::StatusQueryRequest(call, options.status_query, request);
          }
          const Headers query_extra = internal::StatusQueryHeaders(call, action);
          AttemptOptions ao;
          ao.timeout = action.timeout;
          ao.extra_headers = &query_extra;
          ao.cancellation = options.cancellation;
          reply.result = options_.transport->Send(*query_request, ao);
          reply.answer = MapStatusAnswer(reply.result);
        }
        const TimePoint t1 = clock.Now();
        AttemptEvidence ev = internal::EvidenceOf(reply.result, t0, t1, clock.WallNow(), options_);
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
      case CallAction::Kind::kNone:
      case CallAction::Kind::kFinish:
        // One attempt at a time: the machine never waits on another here.
        break;
    }
  }

  CallResult result = machine.TakeResult();
  result.idempotency_key = std::move(call.key);
  if (listener != nullptr) listener->OnFinish(result);
  return result;
}

}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The blocking driver: runs a CallStateMachine, performing its actions with
// the transport and the clock.

#include "saferetry/client.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "call/call_session.h"
#include "common/status_internal.h"
#include "common/validated_send.h"
#include "saferetry/settlement.h"

namespace saferetry {

using internal::Prefixed;

namespace internal {

absl::Status CompleteClientOptions(ClientOptions& options) {
  if (options.clock == nullptr) options.clock = SystemClock();
  if (options.random == nullptr) options.random = DefaultRandom();
  if (options.classifier == nullptr) options.classifier = DefaultClassifierInstance();
  if (options.budget == nullptr) {
    auto budget = MakeRatioBudget(RatioBudgetOptions{});
    if (!budget.ok()) return budget.status();
    options.budget = *std::move(budget);
  }
  if (options.status_query_budget == nullptr) {
    auto allowance = MakeRatioBudget(DefaultStatusQueryAllowance());
    if (!allowance.ok()) return allowance.status();
    options.status_query_budget = *std::move(allowance);
  }
  if (options.policy == nullptr) options.policy = RetryPolicy::Default();
  return absl::OkStatus();
}

}  // namespace internal

absl::StatusOr<std::unique_ptr<Client>> Client::Create(ClientOptions options) {
  if (options.transport == nullptr) {
    return absl::InvalidArgumentError("transport: required");
  }
  if (absl::Status s = internal::CompleteClientOptions(options); !s.ok()) return s;
  return std::unique_ptr<Client>(new Client(std::move(options)));
}

Client::Client(ClientOptions options)
    : options_(std::move(options)),
      services_(internal::MachineServices(options_)),
      fingerprints_(options_.fingerprint_capacity),
      unsent_(std::make_shared<internal::UnsentRecords>()),
      prevalidated_(dynamic_cast<internal::PrevalidatedSender*>(options_.transport.get())) {}

CallResult Client::Execute(const Request& request, const CallOptions& options) {
  internal::CallSession session(options_, request, options);
  const TimePoint start = options_.clock->Now();
  if (std::optional<CallResult> early = session.Begin(fingerprints_, *unsent_, options, start)) {
    return *std::move(early);
  }
  return Run(session, options.cancellation, start);
}

CallResult Client::Run(internal::CallSession& session, const CancellationToken* cancellation,
                       TimePoint start) {
  Clock& clock = *options_.clock;
  Transport& transport = *options_.transport;
  // The machine builds the result in the object this returns: never moved.
  CallResult result;
  CallStateMachine machine(session.machine_policy(), &services_, cancellation);
  machine.BuildResultIn(&result);
  CallAction action = machine.Start(start);
  while (action.kind != CallAction::Kind::kFinish) {
    switch (action.kind) {
      case CallAction::Kind::kSendAttempt: {
        AttemptOptions ao;
        ao.cancellation = cancellation;
        internal::SendHeaders headers;
        if (std::optional<CallAction> next = session.BeforeAttempt(machine, action, headers, ao)) {
          action = *next;
          break;
        }
        const TimePoint t0 = session.SendStart(machine);
        // Validated when the call began: a transport that can send a
        // validated request need not check it again.
        TransportResult tr = prevalidated_ != nullptr && session.request_validated()
                                 ? prevalidated_->SendPrevalidated(session.request(), ao)
                                 : transport.Send(session.request(), ao);
        const std::uint32_t id = action.attempt_id;
        action = session.AfterAttempt(machine, id, std::move(tr), t0);
        break;
      }
      case CallAction::Kind::kSendStatusQuery: {
        AttemptOptions ao;
        ao.cancellation = cancellation;
        const Request* query = nullptr;
        internal::SendHeaders headers;
        if (std::optional<CallAction> next =
                session.BeforeStatusQuery(machine, action, &query, headers, ao)) {
          action = *next;
          break;
        }
        const TimePoint t0 = session.SendStart(machine);
        TransportResult tr = transport.Send(*query, ao);
        action = session.AfterStatusQuery(machine, std::move(tr), t0);
        break;
      }
      case CallAction::Kind::kWait: {
        session.OnWait(action);
        if (cancellation != nullptr) {
          clock.SleepFor(action.delay, *cancellation);
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
  session.FinishIn(result);
  return result;
}

absl::Status ValidateResolveOptions(const ResolveOptions& options) {
  if (options.timeout <= Duration::zero()) {
    return absl::InvalidArgumentError("resolve.timeout: must be > 0");
  }
  if (options.max_status_queries < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("resolve.max_status_queries: must be >= 1, got ", options.max_status_queries));
  }
  absl::Status s = ValidateBackoffParams(options.poll_backoff);
  if (!s.ok()) return Prefixed("resolve.poll_backoff.", s);
  for (const Header& h : options.headers) {
    s = ValidateHeader(h, "resolve.headers");
    if (!s.ok()) return s;
  }
  if (!options.status_url_template.empty()) {
    StatusQuery q;
    q.url_template = options.status_url_template;
    s = ValidateStatusQuery(q);
    if (!s.ok()) return Prefixed("resolve.", s);
  }
  return absl::OkStatus();
}

CallResult Client::Resolve(std::string_view key, const ResolveOptions& options) {
  static const Request kNoRequest;
  static const CallOptions kNoOptions;
  internal::CallSession session(options_, kNoRequest, kNoOptions);
  const TimePoint start = options_.clock->Now();
  if (std::optional<CallResult> early = session.BeginResolve(key, options, start)) {
    return *std::move(early);
  }
  return Run(session, nullptr, start);
}

}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The call wrapper. `Client::Execute` runs one logical call: one stable
// idempotency key on every attempt, each attempt classified from evidence,
// retries admitted by a shared budget and fitted under the deadline, and an
// ambiguous result resolved by a status query, never by a fresh request.
//
// @code
//   saferetry::ClientOptions options;
//   options.transport = saferetry::MakeCurlTransport({}).value();
//   auto client = saferetry::Client::Create(std::move(options));
//   if (!client.ok()) return client.status();
//
//   saferetry::Request req{"POST", "http://127.0.0.1:8080/orders", {}, R"({"sku":"a"})"};
//   saferetry::CallOptions call;
//   call.timeout = std::chrono::seconds(2);
//   call.status_url = "http://127.0.0.1:8080/orders/by-key/{key}";
//   saferetry::CallResult r = (*client)->Execute(req, call);
//   switch (r.outcome) {
//     case saferetry::Outcome::kSucceeded: ...  // exactly one order
//     case saferetry::Outcome::kFailed: ...     // no order
//     case saferetry::Outcome::kUnknown: ...    // keep r.idempotency_key; reconcile
//   }
// @endcode

#ifndef SAFERETRY_CLIENT_H_
#define SAFERETRY_CLIENT_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "saferetry/backoff.h"
#include "saferetry/call_listener.h"  // CallListener, for CallOptions::listener
#include "saferetry/call_state_machine.h"
#include "saferetry/cancellation.h"
#include "saferetry/circuit_breaker.h"
#include "saferetry/classifier.h"
#include "saferetry/clock.h"
#include "saferetry/deadline.h"
#include "saferetry/idempotency.h"
#include "saferetry/journal.h"
#include "saferetry/random.h"
#include "saferetry/request.h"
#include "saferetry/result.h"
#include "saferetry/retry_budget.h"
#include "saferetry/retry_policy.h"
#include "saferetry/server_hints.h"
#include "saferetry/status_query.h"
#include "saferetry/trace_context.h"
#include "saferetry/transport.h"

namespace saferetry {

namespace internal {
class CallSession;
class UnsentRecords;
class PrevalidatedSender;
}  // namespace internal

/// Per-call options: what differs from one call to the next. What is the
/// same for many calls is in the `RetryPolicy` (saferetry/retry_policy.h),
/// built once. Plain struct; defaults documented per field.
struct CallOptions {
  /// The policy of this call, shared. Null (the default): the client's
  /// (`ClientOptions::policy`).
  std::shared_ptr<const RetryPolicy> policy;
  /// Total time for the call, measured from the start of `Execute`. > 0.
  /// Unset (the default): the policy's `timeout` (30 s by default). Ignored
  /// when `deadline` is set.
  std::optional<Duration> timeout;
  /// An absolute deadline on the client's clock (e.g. from an inbound
  /// deadline header). Wins over `timeout`.
  std::optional<Deadline> deadline;
  /// The key to send; minted (UUIDv4) when empty. 1-255 visible ASCII.
  std::string idempotency_key;
  /// The status-query URL of this call's endpoint, with `{key}`; replaces
  /// the policy's template (`RetryPolicyOptions::status_query`). Empty (the
  /// default): the policy's.
  std::string status_url;
  /// Optional; must outlive the call.
  const CancellationToken* cancellation = nullptr;
  /// Optional; must outlive the call.
  CallListener* listener = nullptr;
  /// The caller's W3C trace context, sent unchanged with every attempt and
  /// status query in place of any `traceparent` / `tracestate` the request
  /// carries (one header of each, never two). A `traceparent` that does not
  /// parse is dropped with its `tracestate` and the call goes on; a
  /// `tracestate` that is invalid is dropped, one too long is truncated
  /// (trace_context.h). Unset (the default): the request's own headers are
  /// the caller's context, sent as they are unless a tracer is set.
  std::optional<TraceContext> trace_context;
  /// The per-attempt hook of this call's tracer (trace_context.h); replaces
  /// `ClientOptions::tracer`. Optional; must outlive the call.
  AttemptTracer* tracer = nullptr;
};

/// Client-wide options. Plain struct; defaults documented per field.
struct ClientOptions {
  /// Required: sends one attempt.
  std::shared_ptr<Transport> transport;
  /// Default `SystemClock()`.
  std::shared_ptr<Clock> clock;
  /// Jitter samples. Default `DefaultRandom()`.
  std::shared_ptr<Random> random;
  /// Where minted idempotency keys come from. Default: the operating
  /// system's CSPRNG (`MintIdempotencyKey`, getrandom): a key an attacker can
  /// predict can be replayed or poisoned. Tests that want reproducible keys
  /// set `kRandomSeam` to draw them from `random`.
  enum class KeySource { kOperatingSystem, kRandomSeam };
  KeySource key_source = KeySource::kOperatingSystem;
  /// Shared by every call. Default: `MakeRatioBudget` with 10 % + 10/s over 10 s.
  std::shared_ptr<RetryBudget> budget;
  /// The status-query allowance, shared by every call: polls (status
  /// queries, resends answered 409) draw from it instead of the retry
  /// budget, so resolving ambiguous writes does not starve retries, and a
  /// storm of polls is still bounded. Default: `MakeRatioBudget` with 50 % of
  /// calls + 20/s over 10 s (docs/adr/0006-status-query-allowance.md).
  std::shared_ptr<RetryBudget> status_query_budget;
  /// Default `DefaultClassifierInstance()`.
  std::shared_ptr<const Classifier> classifier;
  /// The policy of calls that name none (`CallOptions::policy`): attempts,
  /// backoff, time plan, status query, key mode and form, header names,
  /// hints, hedging. Null (the default): `RetryPolicy::Default()`. Resolves
  /// (`Client::Resolve`) use its header names, hints and response predicate.
  std::shared_ptr<const RetryPolicy> policy;
  /// How many keys the body-fingerprint guard remembers. Default 10000.
  std::size_t fingerprint_capacity = 10000;
  /// Per-host circuit breakers, shared by every call (and by clients given
  /// the same registry). Default none: no breaker. Each call uses the
  /// breaker of its URL's scheme://host:port; status queries use the breaker
  /// of the status URL's host (the request's, for a status-query callback).
  /// A call refused before any send ends kFailed / kCircuitOpen with nothing
  /// sent (docs/circuit-breaker.md).
  std::shared_ptr<CircuitBreakerRegistry> circuit_breakers;
  /// The intent journal (docs/reconciliation.md). Default null: off. When
  /// set, every keyed call is part of it: the intent (key, method, URL, body
  /// digest, status-query template, non-secret headers, wall-clock created
  /// time and deadline) is recorded before the first byte is sent — if that
  /// fails nothing is sent and the call ends kFailed /
  /// kJournalUnavailable —, each attempt is marked before it is sent, and the
  /// outcome is written at the end. A key reused with another request is
  /// refused (kInvalidArgument naming idempotency_key) for as long as the
  /// journal keeps the first intent, across restarts. A key whose intent is
  /// already resolved returns the stored outcome without sending; one left
  /// unresolved with an attempt possibly sent ends kUnknown /
  /// kAmbiguousUnresolved unless `server_deduplicates` (resolve it with
  /// `Client::Resolve`). Shared, thread-safe.
  ///
  /// @code
  ///   saferetry::SqliteJournalOptions journal;
  ///   journal.path = "/var/lib/orders/intents.db";
  ///   options.journal = saferetry::OpenSqliteJournal(journal).value();
  /// @endcode
  std::shared_ptr<IntentJournal> journal;
  /// The per-attempt hook of a tracer (trace_context.h), for the calls that
  /// name none (`CallOptions::tracer`) and for resolves: it may give each
  /// attempt and status query its own span context. Default null: the
  /// caller's context passes through unchanged. Shared: must be
  /// thread-safe.
  std::shared_ptr<AttemptTracer> tracer;
};

/// How `Client::Resolve` settles one journaled intent.
struct ResolveOptions {
  /// The status-query URL template with `{key}`. Empty (the default): the
  /// template recorded with the intent.
  std::string status_url_template;
  /// Headers added to every status query (and resend), e.g. the credentials
  /// the journal never stores ("Authorization: Bearer ...").
  Headers headers;
  /// When a status query answers "not found", send one more carrying
  /// `Idempotency-Key-Fence: true`; a fenced "not found" ends FAILED /
  /// kFenced. Needs a server implementing the fence (docs/server-contract.md).
  /// Off by default: the key becomes unusable for good.
  bool fence = false;
  /// Allows one same-key resend of the request after a "not found" answer.
  /// Used only when the journal stored the body (`JournalOptions::body_cap`)
  /// and the caller declares that the server deduplicates keys. Default off.
  bool resend_if_server_deduplicates = false;
  /// Time for this intent's queries. Default 10 s.
  Duration timeout = std::chrono::seconds(10);
  /// Status queries at most, >= 1. Default 5.
  int max_status_queries = 5;
  /// Pacing between queries answered "processing" or not at all.
  BackoffParams poll_backoff = DefaultPollBackoff();
  /// The claim owner; empty (the default): "reconciler:" + the journal's
  /// `IntentJournal::Owner()`.
  std::string owner;
  /// The resolver's trace context (trace_context.h), as
  /// `CallOptions::trace_context` is a call's: saferetry writes
  /// `traceparent` and `tracestate` on every status query and resend from
  /// it (or from the client's tracer's spans), in place of any the
  /// journaled request carried. Unset (the default): the journaled
  /// request's own trace headers go as they are, unless the client has a
  /// tracer.
  std::optional<TraceContext> trace_context;
};

/// InvalidArgument naming the field ("resolve.timeout: must be > 0").
absl::Status ValidateResolveOptions(const ResolveOptions& options);

/// The per-call fields only (the policy was validated when it was built):
/// InvalidArgument naming the field ("call.timeout: must be > 0",
/// "call.idempotency_key: ...", "call.status_url: ...").
absl::Status ValidateCallOptions(const CallOptions& options);

/// Runs calls. Thread-safe: one client is meant to be shared by all threads
/// of a service, so the budget is shared too.
class Client {
 public:
  /// InvalidArgument naming the field for a missing transport or bad options.
  static absl::StatusOr<std::unique_ptr<Client>> Create(ClientOptions options);

  /// Runs one logical call with `options`. Never throws. Bad input (request
  /// or options) gives `kFailed` / `kInvalidArgument` with `status` naming
  /// the field, and nothing is sent.
  CallResult Execute(const Request& request, const CallOptions& options);
  /// Runs one logical call with default `CallOptions`.
  CallResult Execute(const Request& request) { return Execute(request, CallOptions{}); }

  /// Resolves the journaled intent `key` by status queries only: claims it
  /// (an intent another owner holds is left alone), asks the status URL,
  /// writes the outcome back and releases the claim. "No effect" (kFailed)
  /// only from a definite answer (404 + Idempotency-Key-State: completed) or
  /// a fenced "not found"; everything else leaves it kUnknown. An intent
  /// already resolved returns its stored outcome without a query. The
  /// status queries draw on the client's status-query allowance and are
  /// stopped by it (kBudgetExhausted).
  ///
  /// Never throws. Without a journal, or for an unknown key: kUnknown /
  /// kInvalidArgument with `status` naming "journal" or "idempotency_key".
  /// A journal that cannot be read or written: kUnknown /
  /// kJournalUnavailable. Claimed by another owner: kUnknown /
  /// kAmbiguousUnresolved, `status` kFailedPrecondition. Nothing here ever
  /// sends a fresh (new-key) request.
  CallResult Resolve(std::string_view key, const ResolveOptions& options);

  const ClientOptions& options() const { return options_; }

 private:
  explicit Client(ClientOptions options);  // Create() applies the defaults
  // Drives one prepared session (a call or a resolve) to its end.
  CallResult Run(internal::CallSession& session, const CancellationToken* cancellation,
                 TimePoint start);
  ClientOptions options_;
  // The machines' view of `options_`'s budgets, classifier and random
  // source: built once, pointed at by every call's machine.
  CallServices services_;
  KeyFingerprints fingerprints_;
  std::shared_ptr<internal::UnsentRecords> unsent_;
  // The transport, when it can send a request the call validated without
  // checking it again (saferetry's own can); else null.
  internal::PrevalidatedSender* prevalidated_ = nullptr;
};

}  // namespace saferetry

#endif  // SAFERETRY_CLIENT_H_

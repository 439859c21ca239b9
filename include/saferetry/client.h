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
//   call.status_query.url_template = "http://127.0.0.1:8080/orders/by-key/{key}";
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
#include "saferetry/server_hints.h"
#include "saferetry/status_query.h"
#include "saferetry/transport.h"

namespace saferetry {

namespace internal {
class CallSession;
}  // namespace internal

/// Hooks called on the calling thread, in order. Must not throw. Default
/// implementations do nothing.
class CallListener {
 public:
  virtual ~CallListener() = default;
  /// An attempt (or status query) is about to be sent.
  virtual void OnAttemptStart(int /*number*/, bool /*is_status_query*/) {}
  /// An attempt (or status query) finished; `evidence` is classified.
  virtual void OnAttemptEnd(const AttemptEvidence& /*evidence*/) {}
  /// A wait was scheduled.
  virtual void OnWaitScheduled(Duration /*delay*/, bool /*from_server_hint*/) {}
  /// The call finished.
  virtual void OnFinish(const CallResult& /*result*/) {}
};

/// Hedged requests: while an attempt is unanswered after `delay`, send
/// another copy; the first final answer wins and the others are cancelled
/// (docs/hedging.md). Only `AsyncClient` hedges; the blocking `Client`
/// ignores these options. A call is hedged only when its request is safe
/// to send twice: GET/HEAD (safe methods), a request declared idempotent
/// (PUT/DELETE by default), or a keyed request with `server_deduplicates`.
/// A POST without a deduplicating server is never hedged.
struct HedgingOptions {
  /// Default off.
  bool enabled = false;
  /// How long an attempt may stay unanswered before a hedge is sent, >= 0.
  /// Default 50 ms; the fallback when `delay_from_p95` has too few samples.
  Duration delay = std::chrono::milliseconds(50);
  /// Use the client's observed p95 attempt latency (of the last 512
  /// answered attempts; at least 20 needed) instead of `delay`.
  bool delay_from_p95 = false;
  /// Hedges per call, 0..3 (`CallStateMachine::kMaxInFlight` - 1). Each is
  /// an attempt (it counts against `max_attempts`) paid for by the retry
  /// budget; hedges stop when the budget is empty. Default 1.
  int max_hedges = 1;
};

/// Per-call options. Plain struct; defaults documented per field.
struct CallOptions {
  /// Total time for the call, measured from the start of `Execute`. Default
  /// 30 s. Ignored when `deadline` is set.
  Duration timeout = std::chrono::seconds(30);
  /// An absolute deadline on the client's clock (e.g. from an inbound
  /// deadline header). Wins over `timeout`.
  std::optional<Deadline> deadline;
  /// Sends of the request, >= 1. Default 3; values above
  /// `kMaxAttemptsHardCap` are clamped.
  int max_attempts = 3;
  /// Polls per call: status queries, and resends answered 409 "in progress"
  /// (these count as polls, not as attempts). >= 0; 0 (the default) derives
  /// the cap from the deadline and the poll pacing
  /// (`DefaultMaxStatusQueries`: 17 for 5 s, 127 for 60 s, 20 without a
  /// deadline). Values above `kMaxStatusQueriesHardCap` are clamped.
  int max_status_queries = 0;
  /// Backoff between retries of the request. Default: full jitter, 100 ms,
  /// x2, up to 10 s.
  BackoffParams backoff;
  /// A user backoff policy for retries; when set it replaces `backoff`.
  /// Shared, thread-safe; may be used by many calls at once.
  std::shared_ptr<const BackoffPolicy> backoff_policy;
  /// Pacing of polls (status queries, resends while in progress). Default
  /// `DefaultPollBackoff()`: equal jitter from 50 ms, x1.5, up to 1 s.
  BackoffParams poll_backoff = DefaultPollBackoff();
  /// Margin, minimum useful attempt, attempt timeout and resolution window.
  /// By default the call's time plan (`TimePlan`) sets the attempt timeout:
  /// a keyed write with a status query keeps 30 % of the call to resolve a
  /// hung attempt; a retryable request gives each attempt half of the call.
  DeadlineOptions deadline_options;
  /// Whether to send an idempotency key. Default: for non-idempotent requests.
  KeyMode key_mode = KeyMode::kAuto;
  /// The key to send; minted (UUIDv4) when empty. 1-255 visible ASCII.
  std::string idempotency_key;
  /// How an ambiguous outcome is resolved. Unused when neither the template
  /// nor the callback is set.
  StatusQuery status_query;
  /// The server deduplicates keys: after an ambiguous attempt with no status
  /// query, resending with the same key is safe.
  bool server_deduplicates = false;
  /// Optional; must outlive the call.
  const CancellationToken* cancellation = nullptr;
  /// Optional; must outlive the call.
  CallListener* listener = nullptr;
  /// Hedging (`AsyncClient` only). Default off.
  HedgingOptions hedging;
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
  /// Shared by every call. Default: `RatioBudget` with 10 % + 10/s over 10 s.
  std::shared_ptr<RetryBudget> budget;
  /// The status-query allowance, shared by every call: polls (status
  /// queries, resends answered 409) draw from it instead of the retry
  /// budget, so resolving ambiguous writes does not starve retries, and a
  /// storm of polls is still bounded. Default: `RatioBudget` with 50 % of
  /// calls + 20/s over 10 s (docs/adr/0006-status-query-allowance.md).
  std::shared_ptr<RetryBudget> status_query_budget;
  /// Default `DefaultClassifierInstance()`.
  std::shared_ptr<const Classifier> classifier;
  /// Default "Idempotency-Key".
  std::string idempotency_header = std::string(kDefaultIdempotencyHeader);
  /// Default bare.
  KeyForm key_form = KeyForm::kBare;
  /// Carries the remaining time (ms) on every attempt. Default
  /// "X-Request-Timeout-Ms"; empty disables it.
  std::string deadline_header = std::string(kDefaultDeadlineHeader);
  /// Carries the attempt number on the wire ("attempt=2; max=3") so the
  /// server can see that an outer layer is already retrying and stand down
  /// its own retries (docs/operations.md). Default "X-Retry-Attempt"; empty
  /// disables it.
  std::string attempt_header = std::string(kDefaultAttemptHeader);
  /// A response header holding the server's request id, copied into the
  /// evidence. Default "X-Request-Id"; empty disables it.
  std::string request_id_header = std::string(kDefaultRequestIdHeader);
  /// Retry-After clamp and do-not-retry header.
  HintOptions hints;
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
};

/// InvalidArgument naming the field ("resolve.timeout: must be > 0").
absl::Status ValidateResolveOptions(const ResolveOptions& options);

/// InvalidArgument naming the field ("call.max_attempts: must be >= 1").
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
  KeyFingerprints fingerprints_;
};

}  // namespace saferetry

#endif  // SAFERETRY_CLIENT_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Not API: the call setup every driver shares (the blocking `Client`, the
// event-loop driver): validation, the key (the caller's, the request's own,
// or minted), the body-fingerprint guard, the `CallPolicy` for the state
// machine, and the headers saferetry adds to each attempt and status query.
// Kept in one place so that two drivers cannot drift apart.
#ifndef SAFERETRY_SRC_CALL_CALL_SETUP_H_
#define SAFERETRY_SRC_CALL_CALL_SETUP_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/request_scan.h"
#include "saferetry/call_state_machine.h"
#include "saferetry/client.h"
#include "saferetry/idempotency.h"
#include "saferetry/journal.h"
#include "saferetry/request.h"

namespace saferetry {
namespace internal {

/// Keys whose intent record this process could not confirm (the journal
/// answered with an error: the commit may have happened, its answer lost)
/// and for which it therefore sent nothing. A later call of the same key
/// finds the row recorded with attempt 1 marked and its own owner; `Take`
/// tells it that this process never sent that attempt, so the row is its
/// own, not a send that may have taken effect. Bounded (the oldest keys are
/// forgotten: such a row is then treated as maybe sent, which is safe).
/// Thread-safe.
class UnsentRecords {
 public:
  explicit UnsentRecords(std::size_t capacity = 1024) : capacity_(capacity) {}
  void Add(std::string_view key);
  /// True once for a key `Add`ed before (and not forgotten).
  bool Take(std::string_view key);

 private:
  std::size_t capacity_;
  std::mutex mu_;
  std::deque<std::string> keys_;  // Guarded by mu_; oldest first.
};

/// One call, ready to drive.
struct PreparedCall {
  /// For a call on `retry` (the call's policy, or the client's): the
  /// machine's policy starts as what `retry` built once, copied straight
  /// into place (`PrepareCall` completes it).
  explicit PreparedCall(const RetryPolicy& call_retry)
      : retry(&call_retry), policy(call_retry.call_policy()) {}
  PreparedCall(const PreparedCall&) = delete;
  PreparedCall& operator=(const PreparedCall&) = delete;
  // Few calls have extras: the check is laid out for that.
  ~PreparedCall() {
    if (extras != nullptr) extras.reset();
  }

  /// The call's retry policy (the call's, or the client's); never null.
  const RetryPolicy* retry;
  CallPolicy policy;
  /// The status-query template of this call: the call's `status_url`,
  /// else the policy's; null: none. Points at that string (the call
  /// options', the policy's, the resolve's or `Extras::status_url`): one
  /// word, not a view.
  const std::string* status_url = nullptr;
  std::string_view status_url_template() const {
    return status_url != nullptr ? std::string_view(*status_url) : std::string_view();
  }
  /// The idempotency key; empty: the call has none (a key is never empty).
  std::string key;
  /// Status queries go to the policy's callback.
  bool use_callback = false;
  /// The headers saferetry adds (`StampAttemptHeaders` writes them for a
  /// send, into the driver's `SendHeaders`; their names are `retry`'s): the
  /// key header unless the request carries it, the deadline header unless
  /// the deadline is infinite, the attempt header; an empty name is not
  /// sent. Status queries carry the key and the deadline. Flags, not
  /// pointers to the names: a call in flight keeps its prepared call.
  bool send_key_header = false;
  bool send_deadline_header = false;
  bool send_attempt_header = false;
  /// What few calls need, allocated when first set (a call with none of it
  /// keeps a null pointer, not three strings, a policy and its journal): the
  /// key as sent in the quoted form (`KeyForm::kQuotedString`; empty for the
  /// bare form, which sends `key` itself), a journaled call's journal, its
  /// claim's owner (released at the end) and its attempts' numbering, and
  /// the call's own status URL and policy when a driver keeps them past the
  /// call options (`CallSession::KeepCallOptions`).
  struct Extras {
    std::string quoted_key;
    std::string journal_owner;
    std::string status_url;
    std::shared_ptr<const RetryPolicy> policy;  // `retry`'s owner, when the call's
    /// The journal the intent is recorded in (`JournalBegin`, which also
    /// sets `journal_owner`: a journaled call has extras); null when the
    /// call is not journaled (no journal, or no key).
    IntentJournal* journal = nullptr;
    /// Attempts already marked sent for this intent by an earlier process:
    /// this call's attempt n is marked as `attempt_offset + n`.
    int attempt_offset = 0;
    /// The intent was recorded with attempt 1 marked (`IntentJournal::Record`
    /// with `Intent::attempt` 1): the first send needs no mark of its own.
    bool first_attempt_marked = false;
  };
  std::unique_ptr<Extras> extras;
  Extras& extra() {
    if (extras == nullptr) extras = std::make_unique<Extras>();
    return *extras;
  }
  std::string_view quoted_key() const {
    return extras != nullptr ? std::string_view(extras->quoted_key) : std::string_view();
  }
  /// `Extras::journal`: null when the call is not journaled.
  IntentJournal* journal() const { return extras != nullptr ? extras->journal : nullptr; }
  std::string_view journal_owner() const {
    return extras != nullptr ? std::string_view(extras->journal_owner) : std::string_view();
  }
};

/// The services a client's machines consult (`CallServices`), from its
/// completed options: built once per client.
inline CallServices MachineServices(const ClientOptions& client) {
  return CallServices{client.budget.get(), client.classifier.get(), client.random.get(),
                      client.status_query_budget.get()};
}

/// The retry policy a call runs on: its own, else the client's.
inline const RetryPolicy& CallPolicyOf(const ClientOptions& client, const CallOptions& options) {
  return options.policy != nullptr ? *options.policy : *client.policy;
}

/// Validates `request` and `options`, chooses the key and checks it against
/// `fingerprints`, and completes the policy (with the hosts' circuit breakers
/// from `client.circuit_breakers`, if any) and builds the headers, into `call`
/// (a fresh `PreparedCall` for the call's policy, `CallPolicyOf`: the
/// session's own, filled in place rather than built and moved). An error
/// (naming the field) means nothing may be sent.
/// `*scan`: where the request's idempotency and trace headers are, found in
/// one pass after validation (the session's trace context reads it).
absl::Status PrepareCall(const ClientOptions& client, KeyFingerprints& fingerprints,
                         const Request& request, const CallOptions& options, TimePoint start,
                         PreparedCall& call, RequestScan* scan);

/// Sets the policy's breakers from `client.circuit_breakers`: the request
/// host's, and the status query's host's when it has a fixed one that differs.
void AssignCircuitBreakers(const ClientOptions& client, const Request& request,
                           std::string_view query_template, CallPolicy& policy);

/// Sets the header fields of `call` for `call.key` and `call.policy`: the
/// key header unless `key_in_request`, the deadline header, the attempt
/// header.
inline void BuildExtraHeaders(const RetryPolicyOptions& policy, bool key_in_request,
                              PreparedCall& call) {
  // Headers saferetry adds to every attempt: the key, the deadline, the
  // attempt number. Status queries carry the key and the deadline only.
  call.send_key_header = false;
  if (call.extras != nullptr) call.extras->quoted_key.clear();
  if (!call.key.empty() && !key_in_request) {
    call.send_key_header = true;
    if (policy.key_form != KeyForm::kBare) {
      call.extra().quoted_key = FormatIdempotencyKey(call.key, policy.key_form);
    }
  }
  call.send_deadline_header =
      !policy.deadline_header.empty() && !call.policy.deadline.is_infinite();
  call.send_attempt_header = !policy.attempt_header.empty();
}

/// Whether a call may be hedged: hedging is on with at least one hedge, and
/// the request is safe to send twice (a safe or idempotent request, or a
/// keyed one whose server deduplicates the key). `PrepareCall` sets
/// `CallPolicy::hedging` from it; the simulator applies it to its modelled
/// requests.
bool MayHedge(const HedgingOptions& hedging, const RequestTraits& traits, bool server_deduplicates);

/// The most headers saferetry adds to one send: key, deadline, attempt or
/// fence, then traceparent and tracestate.
inline constexpr std::size_t kMaxExtraHeaders = 3;
inline constexpr std::size_t kMaxSendHeaders = kMaxExtraHeaders + 2;

/// The headers saferetry adds to one send, and the values they point to.
/// The driver holds it on its stack for the send: a `Transport` reads the
/// headers until `Send` returns, an `AsyncTransport` during `Start` only, so
/// a call in flight keeps none of it.
struct SendHeaders {
  std::array<HeaderRef, kMaxSendHeaders> refs{};
  std::size_t count = 0;
  std::array<char, 24> deadline_value{};  // milliseconds
  std::array<char, 48> attempt_value{};   // "attempt=n; max=m"
  HeaderRefs view() const { return HeaderRefs(refs.data(), count); }
};

/// Writes the headers saferetry adds to a send of the request (`action` is
/// kSendAttempt) into `out`, replacing what it held: the key, the attempt's
/// timeout in the deadline header, "attempt=n; max=m". The views point into
/// `call`, its policy and `out`.
void StampAttemptHeaders(const PreparedCall& call, const CallAction& action, SendHeaders& out);
/// The same for a status query (`action` is kSendStatusQuery): the key, its
/// timeout in the deadline header, the fence header when the action asks.
void StampStatusQueryHeaders(const PreparedCall& call, const CallAction& action, SendHeaders& out);

/// The status-query request for `call` (the template expanded with the key).
Request StatusQueryRequest(const PreparedCall& call, const Request& original);

/// Writes the evidence of one finished attempt or query into `ev` (a
/// default-constructed one), from the
/// transport's result: delivery, status, hints, timings, the downstream
/// request id. `clock`'s wall time is read only for a `Retry-After` date.
void FillEvidence(const TransportResult& result, TimePoint start, TimePoint end, Clock& clock,
                  const RetryPolicyOptions& policy, AttemptEvidence& ev);

/// Fills the defaults of `options` (clock, random, classifier, budgets) and
/// validates the header names and hints, naming the field; the transport is
/// the driver's business. Used by `Client::Create` and `AsyncClient::Create`.
absl::Status CompleteClientOptions(ClientOptions& options);

/// A result for a call that could not start.
CallResult InvalidCall(absl::Status status);

// --- The intent journal (ClientOptions::journal) ----------------------------
//
// Every driver calls these at the same points: `JournalBegin` after
// `PrepareCall` and before the machine starts; `JournalBeforeSend` before
// each send of the request; `JournalFinish` with the result. Without a
// journal (or without a key) they do nothing. Nothing here reads the
// environment: the crash test kills its client at these points through a
// journal and a transport that wrap the real ones
// (examples/orders_service/tests/journal_crash_client.cc).

/// Records the intent of `call` before anything is sent. Returns a result
/// when the call must end now: FAILED / kJournalUnavailable when the journal
/// cannot record it, FAILED / kInvalidArgument ("idempotency_key: ...") when
/// the key was recorded for another request, the stored outcome when the
/// intent is already resolved, UNKNOWN / kAmbiguousUnresolved when another
/// process holds a live claim on it. nullopt: go on.
/// `RecordIntent` is its work when there is an intent to record (a journal
/// and a key); the checks are inline, where every call passes.
std::optional<CallResult> RecordIntent(const ClientOptions& client, PreparedCall& call,
                                       const Request& request, TimePoint start,
                                       UnsentRecords* unsent);
inline std::optional<CallResult> JournalBegin(const ClientOptions& client, PreparedCall& call,
                                              const Request& request, TimePoint start,
                                              UnsentRecords* unsent) {
  if (client.journal == nullptr || call.key.empty()) return std::nullopt;
  return RecordIntent(client, call, request, start, unsent);
}

/// Marks attempt `number` sent. When the journal cannot, the attempt must
/// not be sent: returns the transport result to feed the machine instead
/// (not sent, kUnavailable "journal: ..."). `MarkAttemptSent`: the same, for
/// a journaled call.
std::optional<TransportResult> MarkAttemptSent(PreparedCall& call, int number);
inline std::optional<TransportResult> JournalBeforeSend(PreparedCall& call, int number) {
  if (call.journal() == nullptr) return std::nullopt;
  return MarkAttemptSent(call, number);
}

/// Writes the outcome of `result` and releases the claim. A failed write
/// leaves the intent unresolved for the reconciler; `result` is unchanged.
/// `WriteOutcome`: the same, for a journaled call.
void WriteOutcome(PreparedCall& call, const CallResult& result);
inline void JournalFinish(PreparedCall& call, const CallResult& result) {
  if (call.journal() != nullptr) WriteOutcome(call, result);
}

/// The stored outcome of a resolved intent, as a call result (no response).
CallResult StoredOutcome(const Intent& intent);

/// The stored summary of `result`.
IntentSummary SummaryOf(const CallResult& result);

}  // namespace internal
}  // namespace saferetry

#endif  // SAFERETRY_SRC_CALL_CALL_SETUP_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Read the answer, not only its status line: a response predicate sees a
// response's status, its headers and a bounded prefix of its body, and may
// say that the answer asks for a retry ("throttled" in a 200, "retryable" in
// a 400) or that the server rejected the request without applying it. The
// classifier still decides first (saferetry/classifier.h); the predicate
// can only move an answer the classifier judged definite towards a retry,
// under rules that keep FAILED meaning "nothing happened":
//
//   classifier's class        verdict        class of the attempt
//   ----------------------    ------------   -------------------------------
//   any                       no opinion     unchanged
//   Success, Permanent,       not applied    RetryableTransient: the server
//     PreconditionFailed                       refused it without effect, as
//                                              a 503 `rejected`: same key,
//                                              charged to the budget
//   Success, Permanent,       retry          RetryableTransient when the
//     PreconditionFailed                       request is safe to resend
//                                              (safe or idempotent); else
//                                              Ambiguous: the answer does not
//                                              say the write was not applied,
//                                              so it is settled like any
//                                              ambiguous attempt (status
//                                              query, deduplicated resend, or
//                                              UNKNOWN), never resent blindly
//   Ambiguous, InProgress,    any            unchanged: an attempt that may
//     RetryableTransient,                      have taken effect never becomes
//     RetryableNotDelivered                    retryable, and a key still in
//                                              progress keeps its doubt
//   an answer about the key   any            unchanged: the key's record
//     (a 410; Idempotency-Key-                 speaks for the intent; a resend
//     State fenced, expired                    after `expired` could execute
//     or processing; a 4xx                     the key twice, a key still
//     marked as the key's                      processing may yet take effect,
//     stored final error)                      and a stored final error is
//                                              definite (a resend replays it)
//
// A retry the predicate causes follows the same rules as any other resend:
// the same key, the attempt cap, the budget, the backoff, the deadline. A
// deduplicating server that stored a "throttled" answer replays it, so such
// a key comes back "throttled" until the attempts run out.
//
// The common cases need no code: `ResponseRule`s (also in a policy
// document, docs/configuration.md) match a status, a header's value, a body
// substring or a JSON field. A predicate of one's own implements
// `ResponsePredicate`.
//
// @code
//   saferetry::RetryPolicyOptions o;
//   saferetry::ResponseRule throttled;
//   throttled.json_pointer = "/error";
//   throttled.json_value = "throttled";
//   throttled.verdict = saferetry::ResponseVerdict::kNotApplied;
//   o.response_predicate.rules.push_back(throttled);
//   auto policy = saferetry::RetryPolicy::Create(o);  // validated once
// @endcode

#ifndef SAFERETRY_RESPONSE_PREDICATE_H_
#define SAFERETRY_RESPONSE_PREDICATE_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "saferetry/classifier.h"
#include "saferetry/request.h"
#include "saferetry/result.h"

namespace saferetry {

/// What a predicate says about one answer.
enum class ResponseVerdict {
  /// The classifier's class stands (the default).
  kNoOpinion,
  /// The answer asks for a retry ("throttled", "try again"). A request safe
  /// to resend is retried; a write is treated as ambiguous (it may have been
  /// applied): use `kNotApplied` when the server's answer proves it was not.
  kRetry,
  /// The server rejected the request without applying it: retried with the
  /// same key, charged to the budget, as a 503 marked `rejected` would be.
  kNotApplied,
};

/// The largest `ResponsePredicateOptions::max_body_bytes`: 1 MiB.
inline constexpr std::size_t kMaxResponsePredicateBodyBytes = std::size_t{1} << 20;

/// One answer as a predicate sees it. Views into the response: valid during
/// `ResponsePredicate::Judge` only.
struct ResponseView {
  int status_code = 0;
  const Headers* headers = nullptr;
  /// At most `ResponsePredicateOptions::max_body_bytes` of the body.
  std::string_view body;
  /// The body is longer than `body` (cut here, or by the transport's cap).
  bool body_truncated = false;

  /// The first header named `name` (case-insensitive), if any.
  std::optional<std::string_view> HeaderValue(std::string_view name) const;
};

/// A user's predicate. Must be thread-safe (one instance serves every call
/// of a policy) and must not throw; it should not block. Asked only for
/// answers it may change (the table above), after the classifier.
class ResponsePredicate {
 public:
  virtual ~ResponsePredicate() = default;
  virtual ResponseVerdict Judge(const ResponseView& response,
                                const RequestTraits& traits) const = 0;
};

/// One declarative rule: every condition given must hold (at least one must
/// be given); the first rule that matches gives the verdict.
struct ResponseRule {
  /// The answer's status is one of these (100..599). Empty: any status.
  std::vector<int> statuses;
  /// A response header that must be present (case-insensitive name, an RFC
  /// 9110 token). Empty: no header condition.
  std::string header;
  /// With `header`: its value must equal this, compared after trimming
  /// spaces and tabs, case-insensitively. Unset: presence is enough.
  std::optional<std::string> header_value;
  /// The body prefix must contain this (case-sensitive). Empty: no body
  /// condition.
  std::string body_contains;
  /// A JSON Pointer (RFC 6901, "/error/code") into the body, parsed as JSON.
  /// The body prefix must be the whole body and valid JSON for it to match.
  /// Empty: no JSON condition.
  std::string json_pointer;
  /// With `json_pointer`: the field must equal this. A string field
  /// compares its text, a number, boolean or null its JSON form ("429",
  /// "true"). Unset: the field's presence is enough.
  std::optional<std::string> json_value;
  /// `kRetry` or `kNotApplied` (not `kNoOpinion`); "retry" or "notApplied"
  /// in a policy document, where it is required. Default `kRetry`.
  ResponseVerdict verdict = ResponseVerdict::kRetry;
};

bool operator==(const ResponseRule& a, const ResponseRule& b);
inline bool operator!=(const ResponseRule& a, const ResponseRule& b) { return !(a == b); }

/// The response predicate of a `RetryPolicy` (`RetryPolicyOptions::
/// response_predicate`). Off by default: nothing configured, nothing asked,
/// nothing copied.
struct ResponsePredicateOptions {
  /// Declarative rules, in order (`saferetry.responsePredicate.rules` in a
  /// policy document).
  std::vector<ResponseRule> rules;
  /// A predicate of one's own, asked before the rules; when it has no
  /// opinion the rules are asked. Shared; compared by identity.
  std::shared_ptr<const ResponsePredicate> predicate;
  /// How much of the body the predicate sees, 0..`kMaxResponsePredicateBodyBytes`.
  /// Default 4 KiB. The transport's own body cap still applies.
  std::size_t max_body_bytes = 4096;

  /// Rules or a predicate are configured.
  bool enabled() const { return predicate != nullptr || !rules.empty(); }
};

/// InvalidArgument naming the field under `field` ("policy.response_predicate"):
/// "...rules[1].statuses[0]: must be 100..599, got 42", "...rules[0]: give at
/// least one condition", "...rules[2].json_pointer: ...", "...max_body_bytes: ...".
absl::Status ValidateResponsePredicateOptions(const ResponsePredicateOptions& options,
                                              std::string_view field);

/// The predicate of `options` (the user's, then the rules), validated:
/// null when nothing is configured. InvalidArgument as
/// `ValidateResponsePredicateOptions` with `field` "policy.response_predicate".
absl::StatusOr<std::shared_ptr<const ResponsePredicate>> MakeResponsePredicate(
    const ResponsePredicateOptions& options);

/// The table at the top of this file, the one place it is decided: the class
/// of an attempt answered with `response`, given the classifier's `base`.
/// Asks `predicate` only when its verdict may change the class. The reason
/// of a changed class names the predicate.
Classification ApplyResponsePredicate(const ResponsePredicate& predicate,
                                      std::size_t max_body_bytes, const Response& response,
                                      const AttemptEvidence& evidence, const RequestTraits& traits,
                                      Classification base);

/// "noOpinion", "retry", "notApplied": the names a policy document uses.
std::string_view ResponseVerdictName(ResponseVerdict verdict);

namespace internal {
/// Not API. InvalidArgument naming `field` unless `pointer` is a JSON
/// Pointer (RFC 6901) that names a field: it starts with '/', and each '~'
/// is followed by '0' or '1'.
absl::Status ValidateJsonPointer(std::string_view pointer, std::string_view field);
}  // namespace internal

}  // namespace saferetry

#endif  // SAFERETRY_RESPONSE_PREDICATE_H_

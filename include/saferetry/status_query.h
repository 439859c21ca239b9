// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// How an ambiguous outcome is resolved: ask the server what happened to the
// key, instead of sending a fresh request.
//
//   status answer                           meaning                       next step
//   2xx                                     found: the original took      SUCCEEDED with that
//   answer
//                                           effect
//   404 + Idempotency-Key-State: completed  the key's stored final error  FAILED (definite), that
//   answer 404 + Idempotency-Key-State: fenced     fenced: no effect, ever       FAILED (definite)
//   404 + Idempotency-Key-State: expired    the record was reaped, maybe  UNKNOWN (`key_expired`);
//                                           after its effect              never a resend
//   other 404                               not found (yet): unfenced,    resend, same key, via the
//                                           proves nothing final          retry checks (none after
//                                                                         an expired or undecided
//                                                                         final answer)
//   409, 202                                processing                    poll again (paced)
//   anything else / transport failure       still unknown                 poll again within the
//                                                                         allowance and deadline,
//                                                                         else UNKNOWN; never a
//                                                                         resend
//
// Only the two definite 404s may turn an ambiguous history into FAILED
// (saferetry/settlement.h, docs/server-contract.md,
// docs/adr/0007-definite-answers.md).
//
// @code
//   saferetry::RetryPolicyOptions o;   // for every call of a policy
//   o.status_query.url_template = "http://127.0.0.1:8080/orders/by-key/{key}";
//   saferetry::CallOptions call;       // or for one call, its endpoint's
//   call.status_url = "http://127.0.0.1:8080/orders/by-key/{key}";
// @endcode

#ifndef SAFERETRY_STATUS_QUERY_H_
#define SAFERETRY_STATUS_QUERY_H_

#include <functional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "saferetry/request.h"
#include "saferetry/transport.h"

namespace saferetry {

/// The request header that asks the server to fence an unsettled key.
inline constexpr std::string_view kFenceHeader = "Idempotency-Key-Fence";

/// The meaning of one status answer.
enum class StatusAnswer {
  kFound,               ///< 2xx: the original took effect.
  kNotFound,            ///< 404 without a definite key state: not (yet) there.
  kProcessing,          ///< 409 or 202: still being processed.
  kStillUnknown,        ///< Anything else, or no answer.
  kCompletedWithError,  ///< 404 + `completed`: a stored final error; definite.
  kFenced,              ///< 404 + `fenced`: the key can never take effect; definite.
  /// 404 + `expired`: the server reaped the key's record, perhaps after its
  /// effect; not definite, and the key will not be executed again.
  kExpired,
  /// 409 + `pending_confirmation`: the server waits for a person's decision;
  /// not definite, and no poll will change it.
  kPendingConfirmation,
};

/// A status answer with its evidence.
struct StatusQueryReply {
  StatusAnswer answer = StatusAnswer::kStillUnknown;
  TransportResult result;
};

/// How to ask. Either a URL template or a callback.
struct StatusQuery {
  /// An absolute URL containing `{key}`, replaced by the percent-encoded key
  /// (e.g. "https://api.example/orders/by-key/{key}"). Sent with GET, the
  /// caller's headers except those describing a body, and the key header.
  std::string url_template;
  /// When set, replaces the template: performs the query for `key` within
  /// `timeout` and returns the answer. Must be thread-safe.
  std::function<StatusQueryReply(std::string_view key, Duration timeout)> callback;
  /// When a status query says "not found" and no resend is left, send one
  /// last query carrying `Idempotency-Key-Fence: true`, asking the server to
  /// refuse the key from now on; a fenced "not found" then ends the call
  /// FAILED, definitely. Needs a server that implements the fence
  /// (docs/server-contract.md); others ignore the header and the call stays
  /// UNKNOWN. Off by default: fencing makes the key unusable for good.
  /// Not used with `callback`.
  bool fence_when_giving_up = false;
};

/// InvalidArgument naming "status_query.url_template" when neither a callback
/// nor a template with `{key}` is given, or the expanded URL is not valid.
absl::Status ValidateStatusQuery(const StatusQuery& query);

/// RFC 3986 percent-encoding: unreserved characters (ALPHA DIGIT - . _ ~)
/// are kept, every other byte becomes %XX (upper-case hex).
std::string PercentEncode(std::string_view s);

/// Replaces every `{key}` in `url_template` with `PercentEncode(key)`.
std::string ExpandKeyTemplate(std::string_view url_template, std::string_view key);

/// True for headers that describe a body (Content-Type, Content-Length,
/// Content-Encoding, Content-Language, Content-Location, Content-MD5,
/// Content-Range, Content-Digest, Digest, Repr-Digest, Transfer-Encoding):
/// they are not copied onto a status query.
bool DescribesBody(std::string_view header_name);

/// The GET request for `key`: the expanded template, the original's headers
/// except those describing a body.
Request BuildStatusQueryRequest(const StatusQuery& query, const Request& original,
                                std::string_view key);

/// Maps a transport result to an answer per the table above (reads the
/// status and the `Idempotency-Key-State` header).
StatusAnswer MapStatusAnswer(const TransportResult& result);

}  // namespace saferetry

#endif  // SAFERETRY_STATUS_QUERY_H_

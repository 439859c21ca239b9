// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// How an ambiguous outcome is resolved: ask the server what happened to the
// key, instead of sending a fresh request.
//
//   status answer            meaning                         next step
//   2xx                      found: the original took effect SUCCEEDED with that response
//   404                      not found: it never took effect resend, same key, via retry checks
//   409, 202                 processing                      query again after backoff
//   anything else / failure  still unknown                   query again within budget and
//                                                            deadline, else UNKNOWN; never a resend
//
// @code
//   CallOptions call;
//   call.status_query = StatusQuery{"http://127.0.0.1:8080/orders/by-key/{key}"};
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

/// The meaning of one status answer.
enum class StatusAnswer { kFound, kNotFound, kProcessing, kStillUnknown };

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

/// Maps a transport result to an answer per the table above.
StatusAnswer MapStatusAnswer(const TransportResult& result);

}  // namespace saferetry

#endif  // SAFERETRY_STATUS_QUERY_H_

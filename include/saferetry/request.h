// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The request value type: what one logical call sends on every attempt.
//
// @code
//   saferetry::Request req;
//   req.method = "POST";
//   req.url = "http://127.0.0.1:8080/orders";
//   req.headers = {{"Content-Type", "application/json"}};
//   req.body = R"({"sku":"sku-42","quantity":1})";
// @endcode

#ifndef SAFERETRY_REQUEST_H_
#define SAFERETRY_REQUEST_H_

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace saferetry {

/// Default names of the headers saferetry adds or reads (one place; the
/// client, the JSON policies and the CLI use these). The idempotency and
/// deadline headers are in idempotency.h and deadline.h.
inline constexpr std::string_view kDefaultAttemptHeader = "X-Retry-Attempt";
inline constexpr std::string_view kDefaultRequestIdHeader = "X-Request-Id";

/// One header line. Names compare case-insensitively.
using Header = std::pair<std::string, std::string>;
/// Header lines in sending order; a name may repeat.
using Headers = std::vector<Header>;

/// One header line by reference: a name and a value in storage that whoever
/// hands it out keeps alive for as long as it says (see
/// `AttemptOptions::extra_headers`). Names compare case-insensitively.
struct HeaderRef {
  std::string_view name;
  std::string_view value;
};
/// Header lines by reference, in sending order.
using HeaderRefs = absl::Span<const HeaderRef>;

/// Whether repeating the request can change the world more than once.
enum class Idempotency {
  /// Derived from the method per RFC 9110 §9.2.2: GET, HEAD, OPTIONS, TRACE,
  /// PUT and DELETE are idempotent; POST, PATCH, CONNECT and unknown methods
  /// are not.
  kFromMethod,
  /// The caller declares the request idempotent (e.g. a conditional POST).
  /// An ambiguous attempt is then retried like a transient failure.
  kIdempotent,
  /// The caller declares the request non-idempotent (e.g. a PUT that appends).
  kNonIdempotent,
};

/// An HTTP request. Owns its body, so every attempt replays the same bytes.
struct Request {
  /// The method, upper case as sent ("GET", "POST", ...). Default "GET".
  std::string method = "GET";
  /// Absolute http:// or https:// URL.
  std::string url;
  /// Headers sent on every attempt. saferetry adds its own (idempotency key,
  /// deadline) after these.
  Headers headers;
  /// The body, replayed byte for byte on every attempt. Empty = no body.
  std::string body;
  /// See `Idempotency`. Default: derived from the method.
  Idempotency idempotency = Idempotency::kFromMethod;
};

/// An HTTP response. A 4xx or 5xx is data, not an error.
struct Response {
  /// The status code (100-599).
  int status_code = 0;
  /// Response headers in received order.
  Headers headers;
  /// The body, at most the transport's body cap.
  std::string body;
  /// True when the body passed the transport's cap and was cut.
  bool body_truncated = false;
};

/// True for GET, HEAD, OPTIONS and TRACE: methods with no effect to be unsure
/// about. A safe request never ends `Outcome::kUnknown`.
bool IsSafeMethod(std::string_view method);

/// True when repeating `request` is harmless, per its `idempotency` field.
bool IsIdempotent(const Request& request);

/// The first header named `name` (case-insensitive), if any.
std::optional<std::string_view> FindHeader(const Headers& headers, std::string_view name);

/// The first header named `name` (case-insensitive) among `headers`, if any.
std::optional<std::string_view> FindHeaderRef(HeaderRefs headers, std::string_view name);

/// Checks one header: the name must be a non-empty RFC 9110 token, the value
/// may not contain CR, LF or NUL. Errors are `InvalidArgument` naming `field`
/// (e.g. "headers[2].value").
absl::Status ValidateHeader(const Header& header, std::string_view field);
/// The same check for a header given by reference.
absl::Status ValidateHeader(std::string_view name, std::string_view value, std::string_view field);

/// Checks a request before anything is sent: method is a token, the URL is an
/// absolute http(s) URL with a host and a port in 1-65535, every header passes
/// `ValidateHeader`. Errors are `InvalidArgument` naming the field
/// ("request.url: unsupported scheme \"ftp\"").
absl::Status ValidateRequest(const Request& request);

}  // namespace saferetry

#endif  // SAFERETRY_REQUEST_H_

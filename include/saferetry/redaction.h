// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Redaction: keeping secrets out of everything the library and its tools
// print (traces, the CLI's --verbose lines, transport messages).
//
// Two kinds of secret are recognised:
//   - header values: `Authorization`, `Proxy-Authorization`, `Cookie` and
//     `Set-Cookie` always, plus any names the caller adds (e.g. `X-Api-Key`);
//     names compare case-insensitively and the value becomes `kRedacted`;
//   - URL credentials: the whole userinfo of a URL (`user:password@`, or a
//     bare `token@`) is removed, so "https://bob:hunter2@api.example/x"
//     prints as "https://api.example/x".
// Request and response bodies are never printed by the library, so they are
// not scanned.
//
// @code
//   std::vector<std::string> extra = {"X-Api-Key"};
//   saferetry::IsSecretHeader("x-api-key", extra);             // true
//   saferetry::RedactUrl("https://bob:pw@api.example/orders");  // "https://api.example/orders"
// @endcode
//
// Everything here is a pure function of its arguments (or a const method),
// thread-safe, and never throws.

#ifndef SAFERETRY_REDACTION_H_
#define SAFERETRY_REDACTION_H_

#include <string>
#include <string_view>
#include <vector>

#include "saferetry/request.h"

namespace saferetry {

/// What replaces a redacted header value.
inline constexpr std::string_view kRedacted = "[REDACTED]";

/// True when the value of header `name` must never be printed: one of the
/// built-in names (Authorization, Proxy-Authorization, Cookie, Set-Cookie)
/// or one of `extra`, compared case-insensitively. Empty names in `extra`
/// match nothing.
bool IsSecretHeader(std::string_view name, const std::vector<std::string>& extra = {});

/// `url` with the userinfo of its authority removed:
/// "https://user:pass@host:8443/p?q" -> "https://host:8443/p?q", and
/// "https://token@host/" -> "https://host/". A URL without userinfo, and
/// text that is not an absolute URL, are returned unchanged. The userinfo
/// ends at the last '@' before the authority ends ('/', '?', '#').
std::string RedactUrl(std::string_view url);

/// Free text (an error message, a log line) with the userinfo removed from
/// every "scheme://userinfo@host" in it, as `RedactUrl` does. An authority
/// in text also ends at whitespace and at quote characters.
std::string RedactUrlsInText(std::string_view text);

/// Decides which header values are secret: the built-in names and
/// `extra_header_names`. Thread-safe once built (all methods are const).
class Redactor {
 public:
  Redactor() = default;
  explicit Redactor(std::vector<std::string> extra_header_names)
      : extra_(std::move(extra_header_names)) {}

  /// `IsSecretHeader(header_name, extra)`.
  bool IsSecret(std::string_view header_name) const;
  /// `value`, or `kRedacted` when the header is secret.
  std::string Value(std::string_view header_name, std::string_view value) const;
  /// A copy of `headers` with every secret value replaced.
  Headers Redact(const Headers& headers) const;
  /// `RedactUrl(url)`.
  std::string Url(std::string_view url) const;
  /// `RedactUrlsInText(text)`.
  std::string Text(std::string_view text) const;

 private:
  std::vector<std::string> extra_;
};

/// `Redactor(extra).Value(name, value)`: the value for printing, redacted
/// when `name` is a secret header.
std::string RedactHeaderValue(std::string_view name, std::string_view value,
                              const std::vector<std::string>& extra_secret_headers = {});

}  // namespace saferetry

#endif  // SAFERETRY_REDACTION_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/redaction.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/ascii.h"
#include "common/strings_internal.h"

namespace saferetry {
namespace {

constexpr std::string_view kBuiltInSecrets[] = {"Authorization", "Proxy-Authorization", "Cookie",
                                                "Set-Cookie"};

using internal::EqualsIgnoreCase;

// Where the authority that starts at `auth` ends. In a lone URL only the
// RFC 3986 delimiters end it; in free text whitespace and quotes do too, so
// the scan never runs into the next word.
std::size_t AuthorityEnd(std::string_view text, std::size_t auth, bool in_text) {
  std::size_t end = auth;
  while (end < text.size()) {
    const char c = text[end];
    if (c == '/' || c == '?' || c == '#') break;
    if (in_text && (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '"' || c == '\'')) {
      break;
    }
    ++end;
  }
  return end;
}

// Removes "userinfo@" from every "://authority" in `text`. The userinfo is
// everything before the authority's last '@': a password may hold a stray
// '@', a host never does. The whole userinfo goes, not only a password,
// because a bare user name is often a token ("https://ghp_x@host/").
std::string StripUserinfo(std::string_view text, bool in_text) {
  std::string out;
  out.reserve(text.size());
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t sep = text.find("://", pos);
    if (sep == std::string_view::npos) break;
    const std::size_t auth = sep + 3;
    const std::size_t end = AuthorityEnd(text, auth, in_text);
    const std::string_view authority = text.substr(auth, end - auth);
    const std::size_t at = authority.rfind('@');
    out.append(text.substr(pos, auth - pos));
    out.append(at == std::string_view::npos ? authority : authority.substr(at + 1));
    // Keep scanning: a query may carry another URL ("?next=https://u:p@h").
    pos = end;
  }
  out.append(text.substr(std::min(pos, text.size())));
  return out;
}

}  // namespace

bool IsSecretHeader(std::string_view name, const std::vector<std::string>& extra) {
  for (std::string_view s : kBuiltInSecrets) {
    if (EqualsIgnoreCase(s, name)) return true;
  }
  for (const std::string& s : extra) {
    if (!s.empty() && EqualsIgnoreCase(s, name)) return true;
  }
  return false;
}

std::string RedactUrl(std::string_view url) { return StripUserinfo(url, /*in_text=*/false); }

std::string RedactUrlsInText(std::string_view text) {
  return StripUserinfo(text, /*in_text=*/true);
}

bool Redactor::IsSecret(std::string_view header_name) const {
  return IsSecretHeader(header_name, extra_);
}

std::string Redactor::Value(std::string_view header_name, std::string_view value) const {
  if (IsSecret(header_name)) return std::string(kRedacted);
  return std::string(value);
}

Headers Redactor::Redact(const Headers& headers) const {
  Headers out;
  out.reserve(headers.size());
  for (const auto& [name, value] : headers) out.emplace_back(name, Value(name, value));
  return out;
}

std::string Redactor::Url(std::string_view url) const { return RedactUrl(url); }

std::string Redactor::Text(std::string_view text) const { return RedactUrlsInText(text); }

std::string RedactHeaderValue(std::string_view name, std::string_view value,
                              const std::vector<std::string>& extra_secret_headers) {
  return Redactor(extra_secret_headers).Value(name, value);
}

}  // namespace saferetry

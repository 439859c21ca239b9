// Copyright 2026 The saferetry Authors. Licensed under the Apache License,
// Version 2.0.

#include "saferetry/request.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/request_scan.h"
#include "common/strings_internal.h"
#include "saferetry/trace_ids.h"

namespace saferetry {
namespace {

using internal::EqualsIgnoreCase;

// Debian's Abseil has its own string_view, distinct from std::string_view.
absl::string_view AsAbsl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// RFC 9110 §5.6.2: tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" /
// "-" / "." / "^" / "_" / "`" / "|" / "~" / DIGIT / ALPHA.
constexpr std::array<bool, 256> TokenChars() {
  std::array<bool, 256> table{};
  for (int c = '0'; c <= '9'; ++c) table[c] = true;
  for (int c = 'a'; c <= 'z'; ++c) table[c] = true;
  for (int c = 'A'; c <= 'Z'; ++c) table[c] = true;
  for (char c : std::string_view("!#$%&'*+-.^_`|~")) table[static_cast<unsigned char>(c)] = true;
  return table;
}
constexpr std::array<bool, 256> kTokenChars = TokenChars();

// The bytes of a URL's authority that the one-pass scan stops at.
constexpr std::array<bool, 256> AuthoritySpecial() {
  std::array<bool, 256> table{};
  for (char c : std::string_view("/?#@:[]")) table[static_cast<unsigned char>(c)] = true;
  return table;
}
constexpr std::array<bool, 256> kAuthoritySpecial = AuthoritySpecial();

std::size_t FirstNonTokenChar(std::string_view s) {
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (!kTokenChars[static_cast<unsigned char>(s[i])]) return i;
  }
  return std::string_view::npos;
}

// One pass over `s` (find_first_of would search the set for every
// character).
bool HasCrOrLf(std::string_view s) {
  for (char c : s) {
    if (c == '\r' || c == '\n') return true;
  }
  return false;
}

// Whether a header value holds a byte it must not (CR, LF or NUL), in one
// pass eight bytes at a time: the check every send makes of every header;
// the error, built apart, names which.
bool HasCrLfOrNul(std::string_view s) {
  constexpr std::uint64_t kOnes = 0x0101010101010101ULL;
  constexpr std::uint64_t kHigh = 0x8080808080808080ULL;
  // Whether the eight bytes at `p` hold a zero, a CR or a LF (exact: a zero
  // byte of `v` sets its high bit in `(v - kOnes) & ~v`, and only then does
  // the borrow reach a byte that is not zero).
  auto any = [](const char* p) {
    std::uint64_t x;
    std::memcpy(&x, p, sizeof(x));
    auto zero = [](std::uint64_t v) { return (v - kOnes) & ~v & kHigh; };
    return (zero(x) | zero(x ^ (kOnes * '\r')) | zero(x ^ (kOnes * '\n'))) != 0;
  };
  if (s.size() >= 8) {
    for (std::size_t i = 0; i + 8 <= s.size(); i += 8) {
      if (any(s.data() + i)) return true;
    }
    return any(s.data() + s.size() - 8);  // the tail, overlapping what was read
  }
  for (char c : s) {
    if (c == '\r' || c == '\n' || c == '\0') return true;
  }
  return false;
}

// Quotes `s` for an error message. Long inputs are cut so a huge header or
// URL does not end up in a log line in full.
std::string Quote(std::string_view s) {
  constexpr std::size_t kMaxShown = 64;
  if (s.size() <= kMaxShown) {
    return absl::StrCat("\"", absl::CHexEscape(AsAbsl(s)), "\"");
  }
  return absl::StrCat("\"", absl::CHexEscape(AsAbsl(s.substr(0, kMaxShown))), "\"...");
}

absl::Status UrlError(std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("request.url: ", AsAbsl(what)));
}

// A deliberately small check of an absolute http(s) URL: scheme, authority
// (optional userinfo, a host or [IPv6] literal, an optional port). The path,
// query and fragment are left to the transport.
// The index of the first byte of `s` that is a space, a control character
// or DEL (<= 0x20 or 0x7f), or npos. Eight bytes at a time: a word with such a
// byte is found exactly (a byte of 0x80 or more is never flagged, and a
// borrow only follows a flagged byte), then searched byte by byte.
std::size_t FirstSpaceOrControl(std::string_view s) {
  constexpr std::uint64_t kOnes = 0x0101010101010101ULL;
  constexpr std::uint64_t kHigh = 0x8080808080808080ULL;
  // Whether the eight bytes at `p` hold one of them.
  auto any = [](const char* p) {
    std::uint64_t x;
    std::memcpy(&x, p, sizeof(x));
    const std::uint64_t below = (x - kOnes * 0x21) & ~x & kHigh;
    const std::uint64_t del = x ^ (kOnes * 0x7f);
    return (below | ((del - kOnes) & ~del & kHigh)) != 0;
  };
  std::size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    if (any(s.data() + i)) break;
  }
  // The tail: the last eight bytes (overlapping what was read) clear it.
  if (i < s.size() && s.size() >= 8 && i + 8 > s.size() && !any(s.data() + s.size() - 8)) {
    return std::string_view::npos;
  }
  for (; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c <= 0x20 || c == 0x7f) return i;
  }
  return std::string_view::npos;
}

absl::Status ValidateUrl(std::string_view url) {
  if (url.empty()) return UrlError("is empty");
  if (const std::size_t i = FirstSpaceOrControl(url); i != std::string_view::npos) {
    return UrlError(absl::StrCat("contains whitespace or a control character at position ", i,
                                 " in ", Quote(url)));
  }
  // The scheme: "http://" or "https://" in any case, or an error that says
  // what is there.
  std::size_t scheme_end = 0;
  if (url.size() > 7 && EqualsIgnoreCase(url.substr(0, 7), "http://")) {
    scheme_end = 4;
  } else if (url.size() > 8 && EqualsIgnoreCase(url.substr(0, 8), "https://")) {
    scheme_end = 5;
  } else {
    scheme_end = url.find("://");
    if (scheme_end == std::string_view::npos || scheme_end == 0) {
      return UrlError(
          absl::StrCat("must be an absolute http:// or https:// URL, got ", Quote(url)));
    }
    auto const scheme = url.substr(0, scheme_end);
    if (!EqualsIgnoreCase(scheme, "http") && !EqualsIgnoreCase(scheme, "https")) {
      return UrlError(absl::StrCat("unsupported scheme ", Quote(scheme),
                                   " (only http and https are supported)"));
    }
  }
  // The authority runs to the path, query or fragment; the host follows the
  // last '@' (userinfo) in it. One pass finds both, and what the host part
  // holds of ':', '[' and ']' (counted from the last '@').
  auto rest = url.substr(scheme_end + 3);
  std::size_t authority_end = 0;
  std::size_t at = std::string_view::npos;
  std::size_t first_colon = std::string_view::npos;
  bool two_colons = false;
  bool bracket = false;
  for (; authority_end < rest.size(); ++authority_end) {
    const char c = rest[authority_end];
    if (!kAuthoritySpecial[static_cast<unsigned char>(c)]) continue;
    if (c == '/' || c == '?' || c == '#') break;
    if (c == '@') {
      at = authority_end;
      first_colon = std::string_view::npos;
      two_colons = bracket = false;
    } else if (c == ':') {
      two_colons = two_colons || first_colon != std::string_view::npos;
      if (first_colon == std::string_view::npos) first_colon = authority_end;
    } else {
      bracket = true;
    }
  }
  auto authority = rest.substr(0, authority_end);
  const std::size_t host_begin = at == std::string_view::npos ? 0 : at + 1;
  authority = authority.substr(host_begin);
  if (authority.empty()) return UrlError("missing host");

  std::string_view host;
  std::string_view after_host;  // "" or ":<port>"
  if (authority.front() == '[') {
    auto const close = authority.find(']');
    if (close == std::string_view::npos) {
      return UrlError("unterminated IPv6 literal, missing ']'");
    }
    host = authority.substr(1, close - 1);
    if (host.empty()) return UrlError("missing host (empty IPv6 literal)");
    // The address part is hex digits, ':' and '.' (IPv4-mapped); an optional
    // zone id follows '%' (RFC 6874, "%25eth0").
    auto const zone = host.find('%');
    auto const address = host.substr(0, zone);
    bool valid = address.find(':') != std::string_view::npos;
    for (char c : address) {
      valid =
          valid && (absl::ascii_isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.');
    }
    if (zone != std::string_view::npos) {
      // In a URL the '%' before the zone id is itself percent-encoded.
      auto zone_id = host.substr(zone);
      valid = valid && zone_id.size() > 3 && zone_id.substr(0, 3) == "%25";
      zone_id.remove_prefix(std::min<std::size_t>(3, zone_id.size()));
      for (char c : zone_id) {
        valid = valid && (absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '%' ||
                          c == '-' || c == '.' || c == '_' || c == '~');
      }
    }
    if (!valid) {
      return UrlError(absl::StrCat("invalid IPv6 literal ", Quote(host)));
    }
    after_host = authority.substr(close + 1);
    if (!after_host.empty() && after_host.front() != ':') {
      return UrlError(
          absl::StrCat("unexpected characters after IPv6 literal: ", Quote(after_host)));
    }
  } else {
    if (two_colons) {
      return UrlError(absl::StrCat("invalid authority ", Quote(authority),
                                   " (an IPv6 address must be in brackets)"));
    }
    const std::size_t colon =
        first_colon == std::string_view::npos ? first_colon : first_colon - host_begin;
    host = authority.substr(0, colon);
    after_host = colon == std::string_view::npos ? std::string_view() : authority.substr(colon);
    if (host.empty()) return UrlError("missing host");
    // A bracket in the authority of a host that is not an IPv6 literal.
    if (bracket && host.find_first_of("[]") != std::string_view::npos) {
      return UrlError(absl::StrCat("invalid character in host ", Quote(host)));
    }
  }
  if (after_host.empty()) return absl::OkStatus();

  auto const port = after_host.substr(1);
  if (port.empty()) return UrlError("missing port after ':'");
  std::int64_t value = 0;
  for (char c : port) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      return UrlError(absl::StrCat("port is not a number: ", Quote(port)));
    }
    // Stop accumulating once out of range; no overflow on long digit strings.
    if (value <= 65535) value = value * 10 + (c - '0');
  }
  if (value < 1 || value > 65535) {
    return UrlError(absl::StrCat("port ", Quote(port), " is out of range 1-65535"));
  }
  return absl::OkStatus();
}

}  // namespace

bool IsSafeMethod(std::string_view method) {
  // Methods are case-sensitive (RFC 9110 §9.1): "get" is not GET. One
  // compare, chosen by length.
  switch (method.size()) {
    case 3:
      return method == "GET";
    case 4:
      return method == "HEAD";
    case 5:
      return method == "TRACE";
    case 7:
      return method == "OPTIONS";
    default:
      return false;
  }
}

bool IsIdempotent(const Request& request) {
  switch (request.idempotency) {
    case Idempotency::kIdempotent:
      return true;
    case Idempotency::kNonIdempotent:
      return false;
    case Idempotency::kFromMethod:
      break;
  }
  const std::string_view m = request.method;
  return IsSafeMethod(m) || (m.size() == 3 && m == "PUT") || (m.size() == 6 && m == "DELETE");
}

std::optional<std::string_view> FindHeader(const Headers& headers, std::string_view name) {
  for (auto const& h : headers) {
    // The length first: most names differ in it, and that costs no call.
    if (EqualsIgnoreCase(h.first, name)) {
      return std::string_view(h.second);
    }
  }
  return std::nullopt;
}

std::optional<std::string_view> FindHeaderRef(HeaderRefs headers, std::string_view name) {
  for (const HeaderRef& h : headers) {
    if (EqualsIgnoreCase(h.name, name)) return h.value;
  }
  return std::nullopt;
}

absl::Status ValidateHeader(const Header& header, std::string_view field) {
  return ValidateHeader(header.first, header.second, field);
}

absl::Status ValidateHeader(std::string_view name, std::string_view value, std::string_view field) {
  if (name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(AsAbsl(field), ".name: must be a non-empty token"));
  }
  if (auto pos = FirstNonTokenChar(name); pos != std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(AsAbsl(field), ".name: ", Quote(name),
                     " is not a token (invalid character at position ", pos, ")"));
  }
  if (HasCrLfOrNul(value)) {
    if (HasCrOrLf(value)) {
      return absl::InvalidArgumentError(absl::StrCat(AsAbsl(field), ".value: contains CR or LF"));
    }
    return absl::InvalidArgumentError(absl::StrCat(AsAbsl(field), ".value: contains NUL"));
  }
  return absl::OkStatus();
}

absl::Status ValidateRequest(const Request& request) {
  if (request.method.empty() || FirstNonTokenChar(request.method) != std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("request.method: must be a non-empty token, got ", Quote(request.method)));
  }
  if (auto status = ValidateUrl(request.url); !status.ok()) return status;
  for (std::size_t i = 0; i < request.headers.size(); ++i) {
    // The field's name is built only for the error: this runs on every send.
    const Header& h = request.headers[i];
    if (!h.first.empty() && FirstNonTokenChar(h.first) == std::string_view::npos &&
        !HasCrLfOrNul(h.second)) {
      continue;
    }
    auto status = ValidateHeader(h, absl::StrCat("request.headers[", i, "]"));
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

namespace internal {

RequestScan ScanRequestHeaders(const Headers& headers, std::string_view key_header) {
  RequestScan scan;
  for (std::size_t i = 0; i < headers.size(); ++i) {
    // Lengths first (`EqualsIgnoreCase`): most names differ in theirs.
    const std::string_view name = headers[i].first;
    if (scan.key_header == 0 && EqualsIgnoreCase(name, key_header)) scan.key_header = i + 1;
    if (EqualsIgnoreCase(name, kTraceParentHeader)) {
      ++scan.traceparents;
      scan.traceparent = i + 1;
    } else if (EqualsIgnoreCase(name, kTraceStateHeader)) {
      ++scan.tracestates;
    }
  }
  return scan;
}

}  // namespace internal

}  // namespace saferetry

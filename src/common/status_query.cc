// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/status_query.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace saferetry {

absl::Status ValidateStatusQuery(const StatusQuery& query) {
  if (query.callback) return absl::OkStatus();
  if (query.url_template.find("{key}") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "status_query.url_template: must contain {key}, got \"", query.url_template, "\""));
  }
  Request probe;
  probe.url = ExpandKeyTemplate(query.url_template, "k");
  absl::Status s = ValidateRequest(probe);
  if (!s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("status_query.url_template: ", s.message()));
  }
  return absl::OkStatus();
}

std::string PercentEncode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (absl::ascii_isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xf]);
    }
  }
  return out;
}

std::string ExpandKeyTemplate(std::string_view url_template, std::string_view key) {
  static constexpr std::string_view kPlaceholder = "{key}";
  const std::string encoded = PercentEncode(key);
  std::string out;
  std::size_t pos = 0;
  while (true) {
    const std::size_t hit = url_template.find(kPlaceholder, pos);
    if (hit == std::string_view::npos) break;
    out.append(url_template.substr(pos, hit - pos));
    out.append(encoded);
    pos = hit + kPlaceholder.size();
  }
  out.append(url_template.substr(pos));
  return out;
}

bool DescribesBody(std::string_view name) {
  static constexpr std::string_view kBodyHeaders[] = {
      "content-type",     "content-length", "content-encoding", "content-language",
      "content-location", "content-md5",    "content-range",    "content-digest",
      "digest",           "repr-digest",    "transfer-encoding"};
  for (std::string_view h : kBodyHeaders) {
    if (absl::EqualsIgnoreCase(absl::string_view(name.data(), name.size()),
                               absl::string_view(h.data(), h.size()))) {
      return true;
    }
  }
  return false;
}

Request BuildStatusQueryRequest(const StatusQuery& query, const Request& original,
                                std::string_view key) {
  Request q;
  q.method = "GET";
  q.url = ExpandKeyTemplate(query.url_template, key);
  for (const Header& h : original.headers) {
    if (!DescribesBody(h.first)) q.headers.push_back(h);
  }
  return q;
}

StatusAnswer MapStatusAnswer(const TransportResult& result) {
  if (!result.status.ok() || !result.response.has_value()) return StatusAnswer::kStillUnknown;
  const int code = result.response->status_code;
  if (code == 409) {
    std::optional<std::string_view> state =
        FindHeader(result.response->headers, "Idempotency-Key-State");
    if (state.has_value() && absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(absl::string_view(
                                                        state->data(), state->size())),
                                                    "pending_confirmation")) {
      return StatusAnswer::kPendingConfirmation;
    }
    return StatusAnswer::kProcessing;
  }
  if (code == 202) return StatusAnswer::kProcessing;
  if (code >= 200 && code < 300) return StatusAnswer::kFound;
  if (code == 404) {
    std::optional<std::string_view> state =
        FindHeader(result.response->headers, "Idempotency-Key-State");
    if (state.has_value()) {
      const absl::string_view v(state->data(), state->size());
      if (absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(v), "completed")) {
        return StatusAnswer::kCompletedWithError;
      }
      if (absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(v), "fenced")) {
        return StatusAnswer::kFenced;
      }
      if (absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(v), "expired")) {
        return StatusAnswer::kExpired;
      }
    }
    return StatusAnswer::kNotFound;
  }
  return StatusAnswer::kStillUnknown;
}

}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The intent journal's record decoding: what the SQLite journal reads back
// from a row (which a person, a disk error or a newer version may have
// changed) before the intent is reconciled or its headers sent again.
//
// Input lines: state, body digest, attempt, http status, created ms, then
// the rest is the headers blob ("h1;" and netstrings).
//
// Properties: no crash; a headers blob that decodes re-encodes to the same
// bytes (one canonical form) and holds only valid headers (HTTP-token names,
// no CR, LF or NUL in values); a row that decodes encodes back to the same
// columns; every decoding error is kDataLoss naming the field.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "saferetry/journal.h"
#include "src/intents/sqlite/journal_codec.h"

namespace {

std::int64_t ToInt(std::string_view s) {
  std::int64_t n = 0;
  return absl::SimpleAtoi(absl::string_view(s.data(), s.size()), &n) ? n : 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace internal = saferetry::internal;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto next_line = [&in]() {
    const std::size_t nl = in.find('\n');
    const std::string_view line = in.substr(0, nl);
    in = nl == std::string_view::npos ? std::string_view() : in.substr(nl + 1);
    return line;
  };
  internal::IntentRow row;
  row.key = "fuzz";
  row.method = "POST";
  row.url = "https://h/x";
  row.state = std::string(next_line());
  row.body_digest = std::string(next_line());
  row.attempt = ToInt(next_line());
  row.http_status = ToInt(next_line());
  row.created_ms = ToInt(next_line());
  row.deadline_ms = row.created_ms;
  row.updated_ms = row.created_ms;
  row.headers = std::string(in);

  const absl::StatusOr<saferetry::Headers> headers = internal::DecodeHeaders(row.headers);
  if (headers.ok()) {
    if (internal::EncodeHeaders(*headers) != row.headers) std::abort();
    if (!internal::ValidateHeaders(*headers).ok()) std::abort();
    for (const saferetry::Header& h : *headers) {
      if (h.second.find_first_of(std::string_view("\r\n\0", 3)) != std::string::npos) std::abort();
    }
  } else if (headers.status().code() != absl::StatusCode::kDataLoss ||
             !absl::StartsWith(headers.status().message(), "headers: ")) {
    std::abort();
  }

  const absl::StatusOr<saferetry::Intent> intent = internal::DecodeIntentRow(row);
  if (intent.ok()) {
    if (!headers.ok()) std::abort();  // a row never decodes around bad headers
    const internal::IntentRow again = internal::EncodeIntentRow(*intent);
    if (again.state != row.state || again.body_digest != row.body_digest ||
        again.attempt != row.attempt || again.http_status != row.http_status ||
        again.created_ms != row.created_ms || again.headers != row.headers) {
      std::abort();
    }
  } else if (intent.status().code() != absl::StatusCode::kDataLoss ||
             !absl::StartsWith(intent.status().message(), "journal record \"fuzz\": ")) {
    std::abort();
  }
  return 0;
}

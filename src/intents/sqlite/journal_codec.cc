// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "journal_codec.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace saferetry {
namespace internal {
namespace {

constexpr std::string_view kHeadersMagic = "h1;";

void AppendNetstring(std::string& out, std::string_view s) {
  out += std::to_string(s.size());
  out += ':';
  out.append(s.data(), s.size());
  out += ',';
}

// Reads one netstring at `pos`, advancing it; nullopt when malformed.
std::optional<std::string_view> ReadNetstring(std::string_view blob, std::size_t& pos) {
  std::size_t len = 0;
  std::size_t digits = 0;
  while (pos < blob.size() && blob[pos] >= '0' && blob[pos] <= '9') {
    if (digits == 0 && blob[pos] == '0' && pos + 1 < blob.size() && blob[pos + 1] != ':') {
      return std::nullopt;  // a leading zero: not canonical
    }
    len = len * 10 + static_cast<std::size_t>(blob[pos] - '0');
    ++pos;
    if (++digits > 6 || len > kMaxHeaderBytes) return std::nullopt;
  }
  if (digits == 0 || pos >= blob.size() || blob[pos] != ':') return std::nullopt;
  ++pos;
  if (blob.size() - pos < len + 1 || blob[pos + len] != ',') return std::nullopt;
  std::string_view s = blob.substr(pos, len);
  pos += len + 1;
  return s;
}

absl::Status Corrupt(const IntentRow& row, std::string_view field, std::string_view why) {
  return absl::DataLossError(absl::StrCat("journal record \"", row.key, "\": ", std::string(field),
                                          ": ", std::string(why)));
}

}  // namespace

std::string EncodeHeaders(const Headers& headers) {
  std::string out(kHeadersMagic);
  for (const Header& h : headers) {
    AppendNetstring(out, h.first);
    AppendNetstring(out, h.second);
  }
  return out;
}

absl::StatusOr<Headers> DecodeHeaders(std::string_view blob) {
  if (blob.substr(0, kHeadersMagic.size()) != kHeadersMagic) {
    return absl::DataLossError("headers: unknown format (no \"h1;\" prefix)");
  }
  Headers headers;
  std::size_t pos = kHeadersMagic.size();
  while (pos < blob.size()) {
    if (headers.size() >= kMaxStoredHeaders) {
      return absl::DataLossError("headers: too many headers");
    }
    std::optional<std::string_view> name = ReadNetstring(blob, pos);
    std::optional<std::string_view> value;
    if (name.has_value()) value = ReadNetstring(blob, pos);
    if (!value.has_value()) {
      return absl::DataLossError(absl::StrCat("headers: malformed at byte ", pos));
    }
    headers.emplace_back(std::string(*name), std::string(*value));
  }
  if (absl::Status s = ValidateHeaders(headers); !s.ok()) {
    return absl::DataLossError(s.message());
  }
  return headers;
}

IntentRow EncodeIntentRow(const Intent& intent) {
  IntentRow row;
  row.key = intent.key;
  row.method = intent.method;
  row.url = intent.url;
  row.body_digest = intent.body_digest;
  row.body = intent.body;
  row.status_url_template = intent.status_url_template;
  row.headers = EncodeHeaders(intent.headers);
  row.created_ms = ToUnixMillis(intent.created);
  row.deadline_ms = ToUnixMillis(intent.deadline);
  row.state = std::string(IntentStateName(intent.state));
  row.attempt = intent.attempt;
  row.http_status = intent.summary.http_status;
  row.stop_reason = intent.summary.stop_reason;
  row.resolved_by = intent.summary.resolved_by;
  row.last_error = intent.summary.last_error;
  row.claim_owner = intent.claim_owner;
  row.claim_until_ms = ToUnixMillis(intent.claim_until);
  row.updated_ms = ToUnixMillis(intent.updated);
  return row;
}

absl::StatusOr<Intent> DecodeIntentRow(const IntentRow& row) {
  // Times outside WallTime's range would overflow its nanoseconds.
  constexpr std::int64_t kMaxMillis = kMaxUnixMillis;
  Intent intent;
  intent.key = row.key;
  intent.method = row.method;
  intent.url = row.url;
  if (row.body_digest.size() != 64 ||
      !std::all_of(row.body_digest.begin(), row.body_digest.end(),
                   [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); })) {
    return Corrupt(row, "body_digest", "not 64 lower-case hex digits");
  }
  intent.body_digest = row.body_digest;
  intent.body = row.body;
  intent.status_url_template = row.status_url_template;
  absl::StatusOr<Headers> headers = DecodeHeaders(row.headers);
  if (!headers.ok()) return Corrupt(row, "headers", std::string(headers.status().message()));
  intent.headers = *std::move(headers);
  for (std::int64_t t : {row.created_ms, row.deadline_ms, row.claim_until_ms, row.updated_ms}) {
    if (t < -kMaxMillis || t > kMaxMillis) return Corrupt(row, "time", "out of range");
  }
  intent.created = FromUnixMillis(row.created_ms);
  intent.deadline = FromUnixMillis(row.deadline_ms);
  std::optional<IntentState> state = ParseIntentState(row.state);
  if (!state.has_value()) return Corrupt(row, "state", "unknown state");
  intent.state = *state;
  if (row.attempt < 0 || row.attempt > 1000000) return Corrupt(row, "attempt", "out of range");
  if ((intent.state == IntentState::kPending && row.attempt != 0) ||
      (intent.state == IntentState::kSent && row.attempt == 0)) {
    return Corrupt(row, "attempt", "does not agree with the state");
  }
  intent.attempt = static_cast<int>(row.attempt);
  if (row.http_status != 0 && (row.http_status < 100 || row.http_status > 599)) {
    return Corrupt(row, "http_status", "outside 100-599");
  }
  intent.summary.http_status = static_cast<int>(row.http_status);
  intent.summary.stop_reason = row.stop_reason;
  intent.summary.resolved_by = row.resolved_by;
  intent.summary.last_error = row.last_error;
  intent.claim_owner = row.claim_owner;
  intent.claim_until = FromUnixMillis(row.claim_until_ms);
  intent.updated = FromUnixMillis(row.updated_ms);
  return intent;
}

}  // namespace internal
}  // namespace saferetry

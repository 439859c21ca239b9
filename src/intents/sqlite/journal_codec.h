// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// How an intent is laid out in a journal row, and back. Decoding trusts
// nothing: the file may have been edited, truncated or written by a newer
// version, and a decoded intent may be sent again (its headers on a resend),
// so every field is checked and a bad record is kDataLoss, never a crash or a
// header that smuggles a line break.
//
// Headers are one blob: "h1;" then, per header, the name and the value each as
// a netstring ("<decimal length>:<bytes>,"), e.g.
//   h1;12:Content-Type,16:application/json,
// Lengths have no leading zeros (canonical: encoding a decoded blob gives the
// same bytes).

#ifndef SAFERETRY_SRC_JOURNAL_JOURNAL_CODEC_H_
#define SAFERETRY_SRC_JOURNAL_JOURNAL_CODEC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "saferetry/journal.h"

namespace saferetry {
namespace internal {

/// The blob for `headers` (which should pass `ValidateHeaders`).
std::string EncodeHeaders(const Headers& headers);
/// The headers of `blob`; kDataLoss "headers: ..." when it is malformed or a
/// header is not valid (see `ValidateHeaders`).
absl::StatusOr<Headers> DecodeHeaders(std::string_view blob);

/// One row as stored, column by column.
struct IntentRow {
  std::string key;
  std::string method;
  std::string url;
  std::string body_digest;
  std::optional<std::string> body;
  std::string status_url_template;
  std::string headers;
  std::int64_t created_ms = 0;
  std::int64_t deadline_ms = 0;
  std::string state;
  std::int64_t attempt = 0;
  std::int64_t http_status = 0;
  std::string stop_reason;
  std::string resolved_by;
  std::string last_error;
  std::string claim_owner;
  std::int64_t claim_until_ms = 0;
  std::int64_t updated_ms = 0;
};

/// The row for `intent`.
IntentRow EncodeIntentRow(const Intent& intent);
/// The intent of `row`; kDataLoss naming the key and the field when a column
/// is out of range (unknown state, bad digest, negative attempt, HTTP status
/// outside 0 and 100-599, bad headers blob).
absl::StatusOr<Intent> DecodeIntentRow(const IntentRow& row);

}  // namespace internal
}  // namespace saferetry

#endif  // SAFERETRY_SRC_JOURNAL_JOURNAL_CODEC_H_

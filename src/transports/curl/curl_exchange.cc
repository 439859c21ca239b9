// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The easy handle's callbacks: parsing the response's status line and header
// lines, keeping the body within its cap, handing out the request body, the
// resend guard and cancellation.

#include "curl_exchange.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <utility>

#include "absl/strings/match.h"
#include "common/strings_internal.h"

namespace saferetry {
namespace internal {
namespace {

constexpr std::size_t kTypicalHeaderCount = 8;

// Strips optional whitespace (SP, HTAB) and stray CR/LF at both ends.
std::string_view TrimOws(std::string_view s) {
  auto is_ws = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && is_ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
  return s;
}

// 1*DIGIT -> value; false on anything else or overflow.
bool ParseUint64(std::string_view s, std::uint64_t* out) {
  if (s.empty() || s.size() > 19) return false;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  *out = v;
  return true;
}

bool IsStatusLine(std::string_view line) {
  return absl::StartsWith(absl::string_view(line.data(), line.size()), "HTTP/");
}

// "HTTP/1.1 200 OK" -> 200; 0 when malformed.
int ParseStatusCode(std::string_view line) {
  auto sp = line.find(' ');
  if (sp == std::string_view::npos) return 0;
  std::string_view rest = line.substr(sp + 1);
  if (rest.size() < 3) return 0;
  int code = 0;
  for (int i = 0; i < 3; ++i) {
    char c = rest[i];
    if (c < '0' || c > '9') return 0;
    code = code * 10 + (c - '0');
  }
  return code;
}

}  // namespace

// Header callback: one physical header line per call, CRLF included.
extern "C" std::size_t OnHeader(char* data, std::size_t size, std::size_t n, void* userp) {
  auto* ex = static_cast<Exchange*>(userp);
  const std::size_t len = size * n;
  ex->any_response_byte = true;
  std::string_view line(data, len);
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.remove_suffix(1);
  if (IsStatusLine(line)) {
    // A new response starts (after a 1xx): only the final one's headers count.
    ex->status_code = static_cast<std::int16_t>(ParseStatusCode(line));
    ex->headers.clear();
    // Room for a typical response's headers at once (the vector is handed
    // over with the response, so it starts empty for each exchange).
    ex->headers.reserve(kTypicalHeaderCount);
    ex->expected_length = 0;
    ex->final_headers_done = false;
    return len;
  }
  if (line.empty()) {
    if (ex->status_code >= 200) ex->final_headers_done = true;
    return len;
  }
  if (line.front() == ' ' || line.front() == '\t') {
    // obs-fold (RFC 9112 §5.2): a continuation of the previous value.
    std::string_view more = TrimOws(line);
    if (!ex->headers.empty() && !more.empty()) {
      std::string& value = ex->headers.back().second;
      if (!value.empty()) value.push_back(' ');
      value.append(more.data(), more.size());
    }
    return len;
  }
  auto colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0) return len;  // Not a header; skip.
  std::string_view name = line.substr(0, colon);
  std::string_view value = TrimOws(line.substr(colon + 1));
  if (!ex->final_headers_done && EqualsIgnoreCase(name, "Content-Length")) {
    std::uint64_t n_bytes = 0;
    if (ParseUint64(value, &n_bytes)) ex->expected_length = n_bytes;
  }
  ex->headers.emplace_back(std::string(name), std::string(value));
  return len;
}

// Write callback: keeps at most max_body bytes, then stops the transfer (a
// short count makes curl fail with CURLE_WRITE_ERROR, which Send() turns back
// into a success flagged `body_truncated`).
extern "C" std::size_t OnBody(char* data, std::size_t size, std::size_t n, void* userp) {
  auto* ex = static_cast<Exchange*>(userp);
  const std::size_t len = size * n;
  ex->any_response_byte = true;
  if (ex->response_body.empty() && ex->expected_length > 0) {
    ex->response_body.reserve(
        static_cast<std::size_t>(std::min<std::uint64_t>(ex->expected_length, ex->max_body)));
  }
  const std::size_t room = ex->max_body - ex->response_body.size();
  if (len <= room) {
    ex->response_body.append(data, len);
    return len;
  }
  ex->response_body.append(data, room);
  ex->truncated = true;
  return room;  // != len: abort.
}

// Read callback for bodies of unsafe requests. Paired with OnSeek, which
// cannot seek: when libcurl wants to resend the body on a new connection it
// must rewind first, and that fails with CURLE_SEND_FAIL_REWIND.
extern "C" std::size_t OnRead(char* buffer, std::size_t size, std::size_t n, void* userp) {
  auto* ex = static_cast<Exchange*>(userp);
  const std::size_t left = ex->body->size() - ex->body_offset;
  const std::size_t k = std::min(left, size * n);
  if (k > 0) std::memcpy(buffer, ex->body->data() + ex->body_offset, k);
  ex->body_offset += k;
  return k;
}

extern "C" int OnSeek(void* /*userp*/, curl_off_t /*offset*/, int /*origin*/) {
  return CURL_SEEKFUNC_CANTSEEK;
}

// Runs right before curl writes a request on a (new or reused) connection.
// A second call within one perform is libcurl's own resend after a reused
// connection died; for an unsafe request it is refused. This also covers
// unsafe requests without a body, which the rewind trick cannot.
extern "C" int OnPrereq(void* userp, char*, char*, int, int) {
  auto* ex = static_cast<Exchange*>(userp);
  if (ex->prereq_calls < INT16_MAX) ++ex->prereq_calls;
  if (ex->prereq_calls > 1 && ex->unsafe) {
    ex->resend_blocked = true;
    return CURL_PREREQFUNC_ABORT;
  }
  return CURL_PREREQFUNC_OK;
}

Response TakeResponse(Exchange& ex) {
  Response r;
  r.status_code = ex.status_code;
  r.headers = std::move(ex.headers);
  r.body = std::move(ex.response_body);
  r.body_truncated = ex.truncated;
  ex.headers = Headers();
  ex.response_body = std::string();
  return r;
}

}  // namespace internal
}  // namespace saferetry

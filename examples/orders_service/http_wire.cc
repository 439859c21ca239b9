// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "orders_service/http_wire.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <algorithm>

namespace saferetry {
namespace example {

namespace {

constexpr std::size_t kMaxHead = 64 * 1024;

// Small string helpers on std::string_view (Debian's Abseil has its own
// string_view type, distinct from std's).
bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (;;) {
    std::size_t pos = s.find(sep);
    out.push_back(s.substr(0, pos));
    if (pos == std::string_view::npos) return out;
    s.remove_prefix(pos + 1);
  }
}

// Decimal digits only; false on anything else or overflow past 18 digits.
bool ParseDecimal(std::string_view s, std::uint64_t* out) {
  if (s.empty() || s.size() > 18) return false;
  std::uint64_t n = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    n = n * 10 + static_cast<std::uint64_t>(c - '0');
  }
  *out = n;
  return true;
}
constexpr std::size_t kMaxLine = 8 * 1024;

std::string_view TrimCrlf(std::string_view line) {
  if (EndsWith(line, "\r\n")) line.remove_suffix(2);
  return line;
}

}  // namespace

bool WireReader::Fill() {
  if (eof_) return false;
  char chunk[16 * 1024];
  for (;;) {
    ssize_t n = recv(fd_, chunk, sizeof(chunk), 0);
    if (n > 0) {
      buffer_.append(chunk, static_cast<std::size_t>(n));
      return true;
    }
    if (n < 0 && errno == EINTR) continue;
    eof_ = true;
    return false;
  }
}

bool WireReader::ReadExactly(std::size_t n, std::string* out) {
  while (buffer_.size() < n) {
    if (!Fill()) return false;
  }
  out->append(buffer_, 0, n);
  buffer_.erase(0, n);
  return true;
}

bool WireReader::ReadLine(std::size_t limit, std::string* out) {
  std::size_t searched = 0;
  for (;;) {
    std::size_t pos = buffer_.find("\r\n", searched > 0 ? searched - 1 : 0);
    if (pos != std::string::npos) {
      if (pos + 2 > limit) return false;
      out->append(buffer_, 0, pos + 2);
      buffer_.erase(0, pos + 2);
      return true;
    }
    if (buffer_.size() > limit) return false;
    searched = buffer_.size();
    if (!Fill()) return false;
  }
}

bool WireReader::ReadToEof(std::size_t limit, std::string* out) {
  while (Fill()) {
    if (buffer_.size() > limit) return false;
  }
  out->append(buffer_);
  buffer_.clear();
  return true;
}

std::string HttpHead::Header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (EqualsIgnoreCase(k, name)) return v;
  }
  return "";
}

bool HttpHead::Has(std::string_view name) const {
  return std::any_of(headers.begin(), headers.end(),
                     [&](const auto& h) { return EqualsIgnoreCase(h.first, name); });
}

bool HttpHead::HasToken(std::string_view name, std::string_view token) const {
  for (const auto& [k, v] : headers) {
    if (!EqualsIgnoreCase(k, name)) continue;
    for (std::string_view t : Split(v, ',')) {
      if (EqualsIgnoreCase(Trim(t), token)) return true;
    }
  }
  return false;
}

void HttpHead::Remove(std::string_view name) {
  headers.erase(std::remove_if(headers.begin(), headers.end(),
                               [&](const auto& h) { return EqualsIgnoreCase(h.first, name); }),
                headers.end());
}

std::string HttpHead::Serialize() const {
  std::string out = start_line + "\r\n";
  for (const auto& [k, v] : headers) out += k + ": " + v + "\r\n";
  out += "\r\n";
  return out;
}

std::string HttpHead::Method() const {
  std::vector<std::string_view> parts = Split(start_line, ' ');
  return parts.size() == 3 && !parts[0].empty() ? std::string(parts[0]) : "";
}

std::string HttpHead::Target() const {
  std::vector<std::string_view> parts = Split(start_line, ' ');
  return parts.size() == 3 ? std::string(parts[1]) : "";
}

int HttpHead::StatusCode() const {
  std::vector<std::string_view> parts = Split(start_line, ' ');
  std::uint64_t code = 0;
  if (parts.size() < 2 || parts[0].substr(0, 5) != "HTTP/" || parts[1].size() != 3 ||
      !ParseDecimal(parts[1], &code) || code < 100) {
    return 0;
  }
  return static_cast<int>(code);
}

ReadResult ReadHead(WireReader& in, HttpHead* head) {
  std::string line;
  std::size_t total = 0;
  bool first = true;
  for (;;) {
    line.clear();
    if (!in.ReadLine(kMaxLine, &line)) {
      // EOF before any byte of this message is a clean close.
      return first && !in.has_buffered() ? ReadResult::kClosed : ReadResult::kError;
    }
    total += line.size();
    if (total > kMaxHead) return ReadResult::kError;
    std::string_view l = TrimCrlf(line);
    if (first) {
      if (l.empty()) continue;  // tolerate stray CRLF between messages
      head->start_line = std::string(l);
      first = false;
      continue;
    }
    if (l.empty()) return ReadResult::kOk;
    std::size_t colon = l.find(':');
    if (colon == std::string_view::npos || colon == 0) return ReadResult::kError;
    head->headers.emplace_back(std::string(l.substr(0, colon)),
                               std::string(Trim(l.substr(colon + 1))));
  }
}

namespace {

BodyFraming FramingFromHeaders(const HttpHead& head, BodyFraming::Kind otherwise) {
  if (head.HasToken("Transfer-Encoding", "chunked")) return {BodyFraming::kChunked, 0};
  if (head.Has("Content-Length")) {
    std::uint64_t n = 0;
    if (!ParseDecimal(Trim(head.Header("Content-Length")), &n)) {
      return {BodyFraming::kUntilClose, 0};
    }
    return n == 0 ? BodyFraming{BodyFraming::kNone, 0} : BodyFraming{BodyFraming::kLength, n};
  }
  return {otherwise, 0};
}

}  // namespace

BodyFraming RequestFraming(const HttpHead& request) {
  return FramingFromHeaders(request, BodyFraming::kNone);
}

BodyFraming ResponseFraming(const HttpHead& response, std::string_view request_method) {
  const int code = response.StatusCode();
  if (request_method == "HEAD" || (code >= 100 && code < 200) || code == 204 || code == 304) {
    return {BodyFraming::kNone, 0};
  }
  return FramingFromHeaders(response, BodyFraming::kUntilClose);
}

ReadResult ReadBody(WireReader& in, const BodyFraming& framing, std::size_t limit,
                    std::string* out) {
  switch (framing.kind) {
    case BodyFraming::kNone:
      return ReadResult::kOk;
    case BodyFraming::kLength:
      if (framing.length > limit) return ReadResult::kError;
      return in.ReadExactly(static_cast<std::size_t>(framing.length), out) ? ReadResult::kOk
                                                                           : ReadResult::kError;
    case BodyFraming::kUntilClose:
      return in.ReadToEof(limit, out) ? ReadResult::kOk : ReadResult::kError;
    case BodyFraming::kChunked:
      break;
  }
  const std::size_t start = out->size();
  for (;;) {
    std::string size_line;
    if (!in.ReadLine(kMaxLine, &size_line)) return ReadResult::kError;
    out->append(size_line);
    std::string_view hex = TrimCrlf(size_line);
    hex = hex.substr(0, hex.find(';'));  // drop chunk extensions
    hex = Trim(hex);
    std::uint64_t size = 0;
    if (hex.empty() || hex.size() > 15) return ReadResult::kError;
    for (char c : hex) {
      int digit = (c >= '0' && c <= '9')   ? c - '0'
                  : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                  : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                           : -1;
      if (digit < 0) return ReadResult::kError;
      size = size * 16 + static_cast<std::uint64_t>(digit);
    }
    if (size == 0) {
      // Trailer fields, then the final blank line.
      for (;;) {
        std::string trailer;
        if (!in.ReadLine(kMaxLine, &trailer)) return ReadResult::kError;
        out->append(trailer);
        if (trailer == "\r\n") return ReadResult::kOk;
      }
    }
    if (out->size() - start + size > limit) return ReadResult::kError;
    if (!in.ReadExactly(static_cast<std::size_t>(size) + 2, out)) return ReadResult::kError;
    if (!EndsWith(*out, "\r\n")) return ReadResult::kError;
  }
}

bool WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

}  // namespace example
}  // namespace saferetry

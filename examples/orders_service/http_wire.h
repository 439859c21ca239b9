// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Just enough HTTP/1.1 to find where a message ends on a socket: heads are
// parsed, bodies are framed by Content-Length or chunked encoding (kept
// encoded, byte for byte) or, for responses, by the connection closing. Used
// by the fault proxy, which must know when a request has fully arrived and
// when a response is complete before deciding what to do with it.

#ifndef SAFERETRY_EXAMPLES_ORDERS_SERVICE_HTTP_WIRE_H_
#define SAFERETRY_EXAMPLES_ORDERS_SERVICE_HTTP_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace saferetry {
namespace example {

/// A socket with a read buffer. Not thread-safe; does not own the fd.
class WireReader {
 public:
  explicit WireReader(int fd) : fd_(fd) {}
  /// Takes up to `n` buffered-or-received bytes into `out`; false on EOF or
  /// error with nothing taken.
  bool ReadExactly(std::size_t n, std::string* out);
  /// Reads through the next CRLF (included in `out`); false on EOF, error,
  /// or a line longer than `limit`.
  bool ReadLine(std::size_t limit, std::string* out);
  /// Everything until the peer closes.
  bool ReadToEof(std::size_t limit, std::string* out);
  /// True when received bytes are waiting to be read.
  bool has_buffered() const { return !buffer_.empty(); }

 private:
  bool Fill();
  int fd_;
  std::string buffer_;
  bool eof_ = false;
};

/// A parsed message head.
struct HttpHead {
  /// "POST /orders HTTP/1.1" or "HTTP/1.1 201 Created".
  std::string start_line;
  std::vector<std::pair<std::string, std::string>> headers;

  /// The first value of `name` (case-insensitive), or "".
  std::string Header(std::string_view name) const;
  bool Has(std::string_view name) const;
  /// True when the comma-separated `name` header lists `token`
  /// (case-insensitive), e.g. Connection: close.
  bool HasToken(std::string_view name, std::string_view token) const;
  /// Removes every `name` header.
  void Remove(std::string_view name);
  /// Start line, headers, blank line.
  std::string Serialize() const;

  /// Request line parts ("" when malformed).
  std::string Method() const;
  std::string Target() const;
  /// Response status code (0 when malformed).
  int StatusCode() const;
};

enum class ReadResult {
  kOk,
  /// The peer closed before the first byte of the message: a clean end.
  kClosed,
  /// EOF in the middle, a reset, a malformed or oversized message.
  kError,
};

/// Reads a head (through the blank line) of at most 64 KiB.
ReadResult ReadHead(WireReader& in, HttpHead* head);

/// How a body is delimited.
struct BodyFraming {
  enum Kind { kNone, kLength, kChunked, kUntilClose };
  Kind kind = kNone;
  std::uint64_t length = 0;
};

/// Requests: chunked, Content-Length, or no body.
BodyFraming RequestFraming(const HttpHead& request);
/// Responses: none for HEAD requests, 1xx, 204 and 304; then chunked,
/// Content-Length, or until the connection closes.
BodyFraming ResponseFraming(const HttpHead& response, std::string_view request_method);

/// Reads a body framed as `framing`, appending the raw (still encoded)
/// bytes, trailers included, to `out`. At most `limit` bytes.
ReadResult ReadBody(WireReader& in, const BodyFraming& framing, std::size_t limit,
                    std::string* out);

/// Writes all of `data` (MSG_NOSIGNAL); false on error.
bool WriteAll(int fd, std::string_view data);

}  // namespace example
}  // namespace saferetry

#endif  // SAFERETRY_EXAMPLES_ORDERS_SERVICE_HTTP_WIRE_H_

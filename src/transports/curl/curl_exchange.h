// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// One exchange on a libcurl easy handle as its callbacks see it: the request
// body handed out, the resend guard, the response's status line, headers and
// body as they arrive, and the evidence the transport turns into a delivery.

#ifndef SAFERETRY_SRC_CURL_CURL_EXCHANGE_H_
#define SAFERETRY_SRC_CURL_CURL_EXCHANGE_H_

#include <curl/curl.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "saferetry/cancellation.h"
#include "saferetry/request.h"

namespace saferetry {
namespace internal {

// Everything the callbacks of one curl_easy_perform read or write. Lives in
// the pooled handle, reset before each perform.
struct Exchange {
  // Ordered so that no field pads the next (112 bytes).
  // Request side.
  const std::string* body = nullptr;
  std::size_t body_offset = 0;
  const CancellationToken* cancellation = nullptr;
  std::size_t max_body = 0;

  // Evidence.
  std::int16_t prereq_calls = 0;  // Requests curl started on a connection (saturates).

  // Response side.
  std::int16_t status_code = 0;

  // When the whole request was written, in microseconds of libcurl's clock
  // from the transfer's start (`request_written`); it saturates after 71
  // minutes.
  std::uint32_t written_us = 0;

  bool unsafe = false;           // Request side: not safe to repeat; libcurl must not resend it.
  bool sends_body = false;       // Request side: a body follows the headers.
  bool request_written = false;  // Headers and body all handed to the connection.
  bool resend_blocked = false;   // The pre-request guard refused a resend.
  bool cancelled = false;        // The xferinfo callback aborted.
  bool any_response_byte = false;
  bool final_headers_done = false;  // Blank line after a non-1xx status.
  bool truncated = false;           // Response side: the body was cut at max_body.

  Headers headers;
  std::string response_body;
  std::uint64_t expected_length = 0;  // Content-Length, 0 = unknown.

  void Reset(const std::string* request_body, bool is_unsafe, bool with_body,
             const CancellationToken* token, std::size_t cap) {
    body = request_body;
    body_offset = 0;
    unsafe = is_unsafe;
    sends_body = with_body;
    written_us = 0;
    request_written = false;
    cancellation = token;
    max_body = cap;
    prereq_calls = 0;
    resend_blocked = false;
    cancelled = false;
    any_response_byte = false;
    final_headers_done = false;
    status_code = 0;
    headers.clear();
    response_body.clear();
    truncated = false;
    expected_length = 0;
  }
};

// The callbacks; each takes the handle's `Exchange` as its user pointer.
extern "C" std::size_t OnHeader(char* data, std::size_t size, std::size_t n, void* userp);
extern "C" std::size_t OnBody(char* data, std::size_t size, std::size_t n, void* userp);
extern "C" std::size_t OnRead(char* buffer, std::size_t size, std::size_t n, void* userp);
extern "C" int OnSeek(void* userp, curl_off_t offset, int origin);
extern "C" int OnPrereq(void* userp, char*, char*, int, int);

// Moves the final response out of `ex`, leaving `ex` empty.
Response TakeResponse(Exchange& ex);

}  // namespace internal
}  // namespace saferetry

#endif  // SAFERETRY_SRC_CURL_CURL_EXCHANGE_H_

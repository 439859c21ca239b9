// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Request and header validation. Input lines: method, URL, then headers as
// "name:value"; a line "--" ends the headers and the rest is the body.
//
// Properties: no crash; a request that validates has only valid headers
// (none with CR, LF or NUL in its value); every error names a field.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "absl/strings/match.h"
#include "saferetry/request.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto next_line = [&in]() {
    const std::size_t nl = in.find('\n');
    const std::string_view line = in.substr(0, nl);
    in = nl == std::string_view::npos ? std::string_view() : in.substr(nl + 1);
    return line;
  };
  saferetry::Request request;
  request.method = std::string(next_line());
  request.url = std::string(next_line());
  while (!in.empty()) {
    const std::string_view line = next_line();
    if (line == "--") break;
    const std::size_t colon = line.find(':');
    request.headers.emplace_back(
        std::string(line.substr(0, colon)),
        colon == std::string_view::npos ? std::string() : std::string(line.substr(colon + 1)));
  }
  request.body = std::string(in);

  const absl::Status s = saferetry::ValidateRequest(request);
  if (s.ok()) {
    for (const saferetry::Header& h : request.headers) {
      if (!saferetry::ValidateHeader(h, "h").ok()) std::abort();
      if (h.second.find_first_of(std::string_view("\r\n\0", 3)) != std::string::npos) std::abort();
    }
  } else if (!absl::StartsWith(s.message(), "request.")) {
    std::abort();
  }
  for (const saferetry::Header& h : request.headers) {
    const absl::Status hs = saferetry::ValidateHeader(h, "headers[0]");
    if (!hs.ok() && !absl::StartsWith(hs.message(), "headers[0]")) std::abort();
    (void)saferetry::FindHeader(request.headers, h.first);
  }
  (void)saferetry::IsSafeMethod(request.method);
  (void)saferetry::IsIdempotent(request);
  return 0;
}

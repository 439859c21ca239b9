// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Status-URL templates. Input: the template, '\n', the key.
//
// Properties: no crash; percent-encoding yields only unreserved characters
// and %XX escapes; expanding a template without "{key}" changes nothing; a
// template that validates builds a GET request.

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "saferetry/status_query.h"

namespace {

bool Unreserved(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_' ||
         c == '~';
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const std::size_t nl = in.find('\n');
  const std::string_view url_template = in.substr(0, nl);
  const std::string_view key = nl == std::string_view::npos ? "" : in.substr(nl + 1);

  const std::string encoded = saferetry::PercentEncode(key);
  for (std::size_t i = 0; i < encoded.size(); ++i) {
    if (encoded[i] == '%') {
      if (i + 2 >= encoded.size() || !std::isxdigit(static_cast<unsigned char>(encoded[i + 1])) ||
          !std::isxdigit(static_cast<unsigned char>(encoded[i + 2]))) {
        std::abort();
      }
      i += 2;
    } else if (!Unreserved(encoded[i])) {
      std::abort();
    }
  }

  const std::string expanded = saferetry::ExpandKeyTemplate(url_template, key);
  if (url_template.find("{key}") == std::string_view::npos && expanded != url_template) {
    std::abort();
  }

  saferetry::StatusQuery query;
  query.url_template = std::string(url_template);
  if (saferetry::ValidateStatusQuery(query).ok()) {
    saferetry::Request original{"POST",
                                "http://127.0.0.1:8080/orders",
                                {{"Content-Type", "application/json"}, {"Accept", "*/*"}},
                                "{}",
                                saferetry::Idempotency::kFromMethod};
    const saferetry::Request get = saferetry::BuildStatusQueryRequest(query, original, key);
    if (get.method != "GET" || !get.body.empty()) std::abort();
    for (const saferetry::Header& h : get.headers) {
      if (saferetry::DescribesBody(h.first)) std::abort();
    }
  }
  return 0;
}

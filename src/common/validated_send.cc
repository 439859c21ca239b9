// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "common/validated_send.h"

#include "absl/strings/str_cat.h"

namespace saferetry {
namespace internal {
namespace {

struct Mark {
  const Request* request = nullptr;
  const HeaderRef* extra = nullptr;
  std::size_t count = 0;
};
thread_local Mark t_mark;

}  // namespace

ValidatedSend::ValidatedSend(const Request& request, HeaderRefs extra)
    : previous_request_(t_mark.request),
      previous_extra_(t_mark.extra),
      previous_count_(t_mark.count) {
  t_mark = {&request, extra.data(), extra.size()};
}

ValidatedSend::~ValidatedSend() { t_mark = {previous_request_, previous_extra_, previous_count_}; }

bool ValidatedSend::Covers(const Request& request, HeaderRefs extra) {
  const Mark& m = t_mark;
  return m.request == &request && m.extra == extra.data() && m.count == extra.size();
}

absl::Status CheckSend(const Request& request, HeaderRefs extra) {
  if (ValidatedSend::Covers(request, extra)) return absl::OkStatus();
  if (absl::Status s = ValidateRequest(request); !s.ok()) return s;
  for (std::size_t i = 0; i < extra.size(); ++i) {
    // The indexed field name is built only for the error message, keeping
    // the success path free of allocations.
    if (!ValidateHeader(extra[i].name, extra[i].value, "extra_headers").ok()) {
      return ValidateHeader(extra[i].name, extra[i].value, absl::StrCat("extra_headers[", i, "]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace saferetry

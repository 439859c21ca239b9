// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "common/validated_send.h"

#include "absl/strings/str_cat.h"

namespace saferetry {
namespace internal {

absl::Status CheckSend(const Request& request, HeaderRefs extra) {
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

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// JSON policy loading. Input: a policy document or a gRPC service config.
//
// Properties: no crash, no exception; an accepted policy dumps to a document
// that loads back to an equal policy, and converts to options a client
// accepts.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "saferetry/config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<saferetry::Policy> policy = saferetry::LoadPolicy(in);
  if (!policy.ok()) {
    if (policy.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  const absl::StatusOr<saferetry::Policy> again =
      saferetry::LoadPolicy(saferetry::DumpPolicy(*policy));
  if (!again.ok() || *again != *policy) std::abort();
  // A policy the reader accepted builds.
  if (!saferetry::ToRetryPolicy(*policy).ok()) std::abort();
  saferetry::ClientOptions options;
  if (!saferetry::ApplyToClientOptions(*policy, &options).ok()) std::abort();
  return 0;
}

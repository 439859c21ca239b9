// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Not API. The call reads the server's hints and the downstream request id
// (a header the policy names) from the same response headers: one pass finds
// both.
#ifndef SAFERETRY_SRC_CORE_SERVER_HINTS_INTERNAL_H_
#define SAFERETRY_SRC_CORE_SERVER_HINTS_INTERNAL_H_

#include <optional>
#include <string_view>

#include "saferetry/clock.h"
#include "saferetry/request.h"
#include "saferetry/server_hints.h"

namespace saferetry {
namespace internal {

/// `ExtractServerHints(headers, clock, options)`, written into `hints` (every
/// field) rather than returned: the call's evidence is filled where it is, and
/// read back field by field. In the same pass, the value of the first header
/// named `also` (any case; none when `also` is empty) into `also_value`.
void ExtractServerHintsInto(const Headers& headers, Clock& clock, const HintOptions& options,
                            ServerHints& hints, std::string_view also,
                            std::optional<std::string_view>& also_value);

}  // namespace internal
}  // namespace saferetry

#endif  // SAFERETRY_SRC_CORE_SERVER_HINTS_INTERNAL_H_

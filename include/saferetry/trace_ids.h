// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The W3C Trace Context names and ids that a request and a call's evidence
// carry: the two header names, and the trace and span ids in binary. The
// rest of trace context (parsing, formatting, the per-attempt tracer) is in
// saferetry/trace_context.h, which includes this header.

#ifndef SAFERETRY_TRACE_IDS_H_
#define SAFERETRY_TRACE_IDS_H_

#include <array>
#include <cstdint>
#include <string_view>

namespace saferetry {

/// The header names (lower case, as the specification writes them; header
/// names are matched case-insensitively).
inline constexpr std::string_view kTraceParentHeader = "traceparent";
inline constexpr std::string_view kTraceStateHeader = "tracestate";

/// 16 bytes; all zero means "none".
using TraceId = std::array<std::uint8_t, 16>;
/// 8 bytes; all zero means "none".
using SpanId = std::array<std::uint8_t, 8>;

}  // namespace saferetry

#endif  // SAFERETRY_TRACE_IDS_H_

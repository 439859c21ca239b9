// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Not API. A call validates its request once, when it starts
// (`ValidateRequest`), and builds the headers it adds from a validated policy
// and key. saferetry's own transports say so by implementing
// `PrevalidatedSender` (blocking) or `PrevalidatedStarter` (event loop): a
// driver finds out once, when it is made, whether its transport is one, and
// then sends its call's own request through it, unchecked. Everything else
// (a transport called directly, a status query, a resolve's rebuilt request)
// goes through `Transport::Send` / `AsyncTransport::Start`, which check
// (`CheckSend`).
#ifndef SAFERETRY_SRC_COMMON_VALIDATED_SEND_H_
#define SAFERETRY_SRC_COMMON_VALIDATED_SEND_H_

#include "absl/status/status.h"
#include "saferetry/async_seams.h"
#include "saferetry/request.h"
#include "saferetry/transport.h"

namespace saferetry {
namespace internal {

/// A blocking transport that can send a request its caller validated.
class PrevalidatedSender {
 public:
  /// `Transport::Send` without the check of `request` and
  /// `options.extra_headers`: the caller validated both.
  virtual TransportResult SendPrevalidated(const Request& request,
                                           const AttemptOptions& options) = 0;

 protected:
  ~PrevalidatedSender() = default;
};

/// An event-loop transport that can start a request its caller validated.
class PrevalidatedStarter {
 public:
  /// `AsyncTransport::Start` without the check of `request` and
  /// `options.extra_headers`: the caller validated both.
  virtual AsyncTransport::AttemptId StartPrevalidated(const Request& request,
                                                      const AttemptOptions& options,
                                                      AsyncTransport::Callback done) = 0;

 protected:
  ~PrevalidatedStarter() = default;
};

/// A transport's check of what it was asked to send: `ValidateRequest` and
/// each added header (errors name `extra_headers[i]`).
absl::Status CheckSend(const Request& request, HeaderRefs extra);

}  // namespace internal
}  // namespace saferetry

#endif  // SAFERETRY_SRC_COMMON_VALIDATED_SEND_H_

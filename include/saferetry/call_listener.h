// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The hooks a call reports to as it runs (`CallOptions::listener`): each
// attempt's start and end, each wait, the finish. saferetry's metrics
// (`MetricsListener`) and traces (`TraceRecorder`) are listeners; a service
// can add its own.

#ifndef SAFERETRY_CALL_LISTENER_H_
#define SAFERETRY_CALL_LISTENER_H_

#include "saferetry/clock.h"
#include "saferetry/result.h"

namespace saferetry {

/// Hooks called on the calling thread, in order. Must not throw. Default
/// implementations do nothing.
class CallListener {
 public:
  virtual ~CallListener() = default;
  /// An attempt (or status query) is about to be sent.
  virtual void OnAttemptStart(int /*number*/, bool /*is_status_query*/) {}
  /// An attempt (or status query) finished; `evidence` is classified.
  virtual void OnAttemptEnd(const AttemptEvidence& /*evidence*/) {}
  /// A wait was scheduled.
  virtual void OnWaitScheduled(Duration /*delay*/, bool /*from_server_hint*/) {}
  /// The call finished.
  virtual void OnFinish(const CallResult& /*result*/) {}
};

}  // namespace saferetry

#endif  // SAFERETRY_CALL_LISTENER_H_

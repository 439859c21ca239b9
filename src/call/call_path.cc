// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The blocking call's path as one translation unit: the call session, the
// call setup, the blocking driver and the state machine, compiled together
// so that the compiler sees every step a call takes. The four files stay
// the places to read and edit; they are built only through this one. See
// docs/adr/0029-the-call-path-as-one-unit.md.
//
// Under optimisation `Client::Execute` is flattened: everything it calls
// here is inlined into it, except the functions marked
// ABSL_ATTRIBUTE_NOINLINE, the paths a call takes only when it retries,
// queries, journals, traces or ends early. A new function on such a path is
// marked too, or it grows every call's code
// (docs/adr/0030-one-function-for-the-call-that-succeeds.md).
#include "call/call_session.cc"        // NOLINT(bugprone-suspicious-include)
#include "call/call_setup.cc"          // NOLINT(bugprone-suspicious-include)
#include "call/client.cc"              // NOLINT(bugprone-suspicious-include)
#include "core/call_state_machine.cc"  // NOLINT(bugprone-suspicious-include)

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The blocking call's path as one translation unit: the call session, the
// call setup, the blocking driver and the state machine. Compiled together
// (with GCC's inliner allowed larger functions: src/CMakeLists.txt), the
// steps each call takes once (the machine's start, the header stamps, the
// evidence, the finish) are inlined into the step that calls them. The
// four files stay the places to read and edit; they are built only through
// this one. See docs/adr/0029-the-call-path-as-one-unit.md.
#include "call/call_session.cc"        // NOLINT(bugprone-suspicious-include)
#include "call/call_setup.cc"          // NOLINT(bugprone-suspicious-include)
#include "call/client.cc"              // NOLINT(bugprone-suspicious-include)
#include "core/call_state_machine.cc"  // NOLINT(bugprone-suspicious-include)

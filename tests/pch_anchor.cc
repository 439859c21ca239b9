// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The one source of `saferetry_test_pch`, the target that owns the tests'
// precompiled headers (tests/CMakeLists.txt); it has no code of its own.

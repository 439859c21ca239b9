// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// An intent journal in memory, for tests: the same semantics as the SQLite
// journal (the same normalisation, transitions, claims and retention — the
// conformance suite in tests/journal/ runs against both), nothing durable,
// one process only.
//
// @code
//   auto clock = std::make_shared<saferetry::testkit::FakeClock>();
//   saferetry::JournalOptions options;
//   options.clock = clock;
//   auto journal = saferetry::testkit::MakeMemoryJournal(options).value();
// @endcode

#ifndef SAFERETRY_TESTING_MEMORY_JOURNAL_H_
#define SAFERETRY_TESTING_MEMORY_JOURNAL_H_

#include <memory>

#include "absl/status/statusor.h"
#include "saferetry/journal.h"

namespace saferetry {
namespace testkit {

/// A new, empty, thread-safe in-memory journal. Errors: kInvalidArgument
/// naming the option (claim_grace) as `OpenSqliteJournal` does.
absl::StatusOr<std::shared_ptr<IntentJournal>> MakeMemoryJournal(
    const JournalOptions& options = {});

}  // namespace testkit
}  // namespace saferetry

#endif  // SAFERETRY_TESTING_MEMORY_JOURNAL_H_

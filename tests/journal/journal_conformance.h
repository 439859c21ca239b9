// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// One conformance suite for every intent journal (journal_conformance.cc):
// the SQLite journal (a fresh file per test), the in-memory one
// (journal_conformance_test.cc) and the PostgreSQL one (a schema of its own
// per test, postgres_journal_test.cc). A FakeClock drives created times,
// deadlines and claim expiry, so every expectation is exact.

#ifndef SAFERETRY_TESTS_JOURNAL_JOURNAL_CONFORMANCE_H_
#define SAFERETRY_TESTS_JOURNAL_JOURNAL_CONFORMANCE_H_

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "journal_test_util.h"
#include "saferetry/journal.h"
#include "saferetry/testing/fake_clock.h"

namespace saferetry {
namespace journal_test {

/// How to open one kind of journal.
struct JournalFactory {
  std::string name;
  /// Opens a journal on the test's storage: the same `dir` means the same
  /// storage (a second process on the same file or database), so a test may
  /// open several.
  std::function<absl::StatusOr<std::shared_ptr<IntentJournal>>(const JournalOptions&,
                                                               const std::string& dir)>
      open;
  /// Whether two journals opened on the same `dir` share what they store
  /// (SQLite, PostgreSQL: yes; memory: no, each is its own).
  bool shared_storage = true;
  /// Non-empty: why the tests are skipped (no database).
  std::function<std::string()> skip_reason;
  /// Run after each test with its `dir` (may be empty).
  std::function<void(const std::string& dir)> cleanup;
};

// gtest prints the parameter in test listings: the journal's name, not its bytes.
inline void PrintTo(const JournalFactory& factory, std::ostream* os) { *os << factory.name; }

inline std::string FactoryName(const ::testing::TestParamInfo<JournalFactory>& info) {
  return info.param.name;
}

class JournalConformance : public ::testing::TestWithParam<JournalFactory> {
 protected:
  void SetUp() override;
  void TearDown() override;

  std::shared_ptr<IntentJournal> Open(const JournalOptions& options);
  // An intent created now with a deadline `deadline` from now.
  Intent NewIntent(const std::string& key, const std::string& body = "{\"sku\":1}",
                   std::chrono::milliseconds deadline = std::chrono::seconds(10));
  Intent MustGet(const std::string& key);

  TempDir dir_;
  std::shared_ptr<testkit::FakeClock> clock_;
  JournalOptions options_;
  std::shared_ptr<IntentJournal> journal_;
  bool skipped_ = false;
};

}  // namespace journal_test
}  // namespace saferetry

#endif  // SAFERETRY_TESTS_JOURNAL_JOURNAL_CONFORMANCE_H_

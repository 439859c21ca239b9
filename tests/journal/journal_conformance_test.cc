// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The journal conformance suite (journal_conformance.cc) on the SQLite
// journal (a fresh file per test) and the in-memory one, and the pure helpers.

#include "journal_conformance.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "saferetry/journal.h"
#include "saferetry/sqlite_journal.h"
#include "saferetry/testing/memory_journal.h"

namespace saferetry {
namespace {

using journal_test::JournalConformance;
using journal_test::JournalFactory;

INSTANTIATE_TEST_SUITE_P(
    Journals, JournalConformance,
    ::testing::Values(JournalFactory{"Sqlite",
                                     [](const JournalOptions& options, const std::string& dir)
                                         -> absl::StatusOr<std::shared_ptr<IntentJournal>> {
                                       SqliteJournalOptions o;
                                       static_cast<JournalOptions&>(o) = options;
                                       o.path = dir + "/journal.db";
                                       return OpenSqliteJournal(o);
                                     },
                                     true, nullptr, nullptr},
                      JournalFactory{"Memory",
                                     [](const JournalOptions& options, const std::string&)
                                         -> absl::StatusOr<std::shared_ptr<IntentJournal>> {
                                       return testkit::MakeMemoryJournal(options);
                                     },
                                     false, nullptr, nullptr}),
    journal_test::FactoryName);

TEST(BodyDigest, IsSha256Hex) {
  EXPECT_EQ(BodyDigest(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(BodyDigest("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(BodyDigest("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(BodyDigest(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(IntentStateName, RoundTrips) {
  for (IntentState s : {IntentState::kPending, IntentState::kSent, IntentState::kSucceeded,
                        IntentState::kFailed, IntentState::kUnknown}) {
    EXPECT_EQ(ParseIntentState(IntentStateName(s)), s);
  }
  EXPECT_EQ(ParseIntentState("pending"), std::nullopt);
  EXPECT_TRUE(IsResolved(IntentState::kFailed));
  EXPECT_FALSE(IsResolved(IntentState::kUnknown));
}

}  // namespace
}  // namespace saferetry

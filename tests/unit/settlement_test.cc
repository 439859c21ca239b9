// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The one rule for "definite" (saferetry/settlement.h) against its table in
// docs/outcomes.md: every row of the table is read and checked against
// ProofOfAnswer / ProofOfStatusAnswer, so the documentation and the code
// cannot drift apart. docs/server-contract.md must hold the same table.

#include "saferetry/settlement.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "saferetry/server_hints.h"

namespace saferetry {
namespace {

constexpr char kBegin[] = "<!-- rule-1 table";
constexpr char kEnd[] = "<!-- end of rule-1 table -->";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The table's text, markers included; empty when absent.
std::string TableOf(const std::string& doc) {
  const std::size_t begin = doc.find(kBegin);
  const std::size_t end = doc.find(kEnd);
  if (begin == std::string::npos || end == std::string::npos || end < begin) return "";
  return doc.substr(begin, end + sizeof(kEnd) - 1 - begin);
}

struct Row {
  bool status_query = false;
  std::optional<int> status;
  std::string key_state;  // "" for "-"
  bool replayed = false;
  std::string proves;
  std::string text;
};

std::vector<Row> ParseRows(const std::string& table) {
  std::vector<Row> rows;
  for (absl::string_view line : absl::StrSplit(table, '\n')) {
    if (!absl::StartsWith(line, "| request") && !absl::StartsWith(line, "| status query")) continue;
    std::vector<std::string> cells;
    for (absl::string_view cell : absl::StrSplit(line, '|')) {
      cells.emplace_back(absl::StripAsciiWhitespace(cell));
    }
    // "", answer to, status, key state, replayed, proves, "".
    if (cells.size() != 7) {
      ADD_FAILURE() << "bad row: " << line;
      continue;
    }
    Row r;
    r.text = std::string(line);
    r.status_query = cells[1] == "status query";
    int code = 0;
    if (absl::SimpleAtoi(cells[2], &code)) r.status = code;
    r.key_state = cells[3] == "-" ? "" : cells[3];
    r.replayed = cells[4] == "true";
    r.proves = cells[5];
    rows.push_back(r);
  }
  return rows;
}

Proof ProofNamed(const std::string& name) {
  if (name == "took effect") return Proof::kTookEffect;
  if (name == "no effect") return Proof::kNoEffect;
  EXPECT_EQ(name, "nothing");
  return Proof::kNothing;
}

TransportResult ResultOf(const Row& row) {
  TransportResult tr;
  if (!row.status.has_value()) {
    tr.delivery = Delivery::kMaybeDelivered;
    tr.status = absl::UnavailableError("connection reset");
    return tr;
  }
  tr.delivery = Delivery::kResponseReceived;
  Response resp;
  resp.status_code = *row.status;
  if (!row.key_state.empty()) resp.headers.emplace_back("Idempotency-Key-State", row.key_state);
  if (row.replayed) resp.headers.emplace_back("Idempotent-Replayed", "true");
  tr.response = resp;
  return tr;
}

TEST(SettlementTest, EveryRowOfTheDocumentedTableHoldsInTheCode) {
  const std::string doc = ReadFile(std::string(SAFERETRY_SOURCE_DIR) + "/docs/outcomes.md");
  const std::string table = TableOf(doc);
  ASSERT_FALSE(table.empty()) << "docs/outcomes.md has no rule-1 table";
  const std::vector<Row> rows = ParseRows(table);
  ASSERT_GE(rows.size(), 20u);
  int requests = 0, queries = 0;
  for (const Row& row : rows) {
    SCOPED_TRACE(row.text);
    const TransportResult tr = ResultOf(row);
    if (row.status_query) {
      ++queries;
      EXPECT_EQ(ProofOfStatusAnswer(MapStatusAnswer(tr)), ProofNamed(row.proves));
    } else {
      ++requests;
      AttemptEvidence ev;
      ev.delivery = tr.delivery;
      ev.transport_status = tr.status;
      if (tr.response.has_value()) {
        ev.http_status = tr.response->status_code;
        ev.hints = ExtractServerHints(tr.response->headers, WallTime{}, HintOptions{});
      }
      EXPECT_EQ(ProofOfAnswer(ev), ProofNamed(row.proves));
    }
  }
  EXPECT_GT(requests, 0);
  EXPECT_GT(queries, 0);
}

TEST(SettlementTest, TheServerContractHoldsTheSameTable) {
  const std::string outcomes =
      TableOf(ReadFile(std::string(SAFERETRY_SOURCE_DIR) + "/docs/outcomes.md"));
  const std::string contract =
      TableOf(ReadFile(std::string(SAFERETRY_SOURCE_DIR) + "/docs/server-contract.md"));
  ASSERT_FALSE(outcomes.empty());
  EXPECT_EQ(contract, outcomes);
}

// Beyond the table's examples: every 4xx but 409, 410, 422, 429 is definite
// when marked and never when not; no 5xx, 1xx or 3xx ever is.
TEST(SettlementTest, EveryStatusFollowsTheRule) {
  for (int code = 100; code < 600; ++code) {
    SCOPED_TRACE(code);
    for (int marks = 0; marks < 4; ++marks) {
      AttemptEvidence ev;
      ev.delivery = Delivery::kResponseReceived;
      ev.http_status = code;
      ev.hints.replayed = (marks & 1) != 0;
      ev.hints.key_state = (marks & 2) != 0 ? KeyState::kCompleted : KeyState::kNone;
      const bool marked = marks != 0;
      Proof want = Proof::kNothing;
      if (code >= 200 && code < 300) {
        want = Proof::kTookEffect;
      } else if (code >= 400 && code < 500 && code != 409 && code != 410 && code != 422 &&
                 code != 429 && marked) {
        want = Proof::kNoEffect;
      }
      EXPECT_EQ(ProofOfAnswer(ev), want);
    }
  }
}

TEST(SettlementTest, ExpiredAndFencedAnswers) {
  AttemptEvidence ev;
  ev.http_status = 410;
  EXPECT_TRUE(IsExpiredKeyAnswer(ev));
  EXPECT_FALSE(IsFencedAnswer(ev));
  ev.hints.key_state = KeyState::kExpired;
  EXPECT_TRUE(IsExpiredKeyAnswer(ev));
  ev.hints.key_state = KeyState::kFenced;
  EXPECT_FALSE(IsExpiredKeyAnswer(ev));
  EXPECT_TRUE(IsFencedAnswer(ev));
  ev.http_status = 404;
  EXPECT_FALSE(IsFencedAnswer(ev));
  EXPECT_FALSE(IsExpiredKeyAnswer(ev));
}

}  // namespace
}  // namespace saferetry

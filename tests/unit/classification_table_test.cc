// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// docs/outcomes.md's "Status by status" table is the classifier's contract:
// every row is read and checked against `DefaultClassifier`, for a keyed
// POST, a keyless POST and an answer marked `Idempotency-Key-State:
// rejected`. A change to either without the other fails here.

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "saferetry/classifier.h"
#include "saferetry/result.h"

namespace saferetry {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Row {
  int status = 0;
  std::string keyed, keyless, rejected;
};

std::string Unquote(absl::string_view cell) {
  cell = absl::StripAsciiWhitespace(cell);
  absl::ConsumePrefix(&cell, "`");
  absl::ConsumeSuffix(&cell, "`");
  return std::string(cell);
}

// The rows of the table that follows the "### Status by status" heading.
std::vector<Row> StatusTable() {
  const std::string doc = ReadFile(std::string(SAFERETRY_SOURCE_DIR) + "/docs/outcomes.md");
  std::vector<Row> rows;
  const std::size_t begin = doc.find("### Status by status");
  if (begin == std::string::npos) return rows;
  const std::size_t header = doc.find("| status | keyed POST |", begin);
  if (header == std::string::npos) return rows;
  const std::size_t end = doc.find("\n\n", header);
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(doc).substr(header, end - header), '\n')) {
    const std::vector<absl::string_view> cells = absl::StrSplit(line, '|');
    // "", status, keyed, keyless, rejected, why, ""
    if (cells.size() < 6) continue;
    const std::string status = Unquote(cells[1]);
    if (status.size() != 3 || status.find_first_not_of("0123456789") != std::string::npos) continue;
    rows.push_back({std::stoi(status), Unquote(cells[2]), Unquote(cells[3]), Unquote(cells[4])});
  }
  return rows;
}

AttemptEvidence Answered(int status, KeyState state) {
  AttemptEvidence e;
  e.delivery = Delivery::kResponseReceived;
  e.http_status = status;
  e.hints.key_state = state;
  return e;
}

std::string ClassOf(int status, bool keyed, KeyState state) {
  RequestTraits post;
  post.keyed = keyed;
  return std::string(
      AttemptClassName(DefaultClassifier().Classify(Answered(status, state), post).cls));
}

TEST(ClassificationTable, EveryRowMatchesTheClassifier) {
  const std::vector<Row> rows = StatusTable();
  ASSERT_GE(rows.size(), 30u) << "docs/outcomes.md: the status table is missing or short";
  for (const Row& row : rows) {
    SCOPED_TRACE(row.status);
    EXPECT_EQ(ClassOf(row.status, true, KeyState::kNone), row.keyed);
    EXPECT_EQ(ClassOf(row.status, false, KeyState::kNone), row.keyless);
    EXPECT_EQ(ClassOf(row.status, true, KeyState::kRejected), row.rejected);
  }
}

// The table names the statuses this project decided one by one: 408, 421,
// 425, 429, 503 and the 5xx that CDNs and meshes invent.
TEST(ClassificationTable, NamesTheStatusesDecidedOneByOne) {
  std::vector<int> listed;
  for (const Row& row : StatusTable()) listed.push_back(row.status);
  for (int status :
       {408, 421, 425, 429, 500, 502, 503, 504, 520, 521, 522, 523, 524, 529, 598, 599}) {
    EXPECT_NE(std::find(listed.begin(), listed.end(), status), listed.end()) << status;
  }
}

// Statuses the table does not list fall in their range's row.
TEST(ClassificationTable, UnlistedStatusesFollowTheirRange) {
  for (int status = 100; status <= 599; ++status) {
    const std::string keyless = ClassOf(status, false, KeyState::kNone);
    if (status >= 200 && status < 300) {
      EXPECT_EQ(keyless, "success") << status;
    } else if (status >= 400 && status < 500) {
      EXPECT_TRUE(keyless == "permanent" || keyless == "retryable_transient" ||
                  keyless == "precondition_failed")
          << status;
    } else if (status != 503) {
      EXPECT_EQ(keyless, "ambiguous") << status;
    }
  }
}

}  // namespace
}  // namespace saferetry

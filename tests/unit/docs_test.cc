// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The docs that list every stop reason list exactly the enum's: docs/cli.md
// (the list the summary's `stop_reason` field refers to) and the table of
// docs/outcomes.md (one row per `StopReason`).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "saferetry/result.h"

namespace saferetry {
namespace {

std::string ReadDoc(const std::string& name) {
  std::ifstream in(std::string(SAFERETRY_SOURCE_DIR) + "/docs/" + name);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::set<std::string> AllNames() {
  std::set<std::string> names;
  for (int i = 0; i < kStopReasonCount; ++i) {
    names.insert(std::string(StopReasonName(static_cast<StopReason>(i))));
  }
  return names;
}

// The backticked snake_case words of `text`.
std::set<std::string> Backticked(const std::string& text) {
  std::set<std::string> out;
  std::size_t pos = 0;
  while ((pos = text.find('`', pos)) != std::string::npos) {
    const std::size_t end = text.find('`', pos + 1);
    if (end == std::string::npos) break;
    const std::string word = text.substr(pos + 1, end - pos - 1);
    bool snake = !word.empty();
    for (char c : word) snake = snake && ((c >= 'a' && c <= 'z') || c == '_');
    if (snake) out.insert(word);
    pos = end + 1;
  }
  return out;
}

TEST(DocsTest, CliListsEveryStopReason) {
  const std::string doc = ReadDoc("cli.md");
  const std::size_t begin = doc.find("Stop reasons (`stop_reason`), all of them:");
  ASSERT_NE(begin, std::string::npos);
  const std::size_t end = doc.find("\n\n", begin);
  const std::set<std::string> listed = Backticked(doc.substr(begin, end - begin));
  std::set<std::string> expected = AllNames();
  expected.insert("stop_reason");  // the field's own name in the heading
  EXPECT_EQ(listed, expected);
}

TEST(DocsTest, OutcomesHasARowForEveryStopReason) {
  const std::string doc = ReadDoc("outcomes.md");
  for (int i = 0; i < kStopReasonCount; ++i) {
    const std::string name(StopReasonName(static_cast<StopReason>(i)));
    // The row names the enumerator: kSuccess, kPermanentError, ...
    std::string enumerator = "k";
    bool upper = true;
    for (char c : name) {
      if (c == '_') {
        upper = true;
        continue;
      }
      enumerator.push_back(upper ? static_cast<char>(c - 'a' + 'A') : c);
      upper = false;
    }
    EXPECT_NE(doc.find("| `" + enumerator + "` |"), std::string::npos) << enumerator;
  }
}

}  // namespace
}  // namespace saferetry

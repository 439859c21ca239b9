// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Nothing in the library reads the environment behind the user's back: no
// source under src/ or include/ calls getenv, secure_getenv or reads
// environ. (A test switch once lived there; the crash test now reaches its
// crash points through wrappers of its own.)

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::vector<std::string> Offenders(const std::filesystem::path& root) {
  std::vector<std::string> out;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
    if (!entry.is_regular_file()) continue;
    const std::string ext = entry.path().extension().string();
    if (ext != ".cc" && ext != ".h") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    const std::string s = text.str();
    for (const char* word : {"getenv", "secure_getenv", "environ;", "environ)", "environ,"}) {
      if (s.find(word) != std::string::npos) {
        out.push_back(entry.path().string() + ": " + word);
      }
    }
  }
  return out;
}

TEST(NoEnvironmentTest, TheLibraryReadsNoEnvironmentVariable) {
  const std::filesystem::path root(SAFERETRY_SOURCE_DIR);
  ASSERT_TRUE(std::filesystem::exists(root / "src" / "call" / "call_setup.cc"));
  for (const char* dir : {"src", "include"}) {
    const std::vector<std::string> found = Offenders(root / dir);
    EXPECT_TRUE(found.empty()) << [&] {
      std::string all;
      for (const auto& f : found) all += f + "\n";
      return all;
    }();
  }
}

}  // namespace

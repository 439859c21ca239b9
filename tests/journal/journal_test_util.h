// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Helpers shared by the journal tests: a private temporary directory and
// whole-file reads.

#ifndef SAFERETRY_TESTS_JOURNAL_JOURNAL_TEST_UTIL_H_
#define SAFERETRY_TESTS_JOURNAL_JOURNAL_TEST_UTIL_H_

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace saferetry {
namespace journal_test {

/// A fresh directory under $TMPDIR (or /tmp), removed with its contents.
class TempDir {
 public:
  TempDir() {
    const char* base = getenv("TMPDIR");
    std::string pattern =
        std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/saferetry-journal-XXXXXX";
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/// The bytes of `path`; empty when it cannot be read.
inline std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace journal_test
}  // namespace saferetry

#endif  // SAFERETRY_TESTS_JOURNAL_JOURNAL_TEST_UTIL_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Where the postgres-labelled tests find their database: SAFERETRY_PG_DSN,
// else the file the CTest fixture `postgres` wrote (SAFERETRY_PG_DSN_FILE,
// set by tests/server/CMakeLists.txt; tests/server/pg_fixture.sh), else
// nothing — and then why (the fixture's skip file). SAFERETRY_REQUIRE_POSTGRES=1
// (CI) turns a missing database into a failure.

#ifndef SAFERETRY_TESTS_SERVER_PG_DSN_H_
#define SAFERETRY_TESTS_SERVER_PG_DSN_H_

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/str_split.h"

namespace saferetry {
namespace pg_test {

inline std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// The fixture's directory: where SAFERETRY_PG_DSN_FILE points.
inline std::string FixtureDir() {
  const char* file = std::getenv("SAFERETRY_PG_DSN_FILE");
  if (file == nullptr || *file == '\0') return "";
  std::string path(file);
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

/// The connection string, or "".
inline std::string Dsn() {
  const char* dsn = std::getenv("SAFERETRY_PG_DSN");
  if (dsn != nullptr && *dsn != '\0') return dsn;
  const char* file = std::getenv("SAFERETRY_PG_DSN_FILE");
  if (file == nullptr || *file == '\0') return "";
  return ReadFirstLine(file);
}

/// Why there is no database, for the skip message.
inline std::string SkipReason() {
  const std::string dir = FixtureDir();
  const std::string why = dir.empty() ? "" : ReadFirstLine(dir + "/skip");
  if (!why.empty()) return "PostgreSQL not available: " + why;
  return "PostgreSQL not configured: set SAFERETRY_PG_DSN (see tests/server/pg_cluster.sh), or run "
         "the tests through ctest, whose fixture starts a throwaway cluster";
}

inline bool Required() {
  const char* r = std::getenv("SAFERETRY_REQUIRE_POSTGRES");
  return r != nullptr && std::string(r) == "1";
}

// A libpq key=value string ("host=... port=... user=... dbname=...") as a
// postgresql:// URI (the form the CLI's `--journal` recognises); a URI is
// returned as it is.
inline std::string PostgresUri(const std::string& dsn) {
  if (dsn.rfind("postgres", 0) == 0) return dsn;
  std::map<std::string, std::string> kv;
  for (absl::string_view part : absl::StrSplit(dsn, ' ', absl::SkipEmpty())) {
    const std::size_t eq = part.find('=');
    if (eq != absl::string_view::npos) {
      kv[std::string(part.substr(0, eq))] = std::string(part.substr(eq + 1));
    }
  }
  std::string uri = "postgresql://";
  if (kv.count("user")) uri += kv["user"] + "@";
  uri += kv.count("host") ? kv["host"] : "localhost";
  if (kv.count("port")) uri += ":" + kv["port"];
  uri += "/" + (kv.count("dbname") ? kv["dbname"] : std::string());
  return uri;
}

}  // namespace pg_test
}  // namespace saferetry

#endif  // SAFERETRY_TESTS_SERVER_PG_DSN_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Uses the installed PostgreSQL journal component: the factory's checks name
// the option at fault, and an unreachable server is kUnavailable "dsn: ...".

#include <cstdio>
#include <string>

#include "saferetry/postgres_journal.h"

int main() {
  saferetry::PostgresJournalOptions options;
  auto missing = saferetry::OpenPostgresJournal(options);
  options.dsn = "host=127.0.0.1 port=1 dbname=none";
  options.connect_timeout = std::chrono::seconds(1);
  auto unreachable = saferetry::OpenPostgresJournal(options);
  std::printf("%s | %s\n", std::string(missing.status().message()).c_str(),
              std::string(unreachable.status().message()).c_str());
  return missing.status().code() == absl::StatusCode::kInvalidArgument &&
                 unreachable.status().code() == absl::StatusCode::kUnavailable &&
                 std::string(unreachable.status().message()).rfind("dsn: ", 0) == 0
             ? 0
             : 1;
}

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Uses the installed server components: a keyed write and its replay through
// the request helper on a SQLite store, and the PostgreSQL factory's checks.

#include <stdlib.h>

#include <cstdio>
#include <string>

#include "saferetry/server/handler.h"
#include "saferetry/server/postgres_store.h"
#include "saferetry/server/sqlite_store.h"

int main() {
  char dir[] = "/tmp/saferetry-consumer-XXXXXX";
  if (mkdtemp(dir) == nullptr) return 1;
  saferetry::server::SqliteOptions sqlite;
  sqlite.path = std::string(dir) + "/store.db";
  auto store = saferetry::server::OpenSqliteStore(sqlite, {});
  if (!store.ok()) return 1;
  saferetry::server::HandlerOptions options;
  options.operation = "create_thing";
  auto handler = saferetry::server::IdempotentHandler::Create(std::move(*store), options);
  if (!handler.ok()) return 1;
  saferetry::server::WriteRequest w;
  w.method = "POST";
  w.path = "/things";
  w.body = "{}";
  w.idempotency_key = "k-1";
  saferetry::server::Work work;
  work.effect =
      [](saferetry::server::Transaction&) -> absl::StatusOr<saferetry::server::StoredResponse> {
    return saferetry::server::StoredResponse{201, R"({"thing":1})"};
  };
  auto first = (*handler)->HandleWrite(w, work);
  auto again = (*handler)->HandleWrite(w, work);
  auto pg = saferetry::server::OpenPostgresStore({}, {});
  std::printf("%d %d %s\n", first.status, again.status,
              again.Header("Idempotent-Replayed").c_str());
  std::system((std::string("rm -rf ") + dir).c_str());
  return first.status == 201 && again.status == 201 &&
                 again.Header("Idempotent-Replayed") == "true" &&
                 pg.status().code() == absl::StatusCode::kInvalidArgument
             ? 0
             : 1;
}

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Test helper for journal_crash_test: makes `count` keyed order calls, one
// after another, through the SQLite intent journal against the orders
// service, and is killed somewhere along the way — by the test (a random
// SIGKILL) or by itself, through the call setup's test-only crash hooks
// (SAFERETRY_TEST_CRASH_AT / SAFERETRY_TEST_CRASH_CALL, see
// include/saferetry/internal/call_setup.h).
//
//   journal_crash_client JOURNAL BASE_URL KEY_PREFIX COUNT
//
// Call i uses the key KEY_PREFIX-i and the client reference KEY_PREFIX-i.
// Exit 0 after the last call, 3 on bad arguments or setup failure.

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "saferetry/client.h"
#include "saferetry/curl_transport.h"
#include "saferetry/sqlite_journal.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s JOURNAL BASE_URL KEY_PREFIX COUNT\n", argv[0]);
    return 3;
  }
  const std::string base = argv[2];
  const std::string prefix = argv[3];
  int count = 0;
  if (!absl::SimpleAtoi(argv[4], &count) || count < 1) return 3;

  saferetry::SqliteJournalOptions journal_options;
  journal_options.path = argv[1];
  journal_options.claim_grace = std::chrono::milliseconds(200);
  auto journal = saferetry::OpenSqliteJournal(journal_options);
  if (!journal.ok()) {
    std::fprintf(stderr, "journal: %s\n", journal.status().ToString().c_str());
    return 3;
  }
  auto transport = saferetry::MakeCurlTransport({});
  if (!transport.ok()) return 3;
  saferetry::ClientOptions options;
  options.transport = *std::move(transport);
  options.journal = *std::move(journal);
  auto client = saferetry::Client::Create(std::move(options));
  if (!client.ok()) return 3;

  for (int i = 0; i < count; ++i) {
    const std::string key = prefix + "-" + std::to_string(i);
    saferetry::Request order{"POST", base + "/orders", {{"Content-Type", "application/json"}},
                             R"({"sku":"sku-42","quantity":1,"client_reference":")" + key +
                                 R"("})"};
    saferetry::CallOptions call;
    call.idempotency_key = key;
    call.timeout = std::chrono::milliseconds(1500);
    call.status_query.url_template = base + "/orders/by-key/{key}";
    saferetry::CallResult r = (*client)->Execute(order, call);
    std::printf("%s %s\n", key.c_str(), std::string(saferetry::OutcomeName(r.outcome)).c_str());
  }
  return 0;
}

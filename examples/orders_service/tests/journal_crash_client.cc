// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Test helper for journal_crash_test and journal_fleet_crash_test: makes
// `count` keyed order calls, one after another, through the intent journal
// (a SQLite file, or a PostgreSQL database shared by a fleet) against the orders
// service, and is killed somewhere along the way — by the test (a random
// SIGKILL) or by itself, at a named point of one of its journaled calls:
//
//   before_send   the attempt is marked sent in the journal, nothing on the
//                 wire yet
//   after_send    the transport returned, the answer not yet processed
//   after_answer  the outcome is known, not yet written to the journal
//
// The points are reached through a journal and a transport that wrap the
// real ones: the library itself has no crash switch and reads no
// environment.
//
//   journal_crash_client [--journal-schema SCHEMA] JOURNAL BASE_URL KEY_PREFIX COUNT [POINT CALL]
//
// JOURNAL is a SQLite file, or a PostgreSQL URI (postgresql://...), whose
// tables are in SCHEMA (default: the server's search_path).
//
// Call i uses the key KEY_PREFIX-i and the client reference KEY_PREFIX-i;
// CALL is 1-based. Exit 0 after the last call, 3 on bad arguments or setup
// failure.

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "saferetry/client.h"
#include "saferetry/curl_transport.h"
#include "saferetry/sqlite_journal.h"
#ifdef JOURNAL_CRASH_CLIENT_POSTGRES
#include "saferetry/postgres_journal.h"
#endif

namespace {

// Where to die, and the journaled call being made (counted by `Record`).
struct CrashPlan {
  std::string point;
  int call = 0;
  int current = 0;
  void At(const std::string& here) const {
    if (here == point && current == call) ::kill(::getpid(), SIGKILL);
  }
};

class CrashingJournal final : public saferetry::IntentJournal {
 public:
  CrashingJournal(std::shared_ptr<saferetry::IntentJournal> inner, CrashPlan* plan)
      : inner_(std::move(inner)), plan_(plan) {}
  std::string Owner() const override { return inner_->Owner(); }
  absl::StatusOr<saferetry::RecordResult> Record(const saferetry::Intent& intent) override {
    ++plan_->current;
    absl::StatusOr<saferetry::RecordResult> r = inner_->Record(intent);
    // Recorded with attempt 1 marked: the attempt is about to be sent.
    if (r.ok() && r->created && r->intent.state == saferetry::IntentState::kSent) {
      plan_->At("before_send");
    }
    return r;
  }
  absl::Status MarkSent(std::string_view key, int attempt) override {
    absl::Status s = inner_->MarkSent(key, attempt);
    if (s.ok()) plan_->At("before_send");
    return s;
  }
  absl::Status Finish(std::string_view key, saferetry::IntentState outcome,
                      const saferetry::IntentSummary& summary) override {
    plan_->At("after_answer");
    return inner_->Finish(key, outcome, summary);
  }
  absl::StatusOr<saferetry::Intent> Get(std::string_view key) override { return inner_->Get(key); }
  absl::StatusOr<std::vector<saferetry::Intent>> ListUnfinished(
      const saferetry::UnfinishedFilter& filter) override {
    return inner_->ListUnfinished(filter);
  }
  absl::StatusOr<bool> Claim(std::string_view key, std::string_view owner,
                             saferetry::WallTime until) override {
    return inner_->Claim(key, owner, until);
  }
  absl::StatusOr<bool> Release(std::string_view key, std::string_view owner) override {
    return inner_->Release(key, owner);
  }
  absl::StatusOr<saferetry::PruneResult> Prune(saferetry::WallTime now,
                                               std::chrono::milliseconds retention) override {
    return inner_->Prune(now, retention);
  }
  absl::StatusOr<std::optional<std::chrono::milliseconds>> OldestUnresolvedAge() override {
    return inner_->OldestUnresolvedAge();
  }

 private:
  std::shared_ptr<saferetry::IntentJournal> inner_;
  CrashPlan* plan_;
};

class CrashingTransport final : public saferetry::Transport {
 public:
  CrashingTransport(std::shared_ptr<saferetry::Transport> inner, const CrashPlan* plan)
      : inner_(std::move(inner)), plan_(plan) {}
  saferetry::TransportResult Send(const saferetry::Request& request,
                                  const saferetry::AttemptOptions& options) override {
    saferetry::TransportResult r = inner_->Send(request, options);
    // Status queries are GETs; the crash point is after a send of the order.
    if (request.method == "POST") plan_->At("after_send");
    return r;
  }

 private:
  std::shared_ptr<saferetry::Transport> inner_;
  const CrashPlan* plan_;
};

bool IsPostgresUri(const std::string& journal) {
  return journal.rfind("postgresql://", 0) == 0 || journal.rfind("postgres://", 0) == 0;
}

absl::StatusOr<std::shared_ptr<saferetry::IntentJournal>> OpenJournal(const std::string& journal,
                                                                      const std::string& schema) {
  const std::chrono::milliseconds claim_grace(200);
  if (IsPostgresUri(journal)) {
#ifdef JOURNAL_CRASH_CLIENT_POSTGRES
    saferetry::PostgresJournalOptions options;
    options.dsn = journal;
    options.schema = schema;
    options.max_connections = 1;
    options.connect_timeout = std::chrono::seconds(2);
    options.claim_grace = claim_grace;
    return saferetry::OpenPostgresJournal(options);
#else
    return absl::UnimplementedError("built without the PostgreSQL journal");
#endif
  }
  if (!schema.empty()) return absl::InvalidArgumentError("--journal-schema: only for PostgreSQL");
  saferetry::SqliteJournalOptions options;
  options.path = journal;
  options.claim_grace = claim_grace;
  return saferetry::OpenSqliteJournal(options);
}

}  // namespace

int main(int argc, char** argv) {
  std::string schema;
  if (argc >= 3 && std::string(argv[1]) == "--journal-schema") {
    schema = argv[2];
    argv[2] = argv[0];
    argv += 2;
    argc -= 2;
  }
  if (argc != 5 && argc != 7) {
    std::fprintf(stderr,
                 "usage: %s [--journal-schema SCHEMA] JOURNAL BASE_URL KEY_PREFIX COUNT "
                 "[POINT CALL]\n",
                 argv[0]);
    return 3;
  }
  const std::string base = argv[2];
  const std::string prefix = argv[3];
  int count = 0;
  if (!absl::SimpleAtoi(argv[4], &count) || count < 1) return 3;
  CrashPlan plan;
  if (argc == 7) {
    plan.point = argv[5];
    if (plan.point != "before_send" && plan.point != "after_send" && plan.point != "after_answer") {
      return 3;
    }
    if (!absl::SimpleAtoi(argv[6], &plan.call) || plan.call < 1) return 3;
  }

  auto journal = OpenJournal(argv[1], schema);
  if (!journal.ok()) {
    std::fprintf(stderr, "journal: %s\n", journal.status().ToString().c_str());
    return 3;
  }
  auto transport = saferetry::MakeCurlTransport({});
  if (!transport.ok()) return 3;
  saferetry::ClientOptions options;
  options.transport = std::make_shared<CrashingTransport>(*std::move(transport), &plan);
  options.journal = std::make_shared<CrashingJournal>(*std::move(journal), &plan);
  auto client = saferetry::Client::Create(std::move(options));
  if (!client.ok()) return 3;

  for (int i = 0; i < count; ++i) {
    const std::string key = prefix + "-" + std::to_string(i);
    saferetry::Request order{
        "POST",
        base + "/orders",
        {{"Content-Type", "application/json"}},
        R"({"sku":"sku-42","quantity":1,"client_reference":")" + key + R"("})"};
    saferetry::CallOptions call;
    call.idempotency_key = key;
    call.timeout = std::chrono::milliseconds(1500);
    call.status_url = base + "/orders/by-key/{key}";
    saferetry::CallResult r = (*client)->Execute(order, call);
    std::printf("%s %s\n", key.c_str(), std::string(saferetry::OutcomeName(r.outcome)).c_str());
  }
  return 0;
}

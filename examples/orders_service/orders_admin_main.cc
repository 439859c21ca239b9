// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// saferetry-orders-admin: the orders service's recovery chores, from cron or
// a person's shell, on the service's database.
//
//   saferetry-orders-admin --pg "$DSN" sweep [--max-records 100]
//   saferetry-orders-admin --pg "$DSN" pending [--limit 50]
//   saferetry-orders-admin --pg "$DSN" decide --key order-17 --outcome failed
//       --status 409 --body '{"error":"not_created"}' --by alice --reason "no order row"
//
// Each prints one JSON document on stdout. Exit codes: 0 done (a decision
// recorded now or before); 1 refused (another decision was recorded, the key
// is not pending, or unknown); 2 bad flags or the database failed.

#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "nlohmann/json.hpp"
#include "orders_service/duration_flag.h"
#include "orders_service/orders_service.h"
#include "orders_service/orders_store.h"
#include "saferetry/server/handler.h"

namespace {

namespace srv = ::saferetry::server;
using ::saferetry::example::kCreateOrderOperation;
using ::saferetry::example::OrdersStore;
using ::saferetry::example::OrdersStoreOptions;

nlohmann::json RecordJson(const srv::ScopedRecord& r) {
  nlohmann::json j = {{"tenant", r.scope.tenant},
                      {"key", r.scope.key},
                      {"state", std::string(srv::RecordStateName(r.record.state))},
                      {"version", r.record.version},
                      {"created_ms", r.record.created_ms},
                      {"recovery_failures", r.record.recovery_failures}};
  if (r.record.step.has_value()) {
    j["step"] = {{"name", r.record.step->name}, {"external_id", r.record.step->external_id}};
  }
  if (r.record.pending_since_ms.has_value()) {
    j["pending_since_ms"] = *r.record.pending_since_ms;
    j["pending_reason"] = r.record.pending_reason;
  }
  return j;
}

int Fail(const absl::Status& s) {
  std::cerr << s.message() << "\n";
  return 2;
}

int Run(int argc, char** argv) {
  saferetry::example::ServiceOptions service_options;
  OrdersStoreOptions& store_options = service_options.store;
  std::string payment_timeout = "1s";
  CLI::App app{"Recovery chores of the example orders service: sweep, pending, decide"};
  auto* db = app.add_option("--db", store_options.path, "SQLite database file");
  auto* pg = app.add_option("--pg", store_options.postgres_conninfo,
                            "PostgreSQL connection string (instead of --db)");
  db->excludes(pg);
  pg->excludes(db);
  app.add_option("--pg-schema", store_options.postgres_schema, "PostgreSQL schema of the tables")
      ->needs(pg);
  app.add_option("--payment-channel-port", service_options.payment_channel_port,
                 "The service's payment channel: the sweep asks it about each charge by the "
                 "step's request id (without it an abandoned order is fenced)")
      ->capture_default_str();
  app.add_option("--payment-timeout", payment_timeout, "How long to wait for the channel")
      ->capture_default_str();
  app.require_subcommand(1);

  srv::SweepOptions sweep_options;
  auto* sweep = app.add_subcommand("sweep", "Recover abandoned PROCESSING records, once");
  sweep->add_option("--max-records", sweep_options.max_records, "At most this many per run")
      ->capture_default_str();

  int limit = 50;
  auto* pending = app.add_subcommand("pending", "List the records waiting for a person");
  pending->add_option("--limit", limit, "At most this many")->capture_default_str();

  std::string key, tenant, outcome, body;
  srv::Decision decision;
  auto* decide = app.add_subcommand("decide", "Record a person's decision on a pending record");
  decide->add_option("--key", key, "The Idempotency-Key")->required();
  decide->add_option("--tenant", tenant, "The tenant (default: default)");
  decide->add_option("--outcome", outcome, "succeeded | failed")
      ->required()
      ->check(CLI::IsMember({"succeeded", "failed"}));
  decide
      ->add_option("--status", decision.response.status,
                   "The answer to replay: 2xx to succeed, 4xx to fail")
      ->required();
  decide->add_option("--body", body, "Its JSON body")->required();
  decide->add_option("--by", decision.decided_by, "Who decides")->required();
  decide->add_option("--reason", decision.reason, "Why: the evidence looked at")->required();
  CLI11_PARSE(app, argc, argv);
  if (store_options.path.empty() && store_options.postgres_conninfo.empty()) {
    std::cerr << "--db or --pg is required\n";
    return 2;
  }

  auto timeout = saferetry::example::ParseDurationFlag(payment_timeout, "payment-timeout");
  if (!timeout.ok()) return Fail(timeout.status());
  service_options.payment_timeout = *timeout;
  auto store = OrdersStore::Open(store_options, nullptr);
  if (!store.ok()) return Fail(store.status());
  auto handler = saferetry::example::MakeOrdersHandler(service_options, **store);
  if (!handler.ok()) return Fail(handler.status());

  if (*sweep) {
    auto report = (*handler)->RunSweep(sweep_options);
    if (!report.ok()) return Fail(report.status());
    std::cout << nlohmann::json{{"examined", report->examined},
                                {"taken_over", report->taken_over},
                                {"completed", report->completed},
                                {"fenced", report->fenced},
                                {"pending_confirmation", report->pending_confirmation},
                                {"failed_checks", report->failed_checks},
                                {"skipped", report->skipped}}
                     .dump()
              << std::endl;
    return 0;
  }
  if (*pending) {
    auto listed = (*store)->idempotency().ListPendingConfirmation(kCreateOrderOperation, limit);
    if (!listed.ok()) return Fail(listed.status());
    nlohmann::json out = nlohmann::json::array();
    for (const srv::ScopedRecord& r : *listed) out.push_back(RecordJson(r));
    std::cout << out.dump() << std::endl;
    return 0;
  }
  decision.outcome =
      outcome == "succeeded" ? srv::Decision::Outcome::kSucceeded : srv::Decision::Outcome::kFailed;
  decision.response.body = body;
  auto decided = (*handler)->Decide(key, tenant, decision);
  if (!decided.ok()) return Fail(decided.status());
  const char* names[] = {"recorded", "already_recorded", "conflicting_decision", "not_pending",
                         "not_found"};
  nlohmann::json out = {{"outcome", names[static_cast<int>(decided->outcome)]}};
  if (decided->record.decision.has_value()) {
    const srv::Decision& d = *decided->record.decision;
    out["decision"] = {{"outcome", std::string(srv::DecisionOutcomeName(d.outcome))},
                       {"status", decided->record.response.status},
                       {"decided_by", d.decided_by},
                       {"decided_ms", d.decided_ms},
                       {"reason", d.reason}};
  }
  std::cout << out.dump() << std::endl;
  return decided->outcome == srv::DecideOutcome::kRecorded ||
                 decided->outcome == srv::DecideOutcome::kAlreadyRecorded
             ? 0
             : 1;
}

}  // namespace

int main(int argc, char** argv) { return Run(argc, argv); }

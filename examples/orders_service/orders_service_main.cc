// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// saferetry-orders-service: the example orders service on loopback.
//
//   saferetry-orders-service --db /tmp/orders.db --port 0 --processing-delay 200ms
//
// Prints "listening <port>" on stdout once the socket is bound, then serves
// until SIGINT or SIGTERM. With --pg, a database that is down at start is
// ridden out: requests get 503 `Idempotency-Key-State: rejected` until it is
// reached.

#include <signal.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "orders_service/duration_flag.h"
#include "orders_service/orders_service.h"

namespace {

using ::saferetry::example::OrdersService;
using ::saferetry::example::ParseDurationFlag;
using ::saferetry::example::ServiceOptions;

int Run(int argc, char** argv) {
  ServiceOptions options;
  std::string lease = "30s", retention = "24h", delay = "0ms", reap = "60s", relay = "0s",
              sweep = "0s", db_retry = "1s", payment_timeout = "1s";
  bool fast_sync = false;
  CLI::App app{"Example orders service keeping the server half of the retry contract"};
  app.add_option("--host", options.host, "Address to listen on")->capture_default_str();
  app.add_option("--port", options.port, "Port; 0 picks a free one")->capture_default_str();
  auto* db = app.add_option("--db", options.store.path, "SQLite database file");
  auto* pg = app.add_option("--pg", options.store.postgres_conninfo,
                            "PostgreSQL connection string (instead of --db)");
  db->excludes(pg);
  pg->excludes(db);
  app.add_option("--pg-schema", options.store.postgres_schema,
                 "PostgreSQL schema of the tables, set per transaction (works behind pgbouncer, "
                 "unlike options='-c search_path=...')")
      ->needs(pg);
  app.add_option("--lease", lease, "Lease of a PROCESSING record (e.g. 30s)")
      ->capture_default_str();
  app.add_option("--retention", retention, "How long completed keys replay (e.g. 24h)")
      ->capture_default_str();
  app.add_option("--processing-delay", delay, "Artificial work per POST (e.g. 200ms)")
      ->capture_default_str();
  app.add_option("--reap-interval", reap, "How often expired keys are reaped; 0 = never")
      ->capture_default_str();
  app.add_option("--relay-interval", relay,
                 "How often the outbox relay delivers to /events/order-created; 0 = never")
      ->capture_default_str();
  app.add_option("--sweep-interval", sweep,
                 "How often abandoned PROCESSING records are recovered (fenced); 0 = never "
                 "(saferetry-orders-admin sweep does it from cron)")
      ->capture_default_str();
  app.add_option("--database-retry-interval", db_retry,
                 "With --pg: a database down at start is ridden out (503 rejected until it is "
                 "reached, opened again at this interval); 0 = exit 2 at start")
      ->capture_default_str();
  app.add_option("--payment-channel-port", options.payment_channel_port,
                 "Charge each new order on this loopback payment channel first "
                 "(FakePaymentChannel's API); 0 = none")
      ->capture_default_str();
  app.add_option("--payment-timeout", payment_timeout, "How long to wait for the channel")
      ->capture_default_str();
  app.add_option("--threads", options.threads, "HTTP worker threads")->capture_default_str();
  app.add_flag("--fast-sync", fast_sync,
               "PRAGMA synchronous=NORMAL: durable against crashes, not power loss");
  CLI11_PARSE(app, argc, argv);

  struct Flag {
    const std::string& value;
    const char* name;
    std::chrono::milliseconds* out;
  };
  for (const Flag& f : {Flag{lease, "lease", &options.store.lease},
                        Flag{retention, "retention", &options.store.retention},
                        Flag{delay, "processing-delay", &options.processing_delay},
                        Flag{reap, "reap-interval", &options.reap_interval},
                        Flag{relay, "relay-interval", &options.relay_interval},
                        Flag{sweep, "sweep-interval", &options.sweep_interval},
                        Flag{db_retry, "database-retry-interval", &options.database_retry_interval},
                        Flag{payment_timeout, "payment-timeout", &options.payment_timeout}}) {
    auto d = ParseDurationFlag(f.value, f.name);
    if (!d.ok()) {
      std::cerr << d.status().message() << "\n";
      return 2;
    }
    *f.out = *d;
  }
  options.store.synchronous_full = !fast_sync;
  // A SQLite file that cannot be opened is a mistake to report, not an
  // outage to ride out.
  if (options.store.postgres_conninfo.empty()) options.database_retry_interval = {};
  if (options.store.path.empty() && options.store.postgres_conninfo.empty()) {
    std::cerr << "--db or --pg is required\n";
    return 2;
  }

  // Block the stop signals before any thread starts so only sigwait sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto service = OrdersService::Create(options);
  if (!service.ok()) {
    std::cerr << service.status().message() << "\n";
    return 2;
  }
  auto port = (*service)->Start();
  if (!port.ok()) {
    std::cerr << port.status().message() << "\n";
    return 1;
  }
  std::cout << "listening " << *port << std::endl;

  int sig = 0;
  sigwait(&stop_signals, &sig);
  (*service)->Stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Run(argc, argv); }

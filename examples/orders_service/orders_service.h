// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// An example orders service that keeps the server's half of the retry
// contract (docs/server-contract.md) on SQLite, served by cpp-httplib.
//
//   POST /orders                 Idempotency-Key required, X-Tenant-Id optional,
//                                X-Request-Timeout-Ms optional;
//                                body {"sku": "...", "quantity": N, "client_reference": "..."}
//   GET  /orders/by-key/{key}    the status query: 200 order, 404, 409 processing
//   GET  /stats                  database counts and request counters (JSON)
//   GET  /healthz                "ok"
//
// The handlers contain no fault injection: faults live in the fault proxy
// (fault_proxy.h) in front of the service.
//
// @code
//   ServiceOptions options;
//   options.store.path = "/tmp/orders.db";
//   auto service = OrdersService::Create(options);
//   auto port = (*service)->Start();   // serves on 127.0.0.1:*port until Stop()
// @endcode

#ifndef SAFERETRY_EXAMPLES_ORDERS_SERVICE_ORDERS_SERVICE_H_
#define SAFERETRY_EXAMPLES_ORDERS_SERVICE_ORDERS_SERVICE_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "absl/status/statusor.h"
#include "orders_service/orders_store.h"
#include "saferetry/clock.h"
#include "saferetry/server/handler.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace saferetry {
namespace example {

inline constexpr std::string_view kTenantHeader = server::kTenantHeader;
inline constexpr std::string_view kDefaultTenant = server::kDefaultTenant;
inline constexpr std::string_view kKeyHeader = server::kIdempotencyKeyHeader;
inline constexpr std::string_view kDeadlineHeader = server::kRequestTimeoutHeader;
/// Set to "true" on a response that replays a stored one.
inline constexpr std::string_view kReplayedHeader = server::kReplayedHeader;
/// completed | processing | abandoned | expired | unknown | fenced | rejected.
inline constexpr std::string_view kKeyStateHeader = server::kKeyStateHeader;
/// "true" on a status query: fence the key if its fate is not settled.
inline constexpr std::string_view kFenceHeader = server::kFenceHeader;
/// Carries the outbox message id to the consumer endpoint.
inline constexpr std::string_view kMessageIdHeader = "Message-Id";
/// The operation name that scopes order-creation keys.
inline constexpr std::string_view kCreateOrderOperation = "create_order";

struct ServiceOptions {
  /// Address to listen on. Loopback by default.
  std::string host = "127.0.0.1";
  /// 0 picks a free port; Start() returns it.
  int port = 0;
  OrdersStoreOptions store;
  /// Artificial work per POST, between the claim and the completion. Also
  /// the "expected work" a deadline header must leave room for. >= 0.
  std::chrono::milliseconds processing_delay{0};
  /// How often the background reaper runs; 0 disables it (tests call
  /// `store().idempotency().Reap()` themselves). >= 0.
  std::chrono::milliseconds reap_interval = std::chrono::seconds(60);
  /// How often the outbox relay delivers pending messages to this service's
  /// own consumer endpoint; 0 disables it (tests run an OutboxRelay). >= 0.
  std::chrono::milliseconds relay_interval{0};
  /// How often the sweeper recovers abandoned PROCESSING records (nobody
  /// came back after the lease ran out): they are fenced, since an order
  /// commits with its record; 0 disables it (`saferetry-orders-admin sweep`
  /// runs it from cron). >= 0.
  std::chrono::milliseconds sweep_interval{0};
  /// Riding out the database: when > 0 and the database cannot be reached
  /// at start (Unavailable), `Create` still succeeds, requests are answered
  /// 503 `Idempotency-Key-State: rejected` (nothing recorded), and the store
  /// is opened again every interval until it works. 0: `Create` fails. >= 0.
  std::chrono::milliseconds database_retry_interval{0};
  /// A payment channel on 127.0.0.1 (`FakePaymentChannel`'s API); 0: none.
  /// With one, each new order is charged before it is created: the worker
  /// records the recovery step "charge" with the request id derived from
  /// the key, then calls the channel; a lost answer leaves the record
  /// PROCESSING (500), and a resend or the sweeper asks the channel by that
  /// id: charged → the order is created with the charge, unknown → redone /
  /// fenced, forgotten → pending confirmation. >= 0.
  int payment_channel_port = 0;
  /// How long the worker waits for the channel's answer. > 0.
  std::chrono::milliseconds payment_timeout = std::chrono::seconds(1);
  /// HTTP worker threads. > 0.
  int threads = 16;
  /// Wall clock for records, steady clock for deadlines; the system clock
  /// when null.
  std::shared_ptr<Clock> clock;
  /// Test hook: runs on the request's thread after its claim committed and
  /// before the work, with the fencing version it owns. Lets a test pause a
  /// worker between the steps.
  std::function<void(const KeyScope& scope, std::int64_t version)> after_claim;
};

/// Request counters, by answer.
struct ServiceMetrics {
  std::int64_t created = 0;               // 201 from a fresh execution
  std::int64_t replayed = 0;              // stored response replayed
  std::int64_t conflicting_payload = 0;   // 422
  std::int64_t in_progress = 0;           // 409 on POST
  std::int64_t rejected_bad_request = 0;  // 400, not stored (missing key, bad headers)
  std::int64_t invalid_body = 0;          // 400, stored as the key's final answer
  std::int64_t deadline_rejected = 0;     // 503 rejected before any work
  std::int64_t expired_key = 0;           // 410 expired
  std::int64_t fenced_refused = 0;        // 410 fenced
  std::int64_t fences = 0;                // keys fenced by status queries
  std::int64_t takeovers = 0;             // claims of an abandoned PROCESSING record
  std::int64_t stale_writes_rejected = 0;
  std::int64_t status_queries = 0;
  std::int64_t messages_processed = 0;    // consumer: first deliveries
  std::int64_t messages_redelivered = 0;  // consumer: duplicates without effect
  std::int64_t storage_unavailable = 0;   // 503 rejected: the database could not be reached
  std::int64_t swept_fenced = 0;          // abandoned records the sweeper fenced
  std::int64_t swept_completed = 0;       // abandoned records the sweeper completed
  std::int64_t pending_confirmation = 0;  // records moved to pending confirmation
};

/// SHA-256 (lower-case hex) of method "\n" path "\n" body: the request
/// digest compared on every reuse of a key.
using ::saferetry::server::RequestDigest;

/// The orders handler on `store` as the service builds it (operation
/// `create_order`; with a payment channel, the takeover hook that asks it by
/// the step's request id). For tools on the same database, such as
/// `saferetry-orders-admin`, whose sweep must ask the same questions.
absl::StatusOr<std::unique_ptr<server::IdempotentHandler>> MakeOrdersHandler(
    const ServiceOptions& options, OrdersStore& store);

class OrdersService {
 public:
  /// Validates options and opens the store. InvalidArgument naming the field
  /// ("threads", "processing_delay", "reap_interval", or a store field).
  static absl::StatusOr<std::unique_ptr<OrdersService>> Create(ServiceOptions options);
  ~OrdersService();
  OrdersService(const OrdersService&) = delete;
  OrdersService& operator=(const OrdersService&) = delete;

  /// Binds and serves on background threads; returns the bound port.
  /// Unavailable when the address cannot be bound.
  absl::StatusOr<int> Start();
  /// Stops accepting, finishes running requests, stops the reaper. Idempotent.
  void Stop();

  int port() const { return port_; }
  /// The store and the orders handler; only once `ready()`.
  OrdersStore& store() { return *store_; }
  server::IdempotentHandler& handler() { return *handler_; }
  /// True once the database was reached and the store opened.
  bool ready() const { return ready_.load(std::memory_order_acquire); }
  ServiceMetrics metrics() const;

 private:
  OrdersService(ServiceOptions options, std::unique_ptr<OrdersStore> store,
                std::unique_ptr<server::IdempotentHandler> handler);
  /// Answers 503 `rejected` and returns false while the store is not open.
  bool ReadyOrRejected(httplib::Response& res);
  void OpenLoop();
  void HandleCreate(const httplib::Request& req, httplib::Response& res);
  void HandleStatus(const httplib::Request& req, httplib::Response& res);
  void HandleEvent(const httplib::Request& req, httplib::Response& res);
  void HandleStats(httplib::Response& res);
  void BackgroundLoop(std::chrono::milliseconds interval, const std::function<void()>& pass);

  struct Counters {
    std::atomic<std::int64_t> created{0}, invalid_body{0}, messages_processed{0},
        messages_redelivered{0};
  };

  ServiceOptions options_;
  std::unique_ptr<OrdersStore> store_;
  std::unique_ptr<server::IdempotentHandler> handler_;
  std::unique_ptr<httplib::Server> server_;
  Counters counters_;
  int port_ = 0;
  std::thread listener_;
  std::thread reaper_;
  std::thread relay_;
  std::thread sweeper_;
  std::thread opener_;
  /// Set once `store_` and `handler_` are in place; they never change after.
  std::atomic<bool> ready_{false};
  std::atomic<std::int64_t> rejected_not_ready_{0};
  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  bool started_ = false;
};

}  // namespace example
}  // namespace saferetry

#endif  // SAFERETRY_EXAMPLES_ORDERS_SERVICE_ORDERS_SERVICE_H_

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
#include "orders_service/service_clock.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace saferetry {
namespace example {

inline constexpr std::string_view kTenantHeader = "X-Tenant-Id";
inline constexpr std::string_view kDefaultTenant = "default";
inline constexpr std::string_view kKeyHeader = "Idempotency-Key";
inline constexpr std::string_view kDeadlineHeader = "X-Request-Timeout-Ms";
/// Set to "true" on a response that replays a stored one.
inline constexpr std::string_view kReplayedHeader = "Idempotent-Replayed";
/// On status answers: processing | abandoned | completed | expired | unknown.
inline constexpr std::string_view kKeyStateHeader = "Idempotency-Key-State";
/// The operation name that scopes order-creation keys.
inline constexpr std::string_view kCreateOrderOperation = "create_order";

struct ServiceOptions {
  /// Address to listen on. Loopback by default.
  std::string host = "127.0.0.1";
  /// 0 picks a free port; Start() returns it.
  int port = 0;
  StoreOptions store;
  /// Artificial work per POST, between the claim and the completion. Also
  /// the "expected work" a deadline header must leave room for. >= 0.
  std::chrono::milliseconds processing_delay{0};
  /// How often the background reaper runs; 0 disables it (tests call
  /// `store().ReapExpired()` themselves). >= 0.
  std::chrono::milliseconds reap_interval = std::chrono::seconds(60);
  /// HTTP worker threads. > 0.
  int threads = 16;
  /// Wall clock for records; the real clock when null.
  std::shared_ptr<ServiceClock> clock;
  /// Test hook: runs on the request's thread after its claim committed and
  /// before the work, with the fencing version it owns. Lets a test pause a
  /// worker between the steps.
  std::function<void(const KeyScope& scope, std::int64_t version)> after_claim;
};

/// Request counters, by answer.
struct ServiceMetrics {
  std::int64_t created = 0;             // 201 from a fresh execution
  std::int64_t replayed = 0;            // stored response replayed
  std::int64_t conflicting_payload = 0; // 422
  std::int64_t in_progress = 0;         // 409 on POST
  std::int64_t rejected_bad_request = 0;// 400, not stored (missing key, bad headers)
  std::int64_t invalid_body = 0;        // 400, stored as the key's final answer
  std::int64_t deadline_rejected = 0;   // 504
  std::int64_t expired_key = 0;         // 410
  std::int64_t takeovers = 0;           // claims of an abandoned PROCESSING record
  std::int64_t stale_writes_rejected = 0;
  std::int64_t status_queries = 0;
};

/// SHA-256 (lower-case hex) of "POST\n/orders\n" + body: the request digest
/// compared on every reuse of a key.
std::string RequestDigest(std::string_view method, std::string_view path, std::string_view body);

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
  OrdersStore& store() { return *store_; }
  ServiceMetrics metrics() const;

 private:
  explicit OrdersService(ServiceOptions options, std::unique_ptr<OrdersStore> store);
  void HandleCreate(const httplib::Request& req, httplib::Response& res);
  void HandleStatus(const httplib::Request& req, httplib::Response& res);
  void HandleStats(httplib::Response& res);
  void ReaperLoop();

  struct Counters {
    std::atomic<std::int64_t> created{0}, replayed{0}, conflicting_payload{0}, in_progress{0},
        rejected_bad_request{0}, invalid_body{0}, deadline_rejected{0}, expired_key{0},
        takeovers{0}, status_queries{0};
  };

  ServiceOptions options_;
  std::unique_ptr<OrdersStore> store_;
  std::unique_ptr<httplib::Server> server_;
  Counters counters_;
  int port_ = 0;
  std::thread listener_;
  std::thread reaper_;
  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  bool started_ = false;
};

}  // namespace example
}  // namespace saferetry

#endif  // SAFERETRY_EXAMPLES_ORDERS_SERVICE_ORDERS_SERVICE_H_

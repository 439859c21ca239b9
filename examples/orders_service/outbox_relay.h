// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The outbox relay: delivers OrderCreated messages from the outbox table to a
// consumer endpoint at least once. A message is marked delivered only after
// the consumer answered 2xx, so a crash between delivery and marking delivers
// it again; the consumer's processed-message record makes that harmless
// (docs/server-contract.md, "Messages").
//
// @code
//   RelayOptions options;
//   options.port = consumer_port;
//   OutboxRelay relay(&store, options);
//   auto pass = relay.RunOnce();   // delivers up to `batch` pending messages
// @endcode

#ifndef SAFERETRY_EXAMPLES_ORDERS_SERVICE_OUTBOX_RELAY_H_
#define SAFERETRY_EXAMPLES_ORDERS_SERVICE_OUTBOX_RELAY_H_

#include <chrono>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "orders_service/orders_store.h"

namespace saferetry {
namespace example {

struct RelayOptions {
  /// The consumer endpoint: POST http://host:port/path with header
  /// `Message-Id` and the order JSON as body. Loopback by default.
  std::string host = "127.0.0.1";
  int port = 0;
  std::string path = "/events/order-created";
  /// Messages per pass. > 0.
  int batch = 100;
  std::chrono::milliseconds timeout = std::chrono::seconds(5);
  /// Test hooks: return true to end the pass right there, as if the relay
  /// process died at that point (before delivering / after delivering but
  /// before marking the message delivered).
  std::function<bool(const OutboxMessage&)> crash_before_delivery;
  std::function<bool(const OutboxMessage&)> crash_after_delivery;
};

struct RelayPass {
  int delivered = 0;  // consumer answered 2xx
  int marked = 0;     // marked delivered in the outbox
  int failed = 0;     // no answer or not 2xx: stays pending for the next pass
  bool crashed = false;
};

/// Not thread-safe: run one relay per outbox (more would only duplicate
/// deliveries, which the consumer absorbs).
class OutboxRelay {
 public:
  OutboxRelay(OrdersStore* store, RelayOptions options)
      : store_(store), options_(std::move(options)) {}
  /// One pass over the pending messages, oldest first. Errors only when the
  /// outbox cannot be read.
  absl::StatusOr<RelayPass> RunOnce();

 private:
  OrdersStore* store_;
  RelayOptions options_;
};

}  // namespace example
}  // namespace saferetry

#endif  // SAFERETRY_EXAMPLES_ORDERS_SERVICE_OUTBOX_RELAY_H_

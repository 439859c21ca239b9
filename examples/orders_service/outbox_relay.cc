// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "orders_service/outbox_relay.h"

#include <httplib.h>

namespace saferetry {
namespace example {

absl::StatusOr<RelayPass> OutboxRelay::RunOnce() {
  auto pending = store_->PendingOutbox(options_.batch);
  if (!pending.ok()) return pending.status();
  RelayPass pass;
  httplib::Client client(options_.host, options_.port);
  client.set_connection_timeout(options_.timeout);
  client.set_read_timeout(options_.timeout);
  client.set_tcp_nodelay(true);
  for (const OutboxMessage& m : *pending) {
    if (options_.crash_before_delivery && options_.crash_before_delivery(m)) {
      pass.crashed = true;
      return pass;
    }
    httplib::Headers headers{{"Message-Id", m.message_id}};
    auto r = client.Post(options_.path, headers, m.payload, "application/json");
    if (!r || r->status < 200 || r->status >= 300) {
      ++pass.failed;
      continue;
    }
    ++pass.delivered;
    if (options_.crash_after_delivery && options_.crash_after_delivery(m)) {
      pass.crashed = true;
      return pass;
    }
    if (store_->MarkDelivered(m.id).ok()) ++pass.marked;
  }
  return pass;
}

}  // namespace example
}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// A fake payment channel on loopback, for the recovery walkthrough
// (docs/server.md): it charges once per request id, can be asked by request
// id, can lose its answers, and can be told to forget.
//
//   POST /charges                  header Channel-Request-Id, body {"amount": N, "metadata": {...}}
//                                  201 {"charge_id","request_id","amount","metadata"} the first
//                                  time, 200 with the same charge for a repeated request id
//   GET  /charges/by-request/{id}  200 the charge; 404 {"error":"unknown_request"} never seen;
//                                  410 {"error":"forgotten"}: the channel cannot tell any more
//
// @code
//   FakePaymentChannel channel;
//   int port = *channel.Start();
//   channel.LoseNextAnswers(1, std::chrono::seconds(2));  // charge, then answer too late
//   channel.Forget("sr-...");                              // the query cannot tell any more
// @endcode

#ifndef SAFERETRY_EXAMPLES_ORDERS_SERVICE_FAKE_PAYMENT_CHANNEL_H_
#define SAFERETRY_EXAMPLES_ORDERS_SERVICE_FAKE_PAYMENT_CHANNEL_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>

#include "absl/status/statusor.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace saferetry {
namespace example {

inline constexpr std::string_view kChannelRequestIdHeader = "Channel-Request-Id";

class FakePaymentChannel {
 public:
  FakePaymentChannel();
  ~FakePaymentChannel();
  FakePaymentChannel(const FakePaymentChannel&) = delete;
  FakePaymentChannel& operator=(const FakePaymentChannel&) = delete;

  /// Serves on 127.0.0.1 at a free port; returns it.
  absl::StatusOr<int> Start();
  void Stop();

  /// The next `n` new charges are made, then answered only after `delay`
  /// (a caller with a shorter timeout has lost the answer).
  void LoseNextAnswers(int n, std::chrono::milliseconds delay);
  /// Drops what the channel knows of `request_id`: its query answers 410.
  void Forget(const std::string& request_id);
  /// Charges made (one per request id).
  std::int64_t charges() const;

 private:
  struct Charge {
    std::string charge_id;
    std::string json;
  };
  std::unique_ptr<httplib::Server> server_;
  std::thread listener_;
  mutable std::mutex mu_;
  std::map<std::string, Charge> by_request_;
  std::set<std::string> forgotten_;
  std::int64_t next_charge_ = 1;
  int lose_next_ = 0;
  std::chrono::milliseconds lose_delay_{0};
};

}  // namespace example
}  // namespace saferetry

#endif  // SAFERETRY_EXAMPLES_ORDERS_SERVICE_FAKE_PAYMENT_CHANNEL_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// An in-process idempotent order server for tests. It keeps the server's half
// of the contract (docs/server-contract.md): one order per (key, body), the
// stored response replayed for the same key, 422 for the same key with another
// body, 409 while the first request is still running, and status answers at
// `GET /orders/by-key/{key}`. Faults are scripted per POST, and effects are
// counted per key so a test can assert "exactly one order".
//
// @code
//   auto server = std::make_shared<SimulatedOrderServer>(clock);
//   server->ScriptFaults({OrderFault::kCommitThenLoseResponse});
//   options.transport = server;
//   ... Execute a POST /orders ...
//   EXPECT_EQ(server->effects(*result.idempotency_key), 1);
// @endcode

#ifndef SAFERETRY_TESTING_SIMULATED_ORDER_SERVER_H_
#define SAFERETRY_TESTING_SIMULATED_ORDER_SERVER_H_

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "saferetry/testing/fake_clock.h"
#include "saferetry/transport.h"

namespace saferetry {
namespace testkit {

/// A fault applied to one POST (status queries are never faulted).
enum class OrderFault {
  kNone,
  /// Connection refused: nothing reaches the server.
  kRefuse,
  /// Delivered, then the connection drops before the server commits.
  kDropBeforeCommit,
  /// The server commits the order; the response is lost (reset).
  kCommitThenLoseResponse,
  /// The server commits the order; the client times out waiting (the
  /// attempt hangs for its whole timeout on the fake clock).
  kCommitThenHang,
  /// 503 with `Retry-After: 1`, nothing committed, and no
  /// `Idempotency-Key-State`: the client cannot tell it from
  /// `kCommitThenGatewayUnavailable`.
  kUnavailable,
  /// The server commits, then answers 500.
  kInternalErrorAfterCommit,
  /// The server commits the order (or replays it), then a gateway in front
  /// of it answers 503 itself, unmarked (a mesh sidecar whose upstream reset
  /// after the request was forwarded).
  kCommitThenGatewayUnavailable,
  /// The request is still running: the server answers 409 and commits the
  /// order right after (so a later poll finds it).
  kInProgressThenCommit,
  /// The connection drops at once while the server goes on processing; it
  /// commits after the processing time (`SetProcessingTime`). Until then
  /// status queries and resends see 409.
  kDisconnectWhileProcessing,
  /// The server completes the key with a final 400 (no order) and the
  /// response is lost: a status query answers 404 `completed`, a resend
  /// gets the 400 replayed.
  kStoredFinalErrorThenLose,
  /// 503 with `Idempotency-Key-State: rejected`: refused before any work,
  /// nothing recorded.
  kRejectBeforeWork,
  /// The server completes the key with a final 400 (no order) and answers
  /// it, marked `Idempotency-Key-State: completed` like every final answer
  /// it stores; a later status query answers 404 `completed`.
  kStoredFinalError,
  /// A 400 from something in front of the server (a gateway): no effect,
  /// nothing recorded, no key state.
  kUnmarkedClientError,
};

/// Thread-safe; also a `Transport`, so it plugs straight into a client.
///
/// Status answers follow docs/server-contract.md: 200 found (`completed`),
/// 409 processing, 404 `completed` for a stored final error, 404 `fenced`,
/// 404 `unknown`. A status query carrying `Idempotency-Key-Fence: true`
/// fences an unknown key; any later POST with it gets 410. Every final
/// answer to a keyed POST carries `Idempotency-Key-State: completed`, and a
/// replay also `Idempotent-Replayed: true`. An expired key (`Expire`) gets
/// 410 `expired`.
class SimulatedOrderServer final : public Transport {
 public:
  /// `clock` may be null (then processing takes no time). `key_header`
  /// names the idempotency header.
  explicit SimulatedOrderServer(std::shared_ptr<FakeClock> clock = nullptr,
                                std::string key_header = "Idempotency-Key");
  /// Faults for the next POSTs, in order; later POSTs get kNone.
  void ScriptFaults(std::vector<OrderFault> faults);
  /// How long the server works on a new key's POST before it commits
  /// (default 0). An attempt whose timeout is shorter times out while the
  /// server goes on and commits later (a slow commit); meanwhile the key is
  /// in progress (409). Needs a clock.
  void SetProcessingTime(Duration processing_time);
  /// The key's retention ran out: its stored answer is reaped, the order (if
  /// any) stays. POSTs with the key get 410 `expired` and are never executed
  /// again; status queries answer 200 with the order when there is one (the
  /// service looks its resources up) and 404 `expired` otherwise.
  void Expire(const std::string& key);
  TransportResult Send(const Request& request, const AttemptOptions& options) override;
  /// Orders created for `key` (must be 0 or 1 when the client is safe).
  /// Counts commits due by the clock's current time.
  int effects(const std::string& key) const;
  /// Every order created, keyed or not.
  int total_effects() const;
  /// POSTs that reached the server, status queries that reached it.
  int posts_received() const;
  int queries_received() const;

 private:
  struct Record {
    std::string body;
    int status = 0;
    std::string response_body;
    TimePoint commit_at{};  // in progress (409) until then
    bool creates_order = true;
    bool fenced = false;
    bool expired = false;
  };
  bool InProgressLocked(const Record& record) const;
  TimePoint NowLocked() const;

  std::shared_ptr<FakeClock> clock_;
  std::string key_header_;
  mutable std::mutex mu_;
  std::deque<OrderFault> faults_;
  Duration processing_time_{0};
  std::map<std::string, Record> records_;
  int unkeyed_effects_ = 0;
  int posts_ = 0;
  int queries_ = 0;
  int next_order_id_ = 1;
};

}  // namespace testkit
}  // namespace saferetry

#endif  // SAFERETRY_TESTING_SIMULATED_ORDER_SERVER_H_

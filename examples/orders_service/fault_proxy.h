// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// A small fault-injecting TCP proxy for HTTP/1.1, in the spirit of Toxiproxy:
// it sits between a client and a service on loopback and, per request,
// decides (from a seeded generator or a script) whether to pass it or to
// break it in one of the ways that make a client's outcome UNKNOWN. The
// service's handlers stay free of fault code.
//
//   fault                 what the proxy does                       effect happened?
//   kResetBeforeCommit    reads the request, resets the client      no
//   kUnavailable          answers 503 + Retry-After itself, with    no
//                         `Idempotency-Key-State: rejected`
//   kDelay                waits, then forwards normally             yes (slowly)
//   kDropAfterCommit      forwards, reads the whole response,       yes, answer lost
//                         resets the client instead of answering
//   kHangAfterCommit      forwards, reads the whole response, then  yes, answer lost
//                         holds it until the client gives up
//
// Only requests matching the filter (by default: POST) draw a fault, so status
// queries are answered honestly.
//
// With several upstream ports (instances of one service sharing a database)
// the proxy is also a round-robin balancer: every forwarded request goes to
// the next instance in turn, per request rather than per client connection.
//
// @code
//   ProxyOptions options;
//   options.upstream_port = service_port;
//   options.faults.drop_after_commit = 0.3;
//   options.faults.seed = 42;
//   auto proxy = FaultProxy::Start(options);   // clients use (*proxy)->port()
//
//   options.upstream_port = 0;                  // or three instances:
//   options.upstream_ports = {port_a, port_b, port_c};
// @endcode

#ifndef SAFERETRY_EXAMPLES_ORDERS_SERVICE_FAULT_PROXY_H_
#define SAFERETRY_EXAMPLES_ORDERS_SERVICE_FAULT_PROXY_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace saferetry {
namespace example {

enum class FaultKind {
  kNone,
  kDelay,
  kUnavailable,
  kResetBeforeCommit,
  kDropAfterCommit,
  kHangAfterCommit,
};

/// "none", "delay", "503", "reset", "drop", "hang".
std::string_view FaultKindName(FaultKind kind);
/// The inverse of FaultKindName; InvalidArgument naming "fault" otherwise.
absl::StatusOr<FaultKind> ParseFaultKind(std::string_view name);

/// Which requests are faulted and how often. Probabilities are per matching
/// request, each in [0, 1], summing to at most 1; the rest pass untouched.
struct FaultOptions {
  double reset_before_commit = 0;
  double unavailable = 0;
  double drop_after_commit = 0;
  double hang_after_commit = 0;
  double delay = 0;
  /// Added by kDelay. >= 0.
  std::chrono::milliseconds delay_duration{200};
  /// The Retry-After value of a kUnavailable answer, in seconds. >= 0.
  int retry_after_seconds = 1;
  /// The longest a kHangAfterCommit holds a connection if the client never
  /// gives up. > 0.
  std::chrono::milliseconds hang_limit = std::chrono::seconds(30);
  /// Seeds the std::mt19937_64 that draws one uniform number per matching
  /// request, in the order requests are decided.
  std::uint64_t seed = 1;
  /// Methods that may be faulted; empty means every method.
  std::vector<std::string> methods = {"POST"};
  /// Only targets starting with this may be faulted; empty means every path.
  std::string path_prefix;
  /// Faults for the first matching requests, in order, before any draw.
  std::vector<FaultKind> script;
};

/// InvalidArgument naming the field ("faults.drop_after_commit: must be in
/// [0, 1], got 2", "faults: probabilities sum to 1.2, must be <= 1", ...).
absl::Status ValidateFaultOptions(const FaultOptions& options);

/// Picks faults. Thread-safe; deterministic for a given seed and order of
/// calls to Next().
class FaultDecider {
 public:
  explicit FaultDecider(FaultOptions options);
  /// Whether a request may be faulted at all.
  bool Matches(std::string_view method, std::string_view target) const;
  /// The next script entry, else one draw u in [0, 1) mapped onto the
  /// probabilities in the order reset, 503, drop, hang, delay.
  FaultKind Next();

 private:
  FaultOptions options_;
  std::mutex mu_;
  std::mt19937_64 engine_;
  std::size_t script_pos_ = 0;
};

struct ProxyOptions {
  std::string listen_host = "127.0.0.1";
  /// 0 picks a free port.
  int listen_port = 0;
  std::string upstream_host = "127.0.0.1";
  /// The service's port, for a single upstream. Set this or
  /// `upstream_ports`, not both.
  int upstream_port = 0;
  /// Several instances of the service on `upstream_host`, balanced
  /// round-robin per request: each request the proxy forwards (one upstream
  /// connection per request) goes to the next port in this list, whatever
  /// client connection it came on, so keep-alive clients are spread over
  /// every instance too. An instance that refuses the connection is skipped
  /// for that request (nothing was sent to it) and the next one is tried;
  /// when all refuse, the client gets 502. Empty: `upstream_port` alone.
  std::vector<int> upstream_ports;
  /// Client connections served at once (one thread each); further clients
  /// wait in the listen backlog. > 0.
  int max_connections = 64;
  /// A client connection idle this long is closed. > 0.
  std::chrono::milliseconds idle_timeout = std::chrono::seconds(30);
  FaultOptions faults;
};

struct ProxyCounters {
  std::int64_t connections = 0;
  std::int64_t requests_seen = 0;
  /// Requests that passed the filter and drew a fault (kNone included).
  std::int64_t requests_matched = 0;
  /// Requests whose complete response came back from the service.
  std::int64_t forwarded = 0;
  std::int64_t delayed = 0;
  std::int64_t unavailable = 0;
  std::int64_t reset_before_commit = 0;
  std::int64_t drop_after_commit = 0;
  std::int64_t hang_after_commit = 0;
  /// Service unreachable or its answer broken (the client got 502 or a close).
  std::int64_t upstream_errors = 0;
  /// Requests sent to each upstream, in the order of the upstream ports (one
  /// entry for a single `upstream_port`).
  std::vector<std::int64_t> sent_per_upstream;
};

class FaultProxy {
 public:
  /// Validates, binds and starts accepting. InvalidArgument naming the field,
  /// or Unavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<FaultProxy>> Start(ProxyOptions options);
  ~FaultProxy();
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  int port() const { return port_; }
  /// Closes every connection and joins every thread. Idempotent.
  void Stop();
  ProxyCounters counters() const;
  /// The fault chosen for each matching request so far, in decision order.
  std::vector<FaultKind> history() const;

 private:
  FaultProxy(ProxyOptions options, int listen_fd, int port);
  void AcceptLoop();
  void Serve(int client_fd);
  // Connects to the next upstream in turn, skipping refusals; -1 when none
  // accepts or when stopping.
  int ConnectUpstream();
  int ConnectTo(int port);
  // Registers an fd so Stop() can shut it down; false when stopping.
  bool Track(int fd);
  void CloseFd(int fd, bool reset);
  // Waits `d` or until Stop(); false when stopped.
  bool WaitFor(std::chrono::milliseconds d);
  void HoldUntilClientGone(int client_fd);

  struct Counters {
    std::atomic<std::int64_t> connections{0}, requests_seen{0}, requests_matched{0}, forwarded{0},
        delayed{0}, unavailable{0}, reset_before_commit{0}, drop_after_commit{0},
        hang_after_commit{0}, upstream_errors{0};
  };
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };

  ProxyOptions options_;
  FaultDecider decider_;
  int listen_fd_;
  int port_;
  Counters counters_;
  std::thread acceptor_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  int active_ = 0;
  std::set<int> fds_;
  std::list<Worker> workers_;
  std::vector<FaultKind> history_;
  // The upstream the next request starts its turn at, modulo the count.
  std::atomic<std::uint64_t> next_upstream_{0};
  std::vector<std::int64_t> sent_per_upstream_;  // guarded by mu_
};

}  // namespace example
}  // namespace saferetry

#endif  // SAFERETRY_EXAMPLES_ORDERS_SERVICE_FAULT_PROXY_H_

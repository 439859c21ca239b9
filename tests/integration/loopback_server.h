// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// A scriptable HTTP/1.1 server on 127.0.0.1 for the integration tests, on raw
// POSIX sockets so a test can produce exact faults: close a connection before
// reading, after reading the request, after half a response; delay headers;
// stall a body; answer chunked; keep connections alive. It records every
// request it read in full, so a test can assert "exactly one copy arrived".
//
// @code
//   LoopbackServer server([](const ReceivedRequest& req, LoopbackConnection& conn) {
//     conn.Write(LoopbackServer::Reply(200, {}, "ok"));
//     return AfterRequest::kKeepAlive;
//   });
//   ... send to server.Url("/orders") ...
//   EXPECT_EQ(server.requests().size(), 1);
// @endcode

#ifndef SAFERETRY_TESTS_INTEGRATION_LOOPBACK_SERVER_H_
#define SAFERETRY_TESTS_INTEGRATION_LOOPBACK_SERVER_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "saferetry/request.h"

namespace saferetry {
namespace testkit {

/// One request as the server read it.
struct ReceivedRequest {
  std::string method;
  std::string target;  ///< The request-target, e.g. "/orders?x=1".
  Headers headers;     ///< In received order, names as sent.
  std::string body;
  int connection = 0;  ///< 0-based index of the connection it arrived on.
  /// The first header named `name` (case-insensitive).
  std::optional<std::string> Header(std::string_view name) const;
};

/// The server side of one connection, handed to the handler.
class LoopbackConnection {
 public:
  explicit LoopbackConnection(int fd, int index) : fd_(fd), index_(index) {}
  /// Writes all of `bytes`; false when the peer is gone.
  bool Write(std::string_view bytes);
  /// Waits until the client closes the connection or `timeout` passes
  /// (used to stall: the test's client gives up first). True if closed.
  bool WaitForPeerClose(std::chrono::milliseconds timeout);
  /// Writes `pieces` one by one, `gap` apart (a slow body); false when the
  /// peer is gone.
  bool WriteSlowly(const std::vector<std::string>& pieces, std::chrono::milliseconds gap);
  int index() const { return index_; }

 private:
  int fd_;
  int index_;
};

/// What the server does after the handler returns.
enum class AfterRequest {
  kKeepAlive,  ///< Read the next request on this connection.
  kClose,      ///< Close the connection (FIN), whether or not a reply was written.
  kReset,      ///< Reset the connection (RST: SO_LINGER 0, then close).
};

/// A loopback port with nothing listening (bound, then closed), for
/// "connection refused".
int UnusedLoopbackPort();

/// A loopback port where a connect never completes, for connect timeouts: a
/// listening socket with a backlog of 0 that never accepts, its accept queue
/// filled by connections of its own. Linux drops the SYN of any further
/// connect, which then hangs until the client gives up; nothing is ever
/// read. Loopback only.
class FullBacklogListener {
 public:
  FullBacklogListener();
  ~FullBacklogListener();
  FullBacklogListener(const FullBacklogListener&) = delete;
  FullBacklogListener& operator=(const FullBacklogListener&) = delete;
  int port() const { return port_; }
  /// "http://127.0.0.1:<port><path>".
  std::string Url(std::string_view path) const;
  /// True once a connect of its own was seen to hang (the queue is full).
  bool full() const { return full_; }

 private:
  int listen_fd_ = -1;
  int port_ = 0;
  bool full_ = false;
  std::vector<int> fillers_;
};

class LoopbackServer {
 public:
  /// Called on the connection's thread for each complete request, after it
  /// was recorded.
  using Handler = std::function<AfterRequest(const ReceivedRequest&, LoopbackConnection&)>;
  /// Called for each accepted connection (0-based index) before anything
  /// is read; returning false closes it at once, unread.
  using AcceptHook = std::function<bool(int index)>;

  explicit LoopbackServer(Handler handler, AcceptHook on_accept = nullptr);
  ~LoopbackServer();
  LoopbackServer(const LoopbackServer&) = delete;
  LoopbackServer& operator=(const LoopbackServer&) = delete;

  /// Connections the accept hook refuses are reset (RST) rather than
  /// closed, once the client's first bytes have arrived (waiting up to 1 s),
  /// without reading them: "reset before the request is read". Their bytes
  /// count in `bytes_received()`. Call before the first connection.
  void ResetRefusedConnections() { reset_refused_.store(true); }

  int port() const { return port_; }
  /// "http://127.0.0.1:<port><path>".
  std::string Url(std::string_view path) const;
  /// Every complete request read so far, in arrival order.
  std::vector<ReceivedRequest> requests() const;
  /// Connections accepted so far.
  int connections() const { return accepted_.load(); }
  /// Connections the server has closed or reset so far.
  int closed_connections() const { return closed_.load(); }
  /// Bytes that reached the server on every connection: read, or waiting
  /// unread when a refused connection was reset.
  std::size_t bytes_received() const { return bytes_.load(); }

  /// An HTTP/1.1 response with Content-Length and the given headers.
  static std::string Reply(int status, const Headers& headers, std::string_view body);
  /// A chunked HTTP/1.1 response; each element of `chunks` is one chunk.
  static std::string ChunkedReply(int status, const Headers& headers,
                                  const std::vector<std::string>& chunks);

 private:
  void AcceptLoop();
  void Serve(int fd, int index);
  void ResetUnread(int fd);

  Handler handler_;
  AcceptHook on_accept_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> accepted_{0};
  std::atomic<int> closed_{0};
  std::atomic<std::size_t> bytes_{0};
  std::atomic<bool> reset_refused_{false};
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::vector<ReceivedRequest> requests_;  // Guarded by mu_.
  std::vector<int> open_fds_;              // Guarded by mu_.
  std::vector<std::thread> workers_;       // Guarded by mu_.
};

}  // namespace testkit
}  // namespace saferetry

#endif  // SAFERETRY_TESTS_INTEGRATION_LOOPBACK_SERVER_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "loopback_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

namespace saferetry {
namespace testkit {
namespace {

char Lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool SameName(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (Lower(a[i]) != Lower(b[i])) return false;
  }
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 204:
      return "No Content";
    case 302:
      return "Found";
    case 307:
      return "Temporary Redirect";
    case 404:
      return "Not Found";
    case 409:
      return "Conflict";
    case 422:
      return "Unprocessable Content";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

}  // namespace

std::optional<std::string> ReceivedRequest::Header(std::string_view name) const {
  for (const auto& h : headers) {
    if (SameName(h.first, name)) return h.second;
  }
  return std::nullopt;
}

bool LoopbackConnection::Write(std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

bool LoopbackConnection::WaitForPeerClose(std::chrono::milliseconds timeout) {
  pollfd p{fd_, POLLIN, 0};
  auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[256];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) return true;  // EOF, reset, or shut down by the server's stop.
  }
}

bool LoopbackConnection::WriteSlowly(const std::vector<std::string>& pieces,
                                     std::chrono::milliseconds gap) {
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    if (i > 0) std::this_thread::sleep_for(gap);
    if (!Write(pieces[i])) return false;
  }
  return true;
}

namespace {

// SO_LINGER with a zero timeout: close() then sends RST, not FIN.
void SetAbortiveClose(int fd) {
  linger l{};
  l.l_onoff = 1;
  l.l_linger = 0;
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
}

}  // namespace

void LoopbackServer::ResetUnread(int fd) {
  pollfd p{fd, POLLIN, 0};
  int r;
  do {
    r = ::poll(&p, 1, 1000);
  } while (r < 0 && errno == EINTR);
  int waiting = 0;
  if (r > 0 && ::ioctl(fd, FIONREAD, &waiting) == 0 && waiting > 0) {
    bytes_.fetch_add(static_cast<std::size_t>(waiting));
  }
  SetAbortiveClose(fd);
}

LoopbackServer::LoopbackServer(Handler handler, AcceptHook on_accept)
    : handler_(std::move(handler)), on_accept_(std::move(on_accept)) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) std::abort();
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listen_fd_, 64) != 0) {
    std::perror("loopback server");
    std::abort();
  }
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

LoopbackServer::~LoopbackServer() {
  stopping_.store(true);
  acceptor_.join();
  ::close(listen_fd_);
  std::vector<std::thread> workers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);  // Wakes blocked reads.
    workers.swap(workers_);
  }
  for (auto& t : workers) t.join();
}

std::string LoopbackServer::Url(std::string_view path) const {
  return "http://127.0.0.1:" + std::to_string(port_) + std::string(path);
}

std::vector<ReceivedRequest> LoopbackServer::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}

std::string LoopbackServer::Reply(int status, const Headers& headers, std::string_view body) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + Reason(status) + "\r\n";
  for (const auto& h : headers) out += h.first + ": " + h.second + "\r\n";
  out += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  out.append(body.data(), body.size());
  return out;
}

std::string LoopbackServer::ChunkedReply(int status, const Headers& headers,
                                         const std::vector<std::string>& chunks) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + Reason(status) + "\r\n";
  for (const auto& h : headers) out += h.first + ": " + h.second + "\r\n";
  out += "Transfer-Encoding: chunked\r\n\r\n";
  char size[32];
  for (const auto& c : chunks) {
    std::snprintf(size, sizeof(size), "%zx\r\n", c.size());
    out += size;
    out += c;
    out += "\r\n";
  }
  out += "0\r\n\r\n";
  return out;
}

void LoopbackServer::AcceptLoop() {
  while (!stopping_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    int r = ::poll(&p, 1, 20);
    if (r <= 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    const int index = accepted_.fetch_add(1);
    if (on_accept_ && !on_accept_(index)) {
      if (reset_refused_.load()) ResetUnread(fd);
      ::close(fd);  // Accepted, closed (or reset) without reading a byte.
      closed_.fetch_add(1);
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    open_fds_.push_back(fd);
    workers_.emplace_back([this, fd, index] { Serve(fd, index); });
  }
}

void LoopbackServer::Serve(int fd, int index) {
  LoopbackConnection conn(fd, index);
  std::string buf;
  char chunk[16384];
  auto fill = [&]() -> bool {
    ssize_t n;
    do {
      n = ::recv(fd, chunk, sizeof(chunk), 0);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) return false;
    bytes_.fetch_add(static_cast<std::size_t>(n));
    buf.append(chunk, static_cast<std::size_t>(n));
    return true;
  };
  AfterRequest after = AfterRequest::kClose;
  for (;;) {
    std::size_t end;
    while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
      if (!fill()) goto done;
    }
    ReceivedRequest req;
    req.connection = index;
    {
      std::string_view head(buf.data(), end);
      std::size_t eol = head.find("\r\n");
      std::string_view line = head.substr(0, eol);
      std::size_t sp1 = line.find(' ');
      std::size_t sp2 = line.rfind(' ');
      if (sp1 == std::string_view::npos || sp2 == sp1) goto done;
      req.method = std::string(line.substr(0, sp1));
      req.target = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
      std::string_view rest =
          eol == std::string_view::npos ? std::string_view() : head.substr(eol + 2);
      while (!rest.empty()) {
        std::size_t e = rest.find("\r\n");
        std::string_view h = rest.substr(0, e);
        rest = e == std::string_view::npos ? std::string_view() : rest.substr(e + 2);
        std::size_t colon = h.find(':');
        if (colon == std::string_view::npos) continue;
        req.headers.emplace_back(std::string(h.substr(0, colon)),
                                 std::string(Trim(h.substr(colon + 1))));
      }
    }
    buf.erase(0, end + 4);
    std::size_t length = 0;
    if (auto cl = req.Header("Content-Length")) length = std::strtoull(cl->c_str(), nullptr, 10);
    while (buf.size() < length) {
      if (!fill()) goto done;  // Closed mid-body: not a complete request, not recorded.
    }
    req.body = buf.substr(0, length);
    buf.erase(0, length);
    {
      std::lock_guard<std::mutex> lock(mu_);
      requests_.push_back(req);
    }
    after = handler_(req, conn);
    if (after != AfterRequest::kKeepAlive) break;
    if (stopping_.load()) break;
  }
done : {
  std::lock_guard<std::mutex> lock(mu_);
  open_fds_.erase(std::remove(open_fds_.begin(), open_fds_.end(), fd), open_fds_.end());
}
  if (after == AfterRequest::kReset) SetAbortiveClose(fd);
  ::close(fd);
  closed_.fetch_add(1);
}

int UnusedLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

FullBacklogListener::FullBacklogListener() {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listen_fd_, 0) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return;
  }
  port_ = ntohs(addr.sin_port);
  // Connects of its own until one hangs: the queue (one or two entries for
  // a backlog of 0) is then full. Bounded: at most 8 connects, 300 ms each.
  for (int i = 0; i < 8 && !full_; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd < 0) return;
    fillers_.push_back(fd);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) continue;
    if (errno != EINPROGRESS) return;
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, 300) == 0) full_ = true;
  }
}

FullBacklogListener::~FullBacklogListener() {
  for (int fd : fillers_) ::close(fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

std::string FullBacklogListener::Url(std::string_view path) const {
  return "http://127.0.0.1:" + std::to_string(port_) + std::string(path);
}

}  // namespace testkit
}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "orders_service/fault_proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "orders_service/http_wire.h"

namespace saferetry {
namespace example {

namespace {

absl::string_view AbslView(std::string_view s) { return absl::string_view(s.data(), s.size()); }

constexpr std::size_t kMaxBody = 16 * 1024 * 1024;

void SetNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void SetRecvTimeout(int fd, std::chrono::milliseconds d) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(d.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((d.count() % 1000) * 1000);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

bool ToAddress(const std::string& host, int port, sockaddr_in* addr) {
  *addr = sockaddr_in{};
  addr->sin_family = AF_INET;
  addr->sin_port = htons(static_cast<std::uint16_t>(port));
  return inet_pton(AF_INET, host.c_str(), &addr->sin_addr) == 1;
}

absl::Status CheckProbability(double p, std::string_view name) {
  if (!(p >= 0 && p <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("faults.", AbslView(name), ": must be in [0, 1], got ", p));
  }
  return absl::OkStatus();
}

// The request as the service sees it: one request per upstream connection
// (so an idle keep-alive connection the service closed can never swallow a
// request), and no Expect, since the proxy already answered it.
std::string UpstreamRequestHead(HttpHead head) {
  for (const char* h : {"Connection", "Keep-Alive", "Proxy-Connection", "Expect"}) head.Remove(h);
  head.headers.emplace_back("Connection", "close");
  return head.Serialize();
}

std::string ErrorResponse(int status, std::string_view reason, std::string_view extra_header,
                          std::string_view body) {
  return absl::StrCat("HTTP/1.1 ", status, " ", AbslView(reason), "\r\n", AbslView(extra_header),
                      "Content-Type: application/json\r\nContent-Length: ", body.size(),
                      "\r\nConnection: close\r\n\r\n", AbslView(body));
}

}  // namespace

std::string_view FaultKindName(FaultKind kind) {
  switch (kind) {
    case FaultKind::kNone:
      return "none";
    case FaultKind::kDelay:
      return "delay";
    case FaultKind::kUnavailable:
      return "503";
    case FaultKind::kResetBeforeCommit:
      return "reset";
    case FaultKind::kDropAfterCommit:
      return "drop";
    case FaultKind::kHangAfterCommit:
      return "hang";
  }
  return "none";
}

absl::StatusOr<FaultKind> ParseFaultKind(std::string_view name) {
  for (FaultKind k :
       {FaultKind::kNone, FaultKind::kDelay, FaultKind::kUnavailable, FaultKind::kResetBeforeCommit,
        FaultKind::kDropAfterCommit, FaultKind::kHangAfterCommit}) {
    if (FaultKindName(k) == name) return k;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "fault: expected none, delay, 503, reset, drop or hang, got \"", AbslView(name), "\""));
}

absl::Status ValidateFaultOptions(const FaultOptions& o) {
  const std::pair<double, const char*> probabilities[] = {
      {o.reset_before_commit, "reset_before_commit"},
      {o.unavailable, "unavailable"},
      {o.drop_after_commit, "drop_after_commit"},
      {o.hang_after_commit, "hang_after_commit"},
      {o.delay, "delay"}};
  double sum = 0;
  for (const auto& [p, name] : probabilities) {
    if (auto s = CheckProbability(p, name); !s.ok()) return s;
    sum += p;
  }
  if (sum > 1 + 1e-9) {
    return absl::InvalidArgumentError(
        absl::StrCat("faults: probabilities sum to ", sum, ", must be <= 1"));
  }
  if (o.delay_duration.count() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("faults.delay_duration: must be >= 0, got ", o.delay_duration.count(), "ms"));
  }
  if (o.retry_after_seconds < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("faults.retry_after_seconds: must be >= 0, got ", o.retry_after_seconds));
  }
  if (o.hang_limit.count() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("faults.hang_limit: must be > 0, got ", o.hang_limit.count(), "ms"));
  }
  return absl::OkStatus();
}

FaultDecider::FaultDecider(FaultOptions options)
    : options_(std::move(options)), engine_(options_.seed) {}

bool FaultDecider::Matches(std::string_view method, std::string_view target) const {
  if (!options_.methods.empty() &&
      std::none_of(options_.methods.begin(), options_.methods.end(), [&](const std::string& m) {
        return absl::EqualsIgnoreCase(m, AbslView(method));
      })) {
    return false;
  }
  return absl::StartsWith(AbslView(target), options_.path_prefix);
}

FaultKind FaultDecider::Next() {
  std::lock_guard<std::mutex> lock(mu_);
  if (script_pos_ < options_.script.size()) return options_.script[script_pos_++];
  // 53 random bits: a uniform double in [0, 1).
  const double u = static_cast<double>(engine_() >> 11) * 0x1.0p-53;
  double edge = 0;
  const std::pair<double, FaultKind> bands[] = {
      {options_.reset_before_commit, FaultKind::kResetBeforeCommit},
      {options_.unavailable, FaultKind::kUnavailable},
      {options_.drop_after_commit, FaultKind::kDropAfterCommit},
      {options_.hang_after_commit, FaultKind::kHangAfterCommit},
      {options_.delay, FaultKind::kDelay}};
  for (const auto& [p, kind] : bands) {
    edge += p;
    if (u < edge) return kind;
  }
  return FaultKind::kNone;
}

absl::StatusOr<std::unique_ptr<FaultProxy>> FaultProxy::Start(ProxyOptions options) {
  if (auto s = ValidateFaultOptions(options.faults); !s.ok()) return s;
  if (options.max_connections <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_connections: must be > 0, got ", options.max_connections));
  }
  if (options.idle_timeout.count() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("idle_timeout: must be > 0, got ", options.idle_timeout.count(), "ms"));
  }
  sockaddr_in upstream;
  if (options.upstream_ports.empty()) {
    if (options.upstream_port <= 0 || options.upstream_port > 65535 ||
        !ToAddress(options.upstream_host, options.upstream_port, &upstream)) {
      return absl::InvalidArgumentError(
          absl::StrCat("upstream_port: need an IPv4 host and a port "
                       "in 1..65535, got ",
                       options.upstream_host, ":", options.upstream_port));
    }
    options.upstream_ports = {options.upstream_port};
  } else {
    if (options.upstream_port != 0) {
      return absl::InvalidArgumentError(
          "upstream_ports: set either upstream_port or upstream_ports, not both");
    }
    for (std::size_t i = 0; i < options.upstream_ports.size(); ++i) {
      const int p = options.upstream_ports[i];
      if (p <= 0 || p > 65535 || !ToAddress(options.upstream_host, p, &upstream)) {
        return absl::InvalidArgumentError(
            absl::StrCat("upstream_ports[", i, "]: need an IPv4 host and a port in 1..65535, got ",
                         options.upstream_host, ":", p));
      }
    }
  }
  sockaddr_in addr;
  if (options.listen_port < 0 || options.listen_port > 65535 ||
      !ToAddress(options.listen_host, options.listen_port, &addr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen_port: need an IPv4 host and a port "
                     "in 0..65535, got ",
                     options.listen_host, ":", options.listen_port));
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError("socket() failed");
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 128) != 0) {
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen_host, ":", options.listen_port));
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  std::unique_ptr<FaultProxy> proxy(new FaultProxy(std::move(options), fd, port));
  proxy->acceptor_ = std::thread([p = proxy.get()] { p->AcceptLoop(); });
  return proxy;
}

FaultProxy::FaultProxy(ProxyOptions options, int listen_fd, int port)
    : options_(std::move(options)),
      decider_(options_.faults),
      listen_fd_(listen_fd),
      port_(port),
      sent_per_upstream_(options_.upstream_ports.size(), 0) {}

FaultProxy::~FaultProxy() { Stop(); }

void FaultProxy::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      stopping_ = true;
      // Wakes accept() and every blocked recv()/poll() of the workers.
      shutdown(listen_fd_, SHUT_RDWR);
      for (int fd : fds_) shutdown(fd, SHUT_RDWR);
    }
  }
  cv_.notify_all();
  if (acceptor_.joinable()) acceptor_.join();
  std::list<Worker> workers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    workers.swap(workers_);
  }
  for (Worker& w : workers) w.thread.join();
  std::lock_guard<std::mutex> lock(mu_);
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    listen_fd_ = -1;
  }
}

ProxyCounters FaultProxy::counters() const {
  ProxyCounters c;
  c.connections = counters_.connections.load();
  c.requests_seen = counters_.requests_seen.load();
  c.requests_matched = counters_.requests_matched.load();
  c.forwarded = counters_.forwarded.load();
  c.delayed = counters_.delayed.load();
  c.unavailable = counters_.unavailable.load();
  c.reset_before_commit = counters_.reset_before_commit.load();
  c.drop_after_commit = counters_.drop_after_commit.load();
  c.hang_after_commit = counters_.hang_after_commit.load();
  c.upstream_errors = counters_.upstream_errors.load();
  std::lock_guard<std::mutex> lock(mu_);
  c.sent_per_upstream = sent_per_upstream_;
  return c;
}

std::vector<FaultKind> FaultProxy::history() const {
  std::lock_guard<std::mutex> lock(mu_);
  return history_;
}

void FaultProxy::AcceptLoop() {
  for (;;) {
    {
      // Bounded: wait for a free slot before taking the next client.
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || active_ < options_.max_connections; });
      if (stopping_) return;
      // Join the workers that have finished.
      for (auto it = workers_.begin(); it != workers_.end();) {
        if (it->done->load()) {
          it->thread.join();
          it = workers_.erase(it);
        } else {
          ++it;
        }
      }
    }
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // shut down by Stop(), or the socket is broken
    }
    SetNoDelay(fd);
    SetRecvTimeout(fd, options_.idle_timeout);
    if (!Track(fd)) {
      close(fd);
      return;
    }
    counters_.connections++;
    auto done = std::make_shared<std::atomic<bool>>(false);
    std::lock_guard<std::mutex> lock(mu_);
    ++active_;
    workers_.push_back(Worker{std::thread([this, fd, done] {
                                Serve(fd);
                                {
                                  std::lock_guard<std::mutex> l(mu_);
                                  --active_;
                                }
                                cv_.notify_all();
                                done->store(true);
                              }),
                              done});
  }
}

bool FaultProxy::Track(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return false;
  fds_.insert(fd);
  return true;
}

void FaultProxy::CloseFd(int fd, bool reset) {
  if (reset) {
    // SO_LINGER with a zero timeout makes close() send RST, not FIN.
    linger l{1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  }
  // Under the lock, so Stop() never shuts down a number already reused.
  std::lock_guard<std::mutex> lock(mu_);
  fds_.erase(fd);
  close(fd);
}

bool FaultProxy::WaitFor(std::chrono::milliseconds d) {
  std::unique_lock<std::mutex> lock(mu_);
  return !cv_.wait_for(lock, d, [&] { return stopping_; });
}

int FaultProxy::ConnectUpstream() {
  // One turn per request. A refused connect sent nothing, so handing the
  // request to the next instance cannot duplicate an effect.
  const std::size_t n = options_.upstream_ports.size();
  const std::size_t first = static_cast<std::size_t>(next_upstream_.fetch_add(1) % n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t u = (first + i) % n;
    const int fd = ConnectTo(options_.upstream_ports[u]);
    if (fd >= 0) {
      std::lock_guard<std::mutex> lock(mu_);
      ++sent_per_upstream_[u];
      return fd;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return -1;
  }
  return -1;
}

int FaultProxy::ConnectTo(int port) {
  sockaddr_in addr;
  ToAddress(options_.upstream_host, port, &addr);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  SetNoDelay(fd);
  SetRecvTimeout(fd, options_.idle_timeout);
  if (!Track(fd)) {
    close(fd);
    return -1;
  }
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    CloseFd(fd, false);
    return -1;
  }
  return fd;
}

void FaultProxy::HoldUntilClientGone(int client_fd) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point until = Clock::now() + options_.faults.hang_limit;
  char scratch[4096];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0) return;
    pollfd p{client_fd, POLLIN, 0};
    int n = poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left, 1000)));
    if (n < 0 && errno != EINTR) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
    }
    if (n > 0) {
      // Data (ignored) or the client closing (0 / error).
      if (recv(client_fd, scratch, sizeof(scratch), MSG_DONTWAIT) <= 0) return;
    }
  }
}

void FaultProxy::Serve(int client_fd) {
  WireReader client(client_fd);
  for (;;) {
    HttpHead request;
    if (ReadHead(client, &request) != ReadResult::kOk) break;
    counters_.requests_seen++;
    const std::string method = request.Method();
    if (method.empty()) {
      WriteAll(client_fd, ErrorResponse(400, "Bad Request", "", R"({"error":"bad_request"})"));
      break;
    }
    // Answer "Expect: 100-continue" here: the request is forwarded whole.
    if (request.HasToken("Expect", "100-continue") &&
        !WriteAll(client_fd, "HTTP/1.1 100 Continue\r\n\r\n")) {
      break;
    }
    std::string body;
    if (ReadBody(client, RequestFraming(request), kMaxBody, &body) != ReadResult::kOk) break;
    const bool client_wants_close = request.HasToken("Connection", "close");

    FaultKind fault = FaultKind::kNone;
    if (decider_.Matches(method, request.Target())) {
      counters_.requests_matched++;
      fault = decider_.Next();
      std::lock_guard<std::mutex> lock(mu_);
      if (history_.size() < 100000) history_.push_back(fault);
    }

    // Faults that act before the service sees anything.
    if (fault == FaultKind::kResetBeforeCommit) {
      counters_.reset_before_commit++;
      return CloseFd(client_fd, /*reset=*/true);
    }
    if (fault == FaultKind::kUnavailable) {
      counters_.unavailable++;
      WriteAll(client_fd,
               ErrorResponse(503, "Service Unavailable",
                             // Sent without forwarding: this attempt certainly
                             // had no effect, and the answer says so.
                             absl::StrCat("Retry-After: ", options_.faults.retry_after_seconds,
                                          "\r\nIdempotency-Key-State: rejected\r\n"),
                             R"({"error":"unavailable","message":"injected by the fault proxy"})"));
      return CloseFd(client_fd, false);
    }
    if (fault == FaultKind::kDelay) {
      counters_.delayed++;
      if (!WaitFor(options_.faults.delay_duration)) break;
    }

    // Forward and read the complete answer: from here on the effect may exist.
    const int upstream_fd = ConnectUpstream();
    if (upstream_fd < 0) {
      counters_.upstream_errors++;
      WriteAll(client_fd,
               ErrorResponse(502, "Bad Gateway", "", R"({"error":"upstream_unreachable"})"));
      break;
    }
    WireReader upstream(upstream_fd);
    HttpHead response;
    std::string response_body;
    bool ok = WriteAll(upstream_fd, UpstreamRequestHead(request) + body);
    while (ok) {
      response = HttpHead{};
      ok = ReadHead(upstream, &response) == ReadResult::kOk && response.StatusCode() != 0;
      if (!ok || response.StatusCode() >= 200) break;
      // Interim 1xx answers have no body; skip them (101 is not supported).
    }
    if (ok) {
      ok = ReadBody(upstream, ResponseFraming(response, method), kMaxBody, &response_body) ==
           ReadResult::kOk;
    }
    const bool until_close = ResponseFraming(response, method).kind == BodyFraming::kUntilClose;
    CloseFd(upstream_fd, false);
    if (!ok) {
      // The service may or may not have acted; the client learns nothing more.
      counters_.upstream_errors++;
      return CloseFd(client_fd, /*reset=*/true);
    }
    counters_.forwarded++;

    if (fault == FaultKind::kDropAfterCommit) {
      counters_.drop_after_commit++;
      return CloseFd(client_fd, /*reset=*/true);
    }
    if (fault == FaultKind::kHangAfterCommit) {
      counters_.hang_after_commit++;
      HoldUntilClientGone(client_fd);
      return CloseFd(client_fd, false);
    }

    const bool close_after = client_wants_close || until_close;
    for (const char* h : {"Connection", "Keep-Alive"}) response.Remove(h);
    if (until_close) {
      // Re-frame a close-delimited body so the client can reuse nothing by mistake.
      response.headers.emplace_back("Content-Length", std::to_string(response_body.size()));
    }
    if (close_after) response.headers.emplace_back("Connection", "close");
    if (!WriteAll(client_fd, response.Serialize() + response_body) || close_after) break;
  }
  CloseFd(client_fd, false);
}

}  // namespace example
}  // namespace saferetry

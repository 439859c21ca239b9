// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// A loopback HTTP/1.1 server for the asynchronous benchmark, in its own
// process so that its CPU time and threads are not the client's: one thread,
// epoll, non-blocking sockets, keep-alive. Every request is answered
// `--delay-ms` after it was read (timers in a min-heap of deadlines, driven
// by epoll_wait's timeout; 0 answers at once) with a fixed 200 and a 2-byte
// body. Requests on one connection are answered in order, one at a time.
//
//   async_loopback_server [--delay-ms N] [--max-connections N] [--ports K]
//
// Prints `port=NNNN` on stdout once listening (127.0.0.1, an ephemeral
// port); with `--ports K` (default 1) it listens on K ephemeral ports and
// prints them all on that line, comma-separated (`port=N1,N2,...`): a
// client with many connections can spread them over several host:port
// pairs. Exits on SIGTERM, SIGINT or when stdin reaches EOF (so it dies with
// the process that started it), after printing one line
// `stats accepted=A requests=R answered=N max_open=O max_pending=P refused=F
// closed_bad=B` on stdout: `answered` counts answers queued for sending (a
// connection closed by its peer before its answer was due gets none);
// `max_pending` is the most requests waiting for their delay at once. Bounded: a connection whose
// buffered input passes 64 KiB, or whose request is malformed or chunked, is closed; connections
// beyond
// `--max-connections` are closed at once.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <queue>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr std::size_t kMaxBuffered = 64 * 1024;  // Per connection, input and output.
constexpr char kReply[] =
    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok";
// epoll tags: a connection is (generation << 32 | fd), generations below
// 0xffffffff; the listeners, the signal and stdin use that generation.
constexpr std::uint64_t kSpecial = std::uint64_t{0xffffffff} << 32;
constexpr std::uint64_t kSignalTag = kSpecial | 0xffffffffu;
constexpr std::uint64_t kStdinTag = kSpecial | 0xfffffffeu;

std::int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "async_loopback_server: %s: %s\n", what, std::strerror(errno));
  std::exit(2);
}

bool ParseCount(const char* s, long max, long* out) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < 0 || v > max) return false;
  *out = v;
  return true;
}

struct Conn {
  int fd = -1;
  std::uint32_t generation = 0;
  std::string in;
  std::string out;
  std::size_t out_sent = 0;
  bool waiting = false;      // A request read, its answer not yet due.
  bool close_after = false;  // The request being answered asked to close.
  bool want_write = false;   // EPOLLOUT registered.
};

struct Due {
  std::int64_t at_ns;
  int fd;
  std::uint32_t generation;
  bool operator>(const Due& o) const { return at_ns > o.at_ns; }
};

// ASCII case-insensitive prefix match.
bool StartsWithNoCase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    char a = s[i], b = prefix[i];
    if (a >= 'A' && a <= 'Z') a = static_cast<char>(a - 'A' + 'a');
    if (b >= 'A' && b <= 'Z') b = static_cast<char>(b - 'A' + 'a');
    if (a != b) return false;
  }
  return true;
}

std::string_view Trim(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

enum class Parse { kIncomplete, kRequest, kBad };

// One request at the front of `in`: its total length (headers and body) and
// whether it asks to close the connection.
Parse ParseRequest(const std::string& in, std::size_t* length, bool* close) {
  const std::size_t end = in.find("\r\n\r\n");
  if (end == std::string::npos) return in.size() > kMaxBuffered ? Parse::kBad : Parse::kIncomplete;
  const std::string_view head(in.data(), end);
  const std::size_t line_end = head.find("\r\n");
  const std::string_view request_line = head.substr(0, line_end);
  // METHOD SP TARGET SP HTTP/1.x
  const std::size_t sp1 = request_line.find(' ');
  const std::size_t sp2 = request_line.rfind(' ');
  if (sp1 == std::string_view::npos || sp1 == 0 || sp2 == sp1 ||
      request_line.substr(sp2 + 1).substr(0, 7) != "HTTP/1.") {
    return Parse::kBad;
  }
  std::uint64_t content_length = 0;
  *close = request_line.substr(sp2 + 1) == "HTTP/1.0";
  std::size_t pos = line_end == std::string_view::npos ? head.size() : line_end + 2;
  while (pos < head.size()) {
    std::size_t next = head.find("\r\n", pos);
    if (next == std::string_view::npos) next = head.size();
    const std::string_view line = head.substr(pos, next - pos);
    pos = next + 2;
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) return Parse::kBad;
    const std::string_view value = Trim(line.substr(colon + 1));
    const std::string_view name = line.substr(0, colon);
    if (name.size() == 14 && StartsWithNoCase(name, "content-length")) {
      if (value.empty() || value.size() > 9) return Parse::kBad;  // Bodies stay < 1 GB.
      content_length = 0;
      for (char c : value) {
        if (c < '0' || c > '9') return Parse::kBad;
        content_length = content_length * 10 + static_cast<std::uint64_t>(c - '0');
      }
    } else if (name.size() == 17 && StartsWithNoCase(name, "transfer-encoding")) {
      return Parse::kBad;  // Chunked uploads are not part of this benchmark.
    } else if (name.size() == 10 && StartsWithNoCase(name, "connection")) {
      if (StartsWithNoCase(value, "close")) *close = true;
      if (StartsWithNoCase(value, "keep-alive")) *close = false;
    }
  }
  if (content_length > kMaxBuffered) return Parse::kBad;
  const std::size_t total = end + 4 + static_cast<std::size_t>(content_length);
  if (in.size() < total) return Parse::kIncomplete;
  *length = total;
  return Parse::kRequest;
}

class Server {
 public:
  Server(long delay_ms, long max_connections, long ports)
      : delay_ns_(delay_ms * 1000000), max_connections_(max_connections), ports_(ports) {}

  int Run() {
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    if (sigprocmask(SIG_BLOCK, &mask, nullptr) != 0) Die("sigprocmask");
    signal(SIGPIPE, SIG_IGN);
    const int sigfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sigfd < 0) Die("signalfd");

    epfd_ = epoll_create1(EPOLL_CLOEXEC);
    if (epfd_ < 0) Die("epoll_create1");
    std::string port_line = "port=";
    for (long i = 0; i < ports_; ++i) {
      const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) Die("socket");
      int one = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = 0;
      if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) Die("bind");
      // Capped by net.core.somaxconn.
      if (listen(fd, 65535) != 0) Die("listen");
      socklen_t len = sizeof(a);
      if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) Die("getsockname");
      if (i > 0) port_line.push_back(',');
      port_line += std::to_string(ntohs(a.sin_port));
      listen_fds_.push_back(fd);
      Add(fd, EPOLLIN, kSpecial | static_cast<std::uint64_t>(i));
    }
    // Spare descriptor: on EMFILE it is closed to accept and drop one
    // connection, so a full table cannot spin the loop.
    spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);

    Add(sigfd, EPOLLIN, kSignalTag);
    // stdin may be a pipe (EOF ends the server) or /dev/null-like files that
    // epoll refuses; then only the signals end it.
    const int stdin_flags = fcntl(0, F_GETFL);
    if (stdin_flags >= 0) fcntl(0, F_SETFL, stdin_flags | O_NONBLOCK);
    epoll_event sev{};
    sev.events = EPOLLIN;
    sev.data.u64 = kStdinTag;
    const bool watch_stdin = epoll_ctl(epfd_, EPOLL_CTL_ADD, 0, &sev) == 0;

    std::printf("%s\n", port_line.c_str());
    std::fflush(stdout);

    std::vector<epoll_event> events(1024);
    bool running = true;
    while (running) {
      int timeout_ms = -1;
      if (!due_.empty()) {
        const std::int64_t left = due_.top().at_ns - NowNs();
        timeout_ms = left <= 0 ? 0 : static_cast<int>((left + 999999) / 1000000);
      }
      const int n = epoll_wait(epfd_, events.data(), static_cast<int>(events.size()), timeout_ms);
      if (n < 0 && errno != EINTR) Die("epoll_wait");
      for (int i = 0; i < n; ++i) {
        const epoll_event& ev = events[static_cast<std::size_t>(i)];
        if (ev.data.u64 == kSignalTag) {
          running = false;
        } else if (ev.data.u64 == kStdinTag) {
          char buf[256];
          const ssize_t r = read(0, buf, sizeof(buf));
          if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) running = false;
        } else if ((ev.data.u64 & kSpecial) == kSpecial) {
          AcceptAll(listen_fds_[static_cast<std::size_t>(ev.data.u64 & 0xffffffffu)]);
        } else {
          OnConn(static_cast<int>(ev.data.u64 & 0xffffffffu),
                 static_cast<std::uint32_t>(ev.data.u64 >> 32), ev.events);
        }
      }
      if (n == static_cast<int>(events.size()) && events.size() < 65536) {
        events.resize(events.size() * 2);
      }
      FireDue();
    }
    (void)watch_stdin;
    std::printf(
        "stats accepted=%llu requests=%llu answered=%llu max_open=%zu max_pending=%zu "
        "refused=%llu closed_bad=%llu\n",
        static_cast<unsigned long long>(accepted_), static_cast<unsigned long long>(requests_),
        static_cast<unsigned long long>(answered_), max_open_, max_pending_,
        static_cast<unsigned long long>(refused_), static_cast<unsigned long long>(closed_bad_));
    std::fflush(stdout);
    return 0;
  }

 private:
  void Add(int fd, std::uint32_t events, std::uint64_t tag) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = tag;
    if (epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) Die("epoll_ctl ADD");
  }

  static std::uint64_t Tag(const Conn& c) {
    return (static_cast<std::uint64_t>(c.generation) << 32) | static_cast<std::uint32_t>(c.fd);
  }

  void AcceptAll(int listen_fd) {
    for (;;) {
      const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if ((errno == EMFILE || errno == ENFILE) && spare_fd_ >= 0) {
          if (!warned_emfile_) {
            std::fprintf(stderr,
                         "async_loopback_server: out of file descriptors (%s); raise "
                         "RLIMIT_NOFILE or --max-connections\n",
                         std::strerror(errno));
            warned_emfile_ = true;
          }
          close(spare_fd_);
          const int dropped = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
          if (dropped >= 0) close(dropped);
          ++refused_;
          spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
          continue;
        }
        return;  // EAGAIN, or an error the next readiness retries.
      }
      if (static_cast<long>(open_) >= max_connections_) {
        close(fd);
        ++refused_;
        continue;
      }
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      if (static_cast<std::size_t>(fd) >= conns_.size())
        conns_.resize(static_cast<std::size_t>(fd) + 1024);
      auto c = std::make_unique<Conn>();
      c->fd = fd;
      if (++next_generation_ == 0xffffffffu) next_generation_ = 1;
      c->generation = next_generation_;
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.u64 = Tag(*c);
      if (epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
        close(fd);
        continue;
      }
      conns_[static_cast<std::size_t>(fd)] = std::move(c);
      ++accepted_;
      ++open_;
      if (open_ > max_open_) max_open_ = open_;
    }
  }

  Conn* Find(int fd, std::uint32_t generation) {
    if (fd < 0 || static_cast<std::size_t>(fd) >= conns_.size()) return nullptr;
    Conn* c = conns_[static_cast<std::size_t>(fd)].get();
    return (c != nullptr && c->generation == generation) ? c : nullptr;
  }

  void Close(Conn& c) {
    if (c.waiting) --pending_;
    epoll_ctl(epfd_, EPOLL_CTL_DEL, c.fd, nullptr);
    close(c.fd);
    --open_;
    conns_[static_cast<std::size_t>(c.fd)].reset();  // Destroys c.
  }

  void OnConn(int fd, std::uint32_t generation, std::uint32_t events) {
    Conn* c = Find(fd, generation);
    if (c == nullptr) return;
    if ((events & EPOLLIN) != 0) {
      char buf[16384];
      for (;;) {
        const ssize_t r = read(c->fd, buf, sizeof(buf));
        if (r > 0) {
          c->in.append(buf, static_cast<std::size_t>(r));
          if (c->in.size() > kMaxBuffered) {
            ++closed_bad_;
            Close(*c);
            return;
          }
          if (static_cast<std::size_t>(r) < sizeof(buf)) break;
          continue;
        }
        if (r == 0) {  // The peer closed: pending answers are dropped.
          Close(*c);
          return;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        Close(*c);
        return;
      }
      if (!Process(*c)) return;
    } else if ((events & (EPOLLERR | EPOLLHUP)) != 0) {
      Close(*c);
      return;
    }
    if ((events & EPOLLOUT) != 0) Flush(*c);
  }

  // Handles the requests at the front of the input until one must wait for
  // its delay. False when the connection was closed.
  bool Process(Conn& c) {
    while (!c.waiting && !c.close_after) {
      std::size_t length = 0;
      bool close_requested = false;
      const Parse p = ParseRequest(c.in, &length, &close_requested);
      if (p == Parse::kIncomplete) break;
      if (p == Parse::kBad) {
        ++closed_bad_;
        Close(c);
        return false;
      }
      c.in.erase(0, length);
      ++requests_;
      c.close_after = close_requested;
      if (delay_ns_ == 0) {
        ++answered_;
        c.out.append(kReply, sizeof(kReply) - 1);
        continue;
      }
      c.waiting = true;
      ++pending_;
      if (pending_ > max_pending_) max_pending_ = pending_;
      due_.push(Due{NowNs() + delay_ns_, c.fd, c.generation});
    }
    return Flush(c);
  }

  // Writes what is buffered; false when the connection was closed.
  bool Flush(Conn& c) {
    while (c.out_sent < c.out.size()) {
      const ssize_t w =
          send(c.fd, c.out.data() + c.out_sent, c.out.size() - c.out_sent, MSG_NOSIGNAL);
      if (w > 0) {
        c.out_sent += static_cast<std::size_t>(w);
        continue;
      }
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      Close(c);
      return false;
    }
    if (c.out_sent == c.out.size()) {
      c.out.clear();
      c.out_sent = 0;
      if (c.close_after && !c.waiting) {
        Close(c);
        return false;
      }
    } else if (c.out.size() - c.out_sent > kMaxBuffered) {
      ++closed_bad_;  // The peer does not read its answers.
      Close(c);
      return false;
    }
    const bool want = !c.out.empty();
    if (want != c.want_write) {
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP | (want ? EPOLLOUT : 0u);
      ev.data.u64 = Tag(c);
      epoll_ctl(epfd_, EPOLL_CTL_MOD, c.fd, &ev);
      c.want_write = want;
    }
    return true;
  }

  void FireDue() {
    if (due_.empty()) return;
    const std::int64_t now = NowNs();
    while (!due_.empty() && due_.top().at_ns <= now) {
      const Due d = due_.top();
      due_.pop();
      Conn* c = Find(d.fd, d.generation);
      if (c == nullptr || !c->waiting) continue;
      c->waiting = false;
      --pending_;
      ++answered_;
      c->out.append(kReply, sizeof(kReply) - 1);
      Process(*c);
    }
  }

  const std::int64_t delay_ns_;
  const long max_connections_;
  const long ports_;
  int epfd_ = -1;
  std::vector<int> listen_fds_;
  int spare_fd_ = -1;
  bool warned_emfile_ = false;
  std::vector<std::unique_ptr<Conn>> conns_;  // By descriptor.
  std::priority_queue<Due, std::vector<Due>, std::greater<Due>> due_;
  std::uint32_t next_generation_ = 0;
  std::size_t open_ = 0, max_open_ = 0, pending_ = 0, max_pending_ = 0;
  std::uint64_t accepted_ = 0, requests_ = 0, answered_ = 0, refused_ = 0, closed_bad_ = 0;
};

// Raises the soft RLIMIT_NOFILE to what `connections` need (plus a margin),
// up to the hard limit; false with a message when the hard limit is too low.
bool RaiseFileLimit(long connections) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) Die("getrlimit");
  const rlim_t need = static_cast<rlim_t>(connections) + 64;
  if (rl.rlim_cur >= need) return true;
  if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need) {
    std::fprintf(stderr,
                 "async_loopback_server: RLIMIT_NOFILE hard limit %llu is below the %llu "
                 "descriptors --max-connections %ld needs; raise it (ulimit -Hn, limits.conf) "
                 "or lower --max-connections\n",
                 static_cast<unsigned long long>(rl.rlim_max),
                 static_cast<unsigned long long>(need), connections);
    return false;
  }
  rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? need : rl.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
    std::fprintf(stderr, "async_loopback_server: setrlimit(RLIMIT_NOFILE, %llu): %s\n",
                 static_cast<unsigned long long>(rl.rlim_cur), std::strerror(errno));
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  long delay_ms = 0;
  long max_connections = 1024;
  long ports = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--delay-ms" && i + 1 < argc) {
      if (!ParseCount(argv[++i], 3600 * 1000, &delay_ms)) {
        std::fprintf(stderr, "async_loopback_server: --delay-ms: want 0..3600000\n");
        return 2;
      }
    } else if (arg == "--max-connections" && i + 1 < argc) {
      if (!ParseCount(argv[++i], 1000000, &max_connections) || max_connections < 1) {
        std::fprintf(stderr, "async_loopback_server: --max-connections: want 1..1000000\n");
        return 2;
      }
    } else if (arg == "--ports" && i + 1 < argc) {
      if (!ParseCount(argv[++i], 256, &ports) || ports < 1) {
        std::fprintf(stderr, "async_loopback_server: --ports: want 1..256\n");
        return 2;
      }
    } else {
      std::fprintf(stderr,
                   "usage: async_loopback_server [--delay-ms N] [--max-connections N] "
                   "[--ports K]\n");
      return 2;
    }
  }
  if (!RaiseFileLimit(max_connections + ports)) return 2;
  Server server(delay_ms, max_connections, ports);
  return server.Run();
}

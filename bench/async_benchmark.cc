// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The asynchronous client under load: many calls in flight on one event
// loop, what each costs in memory, and its throughput against a plain
// libcurl multi loop. The HTTP server is `async_loopback_server`, a separate
// process (started from the directory of this executable), so that its CPU
// time, threads and memory are not the client's.
//
//   1. In flight: `--calls` GETs (default 10 000), ramped up in batches,
//      each answered after `--delay-ms` (default 8000), all waiting at once
//      on one AsyncClient over the libcurl multi transport. The plateau is
//      reached when every call is accepted, every connection is open and
//      libcurl's memory has stopped growing, before any answer is due; the
//      server confirms afterwards how many requests it held at once.
//   2. Memory per call in flight, at that plateau minus a baseline taken
//      after the client and transport exist: C++ heap bytes (a replaced
//      global operator new/delete; saferetry allocates through it) and
//      libcurl's bytes (its allocator hooks, curl_global_init_mem, installed
//      before anything initialises libcurl). Live bytes are counted with
//      malloc_usable_size on both sides. No request bodies.
//   3. Throughput: the same GET through a raw libcurl multi loop written
//      here (curl_multi_socket_action on its own epoll, easy handles reused)
//      and through AsyncClient, alternating in rounds at a fixed concurrency
//      against a server with no delay. The client process and the server are
//      pinned to one CPU. The primary figure is the client process's CPU time
//      per call (every thread: the AsyncClient's loop thread and the caller),
//      which does not depend on thread placement; wall throughput is printed
//      beside it.
//
// Flags: --calls N (in flight, default 10000), --delay-ms N (default 8000),
// --rounds N (default 3), --throughput-calls N (per round and side, default
// 20000), --concurrency N (default 64), --quick (500 in flight, 1000 ms delay,
// 2000 calls, 1 round: a smoke run of a few seconds), --ports N (server
// ports the calls in flight are spread over, default 16: libcurl 7.88 walks
// every connection to a host:port for each new transfer, so 10 000 to one
// port take a quadratic ramp).
//
// Exit status: 0 when every call succeeded and setup worked; goals met or
// missed are printed (`goal_...=true|false`), never turned into a failure.

#include <curl/curl.h>
#include <dirent.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "call/call_setup.h"
#include "saferetry/async_client.h"
#include "saferetry/async_transport.h"
#include "saferetry/call_state_machine.h"
#include "saferetry/client.h"
#include "saferetry/curl_async_transport.h"
#include "saferetry/request.h"
#include "saferetry/result.h"

namespace {

// ---- Live heap bytes: C++ (operator new) and libcurl (its allocator). ----

std::atomic<std::int64_t> g_new_live{0};
std::atomic<std::int64_t> g_curl_live{0};
// Off for the throughput part, whose figures must not include the counting
// (the counters are not read after it).
std::atomic<bool> g_counting{true};

inline bool Counting() { return g_counting.load(std::memory_order_relaxed); }

inline void NewAdd(void* p) {
  if (!Counting()) return;
  g_new_live.fetch_add(static_cast<std::int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
}
inline void NewSub(void* p) {
  if (!Counting()) return;
  g_new_live.fetch_sub(static_cast<std::int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
}

void* CountedNew(std::size_t n) {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p != nullptr) NewAdd(p);
  return p;
}
void* CountedAlignedNew(std::size_t n, std::align_val_t al) {
  std::size_t a = static_cast<std::size_t>(al);
  if (a < sizeof(void*)) a = sizeof(void*);
  void* p = nullptr;
  if (posix_memalign(&p, a, n == 0 ? 1 : n) != 0) return nullptr;
  NewAdd(p);
  return p;
}
void CountedDelete(void* p) noexcept {
  if (p == nullptr) return;
  NewSub(p);
  std::free(p);
}

void* CurlMalloc(size_t n) {
  void* p = std::malloc(n);
  if (p != nullptr && Counting()) {
    g_curl_live.fetch_add(static_cast<std::int64_t>(malloc_usable_size(p)),
                          std::memory_order_relaxed);
  }
  return p;
}
void CurlFree(void* p) {
  if (p == nullptr) return;
  if (Counting())
    g_curl_live.fetch_sub(static_cast<std::int64_t>(malloc_usable_size(p)),
                          std::memory_order_relaxed);
  std::free(p);
}
void* CurlRealloc(void* p, size_t n) {
  if (!Counting()) return std::realloc(p, n);
  const std::int64_t old = p != nullptr ? static_cast<std::int64_t>(malloc_usable_size(p)) : 0;
  void* q = std::realloc(p, n);
  if (q != nullptr) {
    g_curl_live.fetch_add(static_cast<std::int64_t>(malloc_usable_size(q)) - old,
                          std::memory_order_relaxed);
  } else if (n == 0) {
    g_curl_live.fetch_sub(old, std::memory_order_relaxed);  // realloc(p, 0) freed p
  }
  return q;
}
char* CurlStrdup(const char* s) {
  const size_t n = std::strlen(s) + 1;
  char* p = static_cast<char*>(CurlMalloc(n));
  if (p != nullptr) std::memcpy(p, s, n);
  return p;
}
void* CurlCalloc(size_t a, size_t b) {
  void* p = std::calloc(a, b);
  if (p != nullptr && Counting()) {
    g_curl_live.fetch_add(static_cast<std::int64_t>(malloc_usable_size(p)),
                          std::memory_order_relaxed);
  }
  return p;
}

// ---- Small helpers. ----

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "async_benchmark: %s\n", what.c_str());
  std::fflush(stdout);
  std::exit(2);
}

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::chrono::nanoseconds ProcessCpuTime() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t mid = v.size() / 2;
  return v.size() % 2 == 1 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

// Open descriptors of this process (entries of /proc/self/fd). Allocates
// through malloc only (opendir), so it does not disturb the counters.
long OpenFds() {
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  long n = 0;
  while (readdir(d) != nullptr) ++n;
  closedir(d);
  return n - 3;  // ".", ".." and the directory's own descriptor
}

void RaiseFileLimit(long need) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) Fail("getrlimit(RLIMIT_NOFILE) failed");
  if (rl.rlim_cur >= static_cast<rlim_t>(need)) return;
  if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < static_cast<rlim_t>(need)) {
    Fail("RLIMIT_NOFILE: the hard limit is " + std::to_string(rl.rlim_max) + " descriptors and " +
         std::to_string(need) +
         " are needed (the calls in flight and a margin); raise the hard limit (ulimit -Hn) or "
         "lower --calls");
  }
  rl.rlim_cur = static_cast<rlim_t>(need);
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
    Fail("setrlimit(RLIMIT_NOFILE, " + std::to_string(need) + "): " + std::strerror(errno));
  }
}

std::string OwnDirectory() {
  std::vector<char> buf(4096);
  const ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) Fail("readlink(/proc/self/exe) failed");
  std::string path(buf.data(), static_cast<std::size_t>(n));
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// The first CPU this process may run on.
int FirstAllowedCpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) Fail("sched_getaffinity failed");
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) return cpu;
  }
  Fail("no CPU allowed");
}

void PinTo(pid_t pid, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(pid, sizeof(set), &set) != 0) {
    Fail("sched_setaffinity(" + std::to_string(pid) + ", CPU " + std::to_string(cpu) +
         "): " + std::strerror(errno));
  }
}

// ---- The server process. ----

class ServerProcess {
 public:
  ServerProcess(long delay_ms, long max_connections, int ports) {
    const std::string path = OwnDirectory() + "/async_loopback_server";
    if (access(path.c_str(), X_OK) != 0) Fail(path + ": not found or not executable");
    int in_pipe[2], out_pipe[2];
    if (pipe2(in_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0) Fail("pipe2 failed");
    const std::string delay = std::to_string(delay_ms);
    const std::string conns = std::to_string(max_connections);
    const std::string port_count = std::to_string(ports);
    pid_ = fork();
    if (pid_ < 0) Fail("fork failed");
    if (pid_ == 0) {
      dup2(in_pipe[0], 0);
      dup2(out_pipe[1], 1);
      execl(path.c_str(), path.c_str(), "--delay-ms", delay.c_str(), "--max-connections",
            conns.c_str(), "--ports", port_count.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(in_pipe[0]);
    close(out_pipe[1]);
    stdin_fd_ = in_pipe[1];
    stdout_fd_ = out_pipe[0];
    const std::string line = ReadLine(std::chrono::seconds(10));
    if (line.rfind("port=", 0) != 0)
      Fail("the server did not print its port (got \"" + line + "\")");
    // port=N1[,N2,...]
    for (std::size_t at = 5; at < line.size();) {
      std::size_t comma = line.find(',', at);
      if (comma == std::string::npos) comma = line.size();
      const int port = std::atoi(line.substr(at, comma - at).c_str());
      if (port <= 0 || port > 65535) Fail("the server printed a bad port: " + line);
      ports_.push_back(port);
      at = comma + 1;
    }
    if (static_cast<int>(ports_.size()) != ports)
      Fail("the server printed a bad port line: " + line);
  }

  ~ServerProcess() {
    if (pid_ > 0) Stop();
  }

  // Closes the server's stdin (it exits), returns its last line (stats).
  std::string Stop() {
    close(stdin_fd_);
    std::string stats = ReadLine(std::chrono::seconds(10));
    int status = 0;
    bool exited = false;
    for (int i = 0; i < 100 && !exited; ++i) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited = true;
      } else {
        usleep(20000);
      }
    }
    if (!exited) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
    }
    close(stdout_fd_);
    pid_ = -1;
    return stats;
  }

  const std::vector<int>& ports() const { return ports_; }
  pid_t pid() const { return pid_; }

 private:
  std::string ReadLine(std::chrono::seconds limit) {
    const auto end = Clock::now() + limit;
    for (;;) {
      const std::size_t nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
      if (left.count() <= 0) return std::string();
      pollfd p{stdout_fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[512];
      const ssize_t n = read(stdout_fd_, chunk, sizeof(chunk));
      if (n <= 0) return std::string();
      buffer_.append(chunk, static_cast<std::size_t>(n));
    }
  }

  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  int stdout_fd_ = -1;
  std::vector<int> ports_;
  std::string buffer_;
};

// `key=value` from the server's stats line; -1 when absent.
long StatOf(const std::string& stats, const std::string& key) {
  const std::size_t at = stats.find(" " + key + "=");
  if (at == std::string::npos) return -1;
  return std::atol(stats.c_str() + at + key.size() + 2);
}

// ---- Outcomes of calls, counted on the loop thread. ----

struct Tally {
  std::atomic<long> done{0};
  std::atomic<long> succeeded{0};
  std::atomic<long> failed{0};
  std::atomic<long> retried{0};
  std::mutex mu;
  std::string first_failure;  // Guarded by mu.

  void Record(const saferetry::CallResult& r) {
    if (r.outcome == saferetry::Outcome::kSucceeded && r.last_response.has_value() &&
        r.last_response->status_code == 200) {
      succeeded.fetch_add(1, std::memory_order_relaxed);
    } else {
      failed.fetch_add(1, std::memory_order_relaxed);
      std::lock_guard<std::mutex> lock(mu);
      if (first_failure.empty()) {
        first_failure = std::string(saferetry::OutcomeName(r.outcome)) + " / " +
                        std::string(saferetry::StopReasonName(r.stop_reason)) + " after " +
                        std::to_string(r.attempts) + " attempts, " +
                        std::to_string(std::chrono::duration<double>(r.elapsed).count()) +
                        " s; last transport status: " + r.last_transport_status.ToString() +
                        (r.last_response.has_value()
                             ? "; last HTTP status " + std::to_string(r.last_response->status_code)
                             : std::string());
      }
    }
    if (r.attempts > 1) retried.fetch_add(1, std::memory_order_relaxed);
    done.fetch_add(1, std::memory_order_release);
  }
};

struct Setup {
  std::shared_ptr<saferetry::RunnableEventLoop> loop;
  std::shared_ptr<saferetry::AsyncTransport> transport;
  std::unique_ptr<saferetry::AsyncClient> client;
};

Setup MakeClient(std::size_t max_in_flight, std::size_t idle_handles) {
  Setup s;
  auto loop = saferetry::MakeEpollEventLoop();
  if (!loop.ok()) Fail("MakeEpollEventLoop: " + std::string(loop.status().message()));
  s.loop = *loop;
  saferetry::CurlTransportOptions topt;
  topt.max_idle_handles = idle_handles;
  auto transport = saferetry::MakeCurlMultiTransport(s.loop, topt);
  if (!transport.ok()) {
    Fail("MakeCurlMultiTransport: " + std::string(transport.status().message()));
  }
  s.transport = *transport;
  saferetry::AsyncClientOptions options;
  options.loop = s.loop;
  options.transport = s.transport;
  options.max_in_flight = max_in_flight;
  auto client = saferetry::AsyncClient::Create(std::move(options));
  if (!client.ok()) Fail("AsyncClient::Create: " + std::string(client.status().message()));
  s.client = *std::move(client);
  return s;
}

// ---- Part 1 and 2: calls in flight, memory per call. ----

struct InFlightFigures {
  long peak_in_flight = 0;
  long sockets = 0;
  double new_bytes_per_call = 0;
  double curl_bytes_per_call = 0;
  long succeeded = 0, failed = 0, retried = 0;
  long server_max_pending = -1, server_accepted = -1, server_requests = -1, server_answered = -1;
  double ramp_s = 0, plateau_s = 0, total_s = 0;
};

InFlightFigures RunInFlight(long calls, long delay_ms, int ports) {
  RaiseFileLimit(calls + 512);
  InFlightFigures f;
  ServerProcess server(delay_ms, calls + 256, ports);
  std::vector<saferetry::Request> bases;
  for (int port : server.ports()) {
    saferetry::Request base;
    base.method = "GET";
    base.url = "http://127.0.0.1:" + std::to_string(port) + "/o";
    bases.push_back(std::move(base));
  }

  Tally tally;
  {
    Setup s = MakeClient(static_cast<std::size_t>(calls), static_cast<std::size_t>(calls));
    saferetry::CallOptions call;
    // Generous: with libcurl 7.88, curl_multi_remove_handle walks every
    // cached connection, so 10 000 completions take the loop 10-25 s; an
    // answer read late must not time out meanwhile.
    call.timeout = std::chrono::milliseconds(delay_ms * 2 + 400000);

    const long fds_before = OpenFds();
    const std::int64_t new_base = g_new_live.load();
    const std::int64_t curl_base = g_curl_live.load();

    const auto t0 = Clock::now();
    constexpr long kBatch = 500;
    for (long i = 0; i < calls;) {
      const long end = std::min(calls, i + kBatch);
      for (; i < end; ++i) {
        s.client->Execute(saferetry::Request(bases[static_cast<std::size_t>(i) % bases.size()]),
                          call, [&tally](saferetry::CallResult r) { tally.Record(r); });
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    const auto ramped = Clock::now();
    f.ramp_s = Seconds(ramped - t0);

    // The plateau: every call accepted, one socket per call, libcurl's live
    // bytes unchanged over 5 samples (100 ms), and no answer yet.
    std::int64_t last_curl = -1;
    int stable = 0;
    bool plateau = false;
    std::int64_t new_at = 0, curl_at = 0;
    const bool trace = getenv("ASYNC_BENCH_TRACE") != nullptr;
    while (Clock::now() - t0 < std::chrono::seconds(60)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      const long in_flight = static_cast<long>(s.client->in_flight());
      f.peak_in_flight = std::max(f.peak_in_flight, in_flight);
      if (tally.done.load() > 0) break;
      const std::int64_t curl_now = g_curl_live.load();
      const std::int64_t new_now = g_new_live.load();
      stable = (curl_now == last_curl) ? stable + 1 : 0;
      // Listing 10 000 descriptors costs milliseconds: only when needed.
      const long sockets = (trace || stable >= 5) ? OpenFds() - fds_before : 0;
      if (trace) {
        std::fprintf(stderr, "t=%.3f in_flight=%ld sockets=%ld curl=%lld new=%lld done=%ld\n",
                     Seconds(Clock::now() - t0), in_flight, sockets,
                     static_cast<long long>(curl_now), static_cast<long long>(new_now),
                     tally.done.load());
      }
      last_curl = curl_now;
      if (in_flight == calls && sockets >= calls && stable >= 5) {
        new_at = new_now;
        curl_at = curl_now;
        f.sockets = sockets;
        plateau = tally.done.load() == 0;
        break;
      }
    }
    if (!plateau) {
      Fail("the plateau of " + std::to_string(calls) + " calls in flight was not reached (peak " +
           std::to_string(f.peak_in_flight) + ", " + std::to_string(OpenFds() - fds_before) +
           " sockets, " + std::to_string(tally.done.load()) +
           " answered already); a longer --delay-ms gives the ramp more time");
    }
    f.plateau_s = Seconds(Clock::now() - t0);
    f.new_bytes_per_call = static_cast<double>(new_at - new_base) / static_cast<double>(calls);
    f.curl_bytes_per_call = static_cast<double>(curl_at - curl_base) / static_cast<double>(calls);

    while (tally.done.load() < calls && Clock::now() - t0 < std::chrono::seconds(180)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    f.total_s = Seconds(Clock::now() - t0);
    if (tally.done.load() < calls) {
      std::fprintf(stderr, "async_benchmark: %ld of %ld calls unfinished after 180 s\n",
                   calls - tally.done.load(), calls);
    }
    // Destroying the client cancels what is left and joins its thread.
  }
  f.succeeded = tally.succeeded.load();
  f.failed = calls - f.succeeded;
  f.retried = tally.retried.load();
  if (f.failed > 0) {
    std::lock_guard<std::mutex> lock(tally.mu);
    std::fprintf(stderr, "async_benchmark: %ld calls did not succeed; first: %s\n", f.failed,
                 tally.first_failure.c_str());
  }
  const std::string stats = server.Stop();
  f.server_max_pending = StatOf(stats, "max_pending");
  f.server_accepted = StatOf(stats, "accepted");
  f.server_requests = StatOf(stats, "requests");
  f.server_answered = StatOf(stats, "answered");
  return f;
}

// ---- Part 3: throughput, raw libcurl multi vs AsyncClient. ----

struct Round {
  long calls = 0;
  long failures = 0;
  double cpu_us_per_call = 0;
  double wall_us_per_call = 0;
};

size_t Discard(char*, size_t size, size_t n, void*) { return size * n; }

// Appends a response body to the std::string at `userp`.
size_t Collect(char* data, size_t size, size_t n, void* userp) {
  static_cast<std::string*>(userp)->append(data, size * n);
  return size * n;
}

// A plain libcurl multi loop in the transport's style: socket and timer
// callbacks, curl_multi_socket_action driven by its own epoll, finished
// transfers from curl_multi_info_read; one easy handle per slot, reused.
//
// Minimal (`per_request` false): every handle is set up once and re-added
// unchanged, the body discarded: the least work libcurl can be asked to do,
// possible only because every request is the same. Per request (`true`):
// what a hand-written client does for requests that differ: the URL and a
// fresh header list (the deadline header formatted for this request) set on
// the handle, the body collected into a string, the status read.
class RawMulti {
 public:
  RawMulti(const std::string& url, int concurrency, bool per_request = false)
      : url_(url), per_request_(per_request) {
    multi_ = curl_multi_init();
    epfd_ = epoll_create1(EPOLL_CLOEXEC);
    if (multi_ == nullptr || epfd_ < 0) Fail("raw multi: init failed");
    curl_multi_setopt(multi_, CURLMOPT_SOCKETFUNCTION, &RawMulti::OnSocket);
    curl_multi_setopt(multi_, CURLMOPT_SOCKETDATA, this);
    curl_multi_setopt(multi_, CURLMOPT_TIMERFUNCTION, &RawMulti::OnTimer);
    curl_multi_setopt(multi_, CURLMOPT_TIMERDATA, this);
    // The headers saferetry puts on a GET (deadline, attempt number) and its
    // "Expect:" line, so both sides send the same bytes.
    headers_ = curl_slist_append(nullptr, "X-Request-Timeout-Ms: 2499");
    headers_ = curl_slist_append(headers_, "X-Retry-Attempt: attempt=1; max=3");
    headers_ = curl_slist_append(headers_, "Expect:");
    for (int i = 0; i < concurrency; ++i) {
      CURL* c = curl_easy_init();
      if (c == nullptr) Fail("curl_easy_init failed");
      curl_easy_setopt(c, CURLOPT_URL, url_.c_str());
      curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
      curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
      curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
      curl_easy_setopt(c, CURLOPT_USERAGENT, "saferetry/0.3.0");
      curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers_);
      curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &Discard);
      curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 2500L);
      curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 2500L);
      // The slot's index, for PrepareRequest (no search on the hot path).
      curl_easy_setopt(c, CURLOPT_PRIVATE, reinterpret_cast<void*>(static_cast<std::uintptr_t>(i)));
      handles_.push_back(c);
    }
    slot_headers_.assign(handles_.size(), nullptr);
    bodies_.resize(handles_.size());
  }
  ~RawMulti() {
    for (CURL* c : handles_) {
      curl_multi_remove_handle(multi_, c);
      curl_easy_cleanup(c);
    }
    for (curl_slist* h : slot_headers_) curl_slist_free_all(h);
    curl_multi_cleanup(multi_);
    curl_slist_free_all(headers_);
    close(epfd_);
  }

  // Runs `n` calls (or until `limit`), `handles_.size()` at a time.
  Round Run(long n, Clock::duration limit) {
    Round r;
    const auto cpu0 = ProcessCpuTime();
    const auto t0 = Clock::now();
    long started = 0;
    std::vector<CURL*> free_handles(handles_.rbegin(), handles_.rend());
    auto start_one = [&] {
      CURL* c = free_handles.back();
      free_handles.pop_back();
      if (per_request_) PrepareRequest(c, started);
      curl_multi_add_handle(multi_, c);
      ++started;
    };
    while (started < n && !free_handles.empty()) start_one();
    epoll_event events[256];
    while (r.calls + r.failures < started) {
      int wait_ms = -1;
      if (timer_due_.has_value()) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(*timer_due_ - Clock::now());
        wait_ms = left.count() < 0 ? 0 : static_cast<int>(left.count());
      }
      const int k = epoll_wait(epfd_, events, 256, wait_ms);
      int running = 0;
      for (int i = 0; i < k; ++i) {
        int flags = 0;
        if ((events[i].events & EPOLLIN) != 0) flags |= CURL_CSELECT_IN;
        if ((events[i].events & EPOLLOUT) != 0) flags |= CURL_CSELECT_OUT;
        if ((events[i].events & (EPOLLERR | EPOLLHUP)) != 0) flags |= CURL_CSELECT_ERR;
        curl_multi_socket_action(multi_, events[i].data.fd, flags, &running);
      }
      if (timer_due_.has_value() && *timer_due_ <= Clock::now()) {
        timer_due_.reset();  // Before the call: libcurl may set a new timer in it.
        curl_multi_socket_action(multi_, CURL_SOCKET_TIMEOUT, 0, &running);
      }
      int left = 0;
      while (CURLMsg* msg = curl_multi_info_read(multi_, &left)) {
        if (msg->msg != CURLMSG_DONE) continue;
        CURL* c = msg->easy_handle;
        long code = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
        if (msg->data.result == CURLE_OK && code == 200) {
          ++r.calls;
        } else {
          ++r.failures;
        }
        curl_multi_remove_handle(multi_, c);
        free_handles.push_back(c);
        if (started < n && Clock::now() - t0 < limit) start_one();
      }
    }
    const auto wall = Clock::now() - t0;
    const auto cpu = ProcessCpuTime() - cpu0;
    if (r.calls > 0) {
      r.cpu_us_per_call = std::chrono::duration<double, std::micro>(cpu).count() / r.calls;
      r.wall_us_per_call = std::chrono::duration<double, std::micro>(wall).count() / r.calls;
    }
    return r;
  }

 private:
  // The per-request set-up of the handle of slot `c`.
  void PrepareRequest(CURL* c, long number) {
    void* index = nullptr;
    curl_easy_getinfo(c, CURLINFO_PRIVATE, &index);
    const auto slot = static_cast<std::size_t>(reinterpret_cast<std::uintptr_t>(index));
    curl_slist_free_all(slot_headers_[slot]);
    char deadline[64];
    std::snprintf(deadline, sizeof(deadline), "X-Request-Timeout-Ms: %ld", 2499 - number % 2);
    curl_slist* h = curl_slist_append(nullptr, deadline);
    h = curl_slist_append(h, "X-Retry-Attempt: attempt=1; max=3");
    h = curl_slist_append(h, "Expect:");
    slot_headers_[slot] = h;
    bodies_[slot].clear();
    curl_easy_setopt(c, CURLOPT_URL, url_.c_str());
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &Collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &bodies_[slot]);
  }

  static int OnSocket(CURL*, curl_socket_t fd, int what, void* userp, void*) {
    auto* self = static_cast<RawMulti*>(userp);
    if (what == CURL_POLL_REMOVE) {
      epoll_ctl(self->epfd_, EPOLL_CTL_DEL, fd, nullptr);
      if (static_cast<std::size_t>(fd) < self->watched_.size()) self->watched_[fd] = 0;
      return 0;
    }
    epoll_event ev{};
    ev.events =
        ((what & CURL_POLL_IN) != 0 ? EPOLLIN : 0u) | ((what & CURL_POLL_OUT) != 0 ? EPOLLOUT : 0u);
    ev.data.fd = fd;
    if (static_cast<std::size_t>(fd) >= self->watched_.size()) {
      self->watched_.resize(static_cast<std::size_t>(fd) + 64, 0);
    }
    const int op = self->watched_[fd] != 0 ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    if (epoll_ctl(self->epfd_, op, fd, &ev) != 0) return -1;
    self->watched_[fd] = 1;
    return 0;
  }
  static int OnTimer(CURLM*, long timeout_ms, void* userp) {
    auto* self = static_cast<RawMulti*>(userp);
    if (timeout_ms < 0) {
      self->timer_due_.reset();
    } else {
      self->timer_due_ = Clock::now() + std::chrono::milliseconds(timeout_ms);
    }
    return 0;
  }

  std::string url_;
  const bool per_request_;
  CURLM* multi_ = nullptr;
  int epfd_ = -1;
  curl_slist* headers_ = nullptr;
  std::vector<curl_slist*> slot_headers_;  // per_request_: each slot's current list
  std::vector<std::string> bodies_;        // per_request_: each slot's body
  std::vector<CURL*> handles_;
  std::vector<char> watched_;
  std::optional<Clock::time_point> timer_due_;
};

// AsyncClient at a fixed concurrency: each result's callback (on the loop
// thread) starts the next call; the caller waits for the last one.
class AsyncRunner {
 public:
  AsyncRunner(const std::string& url, int concurrency)
      : concurrency_(concurrency),
        setup_(MakeClient(static_cast<std::size_t>(concurrency) * 2, 64)) {
    base_.method = "GET";
    base_.url = url;
    call_.timeout = std::chrono::seconds(5);  // 2.5 s per attempt, as the raw loop's
  }

  Round Run(long n, Clock::duration limit) {
    Round r;
    n_ = n;
    limit_ = limit;
    started_.store(0);
    ok_.store(0);
    failures_.store(0);
    finished_ = false;
    const auto cpu0 = ProcessCpuTime();
    t0_ = Clock::now();
    for (int i = 0; i < concurrency_ && StartSlot(); ++i) {
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, limit + std::chrono::seconds(30), [&] { return finished_; });
    }
    const auto wall = Clock::now() - t0_;
    const auto cpu = ProcessCpuTime() - cpu0;
    if (!finished_) Fail("AsyncClient round did not finish in time");
    r.calls = ok_.load();
    r.failures = failures_.load();
    if (r.calls > 0) {
      r.cpu_us_per_call = std::chrono::duration<double, std::micro>(cpu).count() / r.calls;
      r.wall_us_per_call = std::chrono::duration<double, std::micro>(wall).count() / r.calls;
    }
    return r;
  }

 private:
  // Starts one call if the round wants more; false when it does not.
  bool StartSlot() {
    if (Clock::now() - t0_ >= limit_) return false;
    if (started_.fetch_add(1) >= n_) {
      started_.fetch_sub(1);
      return false;
    }
    setup_.client->Execute(saferetry::Request(base_), call_,
                           [this](saferetry::CallResult res) { OnDone(res); });
    return true;
  }

  void OnDone(const saferetry::CallResult& res) {
    if (res.outcome == saferetry::Outcome::kSucceeded && res.last_response.has_value() &&
        res.last_response->status_code == 200 && res.attempts == 1) {
      ok_.fetch_add(1);
    } else {
      failures_.fetch_add(1);
    }
    StartSlot();
    if (ok_.load() + failures_.load() == started_.load() &&
        (started_.load() >= n_ || Clock::now() - t0_ >= limit_)) {
      std::lock_guard<std::mutex> lock(mu_);
      finished_ = true;
      cv_.notify_all();
    }
  }

  const int concurrency_;
  Setup setup_;
  saferetry::Request base_;
  saferetry::CallOptions call_;
  long n_ = 0;
  Clock::duration limit_{};
  Clock::time_point t0_;
  std::atomic<long> started_{0}, ok_{0}, failures_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool finished_ = false;  // Guarded by mu_.
};

struct Options {
  long calls = 10000;
  long delay_ms = 8000;
  int rounds = 3;
  long throughput_calls = 20000;
  int concurrency = 64;
  int ports = 16;
  bool quick = false;
};

bool ParseLong(const char* s, long lo, long hi, long* out) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

Options ParseFlags(int argc, char** argv) {
  Options o;
  bool calls_set = false, delay_set = false, rounds_set = false, tcalls_set = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    long v = 0;
    auto value = [&](long lo, long hi) {
      if (i + 1 >= argc || !ParseLong(argv[i + 1], lo, hi, &v)) {
        Fail(arg + ": want a number in " + std::to_string(lo) + ".." + std::to_string(hi));
      }
      ++i;
      return v;
    };
    if (arg == "--calls") {
      o.calls = value(1, 1000000);
      calls_set = true;
    } else if (arg == "--delay-ms") {
      o.delay_ms = value(100, 600000);
      delay_set = true;
    } else if (arg == "--rounds") {
      o.rounds = static_cast<int>(value(1, 100));
      rounds_set = true;
    } else if (arg == "--throughput-calls") {
      o.throughput_calls = value(1, 10000000);
      tcalls_set = true;
    } else if (arg == "--concurrency") {
      o.concurrency = static_cast<int>(value(1, 4096));
    } else if (arg == "--ports") {
      o.ports = static_cast<int>(value(1, 256));
    } else if (arg == "--quick") {
      o.quick = true;
    } else {
      Fail("unknown flag " + arg +
           "; flags: --calls N --delay-ms N --rounds N --throughput-calls N --concurrency N "
           "--ports N --quick");
    }
  }
  if (o.quick) {
    if (!calls_set) o.calls = 500;
    if (!delay_set) o.delay_ms = 1000;
    if (!rounds_set) o.rounds = 1;
    if (!tcalls_set) o.throughput_calls = 2000;
  }
  return o;
}

}  // namespace

// ---- The counting global operator new/delete (every form). ----
// GCC flags free() of memory from a replaced operator new as mismatched; here
// both sides are ours and use malloc/free.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  if (void* p = CountedNew(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  if (void* p = CountedNew(n)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return CountedNew(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return CountedNew(n); }
void* operator new(std::size_t n, std::align_val_t a) {
  if (void* p = CountedAlignedNew(n, a)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) {
  if (void* p = CountedAlignedNew(n, a)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return CountedAlignedNew(n, a);
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return CountedAlignedNew(n, a);
}
void operator delete(void* p) noexcept { CountedDelete(p); }
void operator delete[](void* p) noexcept { CountedDelete(p); }
void operator delete(void* p, std::size_t) noexcept { CountedDelete(p); }
void operator delete[](void* p, std::size_t) noexcept { CountedDelete(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { CountedDelete(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { CountedDelete(p); }
void operator delete(void* p, std::align_val_t) noexcept { CountedDelete(p); }
void operator delete[](void* p, std::align_val_t) noexcept { CountedDelete(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { CountedDelete(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { CountedDelete(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  CountedDelete(p);
}
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  CountedDelete(p);
}
#pragma GCC diagnostic pop

int main(int argc, char** argv) {
  // libcurl's allocator hooks first: saferetry's own curl_global_init (once,
  // in the transport's factory) is then a counted no-op on an initialised
  // library, and every libcurl allocation is counted.
  if (curl_global_init_mem(CURL_GLOBAL_DEFAULT, CurlMalloc, CurlFree, CurlRealloc, CurlStrdup,
                           CurlCalloc) != CURLE_OK) {
    Fail("curl_global_init_mem failed");
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  signal(SIGPIPE, SIG_IGN);
  const Options o = ParseFlags(argc, argv);
  bool ok = true;

  // 1 and 2.
  std::printf(
      "# in flight: %ld GETs on one AsyncClient (libcurl multi transport, epoll loop), "
      "server delay %ld ms, spread over %d server ports, ramped in batches of 500; memory at the "
      "plateau minus the "
      "baseline after the client exists, per call; no request bodies\n",
      o.calls, o.delay_ms, o.ports);
  const InFlightFigures f = RunInFlight(o.calls, o.delay_ms, o.ports);
  std::printf("async_inflight_calls=%ld\n", f.peak_in_flight);
  std::printf("async_inflight_sockets=%ld\n", f.sockets);
  std::printf("server_max_pending_requests=%ld\n", f.server_max_pending);
  std::printf("server_accepted_connections=%ld server_requests=%ld server_answered=%ld\n",
              f.server_accepted, f.server_requests, f.server_answered);
  std::printf(
      "async_inflight_ramp_s=%.3f async_inflight_plateau_s=%.3f async_inflight_total_s=%.3f"
      " (submitted, plateau reached, all answered; seconds from the first call)\n",
      f.ramp_s, f.plateau_s, f.total_s);
  std::printf("async_inflight_succeeded=%ld async_inflight_failed=%ld async_inflight_retried=%ld\n",
              f.succeeded, f.failed, f.retried);
  std::printf("async_bytes_per_inflight_call=%.0f\n", f.new_bytes_per_call);
  std::printf("curl_bytes_per_inflight_call=%.0f\n", f.curl_bytes_per_call);
  std::printf(
      "sizeof_request=%zu sizeof_call_options=%zu sizeof_prepared_call=%zu "
      "sizeof_call_state_machine=%zu sizeof_call_result=%zu sizeof_attempt_evidence=%zu "
      "sizeof_response=%zu\n",
      sizeof(saferetry::Request), sizeof(saferetry::CallOptions),
      sizeof(saferetry::internal::PreparedCall), sizeof(saferetry::CallStateMachine),
      sizeof(saferetry::CallResult), sizeof(saferetry::AttemptEvidence),
      sizeof(saferetry::Response));
  if (f.failed > 0 || f.peak_in_flight < o.calls) ok = false;
  if (f.server_max_pending >= 0 && f.server_max_pending < o.calls) {
    std::fprintf(stderr, "async_benchmark: the server held at most %ld requests at once, not %ld\n",
                 f.server_max_pending, o.calls);
    ok = false;
  }

  // 3.
  g_counting.store(false);
  const int cpu = FirstAllowedCpu();
  std::printf(
      "# throughput: GET, %d calls in flight, %ld calls per round and side (or 20 s), "
      "server delay 0; client process and server process pinned to CPU %d; primary "
      "figure: client process CPU time (all its threads) per call; medians of %d "
      "rotating rounds (raw, raw per request, async)\n",
      o.concurrency, o.throughput_calls, cpu, o.rounds);
  std::vector<double> raw_cpu, raw_wall, async_cpu, async_wall, per_cpu, per_wall;
  long throughput_failures = 0;
  std::string throughput_stats;
  {
    ServerProcess server(0, o.concurrency * 4 + 64, 1);
    PinTo(0, cpu);             // This thread; threads created from now on inherit it.
    PinTo(server.pid(), cpu);  // The server is single-threaded.
    const std::string url = "http://127.0.0.1:" + std::to_string(server.ports()[0]) + "/o";
    RawMulti raw(url, o.concurrency);
    RawMulti per(url, o.concurrency, /*per_request=*/true);
    AsyncRunner async(url, o.concurrency);
    const long warm = std::max<long>(o.throughput_calls / 10, 200);
    raw.Run(warm, std::chrono::seconds(5));
    per.Run(warm, std::chrono::seconds(5));
    async.Run(warm, std::chrono::seconds(5));
    for (int round = 0; round < o.rounds; ++round) {
      // The three sides in a rotating order, so none is always first.
      for (int k = 0; k < 3; ++k) {
        const int side = (round + k) % 3;  // 0 raw, 1 per request, 2 async
        Round r = side == 0   ? raw.Run(o.throughput_calls, std::chrono::seconds(20))
                  : side == 1 ? per.Run(o.throughput_calls, std::chrono::seconds(20))
                              : async.Run(o.throughput_calls, std::chrono::seconds(20));
        throughput_failures += r.failures;
        (side == 0 ? raw_cpu : side == 1 ? per_cpu : async_cpu).push_back(r.cpu_us_per_call);
        (side == 0 ? raw_wall : side == 1 ? per_wall : async_wall).push_back(r.wall_us_per_call);
        std::printf(
            "round=%d side=%s calls=%ld failures=%ld cpu_us_per_call=%.2f "
            "wall_us_per_call=%.2f\n",
            round + 1,
            side == 0   ? "raw_multi"
            : side == 1 ? "raw_multi_per_request"
                        : "async",
            r.calls, r.failures, r.cpu_us_per_call, r.wall_us_per_call);
      }
    }
    throughput_stats = server.Stop();
  }
  // Kept-alive connections: about 2 x concurrency (one set per side).
  std::printf("throughput_server_connections=%ld throughput_server_requests=%ld\n",
              StatOf(throughput_stats, "accepted"), StatOf(throughput_stats, "requests"));
  const double raw_cpu_us = Median(raw_cpu), async_cpu_us = Median(async_cpu);
  const double raw_wall_us = Median(raw_wall), async_wall_us = Median(async_wall);
  const double ratio = async_cpu_us > 0 ? raw_cpu_us / async_cpu_us : 0;
  std::printf("raw_multi_cpu_us_per_call=%.2f\n", raw_cpu_us);
  std::printf("async_cpu_us_per_call=%.2f\n", async_cpu_us);
  std::printf("async_overhead_us_per_call=%.2f\n", async_cpu_us - raw_cpu_us);
  std::printf("raw_multi_wall_us_per_call=%.2f async_wall_us_per_call=%.2f\n", raw_wall_us,
              async_wall_us);
  std::printf("async_ratio_vs_raw_multi=%.3f\n", ratio);
  std::printf("async_wall_ratio_vs_raw_multi=%.3f\n",
              async_wall_us > 0 ? raw_wall_us / async_wall_us : 0);
  const double per_cpu_us = Median(per_cpu), per_wall_us = Median(per_wall);
  const double per_ratio = async_cpu_us > 0 ? per_cpu_us / async_cpu_us : 0;
  std::printf("raw_multi_per_request_cpu_us_per_call=%.2f\n", per_cpu_us);
  std::printf("async_overhead_vs_per_request_us_per_call=%.2f\n", async_cpu_us - per_cpu_us);
  std::printf("async_ratio_vs_raw_multi_per_request=%.3f\n", per_ratio);
  // Paired: each round's per-request side against the same round's async
  // side (run next to each other), then the median of those ratios. A host
  // whose speed drifts between rounds moves both sides of a pair alike; the
  // medians above can pick their rounds from different speeds.
  std::vector<double> paired;
  for (std::size_t i = 0; i < per_cpu.size() && i < async_cpu.size(); ++i) {
    if (async_cpu[i] > 0) paired.push_back(per_cpu[i] / async_cpu[i]);
  }
  std::printf("async_ratio_vs_raw_multi_per_request_paired=%.3f (median of %zu rounds)\n",
              Median(paired), paired.size());
  std::printf("async_wall_ratio_vs_raw_multi_per_request=%.3f\n",
              async_wall_us > 0 ? per_wall_us / async_wall_us : 0);
  std::printf("throughput_failures=%ld\n", throughput_failures);
  if (throughput_failures > 0) ok = false;

  std::printf("goal_async_inflight_calls_ge_%ld=%s\n", o.calls,
              f.peak_in_flight >= o.calls ? "true" : "false");
  std::printf("goal_async_bytes_per_inflight_call_le_1024=%s\n",
              f.new_bytes_per_call <= 1024 ? "true" : "false");
  std::printf("goal_async_ratio_vs_raw_multi_per_request_ge_0.95=%s\n",
              Median(paired) >= 0.95 ? "true" : "false");
  return ok ? 0 : 1;
}

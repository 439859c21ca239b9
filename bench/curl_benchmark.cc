// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// What saferetry's synchronous call through the libcurl transport costs over
// a plain libcurl easy-handle loop: sequential POSTs of the same request on
// the wire, each side over its own kept-alive loopback connection to the same
// in-process server, interleaved in rounds so that drift hits both sides
// alike. A third loop runs the transport alone (one attempt, no client).
//
// The main figure is *pinned*: the client thread and every server thread run
// on one CPU. Unpinned, the two connections are served by two server threads
// that the scheduler places on different CPUs by chance, and waking a thread
// on another (idle, virtual) CPU costs more than the whole request: the
// unpinned ratio measures the scheduler, and is printed beside the pinned one
// only to show that. The client thread's CPU time per call is measured too;
// it does not depend on placement.
//
// A fourth loop is plain libcurl as a real caller writes it, setting the
// request up on every call (URL, header list, body): the bar for the
// overhead goal (`cpu_overhead_us_per_call_vs_raw_per_request`).
//
// Prints, among others:
//   pinned_ratio_vs_raw_libcurl=<raw time / saferetry time per call, <= 1>
//   overhead_us_per_call=<saferetry minus raw, microseconds, pinned>
//   cpu_overhead_us_per_call=<the same in client-thread CPU time>
//   cpu_overhead_us_per_call_vs_raw_per_request=<client CPU over the per-request loop>
//   cpu_overhead_us_per_call_vs_raw_per_request_paired=<the same, the median of the
//     rounds' differences>
//   transport_only_cpu_overhead_us_per_call_vs_raw_per_request=<the transport alone, the same>
// Per-call figures are medians over the rounds. Bounded: kRounds rounds of
// kCallsPerRound calls per side and phase, or kTimeBudget per phase.

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "saferetry/client.h"
#include "saferetry/curl_transport.h"

namespace {

// The User-Agent every side sends (the curl transport's default).
constexpr const char* kUserAgent = "saferetry/0.3.0";

// ---- Allocation accounting, on the measuring thread only. ----
thread_local bool t_counting = false;
thread_local std::size_t t_new_calls = 0;
thread_local std::size_t t_new_bytes = 0;
thread_local std::size_t t_malloc_calls = 0;
thread_local std::size_t t_malloc_bytes = 0;

void CountNew(std::size_t n) {
  if (t_counting) {
    ++t_new_calls;
    t_new_bytes += n;
  }
}

// libcurl's own allocations, through curl_global_init_mem.
void* CurlMalloc(size_t n) {
  if (t_counting) {
    ++t_malloc_calls;
    t_malloc_bytes += n;
  }
  return std::malloc(n);
}
void CurlFree(void* p) { std::free(p); }
void* CurlRealloc(void* p, size_t n) {
  if (t_counting) {
    ++t_malloc_calls;
    t_malloc_bytes += n;
  }
  return std::realloc(p, n);
}
char* CurlStrdup(const char* s) {
  const size_t n = std::strlen(s) + 1;
  char* p = static_cast<char*>(CurlMalloc(n));
  if (p != nullptr) std::memcpy(p, s, n);
  return p;
}
void* CurlCalloc(size_t a, size_t b) {
  if (t_counting) {
    ++t_malloc_calls;
    t_malloc_bytes += a * b;
  }
  return std::calloc(a, b);
}

// The CPUs this process may run on (before any pinning).
cpu_set_t AllowedCpus() {
  static const cpu_set_t kAllowed = [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) {
      std::perror("sched_getaffinity");
      std::exit(1);
    }
    return set;
  }();
  return kAllowed;
}

void SetThisThreadAffinity(const cpu_set_t& set) {
  if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) != 0) {
    std::fprintf(stderr, "pthread_setaffinity_np failed\n");
    std::exit(1);
  }
}

std::chrono::nanoseconds ThreadCpuTime() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

// ---- A minimal keep-alive HTTP/1.1 server: fixed 200 "ok". ----
class BenchServer {
 public:
  BenchServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd_, 16) != 0) {
      std::perror("bench server");
      std::exit(1);
    }
    socklen_t len = sizeof(a);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~BenchServer() {
    stop_.store(true);
    acceptor_.join();
    ::close(fd_);
    std::lock_guard<std::mutex> lock(mu_);
    for (int c : conns_) ::shutdown(c, SHUT_RDWR);
    for (auto& t : workers_) t.join();
  }
  std::string Url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/orders"; }

  // Moves the acceptor and every connection thread, present and future, to
  // the CPUs of `set`.
  void SetAffinity(const cpu_set_t& set) {
    std::lock_guard<std::mutex> lock(mu_);
    affinity_ = set;
    pthread_setaffinity_np(acceptor_.native_handle(), sizeof(set), &set);
    for (auto& t : workers_) pthread_setaffinity_np(t.native_handle(), sizeof(set), &set);
  }

 private:
  void Accept() {
    while (!stop_.load()) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      int one = 1;
      ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      std::lock_guard<std::mutex> lock(mu_);
      conns_.push_back(c);
      workers_.emplace_back([c] { Serve(c); });
      pthread_setaffinity_np(workers_.back().native_handle(), sizeof(affinity_), &affinity_);
    }
  }
  static void Serve(int c) {
    static const char kReply[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    std::string buf;
    char chunk[8192];
    for (;;) {
      std::size_t end;
      while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
        ssize_t n = ::recv(c, chunk, sizeof(chunk), 0);
        if (n <= 0) {
          ::close(c);
          return;
        }
        buf.append(chunk, static_cast<std::size_t>(n));
      }
      std::size_t length = 0;
      std::size_t cl = buf.find("Content-Length:");
      if (cl == std::string::npos) cl = buf.find("content-length:");
      if (cl != std::string::npos && cl < end)
        length = std::strtoull(buf.c_str() + cl + 15, nullptr, 10);
      while (buf.size() < end + 4 + length) {
        ssize_t n = ::recv(c, chunk, sizeof(chunk), 0);
        if (n <= 0) {
          ::close(c);
          return;
        }
        buf.append(chunk, static_cast<std::size_t>(n));
      }
      buf.erase(0, end + 4 + length);
      if (::send(c, kReply, sizeof(kReply) - 1, MSG_NOSIGNAL) < 0) {
        ::close(c);
        return;
      }
    }
  }

  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<int> conns_;
  std::vector<std::thread> workers_;
  cpu_set_t affinity_ = AllowedCpus();  // Guarded by mu_.
};

size_t Sink(char* data, size_t size, size_t n, void* userp) {
  static_cast<std::string*>(userp)->append(data, size * n);
  return size * n;
}

constexpr int kRounds = 20;
constexpr int kCallsPerRound = 500;
constexpr auto kTimeBudget = std::chrono::seconds(10);
const char kBody[] = R"({"sku":"sku-42","quantity":1})";

struct Side {
  int calls = 0;
  int failures = 0;
  std::vector<double> round_us;      // Wall time per call, each round.
  std::vector<double> round_cpu_us;  // Client-thread CPU time per call, each round.
  std::size_t new_calls = 0, new_bytes = 0, malloc_calls = 0, malloc_bytes = 0;
};

template <typename F>
void RunRound(Side& side, int n, F&& one_call) {
  t_new_calls = t_new_bytes = t_malloc_calls = t_malloc_bytes = 0;
  t_counting = true;
  const auto cpu_start = ThreadCpuTime();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    if (!one_call()) ++side.failures;
  }
  const auto wall = std::chrono::steady_clock::now() - start;
  const auto cpu = ThreadCpuTime() - cpu_start;
  t_counting = false;
  side.calls += n;
  side.round_us.push_back(std::chrono::duration<double, std::micro>(wall).count() / n);
  side.round_cpu_us.push_back(std::chrono::duration<double, std::micro>(cpu).count() / n);
  side.new_calls += t_new_calls;
  side.new_bytes += t_new_bytes;
  side.malloc_calls += t_malloc_calls;
  side.malloc_bytes += t_malloc_bytes;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t mid = v.size() / 2;
  return v.size() % 2 == 1 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

struct Phase {
  Side raw, saferetry, transport, per_request;
};

// Warms up, then runs the three loops in interleaved rounds, alternating
// which goes first.
template <typename Raw, typename Saferetry, typename TransportOnly, typename PerRequest>
Phase RunPhase(Raw&& raw_call, Saferetry&& saferetry_call, TransportOnly&& transport_call,
               PerRequest&& per_request_call) {
  for (int i = 0; i < 200; ++i) {
    raw_call();
    saferetry_call();
    transport_call();
    per_request_call();
  }
  Phase ph;
  const auto phase_start = std::chrono::steady_clock::now();
  for (int round = 0; round < kRounds; ++round) {
    if (std::chrono::steady_clock::now() - phase_start > kTimeBudget) break;
    if (round % 2 == 0) {
      RunRound(ph.raw, kCallsPerRound, raw_call);
      RunRound(ph.per_request, kCallsPerRound, per_request_call);
      RunRound(ph.saferetry, kCallsPerRound, saferetry_call);
      RunRound(ph.transport, kCallsPerRound, transport_call);
    } else {
      RunRound(ph.transport, kCallsPerRound, transport_call);
      RunRound(ph.saferetry, kCallsPerRound, saferetry_call);
      RunRound(ph.per_request, kCallsPerRound, per_request_call);
      RunRound(ph.raw, kCallsPerRound, raw_call);
    }
  }
  return ph;
}

void PrintPhase(const char* name, const Phase& ph) {
  std::printf("%s: calls_per_side=%d failures_raw=%d failures_saferetry=%d\n", name, ph.raw.calls,
              ph.raw.failures, ph.saferetry.failures);
  std::printf(
      "%s: raw_us_per_call=%.2f saferetry_us_per_call=%.2f transport_only_us_per_call=%.2f\n", name,
      Median(ph.raw.round_us), Median(ph.saferetry.round_us), Median(ph.transport.round_us));
  std::printf(
      "%s: raw_cpu_us_per_call=%.2f saferetry_cpu_us_per_call=%.2f "
      "transport_only_cpu_us_per_call=%.2f (client thread)\n",
      name, Median(ph.raw.round_cpu_us), Median(ph.saferetry.round_cpu_us),
      Median(ph.transport.round_cpu_us));
  std::printf("%s: raw_per_request_us_per_call=%.2f raw_per_request_cpu_us_per_call=%.2f\n", name,
              Median(ph.per_request.round_us), Median(ph.per_request.round_cpu_us));
}

double PerCall(std::size_t total, int calls) {
  return calls == 0 ? 0 : static_cast<double>(total) / calls;
}

}  // namespace

// GCC flags free() of memory from a replaced operator new as mismatched; here
// both sides are ours and use malloc/free.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  CountNew(n);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  CountNew(n);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { operator delete(p); }
void operator delete[](void* p, std::size_t) noexcept { operator delete[](p); }
#pragma GCC diagnostic pop

int main() {
  if (curl_global_init_mem(CURL_GLOBAL_DEFAULT, CurlMalloc, CurlFree, CurlRealloc, CurlStrdup,
                           CurlCalloc) != CURLE_OK) {
    std::fprintf(stderr, "curl_global_init_mem failed\n");
    return 1;
  }
  BenchServer server;
  const std::string url = server.Url();

  // Plain libcurl: one easy handle, options set once, perform in a loop.
  CURL* raw = curl_easy_init();
  std::string raw_response;
  // The same request saferetry sends, byte for byte in size: the headers it
  // adds (key, deadline, attempt number) and no Expect, so the ratio measures
  // the library, not a difference on the wire.
  curl_slist* raw_headers = curl_slist_append(nullptr, "Content-Type: application/json");
  raw_headers =
      curl_slist_append(raw_headers, "Idempotency-Key: 0b7c6f9e-3a52-4b8e-9a0c-2f1d5e6a7b8c");
  raw_headers = curl_slist_append(raw_headers, "X-Request-Timeout-Ms: 4990");
  raw_headers = curl_slist_append(raw_headers, "X-Retry-Attempt: attempt=1; max=3");
  raw_headers = curl_slist_append(raw_headers, "Expect:");
  curl_easy_setopt(raw, CURLOPT_URL, url.c_str());
  curl_easy_setopt(raw, CURLOPT_NOSIGNAL, 1L);
  // The User-Agent the transport sends by default: the same bytes on the wire.
  curl_easy_setopt(raw, CURLOPT_USERAGENT, kUserAgent);
  curl_easy_setopt(raw, CURLOPT_HTTPHEADER, raw_headers);
  curl_easy_setopt(raw, CURLOPT_POSTFIELDS, kBody);
  curl_easy_setopt(raw, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(sizeof(kBody) - 1));
  curl_easy_setopt(raw, CURLOPT_WRITEFUNCTION, Sink);
  curl_easy_setopt(raw, CURLOPT_WRITEDATA, &raw_response);
  curl_easy_setopt(raw, CURLOPT_TIMEOUT_MS, 5000L);
  auto raw_call = [&] {
    raw_response.clear();
    long code = 0;
    return curl_easy_perform(raw) == CURLE_OK &&
           curl_easy_getinfo(raw, CURLINFO_RESPONSE_CODE, &code) == CURLE_OK && code == 200;
  };

  // Plain libcurl as a real caller writes it: the request set up on every
  // call (URL, a header list built and freed, the body), on one reused easy
  // handle. The bar the library is measured against.
  CURL* per_request = curl_easy_init();
  std::string per_request_response;
  curl_easy_setopt(per_request, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(per_request, CURLOPT_USERAGENT, kUserAgent);
  curl_easy_setopt(per_request, CURLOPT_WRITEFUNCTION, Sink);
  curl_easy_setopt(per_request, CURLOPT_WRITEDATA, &per_request_response);
  auto per_request_call = [&] {
    per_request_response.clear();
    curl_easy_setopt(per_request, CURLOPT_URL, url.c_str());
    curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
    headers = curl_slist_append(headers, "Idempotency-Key: 0b7c6f9e-3a52-4b8e-9a0c-2f1d5e6a7b8c");
    headers = curl_slist_append(headers, "X-Request-Timeout-Ms: 4990");
    headers = curl_slist_append(headers, "X-Retry-Attempt: attempt=1; max=3");
    headers = curl_slist_append(headers, "Expect:");
    curl_easy_setopt(per_request, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(per_request, CURLOPT_POSTFIELDS, kBody);
    curl_easy_setopt(per_request, CURLOPT_POSTFIELDSIZE_LARGE,
                     static_cast<curl_off_t>(sizeof(kBody) - 1));
    curl_easy_setopt(per_request, CURLOPT_TIMEOUT_MS, 5000L);
    long code = 0;
    const bool ok = curl_easy_perform(per_request) == CURLE_OK &&
                    curl_easy_getinfo(per_request, CURLINFO_RESPONSE_CODE, &code) == CURLE_OK &&
                    code == 200;
    curl_easy_setopt(per_request, CURLOPT_HTTPHEADER, nullptr);
    curl_slist_free_all(headers);
    return ok;
  };

  // saferetry: Client::Execute through the curl transport; a keyed POST with
  // the deadline header, as a service would send it.
  saferetry::ClientOptions options;
  saferetry::CurlTransportOptions transport_options;
  transport_options.user_agent = kUserAgent;  // its default, spelled out: the raw loops send it too
  options.transport = saferetry::MakeCurlTransport(transport_options).value();
  std::shared_ptr<saferetry::Transport> transport = options.transport;
  auto client = saferetry::Client::Create(std::move(options)).value();
  saferetry::Request request;
  request.method = "POST";
  request.url = url;
  request.headers = {{"Content-Type", "application/json"}};
  request.body = kBody;
  saferetry::CallOptions call;
  call.timeout = std::chrono::seconds(5);
  auto saferetry_call = [&] {
    saferetry::CallResult r = client->Execute(request, call);
    return r.outcome == saferetry::Outcome::kSucceeded && r.attempts == 1;
  };

  // The transport alone (one attempt, no client): where the cost is.
  const saferetry::HeaderRef extra[] = {{"Idempotency-Key", "0b7c6f9e-3a52-4b8e-9a0c-2f1d5e6a7b8c"},
                                        {"X-Request-Timeout-Ms", "4990"},
                                        {"X-Retry-Attempt", "attempt=1; max=3"}};
  saferetry::AttemptOptions attempt;
  attempt.timeout = std::chrono::seconds(5);
  attempt.extra_headers = extra;
  auto transport_call = [&] {
    saferetry::TransportResult r = transport->Send(request, attempt);
    return r.status.ok() && r.response->status_code == 200;
  };

  // Pinned: the client thread and every server thread on one CPU, so a
  // request and its answer never wait for a thread to wake on another CPU.
  const cpu_set_t allowed = AllowedCpus();
  int cpu = 0;
  while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &allowed)) ++cpu;
  cpu_set_t one_cpu;
  CPU_ZERO(&one_cpu);
  CPU_SET(cpu, &one_cpu);
  SetThisThreadAffinity(one_cpu);
  server.SetAffinity(one_cpu);
  const Phase pinned = RunPhase(raw_call, saferetry_call, transport_call, per_request_call);

  // Unpinned: every thread may run on any allowed CPU.
  SetThisThreadAffinity(allowed);
  server.SetAffinity(allowed);
  const Phase unpinned = RunPhase(raw_call, saferetry_call, transport_call, per_request_call);

  curl_easy_cleanup(per_request);
  curl_easy_cleanup(raw);
  curl_slist_free_all(raw_headers);

  std::printf("cpus_allowed=%d pinned_cpu=%d\n", CPU_COUNT(&allowed), cpu);
  PrintPhase("pinned", pinned);
  PrintPhase("unpinned", unpinned);
  const Side& sr = pinned.saferetry;
  const Side& rw = pinned.raw;
  const Side& tr = pinned.transport;
  std::printf("transport_only_new_per_call: allocations=%.2f bytes=%.1f\n",
              PerCall(tr.new_calls, tr.calls), PerCall(tr.new_bytes, tr.calls));
  std::printf("saferetry_new_per_call: allocations=%.2f bytes=%.1f\n",
              PerCall(sr.new_calls, sr.calls), PerCall(sr.new_bytes, sr.calls));
  std::printf("raw_new_per_call: allocations=%.2f bytes=%.1f\n", PerCall(rw.new_calls, rw.calls),
              PerCall(rw.new_bytes, rw.calls));
  std::printf(
      "libcurl_malloc_per_call: saferetry allocations=%.2f bytes=%.1f, raw allocations=%.2f "
      "bytes=%.1f\n",
      PerCall(sr.malloc_calls, sr.calls), PerCall(sr.malloc_bytes, sr.calls),
      PerCall(rw.malloc_calls, rw.calls), PerCall(rw.malloc_bytes, rw.calls));

  const double raw_us = Median(pinned.raw.round_us);
  const double sr_us = Median(pinned.saferetry.round_us);
  const double raw_cpu = Median(pinned.raw.round_cpu_us);
  const double sr_cpu = Median(pinned.saferetry.round_cpu_us);
  std::printf(
      "# unpinned: the scheduler may put the two server threads and the client on\n"
      "# different CPUs; a cross-CPU wake-up of an idle CPU can cost more than the\n"
      "# request, so this ratio measures placement, not the library.\n");
  std::printf("unpinned_ratio_vs_raw_libcurl=%.3f\n",
              Median(unpinned.raw.round_us) / Median(unpinned.saferetry.round_us));
  std::printf("unpinned_overhead_us_per_call=%.2f\n",
              Median(unpinned.saferetry.round_us) - Median(unpinned.raw.round_us));
  std::printf("transport_only_overhead_us_per_call=%.2f\n",
              Median(pinned.transport.round_us) - raw_us);
  std::printf("cpu_overhead_us_per_call=%.2f\n", sr_cpu - raw_cpu);
  const double per_request_cpu = Median(pinned.per_request.round_cpu_us);
  std::printf("cpu_overhead_us_per_call_vs_raw_per_request=%.2f\n", sr_cpu - per_request_cpu);
  // Paired: each round's saferetry side minus the same round's per-request
  // side (run next to it), then the median of those differences. A host
  // that slows down between rounds moves both sides of a pair alike.
  std::vector<double> paired;
  for (std::size_t i = 0;
       i < pinned.saferetry.round_cpu_us.size() && i < pinned.per_request.round_cpu_us.size();
       ++i) {
    paired.push_back(pinned.saferetry.round_cpu_us[i] - pinned.per_request.round_cpu_us[i]);
  }
  std::printf("cpu_overhead_us_per_call_vs_raw_per_request_paired=%.2f (median of %zu rounds)\n",
              Median(paired), paired.size());
  std::printf("transport_only_cpu_overhead_us_per_call_vs_raw_per_request=%.2f\n",
              Median(pinned.transport.round_cpu_us) - per_request_cpu);
  std::printf("pinned_ratio_vs_raw_libcurl=%.3f\n", raw_us / sr_us);
  std::printf("overhead_us_per_call=%.2f\n", sr_us - raw_us);
  const bool ok = pinned.raw.failures == 0 && pinned.saferetry.failures == 0 &&
                  pinned.per_request.failures == 0 && unpinned.per_request.failures == 0 &&
                  unpinned.raw.failures == 0 && unpinned.saferetry.failures == 0;
  return ok ? 0 : 1;
}

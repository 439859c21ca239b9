// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// saferetry's synchronous call through the libcurl transport vs a plain
// libcurl easy-handle loop: sequential POSTs over one kept-alive loopback
// connection to the same server, in the same process, interleaved in rounds
// so drift hits both sides alike. Prints `ratio_vs_raw_libcurl=<x>`
// (saferetry throughput / raw throughput) and the bytes allocated per call.
//
// Bounded: at most kRequestsPerSide requests per side or kTimeBudget in
// total, whichever comes first.

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "saferetry/client.h"
#include "saferetry/curl_transport.h"

namespace {

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
      if (cl != std::string::npos && cl < end) length = std::strtoull(buf.c_str() + cl + 15, nullptr, 10);
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
};

size_t Sink(char* data, size_t size, size_t n, void* userp) {
  static_cast<std::string*>(userp)->append(data, size * n);
  return size * n;
}

constexpr int kRounds = 10;
constexpr int kRequestsPerSide = 2000;
constexpr auto kTimeBudget = std::chrono::seconds(5);
const char kBody[] = R"({"sku":"sku-42","quantity":1})";

struct Side {
  int calls = 0;
  int failures = 0;
  std::chrono::nanoseconds time{0};
  std::size_t new_calls = 0, new_bytes = 0, malloc_calls = 0, malloc_bytes = 0;
};

template <typename F>
void RunRound(Side& side, int n, F&& one_call) {
  t_new_calls = t_new_bytes = t_malloc_calls = t_malloc_bytes = 0;
  t_counting = true;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    if (!one_call()) ++side.failures;
  }
  side.time += std::chrono::steady_clock::now() - start;
  t_counting = false;
  side.calls += n;
  side.new_calls += t_new_calls;
  side.new_bytes += t_new_bytes;
  side.malloc_calls += t_malloc_calls;
  side.malloc_bytes += t_malloc_bytes;
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

  // saferetry: Client::Execute through the curl transport; a keyed POST with
  // the deadline header, as a service would send it.
  saferetry::ClientOptions options;
  options.transport = saferetry::MakeCurlTransport({}).value();
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
  saferetry::Headers extra = {{"Idempotency-Key", "0b7c6f9e-3a52-4b8e-9a0c-2f1d5e6a7b8c"},
                              {"X-Request-Timeout-Ms", "4990"},
                              {"X-Retry-Attempt", "attempt=1; max=3"}};
  saferetry::AttemptOptions attempt;
  attempt.timeout = std::chrono::seconds(5);
  attempt.extra_headers = &extra;
  auto transport_call = [&] {
    saferetry::TransportResult r = transport->Send(request, attempt);
    return r.status.ok() && r.response->status_code == 200;
  };

  // Warm up both: connections open, pools and caches filled.
  for (int i = 0; i < 200; ++i) {
    raw_call();
    saferetry_call();
    transport_call();
  }

  Side raw_side, sr_side, tr_side;
  const auto bench_start = std::chrono::steady_clock::now();
  const int per_round = kRequestsPerSide / kRounds;
  for (int round = 0; round < kRounds; ++round) {
    if (std::chrono::steady_clock::now() - bench_start > kTimeBudget) break;
    // Alternate which side goes first.
    if (round % 2 == 0) {
      RunRound(raw_side, per_round, raw_call);
      RunRound(sr_side, per_round, saferetry_call);
      RunRound(tr_side, per_round, transport_call);
    } else {
      RunRound(tr_side, per_round, transport_call);
      RunRound(sr_side, per_round, saferetry_call);
      RunRound(raw_side, per_round, raw_call);
    }
  }
  curl_easy_cleanup(raw);
  curl_slist_free_all(raw_headers);

  auto per_sec = [](const Side& s) {
    return s.calls / std::chrono::duration<double>(s.time).count();
  };
  const double raw_tput = per_sec(raw_side);
  const double sr_tput = per_sec(sr_side);
  std::printf("requests_per_side=%d failures_raw=%d failures_saferetry=%d\n", raw_side.calls,
              raw_side.failures, sr_side.failures);
  std::printf("raw_libcurl_rps=%.0f saferetry_rps=%.0f\n", raw_tput, sr_tput);
  std::printf("raw_us_per_call=%.2f saferetry_us_per_call=%.2f transport_only_us_per_call=%.2f\n",
              1e6 / raw_tput, 1e6 / sr_tput, 1e6 / per_sec(tr_side));
  std::printf("transport_only_new_per_call: allocations=%.2f bytes=%.1f\n",
              double(tr_side.new_calls) / tr_side.calls, double(tr_side.new_bytes) / tr_side.calls);
  std::printf("saferetry_new_per_call: allocations=%.2f bytes=%.1f\n",
              double(sr_side.new_calls) / sr_side.calls, double(sr_side.new_bytes) / sr_side.calls);
  std::printf("raw_new_per_call: allocations=%.2f bytes=%.1f\n",
              double(raw_side.new_calls) / raw_side.calls,
              double(raw_side.new_bytes) / raw_side.calls);
  std::printf("libcurl_malloc_per_call: saferetry allocations=%.2f bytes=%.1f, raw allocations=%.2f "
              "bytes=%.1f\n",
              double(sr_side.malloc_calls) / sr_side.calls,
              double(sr_side.malloc_bytes) / sr_side.calls,
              double(raw_side.malloc_calls) / raw_side.calls,
              double(raw_side.malloc_bytes) / raw_side.calls);
  std::printf("transport_only_ratio_vs_raw_libcurl=%.3f\n", per_sec(tr_side) / raw_tput);
  std::printf("ratio_vs_raw_libcurl=%.3f\n", sr_tput / raw_tput);
  return (raw_side.failures == 0 && sr_side.failures == 0) ? 0 : 1;
}

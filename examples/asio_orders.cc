// Copyright 2026 The saferetry Authors. Licensed under the Apache License,
// Version 2.0.
//
// A service loop on Asio: a thousand order calls in flight at once on an
// `asio::io_context` run by two threads, over the libcurl multi transport on
// `saferetry::AsioEventLoop`, against an order server in the same process
// (an Asio HTTP/1.1 server on 127.0.0.1, on the same context). The server
// answers every 11th new order with a 503 marked `Idempotency-Key-State:
// rejected` (a key at most once) and deduplicates
// by `Idempotency-Key`, so the retries are sent with the same key and every
// order is created exactly once. Prints a one-line summary; exits 1 if any
// call did not succeed or any order was created twice.

#include <sys/resource.h>

#include <algorithm>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/read_until.hpp>
#include <asio/streambuf.hpp>
#include <asio/write.hpp>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "saferetry/asio_event_loop.h"
#include "saferetry/async_client.h"
#include "saferetry/curl_async_transport.h"

namespace {

using asio::ip::tcp;

constexpr int kCalls = 1000;

// The orders the server created, by idempotency key (shared by its
// connections, which run on both threads).
struct OrderBook {
  std::mutex mu;
  std::map<std::string, int> by_key;    // key -> order id
  std::set<std::string> rejected_keys;  // answered 503 once: the next copy is served
  int created = 0;
  int rejected = 0;  // 503s: nothing created
  int replayed = 0;  // a known key: the stored answer again
  int connections = 0;
};

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// One keep-alive connection: read a request (headers, then Content-Length
// bytes of body), answer, repeat.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, OrderBook& book) : socket_(std::move(socket)), book_(book) {}

  void ReadHeaders() {
    asio::async_read_until(socket_, buffer_, "\r\n\r\n",
                           [self = shared_from_this()](const asio::error_code& ec, std::size_t n) {
                             if (!ec) self->OnHeaders(n);
                           });
  }

 private:
  void OnHeaders(std::size_t header_bytes) {
    std::string head(
        asio::buffers_begin(buffer_.data()),
        asio::buffers_begin(buffer_.data()) + static_cast<std::ptrdiff_t>(header_bytes));
    buffer_.consume(header_bytes);
    std::size_t content_length = 0;
    key_.clear();
    std::size_t pos = head.find("\r\n");
    while (pos != std::string::npos && pos + 2 < head.size()) {
      const std::size_t end = head.find("\r\n", pos + 2);
      const std::string line = head.substr(pos + 2, end - pos - 2);
      const std::size_t colon = line.find(':');
      if (colon != std::string::npos) {
        const std::string name = Lower(line.substr(0, colon));
        std::string value = line.substr(colon + 1);
        value.erase(0, value.find_first_not_of(' '));
        if (name == "content-length") content_length = std::strtoul(value.c_str(), nullptr, 10);
        if (name == "idempotency-key") key_ = value;
      }
      pos = end;
    }
    const std::size_t have = buffer_.size();
    const std::size_t need = content_length > have ? content_length - have : 0;
    asio::async_read(
        socket_, buffer_, asio::transfer_exactly(need),
        [self = shared_from_this(), content_length](const asio::error_code& ec, std::size_t) {
          if (ec) return;
          self->buffer_.consume(content_length);
          self->Answer();
        });
  }

  void Answer() {
    int status = 201;
    int id = 0;
    {
      std::lock_guard<std::mutex> lock(book_.mu);
      auto it = book_.by_key.find(key_);
      if (!key_.empty() && it != book_.by_key.end()) {
        id = it->second;
        ++book_.replayed;
      } else if ((book_.created + book_.rejected + 1) % 11 == 0 &&
                 book_.rejected_keys.insert(key_).second) {
        status = 503;
        ++book_.rejected;
      } else {
        id = ++book_.created;
        if (!key_.empty()) book_.by_key[key_] = id;
      }
    }
    const std::string body = status == 201 ? "{\"id\":" + std::to_string(id) + "}" : "busy";
    reply_ =
        "HTTP/1.1 " +
        std::string(status == 201 ? "201 Created"
                                  // Refused before any work, and marked so (the server
                                  // contract): the client retries it with the same key.
                                  : "503 Service Unavailable\r\nIdempotency-Key-State: rejected") +
        "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\n\r\n" + body;
    asio::async_write(socket_, asio::buffer(reply_),
                      [self = shared_from_this()](const asio::error_code& ec, std::size_t) {
                        if (!ec) self->ReadHeaders();
                      });
  }

  tcp::socket socket_;
  OrderBook& book_;
  asio::streambuf buffer_;
  std::string key_;
  std::string reply_;
};

// Each connection on a strand of its own; the acceptor on another.
void Accept(asio::io_context& io, tcp::acceptor& acceptor, OrderBook& book) {
  acceptor.async_accept(asio::make_strand(io),
                        [&io, &acceptor, &book](const asio::error_code& ec, tcp::socket socket) {
                          if (ec) return;  // closed: the server stops
                          {
                            std::lock_guard<std::mutex> lock(book.mu);
                            ++book.connections;
                          }
                          std::make_shared<Connection>(std::move(socket), book)->ReadHeaders();
                          Accept(io, acceptor, book);
                        });
}

// Both ends of a thousand connections live in this process.
void RaiseDescriptorLimit(rlim_t want) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= want) return;
  limit.rlim_cur = std::min(want, limit.rlim_max);
  setrlimit(RLIMIT_NOFILE, &limit);
}

}  // namespace

int main() {
  RaiseDescriptorLimit(4 * kCalls);
  asio::io_context io;
  auto work = asio::make_work_guard(io);

  // The order server, on the same context.
  OrderBook book;
  tcp::acceptor acceptor(asio::make_strand(io));
  asio::error_code ec;
  const tcp::endpoint local(asio::ip::make_address_v4("127.0.0.1"), 0);
  acceptor.open(local.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(local, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    std::fprintf(stderr, "server: %s\n", ec.message().c_str());
    return 1;
  }
  const unsigned short port = acceptor.local_endpoint(ec).port();
  Accept(io, acceptor, book);

  // The client: every callback runs on the loop's strand.
  auto loop = std::make_shared<saferetry::AsioEventLoop>(io);
  saferetry::CurlMultiTransportOptions transport_options;
  transport_options.max_connections = kCalls;  // keep every connection for the next calls
  auto made = saferetry::MakeCurlMultiTransport(loop, transport_options);
  if (!made.ok()) {
    std::fprintf(stderr, "transport: %s\n", std::string(made.status().message()).c_str());
    return 1;
  }
  std::shared_ptr<saferetry::AsyncTransport> transport = *std::move(made);
  saferetry::AsyncClientOptions options;
  options.loop = loop;
  options.transport = transport;
  options.run_loop_thread = false;
  auto created = saferetry::AsyncClient::Create(std::move(options));
  if (!created.ok()) {
    std::fprintf(stderr, "client: %s\n", std::string(created.status().message()).c_str());
    return 1;
  }
  std::unique_ptr<saferetry::AsyncClient> client = *std::move(created);

  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) threads.emplace_back([&io] { io.run(); });

  saferetry::CallOptions call;
  call.timeout = std::chrono::seconds(10);
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/orders";
  // Counted on the strand, where every result callback runs.
  int succeeded = 0;
  int attempts = 0;
  int done = 0;
  std::promise<void> all_done;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kCalls; ++i) {
    saferetry::Request order{"POST",
                             url,
                             {{"Content-Type", "application/json"}},
                             "{\"sku\":\"sku-" + std::to_string(i) + "\",\"quantity\":1}"};
    client->Execute(std::move(order), call, [&](saferetry::CallResult r) {
      succeeded += r.outcome == saferetry::Outcome::kSucceeded ? 1 : 0;
      if (r.outcome != saferetry::Outcome::kSucceeded) {
        std::fprintf(stderr, "call: %s / %s after %d attempts: %s\n",
                     std::string(saferetry::OutcomeName(r.outcome)).c_str(),
                     std::string(saferetry::StopReasonName(r.stop_reason)).c_str(), r.attempts,
                     r.status.ToString().c_str());
      }
      attempts += r.attempts;
      if (++done == kCalls) all_done.set_value();
    });
  }
  const bool finished =
      all_done.get_future().wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  const auto wall = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);

  // Shut down on the strand (the loop thread): the client, then the
  // transport (which unwatches its sockets); then the server and the threads.
  std::promise<void> destroyed;
  asio::post(loop->strand(), [&] {
    client.reset();
    transport.reset();
    destroyed.set_value();
  });
  destroyed.get_future().wait();
  asio::post(acceptor.get_executor(), [&] { acceptor.close(ec); });
  work.reset();
  io.stop();
  for (auto& t : threads) t.join();

  std::lock_guard<std::mutex> lock(book.mu);
  const bool ok = finished && succeeded == kCalls && book.created == kCalls;
  std::printf(
      "asio_orders: %d calls in flight on a 2-thread io_context: %d succeeded, "
      "%d attempts, "
      "%d orders created (%d rejected with 503, %d replayed), %d connections, "
      "%lld ms%s\n",
      kCalls, succeeded, attempts, book.created, book.rejected, book.replayed, book.connections,
      static_cast<long long>(wall.count()), ok ? "" : " -- FAILED");
  return ok ? 0 : 1;
}

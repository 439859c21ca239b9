// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Helpers shared by the orders service tests: a temporary database directory,
// an in-process service on loopback, a gate to pause handler threads, and
// short-hand HTTP calls.

#ifndef SAFERETRY_EXAMPLES_ORDERS_SERVICE_TESTS_SERVICE_TEST_UTIL_H_
#define SAFERETRY_EXAMPLES_ORDERS_SERVICE_TESTS_SERVICE_TEST_UTIL_H_

#include <httplib.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "orders_service/orders_service.h"

namespace saferetry {
namespace example {
namespace testkit {

/// A fresh directory under /tmp, removed with its files on destruction.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/orders-test-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

/// A latch a handler thread can wait on while the test thread looks around.
class Gate {
 public:
  /// Called by the paused thread: announce arrival, wait for Open().
  void ArriveAndWait() {
    std::unique_lock<std::mutex> lock(mu_);
    arrived_ = true;
    cv_.notify_all();
    cv_.wait_for(lock, std::chrono::seconds(10), [&] { return open_; });
  }
  /// Waits (bounded) until a thread has arrived.
  bool WaitArrived() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return arrived_; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool arrived_ = false;
  bool open_ = false;
};

// Starts the service executable `bin` with `args` as a child process and
// reads the "listening <port>" line it prints; the port is 0 when it did not
// start. Returns the child's pid (<= 0 when fork failed). How the child is
// stopped is the caller's choice.
inline pid_t SpawnServiceProcess(const std::string& bin, std::vector<std::string> args, int* port) {
  *port = 0;
  int out[2];
  if (pipe(out) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    close(out[1]);
    std::string path = bin;
    std::vector<char*> argv;
    argv.push_back(path.data());
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(path.c_str(), argv.data());
    _exit(127);
  }
  close(out[1]);
  // "listening <port>\n", bounded by the read end closing on exit.
  FILE* f = fdopen(out[0], "r");
  if (fscanf(f, "listening %d", port) != 1) *port = 0;
  fclose(f);
  return pid;
}

/// Starts `options` (with a database in `dir`) on an ephemeral loopback port.
inline std::unique_ptr<OrdersService> StartService(const TempDir& dir, ServiceOptions options) {
  if (options.store.path.empty()) options.store.path = dir.File("orders.db");
  options.store.synchronous_full = false;  // crash-safe is enough for tests
  auto service = OrdersService::Create(std::move(options));
  EXPECT_TRUE(service.ok()) << service.status();
  if (!service.ok()) return nullptr;
  auto port = (*service)->Start();
  EXPECT_TRUE(port.ok()) << port.status();
  return *std::move(service);
}

inline std::unique_ptr<httplib::Client> ClientFor(
    int port, std::chrono::milliseconds read_timeout = std::chrono::seconds(10)) {
  auto client = std::make_unique<httplib::Client>("127.0.0.1", port);
  client->set_connection_timeout(std::chrono::seconds(5));
  client->set_read_timeout(read_timeout);
  client->set_tcp_nodelay(true);
  return client;
}

inline httplib::Headers KeyHeaders(const std::string& key, const std::string& tenant = "") {
  httplib::Headers h;
  if (!key.empty()) h.emplace("Idempotency-Key", key);
  if (!tenant.empty()) h.emplace("X-Tenant-Id", tenant);
  return h;
}

inline httplib::Result PostOrder(httplib::Client& client, const httplib::Headers& headers,
                                 const std::string& body) {
  return client.Post("/orders", headers, body, "application/json");
}

constexpr char kBody[] = R"({"sku":"sku-42","quantity":1})";
constexpr char kOtherBody[] = R"({"sku":"sku-42","quantity":2})";

}  // namespace testkit
}  // namespace example
}  // namespace saferetry

#endif  // SAFERETRY_EXAMPLES_ORDERS_SERVICE_TESTS_SERVICE_TEST_UTIL_H_

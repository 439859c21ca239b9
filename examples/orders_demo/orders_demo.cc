// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Starts the example orders service (SQLite) on loopback, puts a fault proxy
// in front of it that really loses responses after the order is committed, and
// sends the same batch of intended orders through
//   (a) a careless client: plain libcurl, a new request (new key) on every
//       retry, and
//   (b) saferetry: one key per intent, a status query before any resend.
// Each client gets its own proxy with the same seed, so both face the same
// sequence of faults. The service's database is the source of truth for the
// counts of orders and duplicates.

#include <curl/curl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "orders_service/fault_proxy.h"
#include "orders_service/orders_service.h"
#include "saferetry/client.h"
#include "saferetry/curl_transport.h"

namespace {

using Clock = std::chrono::steady_clock;
using saferetry::example::FaultOptions;
using saferetry::example::FaultProxy;
using saferetry::example::OrdersService;
using saferetry::example::ProxyOptions;
using saferetry::example::ServiceOptions;

struct Tally {
  int intended = 0;
  int succeeded = 0;
  int failed = 0;
  int unknown = 0;
  int resolved_by_query = 0;
  long long requests_sent = 0;
  std::vector<double> latency_ms;
  std::vector<std::string> failed_references;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t i = std::min(v.size() - 1, static_cast<std::size_t>(p * (v.size() - 1) + 0.5));
  return v[i];
}

std::string Body(const std::string& reference) {
  return absl::StrCat(R"({"sku":"sku-42","quantity":1,"client_reference":")", reference, R"("})");
}

size_t Discard(char*, size_t size, size_t n, void*) { return size * n; }

// (a) What many services do: retry on timeout or 5xx with a fresh request.
void RunCareless(int port, int orders, std::chrono::milliseconds attempt_timeout, Tally* t) {
  CURL* h = curl_easy_init();
  const std::string url = absl::StrCat("http://127.0.0.1:", port, "/orders");
  std::uint64_t key_counter = 0;
  for (int i = 0; i < orders; ++i) {
    const std::string body = Body(absl::StrCat("careless-", i));
    const auto start = Clock::now();
    bool ok = false;
    for (int attempt = 1; attempt <= 3 && !ok; ++attempt) {
      // A new request every time: a new key, so the server cannot know.
      const std::string key = absl::StrFormat("careless-%d-%d", i, ++key_counter);
      curl_slist* headers = nullptr;
      headers = curl_slist_append(headers, "Content-Type: application/json");
      headers = curl_slist_append(headers, "X-Tenant-Id: careless");
      headers = curl_slist_append(headers, absl::StrCat("Idempotency-Key: ", key).c_str());
      headers = curl_slist_append(headers, "Expect:");
      curl_easy_setopt(h, CURLOPT_URL, url.c_str());
      curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
      curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.c_str());
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
      curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(attempt_timeout.count()));
      curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, Discard);
      ++t->requests_sent;
      const CURLcode rc = curl_easy_perform(h);
      long code = 0;
      curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
      curl_slist_free_all(headers);
      if (rc == CURLE_OK && code >= 200 && code < 300) ok = true;
      if (!ok && attempt < 3) std::this_thread::sleep_for(std::chrono::milliseconds(20 * attempt));
    }
    t->latency_ms.push_back(
        std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    ++t->intended;
    if (ok) {
      ++t->succeeded;
    } else {
      ++t->failed;
      t->failed_references.push_back(absl::StrCat("careless-", i));
    }
  }
  curl_easy_cleanup(h);
}

// (b) saferetry: one key per intent, status query before any resend.
int RunSaferetry(int port, int orders, std::chrono::milliseconds attempt_timeout, Tally* t) {
  auto transport = saferetry::MakeCurlTransport({});
  if (!transport.ok()) {
    std::fprintf(stderr, "transport: %s\n", std::string(transport.status().message()).c_str());
    return 1;
  }
  saferetry::ClientOptions options;
  options.transport = *transport;
  auto client = saferetry::Client::Create(std::move(options));
  if (!client.ok()) {
    std::fprintf(stderr, "client: %s\n", std::string(client.status().message()).c_str());
    return 1;
  }
  const std::string base = absl::StrCat("http://127.0.0.1:", port);
  saferetry::CallOptions call;
  call.timeout = std::chrono::seconds(10);
  saferetry::RetryPolicyOptions call_policy;
  call_policy.deadline_options.attempt_cap = attempt_timeout;
  call_policy.backoff.base = std::chrono::milliseconds(20);
  call_policy.backoff.cap = std::chrono::milliseconds(500);
  call.policy = saferetry::RetryPolicy::Create(call_policy).value();
  call.status_url = base + "/orders/by-key/{key}";
  for (int i = 0; i < orders; ++i) {
    saferetry::Request req;
    req.method = "POST";
    req.url = base + "/orders";
    req.headers = {{"Content-Type", "application/json"}, {"X-Tenant-Id", "saferetry"}};
    req.body = Body(absl::StrCat("saferetry-", i));
    const auto start = Clock::now();
    saferetry::CallResult r = (*client)->Execute(req, call);
    t->latency_ms.push_back(
        std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    ++t->intended;
    t->requests_sent += r.attempts + r.status_queries;
    switch (r.outcome) {
      case saferetry::Outcome::kSucceeded:
        ++t->succeeded;
        if (r.resolved_by_status_query) ++t->resolved_by_query;
        break;
      case saferetry::Outcome::kFailed:
        ++t->failed;
        break;
      case saferetry::Outcome::kUnknown:
        ++t->unknown;
        break;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "saferetry demo: a careless client vs saferetry against a service that loses responses"};
  int orders = 150;
  std::uint64_t seed = 42;
  double drop = 0.15, hang = 0.05, reset = 0.05, unavailable = 0.02;
  int attempt_timeout_ms = 250;
  app.add_option("--orders", orders, "Intended orders per client")->check(CLI::Range(1, 5000));
  app.add_option("--seed", seed, "Fault seed (both proxies use it)");
  app.add_option("--drop", drop, "P(commit, then the response is lost)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--hang", hang, "P(commit, then no answer)")->check(CLI::Range(0.0, 1.0));
  app.add_option("--reset", reset, "P(reset before commit)")->check(CLI::Range(0.0, 1.0));
  app.add_option("--unavailable", unavailable, "P(503 + Retry-After: 1)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--attempt-timeout-ms", attempt_timeout_ms, "Per-attempt timeout")
      ->check(CLI::Range(20, 10000));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return e.get_exit_code() == 0 ? app.exit(e) : (std::fprintf(stderr, "%s\n", e.what()), 64);
  }

  char dir_template[] = "/tmp/saferetry-demo-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (dir == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string db = std::string(dir) + "/orders.db";

  ServiceOptions so;
  so.store.path = db;
  so.store.synchronous_full = false;
  auto service = OrdersService::Create(so);
  if (!service.ok()) {
    std::fprintf(stderr, "service: %s\n", std::string(service.status().message()).c_str());
    return 1;
  }
  auto service_port = (*service)->Start();
  if (!service_port.ok()) {
    std::fprintf(stderr, "service: %s\n", std::string(service_port.status().message()).c_str());
    return 1;
  }

  auto start_proxy = [&]() {
    ProxyOptions po;
    po.upstream_port = *service_port;
    po.faults.drop_after_commit = drop;
    po.faults.hang_after_commit = hang;
    po.faults.reset_before_commit = reset;
    po.faults.unavailable = unavailable;
    po.faults.seed = seed;
    po.faults.hang_limit = std::chrono::seconds(5);
    return FaultProxy::Start(po);
  };
  auto careless_proxy = start_proxy();
  auto safe_proxy = start_proxy();
  if (!careless_proxy.ok() || !safe_proxy.ok()) {
    std::fprintf(
        stderr, "proxy: %s\n",
        std::string((careless_proxy.ok() ? safe_proxy.status() : careless_proxy.status()).message())
            .c_str());
    return 1;
  }

  std::printf(
      "orders service on 127.0.0.1:%d (SQLite %s); two fault proxies, seed %llu:\n"
      "  commit then drop %.0f%%, commit then hang %.0f%%, reset before commit %.0f%%, "
      "503 + Retry-After %.0f%%; attempt timeout %d ms\n\n",
      *service_port, db.c_str(), static_cast<unsigned long long>(seed), drop * 100, hang * 100,
      reset * 100, unavailable * 100, attempt_timeout_ms);
  std::fflush(stdout);

  Tally careless, safe;
  const auto timeout = std::chrono::milliseconds(attempt_timeout_ms);
  RunCareless((*careless_proxy)->port(), orders, timeout, &careless);
  if (RunSaferetry((*safe_proxy)->port(), orders, timeout, &safe) != 0) return 1;

  (*careless_proxy)->Stop();
  (*safe_proxy)->Stop();
  // Let the service finish requests whose clients gave up.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto rows = (*service)->store().ListOrders();
  if (!rows.ok()) {
    std::fprintf(stderr, "database: %s\n", std::string(rows.status().message()).c_str());
    return 1;
  }
  std::map<std::string, std::map<std::string, int>> per_tenant;  // tenant -> reference -> orders
  for (const auto& row : *rows) ++per_tenant[row.tenant][row.client_reference];
  auto created = [&](const std::string& tenant) {
    int n = 0;
    for (const auto& [ref, count] : per_tenant[tenant]) n += count;
    return n;
  };
  auto duplicates = [&](const std::string& tenant) {
    int n = 0;
    for (const auto& [ref, count] : per_tenant[tenant]) n += count - 1;
    return n;
  };
  const int careless_created = created("careless"), safe_created = created("saferetry");
  const int careless_dups = duplicates("careless"), safe_dups = duplicates("saferetry");

  std::printf("%-36s %18s %18s\n", "", "careless client", "saferetry");
  auto row = [](const char* name, const std::string& a, const std::string& b) {
    std::printf("%-36s %18s %18s\n", name, a.c_str(), b.c_str());
  };
  auto num = [](long long v) { return std::to_string(v); };
  auto ms = [](double v) { return absl::StrFormat("%.1f ms", v); };
  row("orders intended", num(careless.intended), num(safe.intended));
  row("orders created (database)", num(careless_created), num(safe_created));
  row("duplicate orders (database)", num(careless_dups), num(safe_dups));
  row("requests sent (incl. status queries)", num(careless.requests_sent), num(safe.requests_sent));
  row("outcome SUCCEEDED", num(careless.succeeded), num(safe.succeeded));
  row("outcome FAILED", num(careless.failed), num(safe.failed));
  row("outcome UNKNOWN", "n/a (no such state)", num(safe.unknown));
  row("UNKNOWNs resolved by status query", "-", num(safe.resolved_by_query));
  row("latency p50", ms(Percentile(careless.latency_ms, 0.5)),
      ms(Percentile(safe.latency_ms, 0.5)));
  row("latency p99", ms(Percentile(careless.latency_ms, 0.99)),
      ms(Percentile(safe.latency_ms, 0.99)));
  int careless_lies = 0;
  for (const std::string& ref : careless.failed_references) {
    if (per_tenant["careless"].count(ref) != 0) ++careless_lies;
  }
  std::printf("\ncareless client: %d calls reported FAILED although their order exists.\n",
              careless_lies);
  std::printf(
      "saferetry: every SUCCEEDED has exactly one order; %d UNKNOWN left to reconcile by key.\n",
      safe.unknown);

  (*service)->Stop();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  // The demo fails (exit 1) if saferetry ever created a duplicate.
  return safe_dups == 0 ? 0 : 1;
}

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "orders_service/orders_service.h"

#include <httplib.h>
#include <openssl/evp.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace saferetry {
namespace example {

namespace {

constexpr char kJson[] = "application/json";

void Answer(httplib::Response& res, int status, const std::string& body) {
  res.status = status;
  res.set_content(body, kJson);
}

void AnswerError(httplib::Response& res, int status, std::string_view code,
                 std::string_view message) {
  Answer(res, status, nlohmann::json{{"error", code}, {"message", message}}.dump());
}

// Keys and tenants: 1 to 255 visible ASCII characters, as the client checks.
bool ValidToken(std::string_view s) {
  if (s.empty() || s.size() > 255) return false;
  for (char c : s) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

// The body of a valid order, or the stored 400 answer describing what is wrong.
struct ParsedOrder {
  std::optional<NewOrder> order;
  StoredResponse error;
};

ParsedOrder ParseOrder(const std::string& body) {
  auto invalid = [](std::string message) {
    return ParsedOrder{std::nullopt,
                       StoredResponse{400, nlohmann::json{{"error", "invalid_order"},
                                                          {"message", std::move(message)}}
                                               .dump()}};
  };
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return invalid("body: must be a JSON object");
  auto sku = j.find("sku");
  if (sku == j.end() || !sku->is_string() || sku->get<std::string>().empty() ||
      sku->get<std::string>().size() > 64) {
    return invalid("sku: must be a string of 1 to 64 characters");
  }
  auto quantity = j.find("quantity");
  if (quantity == j.end() || !quantity->is_number_integer() ||
      quantity->get<std::int64_t>() <= 0 || quantity->get<std::int64_t>() > 1000000) {
    return invalid("quantity: must be an integer from 1 to 1000000");
  }
  NewOrder order{sku->get<std::string>(), quantity->get<std::int64_t>(), ""};
  if (auto ref = j.find("client_reference"); ref != j.end()) {
    if (!ref->is_string() || ref->get<std::string>().size() > 128) {
      return invalid("client_reference: must be a string of at most 128 characters");
    }
    order.client_reference = ref->get<std::string>();
  }
  return ParsedOrder{std::move(order), {}};
}

// The remaining time an inbound request grants, in milliseconds: 1 to 18
// ASCII digits.
std::optional<std::int64_t> ParseDeadlineMillis(const std::string& value) {
  if (value.empty() || value.size() > 18) return std::nullopt;
  std::int64_t n = 0;
  for (char c : value) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  return n;
}

std::string TenantOf(const httplib::Request& req) {
  std::string tenant = req.get_header_value(std::string(kTenantHeader));
  return tenant.empty() ? std::string(kDefaultTenant) : tenant;
}

}  // namespace

std::string RequestDigest(std::string_view method, std::string_view path, std::string_view body) {
  std::string input;
  input.reserve(method.size() + path.size() + body.size() + 2);
  input.append(method).append("\n").append(path).append("\n").append(body);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(input.data(), input.size(), md, &len, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * len);
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(kHex[md[i] >> 4]);
    out.push_back(kHex[md[i] & 0xf]);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<OrdersService>> OrdersService::Create(ServiceOptions options) {
  if (options.threads <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("threads: must be > 0, got ", options.threads));
  }
  if (options.processing_delay.count() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("processing_delay: must be >= 0, got ",
                                                   options.processing_delay.count(), "ms"));
  }
  if (options.reap_interval.count() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("reap_interval: must be >= 0, got ",
                                                   options.reap_interval.count(), "ms"));
  }
  if (!options.clock) options.clock = RealServiceClock();
  auto store = OrdersStore::Open(options.store, options.clock);
  if (!store.ok()) return store.status();
  return std::unique_ptr<OrdersService>(new OrdersService(std::move(options), *std::move(store)));
}

OrdersService::OrdersService(ServiceOptions options, std::unique_ptr<OrdersStore> store)
    : options_(std::move(options)),
      store_(std::move(store)),
      server_(std::make_unique<httplib::Server>()) {
  const int threads = options_.threads;
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server_->set_tcp_nodelay(true);
  server_->Post("/orders", [this](const httplib::Request& req, httplib::Response& res) {
    HandleCreate(req, res);
  });
  server_->Get(R"(/orders/by-key/(.+))", [this](const httplib::Request& req,
                                                httplib::Response& res) { HandleStatus(req, res); });
  server_->Get("/stats", [this](const httplib::Request&, httplib::Response& res) {
    HandleStats(res);
  });
  server_->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok", "text/plain");
  });
}

OrdersService::~OrdersService() { Stop(); }

absl::StatusOr<int> OrdersService::Start() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (started_) return absl::FailedPreconditionError("Start: already started");
    started_ = true;
  }
  int port = options_.port;
  if (port == 0) {
    port = server_->bind_to_any_port(options_.host);
    if (port <= 0) {
      return absl::UnavailableError(absl::StrCat("cannot bind ", options_.host, ":*"));
    }
  } else if (!server_->bind_to_port(options_.host, port)) {
    return absl::UnavailableError(absl::StrCat("cannot bind ", options_.host, ":", port));
  }
  port_ = port;
  // The socket already listens: connections made before listen_after_bind()
  // runs wait in the backlog.
  listener_ = std::thread([this] { server_->listen_after_bind(); });
  // httplib's stop() is a no-op until the accept loop runs; wait for it so a
  // Stop() right after Start() cannot be lost.
  for (int i = 0; i < 5000 && !server_->is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (options_.reap_interval.count() > 0) reaper_ = std::thread([this] { ReaperLoop(); });
  return port;
}

void OrdersService::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  server_->stop();
  if (listener_.joinable()) listener_.join();
  if (reaper_.joinable()) reaper_.join();
}

void OrdersService::ReaperLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_cv_.wait_for(lock, options_.reap_interval, [this] { return stopping_; })) {
    lock.unlock();
    (void)store_->ReapExpired();  // a failed pass is retried at the next interval
    lock.lock();
  }
}

ServiceMetrics OrdersService::metrics() const {
  ServiceMetrics m;
  m.created = counters_.created.load();
  m.replayed = counters_.replayed.load();
  m.conflicting_payload = counters_.conflicting_payload.load();
  m.in_progress = counters_.in_progress.load();
  m.rejected_bad_request = counters_.rejected_bad_request.load();
  m.invalid_body = counters_.invalid_body.load();
  m.deadline_rejected = counters_.deadline_rejected.load();
  m.expired_key = counters_.expired_key.load();
  m.takeovers = counters_.takeovers.load();
  m.stale_writes_rejected = store_->stale_writes_rejected();
  m.status_queries = counters_.status_queries.load();
  return m;
}

void OrdersService::HandleCreate(const httplib::Request& req, httplib::Response& res) {
  // Checks that need no state come first; none of them records anything, so
  // the same key may be retried after fixing the request.
  const std::string key = req.get_header_value(std::string(kKeyHeader));
  if (key.empty()) {
    counters_.rejected_bad_request++;
    return AnswerError(res, 400, "missing_idempotency_key",
                       "Idempotency-Key: required on POST /orders");
  }
  if (!ValidToken(key)) {
    counters_.rejected_bad_request++;
    return AnswerError(res, 400, "invalid_idempotency_key",
                       "Idempotency-Key: must be 1 to 255 visible ASCII characters");
  }
  const std::string tenant = TenantOf(req);
  if (!ValidToken(tenant)) {
    counters_.rejected_bad_request++;
    return AnswerError(res, 400, "invalid_tenant",
                       "X-Tenant-Id: must be 1 to 255 visible ASCII characters");
  }
  if (req.has_header(std::string(kDeadlineHeader))) {
    auto ms = ParseDeadlineMillis(req.get_header_value(std::string(kDeadlineHeader)));
    if (!ms) {
      counters_.rejected_bad_request++;
      return AnswerError(res, 400, "invalid_deadline",
                         "X-Request-Timeout-Ms: must be 1 to 18 ASCII digits");
    }
    // Work the caller will not wait for is wasted, and could commit after the
    // caller gave up: refuse before claiming the key.
    if (*ms == 0 || *ms < options_.processing_delay.count()) {
      counters_.deadline_rejected++;
      return AnswerError(res, 504, "deadline_exceeded",
                         absl::StrCat("X-Request-Timeout-Ms: ", *ms,
                                      " ms left, the work needs ",
                                      options_.processing_delay.count(), " ms"));
    }
  }

  const KeyScope scope{tenant, std::string(kCreateOrderOperation), key};
  const std::string digest = RequestDigest("POST", "/orders", req.body);
  auto replay = [&](const StoredResponse& stored) {
    counters_.replayed++;
    res.set_header(std::string(kReplayedHeader), "true");
    Answer(res, stored.status, stored.body);
  };

  auto claim = store_->Claim(scope, digest);
  if (!claim.ok()) {
    return AnswerError(res, 500, "storage_error", std::string(claim.status().message()));
  }
  switch (claim->outcome) {
    case ClaimOutcome::kClaimed:
      break;
    case ClaimOutcome::kTakenOver:
      counters_.takeovers++;
      break;
    case ClaimOutcome::kReplay:
      return replay(claim->response);
    case ClaimOutcome::kConflictingPayload:
      counters_.conflicting_payload++;
      return AnswerError(res, 422, "idempotency_key_reused",
                         "Idempotency-Key: already used for a different request");
    case ClaimOutcome::kInProgress:
      counters_.in_progress++;
      return AnswerError(res, 409, "request_in_progress",
                         "Idempotency-Key: a request with this key is still being processed");
    case ClaimOutcome::kExpired:
      counters_.expired_key++;
      return AnswerError(res, 410, "idempotency_key_expired",
                         "Idempotency-Key: this key completed before the retention window; "
                         "its stored answer is gone and it will not be executed again");
  }

  if (options_.after_claim) options_.after_claim(scope, claim->version);
  if (options_.processing_delay.count() > 0) std::this_thread::sleep_for(options_.processing_delay);

  ParsedOrder parsed = ParseOrder(req.body);
  auto done = store_->Complete(scope, claim->version, parsed.order, parsed.error);
  if (!done.ok()) {
    // Nothing was committed; the record stays PROCESSING until its lease runs
    // out and a retry with the same key takes over.
    return AnswerError(res, 500, "storage_error", std::string(done.status().message()));
  }
  if (done->committed) {
    if (parsed.order) {
      counters_.created++;
    } else {
      counters_.invalid_body++;
    }
    return Answer(res, done->response.status, done->response.body);
  }

  // Fenced out: someone took the key over while this worker was slow. Answer
  // with what the record says now.
  auto record = store_->ReadRecord(scope);
  if (record.ok() && record->has_value() && (*record)->state == RecordState::kCompleted &&
      (*record)->request_digest == digest) {
    return replay((*record)->response);
  }
  counters_.in_progress++;
  AnswerError(res, 409, "request_in_progress",
              "Idempotency-Key: another worker took this request over");
}

void OrdersService::HandleStatus(const httplib::Request& req, httplib::Response& res) {
  counters_.status_queries++;
  const KeyScope scope{TenantOf(req), std::string(kCreateOrderOperation), req.matches[1].str()};
  auto status = store_->Lookup(scope);
  if (!status.ok()) return AnswerError(res, 500, "storage_error", std::string(status.status().message()));
  const std::string state_header(kKeyStateHeader);
  switch (status->kind) {
    case KeyStatus::kOrder:
      res.set_header(state_header, "completed");
      return Answer(res, 200, OrderJson(status->order));
    case KeyStatus::kProcessing:
      res.set_header(state_header, "processing");
      return AnswerError(res, 409, "request_in_progress",
                         "the request with this key is still being processed");
    case KeyStatus::kAbandoned:
      res.set_header(state_header, "abandoned");
      return AnswerError(res, 404, "no_order",
                         "no order for this key; its worker's lease ran out, so a request "
                         "with the same key will take over");
    case KeyStatus::kCompletedWithoutOrder:
      res.set_header(state_header, "completed");
      return Answer(res, 404,
                    nlohmann::json{{"error", "no_order"},
                                   {"message",
                                    "the key completed without an order; a request with the "
                                    "same key replays its final answer"},
                                   {"final_status", status->final_status}}
                        .dump());
    case KeyStatus::kExpired:
      res.set_header(state_header, "expired");
      return Answer(res, 404,
                    nlohmann::json{{"error", "no_order"},
                                   {"message", "the key expired without an order"},
                                   {"final_status", status->final_status}}
                        .dump());
    case KeyStatus::kUnknown:
      res.set_header(state_header, "unknown");
      return AnswerError(res, 404, "no_order", "no request with this key was recorded");
  }
}

void OrdersService::HandleStats(httplib::Response& res) {
  auto counts = store_->Counts();
  if (!counts.ok()) return AnswerError(res, 500, "storage_error", std::string(counts.status().message()));
  const ServiceMetrics m = metrics();
  nlohmann::json j = {
      {"orders", counts->orders},
      {"distinct_references", counts->distinct_references},
      {"duplicate_orders", counts->duplicate_orders},
      {"keys_processing", counts->keys_processing},
      {"keys_completed", counts->keys_completed},
      {"keys_expired", counts->keys_expired},
      {"inconsistencies", counts->inconsistencies},
      {"requests",
       {{"created", m.created},
        {"replayed", m.replayed},
        {"conflicting_payload", m.conflicting_payload},
        {"in_progress", m.in_progress},
        {"rejected_bad_request", m.rejected_bad_request},
        {"invalid_body", m.invalid_body},
        {"deadline_rejected", m.deadline_rejected},
        {"expired_key", m.expired_key},
        {"takeovers", m.takeovers},
        {"stale_writes_rejected", m.stale_writes_rejected},
        {"status_queries", m.status_queries}}}};
  Answer(res, 200, j.dump());
}

}  // namespace example
}  // namespace saferetry

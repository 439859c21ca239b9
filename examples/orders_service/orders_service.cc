// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "orders_service/orders_service.h"

#include <httplib.h>

#include <cstdlib>
#include <iostream>
#include <optional>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "orders_service/fake_payment_channel.h"
#include "orders_service/outbox_relay.h"

namespace saferetry {
namespace example {

using ::saferetry::server::TakeoverVerdict;

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

// The body of a valid order, or the stored 400 answer describing what is wrong.
struct ParsedOrder {
  std::optional<NewOrder> order;
  StoredResponse error;
};

ParsedOrder ParseOrder(const std::string& body) {
  auto invalid = [](std::string message) {
    return ParsedOrder{
        std::nullopt,
        StoredResponse{
            400,
            nlohmann::json{{"error", "invalid_order"}, {"message", std::move(message)}}.dump()}};
  };
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return invalid("body: must be a JSON object");
  auto sku = j.find("sku");
  if (sku == j.end() || !sku->is_string() || sku->get<std::string>().empty() ||
      sku->get<std::string>().size() > 64) {
    return invalid("sku: must be a string of 1 to 64 characters");
  }
  auto quantity = j.find("quantity");
  if (quantity == j.end() || !quantity->is_number_integer() || quantity->get<std::int64_t>() <= 0 ||
      quantity->get<std::int64_t>() > 1000000) {
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

std::optional<std::string> HeaderOrNull(const httplib::Request& req, std::string_view name) {
  const std::string n(name);
  if (!req.has_header(n)) return std::nullopt;
  return req.get_header_value(n);
}

void Send(httplib::Response& res, const server::Answer& a) {
  res.status = a.status;
  for (const auto& [name, value] : a.headers) res.set_header(name, value);
  res.set_content(a.body, a.content_type);
}

}  // namespace

absl::StatusOr<std::unique_ptr<OrdersService>> OrdersService::Create(ServiceOptions options) {
  if (options.threads <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("threads: must be > 0, got ", options.threads));
  }
  if (options.processing_delay.count() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("processing_delay: must be >= 0, got ",
                                                   options.processing_delay.count(), "ms"));
  }
  if (options.reap_interval.count() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("reap_interval: must be >= 0, got ", options.reap_interval.count(), "ms"));
  }
  if (options.relay_interval.count() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("relay_interval: must be >= 0, got ", options.relay_interval.count(), "ms"));
  }
  if (options.sweep_interval.count() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sweep_interval: must be >= 0, got ", options.sweep_interval.count(), "ms"));
  }
  if (options.payment_channel_port < 0 || options.payment_channel_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("payment_channel_port: must be 0 to 65535, got ",
                                                   options.payment_channel_port));
  }
  if (options.payment_timeout.count() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("payment_timeout: must be > 0, got ", options.payment_timeout.count(), "ms"));
  }
  if (options.database_retry_interval.count() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("database_retry_interval: must be >= 0, got ",
                                                   options.database_retry_interval.count(), "ms"));
  }
  if (!options.clock) options.clock = SystemClock();
  auto store = OrdersStore::Open(options.store, options.clock);
  if (!store.ok()) {
    // A database that is down at start is ridden out: serve 503 `rejected`
    // and open it later (OpenLoop).
    if (absl::IsUnavailable(store.status()) && options.database_retry_interval.count() > 0) {
      return std::unique_ptr<OrdersService>(
          new OrdersService(std::move(options), nullptr, nullptr));
    }
    return store.status();
  }
  auto handler = MakeOrdersHandler(options, **store);
  if (!handler.ok()) return handler.status();
  return std::unique_ptr<OrdersService>(
      new OrdersService(std::move(options), *std::move(store), *std::move(handler)));
}

namespace {

std::unique_ptr<httplib::Client> ChannelClient(const ServiceOptions& options) {
  auto client = std::make_unique<httplib::Client>("127.0.0.1", options.payment_channel_port);
  client->set_connection_timeout(options.payment_timeout);
  client->set_read_timeout(options.payment_timeout);
  return client;
}

// The order's effect once the channel charged: the order (and its outbox
// message) with the charge id in its answer.
server::Effect PaidOrderEffect(const OrdersStore& store, const KeyScope& scope,
                               const NewOrder& order, const std::string& charge_json) {
  server::Effect create = store.CreateOrderEffect(scope, order);
  return [create, charge_json](server::Transaction& txn) -> absl::StatusOr<StoredResponse> {
    auto created = create(txn);
    if (!created.ok()) return created.status();
    nlohmann::json body = nlohmann::json::parse(created->body, nullptr, false);
    nlohmann::json charge = nlohmann::json::parse(charge_json, nullptr, false);
    if (body.is_object() && charge.is_object()) body["charge_id"] = charge.value("charge_id", "");
    return StoredResponse{created->status, body.dump()};
  };
}

}  // namespace

absl::StatusOr<std::unique_ptr<server::IdempotentHandler>> MakeOrdersHandler(
    const ServiceOptions& options, OrdersStore& store) {
  server::HandlerOptions handler_options;
  handler_options.operation = std::string(kCreateOrderOperation);
  handler_options.expected_work = options.processing_delay;
  handler_options.clock = options.clock;
  if (options.payment_channel_port > 0) {
    // Before redoing or fencing an abandoned order, ask the channel about the
    // charge by the step's request id: never charge twice.
    handler_options.takeover_hook =
        [options, &store](const KeyScope& scope,
                          const server::KeyRecord& previous) -> absl::StatusOr<TakeoverVerdict> {
      if (!previous.step.has_value()) return TakeoverVerdict::NoEffect();  // never called out
      const std::string& request_id = previous.step->external_id;
      auto r = ChannelClient(options)->Get(absl::StrCat("/charges/by-request/", request_id));
      if (!r) return absl::UnavailableError("payment channel: no answer to the query");
      if (r->status == 404) return TakeoverVerdict::NoEffect();
      if (r->status == 410) {
        return TakeoverVerdict::CannotTell(absl::StrCat(
            "the payment channel cannot tell whether request ", request_id, " was charged"));
      }
      if (r->status != 200) {
        return absl::UnavailableError(absl::StrCat("payment channel: query answered ", r->status));
      }
      nlohmann::json charge = nlohmann::json::parse(r->body, nullptr, false);
      nlohmann::json meta = charge.is_object() ? charge.value("metadata", nlohmann::json::object())
                                               : nlohmann::json::object();
      NewOrder order;
      order.sku = meta.value("sku", "");
      order.quantity = meta.value("quantity", 0);
      order.client_reference = meta.value("client_reference", "");
      if (order.sku.empty() || order.quantity <= 0) {
        return TakeoverVerdict::CannotTell(
            absl::StrCat("the charge for request ", request_id, " carries no order"));
      }
      return TakeoverVerdict::Finish(PaidOrderEffect(store, scope, order, r->body));
    };
  }
  return server::IdempotentHandler::Create(store.shared_idempotency(), std::move(handler_options));
}

bool OrdersService::ReadyOrRejected(httplib::Response& res) {
  if (ready()) return true;
  rejected_not_ready_++;
  Send(res, server::RejectedBeforeWork(
                "storage_unavailable",
                "the database cannot be reached yet; nothing was recorded, send it again later"));
  return false;
}

void OrdersService::OpenLoop() {
  std::string last_error;
  BackgroundLoop(options_.database_retry_interval, [&] {
    if (ready()) return;
    auto store = OrdersStore::Open(options_.store, options_.clock);
    absl::StatusOr<std::unique_ptr<server::IdempotentHandler>> handler =
        store.ok() ? MakeOrdersHandler(options_, **store) : store.status();
    if (!handler.ok()) {
      const std::string error(handler.status().message());
      if (error != last_error) std::cerr << "database: " << error << "; retrying" << std::endl;
      last_error = error;
      return;
    }
    store_ = *std::move(store);
    handler_ = *std::move(handler);
    ready_.store(true, std::memory_order_release);
    std::cerr << "database: open" << std::endl;
  });
}

OrdersService::OrdersService(ServiceOptions options, std::unique_ptr<OrdersStore> store,
                             std::unique_ptr<server::IdempotentHandler> handler)
    : options_(std::move(options)),
      store_(std::move(store)),
      handler_(std::move(handler)),
      server_(std::make_unique<httplib::Server>()) {
  ready_.store(store_ != nullptr, std::memory_order_release);
  const int threads = options_.threads;
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server_->set_tcp_nodelay(true);
  server_->Post("/orders", [this](const httplib::Request& req, httplib::Response& res) {
    HandleCreate(req, res);
  });
  server_->Get(
      R"(/orders/by-key/(.+))",
      [this](const httplib::Request& req, httplib::Response& res) { HandleStatus(req, res); });
  server_->Post("/events/order-created", [this](const httplib::Request& req,
                                                httplib::Response& res) { HandleEvent(req, res); });
  server_->Get("/stats",
               [this](const httplib::Request&, httplib::Response& res) { HandleStats(res); });
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
  if (!ready()) opener_ = std::thread([this] { OpenLoop(); });
  if (options_.reap_interval.count() > 0) {
    reaper_ = std::thread([this] {
      // A failed pass is retried at the next interval.
      BackgroundLoop(options_.reap_interval, [this] {
        if (ready()) (void)store_->idempotency().Reap();
      });
    });
  }
  if (options_.sweep_interval.count() > 0) {
    sweeper_ = std::thread([this] {
      BackgroundLoop(options_.sweep_interval, [this] {
        if (ready()) (void)handler_->RunSweep();
      });
    });
  }
  if (options_.relay_interval.count() > 0) {
    relay_ = std::thread([this] {
      RelayOptions relay_options;
      relay_options.port = port_;
      std::optional<OutboxRelay> relay;
      BackgroundLoop(options_.relay_interval, [&] {
        if (!ready()) return;
        if (!relay.has_value()) relay.emplace(store_.get(), relay_options);
        (void)relay->RunOnce();
      });
    });
  }
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
  if (relay_.joinable()) relay_.join();
  if (sweeper_.joinable()) sweeper_.join();
  if (opener_.joinable()) opener_.join();
}

void OrdersService::BackgroundLoop(std::chrono::milliseconds interval,
                                   const std::function<void()>& pass) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_cv_.wait_for(lock, interval, [this] { return stopping_; })) {
    lock.unlock();
    pass();
    lock.lock();
  }
}

ServiceMetrics OrdersService::metrics() const {
  const server::HandlerMetrics h = ready() ? handler_->metrics() : server::HandlerMetrics{};
  ServiceMetrics m;
  m.storage_unavailable = h.storage_unavailable + rejected_not_ready_.load();
  m.swept_fenced = h.swept_fenced;
  m.swept_completed = h.swept_completed;
  m.pending_confirmation = h.moved_to_pending;
  m.created = counters_.created.load();
  m.replayed = h.replayed;
  m.conflicting_payload = h.conflicting_payload;
  m.in_progress = h.in_progress;
  m.rejected_bad_request = h.rejected_bad_request;
  m.invalid_body = counters_.invalid_body.load();
  m.deadline_rejected = h.rejected_before_work;
  m.expired_key = h.expired_key;
  m.fenced_refused = h.fenced_refused;
  m.fences = h.fences;
  m.takeovers = h.takeovers;
  m.stale_writes_rejected = h.stale_writes_rejected;
  m.status_queries = h.status_queries;
  m.messages_processed = counters_.messages_processed.load();
  m.messages_redelivered = counters_.messages_redelivered.load();
  return m;
}

void OrdersService::HandleCreate(const httplib::Request& req, httplib::Response& res) {
  if (!ReadyOrRejected(res)) return;
  server::WriteRequest w;
  w.method = "POST";
  w.path = "/orders";
  w.body = req.body;
  w.idempotency_key = HeaderOrNull(req, kKeyHeader);
  w.tenant = HeaderOrNull(req, kTenantHeader);
  w.deadline = HeaderOrNull(req, kDeadlineHeader);

  ParsedOrder parsed = ParseOrder(req.body);
  server::Work work;
  work.before_effect = [this](const KeyScope& scope, std::int64_t version) {
    if (options_.after_claim) options_.after_claim(scope, version);
    if (options_.processing_delay.count() > 0) {
      std::this_thread::sleep_for(options_.processing_delay);
    }
  };
  const std::string tenant =
      w.tenant.has_value() && !w.tenant->empty() ? *w.tenant : std::string(kDefaultTenant);
  const KeyScope scope{tenant, std::string(kCreateOrderOperation), w.idempotency_key.value_or("")};
  if (parsed.order.has_value() && options_.payment_channel_port > 0) {
    // Charge first, as a recorded step; the order commits with its record.
    auto charge = std::make_shared<std::optional<std::string>>();
    const NewOrder order = *parsed.order;
    work.before_effect = [this, charge, order](const KeyScope& claimed, std::int64_t version) {
      if (options_.after_claim) options_.after_claim(claimed, version);
      if (options_.processing_delay.count() > 0) {
        std::this_thread::sleep_for(options_.processing_delay);
      }
      auto step = handler_->RecordStep(claimed, version, "charge");
      if (!step.ok()) return;  // taken over or fenced, or no database: do not call
      nlohmann::json request = {{"amount", order.quantity * 100},
                                {"metadata",
                                 {{"sku", order.sku},
                                  {"quantity", order.quantity},
                                  {"client_reference", order.client_reference}}}};
      auto r = ChannelClient(options_)->Post(
          "/charges", {{std::string(kChannelRequestIdHeader), step->external_id}}, request.dump(),
          "application/json");
      if (r && (r->status == 200 || r->status == 201)) *charge = r->body;
    };
    work.effect = [this, charge, scope,
                   order](server::Transaction& txn) -> absl::StatusOr<StoredResponse> {
      if (!charge->has_value()) {
        return absl::UnavailableError(
            "payment channel: no answer; the charge is recovered by its request id");
      }
      return PaidOrderEffect(*store_, scope, order, **charge)(txn);
    };
  } else if (parsed.order.has_value()) {
    work.effect = store_->CreateOrderEffect(scope, *parsed.order);
  } else {
    // An invalid body is a final answer: stored and replayed like an order.
    StoredResponse error = parsed.error;
    work.effect = [error](server::Transaction&) -> absl::StatusOr<StoredResponse> { return error; };
  }
  server::Answer a = handler_->HandleWrite(w, work);
  if (a.Header(std::string(kReplayedHeader)).empty()) {
    if (a.status == 201) counters_.created++;
    if (a.status == 400 && !parsed.order.has_value() && a.body == parsed.error.body) {
      counters_.invalid_body++;
    }
  }
  Send(res, a);
}

void OrdersService::HandleStatus(const httplib::Request& req, httplib::Response& res) {
  if (!ReadyOrRejected(res)) return;
  server::StatusQueryRequest q;
  q.key = req.matches[1].str();
  q.tenant = HeaderOrNull(req, kTenantHeader);
  q.fence = HeaderOrNull(req, kFenceHeader);
  // Orders outlive their keys: look the order up first.
  server::ResourceLookup find_order =
      [this](const KeyScope& scope) -> absl::StatusOr<std::optional<std::string>> {
    auto order = store_->FindOrder(scope);
    if (!order.ok()) return order.status();
    if (!order->has_value()) return std::optional<std::string>();
    return std::optional<std::string>(OrderJson(**order));
  };
  Send(res, handler_->HandleStatusQuery(q, find_order));
}

void OrdersService::HandleEvent(const httplib::Request& req, httplib::Response& res) {
  if (!ReadyOrRejected(res)) return;
  const std::string message_id = req.get_header_value(std::string(kMessageIdHeader));
  if (message_id.empty()) {
    return AnswerError(res, 400, "missing_message_id", "Message-Id: required");
  }
  nlohmann::json j = nlohmann::json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  std::int64_t order_id = 0;
  if (j.is_object() && j.contains("order_id") && j["order_id"].is_string()) {
    const std::string id = j["order_id"].get<std::string>();
    if (id.rfind("ord-", 0) == 0) order_id = std::atoll(id.c_str() + 4);
  }
  if (order_id <= 0) {
    return AnswerError(res, 400, "invalid_event", "body: must be an order with \"order_id\"");
  }
  auto recorded = store_->RecordShipment(message_id, order_id);
  if (!recorded.ok()) {
    return AnswerError(res, 500, "storage_error", std::string(recorded.status().message()));
  }
  (*recorded ? counters_.messages_processed : counters_.messages_redelivered)++;
  Answer(res, 200, nlohmann::json{{"processed", *recorded}}.dump());
}

void OrdersService::HandleStats(httplib::Response& res) {
  if (!ReadyOrRejected(res)) return;
  auto counts = store_->Counts();
  if (!counts.ok())
    return AnswerError(res, 500, "storage_error", std::string(counts.status().message()));
  const ServiceMetrics m = metrics();
  nlohmann::json j = {{"orders", counts->orders},
                      {"distinct_references", counts->distinct_references},
                      {"duplicate_orders", counts->duplicate_orders},
                      {"keys_processing", counts->keys_processing},
                      {"keys_completed", counts->keys_completed},
                      {"keys_fenced", counts->keys_fenced},
                      {"keys_expired", counts->keys_expired},
                      {"outbox_pending", counts->outbox_pending},
                      {"shipments", counts->shipments},
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
                        {"fenced_refused", m.fenced_refused},
                        {"fences", m.fences},
                        {"messages_processed", m.messages_processed},
                        {"messages_redelivered", m.messages_redelivered},
                        {"takeovers", m.takeovers},
                        {"stale_writes_rejected", m.stale_writes_rejected},
                        {"status_queries", m.status_queries},
                        {"storage_unavailable", m.storage_unavailable},
                        {"swept_fenced", m.swept_fenced},
                        {"swept_completed", m.swept_completed},
                        {"pending_confirmation", m.pending_confirmation}}}};
  Answer(res, 200, j.dump());
}

}  // namespace example
}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "orders_service/fake_payment_channel.h"

#include <httplib.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace saferetry {
namespace example {

FakePaymentChannel::FakePaymentChannel() : server_(std::make_unique<httplib::Server>()) {
  server_->Post("/charges", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string request_id = req.get_header_value(std::string(kChannelRequestIdHeader));
    nlohmann::json body = nlohmann::json::parse(req.body, nullptr, /*allow_exceptions=*/false);
    if (request_id.empty() || !body.is_object() || !body.contains("amount") ||
        !body["amount"].is_number_integer()) {
      res.status = 400;
      res.set_content(R"({"error":"bad_request"})", "application/json");
      return;
    }
    std::chrono::milliseconds delay{0};
    std::string json;
    bool repeated = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = by_request_.find(request_id);
      if (it != by_request_.end()) {
        repeated = true;
        json = it->second.json;
      } else {
        // A forgotten request id is charged again: the channel no longer
        // knows it (why a taker-over must not call twice on a "cannot tell").
        forgotten_.erase(request_id);
        Charge c;
        c.charge_id = absl::StrCat("ch_", next_charge_++);
        c.json = nlohmann::json{{"charge_id", c.charge_id},
                                {"request_id", request_id},
                                {"amount", body["amount"]},
                                {"metadata", body.value("metadata", nlohmann::json::object())}}
                     .dump();
        json = c.json;
        by_request_.emplace(request_id, std::move(c));
        if (lose_next_ > 0) {
          --lose_next_;
          delay = lose_delay_;
        }
      }
    }
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    res.status = repeated ? 200 : 201;
    res.set_content(json, "application/json");
  });
  server_->Get(R"(/charges/by-request/(.+))",
               [this](const httplib::Request& req, httplib::Response& res) {
                 const std::string request_id = req.matches[1].str();
                 std::lock_guard<std::mutex> lock(mu_);
                 if (forgotten_.count(request_id) > 0) {
                   res.status = 410;
                   res.set_content(R"({"error":"forgotten"})", "application/json");
                   return;
                 }
                 auto it = by_request_.find(request_id);
                 if (it == by_request_.end()) {
                   res.status = 404;
                   res.set_content(R"({"error":"unknown_request"})", "application/json");
                   return;
                 }
                 res.status = 200;
                 res.set_content(it->second.json, "application/json");
               });
}

FakePaymentChannel::~FakePaymentChannel() { Stop(); }

absl::StatusOr<int> FakePaymentChannel::Start() {
  const int port = server_->bind_to_any_port("127.0.0.1");
  if (port <= 0) return absl::UnavailableError("fake payment channel: cannot bind 127.0.0.1:*");
  listener_ = std::thread([this] { server_->listen_after_bind(); });
  for (int i = 0; i < 5000 && !server_->is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return port;
}

void FakePaymentChannel::Stop() {
  server_->stop();
  if (listener_.joinable()) listener_.join();
}

void FakePaymentChannel::LoseNextAnswers(int n, std::chrono::milliseconds delay) {
  std::lock_guard<std::mutex> lock(mu_);
  lose_next_ = n;
  lose_delay_ = delay;
}

void FakePaymentChannel::Forget(const std::string& request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  by_request_.erase(request_id);
  forgotten_.insert(request_id);
}

std::int64_t FakePaymentChannel::charges() const {
  std::lock_guard<std::mutex> lock(mu_);
  return next_charge_ - 1;
}

}  // namespace example
}  // namespace saferetry

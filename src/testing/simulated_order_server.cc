// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/testing/simulated_order_server.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace saferetry {
namespace testing {
namespace {

constexpr Duration kLatency = std::chrono::milliseconds(1);

TransportResult Answer(int status, std::string body, Headers headers = {}) {
  TransportResult r;
  r.delivery = Delivery::kResponseReceived;
  Response resp;
  resp.status_code = status;
  resp.body = std::move(body);
  resp.headers = std::move(headers);
  r.response = std::move(resp);
  return r;
}

TransportResult Lost(absl::Status status) {
  TransportResult r;
  r.delivery = Delivery::kMaybeDelivered;
  r.status = std::move(status);
  return r;
}

std::string PercentDecode(absl::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    int hex = 0;
    if (s[i] == '%' && i + 2 < s.size() &&
        absl::SimpleHexAtoi(s.substr(i + 1, 2), &hex)) {
      out.push_back(static_cast<char>(hex));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

absl::string_view PathOf(absl::string_view url) {
  std::size_t scheme = url.find("://");
  std::size_t start = url.find('/', scheme == absl::string_view::npos ? 0 : scheme + 3);
  if (start == absl::string_view::npos) return "/";
  absl::string_view path = url.substr(start);
  std::size_t q = path.find('?');
  return q == absl::string_view::npos ? path : path.substr(0, q);
}

}  // namespace

SimulatedOrderServer::SimulatedOrderServer(std::shared_ptr<FakeClock> clock, std::string key_header)
    : clock_(std::move(clock)), key_header_(std::move(key_header)) {}

void SimulatedOrderServer::ScriptFaults(std::vector<OrderFault> faults) {
  std::lock_guard<std::mutex> lock(mu_);
  faults_.assign(faults.begin(), faults.end());
}

TransportResult SimulatedOrderServer::Send(const Request& request, const AttemptOptions& options) {
  // Headers as the server sees them: the request's, then saferetry's.
  std::optional<std::string> key;
  auto find_key = [&](const Headers& headers) {
    for (const Header& h : headers) {
      if (absl::EqualsIgnoreCase(h.first, key_header_)) {
        std::string v = h.second;
        if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
        key = v;
      }
    }
  };
  find_key(request.headers);
  if (options.extra_headers != nullptr) find_key(*options.extra_headers);

  const absl::string_view path = PathOf(request.url);
  std::lock_guard<std::mutex> lock(mu_);
  if (clock_ != nullptr) clock_->Advance(kLatency);

  static constexpr absl::string_view kByKey = "/orders/by-key/";
  if (request.method == "GET" && absl::StartsWith(path, kByKey)) {
    ++queries_;
    const std::string k = PercentDecode(path.substr(kByKey.size()));
    auto it = records_.find(k);
    if (it == records_.end()) return Answer(404, R"({"error":"unknown key"})");
    if (it->second.processing) return Answer(409, R"({"state":"PROCESSING"})");
    return Answer(it->second.status, it->second.response_body);
  }
  if (request.method != "POST" || !absl::EndsWith(path, "/orders")) {
    return Answer(404, R"({"error":"no such route"})");
  }

  OrderFault fault = OrderFault::kNone;
  if (!faults_.empty()) {
    fault = faults_.front();
    faults_.pop_front();
  }
  if (fault == OrderFault::kRefuse) {
    TransportResult r;
    r.delivery = Delivery::kNotSent;
    r.status = absl::UnavailableError("connection refused");
    return r;
  }
  ++posts_;
  if (fault == OrderFault::kDropBeforeCommit) {
    return Lost(absl::UnavailableError("connection reset before the server committed"));
  }
  if (fault == OrderFault::kUnavailable) {
    return Answer(503, R"({"error":"unavailable"})", {{"Retry-After", "1"}});
  }

  int status = 201;
  std::string body;
  if (key.has_value()) {
    auto it = records_.find(*key);
    if (it != records_.end()) {
      if (it->second.body != request.body) {
        return Answer(422, R"({"error":"idempotency key reused with another payload"})");
      }
      if (it->second.processing) return Answer(409, R"({"state":"PROCESSING"})");
      status = it->second.status;
      body = it->second.response_body;  // replay: no new effect
    } else {
      body = absl::StrCat(R"({"order_id":)", next_order_id_++, "}");
      records_[*key] = Record{request.body, 201, body, false};
      ++effects_[*key];
      ++total_effects_;
    }
  } else {
    body = absl::StrCat(R"({"order_id":)", next_order_id_++, "}");
    ++total_effects_;
  }

  switch (fault) {
    case OrderFault::kCommitThenLoseResponse:
      return Lost(absl::UnavailableError("connection reset after the server committed"));
    case OrderFault::kCommitThenHang:
      if (clock_ != nullptr && options.timeout != Duration::max()) {
        clock_->Advance(options.timeout - kLatency);
      }
      return Lost(absl::DeadlineExceededError("no response before the attempt timeout"));
    case OrderFault::kInternalErrorAfterCommit:
      return Answer(500, R"({"error":"internal"})");
    case OrderFault::kInProgressThenCommit:
      return Answer(409, R"({"state":"PROCESSING"})");
    default:
      break;
  }
  return Answer(status, body);
}

int SimulatedOrderServer::effects(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = effects_.find(key);
  return it == effects_.end() ? 0 : it->second;
}

int SimulatedOrderServer::total_effects() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_effects_;
}

int SimulatedOrderServer::posts_received() const {
  std::lock_guard<std::mutex> lock(mu_);
  return posts_;
}

int SimulatedOrderServer::queries_received() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queries_;
}

}  // namespace testing
}  // namespace saferetry

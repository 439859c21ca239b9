// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/testing/simulated_order_server.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace saferetry {
namespace testkit {
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
    if (s[i] == '%' && i + 2 < s.size() && absl::SimpleHexAtoi(s.substr(i + 1, 2), &hex)) {
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

void SimulatedOrderServer::SetProcessingTime(Duration processing_time) {
  std::lock_guard<std::mutex> lock(mu_);
  processing_time_ = std::max(Duration::zero(), processing_time);
}

void SimulatedOrderServer::Expire(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find(key);
  if (it == records_.end()) {
    Record r;
    r.creates_order = false;
    it = records_.emplace(key, r).first;
  }
  it->second.expired = true;
}

TimePoint SimulatedOrderServer::NowLocked() const {
  return clock_ != nullptr ? clock_->Now() : TimePoint{};
}

bool SimulatedOrderServer::InProgressLocked(const Record& record) const {
  return NowLocked() < record.commit_at;
}

TransportResult SimulatedOrderServer::Send(const Request& request, const AttemptOptions& options) {
  // Headers as the server sees them: the request's, then saferetry's.
  std::optional<std::string> key;
  bool fence = false;
  auto scan = [&](std::string_view name_view, std::string_view value) {
    const absl::string_view name(name_view.data(), name_view.size());
    if (absl::EqualsIgnoreCase(name, key_header_)) {
      std::string v(value);
      if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
      key = v;
    } else if (absl::EqualsIgnoreCase(name, "Idempotency-Key-Fence")) {
      fence = absl::EqualsIgnoreCase(absl::string_view(value.data(), value.size()), "true");
    }
  };
  for (const Header& h : request.headers) scan(h.first, h.second);
  for (const HeaderRef& h : options.extra_headers) scan(h.name, h.value);

  const absl::string_view path = PathOf(request.url);
  std::lock_guard<std::mutex> lock(mu_);
  if (clock_ != nullptr) clock_->Advance(kLatency);

  static constexpr absl::string_view kByKey = "/orders/by-key/";
  if (request.method == "GET" && absl::StartsWith(path, kByKey)) {
    ++queries_;
    const std::string k = PercentDecode(path.substr(kByKey.size()));
    auto it = records_.find(k);
    if (it == records_.end()) {
      if (fence) {
        Record r;
        r.fenced = true;
        r.creates_order = false;
        records_[k] = r;
        return Answer(404, R"({"error":"fenced"})", {{"Idempotency-Key-State", "fenced"}});
      }
      return Answer(404, R"({"error":"unknown key"})", {{"Idempotency-Key-State", "unknown"}});
    }
    const Record& rec = it->second;
    if (rec.fenced) {
      return Answer(404, R"({"error":"fenced"})", {{"Idempotency-Key-State", "fenced"}});
    }
    if (InProgressLocked(rec)) {
      return Answer(409, R"({"state":"PROCESSING"})", {{"Idempotency-Key-State", "processing"}});
    }
    if (rec.expired && !rec.creates_order) {
      return Answer(404, R"({"error":"expired"})", {{"Idempotency-Key-State", "expired"}});
    }
    if (!rec.creates_order) {
      return Answer(404, absl::StrCat(R"({"final_status":)", rec.status, "}"),
                    {{"Idempotency-Key-State", "completed"}});
    }
    return Answer(rec.status, rec.response_body, {{"Idempotency-Key-State", "completed"}});
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
  if (fault == OrderFault::kRejectBeforeWork) {
    return Answer(503, R"({"error":"rejected before any work"})",
                  {{"Idempotency-Key-State", "rejected"}});
  }
  if (fault == OrderFault::kUnmarkedClientError) {
    return Answer(400, R"({"error":"bad request from a gateway"})");
  }

  // The attempt's hang: the client waits out its whole timeout.
  auto hang = [&]() {
    if (clock_ != nullptr && options.timeout != Duration::max()) {
      clock_->Advance(std::max(Duration::zero(), options.timeout - kLatency));
    }
    return Lost(absl::DeadlineExceededError("no response before the attempt timeout"));
  };

  int status = 201;
  std::string body;
  TimePoint commit_at = NowLocked();
  if (key.has_value()) {
    auto it = records_.find(*key);
    if (it != records_.end()) {
      const Record& rec = it->second;
      if (rec.fenced) {
        return Answer(410, R"({"error":"idempotency_key_fenced"})",
                      {{"Idempotency-Key-State", "fenced"}});
      }
      if (rec.expired) {
        return Answer(410, R"({"error":"idempotency_key_expired"})",
                      {{"Idempotency-Key-State", "expired"}});
      }
      if (rec.body != request.body) {
        return Answer(422, R"({"error":"idempotency key reused with another payload"})");
      }
      if (InProgressLocked(rec)) {
        return Answer(409, R"({"state":"PROCESSING"})", {{"Idempotency-Key-State", "processing"}});
      }
      // Replay: no new effect. Faults after the commit still apply to the
      // response.
      status = rec.status;
      body = rec.response_body;
      if (fault == OrderFault::kCommitThenHang) return hang();
      if (fault == OrderFault::kCommitThenGatewayUnavailable) {
        return Answer(503, "upstream connect error or disconnect/reset before headers");
      }
      if (fault == OrderFault::kCommitThenLoseResponse ||
          fault == OrderFault::kDisconnectWhileProcessing ||
          fault == OrderFault::kStoredFinalErrorThenLose) {
        return Lost(absl::UnavailableError("connection reset"));
      }
      return Answer(status, body,
                    {{"Idempotent-Replayed", "true"}, {"Idempotency-Key-State", "completed"}});
    }
    Record rec;
    rec.body = request.body;
    if (fault == OrderFault::kStoredFinalErrorThenLose || fault == OrderFault::kStoredFinalError) {
      rec.status = 400;
      rec.response_body = R"({"error":"sku out of stock"})";
      rec.creates_order = false;
      records_[*key] = rec;
      if (fault == OrderFault::kStoredFinalError) {
        return Answer(rec.status, rec.response_body, {{"Idempotency-Key-State", "completed"}});
      }
      return Lost(absl::UnavailableError("connection reset after a final error was stored"));
    }
    body = absl::StrCat(R"({"order_id":)", next_order_id_++, "}");
    commit_at = NowLocked() + processing_time_;
    rec.status = 201;
    rec.response_body = body;
    rec.commit_at = commit_at;
    records_[*key] = rec;
  } else {
    body = absl::StrCat(R"({"order_id":)", next_order_id_++, "}");
    ++unkeyed_effects_;
  }

  // The work: the server commits at `commit_at`. The attempt sees it only if
  // it waits that long.
  const Duration work = commit_at - NowLocked();
  switch (fault) {
    case OrderFault::kCommitThenLoseResponse:
      if (clock_ != nullptr && work > Duration::zero() && work < options.timeout) {
        clock_->Advance(work);
      }
      return Lost(absl::UnavailableError("connection reset after the server committed"));
    case OrderFault::kCommitThenHang:
      return hang();
    case OrderFault::kDisconnectWhileProcessing:
      return Lost(absl::UnavailableError("connection reset while the server was processing"));
    case OrderFault::kInternalErrorAfterCommit:
      return Answer(500, R"({"error":"internal"})");
    case OrderFault::kCommitThenGatewayUnavailable:
      return Answer(503, "upstream connect error or disconnect/reset before headers");
    case OrderFault::kInProgressThenCommit:
      return Answer(409, R"({"state":"PROCESSING"})", {{"Idempotency-Key-State", "processing"}});
    default:
      break;
  }
  if (work > Duration::zero()) {
    if (clock_ != nullptr && work > options.timeout - kLatency) return hang();  // a slow commit
    if (clock_ != nullptr) clock_->Advance(work);
  }
  if (!key.has_value()) return Answer(status, body);
  // Every final answer the server stores is marked with the key's state.
  return Answer(status, body, {{"Idempotency-Key-State", "completed"}});
}

int SimulatedOrderServer::effects(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find(key);
  if (it == records_.end() || !it->second.creates_order || it->second.fenced) return 0;
  return InProgressLocked(it->second) ? 0 : 1;
}

int SimulatedOrderServer::total_effects() const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = unkeyed_effects_;
  for (const auto& [key, rec] : records_) {
    if (rec.creates_order && !rec.fenced && !InProgressLocked(rec)) ++n;
  }
  return n;
}

int SimulatedOrderServer::posts_received() const {
  std::lock_guard<std::mutex> lock(mu_);
  return posts_;
}

int SimulatedOrderServer::queries_received() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queries_;
}

}  // namespace testkit
}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The libcurl transport. One easy handle per in-flight attempt, taken from a
// mutex-protected pool and put back afterwards, so the handle's connection
// cache keeps connections alive between calls and no handle is ever used by
// two threads at once. See docs/curl-transport.md for the policies.
//
// This file holds the pool and Send(): validation, the redirect loop and the
// decision of what was delivered. The handle's callbacks (response parsing)
// are in curl_exchange.cc, its setup per hop and the timings in
// curl_handle.cc, the CURLcode table in curl_errors.cc.

#include "saferetry/curl_transport.h"

#include <curl/curl.h>

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/validated_send.h"
#include "curl_errors.h"
#include "curl_exchange.h"
#include "curl_handle.h"
#include "saferetry/cancellation.h"
#include "saferetry/request.h"

namespace saferetry {
namespace internal {
namespace {

class CurlTransport final : public Transport, public SendMarkReader {
 public:
  explicit CurlTransport(CurlTransportOptions options) : options_(std::move(options)) {
    if (options_.user_agent.empty()) options_.user_agent = kDefaultUserAgent;
    idle_.reserve(options_.max_idle_handles);
  }

  TransportResult Send(const Request& request, const AttemptOptions& options) override;

 private:
  std::unique_ptr<PooledHandle> Acquire();
  void Release(std::unique_ptr<PooledHandle> handle);

  CurlTransportOptions options_;
  std::mutex mu_;
  std::vector<std::unique_ptr<PooledHandle>> idle_;  // Guarded by mu_.
};

std::unique_ptr<PooledHandle> CurlTransport::Acquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      auto h = std::move(idle_.back());
      idle_.pop_back();
      return h;
    }
  }
  return NewPooledHandle(options_);
}

void CurlTransport::Release(std::unique_ptr<PooledHandle> handle) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (idle_.size() < options_.max_idle_handles) {
      idle_.push_back(std::move(handle));
      return;
    }
  }
  // Destroyed outside the lock: closing connections may take a while.
}

TransportResult CurlTransport::Send(const Request& request, const AttemptOptions& options) {
  TransportResult result;
  result.delivery = Delivery::kNotSent;
  // Bad input is refused before any byte is sent (unless the call that
  // sends it validated it already: CheckSend).
  if (absl::Status s = CheckSend(request, options.extra_headers); !s.ok()) {
    result.status = std::move(s);
    return result;
  }
  if (options.timeout < Duration::zero()) {
    result.status = absl::InvalidArgumentError(absl::StrFormat(
        "timeout: must be >= 0, got %dns", static_cast<long long>(options.timeout.count())));
    return result;
  }
  if (options.timeout == Duration::zero()) {
    result.status =
        absl::DeadlineExceededError("timeout: no time left for an attempt; nothing sent");
    return result;
  }
  if (options.cancellation != nullptr && options.cancellation->IsCancelled()) {
    result.status = absl::CancelledError("cancelled before the attempt; nothing sent");
    return result;
  }

  std::unique_ptr<PooledHandle> handle = Acquire();
  if (handle == nullptr) {
    result.status = absl::InternalError("curl_easy_init failed; nothing sent");
    return result;
  }
  PooledHandle& h = *handle;
  Exchange& ex = h.exchange;

  static const std::string kEmpty;
  Hop hop;
  hop.method = request.method;
  hop.url = &request.url;
  hop.body = &request.body;
  hop.unsafe = !IsIdempotent(request);
  std::string redirect_url;  // Owns the URL of hops after the first.
  const std::string origin = options_.follow_redirects ? Origin(request.url) : std::string();
  Duration elapsed{0};
  bool earlier_hop_answered = false;
  CURLcode code = CURLE_OK;

  for (int redirects = 0;; ++redirects) {
    Duration timeout = options.timeout;
    if (timeout != Duration::max()) timeout -= elapsed;
    if (timeout <= Duration::zero()) {
      // Only reachable after a redirect: keep the last 3xx as evidence.
      result.status = absl::DeadlineExceededError("timeout: expired while following redirects");
      result.delivery = Delivery::kResponseReceived;
      break;
    }
    PrepareHop(h, request, options, hop, timeout, options_.max_response_body);
    code = curl_easy_perform(h.curl);
    result.timings = ReadTimings(h.curl, elapsed, ex.any_response_byte);
    elapsed = result.timings.total;

    if (!options_.follow_redirects || code != CURLE_OK || redirects >= options_.max_redirects)
      break;
    const int sc = ex.status_code;
    if (sc != 301 && sc != 302 && sc != 303 && sc != 307 && sc != 308) break;
    char* location = nullptr;
    curl_easy_getinfo(h.curl, CURLINFO_REDIRECT_URL, &location);
    if (location == nullptr) break;
    std::string next(location);
    if (!absl::StartsWithIgnoreCase(next, "http://") &&
        !absl::StartsWithIgnoreCase(next, "https://")) {
      break;  // Not ours to follow: the 3xx is the answer.
    }
    // Follow like browsers and curl: 303 (and 301/302 after a POST) become
    // a GET without body; 307/308 repeat method and body.
    if (sc == 303 || ((sc == 301 || sc == 302) && hop.method == "POST")) {
      if (hop.method != "HEAD") hop.method = "GET";
      hop.body = &kEmpty;
      hop.unsafe = false;
    }
    if (Origin(next) != origin) hop.strip_credentials = true;  // Sticky once set.
    redirect_url = std::move(next);
    hop.url = &redirect_url;
    earlier_hop_answered = true;
    ++result.redirects;
  }

  if (result.status.ok() && !(result.delivery == Delivery::kResponseReceived)) {
    const CurlCodeInfo info = DescribeCurlCode(code);
    curl_off_t request_size = 0;
    curl_easy_getinfo(h.curl, CURLINFO_REQUEST_SIZE, &request_size);
    const bool started = ex.prereq_calls > 0 || request_size > 0 || ex.body_offset > 0;

    if (code == CURLE_OK || ex.final_headers_done) {
      result.delivery = Delivery::kResponseReceived;
      if (code == CURLE_OK || (code == CURLE_WRITE_ERROR && ex.truncated)) {
        result.status = absl::OkStatus();  // A cut body is still an answer.
      } else {
        result.status =
            CurlFailure(info.status_code, code, h, "the response broke after its headers");
      }
    } else if (ex.cancelled) {
      result.delivery = started ? Delivery::kMaybeDelivered : Delivery::kNotSent;
      result.status = absl::CancelledError(
          started ? "cancelled during the attempt; the request may have been delivered"
                  : "cancelled before the request was sent");
    } else if (ex.resend_blocked || code == CURLE_SEND_FAIL_REWIND) {
      result.delivery = Delivery::kMaybeDelivered;
      result.status = CurlFailure(
          absl::StatusCode::kUnavailable, code, h,
          "the connection closed before any response; libcurl's resend of an unsafe request "
          "was refused, the first copy may have been delivered");
    } else {
      const bool maybe =
          started || ex.any_response_byte || info.delivery == CurlDeliveryRule::kAfterSend;
      result.delivery = maybe ? Delivery::kMaybeDelivered : Delivery::kNotSent;
      if (!maybe && earlier_hop_answered) result.delivery = Delivery::kMaybeDelivered;
      result.status =
          CurlFailure(info.status_code, code, h,
                      maybe ? "the request may have been delivered" : "nothing was sent");
    }
  }
  if (result.delivery == Delivery::kResponseReceived) result.response = TakeResponse(ex);
  Release(std::move(handle));
  return result;
}

}  // namespace
}  // namespace internal

absl::StatusOr<std::shared_ptr<Transport>> MakeCurlTransport(CurlTransportOptions options) {
  if (options.max_response_body == 0) {
    return absl::InvalidArgumentError("max_response_body: must be > 0, got 0");
  }
  if (options.max_redirects < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_redirects: must be >= 0, got ", options.max_redirects));
  }
  if (options.max_idle_handles < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_idle_handles: must be >= 1, got ", options.max_idle_handles));
  }
  if (absl::Status s = internal::ValidateSharedOptions(options); !s.ok()) return s;
  if (absl::Status s = internal::GlobalInit(); !s.ok()) return s;
  return std::shared_ptr<Transport>(std::make_shared<internal::CurlTransport>(std::move(options)));
}

}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The libcurl transport. One easy handle per in-flight attempt, taken from a
// mutex-protected pool and put back afterwards, so the handle's connection
// cache keeps connections alive between calls and no handle is ever used by
// two threads at once. See docs/curl-transport.md for the policies.
//
// This file holds the pool and Send(): validation, the redirect loop, the
// transfer loop that times the first byte, and the decision of what was
// delivered. The handle's callbacks (response parsing)
// are in curl_exchange.cc, its setup per hop and the timings in
// curl_handle.cc, the CURLcode table in curl_errors.cc.

#include "saferetry/curl_transport.h"

#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
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

struct MultiCleanup {
  void operator()(CURLM* m) const { curl_multi_cleanup(m); }
};

// A pooled easy handle and the multi handle that runs its transfers, as
// curl_easy_perform would run them on one of its own: its connection cache
// keeps the handle's connections alive between calls. Not curl_easy_perform
// itself, which waits in libcurl with no way to end a transfer at a time of
// the transport's choosing (the first-byte limit). The multi handle is
// cleaned up first (closing the cached connections), then the easy handle.
struct BlockingHandle {
  std::unique_ptr<PooledHandle> handle;
  std::unique_ptr<CURLM, MultiCleanup> multi;
};

// How one transfer ended: libcurl's code, or the first-byte limit (the
// transfer was removed mid-way).
struct TransferEnd {
  CURLcode code = CURLE_OK;
  bool first_byte_expired = false;
};

// Milliseconds to wait for, at least 1, from microseconds.
int WaitMillis(std::int64_t us) {
  const std::int64_t ms = (us + 999) / 1000;
  return static_cast<int>(std::clamp<std::int64_t>(ms, 1, 1000));
}

// Runs one transfer of `h` on `multi` to its end, or until no byte of the
// response came `first_byte` after the whole request was written (zero: no
// such limit). libcurl refreshes the transfer's time each time it runs it
// (and calls the progress callback, which stamps the request's end), so
// after curl_multi_perform that time is now.
TransferEnd Perform(PooledHandle& h, CURLM* multi, Duration first_byte) {
  TransferEnd end;
  const CURLMcode added = curl_multi_add_handle(multi, h.curl);
  if (added != CURLM_OK) {
    end.code = added == CURLM_OUT_OF_MEMORY ? CURLE_OUT_OF_MEMORY : CURLE_FAILED_INIT;
    return end;
  }
  const std::int64_t limit_us =
      std::chrono::duration_cast<std::chrono::microseconds>(first_byte).count();
  const Exchange& ex = h.exchange;
  bool finished = false;
  for (;;) {
    int running = 0;
    if (curl_multi_perform(multi, &running) != CURLM_OK) break;
    if (running == 0) {
      finished = true;
      break;
    }
    int wait_ms = 1000;
    if (limit_us > 0 && ex.request_written && !ex.any_response_byte) {
      const std::int64_t left = limit_us - (TransferMicros(h) - ex.written_us);
      if (left <= 0) {
        end.first_byte_expired = true;
        break;
      }
      wait_ms = WaitMillis(left);
    }
    if (curl_multi_poll(multi, nullptr, 0, wait_ms, nullptr) != CURLM_OK) break;
  }
  end.code = CURLE_RECV_ERROR;  // The multi handle failed: decided by the evidence.
  if (finished) {
    int left = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi, &left)) {
      if (msg->msg == CURLMSG_DONE && msg->easy_handle == h.curl) end.code = msg->data.result;
    }
  }
  // Mid-transfer (the limit), this closes the connection: it is never
  // reused with a response still to come.
  curl_multi_remove_handle(multi, h.curl);
  return end;
}

class CurlTransport final : public Transport, public PrevalidatedSender {
 public:
  explicit CurlTransport(CurlTransportOptions options) : options_(std::move(options)) {
    if (options_.user_agent.empty()) options_.user_agent = kDefaultUserAgent;
    idle_.reserve(options_.max_idle_handles);
  }

  TransportResult Send(const Request& request, const AttemptOptions& options) override;
  TransportResult SendPrevalidated(const Request& request, const AttemptOptions& options) override;

 private:
  BlockingHandle Acquire();
  void Release(BlockingHandle handle);

  CurlTransportOptions options_;
  std::mutex mu_;
  std::vector<BlockingHandle> idle_;  // Guarded by mu_.
};

BlockingHandle CurlTransport::Acquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      BlockingHandle h = std::move(idle_.back());
      idle_.pop_back();
      return h;
    }
  }
  BlockingHandle h;
  h.multi.reset(curl_multi_init());
  if (h.multi != nullptr) h.handle = NewPooledHandle(options_);
  return h;
}

void CurlTransport::Release(BlockingHandle handle) {
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
  // Bad input is refused before any byte is sent.
  if (absl::Status s = CheckSend(request, options.extra_headers); !s.ok()) {
    TransportResult result;
    result.delivery = Delivery::kNotSent;
    result.status = std::move(s);
    return result;
  }
  return SendPrevalidated(request, options);
}

TransportResult CurlTransport::SendPrevalidated(const Request& request,
                                                const AttemptOptions& options) {
  TransportResult result;
  result.delivery = Delivery::kNotSent;
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

  BlockingHandle handle = Acquire();
  if (handle.handle == nullptr) {
    result.status = absl::InternalError("curl_easy_init failed; nothing sent");
    return result;
  }
  PooledHandle& h = *handle.handle;
  const PhaseLimits limits = MergePhaseLimits(options.phase_limits, options_.phase_limits);
  TransferEnd end;
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
    PrepareHop(h, request, options, hop, timeout, limits, options_.max_response_body);
    end = Perform(h, handle.multi.get(), limits.first_byte);
    code = end.code;
    result.timings = ReadTimings(h, elapsed);
    elapsed = result.timings.total;

    if (end.first_byte_expired || !options_.follow_redirects || code != CURLE_OK ||
        redirects >= options_.max_redirects)
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

  if (end.first_byte_expired) {
    result.delivery = Delivery::kMaybeDelivered;
    result.status = FirstByteExpired(h, limits.first_byte);
    result.timings.timed_out = Phase::kFirstByte;
  } else if (result.status.ok() && !(result.delivery == Delivery::kResponseReceived)) {
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
        if (code == CURLE_OPERATION_TIMEDOUT) result.timings.timed_out = Phase::kTransfer;
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
      if (code == CURLE_OPERATION_TIMEDOUT) {
        result.timings.timed_out = TimedOutPhase(h, result.timings, IsHttps(*hop.url));
      }
      result.status = CurlFailure(
          info.status_code, code, h,
          TimeoutNote(result.timings.timed_out,
                      maybe ? "the request may have been delivered" : "nothing was sent"));
    }
  } else if (result.status.code() == absl::StatusCode::kDeadlineExceeded) {
    result.timings.timed_out = Phase::kTransfer;  // Between redirect hops.
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

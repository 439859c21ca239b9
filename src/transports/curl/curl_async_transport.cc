// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The libcurl multi transport: easy handles set up exactly as the blocking
// transport's (curl_handle.cc, curl_exchange.cc), run by one multi handle
// through the socket API. libcurl tells the loop which descriptors to watch
// (CURLMOPT_SOCKETFUNCTION) and when to call it back (CURLMOPT_TIMERFUNCTION);
// the loop's readiness and timer callbacks call curl_multi_socket_action,
// and finished transfers are collected from curl_multi_info_read. Chosen
// over curl_multi_poll so that one loop thread can carry thousands of
// transfers next to the rest of the caller's loop, with no thread blocked in
// libcurl.

#include "saferetry/curl_async_transport.h"

#include <curl/curl.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/slot_map.h"
#include "common/validated_send.h"
#include "curl_errors.h"
#include "curl_exchange.h"
#include "curl_handle.h"

namespace saferetry {
namespace internal {
namespace {

// Did any byte of the request possibly leave? The same evidence the
// blocking transport reads.
bool RequestStarted(PooledHandle& h) {
  curl_off_t request_size = 0;
  curl_easy_getinfo(h.curl, CURLINFO_REQUEST_SIZE, &request_size);
  return h.exchange.prereq_calls > 0 || request_size > 0 || h.exchange.body_offset > 0;
}

// The delivery decision of the blocking transport (curl_transport.cc), for
// one hop (no redirects here).
TransportResult Decide(PooledHandle& h, CURLcode code) {
  TransportResult result;
  Exchange& ex = h.exchange;
  result.timings = ReadTimings(h, Duration::zero());
  const CurlCodeInfo info = DescribeCurlCode(code);
  if (code == CURLE_OK || ex.final_headers_done) {
    result.delivery = Delivery::kResponseReceived;
    if (code == CURLE_OK || (code == CURLE_WRITE_ERROR && ex.truncated)) {
      result.status = absl::OkStatus();
    } else {
      result.status =
          CurlFailure(info.status_code, code, h, "the response broke after its headers");
      if (code == CURLE_OPERATION_TIMEDOUT) result.timings.timed_out = Phase::kTransfer;
    }
    result.response = TakeResponse(ex);
    return result;
  }
  const bool started = RequestStarted(h);
  if (ex.resend_blocked || code == CURLE_SEND_FAIL_REWIND) {
    result.delivery = Delivery::kMaybeDelivered;
    result.status =
        CurlFailure(absl::StatusCode::kUnavailable, code, h,
                    "the connection closed before any response; libcurl's resend of an "
                    "unsafe request was refused, the first copy may have been delivered");
    return result;
  }
  const bool maybe =
      started || ex.any_response_byte || info.delivery == CurlDeliveryRule::kAfterSend;
  result.delivery = maybe ? Delivery::kMaybeDelivered : Delivery::kNotSent;
  if (code == CURLE_OPERATION_TIMEDOUT) {
    char* url = nullptr;
    curl_easy_getinfo(h.curl, CURLINFO_EFFECTIVE_URL, &url);
    result.timings.timed_out = TimedOutPhase(h, result.timings, url != nullptr && IsHttps(url));
  }
  result.status =
      CurlFailure(info.status_code, code, h,
                  TimeoutNote(result.timings.timed_out,
                              maybe ? "the request may have been delivered" : "nothing was sent"));
  return result;
}

class CurlMultiTransport final : public AsyncTransport, public PrevalidatedStarter {
 public:
  CurlMultiTransport(std::shared_ptr<EventLoop> loop, CurlMultiTransportOptions options,
                     CURLM* multi)
      : loop_(std::move(loop)), options_(std::move(options)), multi_(multi) {
    if (options_.user_agent.empty()) options_.user_agent = kDefaultUserAgent;
    // A fixed cache size: libcurl's default follows the handles added at the
    // moment a connection is returned, and a finished handle is removed
    // before the next call's is added, so the default would shrink and
    // close kept-alive connections under a steady load.
    curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, static_cast<long>(options_.max_connections));
    curl_multi_setopt(multi_, CURLMOPT_SOCKETFUNCTION, &CurlMultiTransport::OnSocket);
    curl_multi_setopt(multi_, CURLMOPT_SOCKETDATA, this);
    curl_multi_setopt(multi_, CURLMOPT_TIMERFUNCTION, &CurlMultiTransport::OnTimer);
    curl_multi_setopt(multi_, CURLMOPT_TIMERDATA, this);
  }

  ~CurlMultiTransport() override {
    if (timer_ != 0) loop_->CancelTimer(timer_);
    for (const auto& [id, watch] : watches_) loop_->CancelTimer(watch.timer);
    active_.ForEach([&](Transfer& t) { curl_multi_remove_handle(multi_, t.handle->curl); });
    active_ = Transfers();
    idle_.clear();
    for (std::size_t fd = 0; fd < watched_.size(); ++fd) {
      if (watched_[fd] != 0) loop_->WatchFd(static_cast<int>(fd), 0, nullptr).IgnoreError();
    }
    curl_multi_cleanup(multi_);
  }

  AttemptId Start(const Request& request, const AttemptOptions& options, Callback done) override;
  AttemptId StartPrevalidated(const Request& request, const AttemptOptions& options,
                              Callback done) override;
  std::optional<TransportResult> Cancel(AttemptId id) override;

 private:
  struct Transfer {
    std::unique_ptr<PooledHandle> handle;
    Callback done;
  };
  // A transfer's attempt id is its slot here (no lookup table); a burst's
  // slots are given back once none is in flight.
  using Transfers = SlotMap<Transfer>;
  static constexpr std::size_t kKeptTransferSlots = 256;

  // The first-byte limit of a transfer, timed on the loop (libcurl has no
  // such limit). Only transfers with one have an entry.
  struct FirstByteWatch {
    EventLoop::TimerId timer = 0;
    Duration limit{0};
    // The loop time the watch's timers covered since the transfer started:
    // a reading of the transfer's age on libcurl's clock that is never
    // ahead of it (a timer runs at or after its time).
    Duration covered{0};
  };

  static int OnSocket(CURL* easy, curl_socket_t fd, int what, void* userp, void* socketp);
  void ArmFirstByte(AttemptId id, FirstByteWatch& watch, Duration delay);
  void OnFirstByteTimer(AttemptId id);
  void DropWatch(AttemptId id);
  static int OnTimer(CURLM* multi, long timeout_ms, void* userp);
  void Act(curl_socket_t fd, int flags);
  void CollectDone();
  // Posts `done(result)` for an attempt refused before it started.
  AttemptId FailLater(TransportResult result, Callback done);

  std::shared_ptr<EventLoop> loop_;
  CurlMultiTransportOptions options_;
  CURLM* multi_;
  // Loop thread only.
  Transfers active_;
  // CollectDone's list of finished attempts, kept for its capacity.
  std::vector<std::pair<AttemptId, CURLcode>> finished_;
  std::vector<std::unique_ptr<PooledHandle>> idle_;
  std::vector<char> watched_;  // by descriptor: 1 while watched
  EventLoop::TimerId timer_ = 0;
  std::uint32_t refused_ = 0;
  std::unordered_map<AttemptId, FirstByteWatch> watches_;
};

void CurlMultiTransport::ArmFirstByte(AttemptId id, FirstByteWatch& watch, Duration delay) {
  watch.covered += delay;
  watch.timer = loop_->AddTimer(delay, [this, id] { OnFirstByteTimer(id); });
}

void CurlMultiTransport::DropWatch(AttemptId id) {
  if (watches_.empty()) return;
  auto it = watches_.find(id);
  if (it == watches_.end()) return;
  loop_->CancelTimer(it->second.timer);
  watches_.erase(it);
}

// The request cannot have been written before the transfer started, so the
// first timer runs `limit` after the start; each later one runs when the
// limit would end if the request was written at the time the exchange
// stamped (or `limit` later while it is still being written).
void CurlMultiTransport::OnFirstByteTimer(AttemptId id) {
  auto it = watches_.find(id);
  if (it == watches_.end()) return;
  FirstByteWatch& watch = it->second;
  watch.timer = 0;
  const std::uint32_t index = active_.IndexOf(id);
  if (index == Transfers::kNoIndex) {
    watches_.erase(it);
    return;
  }
  PooledHandle& h = *active_.at(index).handle;
  const Exchange& ex = h.exchange;
  if (ex.any_response_byte) {
    watches_.erase(it);
    return;
  }
  if (!ex.request_written) {
    ArmFirstByte(id, watch, watch.limit);
    return;
  }
  const Duration ends = std::chrono::microseconds(ex.written_us) + watch.limit;
  if (ends > watch.covered) {
    ArmFirstByte(id, watch, ends - watch.covered);
    return;
  }
  const Duration limit = watch.limit;
  watches_.erase(it);
  Transfer t = active_.Take(index);
  // Removed mid-transfer: libcurl closes the connection, which is never
  // reused with a response still to come.
  curl_multi_remove_handle(multi_, t.handle->curl);
  TransportResult result;
  result.timings = ReadTimings(*t.handle, Duration::zero());
  result.timings.timed_out = Phase::kFirstByte;
  result.delivery = Delivery::kMaybeDelivered;
  result.status = FirstByteExpired(*t.handle, limit);
  if (idle_.size() < options_.max_idle_handles) idle_.push_back(std::move(t.handle));
  t.done(std::move(result));
  active_.TrimIfEmpty(kKeptTransferSlots);
}

int CurlMultiTransport::OnSocket(CURL*, curl_socket_t fd, int what, void* userp, void*) {
  auto* self = static_cast<CurlMultiTransport*>(userp);
  if (what == CURL_POLL_REMOVE) {
    self->loop_->WatchFd(fd, 0, nullptr).IgnoreError();
    if (static_cast<std::size_t>(fd) < self->watched_.size()) self->watched_[fd] = 0;
    return 0;
  }
  int events = 0;
  if (what == CURL_POLL_IN || what == CURL_POLL_INOUT) events |= EventLoop::kReadable;
  if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT) events |= EventLoop::kWritable;
  absl::Status s = self->loop_->WatchFd(fd, events, [self, fd](int ready) {
    int flags = 0;
    if ((ready & EventLoop::kReadable) != 0) flags |= CURL_CSELECT_IN;
    if ((ready & EventLoop::kWritable) != 0) flags |= CURL_CSELECT_OUT;
    if ((ready & EventLoop::kError) != 0) flags |= CURL_CSELECT_ERR;
    self->Act(fd, flags);
  });
  if (!s.ok()) return -1;  // libcurl fails the transfers on this socket
  if (static_cast<std::size_t>(fd) >= self->watched_.size()) {
    self->watched_.resize(static_cast<std::size_t>(fd) + 64, 0);
  }
  self->watched_[fd] = 1;
  return 0;
}

int CurlMultiTransport::OnTimer(CURLM*, long timeout_ms, void* userp) {
  auto* self = static_cast<CurlMultiTransport*>(userp);
  if (self->timer_ != 0) {
    self->loop_->CancelTimer(self->timer_);
    self->timer_ = 0;
  }
  if (timeout_ms < 0) return 0;
  // Never inline: libcurl must not be re-entered from its own callback.
  self->timer_ = self->loop_->AddTimer(std::chrono::milliseconds(timeout_ms), [self] {
    self->timer_ = 0;
    self->Act(CURL_SOCKET_TIMEOUT, 0);
  });
  return 0;
}

void CurlMultiTransport::Act(curl_socket_t fd, int flags) {
  int running = 0;
  curl_multi_socket_action(multi_, fd, flags, &running);
  CollectDone();
}

void CurlMultiTransport::CollectDone() {
  // Collected first, by attempt id while every handle is alive, then
  // reported: a callback may start or cancel others (and a cancelled
  // attempt's handle is destroyed).
  std::vector<std::pair<AttemptId, CURLcode>> done;
  done.swap(finished_);
  done.clear();
  int left = 0;
  while (CURLMsg* msg = curl_multi_info_read(multi_, &left)) {
    if (msg->msg != CURLMSG_DONE) continue;
    void* handle = nullptr;
    curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &handle);
    if (handle == nullptr) continue;
    // The transfer's slot holds this handle (a handle runs one transfer).
    const std::uint32_t slot = static_cast<PooledHandle*>(handle)->transfer_slot;
    if (const AttemptId id = active_.IdAt(slot);
        id != 0 && active_.at(slot).handle.get() == handle) {
      done.emplace_back(id, msg->data.result);
    }
  }
  for (const auto& [id, code] : done) {
    const std::uint32_t index = active_.IndexOf(id);
    if (index == Transfers::kNoIndex) continue;  // cancelled by an earlier callback
    Transfer t = active_.Take(index);
    curl_multi_remove_handle(multi_, t.handle->curl);
    DropWatch(id);
    TransportResult result = Decide(*t.handle, code);
    // A finished transfer leaves its connection in the multi's cache in a
    // clean state; the handle is pooled.
    if (idle_.size() < options_.max_idle_handles) idle_.push_back(std::move(t.handle));
    t.done(std::move(result));
  }
  done.clear();
  if (done.capacity() > finished_.capacity()) done.swap(finished_);
  active_.TrimIfEmpty(kKeptTransferSlots);
}

AsyncTransport::AttemptId CurlMultiTransport::FailLater(TransportResult result, Callback done) {
  loop_->Post(
      [result = std::move(result), done = std::move(done)]() mutable { done(std::move(result)); });
  // An id that names no slot: Cancel finds nothing, and it is never 0.
  return (static_cast<AttemptId>(++refused_) << 32) | Transfers::kNoIndex;
}

AsyncTransport::AttemptId CurlMultiTransport::Start(const Request& request,
                                                    const AttemptOptions& options, Callback done) {
  // Bad input is refused before any byte is sent.
  if (absl::Status s = CheckSend(request, options.extra_headers); !s.ok()) {
    TransportResult refused;
    refused.delivery = Delivery::kNotSent;
    refused.status = std::move(s);
    return FailLater(std::move(refused), std::move(done));
  }
  return StartPrevalidated(request, options, std::move(done));
}

AsyncTransport::AttemptId CurlMultiTransport::StartPrevalidated(const Request& request,
                                                                const AttemptOptions& options,
                                                                Callback done) {
  TransportResult refused;
  refused.delivery = Delivery::kNotSent;
  if (options.timeout <= Duration::zero()) {
    refused.status =
        absl::DeadlineExceededError("timeout: no time left for an attempt; nothing sent");
    return FailLater(std::move(refused), std::move(done));
  }
  std::unique_ptr<PooledHandle> handle;
  if (!idle_.empty()) {
    handle = std::move(idle_.back());
    idle_.pop_back();
  } else {
    handle = NewPooledHandle(options_);
  }
  if (handle == nullptr) {
    refused.status = absl::InternalError("curl_easy_init failed; nothing sent");
    return FailLater(std::move(refused), std::move(done));
  }
  Hop hop;
  hop.method = request.method;
  hop.url = &request.url;
  hop.body = &request.body;
  hop.unsafe = !IsIdempotent(request);
  AttemptOptions ao = options;
  ao.cancellation = nullptr;  // cancelled through Cancel()
  const PhaseLimits limits = MergePhaseLimits(options.phase_limits, options_.phase_limits);
  PrepareHop(*handle, request, ao, hop, options.timeout, limits, options_.max_response_body);
  CURL* easy = handle->curl;
  const CURLMcode mc = curl_multi_add_handle(multi_, easy);
  if (mc != CURLM_OK) {
    refused.status = absl::InternalError(
        absl::StrCat("curl_multi_add_handle: ", curl_multi_strerror(mc), "; nothing sent"));
    return FailLater(std::move(refused), std::move(done));
  }
  PooledHandle& h = *handle;
  const AttemptId id = active_.Insert(Transfer{std::move(handle), std::move(done)});
  h.transfer_slot = Transfers::SlotOf(id);
  if (limits.first_byte > Duration(0) && limits.first_byte < options.timeout) {
    FirstByteWatch& watch = watches_[id];
    watch.limit = limits.first_byte;
    ArmFirstByte(id, watch, limits.first_byte);
  }
  return id;
}

std::optional<TransportResult> CurlMultiTransport::Cancel(AttemptId id) {
  const std::uint32_t index = active_.IndexOf(id);
  if (index == Transfers::kNoIndex) return std::nullopt;
  Transfer t = active_.Take(index);
  DropWatch(id);
  TransportResult r;
  const bool started = RequestStarted(*t.handle) || t.handle->exchange.any_response_byte;
  r.delivery = started ? Delivery::kMaybeDelivered : Delivery::kNotSent;
  r.status =
      absl::CancelledError(started ? "cancelled during the attempt; the request may have been "
                                     "delivered"
                                   : "cancelled before the request was sent");
  // Removed mid-transfer: libcurl closes the connection (it cannot be
  // reused with a response half read), and the handle is destroyed rather
  // than pooled.
  curl_multi_remove_handle(multi_, t.handle->curl);
  t.handle.reset();
  return r;
}

}  // namespace
}  // namespace internal

namespace {
constexpr std::size_t kMaxConnectionsLimit = 1000000;
}  // namespace

absl::StatusOr<std::shared_ptr<AsyncTransport>> MakeCurlMultiTransport(
    std::shared_ptr<EventLoop> loop, CurlMultiTransportOptions options) {
  if (loop == nullptr) return absl::InvalidArgumentError("loop: required");
  if (options.max_response_body == 0) {
    return absl::InvalidArgumentError("max_response_body: must be > 0, got 0");
  }
  if (options.follow_redirects) {
    return absl::InvalidArgumentError(
        "follow_redirects: not supported by the multi transport; the 3xx is the answer");
  }
  if (options.max_idle_handles < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_idle_handles: must be >= 1, got ", options.max_idle_handles));
  }
  if (options.max_connections < 1 || options.max_connections > kMaxConnectionsLimit) {
    return absl::InvalidArgumentError(absl::StrCat("max_connections: must be in 1..",
                                                   kMaxConnectionsLimit, ", got ",
                                                   options.max_connections));
  }
  if (absl::Status s = internal::ValidateSharedOptions(options); !s.ok()) return s;
  if (absl::Status s = internal::GlobalInit(); !s.ok()) return s;
  CURLM* multi = curl_multi_init();
  if (multi == nullptr) return absl::InternalError("curl_multi_init failed");
  return std::shared_ptr<AsyncTransport>(
      std::make_shared<internal::CurlMultiTransport>(std::move(loop), std::move(options), multi));
}

}  // namespace saferetry

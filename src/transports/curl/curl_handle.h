// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Setting up a pooled easy handle: the options fixed for its life, and for
// each request on the wire (one redirect hop) the method, body, header list
// and timeouts. Also what is read back from the handle afterwards: phase
// timings, and the origin of a URL for the cross-host redirect check.

#ifndef SAFERETRY_SRC_CURL_CURL_HANDLE_H_
#define SAFERETRY_SRC_CURL_CURL_HANDLE_H_

#include <curl/curl.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "curl_exchange.h"
#include "saferetry/curl_transport.h"
#include "saferetry/request.h"
#include "saferetry/result.h"
#include "saferetry/transport.h"

namespace saferetry {
namespace internal {

// An easy handle and the buffers reused with it.
struct PooledHandle {
  CURL* curl = nullptr;
  Exchange exchange;
  // One block for what the handle keeps between requests, which only grows
  // (no allocation in steady state), sized to the word: libcurl's error
  // buffer when asked for (`last.error_buffer`), then the request header
  // list's nodes, then a copy of the URL last set, then the header lines
  // the nodes point at. libcurl reads CURLOPT_HTTPHEADER in place during a
  // transfer (it does not copy the list) and copies CURLOPT_URL: the URL's
  // copy here only tells whether the next request's differs, and an
  // unchanged one is not set again. One block, not a string, a vector and a
  // string: a transfer in flight holds its handle, so these bytes count for
  // every call in flight. The error buffer (CURLOPT_ERRORBUFFER, 256
  // bytes, with `CurlTransportOptions::libcurl_error_text`) is in it for
  // the same reason: by default a failure is described from what libcurl
  // reports after the transfer (`CurlFailure`), and no handle carries one.
  std::unique_ptr<std::uint64_t[]> scratch;
  std::uint32_t scratch_words =
      0;  // the block's size in 8-byte words (0: none, or too large to say)
  std::uint32_t node_capacity = 0;  // the nodes (one per header); the URL follows
  static constexpr std::uint32_t kNoUrl = UINT32_MAX;
  std::uint32_t url_size = kNoUrl;  // the URL's copy; kNoUrl: none (set it)
  // The multi transport's slot of the transfer running on this handle
  // (`SlotMap` index; the handle's CURLOPT_PRIVATE points at this struct).
  std::uint32_t transfer_slot = 0;
  // The per-request options as `PrepareHop` last set them on this handle
  // (the URL: `url_size` above): an option already at its value is not set
  // again (each `curl_easy_setopt` is a call through libcurl's option
  // switch, and the URL's copies the string).
  // libcurl keeps what was set across transfers on the same easy handle.
  struct LastSet {
    curl_off_t post_size = -1;
    const char* post_fields = nullptr;
    std::int32_t timeout_ms = -1;  // `TimeoutMillis`: at most INT32_MAX
    std::int8_t body_mode = -1;    // 0: HEAD, 1: GET, 2: POST with a body
    // CURLOPT_HTTPHEADER: 0 none, 1 the nodes at the start of `scratch`;
    // -1 not set since that block was (re)allocated.
    std::int8_t headers = -1;
    bool known : 1;  // false: nothing set yet, every option is set
    bool custom_request : 1;
    // A phase limit (connect, low speed) was set: the next hop sets its
    // own, or the defaults, again.
    bool phase_limits : 1;
    // Set once, by `NewPooledHandle`: CURLOPT_ERRORBUFFER is the start of
    // `scratch` (set again whenever the block moves).
    bool error_buffer : 1;
    LastSet() : known(false), custom_request(false), phase_limits(false), error_buffer(false) {}
  };
  LastSet last;

  PooledHandle() = default;
  PooledHandle(const PooledHandle&) = delete;
  PooledHandle& operator=(const PooledHandle&) = delete;
  ~PooledHandle() {
    if (curl != nullptr) curl_easy_cleanup(curl);
  }
};

// What one request on the wire looks like (a redirect hop may differ from
// the original request).
struct Hop {
  std::string_view method;
  const std::string* url = nullptr;
  const std::string* body = nullptr;
  bool unsafe = false;
  bool strip_credentials = false;
};

/// The User-Agent when the options leave it empty.
inline constexpr char kDefaultUserAgent[] = "saferetry/0.3.0";

/// curl_global_init, once per process (it is not thread-safe before libcurl
/// 7.84); never curl_global_cleanup: other code may use libcurl too.
absl::Status GlobalInit();

/// The option checks both libcurl transports share: user_agent, ca_file,
/// ca_dir, proxy and no_proxy (no CR, LF or NUL), http_version (a known
/// value; HTTP/2 prior knowledge only with a libcurl that has HTTP/2),
/// phase_limits (`ValidatePhaseLimits`). InvalidArgument naming the field.
absl::Status ValidateSharedOptions(const CurlTransportOptions& options);

/// "curl: <curl's message> (<detail>); <note>" with `code`. The detail is
/// libcurl's own sentence when the handle keeps one (`LastSet::error_buffer`,
/// the start of its block), else `TransferDetail` of the handle's last
/// transfer.
absl::Status CurlFailure(absl::StatusCode code, CURLcode curl_code, const PooledHandle& h,
                         std::string_view note);

/// What libcurl reports of the last transfer on `c` that tells a failure
/// apart, read after it ended, without its error buffer: the peer's address
/// and port (else the origin of the URL, when no address was reached), the
/// operating system's error, the TLS verification result and the proxy's
/// error when there is one, the time spent and the response bytes received.
/// Never a credential: the URL is cut to its origin. For example
/// "to http://127.0.0.1:9, Connection refused (errno 111), after 0 ms" (libcurl
/// reports a peer's address only once connected to it).
std::string TransferDetail(CURL* c);

// A new easy handle with every option that never changes for it set (the
// callbacks, protocols, no automatic redirects, TCP_NODELAY, TLS); nullptr
// when curl_easy_init fails.
std::unique_ptr<PooledHandle> NewPooledHandle(const CurlTransportOptions& options);

// Resets the handle's exchange and sets every per-request option for `hop`,
// so nothing leaks from the previous user of the pooled handle. `timeout` is
// Duration::max() for none; `limits` are the attempt's (merged with the
// transport's: `MergePhaseLimits`), of which the hop sets the connect and
// low-speed limits (the first-byte limit is the caller's to time). Then the
// transfer may run.
void PrepareHop(PooledHandle& h, const Request& request, const AttemptOptions& options,
                const Hop& hop, Duration timeout, const PhaseLimits& limits,
                std::size_t max_response_body);

// The phase timings of the last transfer on `h`, shifted by `offset` (the
// time spent on earlier hops). `first_byte` is zero unless a byte of the
// response arrived: libcurl can stamp its start-transfer time on a
// connection that died before answering, ahead of the connect time of the
// connection it then opened. `request_written` is the exchange's own stamp.
PhaseTimings ReadTimings(const PooledHandle& h, Duration offset);

// The phase in which the last transfer on `h` ran out of time, from what it
// reached: a response byte (transfer), the whole request written (first
// byte), a request started (request write), a connection (its TLS handshake
// for `https`, else the request write), a resolved name (connect), else the
// name lookup.
Phase TimedOutPhase(const PooledHandle& h, const PhaseTimings& timings, bool https);

// The status of a transfer ended by the first-byte limit `limit`: deadline
// exceeded, the request written and so maybe delivered.
absl::Status FirstByteExpired(const PooledHandle& h, Duration limit);

// `note` after "time ran out in the <phase> phase; " when `phase` is one.
std::string TimeoutNote(Phase phase, std::string_view note);

// The URL's scheme is https (any case).
bool IsHttps(std::string_view url);

// Microseconds of libcurl's clock since the last transfer on `h` started,
// as of the last time libcurl ran it (it updates the figure each time).
std::int64_t TransferMicros(const PooledHandle& h);

// `t` with its phases in order (dns <= connect <= tls <= request_written
// <= first_byte <= total, zero meaning "not reached"). When libcurl drops a connection and
// opens another inside one perform, it can leave a stamp of the first
// connection later than a phase of the second (a lookup at 263 us, a connect
// at 229 us); such a stamp is cut to the phase that followed it.
PhaseTimings PhasesInOrder(PhaseTimings t);

// scheme://host:port of an absolute URL, lower case; empty when unparsable.
std::string Origin(const std::string& url);

}  // namespace internal
}  // namespace saferetry

#endif  // SAFERETRY_SRC_CURL_CURL_HANDLE_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Easy-handle setup per handle and per hop, and what is read back from it.

#include "curl_handle.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/strings_internal.h"

namespace saferetry {
namespace internal {
namespace {

// libcurl 7.88 sends a POSTFIELDS body of less than 64 KiB together with the
// headers; above that it streams the body, and the read callback path costs
// nothing extra.
constexpr std::size_t kInPlaceBodyLimit = 64 * 1024;

bool IsCredentialHeader(std::string_view name) {
  return EqualsIgnoreCase(name, "Authorization") || EqualsIgnoreCase(name, "Cookie") ||
         EqualsIgnoreCase(name, "Proxy-Authorization");
}

bool HasHeader(const Headers& headers, HeaderRefs extra, std::string_view name) {
  for (const auto& h : headers) {
    if (EqualsIgnoreCase(h.first, name)) return true;
  }
  for (const HeaderRef& h : extra) {
    if (EqualsIgnoreCase(h.name, name)) return true;
  }
  return false;
}

Duration Micros(curl_off_t us) { return std::chrono::microseconds(us); }

bool LibcurlHasHttp2() {
  const curl_version_info_data* info = curl_version_info(CURLVERSION_NOW);
  return info != nullptr && (info->features & CURL_VERSION_HTTP2) != 0;
}

// CURLOPT_HTTP_VERSION for `v`. Without HTTP/2 in libcurl, "HTTP/2 over TLS
// with fallback" is HTTP/1.1 (libcurl would refuse the option).
long CurlHttpVersion(HttpVersion v) {
  switch (v) {
    case HttpVersion::kHttp1_1:
      return CURL_HTTP_VERSION_1_1;
    case HttpVersion::kHttp2OverTls:
      return LibcurlHasHttp2() ? CURL_HTTP_VERSION_2TLS : CURL_HTTP_VERSION_1_1;
    case HttpVersion::kHttp2PriorKnowledge:
      return CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE;
  }
  return CURL_HTTP_VERSION_1_1;  // Unreachable: refused by ValidateSharedOptions.
}

// Ceil to whole milliseconds, at least 1: curl's resolution.
long TimeoutMillis(Duration timeout) {
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(timeout).count();
  if (ms < 1) ms = 1;
  if (ms > static_cast<decltype(ms)>(INT32_MAX)) ms = INT32_MAX;
  return static_cast<long>(ms);
}

// The header lines of a hop: at most `lines` lines of at most `text` bytes
// in all (an upper bound: each line is "name: value\0", "name;\0" or
// "name:\0", at most the name, the value and three bytes, and, for a hop
// with a body, both of libcurl's defaults that an empty line removes).
struct HeaderListSize {
  std::size_t lines = 0;
  std::size_t text = 0;
};
HeaderListSize SizeHeaderList(const Request& request, HeaderRefs extra, bool uses_body) {
  HeaderListSize size;
  if (uses_body) size = {2, sizeof("Expect:") + sizeof("Content-Type:")};
  for (const auto& hd : request.headers) size.text += hd.first.size() + hd.second.size() + 3;
  for (const HeaderRef& hd : extra) size.text += hd.name.size() + hd.value.size() + 3;
  size.lines += request.headers.size() + extra.size();
  return size;
}

static_assert(CURL_ERROR_SIZE % sizeof(std::uint64_t) == 0, "the nodes follow it aligned");
static_assert(alignof(curl_slist) <= alignof(std::uint64_t), "nodes live in the words");

std::size_t ErrorBytes(const PooledHandle& h) { return h.last.error_buffer ? CURL_ERROR_SIZE : 0; }

// libcurl's error buffer: the start of the block when the handle has one,
// else null.
char* ErrorBuffer(const PooledHandle& h) {
  return h.last.error_buffer ? reinterpret_cast<char*>(h.scratch.get()) : nullptr;
}

curl_slist* ScratchNodes(PooledHandle& h) {
  return reinterpret_cast<curl_slist*>(reinterpret_cast<char*>(h.scratch.get()) + ErrorBytes(h));
}

// A new block of `words` for `nodes` nodes; it forgets the URL's copy (the
// URL is set again) and the header list set (set again), and points
// libcurl's error buffer at its start when the handle has one.
void NewScratch(PooledHandle& h, std::size_t words, std::size_t nodes) {
  h.scratch.reset(new std::uint64_t[words]);
  // A size past 32 bits is not kept: the next request allocates again.
  h.scratch_words = words <= UINT32_MAX ? static_cast<std::uint32_t>(words) : 0;
  h.node_capacity = static_cast<std::uint32_t>(nodes);
  h.url_size = PooledHandle::kNoUrl;
  h.last.headers = -1;  // a list set before pointed into the old block
  curl_slist* const first = ScratchNodes(h);
  for (std::size_t i = 0; i < nodes; ++i) new (first + i) curl_slist{nullptr, nullptr};
  if (char* const error = ErrorBuffer(h); error != nullptr) {
    error[0] = '\0';
    curl_easy_setopt(h.curl, CURLOPT_ERRORBUFFER, error);
  }
}

// Room in the handle's block for `size`'s nodes, then `url_bytes` and its
// text.
void ReserveScratch(PooledHandle& h, const HeaderListSize& size, std::size_t url_bytes) {
  const std::size_t nodes = std::max<std::size_t>(size.lines, h.node_capacity);
  const std::size_t bytes = ErrorBytes(h) + nodes * sizeof(curl_slist) + url_bytes + size.text;
  const std::size_t words = (bytes + sizeof(std::uint64_t) - 1) / sizeof(std::uint64_t);
  if (size.lines <= h.node_capacity && words <= h.scratch_words) return;
  NewScratch(h, words, nodes);
}

char* ScratchUrl(PooledHandle& h) {
  return reinterpret_cast<char*>(ScratchNodes(h) + h.node_capacity);
}

// Sets CURLOPT_URL unless the handle's last URL is the same, and keeps its
// copy. Called after `ReserveScratch`, with room for the URL and its NUL.
void SetUrl(PooledHandle& h, const std::string& url) {
  char* copy = ScratchUrl(h);
  if (h.url_size == url.size() && std::memcmp(copy, url.data(), url.size()) == 0) return;
  curl_easy_setopt(h.curl, CURLOPT_URL, url.c_str());
  std::memcpy(copy, url.c_str(), url.size() + 1);
  h.url_size = url.size() < PooledHandle::kNoUrl ? static_cast<std::uint32_t>(url.size())
                                                 : PooledHandle::kNoUrl;
}

// Writes the hop's header lines after the URL's copy (`ReserveScratch` made
// room) and points the nodes at them.
void BuildHeaderList(PooledHandle& h, const Request& request, const AttemptOptions& options,
                     const Hop& hop, bool uses_body) {
  const HeaderRefs extra = options.extra_headers;
  // libcurl would add "Expect: 100-continue" to large uploads (a round trip
  // of latency, up to 1 s against servers that ignore it) and a form
  // Content-Type to every POST: an empty "Name:" line removes its default.
  // Both are added to a body only: a hop without one needs neither line.
  const bool drop_expect = uses_body && !HasHeader(request.headers, extra, "Expect");
  const bool drop_content_type = uses_body && !HasHeader(request.headers, extra, "Content-Type");

  // Written with plain copies at a cursor: no append's checks per piece.
  char* p = ScratchUrl(h) + hop.url->size() + 1;
  curl_slist* const nodes = ScratchNodes(h);
  std::size_t count = 0;
  auto add_line = [&](std::string_view name, std::string_view value, bool remove_default) {
    nodes[count++].data = p;
    std::memcpy(p, name.data(), name.size());
    p += name.size();
    if (remove_default) {
      *p++ = ':';
    } else if (value.empty()) {
      *p++ = ';';  // curl's syntax for "send with an empty value".
    } else {
      *p++ = ':';
      *p++ = ' ';
      std::memcpy(p, value.data(), value.size());
      p += value.size();
    }
    *p++ = '\0';
  };
  for (const auto& hd : request.headers) {
    if (hop.strip_credentials && IsCredentialHeader(hd.first)) continue;
    add_line(hd.first, hd.second, false);
  }
  for (const HeaderRef& hd : extra) {
    if (hop.strip_credentials && IsCredentialHeader(hd.name)) continue;
    add_line(hd.name, hd.value, false);
  }
  if (drop_expect) add_line("Expect", {}, true);
  if (drop_content_type) add_line("Content-Type", {}, true);

  for (std::size_t i = 0; i < count; ++i) {
    nodes[i].next = (i + 1 < count) ? &nodes[i + 1] : nullptr;
  }
  // libcurl reads the list at each transfer: set again only when it moved.
  const std::int8_t set = count > 0 ? 1 : 0;
  if (!h.last.known || h.last.headers != set) {
    curl_easy_setopt(h.curl, CURLOPT_HTTPHEADER, count > 0 ? nodes : nullptr);
    h.last.headers = set;
  }
}

// Progress callback, with the pooled handle as its user pointer: stamps the
// moment the whole request was written (libcurl 7.88 reports no such time)
// and aborts a cancelled transfer. libcurl calls it each time it runs the
// transfer, and refreshes its total time just before, so that time is now.
extern "C" int OnXferInfo(void* userp, curl_off_t, curl_off_t, curl_off_t ultotal,
                          curl_off_t ulnow) {
  auto* h = static_cast<PooledHandle*>(userp);
  Exchange& ex = h->exchange;
  if (ex.cancellation != nullptr && ex.cancellation->IsCancelled()) {
    ex.cancelled = true;
    return 1;
  }
  // The pre-request callback runs right before libcurl sends the request
  // on a connection, and this one after each step: once the upload counter
  // reaches the body's size (a request without a body has none), libcurl
  // has handed every byte of the request to the connection.
  if (!ex.request_written && ex.prereq_calls > 0) {
    const curl_off_t body =
        ex.sends_body ? std::max<curl_off_t>(ultotal, static_cast<curl_off_t>(ex.body->size())) : 0;
    if (ulnow >= body) {
      curl_off_t now_us = 0;
      curl_easy_getinfo(h->curl, CURLINFO_TOTAL_TIME_T, &now_us);
      ex.written_us = static_cast<std::uint32_t>(std::clamp<curl_off_t>(now_us, 0, UINT32_MAX));
      ex.request_written = true;
    }
  }
  return 0;
}

}  // namespace

absl::Status ValidateSharedOptions(const CurlTransportOptions& options) {
  struct Field {
    const char* name;
    const std::string* value;
    bool nul_only;
  };
  const Field fields[] = {{"user_agent", &options.user_agent, false},
                          {"ca_file", &options.ca_file, true},
                          {"ca_dir", &options.ca_dir, true},
                          {"proxy", &options.proxy, false},
                          {"no_proxy", &options.no_proxy, false}};
  for (const Field& f : fields) {
    for (char c : *f.value) {
      if (c == '\0' || (!f.nul_only && (c == '\r' || c == '\n'))) {
        return absl::InvalidArgumentError(absl::StrCat(
            f.name, f.nul_only ? ": must not contain NUL" : ": must not contain CR, LF or NUL"));
      }
    }
  }
  if (absl::Status s = ValidatePhaseLimits(options.phase_limits, "phase_limits."); !s.ok()) {
    return s;
  }
  switch (options.http_version) {
    case HttpVersion::kHttp1_1:
    case HttpVersion::kHttp2OverTls:
      break;
    case HttpVersion::kHttp2PriorKnowledge:
      if (!LibcurlHasHttp2()) {
        return absl::InvalidArgumentError(
            "http_version: HTTP/2 prior knowledge needs a libcurl built with HTTP/2");
      }
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("http_version: unknown value ", static_cast<int>(options.http_version)));
  }
  return absl::OkStatus();
}

std::unique_ptr<PooledHandle> NewPooledHandle(const CurlTransportOptions& options) {
  auto h = std::make_unique<PooledHandle>();
  h->curl = curl_easy_init();
  if (h->curl == nullptr) return nullptr;
  CURL* c = h->curl;
  void* ex = &h->exchange;
  // Options that never change for this handle.
  curl_easy_setopt(c, CURLOPT_PRIVATE, static_cast<void*>(h.get()));
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  if (options.libcurl_error_text) {
    h->last.error_buffer = true;
    NewScratch(*h, CURL_ERROR_SIZE / sizeof(std::uint64_t), 0);
  }
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, &OnHeader);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, ex);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &OnBody);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, ex);
  curl_easy_setopt(c, CURLOPT_READFUNCTION, &OnRead);
  curl_easy_setopt(c, CURLOPT_READDATA, ex);
  curl_easy_setopt(c, CURLOPT_SEEKFUNCTION, &OnSeek);
  curl_easy_setopt(c, CURLOPT_SEEKDATA, ex);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, &OnXferInfo);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, static_cast<void*>(h.get()));
  // Always on: the callback stamps the end of the request write.
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_PREREQFUNCTION, &OnPrereq);
  curl_easy_setopt(c, CURLOPT_PREREQDATA, ex);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  // Redirects are followed by Send() itself, hop by hop, so each hop gets
  // the resend guard and credentials are dropped on a host change.
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(c, CURLOPT_UNRESTRICTED_AUTH, 0L);
  curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(c, CURLOPT_HTTP_VERSION, CurlHttpVersion(options.http_version));
  curl_easy_setopt(c, CURLOPT_USERAGENT, options.user_agent.c_str());
  curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, options.verify_tls ? 1L : 0L);
  curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, options.verify_tls ? 2L : 0L);
  if (!options.ca_file.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, options.ca_file.c_str());
  if (!options.ca_dir.empty()) curl_easy_setopt(c, CURLOPT_CAPATH, options.ca_dir.c_str());
  // Both always set, so libcurl never reads the proxy environment on a
  // transfer: a proxy of "" is none at all, and a no-proxy list of "" is no
  // host bypassing `proxy` (left unset, libcurl reads `no_proxy` and
  // `NO_PROXY` at every transfer, and they would bypass the proxy).
  curl_easy_setopt(c, CURLOPT_PROXY, options.proxy.c_str());
  curl_easy_setopt(c, CURLOPT_NOPROXY, options.no_proxy.c_str());
  return h;
}

void PrepareHop(PooledHandle& h, const Request& request, const AttemptOptions& options,
                const Hop& hop, Duration timeout, const PhaseLimits& limits,
                std::size_t max_response_body) {
  CURL* c = h.curl;
  const bool is_head = hop.method == "HEAD";
  const bool is_post = hop.method == "POST";
  const bool uses_body = !is_head && (is_post || !hop.body->empty());
  h.exchange.Reset(hop.body, hop.unsafe, uses_body, options.cancellation, max_response_body);
  if (char* const error = ErrorBuffer(h); error != nullptr) error[0] = '\0';
  PooledHandle::LastSet& last = h.last;
  const bool known = last.known;

  // Every per-request option is set for every call (or is at the value this
  // call needs already, `PooledHandle::last`), so nothing leaks from the
  // previous user of the pooled handle.
  ReserveScratch(h, SizeHeaderList(request, options.extra_headers, uses_body), hop.url->size() + 1);
  SetUrl(h, *hop.url);
  const int body_mode = is_head ? 0 : !uses_body ? 1 : 2;
  if (body_mode == 0) {
    if (!known || last.body_mode != 0) curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  } else if (body_mode == 1) {
    if (!known || last.body_mode != 1) curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
  } else {
    // Always a Content-Length, never a chunked upload.
    const auto size = static_cast<curl_off_t>(hop.body->size());
    // Bodies are handed to curl in place, which lets it write a small body
    // in the same send() as the headers. An unsafe request's resend is
    // refused by OnPrereq. Large unsafe bodies (which curl streams after the
    // headers anyway) also go through OnRead with no working seek, a second
    // barrier: a resend must rewind first, and cannot.
    const bool stream = hop.unsafe && hop.body->size() > kInPlaceBodyLimit;
    const char* fields = stream ? nullptr : hop.body->data();
    if (!known || last.body_mode != 2 || last.post_size != size || last.post_fields != fields) {
      curl_easy_setopt(c, CURLOPT_NOBODY, 0L);
      curl_easy_setopt(c, CURLOPT_POST, 1L);
      curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, size);
      curl_easy_setopt(c, CURLOPT_POSTFIELDS, fields);
      last.post_size = size;
      last.post_fields = fields;
    }
  }
  last.body_mode = static_cast<std::int8_t>(body_mode);
  // Any other method rides on the GET or POST machinery (libcurl copies the
  // string).
  const bool custom = !is_head && hop.method != (uses_body ? "POST" : "GET");
  if (custom) {
    const std::string method(hop.method);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method.c_str());
  } else if (!known || last.custom_request) {
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, nullptr);
  }
  last.custom_request = custom;

  BuildHeaderList(h, request, options, hop, uses_body);

  const long ms = timeout == Duration::max() ? 0L : TimeoutMillis(timeout);
  const bool has_limits = limits.connect > Duration(0) || limits.speed_limit > 0;
  if (!known || last.timeout_ms != ms || has_limits || last.phase_limits) {  // `ms` <= INT32_MAX
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, ms);
    // The connect limit inside the attempt's: libcurl takes the smaller of
    // the two anyway, and 0 would mean its own default of 300 s.
    long connect_ms = ms;
    if (limits.connect > Duration(0)) {
      const long limit = TimeoutMillis(limits.connect);
      if (connect_ms == 0 || limit < connect_ms) connect_ms = limit;
    }
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
    if (has_limits || last.phase_limits) {
      const long speed_limit =
          static_cast<long>(std::min<std::int64_t>(limits.speed_limit, INT32_MAX));
      const long speed_time = static_cast<long>(
          std::chrono::duration_cast<std::chrono::seconds>(limits.speed_time).count());
      curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, speed_limit);
      curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, speed_time);
    }
    last.timeout_ms = static_cast<std::int32_t>(ms);
    last.phase_limits = has_limits;
  }
  last.known = true;
}

PhaseTimings ReadTimings(const PooledHandle& h, Duration offset) {
  CURL* const c = h.curl;
  const Exchange& ex = h.exchange;
  curl_off_t dns = 0, connect = 0, tls = 0, first = 0, total = 0;
  curl_easy_getinfo(c, CURLINFO_NAMELOOKUP_TIME_T, &dns);
  curl_easy_getinfo(c, CURLINFO_CONNECT_TIME_T, &connect);
  curl_easy_getinfo(c, CURLINFO_APPCONNECT_TIME_T, &tls);
  curl_easy_getinfo(c, CURLINFO_STARTTRANSFER_TIME_T, &first);
  curl_easy_getinfo(c, CURLINFO_TOTAL_TIME_T, &total);
  PhaseTimings t;
  auto at = [&](curl_off_t us) { return us > 0 ? offset + Micros(us) : Duration(0); };
  t.dns = at(dns);
  t.connect = at(connect);
  t.tls = at(tls);
  // A request written at 0 us is stamped 1 us: zero means "not reached".
  t.request_written =
      ex.request_written ? offset + Micros(std::max<curl_off_t>(ex.written_us, 1)) : Duration(0);
  t.first_byte = ex.any_response_byte ? at(first) : Duration(0);
  t.total = offset + Micros(total);
  return PhasesInOrder(t);
}

PhaseTimings PhasesInOrder(PhaseTimings t) {
  // From the last phase back: a stamp later than the phase that followed it
  // is stale (left by the connection curl gave up on) and is bounded by it.
  Duration* const phases[] = {&t.dns, &t.connect, &t.tls, &t.request_written, &t.first_byte};
  Duration bound = t.total;
  for (int i = 4; i >= 0; --i) {
    Duration& d = *phases[i];
    if (d <= Duration::zero()) continue;
    if (d > bound) d = bound;
    bound = d;
  }
  return t;
}

Phase TimedOutPhase(const PooledHandle& h, const PhaseTimings& timings, bool https) {
  const Exchange& ex = h.exchange;
  if (ex.any_response_byte) return Phase::kTransfer;
  if (ex.request_written) return Phase::kFirstByte;
  curl_off_t request_size = 0;
  curl_easy_getinfo(h.curl, CURLINFO_REQUEST_SIZE, &request_size);
  if (ex.prereq_calls > 0 || request_size > 0) return Phase::kRequestWrite;
  // libcurl 7.88 stamps the connect only once the whole chain (TCP, then
  // TLS) is up, but reports the peer's address as soon as TCP connected.
  char* peer = nullptr;
  curl_easy_getinfo(h.curl, CURLINFO_PRIMARY_IP, &peer);
  const bool tcp_connected = timings.connect > Duration(0) || (peer != nullptr && peer[0] != '\0');
  if (tcp_connected) {
    return https && timings.tls <= Duration(0) ? Phase::kTls : Phase::kRequestWrite;
  }
  // libcurl stamps the lookup of an address literal too (a few
  // microseconds): a transfer without that stamp was still resolving.
  if (timings.dns > Duration(0)) return Phase::kConnect;
  return Phase::kDns;
}

absl::Status FirstByteExpired(const PooledHandle& h, Duration limit) {
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(limit).count();
  return absl::DeadlineExceededError(
      absl::StrCat("first-byte limit: no response byte within ", ms,
                   " ms of the request being written (", TransferDetail(h.curl),
                   "); time ran out in the first_byte phase; the request may have been delivered"));
}

std::string TimeoutNote(Phase phase, std::string_view note) {
  if (phase == Phase::kNone) return std::string(note);
  const std::string_view name = PhaseName(phase);
  return absl::StrCat("time ran out in the ", absl::string_view(name.data(), name.size()),
                      " phase; ", absl::string_view(note.data(), note.size()));
}

bool IsHttps(std::string_view url) {
  return absl::StartsWithIgnoreCase(absl::string_view(url.data(), url.size()), "https://");
}

std::int64_t TransferMicros(const PooledHandle& h) {
  curl_off_t us = 0;
  curl_easy_getinfo(h.curl, CURLINFO_TOTAL_TIME_T, &us);
  return us;
}

std::string Origin(const std::string& url) {
  CURLU* u = curl_url();
  if (u == nullptr) return std::string();
  std::string origin;
  if (curl_url_set(u, CURLUPART_URL, url.c_str(), 0) == CURLUE_OK) {
    char* scheme = nullptr;
    char* host = nullptr;
    char* port = nullptr;
    curl_url_get(u, CURLUPART_SCHEME, &scheme, 0);
    curl_url_get(u, CURLUPART_HOST, &host, 0);
    curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT);
    if (scheme != nullptr && host != nullptr && port != nullptr) {
      origin = absl::StrCat(absl::AsciiStrToLower(scheme), "://", absl::AsciiStrToLower(host), ":",
                            port);
    }
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
  }
  curl_url_cleanup(u);
  return origin;
}

absl::Status GlobalInit() {
  static std::once_flag once;
  static CURLcode init_code = CURLE_OK;
  std::call_once(once, [] { init_code = curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (init_code != CURLE_OK) {
    return absl::InternalError(
        absl::StrCat("curl_global_init failed: ", curl_easy_strerror(init_code)));
  }
  return absl::OkStatus();
}

std::string TransferDetail(CURL* c) {
  std::string out;
  const auto part = [&out]() -> std::string& {
    if (!out.empty()) out.append(", ");
    return out;
  };
  char* ip = nullptr;
  long port = 0;
  curl_easy_getinfo(c, CURLINFO_PRIMARY_IP, &ip);
  curl_easy_getinfo(c, CURLINFO_PRIMARY_PORT, &port);
  if (ip != nullptr && ip[0] != '\0') {
    absl::StrAppend(&part(), ip, " port ", port);
  } else {
    char* url = nullptr;
    curl_easy_getinfo(c, CURLINFO_EFFECTIVE_URL, &url);
    const std::string origin = url != nullptr ? Origin(url) : std::string();
    if (!origin.empty()) absl::StrAppend(&part(), "to ", origin);
  }
  long os_errno = 0;
  curl_easy_getinfo(c, CURLINFO_OS_ERRNO, &os_errno);
  if (os_errno != 0) {
    char buf[128];
    // The GNU strerror_r: returns the text, in `buf` or a static string.
    const char* text = strerror_r(static_cast<int>(os_errno), buf, sizeof buf);
    absl::StrAppend(&part(), text, " (errno ", os_errno, ")");
  }
  long verify = 0;
  curl_easy_getinfo(c, CURLINFO_SSL_VERIFYRESULT, &verify);
  if (verify != 0) absl::StrAppend(&part(), "TLS verification result ", verify);
  long proxy_error = 0;
  curl_easy_getinfo(c, CURLINFO_PROXY_ERROR, &proxy_error);
  if (proxy_error != 0) absl::StrAppend(&part(), "proxy error ", proxy_error);
  curl_off_t total_us = 0;
  curl_easy_getinfo(c, CURLINFO_TOTAL_TIME_T, &total_us);
  absl::StrAppend(&part(), "after ", total_us / 1000, " ms");
  curl_off_t received = 0;
  curl_easy_getinfo(c, CURLINFO_SIZE_DOWNLOAD_T, &received);
  if (received > 0) absl::StrAppend(&out, " with ", received, " response bytes");
  return out;
}

absl::Status CurlFailure(absl::StatusCode code, CURLcode curl_code, const PooledHandle& h,
                         std::string_view note) {
  std::string msg = absl::StrCat("curl: ", curl_easy_strerror(curl_code));
  const char* const error = ErrorBuffer(h);
  if (error != nullptr && error[0] != '\0') {
    absl::StrAppend(&msg, " (", error, ")");
  } else {
    absl::StrAppend(&msg, " (", TransferDetail(h.curl), ")");
  }
  if (!note.empty()) {
    msg.append("; ");
    msg.append(note.data(), note.size());
  }
  return absl::Status(code, msg);
}

}  // namespace internal
}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The libcurl transport. One easy handle per in-flight attempt, taken from a
// mutex-protected pool and put back afterwards, so the handle's connection
// cache keeps connections alive between calls and no handle is ever used by
// two threads at once. See docs/curl-transport.md for the policies.

#include "saferetry/curl_transport.h"

#include <curl/curl.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "curl_errors.h"
#include "saferetry/cancellation.h"
#include "saferetry/request.h"

namespace saferetry {
namespace internal {
namespace {

constexpr char kDefaultUserAgent[] = "saferetry/0.1.0";

// libcurl 7.88 sends a POSTFIELDS body of less than 64 KiB together with the
// headers; above that it streams the body, and the read callback path costs
// nothing extra.
constexpr std::size_t kInPlaceBodyLimit = 64 * 1024;

// curl_global_init is not thread-safe and must run once per process; the
// transport never calls curl_global_cleanup (other code in the process may
// use libcurl too, and handles may outlive any one transport).
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

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

char LowerAscii(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (LowerAscii(a[i]) != LowerAscii(b[i])) return false;
  }
  return true;
}

bool StartsWithIgnoreCase(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && EqualsIgnoreCase(s.substr(0, prefix.size()), prefix);
}

// Strips optional whitespace (SP, HTAB) and stray CR/LF at both ends.
std::string_view TrimOws(std::string_view s) {
  auto is_ws = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && is_ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
  return s;
}

// 1*DIGIT -> value; false on anything else or overflow.
bool ParseUint64(std::string_view s, std::uint64_t* out) {
  if (s.empty() || s.size() > 19) return false;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  *out = v;
  return true;
}

bool IsStatusLine(std::string_view line) { return StartsWith(line, "HTTP/"); }

// "HTTP/1.1 200 OK" -> 200; 0 when malformed.
int ParseStatusCode(std::string_view line) {
  auto sp = line.find(' ');
  if (sp == std::string_view::npos) return 0;
  std::string_view rest = line.substr(sp + 1);
  if (rest.size() < 3) return 0;
  int code = 0;
  for (int i = 0; i < 3; ++i) {
    char c = rest[i];
    if (c < '0' || c > '9') return 0;
    code = code * 10 + (c - '0');
  }
  return code;
}

// Everything the callbacks of one curl_easy_perform read or write. Lives in
// the pooled handle, reset before each perform.
struct Exchange {
  // Request side.
  const std::string* body = nullptr;
  std::size_t body_offset = 0;
  bool unsafe = false;  // Not safe to repeat: libcurl must not resend it.
  const CancellationToken* cancellation = nullptr;
  std::size_t max_body = 0;

  // Evidence.
  int prereq_calls = 0;         // Requests curl started on a connection.
  bool resend_blocked = false;  // The pre-request guard refused a resend.
  bool cancelled = false;       // The xferinfo callback aborted.
  bool any_response_byte = false;
  bool final_headers_done = false;  // Blank line after a non-1xx status.

  // Response side.
  int status_code = 0;
  Headers headers;
  std::string response_body;
  bool truncated = false;
  std::uint64_t expected_length = 0;  // Content-Length, 0 = unknown.

  void Reset(const std::string* request_body, bool is_unsafe,
             const CancellationToken* token, std::size_t cap) {
    body = request_body;
    body_offset = 0;
    unsafe = is_unsafe;
    cancellation = token;
    max_body = cap;
    prereq_calls = 0;
    resend_blocked = false;
    cancelled = false;
    any_response_byte = false;
    final_headers_done = false;
    status_code = 0;
    headers.clear();
    response_body.clear();
    truncated = false;
    expected_length = 0;
  }
};

// Header callback: one physical header line per call, CRLF included.
extern "C" std::size_t OnHeader(char* data, std::size_t size, std::size_t n, void* userp) {
  auto* ex = static_cast<Exchange*>(userp);
  const std::size_t len = size * n;
  ex->any_response_byte = true;
  std::string_view line(data, len);
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.remove_suffix(1);
  if (IsStatusLine(line)) {
    // A new response starts (after a 1xx): only the final one's headers count.
    ex->status_code = ParseStatusCode(line);
    ex->headers.clear();
    ex->expected_length = 0;
    ex->final_headers_done = false;
    return len;
  }
  if (line.empty()) {
    if (ex->status_code >= 200) ex->final_headers_done = true;
    return len;
  }
  if (line.front() == ' ' || line.front() == '\t') {
    // obs-fold (RFC 9112 §5.2): a continuation of the previous value.
    std::string_view more = TrimOws(line);
    if (!ex->headers.empty() && !more.empty()) {
      std::string& value = ex->headers.back().second;
      if (!value.empty()) value.push_back(' ');
      value.append(more.data(), more.size());
    }
    return len;
  }
  auto colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0) return len;  // Not a header; skip.
  std::string_view name = line.substr(0, colon);
  std::string_view value = TrimOws(line.substr(colon + 1));
  if (!ex->final_headers_done && EqualsIgnoreCase(name, "Content-Length")) {
    std::uint64_t n_bytes = 0;
    if (ParseUint64(value, &n_bytes)) ex->expected_length = n_bytes;
  }
  ex->headers.emplace_back(std::string(name), std::string(value));
  return len;
}

// Write callback: keeps at most max_body bytes, then stops the transfer (a
// short count makes curl fail with CURLE_WRITE_ERROR, which Send() turns back
// into a success flagged `body_truncated`).
extern "C" std::size_t OnBody(char* data, std::size_t size, std::size_t n, void* userp) {
  auto* ex = static_cast<Exchange*>(userp);
  const std::size_t len = size * n;
  ex->any_response_byte = true;
  if (ex->response_body.empty() && ex->expected_length > 0) {
    ex->response_body.reserve(static_cast<std::size_t>(
        std::min<std::uint64_t>(ex->expected_length, ex->max_body)));
  }
  const std::size_t room = ex->max_body - ex->response_body.size();
  if (len <= room) {
    ex->response_body.append(data, len);
    return len;
  }
  ex->response_body.append(data, room);
  ex->truncated = true;
  return room;  // != len: abort.
}

// Read callback for bodies of unsafe requests. Paired with OnSeek, which
// cannot seek: when libcurl wants to resend the body on a new connection it
// must rewind first, and that fails with CURLE_SEND_FAIL_REWIND.
extern "C" std::size_t OnRead(char* buffer, std::size_t size, std::size_t n, void* userp) {
  auto* ex = static_cast<Exchange*>(userp);
  const std::size_t left = ex->body->size() - ex->body_offset;
  const std::size_t k = std::min(left, size * n);
  if (k > 0) std::memcpy(buffer, ex->body->data() + ex->body_offset, k);
  ex->body_offset += k;
  return k;
}

extern "C" int OnSeek(void* /*userp*/, curl_off_t /*offset*/, int /*origin*/) {
  return CURL_SEEKFUNC_CANTSEEK;
}

extern "C" int OnXferInfo(void* userp, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* ex = static_cast<Exchange*>(userp);
  if (ex->cancellation != nullptr && ex->cancellation->IsCancelled()) {
    ex->cancelled = true;
    return 1;
  }
  return 0;
}

// Runs right before curl writes a request on a (new or reused) connection.
// A second call within one perform is libcurl's own resend after a reused
// connection died; for an unsafe request it is refused. This also covers
// unsafe requests without a body, which the rewind trick cannot.
extern "C" int OnPrereq(void* userp, char*, char*, int, int) {
  auto* ex = static_cast<Exchange*>(userp);
  ++ex->prereq_calls;
  if (ex->prereq_calls > 1 && ex->unsafe) {
    ex->resend_blocked = true;
    return CURL_PREREQFUNC_ABORT;
  }
  return CURL_PREREQFUNC_OK;
}

// An easy handle and the buffers reused with it.
struct PooledHandle {
  CURL* curl = nullptr;
  Exchange exchange;
  // The request header list, built in place: libcurl reads but does not
  // copy CURLOPT_HTTPHEADER, so nodes point into header_text, and neither
  // buffer shrinks between calls (no allocation in steady state).
  std::string header_text;
  std::vector<curl_slist> header_nodes;
  std::vector<std::size_t> header_offsets;
  char error[CURL_ERROR_SIZE] = {0};

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

bool IsCredentialHeader(std::string_view name) {
  return EqualsIgnoreCase(name, "Authorization") || EqualsIgnoreCase(name, "Cookie") ||
         EqualsIgnoreCase(name, "Proxy-Authorization");
}

bool HasHeader(const Headers& headers, const Headers* extra, std::string_view name) {
  for (const auto& h : headers) {
    if (EqualsIgnoreCase(h.first, name)) return true;
  }
  if (extra != nullptr) {
    for (const auto& h : *extra) {
      if (EqualsIgnoreCase(h.first, name)) return true;
    }
  }
  return false;
}

// scheme://host:port of an absolute URL, for the cross-host check.
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
      origin = absl::StrCat(absl::AsciiStrToLower(scheme), "://", absl::AsciiStrToLower(host),
                            ":", port);
    }
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
  }
  curl_url_cleanup(u);
  return origin;
}

Duration Micros(curl_off_t us) { return std::chrono::microseconds(us); }

// Ceil to whole milliseconds, at least 1: curl's resolution.
long TimeoutMillis(Duration timeout) {
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(timeout).count();
  if (ms < 1) ms = 1;
  if (ms > static_cast<decltype(ms)>(INT32_MAX)) ms = INT32_MAX;
  return static_cast<long>(ms);
}

class CurlTransport final : public Transport {
 public:
  explicit CurlTransport(CurlTransportOptions options) : options_(std::move(options)) {
    if (options_.user_agent.empty()) options_.user_agent = kDefaultUserAgent;
    idle_.reserve(options_.max_idle_handles);
  }

  TransportResult Send(const Request& request, const AttemptOptions& options) override;

 private:
  std::unique_ptr<PooledHandle> Acquire();
  void Release(std::unique_ptr<PooledHandle> handle);
  void BuildHeaderList(PooledHandle& h, const Request& request, const AttemptOptions& options,
                       const Hop& hop, bool uses_body);
  CURLcode Perform(PooledHandle& h, const Request& request, const AttemptOptions& options,
                   const Hop& hop, Duration timeout);

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
  auto h = std::make_unique<PooledHandle>();
  h->curl = curl_easy_init();
  if (h->curl == nullptr) return nullptr;
  CURL* c = h->curl;
  void* ex = &h->exchange;
  // Options that never change for this handle.
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, h->error);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, &OnHeader);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, ex);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &OnBody);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, ex);
  curl_easy_setopt(c, CURLOPT_READFUNCTION, &OnRead);
  curl_easy_setopt(c, CURLOPT_READDATA, ex);
  curl_easy_setopt(c, CURLOPT_SEEKFUNCTION, &OnSeek);
  curl_easy_setopt(c, CURLOPT_SEEKDATA, ex);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, &OnXferInfo);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, ex);
  curl_easy_setopt(c, CURLOPT_PREREQFUNCTION, &OnPrereq);
  curl_easy_setopt(c, CURLOPT_PREREQDATA, ex);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  // Redirects are followed by Send() itself, hop by hop, so each hop gets
  // the resend guard and credentials are dropped on a host change.
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(c, CURLOPT_UNRESTRICTED_AUTH, 0L);
  curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(c, CURLOPT_USERAGENT, options_.user_agent.c_str());
  curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, options_.verify_tls ? 1L : 0L);
  curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, options_.verify_tls ? 2L : 0L);
  if (!options_.ca_file.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, options_.ca_file.c_str());
  return h;
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

void CurlTransport::BuildHeaderList(PooledHandle& h, const Request& request,
                                    const AttemptOptions& options, const Hop& hop,
                                    bool uses_body) {
  const Headers* extra = options.extra_headers;
  // libcurl would add "Expect: 100-continue" to large uploads (a round trip
  // of latency, up to 1 s against servers that ignore it) and a form
  // Content-Type to every POST: an empty "Name:" line removes its default.
  const bool drop_expect = !HasHeader(request.headers, extra, "Expect");
  const bool drop_content_type = uses_body && !HasHeader(request.headers, extra, "Content-Type");

  std::size_t total = 0;
  auto measure = [&](const Headers& hs) {
    for (const auto& hd : hs) total += hd.first.size() + hd.second.size() + 3;
  };
  measure(request.headers);
  if (extra != nullptr) measure(*extra);
  total += sizeof("Expect:") + sizeof("Content-Type:");

  h.header_text.clear();
  if (h.header_text.capacity() < total) h.header_text.reserve(total);
  h.header_offsets.clear();
  auto add_line = [&](std::string_view name, std::string_view value, bool remove_default) {
    h.header_offsets.push_back(h.header_text.size());
    h.header_text.append(name.data(), name.size());
    if (remove_default) {
      h.header_text.push_back(':');
    } else if (value.empty()) {
      h.header_text.push_back(';');  // curl's syntax for "send with an empty value".
    } else {
      h.header_text.append(": ");
      h.header_text.append(value.data(), value.size());
    }
    h.header_text.push_back('\0');
  };
  auto add_all = [&](const Headers& hs) {
    for (const auto& hd : hs) {
      if (hop.strip_credentials && IsCredentialHeader(hd.first)) continue;
      add_line(hd.first, hd.second, false);
    }
  };
  add_all(request.headers);
  if (extra != nullptr) add_all(*extra);
  if (drop_expect) add_line("Expect", {}, true);
  if (drop_content_type) add_line("Content-Type", {}, true);

  const std::size_t count = h.header_offsets.size();
  h.header_nodes.resize(count);
  for (std::size_t i = 0; i < count; ++i) {
    h.header_nodes[i].data = &h.header_text[h.header_offsets[i]];
    h.header_nodes[i].next = (i + 1 < count) ? &h.header_nodes[i + 1] : nullptr;
  }
  curl_easy_setopt(h.curl, CURLOPT_HTTPHEADER, count > 0 ? h.header_nodes.data() : nullptr);
}

CURLcode CurlTransport::Perform(PooledHandle& h, const Request& request,
                                const AttemptOptions& options, const Hop& hop,
                                Duration timeout) {
  CURL* c = h.curl;
  h.exchange.Reset(hop.body, hop.unsafe, options.cancellation, options_.max_response_body);
  h.error[0] = '\0';

  curl_easy_setopt(c, CURLOPT_URL, hop.url->c_str());
  const bool is_head = hop.method == "HEAD";
  const bool is_post = hop.method == "POST";
  const bool uses_body = !is_head && (is_post || !hop.body->empty());
  // Every per-request option is set on every call, so nothing leaks from the
  // previous user of the pooled handle.
  if (is_head) {
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  } else if (!uses_body) {
    curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
  } else {
    curl_easy_setopt(c, CURLOPT_NOBODY, 0L);
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    // Always a Content-Length, never a chunked upload.
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(hop.body->size()));
    // Bodies are handed to curl in place, which lets it write a small body
    // in the same send() as the headers. An unsafe request's resend is
    // refused by OnPrereq. Large unsafe bodies (which curl streams after the
    // headers anyway) also go through OnRead with no working seek, a second
    // barrier: a resend must rewind first, and cannot.
    const bool stream = hop.unsafe && hop.body->size() > kInPlaceBodyLimit;
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, stream ? nullptr : hop.body->data());
  }
  // Any other method rides on the GET or POST machinery (libcurl copies the
  // string).
  const bool custom = !is_head && hop.method != (uses_body ? "POST" : "GET");
  if (custom) {
    const std::string method(hop.method);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method.c_str());
  } else {
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, nullptr);
  }

  BuildHeaderList(h, request, options, hop, uses_body);

  if (timeout == Duration::max()) {
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 0L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 0L);
  } else {
    const long ms = TimeoutMillis(timeout);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, ms);
  }
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, options.cancellation != nullptr ? 0L : 1L);

  return curl_easy_perform(c);
}

PhaseTimings ReadTimings(CURL* c, Duration offset) {
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
  t.first_byte = at(first);
  t.total = offset + Micros(total);
  return t;
}

absl::Status CurlFailure(absl::StatusCode code, CURLcode curl_code, const char* detail,
                         std::string_view note) {
  std::string msg = absl::StrCat("curl: ", curl_easy_strerror(curl_code));
  if (detail != nullptr && detail[0] != '\0') absl::StrAppend(&msg, " (", detail, ")");
  if (!note.empty()) {
    msg.append("; ");
    msg.append(note.data(), note.size());
  }
  return absl::Status(code, msg);
}

Response TakeResponse(Exchange& ex) {
  Response r;
  r.status_code = ex.status_code;
  r.headers = std::move(ex.headers);
  r.body = std::move(ex.response_body);
  r.body_truncated = ex.truncated;
  ex.headers = Headers();
  ex.response_body = std::string();
  return r;
}

TransportResult CurlTransport::Send(const Request& request, const AttemptOptions& options) {
  TransportResult result;
  result.delivery = Delivery::kNotSent;
  // Bad input is refused before any byte is sent.
  if (absl::Status s = ValidateRequest(request); !s.ok()) {
    result.status = std::move(s);
    return result;
  }
  if (options.extra_headers != nullptr) {
    for (std::size_t i = 0; i < options.extra_headers->size(); ++i) {
      // The indexed field name is built only for the error message, keeping
      // the success path free of allocations.
      if (!ValidateHeader((*options.extra_headers)[i], "extra_headers").ok()) {
        result.status = ValidateHeader((*options.extra_headers)[i],
                                       absl::StrCat("extra_headers[", i, "]"));
        return result;
      }
    }
  }
  if (options.timeout < Duration::zero()) {
    result.status = absl::InvalidArgumentError(absl::StrFormat(
        "timeout: must be >= 0, got %dns", static_cast<long long>(options.timeout.count())));
    return result;
  }
  if (options.timeout == Duration::zero()) {
    result.status = absl::DeadlineExceededError("timeout: no time left for an attempt; nothing sent");
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
    code = Perform(h, request, options, hop, timeout);
    result.timings = ReadTimings(h.curl, elapsed);
    elapsed = result.timings.total;

    if (!options_.follow_redirects || code != CURLE_OK || redirects >= options_.max_redirects) break;
    const int sc = ex.status_code;
    if (sc != 301 && sc != 302 && sc != 303 && sc != 307 && sc != 308) break;
    char* location = nullptr;
    curl_easy_getinfo(h.curl, CURLINFO_REDIRECT_URL, &location);
    if (location == nullptr) break;
    std::string next(location);
    if (!StartsWithIgnoreCase(next, "http://") &&
        !StartsWithIgnoreCase(next, "https://")) {
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
        result.status = CurlFailure(info.status_code, code, h.error,
                                    "the response broke after its headers");
      }
    } else if (ex.cancelled) {
      result.delivery = started ? Delivery::kMaybeDelivered : Delivery::kNotSent;
      result.status = absl::CancelledError(
          started ? "cancelled during the attempt; the request may have been delivered"
                  : "cancelled before the request was sent");
    } else if (ex.resend_blocked || code == CURLE_SEND_FAIL_REWIND) {
      result.delivery = Delivery::kMaybeDelivered;
      result.status = CurlFailure(
          absl::StatusCode::kUnavailable, code, h.error,
          "the connection closed before any response; libcurl's resend of an unsafe request "
          "was refused, the first copy may have been delivered");
    } else {
      const bool maybe = started || ex.any_response_byte ||
                         info.delivery == CurlDeliveryRule::kAfterSend;
      result.delivery = maybe ? Delivery::kMaybeDelivered : Delivery::kNotSent;
      if (!maybe && earlier_hop_answered) result.delivery = Delivery::kMaybeDelivered;
      result.status = CurlFailure(info.status_code, code, h.error,
                                  maybe ? "the request may have been delivered"
                                        : "nothing was sent");
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
  for (char c : options.user_agent) {
    if (c == '\r' || c == '\n' || c == '\0') {
      return absl::InvalidArgumentError("user_agent: must not contain CR, LF or NUL");
    }
  }
  if (options.ca_file.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError("ca_file: must not contain NUL");
  }
  if (absl::Status s = internal::GlobalInit(); !s.ok()) return s;
  return std::shared_ptr<Transport>(std::make_shared<internal::CurlTransport>(std::move(options)));
}

}  // namespace saferetry

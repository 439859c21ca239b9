// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The production transport, on libcurl. No curl type appears here: link
// `saferetry::curl` and call the factory.
//
// @code
//   auto transport = saferetry::MakeCurlTransport({});
//   if (!transport.ok()) return transport.status();
//   options.transport = *transport;
// @endcode

#ifndef SAFERETRY_CURL_TRANSPORT_H_
#define SAFERETRY_CURL_TRANSPORT_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "saferetry/transport.h"

namespace saferetry {

/// The HTTP version the transport asks for, named as curl names it
/// (docs/curl-transport.md, "HTTP/2").
enum class HttpVersion {
  /// HTTP/1.1 only, over TLS and cleartext (curl's `--http1.1`,
  /// CURL_HTTP_VERSION_1_1).
  kHttp1_1,
  /// HTTP/2 over TLS when the server picks it in ALPN, else HTTP/1.1; always
  /// HTTP/1.1 on cleartext `http://`, with no `Upgrade: h2c` (curl's
  /// CURL_HTTP_VERSION_2TLS, libcurl's own default).
  kHttp2OverTls,
  /// HTTP/2 from the first byte, without negotiation, on `http://` (h2c) and
  /// `https://` alike; only for servers known to speak it (curl's
  /// `--http2-prior-knowledge`, CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE).
  kHttp2PriorKnowledge,
};

/// Options of the libcurl transport. Defaults documented per field.
struct CurlTransportOptions {
  /// Largest response body kept, in bytes (default 8 MiB). A longer body is
  /// cut and `Response::body_truncated` set; a 2xx stays a success.
  std::size_t max_response_body = 8 * 1024 * 1024;
  /// Verify the server's TLS certificate and host name (default on).
  bool verify_tls = true;
  /// A CA bundle file (PEM) to trust instead of the system's; empty = the
  /// system default (CURLOPT_CAINFO). No NUL.
  std::string ca_file;
  /// A directory of CA certificates named by their hash (`openssl rehash`),
  /// searched beside `ca_file` (CURLOPT_CAPATH); empty = none. No NUL.
  std::string ca_dir;
  /// Follow redirects (default off). When on, Authorization and Cookie are
  /// never sent to another host.
  bool follow_redirects = false;
  /// Redirect limit when following, >= 0. Default 5.
  int max_redirects = 5;
  /// User-Agent header. Default "saferetry/<version>".
  std::string user_agent;
  /// Idle easy handles kept for reuse (keep-alive), >= 1. Default 16.
  std::size_t max_idle_handles = 16;
  /// The proxy every request goes through, as libcurl spells it
  /// ("http://proxy.internal:3128", "socks5h://127.0.0.1:1080"). Empty (the
  /// default): no proxy. The environment's `http_proxy`, `https_proxy`,
  /// `all_proxy` and `no_proxy` are never read by the library — libcurl
  /// would otherwise read them on every transfer, behind the service's back:
  /// a service that wants them reads them once and passes them here (the
  /// CLI does, as curl does). No CR, LF or NUL.
  std::string proxy;
  /// Hosts that bypass `proxy`: libcurl's CURLOPT_NOPROXY list
  /// ("localhost,.internal,10.0.0.0/8"; "*" for all). Empty: none.
  std::string no_proxy;
  /// The HTTP version asked for. Default `kHttp2OverTls`, libcurl's own
  /// default: HTTP/2 wherever TLS lets both sides agree on it, HTTP/1.1
  /// with every server that does not, and never a guess on cleartext. The
  /// delivery rules are the same for every version (an HTTP/2 stream the
  /// server refused is still "maybe delivered": docs/curl-transport.md).
  /// HTTP/2 needs a libcurl built with it (Debian's is): otherwise
  /// `kHttp2PriorKnowledge` is refused and `kHttp2OverTls` speaks HTTP/1.1.
  HttpVersion http_version = HttpVersion::kHttp2OverTls;
  /// Keep libcurl's own sentence for a failure ("Failed to connect to
  /// api.example port 443 after 3 ms: Connection refused") in the failed
  /// attempt's status. Off (the default): the status says what libcurl
  /// reports after the transfer instead ("curl: Couldn't connect to server
  /// (to https://api.example:443, Connection refused (errno 111), after 3
  /// ms)"): the peer's address once connected, else the URL's origin, the
  /// operating system's error, a TLS verification result, the time spent.
  /// That names the same cause for connection, name and time-out failures,
  /// but not a TLS library's own text. On, every pooled handle keeps
  /// libcurl's 256-byte error buffer for its life, a fifth of what a call
  /// in flight costs (docs/adr/0027-failure-detail-without-the-error-buffer.md).
  /// Classification never reads either text.
  bool libcurl_error_text = false;
  /// Limits per phase for every attempt: connect (name lookup, TCP and
  /// TLS), first byte after the request was written, and libcurl's
  /// low-speed limit (docs/curl-transport.md, "Limits per phase"). The
  /// defaults under a policy's own (`RetryPolicyOptions::phase_limits`,
  /// carried by `AttemptOptions::phase_limits`), field by field. Each runs
  /// inside the attempt's timeout. Default: none, the attempt's timeout
  /// alone bounds every phase.
  PhaseLimits phase_limits;
};

/// Creates a thread-safe libcurl transport. InvalidArgument naming the field
/// for bad options; Internal when libcurl cannot be initialised.
absl::StatusOr<std::shared_ptr<Transport>> MakeCurlTransport(CurlTransportOptions options = {});

}  // namespace saferetry

#endif  // SAFERETRY_CURL_TRANSPORT_H_

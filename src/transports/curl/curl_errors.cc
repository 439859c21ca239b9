// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "curl_errors.h"

namespace saferetry {
namespace internal {
namespace {

using Code = absl::StatusCode;
using Rule = CurlDeliveryRule;

constexpr CurlCodeInfo Row(Code code, bool retryable, Rule rule) {
  return CurlCodeInfo{code, retryable, rule};
}

}  // namespace

// One case per CURLcode of libcurl 7.88, no default: a new libcurl that adds
// codes makes -Wswitch point here. The transport only speaks HTTP(S), so the
// FTP/TFTP/LDAP/SSH/RTSP codes cannot occur; they are still listed so the
// table is complete, and they map to kInternal, not retryable.
//
// The delivery column is what the code alone says. The transport combines it
// with its measurements: response headers seen wins over everything
// (kResponseReceived), and a request that curl started (pre-request callback
// ran, request bytes counted) is at least "maybe delivered" whatever the code.
CurlCodeInfo DescribeCurlCode(CURLcode code) {
  switch (code) {
    case CURLE_OK:
      return Row(Code::kOk, false, Rule::kFromEvidence);

    // Local refusals before any connection: bad URL or option, feature not
    // built in. Retrying the same request cannot help.
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
      return Row(Code::kInvalidArgument, false, Rule::kBeforeSend);
    case CURLE_FAILED_INIT:
    case CURLE_NOT_BUILT_IN:
    case CURLE_FUNCTION_NOT_FOUND:
    case CURLE_BAD_FUNCTION_ARGUMENT:
    case CURLE_UNKNOWN_OPTION:
    case CURLE_SETOPT_OPTION_SYNTAX:
    case CURLE_RECURSIVE_API_CALL:
      return Row(Code::kInternal, false, Rule::kBeforeSend);
    case CURLE_INTERFACE_FAILED:  // CURLOPT_INTERFACE could not be bound.
      return Row(Code::kFailedPrecondition, false, Rule::kBeforeSend);

    // Name resolution and TCP connect: the server never saw a byte. The
    // canonical "safe to retry, even for POST" failures.
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
      return Row(Code::kUnavailable, true, Rule::kBeforeSend);
    // A proxy handshake failed (`CurlTransportOptions::proxy`): the request
    // was not forwarded.
    case CURLE_PROXY:
      return Row(Code::kUnavailable, true, Rule::kBeforeSend);
    // HTTP/3 connect: not built into Debian's libcurl; listed for
    // completeness, a connect failure.
    case CURLE_QUIC_CONNECT_ERROR:
      return Row(Code::kUnavailable, true, Rule::kBeforeSend);

    // TLS handshake. Requests are sent only after the handshake completes,
    // so these are "not sent". A transient handshake failure may pass on
    // retry; certificate and configuration problems will not.
    case CURLE_SSL_CONNECT_ERROR:
      return Row(Code::kUnavailable, true, Rule::kBeforeSend);
    // A certificate was refused: the server's chain, issuer, pin or OCSP
    // status failed verification, or our own CA bundle, CRL or client
    // certificate is unusable or was demanded. Every attempt would meet the
    // same certificates, so retrying cannot help. They all report
    // kUnauthenticated (the peers could not establish each other's
    // identity), and only they do: the default classifier maps a not-sent
    // kUnauthenticated attempt to kPermanent.
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_CERTPROBLEM:  // Our client certificate.
    case CURLE_SSL_CLIENTCERT:   // The server demanded one.
      return Row(Code::kUnauthenticated, false, Rule::kBeforeSend);
    // Local TLS configuration that is not about a certificate.
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_SSL_ENGINE_INITFAILED:
    case CURLE_SSL_CIPHER:
      return Row(Code::kFailedPrecondition, false, Rule::kBeforeSend);
    // STARTTLS for FTP/IMAP/SMTP: unreachable with http/https only.
    case CURLE_USE_SSL_FAILED:
      return Row(Code::kUnavailable, false, Rule::kBeforeSend);

    // Timeout: during DNS/connect/TLS nothing was sent; after the request
    // went out the server may be working on it. Decided by the evidence.
    case CURLE_OPERATION_TIMEDOUT:
      return Row(Code::kDeadlineExceeded, true, Rule::kFromEvidence);

    // The connection broke. Before the request: not sent (curl reports a
    // dead reused connection this way). After: the server may have read
    // and acted on every byte ("accepted, then closed without reading"
    // looks the same from here).
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:   // Closed with no response byte.
    case CURLE_PARTIAL_FILE:  // Body shorter than Content-Length.
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:  // Stream reset by the peer.
    case CURLE_HTTP3:
    case CURLE_CHUNK_FAILED:
    case CURLE_UNRECOVERABLE_POLL:
    case CURLE_AGAIN:  // Only from curl_easy_send/recv.
    case CURLE_SSL_SHUTDOWN_FAILED:
      return Row(Code::kUnavailable, true, Rule::kFromEvidence);
    // A syntactically broken answer: a response byte arrived, so the
    // request was read; retrying an unsafe request is a decision for the
    // classifier (delivery "maybe"), not the transport.
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_BAD_CONTENT_ENCODING:
      return Row(Code::kUnavailable, true, Rule::kFromEvidence);

    // libcurl wanted to resend the request on a new connection (the reused
    // one died before any response byte) and could not rewind the body: the
    // transport refuses such hidden resends for unsafe requests. The first
    // copy was written, so it may have been delivered.
    case CURLE_SEND_FAIL_REWIND:
      return Row(Code::kUnavailable, true, Rule::kAfterSend);

    // Our callbacks stopped the transfer: cancellation (xferinfo), the
    // hidden-resend guard (pre-request), the body cap (write). The
    // transport knows which one fired and overrides the code.
    case CURLE_ABORTED_BY_CALLBACK:
      return Row(Code::kCancelled, false, Rule::kFromEvidence);
    case CURLE_WRITE_ERROR:
      return Row(Code::kResourceExhausted, false, Rule::kFromEvidence);
    case CURLE_READ_ERROR:  // Our read callback never fails.
    case CURLE_UPLOAD_FAILED:
      return Row(Code::kInternal, false, Rule::kFromEvidence);
    case CURLE_OUT_OF_MEMORY:
      return Row(Code::kResourceExhausted, false, Rule::kFromEvidence);
    case CURLE_FILESIZE_EXCEEDED:  // CURLOPT_MAXFILESIZE (unset here).
      return Row(Code::kResourceExhausted, false, Rule::kFromEvidence);

    // Options the transport never sets (FAILONERROR, FOLLOWLOCATION,
    // RANGE, RESUME_FROM, HTTPAUTH, CONNECT_ONLY): cannot occur; a 4xx/5xx
    // or a 3xx is data.
    case CURLE_HTTP_RETURNED_ERROR:
    case CURLE_TOO_MANY_REDIRECTS:
    case CURLE_RANGE_ERROR:
    case CURLE_BAD_DOWNLOAD_RESUME:
    case CURLE_HTTP_POST_ERROR:
    case CURLE_NO_CONNECTION_AVAILABLE:
      return Row(Code::kInternal, false, Rule::kFromEvidence);
    case CURLE_AUTH_ERROR:
    case CURLE_LOGIN_DENIED:
    case CURLE_REMOTE_ACCESS_DENIED:
      return Row(Code::kPermissionDenied, false, Rule::kFromEvidence);

    // Other protocols: unreachable with http/https only (CURLOPT_PROTOCOLS).
    case CURLE_FTP_ACCEPT_FAILED:
    case CURLE_FTP_WEIRD_PASS_REPLY:
    case CURLE_FTP_ACCEPT_TIMEOUT:
    case CURLE_FTP_WEIRD_PASV_REPLY:
    case CURLE_FTP_WEIRD_227_FORMAT:
    case CURLE_FTP_CANT_GET_HOST:
    case CURLE_FTP_COULDNT_SET_TYPE:
    case CURLE_FTP_COULDNT_RETR_FILE:
    case CURLE_QUOTE_ERROR:
    case CURLE_FTP_PORT_FAILED:
    case CURLE_FTP_COULDNT_USE_REST:
    case CURLE_FILE_COULDNT_READ_FILE:
    case CURLE_LDAP_CANNOT_BIND:
    case CURLE_LDAP_SEARCH_FAILED:
    case CURLE_TFTP_NOTFOUND:
    case CURLE_TFTP_PERM:
    case CURLE_REMOTE_DISK_FULL:
    case CURLE_TFTP_ILLEGAL:
    case CURLE_TFTP_UNKNOWNID:
    case CURLE_REMOTE_FILE_EXISTS:
    case CURLE_TFTP_NOSUCHUSER:
    case CURLE_REMOTE_FILE_NOT_FOUND:
    case CURLE_SSH:
    case CURLE_FTP_PRET_FAILED:
    case CURLE_RTSP_CSEQ_ERROR:
    case CURLE_RTSP_SESSION_ERROR:
    case CURLE_FTP_BAD_FILE_LIST:
      return Row(Code::kInternal, false, Rule::kFromEvidence);

    // Retired numbers, never returned by 7.88.
    case CURLE_OBSOLETE20:
    case CURLE_OBSOLETE24:
    case CURLE_OBSOLETE29:
    case CURLE_OBSOLETE32:
    case CURLE_OBSOLETE40:
    case CURLE_OBSOLETE44:
    case CURLE_OBSOLETE46:
    case CURLE_OBSOLETE50:
    case CURLE_OBSOLETE51:
    case CURLE_OBSOLETE57:
    case CURLE_OBSOLETE62:
    case CURLE_OBSOLETE75:
    case CURLE_OBSOLETE76:
    case CURL_LAST:
      return Row(Code::kInternal, false, Rule::kFromEvidence);
  }
  // A code from a newer libcurl: trust only the evidence.
  return Row(Code::kInternal, false, Rule::kFromEvidence);
}

}  // namespace internal
}  // namespace saferetry

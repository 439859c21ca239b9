// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// nghttpd, nghttp2's HTTP/2 server (Debian's nghttp2-server), on 127.0.0.1
// for the HTTP/2 tests: cleartext h2 (prior knowledge only), or h2 over TLS
// with a certificate signed at start by a throwaway CA (openssl). It serves
// one file, /hello.txt, and echoes the body of a POST or PUT.
//
// @code
//   NghttpdServer server(NghttpdServer::Mode::kCleartext);
//   if (!server.ok()) GTEST_SKIP() << server.error();
//   ... GET server.Url("/hello.txt") with HTTP/2 prior knowledge ...
// @endcode

#ifndef SAFERETRY_TESTS_INTEGRATION_NGHTTPD_SERVER_H_
#define SAFERETRY_TESTS_INTEGRATION_NGHTTPD_SERVER_H_

#include <sys/types.h>

#include <string>
#include <string_view>

namespace saferetry {
namespace testkit {

class NghttpdServer {
 public:
  enum class Mode {
    kCleartext,  ///< `nghttpd --no-tls`: h2c, prior knowledge only.
    kTls,        ///< h2 over TLS (ALPN), with a certificate for IP 127.0.0.1.
  };

  /// The nghttpd executable (/usr/sbin/nghttpd, else on PATH); empty when
  /// it is not installed.
  static std::string Executable();

  /// Starts the server on a free loopback port (a port taken by someone
  /// else between choosing and binding is retried with another).
  explicit NghttpdServer(Mode mode);
  ~NghttpdServer();
  NghttpdServer(const NghttpdServer&) = delete;
  NghttpdServer& operator=(const NghttpdServer&) = delete;

  /// Running and accepting connections; else `error()` says why not.
  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  /// "http[s]://127.0.0.1:<port><path>".
  std::string Url(std::string_view path) const;
  /// The throwaway CA's certificate (PEM), for kTls.
  std::string CaFile() const { return dir_ + "/ca.pem"; }
  /// The directory served: a file put there is served at "/<name>".
  std::string DocumentRoot() const { return dir_ + "/htdocs"; }
  /// The body of /hello.txt.
  static std::string HelloBody() { return "hello over h2\n"; }

 private:
  bool Start(const std::string& exe, int port);

  Mode mode_;
  std::string dir_;
  bool ok_ = false;
  std::string error_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace testkit
}  // namespace saferetry

#endif  // SAFERETRY_TESTS_INTEGRATION_NGHTTPD_SERVER_H_

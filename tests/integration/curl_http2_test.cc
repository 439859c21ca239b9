// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// CurlTransportOptions::http_version on both libcurl transports, against
// nghttpd on loopback: h2c by prior knowledge, h2 over TLS by ALPN with a
// throwaway CA. Skipped, saying why, only when nghttpd is not installed.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nghttpd_server.h"
#include "saferetry/async_transport.h"
#include "saferetry/curl_async_transport.h"
#include "saferetry/curl_transport.h"

namespace saferetry {
namespace {

using std::chrono::seconds;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::StartsWith;
using testkit::NghttpdServer;

#define SKIP_WITHOUT_NGHTTPD()                                                  \
  if (NghttpdServer::Executable().empty()) {                                    \
    GTEST_SKIP() << "nghttpd is not installed (Debian package nghttp2-server)"; \
  }

AttemptOptions Bounded() {
  AttemptOptions o;
  o.timeout = seconds(5);
  return o;
}

Request Get(std::string url) {
  Request r;
  r.url = std::move(url);
  return r;
}

TransportResult SendBlocking(CurlTransportOptions options, const Request& request) {
  auto transport = MakeCurlTransport(std::move(options));
  EXPECT_TRUE(transport.ok()) << transport.status();
  if (!transport.ok()) return TransportResult{};
  return (*transport)->Send(request, Bounded());
}

// One attempt on the multi transport, on an epoll loop on its own thread.
TransportResult SendMulti(CurlTransportOptions options, const Request& request) {
  auto loop = MakeEpollEventLoop();
  EXPECT_TRUE(loop.ok()) << loop.status();
  auto transport = MakeCurlMultiTransport(*loop, std::move(options));
  EXPECT_TRUE(transport.ok()) << transport.status();
  if (!loop.ok() || !transport.ok()) return TransportResult{};
  std::shared_ptr<RunnableEventLoop> l = *loop;
  std::shared_ptr<AsyncTransport> t = *transport;
  std::thread runner([l] { l->Run(); });
  std::promise<TransportResult> done;
  l->Post([&] {
    t->Start(request, Bounded(), [&](TransportResult r) { done.set_value(std::move(r)); });
  });
  auto f = done.get_future();
  TransportResult r;
  if (f.wait_for(seconds(20)) == std::future_status::ready) {
    r = f.get();
  } else {
    ADD_FAILURE() << "no result within 20 s";
  }
  l->Post([&] {
    t.reset();
    l->Stop();
  });
  runner.join();
  return r;
}

// The answer came over HTTP/2: nghttpd's file, header names in lower case
// (HTTP/2 has no other spelling).
void ExpectHelloOverH2(const TransportResult& r) {
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.delivery, Delivery::kResponseReceived);
  ASSERT_TRUE(r.response.has_value());
  EXPECT_EQ(r.response->status_code, 200);
  EXPECT_EQ(r.response->body, NghttpdServer::HelloBody());
  EXPECT_THAT(r.response->headers, Contains(Pair("server", StartsWith("nghttpd"))));
  EXPECT_THAT(r.response->headers,
              Contains(Pair("content-length", std::to_string(NghttpdServer::HelloBody().size()))));
}

TEST(CurlHttp2Test, PriorKnowledgeGetsFromCleartextH2OnBothTransports) {
  SKIP_WITHOUT_NGHTTPD();
  NghttpdServer server(NghttpdServer::Mode::kCleartext);
  ASSERT_TRUE(server.ok()) << server.error();
  CurlTransportOptions o;
  o.http_version = HttpVersion::kHttp2PriorKnowledge;
  {
    SCOPED_TRACE("blocking");
    ExpectHelloOverH2(SendBlocking(o, Get(server.Url("/hello.txt"))));
  }
  {
    SCOPED_TRACE("multi");
    ExpectHelloOverH2(SendMulti(o, Get(server.Url("/hello.txt"))));
  }
}

TEST(CurlHttp2Test, PriorKnowledgePostBodyArrivesByteForByte) {
  SKIP_WITHOUT_NGHTTPD();
  NghttpdServer server(NghttpdServer::Mode::kCleartext);
  ASSERT_TRUE(server.ok()) << server.error();
  CurlTransportOptions o;
  o.http_version = HttpVersion::kHttp2PriorKnowledge;
  Request post;
  post.method = "POST";
  post.url = server.Url("/echo");
  post.body = std::string("a\0b\r\n\xff", 6) + std::string(70000, 'x');  // Streamed, too.
  for (bool multi : {false, true}) {
    SCOPED_TRACE(multi ? "multi" : "blocking");
    TransportResult r = multi ? SendMulti(o, post) : SendBlocking(o, post);
    ASSERT_TRUE(r.status.ok()) << r.status;
    ASSERT_TRUE(r.response.has_value());
    EXPECT_EQ(r.response->status_code, 200);
    EXPECT_EQ(r.response->body, post.body);  // nghttpd --echo-upload.
  }
}

// Without prior knowledge nothing guesses h2c: HTTP/1.1 is sent, and the
// h2-only server's frames are no HTTP/1.1 answer.
TEST(CurlHttp2Test, Http11AndTheDefaultSpeakHttp11ToCleartext) {
  SKIP_WITHOUT_NGHTTPD();
  NghttpdServer server(NghttpdServer::Mode::kCleartext);
  ASSERT_TRUE(server.ok()) << server.error();
  for (HttpVersion v : {HttpVersion::kHttp1_1, HttpVersion::kHttp2OverTls}) {
    SCOPED_TRACE(static_cast<int>(v));
    CurlTransportOptions o;
    o.http_version = v;
    TransportResult r = SendBlocking(o, Get(server.Url("/hello.txt")));
    EXPECT_FALSE(r.status.ok());
    // By default the status names libcurl's code and the peer; libcurl's
    // own sentence names HTTP/0.9 (`libcurl_error_text`).
    EXPECT_THAT(r.status.message(), HasSubstr("Unsupported protocol (127.0.0.1 port "));
    EXPECT_EQ(r.delivery, Delivery::kMaybeDelivered);
    o.libcurl_error_text = true;
    r = SendBlocking(o, Get(server.Url("/hello.txt")));
    EXPECT_THAT(r.status.message(), HasSubstr("HTTP/0.9"));
    EXPECT_EQ(r.delivery, Delivery::kMaybeDelivered);
  }
}

TEST(CurlHttp2Test, Http2OverTlsIsNegotiatedByAlpnOnBothTransports) {
  SKIP_WITHOUT_NGHTTPD();
  NghttpdServer server(NghttpdServer::Mode::kTls);
  ASSERT_TRUE(server.ok()) << server.error();
  CurlTransportOptions o;
  o.ca_file = server.CaFile();
  EXPECT_EQ(o.http_version, HttpVersion::kHttp2OverTls);  // The default.
  {
    SCOPED_TRACE("blocking");
    TransportResult r = SendBlocking(o, Get(server.Url("/hello.txt")));
    ExpectHelloOverH2(r);
    EXPECT_GT(r.timings.tls, r.timings.connect);
  }
  {
    SCOPED_TRACE("multi");
    ExpectHelloOverH2(SendMulti(o, Get(server.Url("/hello.txt"))));
  }
  o.http_version = HttpVersion::kHttp2PriorKnowledge;
  {
    SCOPED_TRACE("prior knowledge over TLS");
    ExpectHelloOverH2(SendBlocking(o, Get(server.Url("/hello.txt"))));
  }
}

TEST(CurlHttp2Test, Http11OverTlsOffersOnlyHttp11) {
  SKIP_WITHOUT_NGHTTPD();
  NghttpdServer server(NghttpdServer::Mode::kTls);
  ASSERT_TRUE(server.ok()) << server.error();
  CurlTransportOptions o;
  o.ca_file = server.CaFile();
  o.http_version = HttpVersion::kHttp1_1;
  // nghttpd speaks nothing but h2: offered only http/1.1 in ALPN, it
  // completes the handshake, then closes on the HTTP/1.1 request without a
  // byte of answer, which is "maybe delivered" like any such close.
  TransportResult r = SendBlocking(o, Get(server.Url("/hello.txt")));
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable) << r.status;
  EXPECT_THAT(r.status.message(), HasSubstr("Server returned nothing"));
  EXPECT_EQ(r.delivery, Delivery::kMaybeDelivered);
}

// A raw HTTP/2 server (cleartext, prior knowledge) that reads each request
// to its END_STREAM, counts it, and then ends the stream as scripted per
// connection: nghttpd cannot refuse a stream or go away on cue.
class RawH2Server {
 public:
  enum class Ending {
    kAnswer200,        ///< HEADERS ":status 200", END_STREAM.
    kRefuseStream,     ///< RST_STREAM REFUSED_STREAM: "not processed" (RFC 9113 §8.7).
    kGoawayAfterRead,  ///< GOAWAY last-stream-id 1, NO_ERROR, then close: "may have been
                       ///< processed".
  };

  /// Connection i ends its stream with endings[i] (the last one after).
  explicit RawH2Server(std::vector<Ending> endings) : endings_(std::move(endings)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    ok_ = ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
          ::listen(listen_fd_, 16) == 0 &&
          ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }
  ~RawH2Server() {
    stopping_ = true;
    acceptor_.join();
    ::close(listen_fd_);
  }

  bool ok() const { return ok_; }
  std::string Url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  /// Requests read to their END_STREAM, on every connection.
  int requests() const { return requests_.load(); }
  int connections() const { return connections_.load(); }

 private:
  static std::string Frame(std::uint8_t type, std::uint8_t flags, std::uint32_t stream,
                           const std::string& payload) {
    std::string f;
    const std::uint32_t n = static_cast<std::uint32_t>(payload.size());
    f.push_back(static_cast<char>((n >> 16) & 0xff));
    f.push_back(static_cast<char>((n >> 8) & 0xff));
    f.push_back(static_cast<char>(n & 0xff));
    f.push_back(static_cast<char>(type));
    f.push_back(static_cast<char>(flags));
    for (int shift : {24, 16, 8, 0}) f.push_back(static_cast<char>((stream >> shift) & 0xff));
    return f + payload;
  }
  static std::string U32(std::uint32_t v) {
    std::string out;
    for (int shift : {24, 16, 8, 0}) out.push_back(static_cast<char>((v >> shift) & 0xff));
    return out;
  }

  void AcceptLoop() {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!stopping_ && std::chrono::steady_clock::now() < end) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      const int index = connections_++;
      Serve(fd, endings_[std::min<std::size_t>(index, endings_.size() - 1)]);
      ::close(fd);
    }
  }

  // Reads exactly n bytes within 5 s; false on close, error or timeout.
  bool ReadN(int fd, std::string* out, std::size_t n) {
    out->clear();
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    char buf[4096];
    while (out->size() < n && std::chrono::steady_clock::now() < end) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const ssize_t got = ::recv(fd, buf, std::min(sizeof(buf), n - out->size()), 0);
      if (got <= 0) return false;
      out->append(buf, static_cast<std::size_t>(got));
    }
    return out->size() == n;
  }

  void Send(int fd, const std::string& bytes) {
    ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  }

  // One connection: the preface and SETTINGS both ways, then frames until
  // a stream ends; then the scripted ending.
  void Serve(int fd, Ending ending) {
    std::string buf;
    if (!ReadN(fd, &buf, 24)) return;  // "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    Send(fd, Frame(4, 0, 0, ""));      // Our SETTINGS: all defaults.
    std::uint32_t stream = 0;
    for (int frames = 0; frames < 64; ++frames) {
      std::string head;
      if (!ReadN(fd, &head, 9)) return;
      const std::size_t length = (static_cast<std::uint8_t>(head[0]) << 16) |
                                 (static_cast<std::uint8_t>(head[1]) << 8) |
                                 static_cast<std::uint8_t>(head[2]);
      const std::uint8_t type = static_cast<std::uint8_t>(head[3]);
      const std::uint8_t flags = static_cast<std::uint8_t>(head[4]);
      const std::uint32_t id = ((static_cast<std::uint8_t>(head[5]) & 0x7f) << 24) |
                               (static_cast<std::uint8_t>(head[6]) << 16) |
                               (static_cast<std::uint8_t>(head[7]) << 8) |
                               static_cast<std::uint8_t>(head[8]);
      std::string payload;
      if (length > 0 && !ReadN(fd, &payload, length)) return;
      if (type == 4 && (flags & 0x1) == 0) Send(fd, Frame(4, 0x1, 0, ""));  // SETTINGS ACK.
      // HEADERS (1) or DATA (0) with END_STREAM: the request is read whole.
      if ((type == 0 || type == 1) && (flags & 0x1) != 0) {
        stream = id;
        break;
      }
    }
    if (stream == 0) return;
    ++requests_;
    switch (ending) {
      case Ending::kAnswer200:
        // HPACK: indexed field 8 of the static table is ":status 200".
        Send(fd, Frame(1, 0x4 | 0x1, stream, std::string(1, static_cast<char>(0x88))));
        break;
      case Ending::kRefuseStream:
        Send(fd, Frame(3, 0, stream, U32(7)));  // RST_STREAM, REFUSED_STREAM.
        break;
      case Ending::kGoawayAfterRead:
        Send(fd, Frame(7, 0, 0, U32(stream) + U32(0)));  // GOAWAY: processed up to ours.
        return;                                          // And close, unanswered.
    }
    // Let the client read it and hang up first (bounded).
    std::string rest;
    ReadN(fd, &rest, 1 << 20);
  }

  std::vector<Ending> endings_;
  int listen_fd_ = -1;
  int port_ = 0;
  bool ok_ = false;
  std::atomic<bool> stopping_{false};
  std::atomic<int> requests_{0};
  std::atomic<int> connections_{0};
  std::thread acceptor_;
};

CurlTransportOptions PriorKnowledge() {
  CurlTransportOptions o;
  o.http_version = HttpVersion::kHttp2PriorKnowledge;
  return o;
}

Request PostTo(const std::string& url) {
  Request r;
  r.method = "POST";
  r.url = url;
  r.body = "pay=1";
  return r;
}

TEST(CurlHttp2Test, RawServerAnswersOverH2c) {
  RawH2Server server({RawH2Server::Ending::kAnswer200});
  ASSERT_TRUE(server.ok());
  TransportResult r = SendBlocking(PriorKnowledge(), PostTo(server.Url("/o")));
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.response->status_code, 200);
  EXPECT_EQ(server.requests(), 1);
}

// A GOAWAY whose last stream id covers ours says the request may have been
// processed: maybe delivered, once.
TEST(CurlHttp2Test, GoawayAfterTheStreamWasProcessedIsMaybeDelivered) {
  for (bool multi : {false, true}) {
    SCOPED_TRACE(multi ? "multi" : "blocking");
    RawH2Server server({RawH2Server::Ending::kGoawayAfterRead});
    ASSERT_TRUE(server.ok());
    const Request post = PostTo(server.Url("/o"));
    TransportResult r =
        multi ? SendMulti(PriorKnowledge(), post) : SendBlocking(PriorKnowledge(), post);
    EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable) << r.status;
    EXPECT_EQ(r.delivery, Delivery::kMaybeDelivered) << r.status;
    EXPECT_FALSE(r.response.has_value());
    EXPECT_EQ(server.requests(), 1);
    EXPECT_EQ(server.connections(), 1);
  }
}

// A refused stream was not processed (RFC 9113), but libcurl 7.88 says so
// through no documented code: the transport keeps the conservative rule.
// libcurl's own resend of the refused POST on a new connection is stopped by
// the resend guard, and the attempt is maybe delivered; a GET is resent
// once, as on a dead HTTP/1.1 connection, and answered.
TEST(CurlHttp2Test, RefusedStreamStaysMaybeDeliveredForAPostAndIsResentForAGet) {
  {
    RawH2Server server({RawH2Server::Ending::kRefuseStream, RawH2Server::Ending::kAnswer200});
    ASSERT_TRUE(server.ok());
    TransportResult r = SendBlocking(PriorKnowledge(), PostTo(server.Url("/o")));
    EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable) << r.status;
    EXPECT_THAT(r.status.message(), HasSubstr("resend of an unsafe request was refused"));
    EXPECT_EQ(r.delivery, Delivery::kMaybeDelivered);
    EXPECT_EQ(server.requests(), 1);
  }
  {
    RawH2Server server({RawH2Server::Ending::kRefuseStream, RawH2Server::Ending::kAnswer200});
    ASSERT_TRUE(server.ok());
    TransportResult r = SendBlocking(PriorKnowledge(), Get(server.Url("/o")));
    ASSERT_TRUE(r.status.ok()) << r.status;
    EXPECT_EQ(r.response->status_code, 200);
    EXPECT_EQ(server.requests(), 2);
    EXPECT_EQ(server.connections(), 2);
  }
}

TEST(CurlHttp2Test, HttpVersionIsValidatedNamingTheField) {
  CurlTransportOptions o;
  o.http_version = static_cast<HttpVersion>(7);
  EXPECT_EQ(MakeCurlTransport(o).status().message(), "http_version: unknown value 7");
  auto loop = MakeEpollEventLoop();
  ASSERT_TRUE(loop.ok());
  EXPECT_EQ(MakeCurlMultiTransport(*loop, o).status().message(), "http_version: unknown value 7");
}

}  // namespace
}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// CurlTransportOptions::http_version on both libcurl transports, against
// nghttpd on loopback: h2c by prior knowledge, h2 over TLS by ALPN with a
// throwaway CA. Skipped, saying why, only when nghttpd is not installed.

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>

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
using testing::NghttpdServer;

#define SKIP_WITHOUT_NGHTTPD()                                                     \
  if (NghttpdServer::Executable().empty()) {                                       \
    GTEST_SKIP() << "nghttpd is not installed (Debian package nghttp2-server)";    \
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
  EXPECT_THAT(r.status.message(), HasSubstr("Empty reply from server"));
  EXPECT_EQ(r.delivery, Delivery::kMaybeDelivered);
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

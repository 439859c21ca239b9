// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Message framing of the fault proxy, over a socket pair.

#include "orders_service/http_wire.h"

#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "gtest/gtest.h"

namespace saferetry {
namespace example {
namespace {

// A connected pair: the test writes `input` to one end (then closes it when
// asked) and reads from the other.
class WirePair {
 public:
  explicit WirePair(const std::string& input, bool close_writer = true) {
    socketpair(AF_UNIX, SOCK_STREAM, 0, fds_);
    WriteAll(fds_[1], input);
    if (close_writer) {
      close(fds_[1]);
      fds_[1] = -1;
    }
  }
  ~WirePair() {
    for (int fd : fds_) {
      if (fd >= 0) close(fd);
    }
  }
  int reader() const { return fds_[0]; }

 private:
  int fds_[2] = {-1, -1};
};

TEST(HttpWireTest, ReadsAContentLengthRequestAndLeavesTheNextOneBuffered) {
  WirePair pair(
      "POST /orders HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nIdempotency-Key: k\r\n\r\nhello"
      "GET /healthz HTTP/1.1\r\n\r\n");
  WireReader in(pair.reader());
  HttpHead head;
  ASSERT_EQ(ReadHead(in, &head), ReadResult::kOk);
  EXPECT_EQ(head.Method(), "POST");
  EXPECT_EQ(head.Target(), "/orders");
  EXPECT_EQ(head.Header("idempotency-key"), "k");
  BodyFraming framing = RequestFraming(head);
  EXPECT_EQ(framing.kind, BodyFraming::kLength);
  EXPECT_EQ(framing.length, 5u);
  std::string body;
  ASSERT_EQ(ReadBody(in, framing, 1024, &body), ReadResult::kOk);
  EXPECT_EQ(body, "hello");

  HttpHead next;
  ASSERT_EQ(ReadHead(in, &next), ReadResult::kOk);
  EXPECT_EQ(next.Method(), "GET");
  EXPECT_EQ(RequestFraming(next).kind, BodyFraming::kNone);
  HttpHead none;
  EXPECT_EQ(ReadHead(in, &none), ReadResult::kClosed);
}

TEST(HttpWireTest, KeepsAChunkedBodyEncodedWithItsTrailers) {
  const std::string chunked = "4;ext=1\r\nWiki\r\n5\r\npedia\r\n0\r\nX-Trailer: t\r\n\r\n";
  WirePair pair("POST /orders HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n" + chunked);
  WireReader in(pair.reader());
  HttpHead head;
  ASSERT_EQ(ReadHead(in, &head), ReadResult::kOk);
  ASSERT_EQ(RequestFraming(head).kind, BodyFraming::kChunked);
  std::string body;
  ASSERT_EQ(ReadBody(in, RequestFraming(head), 1024, &body), ReadResult::kOk);
  EXPECT_EQ(body, chunked);
}

TEST(HttpWireTest, ResponseFramingFollowsStatusAndMethod) {
  WirePair pair("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end");
  WireReader in(pair.reader());
  HttpHead head;
  ASSERT_EQ(ReadHead(in, &head), ReadResult::kOk);
  EXPECT_EQ(head.StatusCode(), 200);
  EXPECT_EQ(ResponseFraming(head, "GET").kind, BodyFraming::kUntilClose);
  EXPECT_EQ(ResponseFraming(head, "HEAD").kind, BodyFraming::kNone);
  std::string body;
  ASSERT_EQ(ReadBody(in, ResponseFraming(head, "GET"), 1024, &body), ReadResult::kOk);
  EXPECT_EQ(body, "until the end");

  HttpHead no_content;
  no_content.start_line = "HTTP/1.1 204 No Content";
  no_content.headers.emplace_back("Content-Length", "10");
  EXPECT_EQ(ResponseFraming(no_content, "POST").kind, BodyFraming::kNone);
  HttpHead bad;
  bad.start_line = "HTTP/1.1 abc";
  EXPECT_EQ(bad.StatusCode(), 0);
}

TEST(HttpWireTest, TruncatedMessagesAreErrors) {
  {
    WirePair pair("POST /orders HTTP/1.1\r\nContent-Le");
    WireReader in(pair.reader());
    HttpHead head;
    EXPECT_EQ(ReadHead(in, &head), ReadResult::kError);
  }
  {
    WirePair pair("POST /orders HTTP/1.1\r\nContent-Length: 10\r\n\r\nshort");
    WireReader in(pair.reader());
    HttpHead head;
    ASSERT_EQ(ReadHead(in, &head), ReadResult::kOk);
    std::string body;
    EXPECT_EQ(ReadBody(in, RequestFraming(head), 1024, &body), ReadResult::kError);
  }
  {
    WirePair pair("POST /orders HTTP/1.1\r\nContent-Length: 10\r\n\r\n0123456789");
    WireReader in(pair.reader());
    HttpHead head;
    ASSERT_EQ(ReadHead(in, &head), ReadResult::kOk);
    std::string body;
    EXPECT_EQ(ReadBody(in, RequestFraming(head), 9, &body), ReadResult::kError);  // over limit
  }
}

TEST(HttpWireTest, HeadHelpers) {
  HttpHead head;
  head.start_line = "GET / HTTP/1.1";
  head.headers = {{"Connection", "keep-alive, Close"}, {"X-A", "1"}, {"x-a", "2"}};
  EXPECT_TRUE(head.HasToken("connection", "close"));
  EXPECT_FALSE(head.HasToken("connection", "upgrade"));
  EXPECT_EQ(head.Header("X-A"), "1");
  head.Remove("X-A");
  EXPECT_FALSE(head.Has("x-a"));
  EXPECT_EQ(head.Serialize(), "GET / HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n");
}

}  // namespace
}  // namespace example
}  // namespace saferetry

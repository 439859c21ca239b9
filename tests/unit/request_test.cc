// Copyright 2026 The saferetry Authors. Licensed under the Apache License,
// Version 2.0.

#include "saferetry/request.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "common/request_scan.h"

namespace saferetry {
namespace {

using ::testing::HasSubstr;
using ::testing::Optional;
using ::testing::StartsWith;

Request ValidRequest() {
  Request r;
  r.method = "POST";
  r.url = "http://127.0.0.1:8080/orders";
  r.headers = {{"Content-Type", "application/json"}};
  r.body = R"({"sku":"sku-42","quantity":1})";
  return r;
}

std::string Message(absl::Status const& s) { return std::string(s.message()); }

// ---- Methods and idempotency ---------------------------------------------

TEST(IsSafeMethod, SafeMethods) {
  for (auto const* m : {"GET", "HEAD", "OPTIONS", "TRACE"}) EXPECT_TRUE(IsSafeMethod(m)) << m;
}

TEST(IsSafeMethod, UnsafeAndCaseSensitive) {
  for (auto const* m :
       {"POST", "PUT", "DELETE", "PATCH", "CONNECT", "get", "Get", "head", "", "GET ", "PURGE"}) {
    EXPECT_FALSE(IsSafeMethod(m)) << m;
  }
}

TEST(IsIdempotent, FromMethod) {
  Request r;
  ASSERT_EQ(r.idempotency, Idempotency::kFromMethod);
  for (auto const* m : {"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"}) {
    r.method = m;
    EXPECT_TRUE(IsIdempotent(r)) << m;
  }
  for (auto const* m : {"POST", "PATCH", "CONNECT", "put", "delete", "LOCK", ""}) {
    r.method = m;
    EXPECT_FALSE(IsIdempotent(r)) << m;
  }
}

TEST(IsIdempotent, DeclaredOverridesMethod) {
  Request r;
  r.method = "POST";
  r.idempotency = Idempotency::kIdempotent;
  EXPECT_TRUE(IsIdempotent(r));
  r.method = "PUT";
  r.idempotency = Idempotency::kNonIdempotent;
  EXPECT_FALSE(IsIdempotent(r));
  r.method = "GET";
  EXPECT_FALSE(IsIdempotent(r));
}

// ---- FindHeader -----------------------------------------------------------

TEST(FindHeader, CaseInsensitiveFirstMatch) {
  Headers const h = {{"Content-Type", "a"}, {"retry-after", "5"}, {"RETRY-AFTER", "9"}};
  EXPECT_THAT(FindHeader(h, "Retry-After"), Optional(std::string_view("5")));
  EXPECT_THAT(FindHeader(h, "content-type"), Optional(std::string_view("a")));
  EXPECT_EQ(FindHeader(h, "Date"), std::nullopt);
  EXPECT_EQ(FindHeader(h, ""), std::nullopt);
  EXPECT_EQ(FindHeader({}, "Date"), std::nullopt);
  EXPECT_EQ(FindHeader(h, "Retry-Afte"), std::nullopt);
}

TEST(FindHeader, EmptyValueIsFound) {
  Headers const h = {{"X-Flag", ""}};
  EXPECT_THAT(FindHeader(h, "x-flag"), Optional(std::string_view("")));
}

// ---- ValidateHeader -------------------------------------------------------

TEST(ValidateHeader, Valid) {
  EXPECT_TRUE(ValidateHeader({"Content-Type", "application/json"}, "h").ok());
  EXPECT_TRUE(ValidateHeader({"X-A!#$%&'*+-.^_`|~9", ""}, "h").ok());
  EXPECT_TRUE(ValidateHeader({"X", "tab\tand spaces and \x80 bytes"}, "h").ok());
}

TEST(ValidateHeader, EmptyName) {
  auto const s = ValidateHeader({"", "v"}, "headers[2]");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(s), "headers[2].name: must be a non-empty token");
}

TEST(ValidateHeader, NameNotAToken) {
  for (auto const* bad : {"Content Type", "X:Y", "X(", "X\"", "X/Y", "X\r", "X\x7f", "X\xc3\xa9",
                          "X@", "X,Y", "X;", "X=", "X{", "X\\"}) {
    auto const s = ValidateHeader({bad, "v"}, "headers[0]");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(Message(s), StartsWith("headers[0].name: ")) << bad;
    EXPECT_THAT(Message(s), HasSubstr("is not a token")) << bad;
  }
  EXPECT_THAT(Message(ValidateHeader({"Content Type", "v"}, "h")), HasSubstr("position 7"));
}

TEST(ValidateHeader, ValueWithCrOrLf) {
  for (auto const* bad : {"a\rb", "a\nb", "a\r\nX-Injected: 1", "\n"}) {
    auto const s = ValidateHeader({"X", bad}, "headers[1]");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Message(s), "headers[1].value: contains CR or LF");
  }
}

TEST(ValidateHeader, ValueWithNul) {
  auto const s = ValidateHeader({"X", std::string("a\0b", 3)}, "headers[1]");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(s), "headers[1].value: contains NUL");
}

// ---- ValidateRequest ------------------------------------------------------

TEST(ValidateRequest, ValidRequests) {
  EXPECT_TRUE(ValidateRequest(ValidRequest()).ok());
  for (auto const* url : {
           "http://127.0.0.1:8080/orders",
           "https://example.com",
           "https://example.com/",
           "HTTP://EXAMPLE.COM/x",
           "http://localhost:1/",
           "http://localhost:65535/",
           "http://[::1]:8080/orders",
           "http://[::1]/",
           "http://[2001:db8::1]",
           "http://[::ffff:127.0.0.1]:80/",
           "http://[fe80::1%25eth0]:80/",
           "http://user:pass@example.com:8443/p?q=1#f",
           "http://example.com?q=1",
           "http://example.com#frag",
       }) {
    Request r = ValidRequest();
    r.url = url;
    EXPECT_TRUE(ValidateRequest(r).ok()) << url << ": " << ValidateRequest(r);
  }
  Request r = ValidRequest();
  r.method = "PURGE";  // an extension method is a token
  EXPECT_TRUE(ValidateRequest(r).ok());
}

TEST(ValidateRequest, BadMethod) {
  for (auto const* bad : {"", "GE T", "GET\r\n", "PO/ST", "\"GET\""}) {
    Request r = ValidRequest();
    r.method = bad;
    auto const s = ValidateRequest(r);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(Message(s), StartsWith("request.method: must be a non-empty token")) << bad;
  }
}

struct UrlCase {
  char const* url;
  char const* message;
};

TEST(ValidateRequest, BadUrl) {
  for (auto const& c : std::initializer_list<UrlCase>{
           {"", "request.url: is empty"},
           {"ftp://example.com/file", "request.url: unsupported scheme \"ftp\""},
           {"file:///etc/passwd", "request.url: unsupported scheme \"file\""},
           {"example.com/orders", "request.url: must be an absolute http:// or https:// URL"},
           {"/orders", "request.url: must be an absolute http:// or https:// URL"},
           {"://example.com", "request.url: must be an absolute http:// or https:// URL"},
           {"http:example.com", "request.url: must be an absolute http:// or https:// URL"},
           {"http://", "request.url: missing host"},
           {"http:///orders", "request.url: missing host"},
           {"http://:8080/orders", "request.url: missing host"},
           {"http://user@/orders", "request.url: missing host"},
           {"http://?q", "request.url: missing host"},
           {"http://[]:80/", "request.url: missing host"},
           {"http://example.com:0/", "request.url: port \"0\" is out of range 1-65535"},
           {"http://example.com:65536/", "request.url: port \"65536\" is out of range 1-65535"},
           {"http://example.com:99999999999999999999999/", "is out of range 1-65535"},
           {"http://example.com:/", "request.url: missing port after ':'"},
           {"http://example.com:80a/", "request.url: port is not a number"},
           {"http://example.com:-1/", "request.url: port is not a number"},
           {"http://::1/", "request.url: invalid authority"},
           {"http://[::1/", "request.url: unterminated IPv6 literal"},
           {"http://[::1]x/", "request.url: unexpected characters after IPv6 literal"},
           {"http://[example.com]/", "request.url: invalid IPv6 literal"},
           {"http://[::1%25]/", "request.url: invalid IPv6 literal"},
           {"http://[::1]:0/", "request.url: port \"0\" is out of range 1-65535"},
           {"http://exa]mple.com/", "request.url: invalid character in host"},
           {"http://example.com/a b", "request.url: contains whitespace or a control character"},
           {" http://example.com/", "request.url: contains whitespace or a control character"},
           {"http://example.com/\r\n", "request.url: contains whitespace or a control character"},
           {"http://exa\tmple.com/", "request.url: contains whitespace or a control character"},
           {"http://example.com/\x7f", "request.url: contains whitespace or a control character"},
       }) {
    Request r = ValidRequest();
    r.url = c.url;
    auto const s = ValidateRequest(r);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.url;
    EXPECT_THAT(Message(s), StartsWith("request.url: ")) << c.url;
    EXPECT_THAT(Message(s), HasSubstr(c.message)) << c.url;
  }
}

TEST(ValidateRequest, UrlErrorShowsPosition) {
  Request r = ValidRequest();
  r.url = "http://a b/";
  EXPECT_EQ(Message(ValidateRequest(r)),
            "request.url: contains whitespace or a control character at "
            "position 8 in "
            "\"http://a b/\"");
}

TEST(ValidateRequest, BadHeaderNamesItsIndex) {
  Request r = ValidRequest();
  r.headers = {{"Accept", "*/*"}, {"X-Ok", "1"}, {"Bad Name", "v"}};
  auto s = ValidateRequest(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), StartsWith("request.headers[2].name: "));

  r.headers = {{"X-Injected", "a\r\nb"}};
  s = ValidateRequest(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(s), "request.headers[0].value: contains CR or LF");

  r.headers = {{"A", "1"}, {"", "v"}};
  EXPECT_EQ(Message(ValidateRequest(r)), "request.headers[1].name: must be a non-empty token");

  r.headers = {{"A", "1"}, {"B", "2"}, {"C", "3"}, {"D", std::string("\0", 1)}};
  EXPECT_EQ(Message(ValidateRequest(r)), "request.headers[3].value: contains NUL");
}

TEST(ValidateRequest, FirstErrorWins) {
  Request r;
  r.method = "";
  r.url = "ftp://x";
  r.headers = {{"", ""}};
  EXPECT_THAT(Message(ValidateRequest(r)), StartsWith("request.method: "));
  r.method = "GET";
  EXPECT_THAT(Message(ValidateRequest(r)), StartsWith("request.url: "));
  r.url = "http://x";
  EXPECT_THAT(Message(ValidateRequest(r)), StartsWith("request.headers[0].name: "));
}

TEST(ValidateRequest, LongUrlIsCutInMessage) {
  Request r = ValidRequest();
  r.url = "gopher://" + std::string(200, 'a');
  EXPECT_EQ(Message(ValidateRequest(r)),
            "request.url: unsupported scheme \"gopher\" (only http and https "
            "are supported)");
  r.url = "x" + std::string(200, 'a');
  auto const m = Message(ValidateRequest(r));
  EXPECT_THAT(m, HasSubstr("\"..."));
  EXPECT_LT(m.size(), 150u);
}

// The URL's scan for spaces and control characters reads eight bytes at a
// time: every position of every such byte is found, at its position, and
// bytes of 0x80 and above (UTF-8 in a path) never are.
TEST(ValidateRequestTest, EverySpaceOrControlByteIsFoundAtItsPosition) {
  const std::string base = "http://h.example:8080/path/abcdefghijklmnopqrstuvwxyz0123456789";
  for (const char bad : {'\x00', '\x01', '\x09', '\x0a', '\x1f', '\x20', '\x7f'}) {
    for (std::size_t at = 0; at < base.size(); ++at) {
      Request r;
      r.url = base;
      r.url[at] = bad;
      const absl::Status s = ValidateRequest(r);
      EXPECT_THAT(std::string(s.message()),
                  HasSubstr(absl::StrCat("control character at position ", at, " in")))
          << "byte " << static_cast<int>(bad) << " at " << at;
    }
  }
  Request utf8;
  utf8.url = "http://h.example:8080/caf\xc3\xa9/\x80\xff\xa0\xc2\x85/over-eight-bytes";
  EXPECT_TRUE(ValidateRequest(utf8).ok());
  for (std::size_t n = 0; n < 24; ++n) {
    Request padded;
    padded.url = "http://h/" + std::string(n, '\xe9');
    EXPECT_TRUE(ValidateRequest(padded).ok()) << n;
  }
}

// A header value is checked eight bytes at a time: CR, LF and NUL are found
// at every position of values of every length around the word size, and no
// other byte (its neighbours, the same bytes with the high bit set) is taken
// for one.
TEST(ValidateRequestTest, CrLfAndNulAreFoundAtEveryPositionOfAHeaderValue) {
  for (std::size_t n = 1; n <= 25; ++n) {
    for (std::size_t at = 0; at < n; ++at) {
      for (const char bad : {'\r', '\n', '\0'}) {
        Request r;
        r.url = "http://h/";
        r.headers = {{"X-Value", std::string(n, 'v')}};
        r.headers[0].second[at] = bad;
        const absl::Status s = ValidateRequest(r);
        EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument)
            << "byte " << static_cast<int>(bad) << " at " << at << " of " << n;
        EXPECT_THAT(std::string(s.message()),
                    HasSubstr(bad == '\0' ? ".value: contains NUL" : ".value: contains CR or LF"));
        EXPECT_FALSE(ValidateHeader("X-Value", r.headers[0].second, "f").ok());
      }
    }
    for (const char near : {'\x01', '\x0b', '\x0c', '\x0e', '\x8d', '\x8a', '\x80', '\xff'}) {
      Request r;
      r.url = "http://h/";
      r.headers = {{"X-Value", std::string(n, near)}};
      EXPECT_TRUE(ValidateRequest(r).ok()) << "byte " << static_cast<int>(near) << " x " << n;
    }
  }
}

TEST(RequestScanTest, FindsTheKeyAndTheTraceHeadersByPosition) {
  const Headers headers = {
      {"Content-Type", "application/json"},
      {"TRACEPARENT", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
      {"idempotency-key", "k-1"},
      {"tracestate", "a=1"},
      {"Idempotency-Key", "k-2"},
      {"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203332-01"},
      {"TraceState", "b=2"}};
  const internal::RequestScan scan = internal::ScanRequestHeaders(headers, "Idempotency-Key");
  EXPECT_EQ(scan.key_header, 3u);   // the first, in any case
  EXPECT_EQ(scan.traceparent, 6u);  // the last
  EXPECT_EQ(scan.traceparents, 2u);
  EXPECT_EQ(scan.tracestates, 2u);

  const internal::RequestScan none =
      internal::ScanRequestHeaders({{"Content-Type", "text/plain"}}, "Idempotency-Key");
  EXPECT_EQ(none.key_header, 0u);
  EXPECT_EQ(none.traceparent, 0u);
  EXPECT_EQ(none.traceparents + none.tracestates, 0u);
  // A policy that names another header finds that one only.
  EXPECT_EQ(internal::ScanRequestHeaders(headers, "X-Key").key_header, 0u);
}

}  // namespace
}  // namespace saferetry

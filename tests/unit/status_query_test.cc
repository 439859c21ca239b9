// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/status_query.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace saferetry {
namespace {

using ::testing::StartsWith;

TransportResult WithStatus(int status) {
  TransportResult r;
  r.delivery = Delivery::kResponseReceived;
  r.response = Response{status, {}, "", false};
  return r;
}

TEST(StatusQueryTest, PercentEncoding) {
  EXPECT_EQ(PercentEncode("AZaz09-._~"), "AZaz09-._~");
  EXPECT_EQ(PercentEncode("a/b c+d?e#f%"), "a%2Fb%20c%2Bd%3Fe%23f%25");
  EXPECT_EQ(PercentEncode("\xc3\xa9"), "%C3%A9");
  EXPECT_EQ(PercentEncode(""), "");
}

TEST(StatusQueryTest, TemplateExpansion) {
  EXPECT_EQ(ExpandKeyTemplate("http://h/orders/by-key/{key}", "k/1"),
            "http://h/orders/by-key/k%2F1");
  EXPECT_EQ(ExpandKeyTemplate("http://h/{key}?k={key}", "x y"), "http://h/x%20y?k=x%20y");
  EXPECT_EQ(ExpandKeyTemplate("http://h/{ke}", "x"), "http://h/{ke}");
}

TEST(StatusQueryTest, Validation) {
  StatusQuery q;
  q.url_template = "http://h/orders/by-key/";
  EXPECT_THAT(std::string(ValidateStatusQuery(q).message()),
              StartsWith("status_query.url_template: must contain {key}"));
  q.url_template = "ftp://h/{key}";
  EXPECT_THAT(std::string(ValidateStatusQuery(q).message()),
              StartsWith("status_query.url_template:"));
  q.url_template = "https://h:8443/orders/by-key/{key}";
  EXPECT_TRUE(ValidateStatusQuery(q).ok());
  StatusQuery cb;
  cb.callback = [](std::string_view, Duration) { return StatusQueryReply{}; };
  EXPECT_TRUE(ValidateStatusQuery(cb).ok());
}

TEST(StatusQueryTest, AnswerMapping) {
  EXPECT_EQ(MapStatusAnswer(WithStatus(200)), StatusAnswer::kFound);
  EXPECT_EQ(MapStatusAnswer(WithStatus(201)), StatusAnswer::kFound);
  EXPECT_EQ(MapStatusAnswer(WithStatus(204)), StatusAnswer::kFound);
  EXPECT_EQ(MapStatusAnswer(WithStatus(202)), StatusAnswer::kProcessing);
  EXPECT_EQ(MapStatusAnswer(WithStatus(409)), StatusAnswer::kProcessing);
  EXPECT_EQ(MapStatusAnswer(WithStatus(404)), StatusAnswer::kNotFound);
  for (int s : {400, 410, 429, 500, 503, 301}) {
    EXPECT_EQ(MapStatusAnswer(WithStatus(s)), StatusAnswer::kStillUnknown) << s;
  }
  TransportResult refused;
  refused.status = absl::UnavailableError("refused");
  EXPECT_EQ(MapStatusAnswer(refused), StatusAnswer::kStillUnknown);
}

TEST(StatusQueryTest, QueryRequestDropsBodyHeaders) {
  Request original{"POST",
                   "http://h/orders",
                   {{"Content-Type", "application/json"},
                    {"Authorization", "Bearer t"},
                    {"content-length", "2"},
                    {"Digest", "sha-256=x"},
                    {"X-Tenant-Id", "t1"}},
                   "{}",
                   Idempotency::kFromMethod};
  StatusQuery q;
  q.url_template = "http://h/orders/by-key/{key}";
  Request r = BuildStatusQueryRequest(q, original, "k1");
  EXPECT_EQ(r.method, "GET");
  EXPECT_EQ(r.url, "http://h/orders/by-key/k1");
  EXPECT_EQ(r.body, "");
  EXPECT_EQ(r.headers, (Headers{{"Authorization", "Bearer t"}, {"X-Tenant-Id", "t1"}}));
  EXPECT_TRUE(DescribesBody("Transfer-Encoding"));
  EXPECT_FALSE(DescribesBody("Accept"));
}

}  // namespace
}  // namespace saferetry

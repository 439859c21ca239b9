// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// How a call tells saferetry's transports that it validated what they are
// sending (src/common/validated_send.h, not API): through their explicit
// internal interface, never through the public one, which always checks.

#include "common/validated_send.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include "saferetry/async_transport.h"
#include "saferetry/curl_async_transport.h"
#include "saferetry/curl_transport.h"
#include "saferetry/testing/fake_transport.h"

namespace saferetry {
namespace internal {
namespace {

using ::testing::HasSubstr;

Request Bad() {
  Request r;
  r.method = "POST";
  r.url = "http://h/o";
  r.headers = {{"X-A", "line\r\nInjected: yes"}};
  return r;
}

TEST(ValidatedSendTest, UnmarkedInputIsChecked) {
  const Request bad = Bad();
  EXPECT_THAT(std::string(CheckSend(bad, {}).message()), HasSubstr("request.headers[0]"));
  Request good;
  good.url = "http://h/o";
  const HeaderRef extra[] = {{"X-Ok", "1"}, {"Bad Name", "v"}};
  EXPECT_THAT(std::string(CheckSend(good, extra).message()), HasSubstr("extra_headers[1].name"));
  EXPECT_TRUE(CheckSend(good, HeaderRefs(extra, 1)).ok());
}

// Only saferetry's own transports can send a request the call validated
// without checking it again; any other (the testing kit's, a user's) is
// always sent through `Send` / `Start`, which check.
TEST(ValidatedSendTest, OnlySaferetrysOwnTransportsTakeValidatedRequests) {
  const std::shared_ptr<Transport> curl = MakeCurlTransport({}).value();
  EXPECT_NE(dynamic_cast<PrevalidatedSender*>(curl.get()), nullptr);
  const std::shared_ptr<EventLoop> loop = MakeEpollEventLoop().value();
  const std::shared_ptr<AsyncTransport> multi = MakeCurlMultiTransport(loop).value();
  EXPECT_NE(dynamic_cast<PrevalidatedStarter*>(multi.get()), nullptr);
  testkit::FakeTransport fake;
  EXPECT_EQ(dynamic_cast<PrevalidatedSender*>(static_cast<Transport*>(&fake)), nullptr);
}

// Called directly, saferetry's transports check what they are given: a bad
// request is refused, not sent, naming the field.
TEST(ValidatedSendTest, ADirectSendIsChecked) {
  const std::shared_ptr<Transport> curl = MakeCurlTransport({}).value();
  AttemptOptions o;
  o.timeout = std::chrono::seconds(1);
  const TransportResult r = curl->Send(Bad(), o);
  EXPECT_EQ(r.delivery, Delivery::kNotSent);
  EXPECT_THAT(std::string(r.status.message()), HasSubstr("request.headers[0]"));
}

}  // namespace
}  // namespace internal
}  // namespace saferetry

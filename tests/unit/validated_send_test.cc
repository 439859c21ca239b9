// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The mark by which a call tells saferetry's transports that it validated
// what they are sending (src/common/validated_send.h, not API): it covers
// exactly the objects it names, on its own thread, while it lives.

#include "common/validated_send.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <thread>

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

TEST(ValidatedSendTest, TheMarkCoversExactlyItsObjectsWhileItLives) {
  const Request bad = Bad();
  const Request copy = Bad();  // equal content, another object
  const HeaderRef extra[] = {{"X-Ok", "1"}, {"X-Two", "2"}};
  {
    const ValidatedSend mark(bad, extra);
    EXPECT_TRUE(CheckSend(bad, extra).ok());
    EXPECT_FALSE(CheckSend(copy, extra).ok());
    EXPECT_FALSE(CheckSend(bad, HeaderRefs(extra, 1)).ok());  // other headers
    EXPECT_FALSE(CheckSend(bad, {}).ok());
    {
      // A nested send of something else (a status query) is checked, and
      // the outer mark comes back after it.
      Request query;
      query.url = "http://h/by-key/k";
      const ValidatedSend inner(query, {});
      EXPECT_FALSE(CheckSend(bad, extra).ok());
      EXPECT_TRUE(CheckSend(query, {}).ok());
    }
    EXPECT_TRUE(CheckSend(bad, extra).ok());
    // Another thread has no mark.
    bool other_ok = true;
    std::thread([&] { other_ok = CheckSend(bad, extra).ok(); }).join();
    EXPECT_FALSE(other_ok);
  }
  EXPECT_FALSE(CheckSend(bad, extra).ok());
}

// The drivers mark sends only for a transport that reads the mark: saferetry's
// own. Any other (the testing kit's, a user's) is not marked, and a marked
// send is never required for correctness: an unmarked one is checked.
TEST(ValidatedSendTest, OnlySaferetrysOwnTransportsReadTheMark) {
  const std::shared_ptr<Transport> curl = MakeCurlTransport({}).value();
  EXPECT_TRUE(ReadsSendMarks(curl.get()));
  const std::shared_ptr<EventLoop> loop = MakeEpollEventLoop().value();
  const std::shared_ptr<AsyncTransport> multi = MakeCurlMultiTransport(loop).value();
  EXPECT_TRUE(ReadsSendMarks(multi.get()));
  const testkit::FakeTransport fake;
  EXPECT_FALSE(ReadsSendMarks(static_cast<const Transport*>(&fake)));
  EXPECT_FALSE(ReadsSendMarks(static_cast<const Transport*>(nullptr)));
}

}  // namespace
}  // namespace internal
}  // namespace saferetry

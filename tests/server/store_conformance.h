// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The conformance suite (store_conformance.cc) is compiled into one test
// executable per store, which instantiates it with its factory:
//
//   INSTANTIATE_TEST_SUITE_P(Sqlite, StoreConformanceTest, Values(SqliteFactory()), ...);

#ifndef SAFERETRY_TESTS_SERVER_STORE_CONFORMANCE_H_
#define SAFERETRY_TESTS_SERVER_STORE_CONFORMANCE_H_

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "saferetry/server/handler.h"
#include "saferetry/server/idempotency_store.h"
#include "saferetry/testing/fake_clock.h"
#include "store_fixture.h"

namespace saferetry {
namespace server {
namespace testkit {

class StoreConformanceTest : public ::testing::TestWithParam<StoreFactory> {
 protected:
  void SetUp() override;
  void TearDown() override;

  /// Rows in the business table `widgets` (k TEXT PRIMARY KEY, n BIGINT).
  std::int64_t Widgets();
  /// An effect that inserts widget `k` and answers 201 {"widget":"k"}.
  Effect InsertWidget(const std::string& k, bool* ran = nullptr);

  std::shared_ptr<saferetry::testkit::FakeClock> clock_;
  StoreOptions options_;
  StoreUnderTest under_test_;
  std::shared_ptr<IdempotencyStore> store_;
};

/// Ends the test binary with the given name's factory; see the .cc files.
std::string FactoryName(const ::testing::TestParamInfo<StoreFactory>& info);

}  // namespace testkit
}  // namespace server
}  // namespace saferetry

#endif  // SAFERETRY_TESTS_SERVER_STORE_CONFORMANCE_H_

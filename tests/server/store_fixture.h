// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The conformance suite's seam: one factory per store. Each test gets a fresh,
// empty database (a temporary SQLite file, or a private PostgreSQL schema) and
// a FakeClock whose wall time drives leases and retention.

#ifndef SAFERETRY_TESTS_SERVER_STORE_FIXTURE_H_
#define SAFERETRY_TESTS_SERVER_STORE_FIXTURE_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "saferetry/server/idempotency_store.h"
#include "saferetry/testing/fake_clock.h"

namespace saferetry {
namespace server {
namespace testkit {

/// A fresh store; `cleanup` (may be empty) runs when the test ends.
struct StoreUnderTest {
  std::shared_ptr<IdempotencyStore> store;
  std::function<void()> cleanup;
  /// Opens a second store on the same database (a second instance).
  std::function<absl::StatusOr<std::shared_ptr<IdempotencyStore>>()> open_again;
};

struct StoreFactory {
  std::string name;
  /// Returns the store, or an error; `skip_reason` set means "skip, not fail".
  std::function<absl::StatusOr<StoreUnderTest>(std::shared_ptr<saferetry::testkit::FakeClock>,
                                               StoreOptions, std::string* skip_reason)>
      make;
};

}  // namespace testkit
}  // namespace server
}  // namespace saferetry

#endif  // SAFERETRY_TESTS_SERVER_STORE_FIXTURE_H_

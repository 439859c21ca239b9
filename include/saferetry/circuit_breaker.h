// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// A per-host circuit breaker: when most recent sends to a host fail, stop
// sending to it for a while, then let a few probes decide whether it is back.
// Optional (`ClientOptions::circuit_breakers`, default none). The call's state
// machine asks the breaker before every send (attempt, hedge or status query)
// and reports every finished send to it; a call refused before its first
// send ends `kFailed` / `StopReason::kCircuitOpen` with nothing sent, and a
// call whose earlier attempt may have taken effect ends `kUnknown`
// (docs/circuit-breaker.md).
//
// States and transitions (each proved by tests/unit/circuit_breaker_test.cc):
//
//   closed     Every send is allowed. Finished sends are counted in a sliding
//              window of `window` (10 buckets of window/10). After each report,
//              when the window holds at least `minimum_calls` outcomes and
//              failures / outcomes >= `failure_ratio`:  -> open.
//   open       Every send is refused (counted in `refusals`). Once
//              `open_duration` has passed since the breaker opened (at
//              exactly opened_at + open_duration):  -> half-open.
//   half-open  Up to `half_open_probes` sends are allowed (the probes); any
//              further send is refused. A probe that fails:  -> open again
//              (a new `open_duration` from then). When all `half_open_probes`
//              probes have succeeded:  -> closed, with an empty window. A
//              probe that ends without an outcome (`OnAbandoned`: cancelled,
//              a losing hedge) frees its slot for another probe.
//
// A report carries the permit of the send it is about; a report whose permit
// was issued before the last transition (a send still running when the
// breaker opened) is ignored, so a slow success from before an outage cannot
// close a breaker that is probing.
//
// What counts as a failure for the host's health (`IsHostFailure`): a
// transport failure (no complete response, other than a cancellation) or an
// attempt classified kRetryableTransient, kRetryableNotDelivered or
// kAmbiguous (5xx, 408, 425, 429, timeouts). 2xx, 3xx-as-success and every
// 4xx (409 included) are successes: the host answered.
//
// No clock is read here: every time comes in as an argument. Thread-safe:
// one breaker per host is shared by every call and thread (std::mutex).
//
// @code
//   auto breakers = saferetry::CircuitBreakerRegistry::Create({}).value();
//   options.circuit_breakers = breakers;          // ClientOptions
//   ...
//   for (const auto& [host, s] : breakers->Snapshot(clock->Now())) { ... }
// @endcode

#ifndef SAFERETRY_CIRCUIT_BREAKER_H_
#define SAFERETRY_CIRCUIT_BREAKER_H_

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "saferetry/clock.h"
#include "saferetry/result.h"

namespace saferetry {

/// The breaker's settings. Plain struct; defaults documented per field.
struct CircuitBreakerOptions {
  /// Open when failures / outcomes in the window reach this ratio, in
  /// (0, 1]. Default 0.5.
  double failure_ratio = 0.5;
  /// The sliding window of outcomes, > 0. Default 10 s. It moves in tenths:
  /// an outcome is counted for between 0.9 and 1 window.
  Duration window = std::chrono::seconds(10);
  /// Outcomes the window must hold before the ratio may open the breaker,
  /// >= 1. Default 20.
  int minimum_calls = 20;
  /// How long the breaker stays open before it lets probes through, > 0.
  /// Default 5 s.
  Duration open_duration = std::chrono::seconds(5);
  /// Probes allowed while half-open; all must succeed to close, 1..1000.
  /// Default 3.
  int half_open_probes = 3;
};

/// InvalidArgument naming the field ("circuit_breaker.failure_ratio: must be
/// in (0, 1], got 0").
absl::Status ValidateCircuitBreakerOptions(const CircuitBreakerOptions& options);

/// The breaker's state. The numeric values are the metrics gauge's.
enum class CircuitState {
  kClosed = 0,    ///< Sends allowed; outcomes counted.
  kHalfOpen = 1,  ///< A few probes allowed.
  kOpen = 2,      ///< Sends refused.
};

/// "closed", "half_open", "open".
std::string_view CircuitStateName(CircuitState state);

/// Whether a finished send counts as a failure of its host (see the file
/// comment): a transport failure other than a cancellation, or a transient,
/// not-delivered or ambiguous class.
bool IsHostFailure(AttemptClass cls, const absl::Status& transport_status);

/// A point-in-time view of one breaker, for metrics.
struct CircuitBreakerSnapshot {
  /// The state as of `now`: an open breaker whose open duration has passed
  /// reads half-open (the next `Allow` makes it so).
  CircuitState state = CircuitState::kClosed;
  /// Outcomes and failures in the window (closed state; 0 otherwise).
  std::int64_t window_calls = 0;
  std::int64_t window_failures = 0;
  /// Sends refused since the breaker was created.
  std::int64_t refusals = 0;
  /// Times the breaker opened (from closed or from half-open).
  std::int64_t opened = 0;
};

/// One host's breaker. Thread-safe.
class CircuitBreaker {
 public:
  /// What `Allow` returns: whether the send may go, and a token to pass
  /// back with its outcome.
  struct Permit {
    bool allowed = false;
    /// The breaker's generation when the permit was issued (bumped on every
    /// transition); reports from an older generation are ignored.
    std::uint64_t generation = 0;
  };

  /// InvalidArgument naming the field for bad options.
  static absl::StatusOr<std::unique_ptr<CircuitBreaker>> Create(CircuitBreakerOptions options);
  /// Trusts `options` (validate first, or use `Create`).
  explicit CircuitBreaker(const CircuitBreakerOptions& options);
  CircuitBreaker(const CircuitBreaker&) = delete;
  CircuitBreaker& operator=(const CircuitBreaker&) = delete;

  /// May a send start at `now`? Closed: yes. Open: no, until the open
  /// duration has passed, then the breaker turns half-open. Half-open: yes
  /// for the first `half_open_probes` sends, no for the rest. Every refusal
  /// is counted.
  Permit Allow(TimePoint now);
  /// The send allowed by `permit` finished; the host answered.
  void OnSuccess(const Permit& permit, TimePoint now);
  /// The send allowed by `permit` finished; the host failed it.
  void OnFailure(const Permit& permit, TimePoint now);
  /// `OnFailure` when `failure` is true, else `OnSuccess`.
  void Report(const Permit& permit, bool failure, TimePoint now);
  /// The send allowed by `permit` ended without an outcome (cancelled, a
  /// losing hedge, or never sent): a half-open probe slot is freed.
  void OnAbandoned(const Permit& permit, TimePoint now);

  /// The state as of `now` (no transition is made).
  CircuitState State(TimePoint now) const;
  CircuitBreakerSnapshot Snapshot(TimePoint now) const;
  const CircuitBreakerOptions& options() const { return options_; }

 private:
  static constexpr int kBuckets = 10;
  struct Bucket {
    std::int64_t index = -1;  // which bucket-width slice of time it holds
    std::int64_t calls = 0;
    std::int64_t failures = 0;
  };
  void TransitionLocked(CircuitState to, TimePoint now);
  void RecordLocked(bool failure, TimePoint now);
  std::int64_t BucketIndex(TimePoint now) const;
  void SumLocked(TimePoint now, std::int64_t* calls, std::int64_t* failures) const;

  const CircuitBreakerOptions options_;
  const Duration bucket_width_;
  mutable std::mutex mu_;
  CircuitState state_ = CircuitState::kClosed;
  std::uint64_t generation_ = 0;
  TimePoint opened_at_{};
  int probes_admitted_ = 0;
  int probes_succeeded_ = 0;
  std::array<Bucket, kBuckets> buckets_{};
  std::int64_t refusals_ = 0;
  std::int64_t opened_ = 0;
};

/// The breaker key of `url`: "scheme://host:port", scheme and host in lower
/// case, the port explicit (80 for http, 443 for https), userinfo, path,
/// query and fragment dropped; IPv6 literals keep their brackets. Empty for
/// a URL that is not absolute http(s).
std::string CircuitBreakerKey(std::string_view url);

/// One breaker per host, created on first use with the registry's options.
/// Thread-safe; share one registry across clients to share host health.
/// Breakers live as long as the registry (pointers stay valid).
class CircuitBreakerRegistry {
 public:
  /// InvalidArgument naming the field for bad options.
  static absl::StatusOr<std::shared_ptr<CircuitBreakerRegistry>> Create(
      CircuitBreakerOptions options);
  /// Trusts `options` (use `Create`).
  explicit CircuitBreakerRegistry(const CircuitBreakerOptions& options) : options_(options) {}

  /// The breaker of `key` (`CircuitBreakerKey`), created if new; null for an
  /// empty key.
  CircuitBreaker* ForKey(const std::string& key);
  /// The breaker of `url`'s host; null when `url` has no http(s) host.
  /// Allocates nothing for a host it has seen.
  CircuitBreaker* ForUrl(std::string_view url);

  /// Every breaker's snapshot as of `now`, by key.
  std::map<std::string, CircuitBreakerSnapshot> Snapshot(TimePoint now) const;
  const CircuitBreakerOptions& options() const { return options_; }

 private:
  const CircuitBreakerOptions options_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<CircuitBreaker>> breakers_;
};

}  // namespace saferetry

#endif  // SAFERETRY_CIRCUIT_BREAKER_H_

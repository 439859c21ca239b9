// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/circuit_breaker.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace saferetry {
namespace {

constexpr int kMaxHalfOpenProbes = 1000;

}  // namespace

absl::Status ValidateCircuitBreakerOptions(const CircuitBreakerOptions& o) {
  // Written so that NaN fails too.
  if (!(o.failure_ratio > 0 && o.failure_ratio <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("circuit_breaker.failure_ratio: must be in (0, 1], got ", o.failure_ratio));
  }
  if (o.window <= Duration::zero()) {
    return absl::InvalidArgumentError("circuit_breaker.window: must be > 0");
  }
  if (o.minimum_calls < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("circuit_breaker.minimum_calls: must be >= 1, got ", o.minimum_calls));
  }
  if (o.open_duration <= Duration::zero()) {
    return absl::InvalidArgumentError("circuit_breaker.open_duration: must be > 0");
  }
  if (o.half_open_probes < 1 || o.half_open_probes > kMaxHalfOpenProbes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "circuit_breaker.half_open_probes: must be in 1..1000, got ", o.half_open_probes));
  }
  return absl::OkStatus();
}

std::string_view CircuitStateName(CircuitState state) {
  switch (state) {
    case CircuitState::kClosed:
      return "closed";
    case CircuitState::kHalfOpen:
      return "half_open";
    case CircuitState::kOpen:
      return "open";
  }
  return "closed";
}

bool IsHostFailure(AttemptClass cls, const absl::Status& transport_status) {
  // A cancellation is the caller's doing, not the host's.
  if (absl::IsCancelled(transport_status)) return false;
  if (!transport_status.ok()) return true;
  switch (cls) {
    case AttemptClass::kRetryableTransient:
    case AttemptClass::kRetryableNotDelivered:
    case AttemptClass::kAmbiguous:
    case AttemptClass::kUnavailableUnproven:
      return true;
    case AttemptClass::kSuccess:
    case AttemptClass::kPermanent:
    case AttemptClass::kPreconditionFailed:
    case AttemptClass::kInProgress:
      return false;
  }
  return false;
}

absl::StatusOr<std::unique_ptr<CircuitBreaker>> CircuitBreaker::Create(
    CircuitBreakerOptions options) {
  absl::Status s = ValidateCircuitBreakerOptions(options);
  if (!s.ok()) return s;
  return std::make_unique<CircuitBreaker>(options);
}

CircuitBreaker::CircuitBreaker(const CircuitBreakerOptions& options)
    : options_(options), bucket_width_(std::max(options.window / kBuckets, Duration(1))) {}

std::int64_t CircuitBreaker::BucketIndex(TimePoint now) const {
  return static_cast<std::int64_t>(now.time_since_epoch() / bucket_width_);
}

void CircuitBreaker::SumLocked(TimePoint now, std::int64_t* calls, std::int64_t* failures) const {
  const std::int64_t current = BucketIndex(now);
  *calls = 0;
  *failures = 0;
  for (const Bucket& b : buckets_) {
    // A bucket counts while it is one of the last kBuckets slices.
    if (b.index >= 0 && b.index <= current && current - b.index < kBuckets) {
      *calls += b.calls;
      *failures += b.failures;
    }
  }
}

void CircuitBreaker::RecordLocked(bool failure, TimePoint now) {
  const std::int64_t index = BucketIndex(now);
  Bucket& b = buckets_[static_cast<std::size_t>(index % kBuckets)];
  if (b.index != index) b = Bucket{index, 0, 0};
  ++b.calls;
  if (failure) ++b.failures;
}

void CircuitBreaker::TransitionLocked(CircuitState to, TimePoint now) {
  state_ = to;
  ++generation_;
  probes_admitted_ = 0;
  probes_succeeded_ = 0;
  if (to == CircuitState::kOpen) {
    opened_at_ = now;
    ++opened_;
  }
  // Every state starts with an empty window: outcomes from before an outage
  // (or from the probes) say nothing about the host from now on.
  buckets_.fill(Bucket{});
}

CircuitBreaker::Permit CircuitBreaker::Allow(TimePoint now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == CircuitState::kOpen && now - opened_at_ >= options_.open_duration) {
    TransitionLocked(CircuitState::kHalfOpen, now);
  }
  Permit permit;
  permit.generation = generation_;
  switch (state_) {
    case CircuitState::kClosed:
      permit.allowed = true;
      break;
    case CircuitState::kHalfOpen:
      if (probes_admitted_ < options_.half_open_probes) {
        ++probes_admitted_;
        permit.allowed = true;
      }
      break;
    case CircuitState::kOpen:
      break;
  }
  if (!permit.allowed) ++refusals_;
  return permit;
}

void CircuitBreaker::Report(const Permit& permit, bool failure, TimePoint now) {
  if (!permit.allowed) return;
  std::lock_guard<std::mutex> lock(mu_);
  // A send allowed before the last transition reports on a state that no
  // longer exists.
  if (permit.generation != generation_) return;
  switch (state_) {
    case CircuitState::kClosed: {
      RecordLocked(failure, now);
      std::int64_t calls = 0;
      std::int64_t failures = 0;
      SumLocked(now, &calls, &failures);
      if (calls >= options_.minimum_calls &&
          static_cast<double>(failures) >= options_.failure_ratio * static_cast<double>(calls)) {
        TransitionLocked(CircuitState::kOpen, now);
      }
      break;
    }
    case CircuitState::kHalfOpen:
      if (failure) {
        TransitionLocked(CircuitState::kOpen, now);
      } else if (++probes_succeeded_ >= options_.half_open_probes) {
        TransitionLocked(CircuitState::kClosed, now);
      }
      break;
    case CircuitState::kOpen:
      break;  // no permit of this generation exists
  }
}

void CircuitBreaker::OnSuccess(const Permit& permit, TimePoint now) { Report(permit, false, now); }

void CircuitBreaker::OnFailure(const Permit& permit, TimePoint now) { Report(permit, true, now); }

void CircuitBreaker::OnAbandoned(const Permit& permit, TimePoint /*now*/) {
  if (!permit.allowed) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (permit.generation != generation_) return;
  if (state_ == CircuitState::kHalfOpen && probes_admitted_ > 0) --probes_admitted_;
}

CircuitState CircuitBreaker::State(TimePoint now) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == CircuitState::kOpen && now - opened_at_ >= options_.open_duration) {
    return CircuitState::kHalfOpen;
  }
  return state_;
}

CircuitBreakerSnapshot CircuitBreaker::Snapshot(TimePoint now) const {
  std::lock_guard<std::mutex> lock(mu_);
  CircuitBreakerSnapshot s;
  s.state = state_;
  if (state_ == CircuitState::kOpen && now - opened_at_ >= options_.open_duration) {
    s.state = CircuitState::kHalfOpen;
  }
  if (state_ == CircuitState::kClosed) SumLocked(now, &s.window_calls, &s.window_failures);
  s.refusals = refusals_;
  s.opened = opened_;
  return s;
}

namespace {

void AppendLower(std::string_view s, std::string& out) {
  for (char c : s) out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
}

// Writes the breaker key of `url` into `out` (empty when it has none),
// reusing its storage.
void WriteCircuitBreakerKey(std::string_view url, std::string& out) {
  out.clear();
  const std::size_t scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos || scheme_end == 0) return;
  const std::string_view scheme = url.substr(0, scheme_end);
  std::string_view default_port;
  if (absl::EqualsIgnoreCase(absl::string_view(scheme.data(), scheme.size()), "http")) {
    default_port = "80";
  } else if (absl::EqualsIgnoreCase(absl::string_view(scheme.data(), scheme.size()), "https")) {
    default_port = "443";
  } else {
    return;
  }
  std::string_view authority = url.substr(scheme_end + 3);
  authority = authority.substr(0, authority.find_first_of("/?#"));
  if (const std::size_t at = authority.rfind('@'); at != std::string_view::npos) {
    authority.remove_prefix(at + 1);
  }
  std::string_view host = authority;
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {
    const std::size_t close = authority.find(']');
    if (close == std::string_view::npos) return;
    host = authority.substr(0, close + 1);
    std::string_view rest = authority.substr(close + 1);
    if (!rest.empty() && rest.front() == ':') port = rest.substr(1);
  } else if (const std::size_t colon = authority.rfind(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  }
  if (host.empty() || host == "[]") return;
  if (port.empty()) port = default_port;
  AppendLower(scheme, out);
  out.append("://");
  AppendLower(host, out);
  out.push_back(':');
  out.append(port.data(), port.size());
}

}  // namespace

std::string CircuitBreakerKey(std::string_view url) {
  std::string key;
  WriteCircuitBreakerKey(url, key);
  return key;
}

CircuitBreaker* CircuitBreakerRegistry::ForUrl(std::string_view url) {
  // One buffer per thread: finding the breaker of a known host allocates
  // nothing.
  thread_local std::string key;
  WriteCircuitBreakerKey(url, key);
  return ForKey(key);
}

absl::StatusOr<std::shared_ptr<CircuitBreakerRegistry>> CircuitBreakerRegistry::Create(
    CircuitBreakerOptions options) {
  absl::Status s = ValidateCircuitBreakerOptions(options);
  if (!s.ok()) return s;
  return std::make_shared<CircuitBreakerRegistry>(options);
}

CircuitBreaker* CircuitBreakerRegistry::ForKey(const std::string& key) {
  if (key.empty()) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  // operator[] allocates only for a host seen the first time.
  std::unique_ptr<CircuitBreaker>& slot = breakers_[key];
  if (slot == nullptr) slot = std::make_unique<CircuitBreaker>(options_);
  return slot.get();
}

std::map<std::string, CircuitBreakerSnapshot> CircuitBreakerRegistry::Snapshot(
    TimePoint now) const {
  std::map<std::string, CircuitBreakerSnapshot> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [key, breaker] : breakers_) out[key] = breaker->Snapshot(now);
  return out;
}

}  // namespace saferetry

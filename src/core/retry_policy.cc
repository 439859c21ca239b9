// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/retry_policy.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_internal.h"
#include "saferetry/call_state_machine.h"
#include "saferetry/request.h"

namespace saferetry {
namespace {

using internal::Prefixed;

bool SameParams(const BackoffParams& a, const BackoffParams& b) {
  return a.base == b.base && a.multiplier == b.multiplier && a.cap == b.cap && a.jitter == b.jitter;
}

bool SameOptional(const std::optional<Duration>& a, const std::optional<Duration>& b) {
  return a.has_value() == b.has_value() && (!a.has_value() || *a == *b);
}

absl::Status ValidateHeaderName(const std::string& name, std::string_view field, bool optional) {
  if (optional && name.empty()) return absl::OkStatus();
  return ValidateHeader({name, "0"}, "policy." + std::string(field));
}

}  // namespace

BackoffParams DefaultPollBackoff() {
  BackoffParams p;
  p.base = std::chrono::milliseconds(50);
  p.multiplier = 1.5;
  p.cap = std::chrono::seconds(1);
  p.jitter = JitterKind::kEqual;
  return p;
}

bool operator==(const RetryPolicyOptions& a, const RetryPolicyOptions& b) {
  const bool same_backoff =
      SameParams(a.backoff, b.backoff) && a.backoff_policy == b.backoff_policy;
  return a.max_attempts == b.max_attempts && a.max_status_queries == b.max_status_queries &&
         same_backoff && SameParams(a.poll_backoff, b.poll_backoff) && a.timeout == b.timeout &&
         a.deadline_options.margin == b.deadline_options.margin &&
         a.deadline_options.min_useful_attempt == b.deadline_options.min_useful_attempt &&
         SameOptional(a.deadline_options.attempt_cap, b.deadline_options.attempt_cap) &&
         SameOptional(a.deadline_options.resolution_window, b.deadline_options.resolution_window) &&
         a.status_query.url_template == b.status_query.url_template && !a.status_query.callback &&
         !b.status_query.callback &&
         a.status_query.fence_when_giving_up == b.status_query.fence_when_giving_up &&
         a.server_deduplicates == b.server_deduplicates && a.key_mode == b.key_mode &&
         a.idempotency_header == b.idempotency_header && a.key_form == b.key_form &&
         a.deadline_header == b.deadline_header && a.attempt_header == b.attempt_header &&
         a.request_id_header == b.request_id_header &&
         a.hints.max_retry_after == b.hints.max_retry_after &&
         a.hints.do_not_retry_header == b.hints.do_not_retry_header &&
         a.hedging.enabled == b.hedging.enabled && a.hedging.delay == b.hedging.delay &&
         a.hedging.delay_from_p95 == b.hedging.delay_from_p95 &&
         a.hedging.max_hedges == b.hedging.max_hedges &&
         a.response_predicate.rules == b.response_predicate.rules &&
         a.response_predicate.predicate == b.response_predicate.predicate &&
         a.response_predicate.max_body_bytes == b.response_predicate.max_body_bytes &&
         a.phase_limits == b.phase_limits;
}

RetryPolicy::RetryPolicy(RetryPolicyOptions options, std::shared_ptr<const BackoffPolicy> backoff,
                         std::shared_ptr<const ResponsePredicate> response_predicate)
    : options_(std::move(options)),
      backoff_(std::move(backoff)),
      response_predicate_(std::move(response_predicate)) {
  has_status_query_ = static_cast<bool>(options_.status_query.callback) ||
                      !options_.status_query.url_template.empty();
  auto policy = std::make_unique<CallPolicy>();
  policy->max_attempts = options_.max_attempts;
  policy->max_status_queries = options_.max_status_queries;
  policy->backoff = backoff_.get();
  policy->poll_backoff = &options_.poll_backoff;
  policy->deadline_options = &options_.deadline_options;
  policy->server_deduplicates = options_.server_deduplicates;
  policy->fence_when_giving_up = options_.status_query.fence_when_giving_up;
  policy->response_predicate = response_predicate_.get();
  // Validated to at most kMaxResponsePredicateBodyBytes: it fits.
  policy->response_predicate_max_body_bytes =
      static_cast<std::uint32_t>(options_.response_predicate.max_body_bytes);
  call_policy_ = std::move(policy);
}

RetryPolicy::~RetryPolicy() = default;

absl::StatusOr<std::shared_ptr<const RetryPolicy>> RetryPolicy::Create(RetryPolicyOptions o) {
  if (o.max_attempts < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("policy.max_attempts: must be >= 1, got ", o.max_attempts));
  }
  if (o.max_status_queries < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("policy.max_status_queries: must be >= 0 (0: derived from the deadline), got ",
                     o.max_status_queries));
  }
  o.max_attempts = std::min(o.max_attempts, kMaxAttemptsHardCap);
  o.max_status_queries = std::min(o.max_status_queries, kMaxStatusQueriesHardCap);
  std::shared_ptr<const BackoffPolicy> backoff = o.backoff_policy;
  if (backoff == nullptr) {
    absl::StatusOr<std::shared_ptr<const ExponentialBackoff>> exponential =
        ExponentialBackoff::Create(o.backoff);
    if (!exponential.ok()) return Prefixed("policy.backoff.", exponential.status());
    backoff = *std::move(exponential);
  }
  absl::Status s = ValidateBackoffParams(o.poll_backoff);
  if (!s.ok()) return Prefixed("policy.poll_backoff.", s);
  if (o.timeout <= Duration::zero()) {
    return absl::InvalidArgumentError("policy.timeout: must be > 0");
  }
  s = ValidateDeadlineOptions(o.deadline_options);
  if (!s.ok()) return Prefixed("policy.deadline_options.", s);
  s = ValidatePhaseLimits(o.phase_limits, "policy.phase_limits.");
  if (!s.ok()) return s;
  if (o.status_query.callback || !o.status_query.url_template.empty()) {
    s = ValidateStatusQuery(o.status_query);
    if (!s.ok()) return Prefixed("policy.", s);
  }
  s = ValidateHeader({o.idempotency_header, "k"}, "policy.idempotency_header");
  if (!s.ok()) return s;
  if (s = ValidateHeaderName(o.deadline_header, "deadline_header", true); !s.ok()) return s;
  if (s = ValidateHeaderName(o.attempt_header, "attempt_header", true); !s.ok()) return s;
  if (s = ValidateHeaderName(o.request_id_header, "request_id_header", true); !s.ok()) return s;
  if (s = ValidateHeaderName(o.hints.do_not_retry_header, "hints.do_not_retry_header", true);
      !s.ok()) {
    return s;
  }
  if (o.hints.max_retry_after <= Duration::zero()) {
    return absl::InvalidArgumentError("policy.hints.max_retry_after: must be > 0");
  }
  if (o.hedging.enabled) {
    if (o.hedging.delay < Duration::zero()) {
      return absl::InvalidArgumentError("policy.hedging.delay: must be >= 0");
    }
    if (o.hedging.max_hedges < 0 || o.hedging.max_hedges > 3) {
      return absl::InvalidArgumentError(
          absl::StrCat("policy.hedging.max_hedges: must be in 0..3, got ", o.hedging.max_hedges));
    }
  }
  absl::StatusOr<std::shared_ptr<const ResponsePredicate>> predicate =
      MakeResponsePredicate(o.response_predicate);
  if (!predicate.ok()) return predicate.status();
  return std::shared_ptr<const RetryPolicy>(
      new RetryPolicy(std::move(o), std::move(backoff), *std::move(predicate)));
}

// GCC 12 at -O3 reports the empty status-query callback of the temporary
// options as maybe uninitialized when it is destroyed (a false positive of
// std::function's inlined destructor).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
const std::shared_ptr<const RetryPolicy>& RetryPolicy::Default() {
  static const std::shared_ptr<const RetryPolicy> kDefault = [] {
    RetryPolicyOptions defaults;
    return RetryPolicy::Create(std::move(defaults)).value();
  }();
  return kDefault;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/classifier.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"

namespace saferetry {
namespace {

// The evidence alone decides: an attempt that may have taken effect is
// ambiguous whatever the request. Retrying it when the request is idempotent
// is the state machine's decision.
Classification AmbiguousOr(const RequestTraits& /*traits*/, std::string_view reason) {
  return {AttemptClass::kAmbiguous, reason};
}

Classification ByStatus(int status, const RequestTraits& traits) {
  if (status >= 200 && status < 300) return {AttemptClass::kSuccess, "2xx"};
  switch (status) {
    case 408:
      return {AttemptClass::kRetryableTransient, "408: request timeout, not processed"};
    case 425:
      return {AttemptClass::kRetryableTransient, "425: too early, not processed"};
    case 429:
      return {AttemptClass::kRetryableTransient, "429: rate limited, not processed"};
    case 503:
      // RFC 9110 §15.6.4: the server is unable to handle the request. A
      // gateway that forwards before answering 503 proves nothing: such
      // callers override 503 to kAmbiguous.
      return {AttemptClass::kRetryableTransient, "503: unavailable, not processed"};
    case 409:
      if (traits.keyed) return {AttemptClass::kInProgress, "409: same key still in progress"};
      return {AttemptClass::kPermanent, "409: conflict"};
    case 412:
      return {AttemptClass::kPreconditionFailed, "412: precondition failed"};
    case 428:
      return {AttemptClass::kPreconditionFailed, "428: precondition required"};
    case 422:
      if (traits.keyed) {
        return {AttemptClass::kPermanent,
                "422: idempotency key reused with another payload (or unprocessable)"};
      }
      return {AttemptClass::kPermanent, "422: unprocessable content"};
    case 500:
      return AmbiguousOr(traits, "500: may have taken effect");
    case 502:
      return AmbiguousOr(traits, "502: may have taken effect upstream");
    case 504:
      return AmbiguousOr(traits, "504: upstream timed out, may have taken effect");
    default:
      break;
  }
  if (status >= 400 && status < 500) return {AttemptClass::kPermanent, "4xx: client error"};
  // Other 5xx, and 1xx/3xx left unresolved by the transport: nothing proves
  // the server did not act.
  return AmbiguousOr(traits, "unexpected status, may have taken effect");
}

// `Idempotency-Key-State: rejected`: the server refused this request before
// doing any work, so the attempt had no effect whatever its status. It is
// retried only when the table would retry that status for any request
// (408, 425, 429, 503); anything else is final.
Classification RejectedBeforeWork(int status) {
  constexpr RequestTraits kAnyRequest{/*idempotent=*/false, /*safe=*/false, /*keyed=*/false};
  if (ByStatus(status, kAnyRequest).cls == AttemptClass::kRetryableTransient) {
    return {AttemptClass::kRetryableTransient,
            "rejected before any work (Idempotency-Key-State): not applied, retryable status"};
  }
  return {AttemptClass::kPermanent,
          "rejected before any work (Idempotency-Key-State): not applied"};
}

}  // namespace

Classification DefaultClassifier::Classify(const AttemptEvidence& evidence,
                                           const RequestTraits& traits) const {
  if (evidence.delivery == Delivery::kNotSent) {
    // src/transports/curl/curl_errors.cc reports every certificate failure, and nothing
    // else, as kUnauthenticated.
    if (evidence.transport_status.code() == absl::StatusCode::kUnauthenticated) {
      return {AttemptClass::kPermanent, "TLS certificate rejected: retrying cannot help"};
    }
    return {AttemptClass::kRetryableNotDelivered, "not delivered: no request byte was sent"};
  }
  if (evidence.delivery == Delivery::kMaybeDelivered || !evidence.transport_status.ok() ||
      !evidence.http_status.has_value()) {
    return AmbiguousOr(traits, "sent, then no complete response: may have taken effect");
  }
  const int status = *evidence.http_status;
  // The server's own word that nothing was done beats any status override:
  // an override says what a status *may* mean behind a gateway, the header
  // says what did happen.
  if (evidence.hints.key_state == KeyState::kRejected) return RejectedBeforeWork(status);
  if (!options_.status_overrides.empty()) {
    auto it = options_.status_overrides.find(status);
    if (it != options_.status_overrides.end()) {
      if (it->second == AttemptClass::kAmbiguous) {
        return AmbiguousOr(traits, "override: may have taken effect");
      }
      return {it->second, "status override"};
    }
  }
  return ByStatus(status, traits);
}

std::shared_ptr<const Classifier> DefaultClassifierInstance() {
  static const auto* const kInstance =
      new std::shared_ptr<const Classifier>(std::make_shared<DefaultClassifier>());
  return *kInstance;
}

absl::StatusOr<std::shared_ptr<const Classifier>> MakeDefaultClassifier(ClassifierOptions options) {
  for (const auto& [status, cls] : options.status_overrides) {
    (void)cls;
    if (status < 100 || status > 599) {
      return absl::InvalidArgumentError("status_overrides[" + std::to_string(status) +
                                        "]: must be an HTTP status in 100..599");
    }
  }
  return std::shared_ptr<const Classifier>(std::make_shared<DefaultClassifier>(std::move(options)));
}

}  // namespace saferetry

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
      // RFC 9110 §15.5.9: the server did not receive a complete request.
      return {AttemptClass::kRetryableTransient, "408: request timeout, not processed"};
    case 421:
      // RFC 9110 §15.5.20: sent to a server that cannot answer for this
      // origin; it may be retried, whatever the method.
      return {AttemptClass::kRetryableTransient, "421: misdirected, not processed"};
    case 425:
      // RFC 8470: refused because it arrived in early data.
      return {AttemptClass::kRetryableTransient, "425: too early, not processed"};
    case 429:
      return {AttemptClass::kRetryableTransient, "429: rate limited, not processed"};
    case 503:
      // RFC 9110 §15.6.4 says the origin could not handle the request, but
      // a gateway that forwarded it answers 503 too when the upstream fails
      // after it committed: without the server's mark (or the policy's
      // declaration that this endpoint's 503s come from the origin) the
      // answer proves nothing about the effect (docs/adr/0031).
      return {AttemptClass::kUnavailableUnproven, "503: unavailable, may have taken effect"};
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
  // Other 5xx (the ones CDNs and meshes invent among them: 520-527, 529,
  // 598, 599), and 1xx/3xx left unresolved by the transport: nothing proves
  // the server did not act.
  return AmbiguousOr(traits, "unexpected status, may have taken effect");
}

// The statuses that say "come back later" when the server marks them as
// refused before any work.
bool IsRetryableRefusal(int status) {
  return status == 408 || status == 421 || status == 425 || status == 429 || status == 503;
}

// `Idempotency-Key-State: rejected`: the server refused this request before
// doing any work, so the attempt had no effect whatever its status. It is
// retried when its status says "come back later" (408, 421, 425, 429, 503);
// anything else is final.
Classification RejectedBeforeWork(int status) {
  if (IsRetryableRefusal(status)) {
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
      if (it->second == AttemptClass::kRetryableTransient && status == 503) {
        return {AttemptClass::kRetryableTransient,
                "503 from the origin (status override): not processed"};
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

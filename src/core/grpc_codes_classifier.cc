// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The gRPC status codes, their HTTP meaning, and the classifier behind
// `retryableStatusCodes`.

#include "saferetry/grpc_codes_classifier.h"

#include <algorithm>
#include <sstream>
#include <utility>

#include "absl/status/status.h"

namespace saferetry {
namespace {

bool IsNamedStatus(int status) {
  switch (status) {
    case 400:
    case 401:
    case 403:
    case 404:
    case 409:
    case 429:
    case 499:
    case 500:
    case 501:
    case 502:
    case 503:
    case 504:
      return true;
    default:
      return false;
  }
}

// Statuses no code names explicitly that gRPC's HTTP mapping calls UNKNOWN.
bool IsUnknownStatus(int status) {
  if (IsNamedStatus(status)) return false;
  if (status >= 200 && status < 300) return false;
  return status < 400 || status >= 500;
}

}  // namespace

const std::vector<std::string_view>& GrpcCodeNames() {
  static const auto* const kNames = new std::vector<std::string_view>{"OK",
                                                                      "CANCELLED",
                                                                      "UNKNOWN",
                                                                      "INVALID_ARGUMENT",
                                                                      "DEADLINE_EXCEEDED",
                                                                      "NOT_FOUND",
                                                                      "ALREADY_EXISTS",
                                                                      "PERMISSION_DENIED",
                                                                      "RESOURCE_EXHAUSTED",
                                                                      "FAILED_PRECONDITION",
                                                                      "ABORTED",
                                                                      "OUT_OF_RANGE",
                                                                      "UNIMPLEMENTED",
                                                                      "INTERNAL",
                                                                      "UNAVAILABLE",
                                                                      "DATA_LOSS",
                                                                      "UNAUTHENTICATED"};
  return *kNames;
}

// google.rpc.Code's HTTP mapping, plus 502 for UNAVAILABLE (a gateway could
// not reach the service). UNKNOWN also stands for every 1xx, 3xx and 5xx that
// no other code names (see `IsUnknownStatus`).
std::vector<int> HttpStatusesForGrpcCode(std::string_view code) {
  if (code == "CANCELLED") return {499};
  if (code == "UNKNOWN") return {500};
  if (code == "INVALID_ARGUMENT") return {400};
  if (code == "DEADLINE_EXCEEDED") return {504};
  if (code == "NOT_FOUND") return {404};
  if (code == "ALREADY_EXISTS") return {409};
  if (code == "PERMISSION_DENIED") return {403};
  if (code == "RESOURCE_EXHAUSTED") return {429};
  if (code == "FAILED_PRECONDITION") return {400};
  if (code == "ABORTED") return {409};
  if (code == "OUT_OF_RANGE") return {400};
  if (code == "UNIMPLEMENTED") return {501};
  if (code == "INTERNAL") return {500};
  if (code == "UNAVAILABLE") return {502, 503};
  if (code == "DATA_LOSS") return {500};
  if (code == "UNAUTHENTICATED") return {401};
  return {};
}

absl::StatusOr<std::shared_ptr<const GrpcCodesClassifier>> GrpcCodesClassifier::Create(
    GrpcCodesClassifierOptions options) {
  const auto& names = GrpcCodeNames();
  for (const std::string& code : options.retryable_codes) {
    if (std::find(names.begin() + 1, names.end(), code) == names.end()) {
      std::ostringstream message;
      message << "retryable_codes: \"" << code
              << "\" is not a gRPC status code name other than OK (\"UNAVAILABLE\")";
      return absl::InvalidArgumentError(message.str());
    }
  }
  for (int status : options.retryable_http_statuses) {
    if (status < 400 || status > 599) {
      std::ostringstream message;
      message << "retryable_http_statuses: expected HTTP statuses 400..599, got " << status;
      return absl::InvalidArgumentError(message.str());
    }
  }
  return std::shared_ptr<const GrpcCodesClassifier>(new GrpcCodesClassifier(std::move(options)));
}

GrpcCodesClassifier::GrpcCodesClassifier(GrpcCodesClassifierOptions options)
    : inner_(ClassifierOptions{options.status_overrides}),
      overrides_(std::move(options.status_overrides)),
      statuses_(std::move(options.retryable_http_statuses)),
      unknown_listed_(options.retryable_codes.count("UNKNOWN") > 0),
      timeouts_listed_(options.retryable_codes.count("DEADLINE_EXCEEDED") > 0),
      resets_listed_(options.retryable_codes.count("UNAVAILABLE") > 0) {
  for (const std::string& code : options.retryable_codes) {
    for (int s : HttpStatusesForGrpcCode(code)) statuses_.insert(s);
  }
}

// Rules (docs/configuration.md): explicit overrides win; a request that was
// certainly not delivered is always retryable (gRPC's transparent retry); an
// attempt that may have taken effect is ambiguous, and may be resent (when
// the request is idempotent) only when its code is listed; a status that
// proves the request was not processed is retried only when listed.
Classification GrpcCodesClassifier::Classify(const AttemptEvidence& evidence,
                                             const RequestTraits& traits) const {
  if (evidence.delivery == Delivery::kNotSent) return inner_.Classify(evidence, traits);
  const bool no_response = evidence.delivery == Delivery::kMaybeDelivered ||
                           !evidence.transport_status.ok() || !evidence.http_status.has_value();
  if (no_response) {
    Classification c = inner_.Classify(evidence, traits);
    if (c.cls != AttemptClass::kAmbiguous) return c;
    const bool timeout = evidence.transport_status.code() == absl::StatusCode::kDeadlineExceeded;
    if (timeout ? timeouts_listed_ : resets_listed_) {
      return {AttemptClass::kAmbiguous,
              "retryableStatusCodes: no complete response, its code is listed"};
    }
    return {AttemptClass::kAmbiguous,
            "no complete response; its code is not in retryableStatusCodes", true};
  }
  const int status = *evidence.http_status;
  const bool listed = statuses_.count(status) > 0 || (unknown_listed_ && IsUnknownStatus(status));
  if (overrides_.count(status) > 0 ||
      (!IsNamedStatus(status) && !IsUnknownStatus(status) && !listed)) {
    return inner_.Classify(evidence, traits);
  }
  const Classification base = inner_.Classify(evidence, traits);
  switch (base.cls) {
    case AttemptClass::kAmbiguous:
      if (listed) {
        return {AttemptClass::kAmbiguous,
                "retryableStatusCodes: may have taken effect, its code is listed"};
      }
      return {AttemptClass::kAmbiguous,
              "may have taken effect; its code is not in retryableStatusCodes", true};
    case AttemptClass::kUnavailableUnproven:
      // UNAVAILABLE without the server's mark: doubt, as above.
      if (listed) {
        return {AttemptClass::kUnavailableUnproven,
                "retryableStatusCodes: 503 may have taken effect, its code is listed"};
      }
      return {AttemptClass::kUnavailableUnproven,
              "503 may have taken effect; its code is not in retryableStatusCodes", true};
    case AttemptClass::kRetryableTransient:
      if (listed) return base;
      return {AttemptClass::kPermanent, "not processed; its code is not in retryableStatusCodes"};
    case AttemptClass::kPermanent:
    case AttemptClass::kPreconditionFailed:
      if (listed) {
        return {AttemptClass::kRetryableTransient,
                "refused, not processed; listed in retryableStatusCodes"};
      }
      return base;
    default:
      return base;  // success, in progress (409 on a keyed request)
  }
}

absl::StatusOr<std::shared_ptr<const Classifier>> MakeGrpcCodesClassifier(
    GrpcCodesClassifierOptions options) {
  auto made = GrpcCodesClassifier::Create(std::move(options));
  if (!made.ok()) return made.status();
  return std::shared_ptr<const Classifier>(*std::move(made));
}

}  // namespace saferetry

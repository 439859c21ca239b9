// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// GrpcCodesClassifier: classification by gRPC's `retryableStatusCodes`, for
// services whose retry rules are written as gRPC status codes. It is the
// classifier a JSON policy with `retryPolicy.retryableStatusCodes` installs
// (saferetry/config.h), usable without JSON.
//
// A gRPC code stands for the HTTP statuses of google.rpc.Code's mapping
// (`HttpStatusesForGrpcCode`; docs/configuration.md has the table), so
// "UNAVAILABLE" lists 502 and 503, and "UNKNOWN" every 1xx, 3xx and 5xx that
// no other code names. A status is *listed* when a listed code stands for it
// or it is in `retryable_http_statuses`. The rules, in order:
//
//   evidence                                   class
//   ----------------------------------------   ---------------------------------
//   not delivered (refused, DNS)               DefaultClassifier's (retryable)
//   no complete response, non-idempotent       DefaultClassifier's (ambiguous)
//   no complete response, idempotent           retryable if DEADLINE_EXCEEDED
//                                              (a timeout) or UNAVAILABLE (any
//                                              other failure) is listed, else
//                                              ambiguous
//   a status with an override, or one that     DefaultClassifier's
//     is not listed and that no code names
//     (2xx, 405, 408, 412, 425, 428, ...)
//   otherwise, by DefaultClassifier's class for the request taken as
//   non-idempotent:
//     ambiguous (5xx but 503; 1xx, 3xx)        non-idempotent: ambiguous whatever
//                                              is listed; idempotent: retryable if
//                                              listed, else ambiguous
//     retryable transient (429, 503)           retryable if listed, else permanent
//     permanent, precondition failed           retryable if listed, else unchanged
//     success, in progress                     unchanged
//
// @code
//   saferetry::GrpcCodesClassifierOptions codes;
//   codes.retryable_codes = {"UNAVAILABLE", "RESOURCE_EXHAUSTED"};
//   auto classifier = saferetry::GrpcCodesClassifier::Create(std::move(codes));
//   if (!classifier.ok()) return classifier.status();
//   options.classifier = *std::move(classifier);   // ClientOptions
// @endcode

#ifndef SAFERETRY_GRPC_CODES_CLASSIFIER_H_
#define SAFERETRY_GRPC_CODES_CLASSIFIER_H_

#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "saferetry/classifier.h"
#include "saferetry/result.h"

namespace saferetry {

/// The gRPC status-code names, "OK" to "UNAUTHENTICATED", indexed by code.
const std::vector<std::string_view>& GrpcCodeNames();

/// The HTTP statuses a gRPC code name stands for in `retryableStatusCodes`
/// (docs/configuration.md has the table); empty for unknown names.
std::vector<int> HttpStatusesForGrpcCode(std::string_view code_name);

/// What `GrpcCodesClassifier` retries. Empty lists retry only what was
/// certainly not delivered.
struct GrpcCodesClassifierOptions {
  /// HTTP status -> class, applied first (as `ClassifierOptions`).
  std::map<int, AttemptClass> status_overrides;
  /// Canonical gRPC code names other than "OK", upper case, as in
  /// `GrpcCodeNames()` ("UNAVAILABLE").
  std::set<std::string> retryable_codes;
  /// HTTP statuses listed directly, 400..599.
  std::set<int> retryable_http_statuses;
};

/// Classification by a list of retryable gRPC codes (the rules above).
/// Immutable after `Create`, so thread-safe; `Classify` does not allocate.
class GrpcCodesClassifier final : public Classifier {
 public:
  /// InvalidArgument naming the entry when a code name is not one of
  /// `GrpcCodeNames()` (or is "OK"), or an HTTP status is outside 400..599.
  static absl::StatusOr<std::shared_ptr<const GrpcCodesClassifier>> Create(
      GrpcCodesClassifierOptions options);

  Classification Classify(const AttemptEvidence& evidence,
                          const RequestTraits& traits) const override;

 private:
  explicit GrpcCodesClassifier(GrpcCodesClassifierOptions options);

  DefaultClassifier inner_;
  std::map<int, AttemptClass> overrides_;
  // The listed HTTP statuses and those the listed codes stand for.
  std::set<int> statuses_;
  bool unknown_listed_;
  bool timeouts_listed_;
  bool resets_listed_;
};

/// `GrpcCodesClassifier::Create` as a `Classifier`, the factory every
/// built-in seam has (the same errors).
absl::StatusOr<std::shared_ptr<const Classifier>> MakeGrpcCodesClassifier(
    GrpcCodesClassifierOptions options);

}  // namespace saferetry

#endif  // SAFERETRY_GRPC_CODES_CLASSIFIER_H_

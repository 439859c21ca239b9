// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Classify: turn one attempt's evidence into an `AttemptClass`: what the
// evidence says happened, nothing more. The classifier does not decide
// whether to retry; the call's state machine does, from the class, the
// request's idempotency, the history, the budget and the deadline. In
// particular an attempt that may have taken effect is `kAmbiguous` for every
// request; the machine retries it when the request is idempotent
// (docs/adr/0008-pure-classifier.md).
//
// Default table (see docs/outcomes.md for the reasoning):
//
//   evidence                                       class
//   --------------------------------------------   ------------------
//   TLS certificate rejected (not sent)            Permanent
//   not delivered (refused, DNS, TLS setup)        RetryableNotDelivered
//   maybe delivered (timeout/reset after send)     Ambiguous
//   2xx                                            Success
//   408, 421, 425, 429                             RetryableTransient
//   503 without a mark                             UnavailableUnproven
//   Idempotency-Key-State: rejected + 408, 421,    RetryableTransient
//     425, 429, 503 (refused before any work;
//     status overrides do not apply)
//   Idempotency-Key-State: rejected, other         Permanent
//   409 with an idempotency key                    InProgress
//   412, 428                                       PreconditionFailed
//   other 4xx (400, 401, 403, 404, 405, 413,       Permanent
//     422, 409 without a key, ...)
//   500, 502, 504, other 5xx, 1xx, 3xx             Ambiguous
//
// An unmarked 503 proves nothing about the effect: a gateway that forwarded
// the request answers 503 too when its upstream fails after the origin
// committed (docs/adr/0031-unmarked-503-is-doubt.md). An endpoint whose 503s
// come from the origin before any work declares it:
// `status_overrides[503] = AttemptClass::kRetryableTransient`.

#ifndef SAFERETRY_CLASSIFIER_H_
#define SAFERETRY_CLASSIFIER_H_

#include <map>
#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "saferetry/request.h"
#include "saferetry/result.h"

namespace saferetry {

/// A class and a short, static, human-readable reason ("503: server did not
/// process the request").
struct Classification {
  AttemptClass cls = AttemptClass::kAmbiguous;
  std::string_view reason;
  /// The classifier's configured policy forbids resending after this
  /// attempt even for an idempotent request (e.g. a gRPC status code not
  /// in `retryableStatusCodes`). Resolution by a status query is still
  /// allowed. Default false.
  bool no_retry = false;
};

/// What the classifier may know about the request besides the evidence.
struct RequestTraits {
  /// `IsIdempotent(request)`.
  bool idempotent = false;
  /// `IsSafeMethod(request.method)`.
  bool safe = false;
  /// The request carries an idempotency key.
  bool keyed = false;
};

/// Pluggable classification. Implementations must be thread-safe and should
/// not allocate (the reason must outlive the call: use string literals).
class Classifier {
 public:
  virtual ~Classifier() = default;
  virtual Classification Classify(const AttemptEvidence& evidence,
                                  const RequestTraits& traits) const = 0;
};

/// Options of the default classifier.
struct ClassifierOptions {
  /// Per-status overrides, applied before the table. An override of
  /// `kAmbiguous` on an idempotent request is still retried (by the state
  /// machine: ambiguous attempts of idempotent requests are retried).
  std::map<int, AttemptClass> status_overrides;
};

/// The default table above, with overrides.
class DefaultClassifier final : public Classifier {
 public:
  DefaultClassifier() = default;
  explicit DefaultClassifier(ClassifierOptions options) : options_(std::move(options)) {}
  Classification Classify(const AttemptEvidence& evidence,
                          const RequestTraits& traits) const override;

 private:
  ClassifierOptions options_;
};

/// A shared default classifier (no overrides).
std::shared_ptr<const Classifier> DefaultClassifierInstance();

/// The default classifier with `options`, validated: InvalidArgument naming
/// the entry when an override's status is outside 100..599
/// ("status_overrides[42]: must be an HTTP status in 100..599"). The
/// factory every built-in seam has; `DefaultClassifier` stays public so that a
/// classifier of your own can hold one and delegate to it.
absl::StatusOr<std::shared_ptr<const Classifier>> MakeDefaultClassifier(
    ClassifierOptions options = {});

}  // namespace saferetry

#endif  // SAFERETRY_CLASSIFIER_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Classify: turn one attempt's evidence into an `AttemptClass`. The classifier
// does not decide whether to retry; the call's state machine does, from the
// class, the history, the budget and the deadline.
//
// Default table (see docs/outcomes.md for the reasoning):
//
//   evidence                                   non-idempotent      idempotent
//   ----------------------------------------   -----------------   ------------------
//   not delivered (refused, DNS, TLS)          RetryableNotDeliv.  RetryableNotDeliv.
//   maybe delivered (timeout/reset after send) Ambiguous           RetryableTransient
//   2xx                                        Success             Success
//   408, 425, 429, 503                         RetryableTransient  RetryableTransient
//   409 with an idempotency key                InProgress          InProgress
//   412, 428                                   PreconditionFailed  PreconditionFailed
//   other 4xx (400, 401, 403, 404, 405, 413,   Permanent           Permanent
//     422, 409 without a key, ...)
//   500, 502, 504                              Ambiguous           RetryableTransient
//   other 5xx, 1xx, 3xx                        Ambiguous           RetryableTransient
//
// 503 is transient by default because RFC 9110 §15.6.4 says the server did
// not process the request. Seed wisdom warns that "unavailable proves
// nothing" when a gateway answers 503 after forwarding: such callers set
// `status_overrides[503] = AttemptClass::kAmbiguous`.

#ifndef SAFERETRY_CLASSIFIER_H_
#define SAFERETRY_CLASSIFIER_H_

#include <map>
#include <memory>
#include <string_view>

#include "saferetry/request.h"
#include "saferetry/result.h"

namespace saferetry {

/// A class and a short, static, human-readable reason ("503: server did not
/// process the request").
struct Classification {
  AttemptClass cls = AttemptClass::kAmbiguous;
  std::string_view reason;
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
  /// `kAmbiguous` on an idempotent request is still retried as transient.
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

}  // namespace saferetry

#endif  // SAFERETRY_CLASSIFIER_H_

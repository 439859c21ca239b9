// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/classifier.h"

#include <gtest/gtest.h>

namespace saferetry {
namespace {

constexpr RequestTraits kPost{/*idempotent=*/false, /*safe=*/false, /*keyed=*/true};
constexpr RequestTraits kPostNoKey{false, false, false};
constexpr RequestTraits kPut{true, false, false};
constexpr RequestTraits kGet{true, true, false};

AttemptEvidence WithStatus(int status) {
  AttemptEvidence ev;
  ev.delivery = Delivery::kResponseReceived;
  ev.http_status = status;
  return ev;
}

AttemptEvidence NotSent() {
  AttemptEvidence ev;
  ev.delivery = Delivery::kNotSent;
  ev.transport_status = absl::UnavailableError("connection refused");
  return ev;
}

AttemptEvidence MaybeDelivered() {
  AttemptEvidence ev;
  ev.delivery = Delivery::kMaybeDelivered;
  ev.transport_status = absl::DeadlineExceededError("timeout");
  return ev;
}

AttemptClass Classify(const AttemptEvidence& ev, const RequestTraits& traits) {
  return DefaultClassifier().Classify(ev, traits).cls;
}

TEST(ClassifierTest, SuccessStatuses) {
  for (int s : {200, 201, 202, 204, 299}) {
    EXPECT_EQ(Classify(WithStatus(s), kPost), AttemptClass::kSuccess) << s;
    EXPECT_EQ(Classify(WithStatus(s), kGet), AttemptClass::kSuccess) << s;
  }
}

TEST(ClassifierTest, PermanentClientErrors) {
  for (int s : {400, 401, 403, 404, 405, 413, 422, 410, 418, 451, 499}) {
    for (const RequestTraits& t : {kPost, kPostNoKey, kPut, kGet}) {
      EXPECT_EQ(Classify(WithStatus(s), t), AttemptClass::kPermanent) << s;
    }
  }
}

TEST(ClassifierTest, PreconditionFailed) {
  for (int s : {412, 428}) {
    EXPECT_EQ(Classify(WithStatus(s), kPost), AttemptClass::kPreconditionFailed) << s;
    EXPECT_EQ(Classify(WithStatus(s), kGet), AttemptClass::kPreconditionFailed) << s;
  }
}

TEST(ClassifierTest, ConflictIsInProgressOnlyWithAKey) {
  EXPECT_EQ(Classify(WithStatus(409), kPost), AttemptClass::kInProgress);
  EXPECT_EQ(Classify(WithStatus(409), kPostNoKey), AttemptClass::kPermanent);
  EXPECT_EQ(Classify(WithStatus(409), kGet), AttemptClass::kPermanent);
}

TEST(ClassifierTest, TransientStatusesForEveryMethod) {
  for (int s : {408, 421, 425, 429}) {
    for (const RequestTraits& t : {kPost, kPostNoKey, kPut, kGet}) {
      EXPECT_EQ(Classify(WithStatus(s), t), AttemptClass::kRetryableTransient) << s;
    }
  }
}

// The classifier says what the evidence shows, whatever the request: a 5xx
// may have taken effect. Retrying it for an idempotent request is the state
// machine's decision (docs/adr/0008-pure-classifier.md).
TEST(ClassifierTest, ServerErrorsAreAmbiguousForEveryRequest) {
  for (int s : {500, 502, 504, 501, 505, 599}) {
    EXPECT_EQ(Classify(WithStatus(s), kPost), AttemptClass::kAmbiguous) << s;
    EXPECT_EQ(Classify(WithStatus(s), kPostNoKey), AttemptClass::kAmbiguous) << s;
    EXPECT_EQ(Classify(WithStatus(s), kPut), AttemptClass::kAmbiguous) << s;
    EXPECT_EQ(Classify(WithStatus(s), kGet), AttemptClass::kAmbiguous) << s;
  }
}

TEST(ClassifierTest, DeliveryStates) {
  for (const RequestTraits& t : {kPost, kPostNoKey, kPut, kGet}) {
    EXPECT_EQ(Classify(NotSent(), t), AttemptClass::kRetryableNotDelivered);
  }
  EXPECT_EQ(Classify(MaybeDelivered(), kPost), AttemptClass::kAmbiguous);
  EXPECT_EQ(Classify(MaybeDelivered(), kPostNoKey), AttemptClass::kAmbiguous);
  EXPECT_EQ(Classify(MaybeDelivered(), kPut), AttemptClass::kAmbiguous);
  EXPECT_EQ(Classify(MaybeDelivered(), kGet), AttemptClass::kAmbiguous);
}

TEST(ClassifierTest, ResponseWithBrokenBodyIsAmbiguous) {
  AttemptEvidence ev = WithStatus(201);
  ev.transport_status = absl::UnavailableError("reset mid-body");
  EXPECT_EQ(Classify(ev, kPost), AttemptClass::kAmbiguous);
  EXPECT_EQ(Classify(ev, kGet), AttemptClass::kAmbiguous);
}

TEST(ClassifierTest, OverrideMakesGateway503Ambiguous) {
  ClassifierOptions options;
  options.status_overrides[503] = AttemptClass::kAmbiguous;
  options.status_overrides[404] = AttemptClass::kRetryableTransient;
  DefaultClassifier c(options);
  EXPECT_EQ(c.Classify(WithStatus(503), kPost).cls, AttemptClass::kAmbiguous);
  // The override applies to every request; an idempotent one is still
  // retried, by the state machine.
  EXPECT_EQ(c.Classify(WithStatus(503), kGet).cls, AttemptClass::kAmbiguous);
  EXPECT_EQ(c.Classify(WithStatus(404), kPost).cls, AttemptClass::kRetryableTransient);
  EXPECT_EQ(c.Classify(WithStatus(429), kPost).cls, AttemptClass::kRetryableTransient);
}

AttemptEvidence CertificateRejected() {
  AttemptEvidence ev;
  ev.delivery = Delivery::kNotSent;
  ev.transport_status = absl::UnauthenticatedError("SSL peer certificate was not OK");
  return ev;
}

AttemptEvidence Rejected(int status) {
  AttemptEvidence ev = WithStatus(status);
  ev.hints.key_state = KeyState::kRejected;
  return ev;
}

// An unmarked 503 is an answer, not a proof (docs/adr/0031): the class says
// so for every request, a Retry-After included; the server's mark makes it
// transient, and so does the policy's declaration for its endpoint.
TEST(ClassifierTest, UnmarkedUnavailableIsUnprovenForEveryRequest) {
  for (const RequestTraits& t : {kPost, kPostNoKey, kPut, kGet}) {
    EXPECT_EQ(Classify(WithStatus(503), t), AttemptClass::kUnavailableUnproven);
    AttemptEvidence hinted = WithStatus(503);
    hinted.hints.retry_after = std::chrono::seconds(1);
    EXPECT_EQ(Classify(hinted, t), AttemptClass::kUnavailableUnproven);
    EXPECT_EQ(Classify(Rejected(503), t), AttemptClass::kRetryableTransient);
  }
  ClassifierOptions origin;
  origin.status_overrides[503] = AttemptClass::kRetryableTransient;
  const DefaultClassifier declared(origin);
  EXPECT_EQ(declared.Classify(WithStatus(503), kPost).cls, AttemptClass::kRetryableTransient);
}

TEST(ClassifierTest, TlsCertificateRejectedIsPermanent) {
  for (const RequestTraits& t : {kPost, kPostNoKey, kPut, kGet}) {
    const Classification c = DefaultClassifier().Classify(CertificateRejected(), t);
    EXPECT_EQ(c.cls, AttemptClass::kPermanent);
    EXPECT_EQ(c.reason, "TLS certificate rejected: retrying cannot help");
  }
}

TEST(ClassifierTest, OtherNotSentFailuresStayRetryable) {
  for (absl::Status status :
       {absl::UnavailableError("refused"), absl::FailedPreconditionError("cipher"),
        absl::DeadlineExceededError("connect timeout"), absl::InternalError("init"),
        absl::PermissionDeniedError("denied")}) {
    AttemptEvidence ev;
    ev.delivery = Delivery::kNotSent;
    ev.transport_status = status;
    EXPECT_EQ(Classify(ev, kPost), AttemptClass::kRetryableNotDelivered) << status;
  }
}

TEST(ClassifierTest, CertificateFailureAfterAnEarlierSendStaysAmbiguous) {
  // A reconnect's handshake failed after a request was handed to the first
  // connection: that request may have been delivered.
  AttemptEvidence ev = CertificateRejected();
  ev.delivery = Delivery::kMaybeDelivered;
  EXPECT_EQ(Classify(ev, kPost), AttemptClass::kAmbiguous);
  EXPECT_EQ(Classify(ev, kGet), AttemptClass::kAmbiguous);
}

TEST(ClassifierTest, RejectedBeforeWorkRetryableStatuses) {
  for (int s : {408, 425, 429, 503}) {
    for (const RequestTraits& t : {kPost, kPostNoKey, kPut, kGet}) {
      const Classification c = DefaultClassifier().Classify(Rejected(s), t);
      EXPECT_EQ(c.cls, AttemptClass::kRetryableTransient) << s;
      EXPECT_EQ(c.reason,
                "rejected before any work (Idempotency-Key-State): not applied, retryable status")
          << s;
    }
  }
}

TEST(ClassifierTest, RejectedBeforeWorkOtherStatusesArePermanent) {
  // 5xx that would be ambiguous, 409 that would be "in progress", even a 2xx:
  // the server says nothing was done, and the status is not one to retry.
  for (int s : {500, 502, 504, 599, 400, 404, 409, 412, 422, 200, 202}) {
    for (const RequestTraits& t : {kPost, kPostNoKey, kPut, kGet}) {
      const Classification c = DefaultClassifier().Classify(Rejected(s), t);
      EXPECT_EQ(c.cls, AttemptClass::kPermanent) << s;
      EXPECT_EQ(c.reason, "rejected before any work (Idempotency-Key-State): not applied") << s;
    }
  }
}

TEST(ClassifierTest, RejectedBeatsStatusOverrides) {
  ClassifierOptions options;
  options.status_overrides[503] = AttemptClass::kAmbiguous;
  options.status_overrides[504] = AttemptClass::kRetryableTransient;
  options.status_overrides[500] = AttemptClass::kSuccess;
  DefaultClassifier c(options);
  EXPECT_EQ(c.Classify(Rejected(503), kPost).cls, AttemptClass::kRetryableTransient);
  EXPECT_EQ(c.Classify(Rejected(504), kPost).cls, AttemptClass::kPermanent);
  EXPECT_EQ(c.Classify(Rejected(500), kPost).cls, AttemptClass::kPermanent);
  // Without the header the overrides still apply.
  EXPECT_EQ(c.Classify(WithStatus(503), kPost).cls, AttemptClass::kAmbiguous);
  EXPECT_EQ(c.Classify(WithStatus(504), kPost).cls, AttemptClass::kRetryableTransient);
}

TEST(ClassifierTest, OnlyRejectedKeyStateChangesTheClass) {
  for (KeyState state :
       {KeyState::kNone, KeyState::kCompleted, KeyState::kProcessing, KeyState::kAbandoned,
        KeyState::kExpired, KeyState::kUnknown, KeyState::kFenced}) {
    AttemptEvidence ev = WithStatus(504);
    ev.hints.key_state = state;
    EXPECT_EQ(Classify(ev, kPost), AttemptClass::kAmbiguous) << static_cast<int>(state);
    ev = WithStatus(503);
    ev.hints.key_state = state;
    EXPECT_EQ(Classify(ev, kPost), AttemptClass::kUnavailableUnproven) << static_cast<int>(state);
  }
}

TEST(ClassifierTest, RejectedNeedsACompleteResponse) {
  // Headers said "rejected" but the body broke: the existing rule for a
  // broken response applies.
  AttemptEvidence ev = Rejected(503);
  ev.transport_status = absl::UnavailableError("reset mid-body");
  EXPECT_EQ(Classify(ev, kPost), AttemptClass::kAmbiguous);
}

TEST(ClassifierTest, ReasonsAreNamed) {
  const Classification c = DefaultClassifier().Classify(WithStatus(422), kPost);
  EXPECT_NE(c.reason.find("idempotency key reused"), std::string_view::npos);
  EXPECT_FALSE(DefaultClassifier().Classify(NotSent(), kPost).reason.empty());
}

}  // namespace
}  // namespace saferetry

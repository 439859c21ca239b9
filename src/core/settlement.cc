// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/settlement.h"

namespace saferetry {
namespace {

// 409, 410, 422 and 429 say something about the key or the server's load,
// never about the intent's effect, even when marked.
bool SpeaksOfTheKeyOrTheLoad(int code) {
  return code == 409 || code == 410 || code == 422 || code == 429;
}

}  // namespace

Proof ProofOfAnswer(const AttemptEvidence& evidence) {
  if (!evidence.http_status.has_value()) return Proof::kNothing;
  const int code = *evidence.http_status;
  if (code >= 200 && code < 300) return Proof::kTookEffect;
  if (IsFencedAnswer(evidence)) return Proof::kNoEffect;
  if (code < 400 || code > 499 || SpeaksOfTheKeyOrTheLoad(code)) return Proof::kNothing;
  // `rejected` speaks of this attempt only; the marks below speak of the key.
  const bool stored = evidence.hints.replayed || evidence.hints.key_state == KeyState::kCompleted;
  return stored ? Proof::kNoEffect : Proof::kNothing;
}

Proof ProofOfStatusAnswer(StatusAnswer answer) {
  switch (answer) {
    case StatusAnswer::kFound:
      return Proof::kTookEffect;
    case StatusAnswer::kCompletedWithError:
    case StatusAnswer::kFenced:
      return Proof::kNoEffect;
    case StatusAnswer::kNotFound:
    case StatusAnswer::kExpired:
    case StatusAnswer::kPendingConfirmation:
    case StatusAnswer::kProcessing:
    case StatusAnswer::kStillUnknown:
      return Proof::kNothing;
  }
  return Proof::kNothing;
}

}  // namespace saferetry

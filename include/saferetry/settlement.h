// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// What one answer proves about an intent's effect: the single rule for
// "definite" that the state machine, the call setup and `Client::Resolve`
// share (docs/outcomes.md, docs/adr/0007-definite-answers.md). Once an
// attempt may have taken effect, only an answer this file calls definite may
// end the call SUCCEEDED or FAILED; any other ends it UNKNOWN or leads to a
// status query, never to FAILED.
//
//   answer                                                       proves
//   -----------------------------------------------------------  -----------
//   a 2xx response to the request (first try, resend, replay)    took effect
//   410 + Idempotency-Key-State: fenced                          no effect
//   a final 4xx other than 409, 410, 422, 429 that the server    no effect
//     marks as the key's stored answer (`Idempotent-Replayed:
//     true` or `Idempotency-Key-State: completed`)
//   status answer 2xx (found)                                    took effect
//   status answer 404 + completed (the stored final error)       no effect
//   status answer 404 + fenced                                   no effect
//   anything else: 5xx (a 503 too, marked `rejected` or not), 409, 410 (expired or without a
//   state),   nothing
//     422, 429, an unmarked 4xx, `rejected` (about this attempt
//     only), a status "not found", "expired", "processing", a
//     transport failure
//
// A request whose history holds no attempt that may have taken effect (for
// instance a minted key on its first attempt) is not bound by this table: a
// final 4xx then ends it FAILED as before, because nothing happened before it.
// One exception: a 410 that is not fenced answers a key that was used before
// this call; for a key the call did not mint it counts as "may have taken
// effect" (`IsExpiredKeyAnswer`).
//
// @code
//   if (ProofOfAnswer(evidence) == Proof::kNoEffect) { /* definite FAILED */ }
// @endcode

#ifndef SAFERETRY_SETTLEMENT_H_
#define SAFERETRY_SETTLEMENT_H_

#include "saferetry/result.h"
#include "saferetry/status_query.h"

namespace saferetry {

/// What an answer proves about the intent's effect.
enum class Proof {
  kNothing,     ///< Not definite: the effect may or may not exist.
  kTookEffect,  ///< The intent took effect (exactly once, for a keyed request).
  kNoEffect,    ///< The intent has no effect and never will.
};

/// The proof of an answer to a send of the request, from its status and its
/// hints (`Idempotent-Replayed`, `Idempotency-Key-State`). No HTTP status:
/// `kNothing`.
Proof ProofOfAnswer(const AttemptEvidence& evidence);

/// The proof of a status answer: found took effect; a stored final error and
/// a fenced "not found" have no effect; everything else proves nothing.
Proof ProofOfStatusAnswer(StatusAnswer answer);

/// Whether an attempt of class `cls` may have taken effect (for a request
/// that is not safe): its answer was lost (`kAmbiguous`), was an unmarked 503
/// (`kUnavailableUnproven`), or said the key is still being processed
/// (`kInProgress`). The one rule the state machine and the drivers share.
inline bool MayHaveTakenEffect(AttemptClass cls) {
  return cls == AttemptClass::kAmbiguous || cls == AttemptClass::kUnavailableUnproven ||
         cls == AttemptClass::kInProgress;
}

/// A 410 that is not fenced (`expired`, or no key state): the server's record
/// of the key is gone, so the key was used before and the effect may exist.
/// Never a reason to resend: the server will not execute the key again.
inline bool IsExpiredKeyAnswer(const AttemptEvidence& evidence) {
  return evidence.http_status == 410 && evidence.hints.key_state != KeyState::kFenced;
}

/// A 410 with `Idempotency-Key-State: fenced`: no request with the key was or
/// will be executed.
inline bool IsFencedAnswer(const AttemptEvidence& evidence) {
  return evidence.http_status == 410 && evidence.hints.key_state == KeyState::kFenced;
}

}  // namespace saferetry

#endif  // SAFERETRY_SETTLEMENT_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The SQLite-free half of the intent journal: state names, building an
// intent from a request, and the rules every implementation shares, so the
// SQLite journal and the in-memory one cannot drift apart.

#include "saferetry/journal.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/sha256.h"
#include "saferetry/idempotency.h"
#include "saferetry/redaction.h"

namespace saferetry {
namespace {

constexpr std::chrono::milliseconds kMaxClaimGrace = std::chrono::seconds(5);

bool IsLowerHexDigest(std::string_view s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// RFC 9110 §5.6.2 tchar.
bool IsTokenChar(char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

}  // namespace

std::string_view IntentStateName(IntentState state) {
  switch (state) {
    case IntentState::kPending:
      return "PENDING";
    case IntentState::kSent:
      return "SENT";
    case IntentState::kSucceeded:
      return "SUCCEEDED";
    case IntentState::kFailed:
      return "FAILED";
    case IntentState::kUnknown:
      return "UNKNOWN";
  }
  return "UNKNOWN";
}

std::optional<IntentState> ParseIntentState(std::string_view name) {
  for (IntentState s : {IntentState::kPending, IntentState::kSent, IntentState::kSucceeded,
                        IntentState::kFailed, IntentState::kUnknown}) {
    if (IntentStateName(s) == name) return s;
  }
  return std::nullopt;
}

bool IsResolved(IntentState state) {
  return state == IntentState::kSucceeded || state == IntentState::kFailed;
}

std::string BodyDigest(std::string_view body) { return internal::Sha256Hex(body); }

Intent MakeIntent(const Request& request, std::string key, std::string status_url_template,
                  WallTime created, WallTime deadline,
                  const std::vector<std::string>& extra_secret_headers) {
  Intent intent;
  intent.key = std::move(key);
  intent.method = request.method;
  intent.url = RedactUrl(request.url);
  intent.body_digest = BodyDigest(request.body);
  intent.body = request.body;
  intent.status_url_template = RedactUrl(status_url_template);
  for (const Header& h : request.headers) {
    if (!IsSecretHeader(h.first, extra_secret_headers)) intent.headers.push_back(h);
  }
  intent.created = created;
  intent.deadline = deadline;
  return intent;
}

std::string DefaultJournalOwner() {
  // Drawn once per process start (a forked child that goes on without exec
  // has its own pid, so the name stays unique).
  static const std::string* const kInstance = [] {
    std::string instance;
    absl::StatusOr<std::string> key = MintIdempotencyKey();
    if (key.ok()) {
      for (char c : *key) {
        if (c != '-' && instance.size() < 16) instance.push_back(c);
      }
    }
    if (instance.empty()) {
      // No CSPRNG: the monotonic clock at first use still tells two starts
      // of the same pid apart.
      instance = absl::StrCat(std::chrono::steady_clock::now().time_since_epoch().count());
    }
    return new std::string(instance);
  }();
  char host[HOST_NAME_MAX + 1] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  return absl::StrCat(host[0] != '\0' ? host : "localhost", ":", static_cast<long>(getpid()), ":",
                      *kInstance);
}

namespace internal {

std::int64_t ToUnixMillis(WallTime t) {
  return std::chrono::floor<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

WallTime FromUnixMillis(std::int64_t ms) {
  return WallTime(std::chrono::duration_cast<WallTime::duration>(std::chrono::milliseconds(ms)));
}

absl::Status ValidateHeaders(const Headers& headers) {
  if (headers.size() > kMaxStoredHeaders) {
    return absl::InvalidArgumentError(
        absl::StrCat("headers: at most ", kMaxStoredHeaders, " headers, got ", headers.size()));
  }
  for (const Header& h : headers) {
    if (h.first.empty() || h.first.size() > kMaxHeaderBytes ||
        !std::all_of(h.first.begin(), h.first.end(), IsTokenChar)) {
      return absl::InvalidArgumentError(
          absl::StrCat("headers: name \"", h.first.substr(0, 64), "\" is not an HTTP token"));
    }
    if (h.second.size() > kMaxHeaderBytes ||
        h.second.find_first_of(std::string_view("\r\n\0", 3)) != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("headers: the value of ", h.first, " holds CR, LF or NUL, or is too long"));
    }
  }
  return absl::OkStatus();
}

IntentSummary RedactSummary(const IntentSummary& summary) {
  IntentSummary out = summary;
  out.last_error = RedactUrlsInText(summary.last_error);
  return out;
}

std::string JournalOwner(const JournalOptions& options) {
  if (!options.owner.empty()) return options.owner;
  return DefaultJournalOwner();
}

absl::Status ValidateJournalOptions(const JournalOptions& options) {
  if (options.claim_grace.count() < 0 || options.claim_grace > kMaxClaimGrace) {
    return absl::InvalidArgumentError(absl::StrCat("claim_grace: must be from 0 to 5000ms, got ",
                                                   options.claim_grace.count(), "ms"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Intent> NormalizeIntent(const Intent& intent, const JournalOptions& options,
                                       std::string_view owner, WallTime now) {
  if (auto s = ValidateIdempotencyKey(intent.key); !s.ok()) return s;
  if (intent.method.empty()) return absl::InvalidArgumentError("method: must not be empty");
  if (intent.url.empty()) return absl::InvalidArgumentError("url: must not be empty");
  if (!IsLowerHexDigest(intent.body_digest)) {
    return absl::InvalidArgumentError(
        "body_digest: must be the SHA-256 of the body as 64 lower-case hex digits (BodyDigest)");
  }
  if (intent.body.has_value() && BodyDigest(*intent.body) != intent.body_digest) {
    return absl::InvalidArgumentError("body_digest: does not match the body");
  }
  Intent out;
  out.key = intent.key;
  out.method = intent.method;
  out.url = RedactUrl(intent.url);
  out.body_digest = intent.body_digest;
  if (intent.body.has_value() && options.body_cap > 0 && intent.body->size() <= options.body_cap) {
    out.body = intent.body;
  }
  out.status_url_template = RedactUrl(intent.status_url_template);
  for (const Header& h : intent.headers) {
    if (!IsSecretHeader(h.first, options.extra_secret_headers)) out.headers.push_back(h);
  }
  if (auto s = ValidateHeaders(out.headers); !s.ok()) return s;
  const std::int64_t now_ms = ToUnixMillis(now);
  const std::int64_t created_ms =
      intent.created == WallTime{} ? now_ms : ToUnixMillis(intent.created);
  if (intent.deadline == WallTime{}) {
    return absl::InvalidArgumentError("deadline: must be set (wall clock)");
  }
  const std::int64_t deadline_ms = ToUnixMillis(intent.deadline);
  if (deadline_ms > kMaxUnixMillis - kMaxClaimGrace.count() || created_ms < -kMaxUnixMillis) {
    return absl::InvalidArgumentError("deadline: out of range");
  }
  if (deadline_ms < created_ms) {
    return absl::InvalidArgumentError(
        absl::StrCat("deadline: ", deadline_ms, " (Unix ms) is before created ", created_ms));
  }
  out.created = FromUnixMillis(created_ms);
  out.deadline = FromUnixMillis(deadline_ms);
  if (intent.attempt != 0 && intent.attempt != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attempt: must be 0 (record PENDING) or 1 (record with attempt 1 marked sent), got ",
        intent.attempt));
  }
  out.state = intent.attempt == 1 ? IntentState::kSent : IntentState::kPending;
  out.attempt = intent.attempt;
  out.claim_owner = std::string(owner);
  out.claim_until = FromUnixMillis(deadline_ms + options.claim_grace.count());
  out.updated = FromUnixMillis(now_ms);
  return out;
}

absl::Status CheckSameIntent(const Intent& stored, const Intent& incoming) {
  const char* what = nullptr;
  if (stored.method != incoming.method) {
    what = "method";
  } else if (stored.url != incoming.url) {
    what = "url";
  } else if (stored.body_digest != incoming.body_digest) {
    what = "body";
  }
  if (what == nullptr) return absl::OkStatus();
  return absl::AlreadyExistsError(absl::StrCat(
      "idempotency_key: \"", stored.key, "\" is already recorded for another request (a different ",
      what, "); a new intent needs a new key"));
}

absl::Status CheckMarkSent(const Intent& stored, int attempt) {
  if (IsResolved(stored.state)) {
    return absl::FailedPreconditionError(absl::StrCat("state: intent \"", stored.key, "\" is ",
                                                      std::string(IntentStateName(stored.state)),
                                                      "; a resolved intent cannot be marked SENT"));
  }
  if (attempt < 1 || attempt <= stored.attempt) {
    return absl::InvalidArgumentError(
        absl::StrCat("attempt: must be >= 1 and greater than ", stored.attempt, ", got ", attempt));
  }
  return absl::OkStatus();
}

absl::Status CheckFinish(const Intent& stored, IntentState outcome) {
  if (outcome != IntentState::kSucceeded && outcome != IntentState::kFailed &&
      outcome != IntentState::kUnknown) {
    return absl::InvalidArgumentError(
        absl::StrCat("outcome: must be SUCCEEDED, FAILED or UNKNOWN, got ",
                     std::string(IntentStateName(outcome))));
  }
  if (IsResolved(stored.state)) {
    return absl::FailedPreconditionError(
        absl::StrCat("state: intent \"", stored.key, "\" is already ",
                     std::string(IntentStateName(stored.state)), "; it cannot become ",
                     std::string(IntentStateName(outcome))));
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace saferetry

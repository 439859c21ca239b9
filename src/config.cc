// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// JSON policy loading. Every value is type-checked before it is read, and the
// parser runs in its non-throwing mode, so no nlohmann exception can escape:
// bad input becomes an InvalidArgument naming the JSON path.

#include "saferetry/config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "nlohmann/json.hpp"
#include "saferetry/call_state_machine.h"
#include "saferetry/classifier.h"
#include "saferetry/request.h"
#include "saferetry/status_query.h"

namespace saferetry {
namespace {

using nlohmann::json;

// absl::StrCat does not take std::string_view in this Abseil build.
template <typename... Args>
std::string Cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

std::string Join(const std::vector<std::string_view>& parts, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out.append(sep);
    out.append(parts[i]);
  }
  return out;
}

constexpr std::size_t kMaxDocumentBytes = 1 << 20;
// Durations above this (100 years) are refused: they could not be meant, and
// they keep every sum of durations far from overflowing nanoseconds.
constexpr std::int64_t kMaxDurationSeconds = 3153600000;

// ---------------------------------------------------------------------------
// gRPC status codes and their HTTP meaning.

const std::vector<std::string_view>& CodeNames() {
  static const auto* const kNames = new std::vector<std::string_view>{
      "OK",           "CANCELLED",         "UNKNOWN",          "INVALID_ARGUMENT",
      "DEADLINE_EXCEEDED", "NOT_FOUND",    "ALREADY_EXISTS",   "PERMISSION_DENIED",
      "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",  "OUT_OF_RANGE",
      "UNIMPLEMENTED", "INTERNAL",         "UNAVAILABLE",      "DATA_LOSS",
      "UNAUTHENTICATED"};
  return *kNames;
}

// google.rpc.Code's HTTP mapping, plus 502 for UNAVAILABLE (a gateway could
// not reach the service). UNKNOWN also stands for every 1xx, 3xx and 5xx that
// no other code names (see `IsUnknownStatus`).
std::vector<int> StatusesFor(std::string_view code) {
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

bool IsNamedStatus(int status) {
  switch (status) {
    case 400: case 401: case 403: case 404: case 409: case 429: case 499:
    case 500: case 501: case 502: case 503: case 504:
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

// The classifier behind `retryableStatusCodes`. Rules (docs/configuration.md):
// explicit overrides win; a request that was certainly not delivered is
// always retryable (gRPC's transparent retry); an attempt that may have taken
// effect stays ambiguous for a non-idempotent request whatever the list says,
// and is retried for an idempotent one only when its code is listed; a status
// that proves the request was not processed is retried only when listed.
class RetryableCodesClassifier final : public Classifier {
 public:
  explicit RetryableCodesClassifier(const Policy& policy)
      : inner_(ClassifierOptions{policy.status_overrides}),
        overrides_(policy.status_overrides),
        statuses_(policy.retryable_http_statuses),
        unknown_listed_(policy.retryable_codes.count("UNKNOWN") > 0),
        timeouts_listed_(policy.retryable_codes.count("DEADLINE_EXCEEDED") > 0),
        resets_listed_(policy.retryable_codes.count("UNAVAILABLE") > 0) {
    for (const std::string& code : policy.retryable_codes) {
      for (int s : StatusesFor(code)) statuses_.insert(s);
    }
  }

  Classification Classify(const AttemptEvidence& evidence,
                          const RequestTraits& traits) const override {
    if (evidence.delivery == Delivery::kNotSent) return inner_.Classify(evidence, traits);
    const bool no_response = evidence.delivery == Delivery::kMaybeDelivered ||
                             !evidence.transport_status.ok() || !evidence.http_status.has_value();
    if (no_response) {
      if (!traits.idempotent) return inner_.Classify(evidence, traits);
      const bool timeout =
          evidence.transport_status.code() == absl::StatusCode::kDeadlineExceeded;
      if (timeout ? timeouts_listed_ : resets_listed_) {
        return {AttemptClass::kRetryableTransient,
                "retryableStatusCodes: idempotent request, no complete response"};
      }
      return {AttemptClass::kAmbiguous,
              "no complete response; its code is not in retryableStatusCodes"};
    }
    const int status = *evidence.http_status;
    const bool listed = statuses_.count(status) > 0 || (unknown_listed_ && IsUnknownStatus(status));
    if (overrides_.count(status) > 0 ||
        (!IsNamedStatus(status) && !IsUnknownStatus(status) && !listed)) {
      return inner_.Classify(evidence, traits);
    }
    RequestTraits as_unsafe = traits;
    as_unsafe.idempotent = false;
    const Classification base = inner_.Classify(evidence, as_unsafe);
    switch (base.cls) {
      case AttemptClass::kAmbiguous:
        if (!traits.idempotent) return base;
        if (listed) {
          return {AttemptClass::kRetryableTransient,
                  "retryableStatusCodes: idempotent request, may have taken effect"};
        }
        return {AttemptClass::kAmbiguous,
                "may have taken effect; its code is not in retryableStatusCodes"};
      case AttemptClass::kRetryableTransient:
        if (listed) return base;
        return {AttemptClass::kPermanent,
                "not processed; its code is not in retryableStatusCodes"};
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

 private:
  DefaultClassifier inner_;
  std::map<int, AttemptClass> overrides_;
  std::set<int> statuses_;
  bool unknown_listed_;
  bool timeouts_listed_;
  bool resets_listed_;
};

// ---------------------------------------------------------------------------
// Value formats.

std::string Show(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

std::string TypeWord(const json& j) {
  if (j.is_object()) return "an object";
  if (j.is_array()) return "an array";
  return Show(j);
}

bool IsIdentifier(std::string_view key) {
  if (key.empty()) return false;
  if (!absl::ascii_isalpha(static_cast<unsigned char>(key[0])) && key[0] != '_') return false;
  return std::all_of(key.begin(), key.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

std::string Child(const std::string& path, std::string_view key) {
  if (IsIdentifier(key)) return Cat(path, ".", key);
  return Cat(path, "[", json(std::string(key)).dump(-1, ' ', false,
                                                             json::error_handler_t::replace),
                      "]");
}

std::string Index(const std::string& path, std::size_t i) { return Cat(path, "[", i, "]"); }

absl::Status Expected(const std::string& path, std::string_view what, const json& got) {
  return absl::InvalidArgumentError(Cat(path, ": expected ", what, ", got ", TypeWord(got)));
}

absl::Status Invalid(const std::string& path, std::string_view message) {
  return absl::InvalidArgumentError(Cat(path, ": ", message));
}

// Parses proto3 JSON Duration text: decimal seconds, up to nine fractional
// digits, an "s" suffix ("0.1s", "1s", "2.500s").
bool ParseProtoDuration(std::string_view text, Duration* out) {
  if (text.empty() || text.back() != 's') return false;
  text.remove_suffix(1);
  std::string_view whole = text;
  std::string_view frac;
  const std::size_t dot = text.find('.');
  if (dot != std::string_view::npos) {
    whole = text.substr(0, dot);
    frac = text.substr(dot + 1);
    if (frac.empty() || frac.size() > 9) return false;
  }
  if (whole.empty() || whole.size() > 12) return false;
  auto digits = [](std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (!digits(whole) || !digits(frac)) return false;
  std::int64_t seconds = 0;
  for (char c : whole) seconds = seconds * 10 + (c - '0');
  if (seconds > kMaxDurationSeconds) return false;
  std::int64_t nanos = 0;
  for (std::size_t i = 0; i < 9; ++i) nanos = nanos * 10 + (i < frac.size() ? frac[i] - '0' : 0);
  *out = std::chrono::seconds(seconds) + Duration(nanos);
  return true;
}

// proto3's canonical form: 0, 3, 6 or 9 fractional digits.
std::string FormatProtoDuration(Duration d) {
  const std::int64_t ns = d.count();
  const std::int64_t seconds = ns / 1000000000;
  const std::int64_t frac = ns % 1000000000;
  if (frac == 0) return Cat(seconds, "s");
  std::string digits = std::to_string(frac);
  digits.insert(0, 9 - digits.size(), '0');
  if (frac % 1000000 == 0) {
    digits.resize(3);
  } else if (frac % 1000 == 0) {
    digits.resize(6);
  }
  return Cat(seconds, ".", digits, "s");
}

// ---------------------------------------------------------------------------
// Typed readers. Each checks the type before touching the value.

absl::Status ReadObject(const json& j, const std::string& path) {
  if (!j.is_object()) return Expected(path, "an object", j);
  return absl::OkStatus();
}

absl::Status CheckKeys(const json& j, const std::string& path,
                       const std::vector<std::string_view>& allowed) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (std::find(allowed.begin(), allowed.end(), it.key()) == allowed.end()) {
      return Invalid(Child(path, it.key()),
                     Cat("unknown field (expected one of ", Join(allowed, ", "),
                                  ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status ReadInt(const json& j, const std::string& path, std::int64_t min, std::int64_t max,
                     std::int64_t* out) {
  const std::string what = max == std::numeric_limits<std::int64_t>::max()
                               ? Cat("an integer >= ", min)
                               : Cat("an integer in [", min, ", ", max, "]");
  if (j.is_number_unsigned()) {
    const std::uint64_t v = j.get<std::uint64_t>();
    if (v > static_cast<std::uint64_t>(max)) return Expected(path, what, j);
    *out = static_cast<std::int64_t>(v);
    return *out < min ? Expected(path, what, j) : absl::OkStatus();
  }
  if (!j.is_number_integer()) return Expected(path, what, j);
  const std::int64_t v = j.get<std::int64_t>();
  if (v < min || v > max) return Expected(path, what, j);
  *out = v;
  return absl::OkStatus();
}

absl::Status ReadNumber(const json& j, const std::string& path, double min, double max,
                        bool min_exclusive, double* out) {
  std::string what;
  if (std::isinf(max)) {
    what = Cat("a number ", min_exclusive ? "> " : ">= ", min);
  } else {
    what = Cat("a number in ", min_exclusive ? "(" : "[", min, ", ", max, "]");
  }
  if (!j.is_number()) return Expected(path, what, j);
  const double v = j.get<double>();
  if (!std::isfinite(v) || v < min || (min_exclusive && v == min) || v > max) {
    return Expected(path, what, j);
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status ReadBool(const json& j, const std::string& path, bool* out) {
  if (!j.is_boolean()) return Expected(path, "true or false", j);
  *out = j.get<bool>();
  return absl::OkStatus();
}

absl::Status ReadString(const json& j, const std::string& path, std::string* out) {
  if (!j.is_string()) return Expected(path, "a string", j);
  *out = j.get<std::string>();
  return absl::OkStatus();
}

absl::Status ReadDuration(const json& j, const std::string& path, bool allow_zero, Duration* out) {
  const std::string what = Cat("a duration ", allow_zero ? ">= 0" : "> 0",
                                        " like \"0.1s\" (decimal seconds, \"s\" suffix)");
  Duration d{0};
  if (!j.is_string() || !ParseProtoDuration(j.get_ref<const std::string&>(), &d)) {
    return Expected(path, what, j);
  }
  if (!allow_zero && d <= Duration::zero()) return Expected(path, what, j);
  *out = d;
  return absl::OkStatus();
}

// A header name, or empty when `allow_empty`.
absl::Status ReadHeaderName(const json& j, const std::string& path, bool allow_empty,
                            std::string* out) {
  const std::string what =
      allow_empty ? "a header name (a token) or \"\" to disable" : "a header name (a token)";
  if (!j.is_string()) return Expected(path, what, j);
  const std::string& name = j.get_ref<const std::string&>();
  if (name.empty() && allow_empty) {
    out->clear();
    return absl::OkStatus();
  }
  if (!ValidateHeader({name, "x"}, "h").ok()) return Expected(path, what, j);
  *out = name;
  return absl::OkStatus();
}

#define SAFERETRY_RETURN_IF_ERROR(expr) \
  do {                                  \
    absl::Status _s = (expr);           \
    if (!_s.ok()) return _s;            \
  } while (false)

// ---------------------------------------------------------------------------
// Document sections.

struct Loader {
  Policy* policy;
  // Which budget objects were present, for the consistency check.
  bool saw_throttling = false;
  bool saw_ratio = false;
  bool saw_quota = false;
  bool saw_budget_name = false;
  bool saw_attempt_timeout = false;
  bool saw_deadline = false;

  void Warn(std::string w) { policy->warnings.push_back(std::move(w)); }

  // `grpc_required`: inside a gRPC service config, where gRPC requires the
  // five classic fields.
  absl::Status RetryPolicy(const json& j, const std::string& path, bool grpc_required) {
    SAFERETRY_RETURN_IF_ERROR(ReadObject(j, path));
    SAFERETRY_RETURN_IF_ERROR(CheckKeys(j, path,
                                        {"maxAttempts", "initialBackoff", "maxBackoff",
                                         "backoffMultiplier", "retryableStatusCodes",
                                         "perAttemptRecvTimeout"}));
    if (grpc_required) {
      for (std::string_view f : {"maxAttempts", "initialBackoff", "maxBackoff",
                                 "backoffMultiplier", "retryableStatusCodes"}) {
        if (!j.contains(f)) return Invalid(Child(path, f), "required in a gRPC retryPolicy");
      }
    }
    if (j.contains("maxAttempts")) {
      std::int64_t v = 0;
      SAFERETRY_RETURN_IF_ERROR(ReadInt(j["maxAttempts"], Child(path, "maxAttempts"), 1,
                                        std::numeric_limits<std::int64_t>::max(), &v));
      if (v > kMaxAttemptsHardCap) {
        Warn(Cat(Child(path, "maxAttempts"), ": ", v, " is above the hard cap of ",
                          kMaxAttemptsHardCap, "; clamped to ", kMaxAttemptsHardCap));
        v = kMaxAttemptsHardCap;
      }
      policy->max_attempts = static_cast<int>(v);
    }
    if (j.contains("initialBackoff")) {
      SAFERETRY_RETURN_IF_ERROR(ReadDuration(j["initialBackoff"], Child(path, "initialBackoff"),
                                             false, &policy->backoff.base));
    }
    if (j.contains("maxBackoff")) {
      SAFERETRY_RETURN_IF_ERROR(
          ReadDuration(j["maxBackoff"], Child(path, "maxBackoff"), false, &policy->backoff.cap));
    }
    if (policy->backoff.cap < policy->backoff.base) {
      return Invalid(Child(path, "maxBackoff"),
                     Cat("expected a duration >= initialBackoff (",
                                  FormatProtoDuration(policy->backoff.base), "), got \"",
                                  FormatProtoDuration(policy->backoff.cap), "\""));
    }
    if (j.contains("backoffMultiplier")) {
      SAFERETRY_RETURN_IF_ERROR(ReadNumber(j["backoffMultiplier"],
                                           Child(path, "backoffMultiplier"), 1,
                                           std::numeric_limits<double>::infinity(), false,
                                           &policy->backoff.multiplier));
    }
    if (j.contains("perAttemptRecvTimeout")) {
      Duration d{0};
      SAFERETRY_RETURN_IF_ERROR(ReadDuration(j["perAttemptRecvTimeout"],
                                             Child(path, "perAttemptRecvTimeout"), false, &d));
      policy->deadline_options.attempt_cap = d;
      saw_attempt_timeout = true;
    }
    if (j.contains("retryableStatusCodes")) {
      SAFERETRY_RETURN_IF_ERROR(
          RetryableCodes(j["retryableStatusCodes"], Child(path, "retryableStatusCodes")));
    }
    return absl::OkStatus();
  }

  absl::Status RetryableCodes(const json& j, const std::string& path) {
    if (!j.is_array() || j.empty()) return Expected(path, "a non-empty array", j);
    const auto& names = CodeNames();
    for (std::size_t i = 0; i < j.size(); ++i) {
      const json& e = j[i];
      const std::string p = Index(path, i);
      constexpr std::string_view kWhat =
          "a gRPC status code name other than OK (\"UNAVAILABLE\"), a code number 1..16, or an "
          "HTTP status 400..599";
      if (e.is_string()) {
        const std::string name = absl::AsciiStrToUpper(e.get_ref<const std::string&>());
        auto it = std::find(names.begin() + 1, names.end(), name);
        if (it == names.end()) return Expected(p, kWhat, e);
        policy->retryable_codes.insert(name);
      } else if (e.is_number_integer()) {
        std::int64_t v = 0;
        if (!ReadInt(e, p, 1, 599, &v).ok() || (v > 16 && v < 400)) return Expected(p, kWhat, e);
        if (v <= 16) {
          policy->retryable_codes.insert(std::string(names[static_cast<std::size_t>(v)]));
        } else {
          policy->retryable_http_statuses.insert(static_cast<int>(v));
        }
      } else {
        return Expected(p, kWhat, e);
      }
    }
    return absl::OkStatus();
  }

  absl::Status RetryThrottling(const json& j, const std::string& path) {
    SAFERETRY_RETURN_IF_ERROR(ReadObject(j, path));
    SAFERETRY_RETURN_IF_ERROR(CheckKeys(j, path, {"maxTokens", "tokenRatio"}));
    saw_throttling = true;
    // gRPC requires both fields.
    for (std::string_view f : {"maxTokens", "tokenRatio"}) {
      if (!j.contains(f)) return Invalid(Child(path, f), "required");
    }
    SAFERETRY_RETURN_IF_ERROR(ReadNumber(j["maxTokens"], Child(path, "maxTokens"), 0.001, 1000,
                                         false, &policy->token_throttle.max_tokens));
    SAFERETRY_RETURN_IF_ERROR(ReadNumber(j["tokenRatio"], Child(path, "tokenRatio"), 0.001, 1e12,
                                         false, &policy->token_throttle.token_ratio));
    return absl::OkStatus();
  }

  absl::Status Saferetry(const json& j, const std::string& path) {
    SAFERETRY_RETURN_IF_ERROR(ReadObject(j, path));
    SAFERETRY_RETURN_IF_ERROR(CheckKeys(
        j, path,
        {"jitter", "deadline", "attemptTimeout", "deadlineMargin", "minUsefulAttempt",
         "maxStatusQueries", "statusQuery", "serverDeduplicates", "idempotency", "deadlineHeader",
         "attemptHeader", "requestIdHeader", "maxRetryAfter", "doNotRetryHeader", "budget",
         "ratioBudget", "costQuota", "classification"}));
    const auto at = [&](std::string_view k) { return Child(path, k); };
    if (j.contains("jitter")) {
      const json& v = j["jitter"];
      constexpr std::string_view kWhat = "one of \"none\", \"full\", \"equal\", \"decorrelated\"";
      if (!v.is_string() || !ParseJitterKind(v.get_ref<const std::string&>(), &policy->backoff.jitter)) {
        return Expected(at("jitter"), kWhat, v);
      }
    }
    if (j.contains("deadline")) {
      SAFERETRY_RETURN_IF_ERROR(ReadDuration(j["deadline"], at("deadline"), false, &policy->timeout));
      saw_deadline = true;
    }
    if (j.contains("attemptTimeout")) {
      if (saw_attempt_timeout) {
        return Invalid(at("attemptTimeout"), "conflicts with retryPolicy.perAttemptRecvTimeout");
      }
      const json& v = j["attemptTimeout"];
      if (v.is_null()) {
        policy->deadline_options.attempt_cap.reset();
      } else {
        Duration d{0};
        if (!v.is_string() || !ReadDuration(v, at("attemptTimeout"), false, &d).ok()) {
          return Expected(at("attemptTimeout"),
                          "a duration > 0 like \"0.1s\" (decimal seconds, \"s\" suffix) or null",
                          v);
        }
        policy->deadline_options.attempt_cap = d;
      }
    }
    if (j.contains("deadlineMargin")) {
      SAFERETRY_RETURN_IF_ERROR(ReadDuration(j["deadlineMargin"], at("deadlineMargin"), true,
                                             &policy->deadline_options.margin));
    }
    if (j.contains("minUsefulAttempt")) {
      SAFERETRY_RETURN_IF_ERROR(ReadDuration(j["minUsefulAttempt"], at("minUsefulAttempt"), false,
                                             &policy->deadline_options.min_useful_attempt));
    }
    if (j.contains("maxStatusQueries")) {
      std::int64_t v = 0;
      SAFERETRY_RETURN_IF_ERROR(ReadInt(j["maxStatusQueries"], at("maxStatusQueries"), 1,
                                        std::numeric_limits<std::int64_t>::max(), &v));
      if (v > kMaxAttemptsHardCap) {
        Warn(Cat(at("maxStatusQueries"), ": ", v, " is above the hard cap of ",
                          kMaxAttemptsHardCap, "; clamped to ", kMaxAttemptsHardCap));
        v = kMaxAttemptsHardCap;
      }
      policy->max_status_queries = static_cast<int>(v);
    }
    if (j.contains("statusQuery")) SAFERETRY_RETURN_IF_ERROR(StatusQueryObject(j["statusQuery"], at("statusQuery")));
    if (j.contains("serverDeduplicates")) {
      SAFERETRY_RETURN_IF_ERROR(
          ReadBool(j["serverDeduplicates"], at("serverDeduplicates"), &policy->server_deduplicates));
    }
    if (j.contains("idempotency")) SAFERETRY_RETURN_IF_ERROR(IdempotencyObject(j["idempotency"], at("idempotency")));
    if (j.contains("deadlineHeader")) {
      SAFERETRY_RETURN_IF_ERROR(
          ReadHeaderName(j["deadlineHeader"], at("deadlineHeader"), true, &policy->deadline_header));
    }
    if (j.contains("attemptHeader")) {
      SAFERETRY_RETURN_IF_ERROR(
          ReadHeaderName(j["attemptHeader"], at("attemptHeader"), true, &policy->attempt_header));
    }
    if (j.contains("requestIdHeader")) {
      SAFERETRY_RETURN_IF_ERROR(ReadHeaderName(j["requestIdHeader"], at("requestIdHeader"), true,
                                               &policy->request_id_header));
    }
    if (j.contains("maxRetryAfter")) {
      SAFERETRY_RETURN_IF_ERROR(ReadDuration(j["maxRetryAfter"], at("maxRetryAfter"), false,
                                             &policy->hints.max_retry_after));
    }
    if (j.contains("doNotRetryHeader")) {
      SAFERETRY_RETURN_IF_ERROR(ReadHeaderName(j["doNotRetryHeader"], at("doNotRetryHeader"), true,
                                               &policy->hints.do_not_retry_header));
    }
    if (j.contains("budget")) {
      const json& v = j["budget"];
      constexpr std::string_view kWhat =
          "one of \"ratio\", \"tokenThrottle\", \"costQuota\", \"none\"";
      if (!v.is_string()) return Expected(at("budget"), kWhat, v);
      const std::string& name = v.get_ref<const std::string&>();
      bool found = false;
      for (BudgetKind k : {BudgetKind::kRatio, BudgetKind::kTokenThrottle, BudgetKind::kCostQuota,
                           BudgetKind::kNone}) {
        if (name == BudgetKindName(k)) {
          policy->budget = k;
          found = true;
        }
      }
      if (!found) return Expected(at("budget"), kWhat, v);
      saw_budget_name = true;
    }
    if (j.contains("ratioBudget")) SAFERETRY_RETURN_IF_ERROR(Ratio(j["ratioBudget"], at("ratioBudget")));
    if (j.contains("costQuota")) SAFERETRY_RETURN_IF_ERROR(Quota(j["costQuota"], at("costQuota")));
    if (j.contains("classification")) {
      SAFERETRY_RETURN_IF_ERROR(ClassificationObject(j["classification"], at("classification")));
    }
    return absl::OkStatus();
  }

  absl::Status StatusQueryObject(const json& j, const std::string& path) {
    SAFERETRY_RETURN_IF_ERROR(ReadObject(j, path));
    SAFERETRY_RETURN_IF_ERROR(CheckKeys(j, path, {"urlTemplate"}));
    if (!j.contains("urlTemplate")) return absl::OkStatus();
    const std::string p = Child(path, "urlTemplate");
    std::string t;
    SAFERETRY_RETURN_IF_ERROR(ReadString(j["urlTemplate"], p, &t));
    if (!t.empty()) {
      constexpr std::string_view kWhat = "an absolute http(s) URL containing {key}, or \"\"";
      if (t.find("{key}") == std::string::npos) return Expected(p, kWhat, j["urlTemplate"]);
      StatusQuery q;
      q.url_template = t;
      if (!ValidateStatusQuery(q).ok()) return Expected(p, kWhat, j["urlTemplate"]);
    }
    policy->status_query_url_template = std::move(t);
    return absl::OkStatus();
  }

  absl::Status IdempotencyObject(const json& j, const std::string& path) {
    SAFERETRY_RETURN_IF_ERROR(ReadObject(j, path));
    SAFERETRY_RETURN_IF_ERROR(CheckKeys(j, path, {"header", "form", "mode"}));
    if (j.contains("header")) {
      SAFERETRY_RETURN_IF_ERROR(
          ReadHeaderName(j["header"], Child(path, "header"), false, &policy->idempotency_header));
    }
    if (j.contains("form")) {
      const json& v = j["form"];
      const std::string s = v.is_string() ? v.get<std::string>() : std::string();
      if (s == "bare") {
        policy->key_form = KeyForm::kBare;
      } else if (s == "quotedString") {
        policy->key_form = KeyForm::kQuotedString;
      } else {
        return Expected(Child(path, "form"), "one of \"bare\", \"quotedString\"", v);
      }
    }
    if (j.contains("mode")) {
      const json& v = j["mode"];
      const std::string s = v.is_string() ? v.get<std::string>() : std::string();
      if (s == "auto") {
        policy->key_mode = KeyMode::kAuto;
      } else if (s == "always") {
        policy->key_mode = KeyMode::kAlways;
      } else if (s == "never") {
        policy->key_mode = KeyMode::kNever;
      } else {
        return Expected(Child(path, "mode"), "one of \"auto\", \"always\", \"never\"", v);
      }
    }
    return absl::OkStatus();
  }

  absl::Status Ratio(const json& j, const std::string& path) {
    SAFERETRY_RETURN_IF_ERROR(ReadObject(j, path));
    SAFERETRY_RETURN_IF_ERROR(CheckKeys(j, path, {"percent", "minPerSecond", "window"}));
    saw_ratio = true;
    RatioBudgetOptions& o = policy->ratio_budget;
    if (j.contains("percent")) {
      SAFERETRY_RETURN_IF_ERROR(ReadNumber(j["percent"], Child(path, "percent"), 0, 1, false, &o.percent));
    }
    if (j.contains("minPerSecond")) {
      SAFERETRY_RETURN_IF_ERROR(ReadNumber(j["minPerSecond"], Child(path, "minPerSecond"), 0, 1e9,
                                           false, &o.min_per_second));
    }
    if (j.contains("window")) {
      const std::string p = Child(path, "window");
      Duration d{0};
      constexpr std::string_view kWhat = "a duration in [1s, 86400s] like \"10s\"";
      if (!ReadDuration(j["window"], p, false, &d).ok() || d < std::chrono::seconds(1) ||
          d > std::chrono::hours(24)) {
        return Expected(p, kWhat, j["window"]);
      }
      o.window = d;
    }
    return absl::OkStatus();
  }

  absl::Status Quota(const json& j, const std::string& path) {
    SAFERETRY_RETURN_IF_ERROR(ReadObject(j, path));
    SAFERETRY_RETURN_IF_ERROR(
        CheckKeys(j, path, {"capacity", "retryCost", "timeoutCost", "successIncrement"}));
    saw_quota = true;
    CostQuotaOptions& o = policy->cost_quota;
    constexpr std::int64_t kMax = std::int64_t{1} << 40;
    struct Field {
      std::string_view name;
      std::int64_t min;
      std::int64_t* out;
    };
    for (const Field& f : {Field{"capacity", 1, &o.capacity}, Field{"retryCost", 1, &o.retry_cost},
                           Field{"timeoutCost", 1, &o.timeout_cost},
                           Field{"successIncrement", 0, &o.success_increment}}) {
      if (j.contains(f.name)) {
        SAFERETRY_RETURN_IF_ERROR(ReadInt(j[std::string(f.name)], Child(path, f.name), f.min, kMax, f.out));
      }
    }
    return absl::OkStatus();
  }

  absl::Status ClassificationObject(const json& j, const std::string& path) {
    SAFERETRY_RETURN_IF_ERROR(ReadObject(j, path));
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string p = Child(path, it.key());
      const std::string& key = it.key();
      const bool digits = key.size() == 3 && std::all_of(key.begin(), key.end(), [](char c) {
                            return c >= '0' && c <= '9';
                          });
      const int status = digits ? std::stoi(key) : 0;
      if (status < 100 || status > 599) {
        return Invalid(p, "expected an HTTP status 100..599 as the field name");
      }
      constexpr std::string_view kWhat =
          "one of \"success\", \"permanent\", \"precondition_failed\", \"in_progress\", "
          "\"retryable_transient\", \"ambiguous\"";
      const json& v = it.value();
      if (!v.is_string()) return Expected(p, kWhat, v);
      bool found = false;
      for (AttemptClass c : {AttemptClass::kSuccess, AttemptClass::kPermanent,
                             AttemptClass::kPreconditionFailed, AttemptClass::kInProgress,
                             AttemptClass::kRetryableTransient, AttemptClass::kAmbiguous}) {
        if (v.get_ref<const std::string&>() == AttemptClassName(c)) {
          policy->status_overrides[status] = c;
          found = true;
        }
      }
      if (!found) return Expected(p, kWhat, v);
    }
    return absl::OkStatus();
  }

  // Budget consistency: at most one budget object, and an explicit name must
  // agree with it.
  absl::Status ResolveBudget() {
    const int objects = int{saw_throttling} + int{saw_ratio} + int{saw_quota};
    if (objects > 1) {
      return Invalid("$.saferetry.budget",
                     "retryThrottling, saferetry.ratioBudget and saferetry.costQuota are "
                     "alternatives; give at most one");
    }
    BudgetKind implied = BudgetKind::kRatio;
    if (saw_throttling) implied = BudgetKind::kTokenThrottle;
    if (saw_quota) implied = BudgetKind::kCostQuota;
    if (!saw_budget_name) {
      policy->budget = implied;
      return absl::OkStatus();
    }
    if (objects == 1 && policy->budget != implied) {
      return Invalid("$.saferetry.budget",
                     Cat("expected \"", BudgetKindName(implied),
                                  "\" to match the budget object given, got \"",
                                  BudgetKindName(policy->budget), "\""));
    }
    return absl::OkStatus();
  }
};

// Does method config `mc`'s name list match `service`/`method`? Returns the
// match strength: 3 exact, 2 service-wide, 1 default, 0 none.
int MatchStrength(const json& names, std::string_view service, std::string_view method) {
  int best = 0;
  if (!names.is_array()) return 0;
  for (const json& n : names) {
    if (!n.is_object()) continue;
    const std::string s = n.contains("service") && n["service"].is_string() ? n["service"].get<std::string>() : "";
    const std::string m = n.contains("method") && n["method"].is_string() ? n["method"].get<std::string>() : "";
    if (s.empty() && m.empty()) {
      best = std::max(best, 1);
    } else if (s == service && m.empty()) {
      best = std::max(best, 2);
    } else if (s == service && m == method && !m.empty()) {
      best = std::max(best, 3);
    }
  }
  return best;
}

absl::Status CheckNames(const json& names, const std::string& path) {
  if (!names.is_array()) return Expected(path, "an array of {\"service\", \"method\"} objects", names);
  for (std::size_t i = 0; i < names.size(); ++i) {
    const json& n = names[i];
    const std::string p = Index(path, i);
    SAFERETRY_RETURN_IF_ERROR(ReadObject(n, p));
    SAFERETRY_RETURN_IF_ERROR(CheckKeys(n, p, {"service", "method"}));
    for (std::string_view f : {"service", "method"}) {
      if (n.contains(f) && !n[std::string(f)].is_string()) {
        return Expected(Child(p, f), "a string", n[std::string(f)]);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status LoadServiceConfig(const json& doc, const LoadOptions& options, Loader& loader) {
  Policy& policy = *loader.policy;
  SAFERETRY_RETURN_IF_ERROR(CheckKeys(doc, "$",
                                      {"methodConfig", "retryThrottling", "loadBalancingPolicy",
                                       "loadBalancingConfig", "healthCheckConfig", "saferetry"}));
  for (std::string_view ignored : {"loadBalancingPolicy", "loadBalancingConfig", "healthCheckConfig"}) {
    if (doc.contains(ignored)) {
      loader.Warn(Cat(Child("$", ignored), ": ignored (no HTTP meaning)"));
    }
  }
  const json& configs = doc["methodConfig"];
  if (!configs.is_array()) return Expected("$.methodConfig", "an array", configs);
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const std::string p = Index("$.methodConfig", i);
    SAFERETRY_RETURN_IF_ERROR(ReadObject(configs[i], p));
    SAFERETRY_RETURN_IF_ERROR(CheckKeys(configs[i], p,
                                        {"name", "waitForReady", "timeout",
                                         "maxRequestMessageBytes", "maxResponseMessageBytes",
                                         "retryPolicy", "hedgingPolicy"}));
    if (configs[i].contains("name")) {
      SAFERETRY_RETURN_IF_ERROR(CheckNames(configs[i]["name"], Child(p, "name")));
    }
  }

  std::string_view service = options.method;
  std::string_view method;
  if (!service.empty() && service.front() == '/') service.remove_prefix(1);
  if (const std::size_t slash = service.find('/'); slash != std::string_view::npos) {
    method = service.substr(slash + 1);
    service = service.substr(0, slash);
  }
  std::size_t chosen = configs.size();
  if (options.method.empty()) {
    if (configs.size() != 1) {
      return Invalid("$.methodConfig",
                     Cat("expected exactly one method config when no method is named, got ",
                                  configs.size(), " (set LoadOptions::method)"));
    }
    chosen = 0;
  } else {
    int best = 0;
    for (std::size_t i = 0; i < configs.size(); ++i) {
      const int m = configs[i].contains("name") ? MatchStrength(configs[i]["name"], service, method) : 0;
      if (m > best) {
        best = m;
        chosen = i;
      }
    }
    if (best == 0) {
      return Invalid("$.methodConfig",
                     Cat("no method config matches \"", options.method, "\""));
    }
  }

  const json& mc = configs[chosen];
  const std::string p = Index("$.methodConfig", chosen);
  for (std::string_view ignored :
       {"waitForReady", "maxRequestMessageBytes", "maxResponseMessageBytes", "hedgingPolicy"}) {
    if (mc.contains(ignored)) {
      loader.Warn(Cat(Child(p, ignored), ": ignored (no HTTP meaning)"));
    }
  }
  if (mc.contains("timeout")) {
    SAFERETRY_RETURN_IF_ERROR(ReadDuration(mc["timeout"], Child(p, "timeout"), false, &policy.timeout));
  }
  if (mc.contains("retryPolicy")) {
    SAFERETRY_RETURN_IF_ERROR(loader.RetryPolicy(mc["retryPolicy"], Child(p, "retryPolicy"), true));
  } else {
    // gRPC sends a method with no retryPolicy once (transparent retries of
    // requests that never left the client aside, which saferetry always does).
    policy.max_attempts = 1;
  }
  if (doc.contains("retryThrottling")) {
    SAFERETRY_RETURN_IF_ERROR(loader.RetryThrottling(doc["retryThrottling"], "$.retryThrottling"));
  }
  if (doc.contains("saferetry")) {
    const bool had_timeout = mc.contains("timeout");
    SAFERETRY_RETURN_IF_ERROR(loader.Saferetry(doc["saferetry"], "$.saferetry"));
    if (had_timeout && loader.saw_deadline) {
      return Invalid("$.saferetry.deadline", Cat("conflicts with ", Child(p, "timeout")));
    }
  }
  return absl::OkStatus();
}

std::string MalformedMessage(std::string_view text) {
  // The SAX pass reports where the parser stopped, without exceptions.
  struct Sax : json::json_sax_t {
    std::string message;
    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(number_integer_t) override { return true; }
    bool number_unsigned(number_unsigned_t) override { return true; }
    bool number_float(number_float_t, const string_t&) override { return true; }
    bool string(string_t&) override { return true; }
    bool binary(binary_t&) override { return true; }
    bool start_object(std::size_t) override { return true; }
    bool key(string_t&) override { return true; }
    bool end_object() override { return true; }
    bool start_array(std::size_t) override { return true; }
    bool end_array() override { return true; }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) override {
      message = ex.what();
      return false;
    }
  } sax;
  json::sax_parse(text.begin(), text.end(), &sax);
  std::string_view m = sax.message;
  // "[json.exception.parse_error.101] parse error at line 1, column 5: ..."
  const std::size_t at = m.find(" at line ");
  if (at != std::string_view::npos) m.remove_prefix(at + 4);
  if (m.empty()) m = "not valid JSON";
  return Cat("$: malformed JSON: ", m);
}

}  // namespace

std::string_view BudgetKindName(BudgetKind kind) {
  switch (kind) {
    case BudgetKind::kRatio:
      return "ratio";
    case BudgetKind::kTokenThrottle:
      return "tokenThrottle";
    case BudgetKind::kCostQuota:
      return "costQuota";
    case BudgetKind::kNone:
      return "none";
  }
  return "ratio";
}

const std::vector<std::string_view>& GrpcCodeNames() { return CodeNames(); }

std::vector<int> HttpStatusesForGrpcCode(std::string_view code_name) { return StatusesFor(code_name); }

bool operator==(const Policy& a, const Policy& b) {
  return a.max_attempts == b.max_attempts && a.backoff.base == b.backoff.base &&
         a.backoff.cap == b.backoff.cap && a.backoff.multiplier == b.backoff.multiplier &&
         a.backoff.jitter == b.backoff.jitter && a.timeout == b.timeout &&
         a.deadline_options.margin == b.deadline_options.margin &&
         a.deadline_options.min_useful_attempt == b.deadline_options.min_useful_attempt &&
         a.deadline_options.attempt_cap == b.deadline_options.attempt_cap &&
         a.max_status_queries == b.max_status_queries &&
         a.status_query_url_template == b.status_query_url_template &&
         a.server_deduplicates == b.server_deduplicates && a.key_mode == b.key_mode &&
         a.idempotency_header == b.idempotency_header && a.key_form == b.key_form &&
         a.deadline_header == b.deadline_header && a.attempt_header == b.attempt_header &&
         a.request_id_header == b.request_id_header &&
         a.hints.max_retry_after == b.hints.max_retry_after &&
         a.hints.do_not_retry_header == b.hints.do_not_retry_header && a.budget == b.budget &&
         a.token_throttle.max_tokens == b.token_throttle.max_tokens &&
         a.token_throttle.token_ratio == b.token_throttle.token_ratio &&
         a.ratio_budget.percent == b.ratio_budget.percent &&
         a.ratio_budget.min_per_second == b.ratio_budget.min_per_second &&
         a.ratio_budget.window == b.ratio_budget.window &&
         a.cost_quota.capacity == b.cost_quota.capacity &&
         a.cost_quota.retry_cost == b.cost_quota.retry_cost &&
         a.cost_quota.timeout_cost == b.cost_quota.timeout_cost &&
         a.cost_quota.success_increment == b.cost_quota.success_increment &&
         a.status_overrides == b.status_overrides && a.retryable_codes == b.retryable_codes &&
         a.retryable_http_statuses == b.retryable_http_statuses;
}

absl::StatusOr<Policy> LoadPolicy(std::string_view text, const LoadOptions& options) {
  if (text.size() > kMaxDocumentBytes) {
    return absl::InvalidArgumentError(
        Cat("$: document too large (", text.size(), " bytes; the limit is ",
                     kMaxDocumentBytes, ")"));
  }
  const json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return absl::InvalidArgumentError(MalformedMessage(text));
  if (!doc.is_object()) return Expected("$", "an object", doc);

  Policy policy;
  Loader loader{&policy};
  if (doc.contains("methodConfig")) {
    SAFERETRY_RETURN_IF_ERROR(LoadServiceConfig(doc, options, loader));
  } else {
    SAFERETRY_RETURN_IF_ERROR(CheckKeys(doc, "$", {"retryPolicy", "retryThrottling", "saferetry"}));
    if (doc.contains("retryPolicy")) {
      SAFERETRY_RETURN_IF_ERROR(loader.RetryPolicy(doc["retryPolicy"], "$.retryPolicy", false));
    }
    if (doc.contains("retryThrottling")) {
      SAFERETRY_RETURN_IF_ERROR(loader.RetryThrottling(doc["retryThrottling"], "$.retryThrottling"));
    }
    if (doc.contains("saferetry")) {
      SAFERETRY_RETURN_IF_ERROR(loader.Saferetry(doc["saferetry"], "$.saferetry"));
    }
  }
  SAFERETRY_RETURN_IF_ERROR(loader.ResolveBudget());
  if (policy.deadline_options.attempt_cap.has_value() &&
      *policy.deadline_options.attempt_cap > policy.timeout) {
    policy.warnings.push_back(Cat(
        "$.saferetry.attemptTimeout: ", FormatProtoDuration(*policy.deadline_options.attempt_cap),
        " is longer than the deadline ", FormatProtoDuration(policy.timeout),
        "; the deadline bounds every attempt"));
  }
  return policy;
}

absl::StatusOr<Policy> LoadPolicyFile(const std::string& path, const LoadOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    return absl::InvalidArgumentError(Cat(
        path, ": cannot open: ", std::error_code(err, std::generic_category()).message()));
  }
  std::string text;
  char buf[4096];
  while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
    text.append(buf, static_cast<std::size_t>(in.gcount()));
    if (text.size() > kMaxDocumentBytes) break;
  }
  if (in.bad()) return absl::InvalidArgumentError(Cat(path, ": cannot read"));
  absl::StatusOr<Policy> p = LoadPolicy(text, options);
  if (!p.ok()) {
    return absl::Status(p.status().code(), Cat(path, ": ", p.status().message()));
  }
  return p;
}

std::string DumpPolicy(const Policy& p) {
  json retry = json::object();
  retry["maxAttempts"] = p.max_attempts;
  retry["initialBackoff"] = FormatProtoDuration(p.backoff.base);
  retry["maxBackoff"] = FormatProtoDuration(p.backoff.cap);
  retry["backoffMultiplier"] = p.backoff.multiplier;
  if (!p.retryable_codes.empty() || !p.retryable_http_statuses.empty()) {
    json codes = json::array();
    // In code order, so the dump reads like the gRPC docs.
    for (std::string_view name : CodeNames()) {
      if (p.retryable_codes.count(std::string(name)) > 0) codes.push_back(name);
    }
    for (int s : p.retryable_http_statuses) codes.push_back(s);
    retry["retryableStatusCodes"] = std::move(codes);
  }

  json own = json::object();
  own["jitter"] = JitterKindName(p.backoff.jitter);
  own["deadline"] = FormatProtoDuration(p.timeout);
  own["attemptTimeout"] = p.deadline_options.attempt_cap.has_value()
                              ? json(FormatProtoDuration(*p.deadline_options.attempt_cap))
                              : json(nullptr);
  own["deadlineMargin"] = FormatProtoDuration(p.deadline_options.margin);
  own["minUsefulAttempt"] = FormatProtoDuration(p.deadline_options.min_useful_attempt);
  own["maxStatusQueries"] = p.max_status_queries;
  own["statusQuery"] = {{"urlTemplate", p.status_query_url_template}};
  own["serverDeduplicates"] = p.server_deduplicates;
  const char* mode = p.key_mode == KeyMode::kAlways  ? "always"
                     : p.key_mode == KeyMode::kNever ? "never"
                                                     : "auto";
  own["idempotency"] = {{"header", p.idempotency_header},
                        {"form", p.key_form == KeyForm::kQuotedString ? "quotedString" : "bare"},
                        {"mode", mode}};
  own["deadlineHeader"] = p.deadline_header;
  own["attemptHeader"] = p.attempt_header;
  own["requestIdHeader"] = p.request_id_header;
  own["maxRetryAfter"] = FormatProtoDuration(p.hints.max_retry_after);
  own["doNotRetryHeader"] = p.hints.do_not_retry_header;
  own["budget"] = BudgetKindName(p.budget);
  json classification = json::object();
  for (const auto& [status, cls] : p.status_overrides) {
    classification[std::to_string(status)] = AttemptClassName(cls);
  }
  own["classification"] = std::move(classification);

  json doc = json::object();
  doc["retryPolicy"] = std::move(retry);
  switch (p.budget) {
    case BudgetKind::kTokenThrottle:
      doc["retryThrottling"] = {{"maxTokens", p.token_throttle.max_tokens},
                                {"tokenRatio", p.token_throttle.token_ratio}};
      break;
    case BudgetKind::kRatio:
      own["ratioBudget"] = {{"percent", p.ratio_budget.percent},
                            {"minPerSecond", p.ratio_budget.min_per_second},
                            {"window", FormatProtoDuration(p.ratio_budget.window)}};
      break;
    case BudgetKind::kCostQuota:
      own["costQuota"] = {{"capacity", p.cost_quota.capacity},
                          {"retryCost", p.cost_quota.retry_cost},
                          {"timeoutCost", p.cost_quota.timeout_cost},
                          {"successIncrement", p.cost_quota.success_increment}};
      break;
    case BudgetKind::kNone:
      break;
  }
  doc["saferetry"] = std::move(own);
  return doc.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

CallOptions ToCallOptions(const Policy& policy) {
  CallOptions o;
  o.timeout = policy.timeout;
  o.max_attempts = policy.max_attempts;
  o.max_status_queries = policy.max_status_queries;
  o.backoff = policy.backoff;
  o.deadline_options = policy.deadline_options;
  o.key_mode = policy.key_mode;
  o.status_query.url_template = policy.status_query_url_template;
  o.server_deduplicates = policy.server_deduplicates;
  return o;
}

absl::Status ApplyToClientOptions(const Policy& policy, ClientOptions* options) {
  if (options == nullptr) return absl::InvalidArgumentError("options: must not be null");
  std::shared_ptr<RetryBudget> budget;
  switch (policy.budget) {
    case BudgetKind::kRatio: {
      auto b = RatioBudget::Create(policy.ratio_budget);
      if (!b.ok()) return Invalid("ratio_budget", std::string(b.status().message()));
      budget = *std::move(b);
      break;
    }
    case BudgetKind::kTokenThrottle: {
      auto b = TokenThrottle::Create(policy.token_throttle);
      if (!b.ok()) return Invalid("token_throttle", std::string(b.status().message()));
      budget = *std::move(b);
      break;
    }
    case BudgetKind::kCostQuota: {
      auto b = CostQuota::Create(policy.cost_quota);
      if (!b.ok()) return Invalid("cost_quota", std::string(b.status().message()));
      budget = *std::move(b);
      break;
    }
    case BudgetKind::kNone:
      budget = std::make_shared<UnlimitedBudget>();
      break;
  }
  std::shared_ptr<const Classifier> classifier;
  if (!policy.retryable_codes.empty() || !policy.retryable_http_statuses.empty()) {
    classifier = std::make_shared<RetryableCodesClassifier>(policy);
  } else if (!policy.status_overrides.empty()) {
    classifier = std::make_shared<DefaultClassifier>(ClassifierOptions{policy.status_overrides});
  } else {
    classifier = DefaultClassifierInstance();
  }
  options->budget = std::move(budget);
  options->classifier = std::move(classifier);
  options->idempotency_header = policy.idempotency_header;
  options->key_form = policy.key_form;
  options->deadline_header = policy.deadline_header;
  options->attempt_header = policy.attempt_header;
  options->request_id_header = policy.request_id_header;
  options->hints = policy.hints;
  return absl::OkStatus();
}

}  // namespace saferetry

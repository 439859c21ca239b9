// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/response_predicate.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/strings_internal.h"
#include "nlohmann/json.hpp"
#include "saferetry/settlement.h"

namespace saferetry {
namespace {

using internal::AsAbsl;
using internal::EqualsIgnoreCase;

std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// RFC 9110 token characters (a header name).
bool IsToken(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    const bool ok = absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
                    std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
    if (!ok) return false;
  }
  return true;
}

// A validated JSON Pointer's reference tokens, unescaped ("~1" is '/', "~0"
// is '~').
std::vector<std::string> PointerTokens(std::string_view p) {
  std::vector<std::string> tokens;
  while (!p.empty()) {
    p.remove_prefix(1);  // the '/'
    const std::size_t end = std::min(p.find('/'), p.size());
    std::string token;
    for (std::size_t i = 0; i < end; ++i) {
      if (p[i] == '~') {
        token.push_back(p[i + 1] == '1' ? '/' : '~');
        ++i;
      } else {
        token.push_back(p[i]);
      }
    }
    tokens.push_back(std::move(token));
    p.remove_prefix(end);
  }
  return tokens;
}

// The field `tokens` names in `doc`, or null. Walks the document itself, so
// that no index or name can make the JSON library throw.
const nlohmann::json* FindField(const nlohmann::json& doc, const std::vector<std::string>& tokens) {
  const nlohmann::json* at = &doc;
  for (const std::string& token : tokens) {
    if (at->is_object()) {
      auto it = at->find(token);
      if (it == at->end()) return nullptr;
      at = &*it;
    } else if (at->is_array()) {
      // RFC 6901: "0" or digits without a leading zero.
      if (token.empty() || token.size() > 9 || (token.size() > 1 && token[0] == '0')) {
        return nullptr;
      }
      std::size_t index = 0;
      for (char c : token) {
        if (c < '0' || c > '9') return nullptr;
        index = index * 10 + static_cast<std::size_t>(c - '0');
      }
      if (index >= at->size()) return nullptr;
      at = &(*at)[index];
    } else {
      return nullptr;
    }
  }
  return at;
}

// The rules, compiled: JSON pointers split once.
class RulesPredicate final : public ResponsePredicate {
 public:
  RulesPredicate(std::vector<ResponseRule> rules, std::shared_ptr<const ResponsePredicate> first)
      : rules_(std::move(rules)), first_(std::move(first)) {
    pointers_.reserve(rules_.size());
    for (const ResponseRule& r : rules_) pointers_.push_back(PointerTokens(r.json_pointer));
  }

  ResponseVerdict Judge(const ResponseView& response, const RequestTraits& traits) const override {
    if (first_ != nullptr) {
      const ResponseVerdict v = first_->Judge(response, traits);
      if (v != ResponseVerdict::kNoOpinion) return v;
    }
    // The body is parsed at most once per answer, and only when a rule
    // that got that far asks for a JSON field.
    std::optional<nlohmann::json> doc;
    bool parsed = false;
    for (std::size_t i = 0; i < rules_.size(); ++i) {
      const ResponseRule& r = rules_[i];
      if (!r.statuses.empty() && std::find(r.statuses.begin(), r.statuses.end(),
                                           response.status_code) == r.statuses.end()) {
        continue;
      }
      if (!r.header.empty()) {
        const std::optional<std::string_view> value = response.HeaderValue(r.header);
        if (!value.has_value()) continue;
        if (r.header_value.has_value() &&
            !EqualsIgnoreCase(TrimOws(*value), TrimOws(*r.header_value))) {
          continue;
        }
      }
      if (!r.body_contains.empty() &&
          response.body.find(r.body_contains) == std::string_view::npos) {
        continue;
      }
      if (!r.json_pointer.empty()) {
        if (!parsed) {
          parsed = true;
          if (!response.body_truncated) {
            nlohmann::json j = nlohmann::json::parse(response.body.begin(), response.body.end(),
                                                     nullptr, /*allow_exceptions=*/false);
            if (!j.is_discarded()) doc = std::move(j);
          }
        }
        if (!doc.has_value() || !JsonMatches(*doc, pointers_[i], r.json_value)) continue;
      }
      return r.verdict;
    }
    return ResponseVerdict::kNoOpinion;
  }

 private:
  static bool JsonMatches(const nlohmann::json& doc, const std::vector<std::string>& pointer,
                          const std::optional<std::string>& expected) {
    const nlohmann::json* field = FindField(doc, pointer);
    if (field == nullptr) return false;
    if (!expected.has_value()) return true;
    if (field->is_string()) return field->get_ref<const std::string&>() == *expected;
    if (field->is_object() || field->is_array()) return false;
    return field->dump() == *expected;
  }

  std::vector<ResponseRule> rules_;
  std::vector<std::vector<std::string>> pointers_;
  std::shared_ptr<const ResponsePredicate> first_;
};

// Answers whose class the predicate may change (the table in the header).
bool MayJudge(const Classification& base, const AttemptEvidence& evidence) {
  switch (base.cls) {
    case AttemptClass::kSuccess:
    case AttemptClass::kPermanent:
    case AttemptClass::kPreconditionFailed:
      break;
    case AttemptClass::kAmbiguous:
    case AttemptClass::kUnavailableUnproven:
    case AttemptClass::kInProgress:
    case AttemptClass::kRetryableTransient:
    case AttemptClass::kRetryableNotDelivered:
      return false;
  }
  // Answers about the key's record speak for the whole intent, not for this
  // attempt: fenced, expired (a resend could execute the key twice), still
  // processing elsewhere (its effect may land), or the key's stored final
  // error (definite: a resend would only replay it).
  const KeyState state = evidence.hints.key_state;
  return !IsFencedAnswer(evidence) && !IsExpiredKeyAnswer(evidence) && state != KeyState::kFenced &&
         state != KeyState::kExpired && state != KeyState::kProcessing &&
         ProofOfAnswer(evidence) != Proof::kNoEffect;
}

}  // namespace

std::optional<std::string_view> ResponseView::HeaderValue(std::string_view name) const {
  if (headers == nullptr) return std::nullopt;
  return FindHeader(*headers, name);
}

bool operator==(const ResponseRule& a, const ResponseRule& b) {
  return a.statuses == b.statuses && a.header == b.header && a.header_value == b.header_value &&
         a.body_contains == b.body_contains && a.json_pointer == b.json_pointer &&
         a.json_value == b.json_value && a.verdict == b.verdict;
}

absl::Status ValidateResponsePredicateOptions(const ResponsePredicateOptions& options,
                                              std::string_view field) {
  if (options.max_body_bytes > kMaxResponsePredicateBodyBytes) {
    return absl::InvalidArgumentError(absl::StrCat(AsAbsl(field), ".max_body_bytes: must be 0..",
                                                   kMaxResponsePredicateBodyBytes, ", got ",
                                                   options.max_body_bytes));
  }
  for (std::size_t i = 0; i < options.rules.size(); ++i) {
    const ResponseRule& r = options.rules[i];
    const std::string at = absl::StrCat(AsAbsl(field), ".rules[", i, "]");
    for (std::size_t k = 0; k < r.statuses.size(); ++k) {
      if (r.statuses[k] < 100 || r.statuses[k] > 599) {
        return absl::InvalidArgumentError(
            absl::StrCat(at, ".statuses[", k, "]: must be 100..599, got ", r.statuses[k]));
      }
    }
    if (!r.header.empty() && !IsToken(r.header)) {
      return absl::InvalidArgumentError(absl::StrCat(
          at, ".header: must be a header name (an RFC 9110 token), got \"", r.header, "\""));
    }
    if (r.header.empty() && r.header_value.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(at, ".header_value: needs .header"));
    }
    if (r.header_value.has_value() &&
        r.header_value->find_first_of(std::string_view("\r\n\0", 3)) != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, ".header_value: may not contain CR, LF or NUL"));
    }
    if (!r.json_pointer.empty()) {
      if (absl::Status s = internal::ValidateJsonPointer(r.json_pointer, at + ".json_pointer");
          !s.ok()) {
        return s;
      }
    }
    if (r.json_pointer.empty() && r.json_value.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(at, ".json_value: needs .json_pointer"));
    }
    if (r.statuses.empty() && r.header.empty() && r.body_contains.empty() &&
        r.json_pointer.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          at, ": give at least one condition (statuses, header, body_contains, json_pointer)"));
    }
    if (r.verdict != ResponseVerdict::kRetry && r.verdict != ResponseVerdict::kNotApplied) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, ".verdict: must be kRetry or kNotApplied"));
    }
    const bool needs_body = !r.body_contains.empty() || !r.json_pointer.empty();
    if (needs_body && options.max_body_bytes == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(AsAbsl(field), ".max_body_bytes: is 0, but ", at, " reads the body"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const ResponsePredicate>> MakeResponsePredicate(
    const ResponsePredicateOptions& options) {
  if (absl::Status s = ValidateResponsePredicateOptions(options, "policy.response_predicate");
      !s.ok()) {
    return s;
  }
  if (options.rules.empty()) return options.predicate;  // null when nothing is configured
  return std::shared_ptr<const ResponsePredicate>(
      std::make_shared<RulesPredicate>(options.rules, options.predicate));
}

Classification ApplyResponsePredicate(const ResponsePredicate& predicate,
                                      std::size_t max_body_bytes, const Response& response,
                                      const AttemptEvidence& evidence, const RequestTraits& traits,
                                      Classification base) {
  if (!MayJudge(base, evidence)) return base;
  ResponseView view;
  view.status_code = response.status_code;
  view.headers = &response.headers;
  view.body = std::string_view(response.body).substr(0, max_body_bytes);
  view.body_truncated = response.body_truncated || response.body.size() > max_body_bytes;
  switch (predicate.Judge(view, traits)) {
    case ResponseVerdict::kNoOpinion:
      return base;
    case ResponseVerdict::kNotApplied:
      return Classification{AttemptClass::kRetryableTransient,
                            "response predicate: not applied, the server refused it without effect",
                            false};
    case ResponseVerdict::kRetry:
      if (traits.safe || traits.idempotent) {
        return Classification{AttemptClass::kRetryableTransient, "response predicate: retry",
                              false};
      }
      return Classification{
          AttemptClass::kAmbiguous,
          "response predicate: retry asked for a write not shown unapplied; may have taken effect",
          base.no_retry};
  }
  return base;
}

std::string_view ResponseVerdictName(ResponseVerdict verdict) {
  switch (verdict) {
    case ResponseVerdict::kNoOpinion:
      return "noOpinion";
    case ResponseVerdict::kRetry:
      return "retry";
    case ResponseVerdict::kNotApplied:
      return "notApplied";
  }
  return "noOpinion";
}

namespace internal {

// RFC 6901: a sequence of "/" reference tokens where '~' is followed by '0'
// or '1'. The empty pointer (the whole document) is refused: a rule names a
// field.
absl::Status ValidateJsonPointer(std::string_view p, std::string_view field) {
  if (p.empty() || p.front() != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat(AsAbsl(field), ": must be a JSON Pointer starting with '/' (RFC 6901), got \"",
                     AsAbsl(p), "\""));
  }
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '~' && (i + 1 == p.size() || (p[i + 1] != '0' && p[i + 1] != '1'))) {
      return absl::InvalidArgumentError(absl::StrCat(
          AsAbsl(field), ": '~' must be followed by '0' or '1' (RFC 6901), at offset ", i));
    }
  }
  return absl::OkStatus();
}

}  // namespace internal

}  // namespace saferetry

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The response predicate: the declarative rules, their validation and JSON
// form, the one table that says what a verdict may change
// (`ApplyResponsePredicate`, checked over every class, verdict and kind of
// request), and calls through the blocking client with exact attempts,
// waits, keys and budget charges.

#include "saferetry/response_predicate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>

#include "saferetry/client.h"
#include "saferetry/config.h"
#include "saferetry/testing/counting_budget.h"
#include "saferetry/testing/fake_clock.h"
#include "saferetry/testing/fake_random.h"
#include "saferetry/testing/fake_transport.h"

namespace saferetry {
namespace {

using std::chrono::milliseconds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testkit::CountingBudget;
using testkit::FakeClock;
using testkit::FakeTransport;
using testkit::ScriptedRandom;
using testkit::Step;

constexpr char kOrders[] = "http://127.0.0.1:8080/orders";
constexpr char kStatus[] = "http://127.0.0.1:8080/orders/by-key/{key}";
constexpr char kThrottled[] = R"({"error":"throttled"})";

Request Post() {
  return Request{
      "POST", kOrders, {{"Content-Type", "application/json"}}, R"({"sku":"sku-42","quantity":1})"};
}

Request Get() {
  Request r;
  r.url = "http://127.0.0.1:8080/orders/1";
  return r;
}

ResponseRule JsonRule(std::string pointer, std::string value, ResponseVerdict verdict) {
  ResponseRule r;
  r.json_pointer = std::move(pointer);
  r.json_value = std::move(value);
  r.verdict = verdict;
  return r;
}

std::shared_ptr<const ResponsePredicate> Rules(std::vector<ResponseRule> rules,
                                               std::size_t max_body_bytes = 4096) {
  ResponsePredicateOptions o;
  o.rules = std::move(rules);
  o.max_body_bytes = max_body_bytes;
  auto p = MakeResponsePredicate(o);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : nullptr;
}

ResponseVerdict JudgeOf(const ResponsePredicate& p, int status, Headers headers, std::string body,
                        bool truncated = false) {
  ResponseView v;
  v.status_code = status;
  v.headers = &headers;
  v.body = body;
  v.body_truncated = truncated;
  return p.Judge(v, RequestTraits{});
}

// --- The rules ---------------------------------------------------------------

TEST(ResponseRuleTest, EveryConditionOfARuleMustHold) {
  ResponseRule r;
  r.statuses = {200, 400};
  r.header = "X-Throttled";
  r.header_value = "yes";
  r.body_contains = "slow down";
  r.verdict = ResponseVerdict::kNotApplied;
  auto p = Rules({r});
  const Headers h = {{"x-throttled", " YES\t"}};
  EXPECT_EQ(JudgeOf(*p, 200, h, "please slow down"), ResponseVerdict::kNotApplied);
  EXPECT_EQ(JudgeOf(*p, 400, h, "slow down"), ResponseVerdict::kNotApplied);
  EXPECT_EQ(JudgeOf(*p, 201, h, "slow down"), ResponseVerdict::kNoOpinion);   // status
  EXPECT_EQ(JudgeOf(*p, 200, {}, "slow down"), ResponseVerdict::kNoOpinion);  // header absent
  EXPECT_EQ(JudgeOf(*p, 200, {{"X-Throttled", "no"}}, "slow down"),
            ResponseVerdict::kNoOpinion);                                    // header value
  EXPECT_EQ(JudgeOf(*p, 200, h, "Slow Down"), ResponseVerdict::kNoOpinion);  // body is exact
}

TEST(ResponseRuleTest, TheFirstMatchingRuleDecides) {
  ResponseRule retry;
  retry.statuses = {200};
  retry.verdict = ResponseVerdict::kRetry;
  ResponseRule not_applied;
  not_applied.body_contains = "x";
  not_applied.verdict = ResponseVerdict::kNotApplied;
  auto p = Rules({not_applied, retry});
  EXPECT_EQ(JudgeOf(*p, 200, {}, "x"), ResponseVerdict::kNotApplied);
  EXPECT_EQ(JudgeOf(*p, 200, {}, "y"), ResponseVerdict::kRetry);
  EXPECT_EQ(JudgeOf(*p, 201, {}, "y"), ResponseVerdict::kNoOpinion);
}

TEST(ResponseRuleTest, JsonFieldsByPointer) {
  auto p = Rules({JsonRule("/error/code", "throttled", ResponseVerdict::kNotApplied),
                  JsonRule("/items/1/retry", "true", ResponseVerdict::kRetry),
                  JsonRule("/a~1b/m~0n", "429", ResponseVerdict::kRetry)});
  EXPECT_EQ(JudgeOf(*p, 200, {}, R"({"error":{"code":"throttled"}})"),
            ResponseVerdict::kNotApplied);
  EXPECT_EQ(JudgeOf(*p, 200, {}, R"({"items":[{},{"retry":true}]})"), ResponseVerdict::kRetry);
  EXPECT_EQ(JudgeOf(*p, 200, {}, R"({"a/b":{"m~n":429}})"), ResponseVerdict::kRetry);
  // On an object a numeric token is a member name (RFC 6901).
  EXPECT_EQ(JudgeOf(*p, 200, {}, R"({"items":{"1":{"retry":true}}})"), ResponseVerdict::kRetry);
  // A string "429" matches the text too.
  EXPECT_EQ(JudgeOf(*p, 200, {}, R"({"a/b":{"m~n":"429"}})"), ResponseVerdict::kRetry);
  // Absent, mistyped, out of range, an index with a leading zero or far too
  // large, an object where a value is expected: no match, and nothing throws.
  for (const char* body :
       {R"({"error":"throttled"})", R"({"error":{"code":"ok"}})", R"({"items":[{}]})", R"([1,2,3])",
        R"({"error":{"code":{"x":1}}})", R"({"items":[{},{"retry":false}]})", "not json", "",
        R"({"error":{"code":"thro)"}) {
    EXPECT_EQ(JudgeOf(*p, 200, {}, body), ResponseVerdict::kNoOpinion) << body;
  }
  auto index = Rules({JsonRule("/items/01", "1", ResponseVerdict::kRetry),
                      JsonRule("/items/99999999999999999999", "1", ResponseVerdict::kRetry)});
  EXPECT_EQ(JudgeOf(*index, 200, {}, R"({"items":[1,1]})"), ResponseVerdict::kNoOpinion);
}

TEST(ResponseRuleTest, APresentFieldMatchesWithoutAValue) {
  ResponseRule r;
  r.json_pointer = "/retryable";
  r.verdict = ResponseVerdict::kRetry;
  auto p = Rules({r});
  EXPECT_EQ(JudgeOf(*p, 400, {}, R"({"retryable":null})"), ResponseVerdict::kRetry);
  EXPECT_EQ(JudgeOf(*p, 400, {}, R"({"other":1})"), ResponseVerdict::kNoOpinion);
}

TEST(ResponseRuleTest, ATruncatedBodyIsNotParsedAsJson) {
  auto p = Rules({JsonRule("/error", "throttled", ResponseVerdict::kNotApplied)});
  EXPECT_EQ(JudgeOf(*p, 200, {}, kThrottled, /*truncated=*/true), ResponseVerdict::kNoOpinion);
}

TEST(ResponseRuleTest, AUserPredicateIsAskedFirstThenTheRules) {
  struct Always final : ResponsePredicate {
    ResponseVerdict Judge(const ResponseView& r, const RequestTraits&) const override {
      return r.status_code == 400 ? ResponseVerdict::kRetry : ResponseVerdict::kNoOpinion;
    }
  };
  ResponsePredicateOptions o;
  o.predicate = std::make_shared<Always>();
  o.rules = {JsonRule("/error", "throttled", ResponseVerdict::kNotApplied)};
  auto p = MakeResponsePredicate(o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(JudgeOf(**p, 400, {}, kThrottled), ResponseVerdict::kRetry);
  EXPECT_EQ(JudgeOf(**p, 200, {}, kThrottled), ResponseVerdict::kNotApplied);
  // Nothing configured: no predicate at all.
  auto none = MakeResponsePredicate(ResponsePredicateOptions{});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);
}

TEST(ResponseRuleTest, BadRulesNameTheField) {
  const auto error = [](ResponsePredicateOptions o) {
    auto p = MakeResponsePredicate(o);
    return p.ok() ? std::string("ok") : std::string(p.status().message());
  };
  ResponsePredicateOptions o;
  o.rules.emplace_back();
  EXPECT_THAT(error(o), HasSubstr("policy.response_predicate.rules[0]: give at least one"));
  o.rules[0].statuses = {200, 42};
  EXPECT_THAT(error(o), HasSubstr("policy.response_predicate.rules[0].statuses[1]: must be"));
  o.rules[0].statuses = {200};
  o.rules[0].header = "bad header";
  EXPECT_THAT(error(o), HasSubstr("rules[0].header: must be a header name"));
  o.rules[0].header.clear();
  o.rules[0].header_value = "x";
  EXPECT_THAT(error(o), HasSubstr("rules[0].header_value: needs .header"));
  o.rules[0].header_value.reset();
  o.rules[0].json_pointer = "error";
  EXPECT_THAT(error(o), HasSubstr("rules[0].json_pointer: must be a JSON Pointer"));
  o.rules[0].json_pointer = "/a~2";
  EXPECT_THAT(error(o), HasSubstr("rules[0].json_pointer: '~' must be followed"));
  o.rules[0].json_pointer.clear();
  o.rules[0].json_value = "x";
  EXPECT_THAT(error(o), HasSubstr("rules[0].json_value: needs .json_pointer"));
  o.rules[0].json_value.reset();
  o.rules[0].verdict = ResponseVerdict::kNoOpinion;
  EXPECT_THAT(error(o), HasSubstr("rules[0].verdict: must be kRetry or kNotApplied"));
  o.rules[0].verdict = ResponseVerdict::kRetry;
  o.max_body_bytes = kMaxResponsePredicateBodyBytes + 1;
  EXPECT_THAT(error(o), HasSubstr("policy.response_predicate.max_body_bytes: must be 0.."));
  o.max_body_bytes = 0;
  EXPECT_EQ(error(o), "ok");  // a status-only rule reads no body
  o.rules[0].body_contains = "x";
  EXPECT_THAT(error(o), HasSubstr("max_body_bytes: is 0, but policy.response_predicate.rules[0]"));
  // RetryPolicy::Create reports the same.
  RetryPolicyOptions p;
  p.response_predicate = o;
  EXPECT_THAT(std::string(RetryPolicy::Create(p).status().message()),
              HasSubstr("policy.response_predicate.max_body_bytes"));
}

// --- The table ---------------------------------------------------------------

// A predicate that says `verdict` (of answers with `only_status`, when not 0),
// counting how often it is asked.
class Fixed final : public ResponsePredicate {
 public:
  explicit Fixed(ResponseVerdict verdict, int only_status = 0)
      : verdict_(verdict), only_status_(only_status) {}
  ResponseVerdict Judge(const ResponseView& r, const RequestTraits&) const override {
    ++asked_;
    if (only_status_ != 0 && r.status_code != only_status_) return ResponseVerdict::kNoOpinion;
    return verdict_;
  }
  int asked() const { return asked_; }

 private:
  ResponseVerdict verdict_;
  int only_status_;
  mutable std::atomic<int> asked_{0};
};

// Every class a classifier can give x every verdict x every kind of request
// x plain / fenced / expired answers: the class changes only from a definite
// class of an answer that is not about the key's record, "not applied"
// always to a retry with the same key, "retry" to a retry only for a request
// safe to resend (otherwise to ambiguous), and an ambiguous or in-progress
// attempt never changes.
TEST(ApplyResponsePredicateTest, TheWholeTable) {
  const AttemptClass classes[] = {AttemptClass::kSuccess,
                                  AttemptClass::kPermanent,
                                  AttemptClass::kPreconditionFailed,
                                  AttemptClass::kInProgress,
                                  AttemptClass::kRetryableNotDelivered,
                                  AttemptClass::kRetryableTransient,
                                  AttemptClass::kAmbiguous};
  const ResponseVerdict verdicts[] = {ResponseVerdict::kNoOpinion, ResponseVerdict::kRetry,
                                      ResponseVerdict::kNotApplied};
  const KeyState key_states[] = {KeyState::kNone,   KeyState::kCompleted, KeyState::kRejected,
                                 KeyState::kFenced, KeyState::kExpired,   KeyState::kProcessing};
  int cases = 0;
  for (AttemptClass cls : classes) {
    for (ResponseVerdict verdict : verdicts) {
      for (int kind = 0; kind < 4; ++kind) {  // POST unkeyed, POST keyed, PUT, GET
        RequestTraits traits;
        traits.keyed = kind == 1;
        traits.idempotent = kind >= 2;
        traits.safe = kind == 3;
        for (KeyState state : key_states) {
          for (int status : {200, 400, 409, 410, 503}) {
            Fixed predicate(verdict);
            Response response{status, {}, kThrottled, false};
            AttemptEvidence evidence;
            evidence.delivery = Delivery::kResponseReceived;
            evidence.http_status = status;
            evidence.hints.key_state = state;
            const Classification base{cls, "base", false};
            const Classification got =
                ApplyResponsePredicate(predicate, 4096, response, evidence, traits, base);
            // A 4xx marked `completed` is the key's stored final error
            // (saferetry/settlement.h); 409 speaks of the key's progress.
            const bool stored_error = status == 400 && state == KeyState::kCompleted;
            const bool key_record = status == 410 || state == KeyState::kFenced ||
                                    state == KeyState::kExpired || state == KeyState::kProcessing ||
                                    stored_error;
            const bool definite = cls == AttemptClass::kSuccess ||
                                  cls == AttemptClass::kPermanent ||
                                  cls == AttemptClass::kPreconditionFailed;
            const bool may_change = definite && !key_record;
            AttemptClass want = cls;
            if (may_change && verdict == ResponseVerdict::kNotApplied) {
              want = AttemptClass::kRetryableTransient;
            } else if (may_change && verdict == ResponseVerdict::kRetry) {
              want =
                  traits.idempotent ? AttemptClass::kRetryableTransient : AttemptClass::kAmbiguous;
            }
            SCOPED_TRACE(testing::Message()
                         << AttemptClassName(cls) << " " << ResponseVerdictName(verdict) << " kind "
                         << kind << " status " << status << " state " << static_cast<int>(state));
            EXPECT_EQ(got.cls, want);
            EXPECT_EQ(predicate.asked(), may_change ? 1 : 0);
            if (want != cls) {
              EXPECT_THAT(std::string(got.reason), HasSubstr("response predicate"));
            } else {
              EXPECT_EQ(got.reason, "base");
            }
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 7 * 3 * 4 * 6 * 5);
}

TEST(ApplyResponsePredicateTest, ThePredicateSeesABoundedBodyPrefix) {
  struct Capture final : ResponsePredicate {
    ResponseVerdict Judge(const ResponseView& r, const RequestTraits&) const override {
      body = std::string(r.body);
      truncated = r.body_truncated;
      header = r.HeaderValue("x-a").value_or("-");
      return ResponseVerdict::kNoOpinion;
    }
    mutable std::string body;
    mutable bool truncated = false;
    mutable std::string header;
  } capture;
  AttemptEvidence e;
  e.http_status = 200;
  const Response response{200, {{"X-A", "1"}}, "0123456789", false};
  (void)ApplyResponsePredicate(capture, 4, response, e, RequestTraits{},
                               {AttemptClass::kSuccess, "", false});
  EXPECT_EQ(capture.body, "0123");
  EXPECT_TRUE(capture.truncated);
  EXPECT_EQ(capture.header, "1");
  (void)ApplyResponsePredicate(capture, 10, response, e, RequestTraits{},
                               {AttemptClass::kSuccess, "", false});
  EXPECT_EQ(capture.body, "0123456789");
  EXPECT_FALSE(capture.truncated);
}

// --- Calls ---------------------------------------------------------------------

class ResponsePredicateClientTest : public ::testing::Test {
 protected:
  std::unique_ptr<Client> Make(std::shared_ptr<RetryBudget> budget = nullptr) {
    ClientOptions o;
    o.transport = fake_;
    o.clock = clock_;
    o.random = random_;
    o.budget = budget ? budget : MakeUnlimitedBudget();
    o.status_query_budget = MakeUnlimitedBudget();
    auto c = Client::Create(std::move(o));
    EXPECT_TRUE(c.ok()) << c.status();
    return *std::move(c);
  }
  std::shared_ptr<const RetryPolicy> Policy(std::vector<ResponseRule> rules,
                                            KeyMode key_mode = KeyMode::kAuto,
                                            bool server_deduplicates = false) {
    RetryPolicyOptions o;
    o.response_predicate.rules = std::move(rules);
    o.key_mode = key_mode;
    o.server_deduplicates = server_deduplicates;
    auto p = RetryPolicy::Create(o);
    EXPECT_TRUE(p.ok()) << p.status();
    return *p;
  }
  std::vector<std::string> KeysSent() const {
    std::vector<std::string> keys;
    for (const auto& s : fake_->sent()) {
      keys.emplace_back(FindHeader(s.request.headers, "Idempotency-Key").value_or("<none>"));
    }
    return keys;
  }

  std::shared_ptr<FakeClock> clock_ = std::make_shared<FakeClock>();
  std::shared_ptr<ScriptedRandom> random_ = std::make_shared<ScriptedRandom>();  // u = 0.5
  std::shared_ptr<FakeTransport> fake_ = std::make_shared<FakeTransport>(clock_);
};

// A GET whose 200 says "throttled" is retried after the backoff (full jitter,
// 100 ms, u = 0.5: 50 ms), and the retry's answer stands.
TEST_F(ResponsePredicateClientTest, AGetWhose200SaysThrottledIsRetried) {
  fake_->Push(Step::Respond(200, {}, kThrottled));
  fake_->Push(Step::Respond(200, {}, R"({"id":1})"));
  CallOptions call;
  call.policy = Policy({JsonRule("/error", "throttled", ResponseVerdict::kRetry)});
  CallResult r = Make()->Execute(Get(), call);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.attempts, 2);
  ASSERT_EQ(r.evidence.size(), 2u);
  EXPECT_EQ(r.evidence[0].classification, AttemptClass::kRetryableTransient);
  EXPECT_EQ(r.evidence[0].reason, "response predicate: retry");
  EXPECT_EQ(r.evidence[1].classification, AttemptClass::kSuccess);
  EXPECT_THAT(clock_->sleeps(), ElementsAre(milliseconds(50)));
  EXPECT_EQ(r.last_response->body, R"({"id":1})");
}

// Without a predicate (the default) the same answer is a success.
TEST_F(ResponsePredicateClientTest, WithoutAPredicateA200IsASuccess) {
  fake_->Push(Step::Respond(200, {}, kThrottled));
  CallResult r = Make()->Execute(Get(), CallOptions{});
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.attempts, 1);
}

// A keyed POST's "throttled" 200 is "not applied": resent with the same key,
// charged to the budget once, and the resend's 201 is the order.
TEST_F(ResponsePredicateClientTest, AKeyedPostsThrottled200IsResentWithTheSameKey) {
  fake_->Push(Step::Respond(200, {}, kThrottled));
  fake_->Push(Step::Respond(201, {}, R"({"order_id":7})"));
  auto budget = std::make_shared<CountingBudget>();
  CallOptions call;
  call.policy = Policy({JsonRule("/error", "throttled", ResponseVerdict::kNotApplied)});
  call.status_url = kStatus;
  CallResult r = Make(budget)->Execute(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(r.status_queries, 0);
  ASSERT_TRUE(r.idempotency_key.has_value());
  EXPECT_THAT(KeysSent(), ElementsAre(*r.idempotency_key, *r.idempotency_key));
  EXPECT_EQ(budget->charges(), 1);
  EXPECT_THAT(clock_->sleeps(), ElementsAre(milliseconds(50)));
  EXPECT_THAT(std::string(r.evidence[0].reason), HasSubstr("not applied"));
}

// A deduplicating server that stored the "throttled" answer replays it: the
// predicate's retries follow the same rules as any resend and stop at the
// attempt cap, FAILED (every answer said "not applied"), all with one key.
TEST_F(ResponsePredicateClientTest, AReplayedThrottledAnswerStopsAtTheAttemptCap) {
  const Headers replay = {{"Idempotent-Replayed", "true"}, {"Idempotency-Key-State", "completed"}};
  for (int i = 0; i < 3; ++i) fake_->Push(Step::Respond(200, replay, kThrottled));
  auto budget = std::make_shared<CountingBudget>();
  CallOptions call;
  call.policy = Policy({JsonRule("/error", "throttled", ResponseVerdict::kNotApplied)},
                       KeyMode::kAuto, /*server_deduplicates=*/true);
  CallResult r = Make(budget)->Execute(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.stop_reason, StopReason::kAttemptsExhausted);
  EXPECT_EQ(r.attempts, 3);
  ASSERT_TRUE(r.idempotency_key.has_value());
  EXPECT_THAT(KeysSent(), ElementsAre(*r.idempotency_key, *r.idempotency_key, *r.idempotency_key));
  EXPECT_EQ(budget->charges(), 2);
  EXPECT_THAT(clock_->sleeps(), ElementsAre(milliseconds(50), milliseconds(100)));
}

// After an attempt that may have taken effect, a later "not applied" answer
// does not erase the doubt: the call ends UNKNOWN, never FAILED.
TEST_F(ResponsePredicateClientTest, ANotAppliedAnswerKeepsAnEarlierDoubt) {
  fake_->Push(Step::CommitThenLost());
  fake_->Push(Step::Respond(200, {}, kThrottled));
  fake_->Push(Step::Respond(200, {}, kThrottled));
  CallOptions call;
  call.policy = Policy({JsonRule("/error", "throttled", ResponseVerdict::kNotApplied)},
                       KeyMode::kAuto, /*server_deduplicates=*/true);
  CallResult r = Make()->Execute(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kAttemptsExhausted);
  EXPECT_EQ(r.attempts, 3);
}

// A POST without a key is never resent after an ambiguous attempt, whatever
// the predicate says: a 500 stays ambiguous, a hang is not shown to it, and
// "retry" on its 200 makes it ambiguous, not retryable.
TEST_F(ResponsePredicateClientTest, AnAmbiguousPostWithoutAKeyIsNeverResent) {
  auto everything_retries = std::make_shared<Fixed>(ResponseVerdict::kNotApplied);
  RetryPolicyOptions o;
  o.key_mode = KeyMode::kNever;
  o.response_predicate.predicate = everything_retries;
  auto policy = RetryPolicy::Create(o);
  ASSERT_TRUE(policy.ok());
  CallOptions call;
  call.policy = *policy;
  auto client = Make();

  fake_->Push(Step::Respond(500, {}, kThrottled));
  CallResult r = client->Execute(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kAmbiguousUnresolved);
  EXPECT_EQ(r.attempts, 1);

  fake_->Push(Step::TimeoutAfterSend());
  r = client->Execute(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(everything_retries->asked(), 0);  // neither a 500 nor a hang is shown to it

  fake_->Push(Step::Respond(200, {}, kThrottled));
  call.policy = Policy({JsonRule("/error", "throttled", ResponseVerdict::kRetry)}, KeyMode::kNever);
  r = client->Execute(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kAmbiguousUnresolved);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.evidence[0].classification, AttemptClass::kAmbiguous);
  EXPECT_EQ(fake_->send_count(), 3);
}

// "retry" on a keyed POST's answer is ambiguous: settled by a status query
// with the same key, never a blind resend.
TEST_F(ResponsePredicateClientTest, RetryOnAKeyedPostAsksTheStatusQuery) {
  fake_->Push(Step::Respond(200, {}, kThrottled));
  fake_->Push(Step::Respond(404, {{"Idempotency-Key-State", "unknown"}}));
  fake_->Push(Step::Respond(201, {}, R"({"order_id":7})"));
  CallOptions call;
  call.policy = Policy({JsonRule("/error", "throttled", ResponseVerdict::kRetry)});
  call.status_url = kStatus;
  CallResult r = Make()->Execute(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(r.status_queries, 1);
  ASSERT_EQ(fake_->sent().size(), 3u);
  EXPECT_EQ(fake_->sent()[1].request.method, "GET");  // the status query
  EXPECT_EQ(KeysSent()[0], KeysSent()[2]);
}

// "in progress" (409) and an expired key (410) keep their meaning.
TEST_F(ResponsePredicateClientTest, InProgressAndExpiredKeysAreNotOverridden) {
  auto not_applied = std::make_shared<Fixed>(ResponseVerdict::kNotApplied, 410);
  RetryPolicyOptions o;
  o.response_predicate.predicate = not_applied;
  auto policy = RetryPolicy::Create(o);
  ASSERT_TRUE(policy.ok());
  CallOptions call;
  call.policy = *policy;
  call.idempotency_key = "caller-key-1";  // used before: a 410 may hide an effect
  fake_->Push(Step::Respond(410, {{"Idempotency-Key-State", "expired"}}));
  CallResult r = Make()->Execute(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kUnknown);
  EXPECT_EQ(r.stop_reason, StopReason::kKeyExpired);
  EXPECT_EQ(r.attempts, 1);  // never resent after `expired`

  EXPECT_EQ(not_applied->asked(), 0);

  auto not_applied_409 = std::make_shared<Fixed>(ResponseVerdict::kNotApplied, 409);
  o.response_predicate.predicate = not_applied_409;
  policy = RetryPolicy::Create(o);
  ASSERT_TRUE(policy.ok());
  call.policy = *policy;
  fake_->Push(Step::Respond(409));
  fake_->Push(Step::Respond(201));
  call.idempotency_key = "caller-key-2";
  r = Make()->Execute(Post(), call);
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  ASSERT_EQ(r.evidence.size(), 2u);
  EXPECT_EQ(r.evidence[0].classification, AttemptClass::kInProgress);
  EXPECT_EQ(not_applied_409->asked(), 1);  // only the 201
}

// --- The policy document -------------------------------------------------------

TEST(ResponsePredicateConfigTest, RulesLoadDumpAndDriveACall) {
  const char* doc = R"({"saferetry": {"responsePredicate": {"maxBodyBytes": 512, "rules": [
      {"statuses": [200, 400], "jsonPointer": "/error", "jsonValue": "throttled",
       "verdict": "notApplied"},
      {"header": "X-Retryable", "headerValue": "true", "verdict": "retry"},
      {"bodyContains": "try again", "verdict": "retry"},
      {"jsonPointer": "/code", "jsonValue": 429, "verdict": "retry"}]}}})";
  auto policy = LoadPolicy(doc);
  ASSERT_TRUE(policy.ok()) << policy.status();
  const ResponsePredicateOptions& rp = policy->response_predicate;
  EXPECT_EQ(rp.max_body_bytes, 512u);
  ASSERT_EQ(rp.rules.size(), 4u);
  EXPECT_THAT(rp.rules[0].statuses, ElementsAre(200, 400));
  EXPECT_EQ(rp.rules[0].verdict, ResponseVerdict::kNotApplied);
  EXPECT_EQ(rp.rules[1].header, "X-Retryable");
  EXPECT_EQ(rp.rules[1].header_value, "true");
  EXPECT_EQ(rp.rules[2].body_contains, "try again");
  EXPECT_EQ(rp.rules[3].json_value, "429");
  auto again = LoadPolicy(DumpPolicy(*policy));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *policy);
  // Without the section nothing is written.
  EXPECT_EQ(DumpPolicy(*LoadPolicy("{}")).find("responsePredicate"), std::string::npos);

  auto clock = std::make_shared<FakeClock>();
  auto fake = std::make_shared<FakeTransport>(clock);
  fake->Push(Step::Respond(400, {}, kThrottled));
  fake->Push(Step::Respond(201));
  ClientOptions options;
  options.transport = fake;
  options.clock = clock;
  ASSERT_TRUE(ApplyToClientOptions(*policy, &options).ok());
  auto client = Client::Create(std::move(options));
  ASSERT_TRUE(client.ok());
  CallResult r = (*client)->Execute(Post(), CallOptions{});
  EXPECT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_EQ(r.attempts, 2);
}

TEST(ResponsePredicateConfigTest, BadDocumentsNameTheJsonPath) {
  const auto error = [](const std::string& section) {
    auto p = LoadPolicy(R"({"saferetry": {"responsePredicate": )" + section + "}}");
    return p.ok() ? std::string("ok") : std::string(p.status().message());
  };
  const std::string at = "$.saferetry.responsePredicate";
  EXPECT_THAT(error("[]"), HasSubstr(at));
  EXPECT_THAT(error(R"({"maxBodyBytes": -1})"), HasSubstr(at + ".maxBodyBytes"));
  EXPECT_THAT(error(R"({"maxBodyBytes": 2000000})"), HasSubstr(at + ".maxBodyBytes"));
  EXPECT_THAT(error(R"({"rule": []})"), HasSubstr(at));
  EXPECT_THAT(error(R"({"rules": {}})"), HasSubstr(at + ".rules: expected an array"));
  EXPECT_THAT(error(R"({"rules": [{"verdict": "retry"}]})"),
              HasSubstr(at + ".rules[0]: give at least one condition"));
  EXPECT_THAT(error(R"({"rules": [{"statuses": [200], "verdict": "maybe"}]})"),
              HasSubstr(at + ".rules[0].verdict: expected one of \"retry\", \"notApplied\""));
  EXPECT_THAT(error(R"({"rules": [{"statuses": [200]}]})"),
              HasSubstr(at + ".rules[0].verdict: required"));
  EXPECT_THAT(error(R"({"rules": [{"statuses": [200, 700], "verdict": "retry"}]})"),
              HasSubstr(at + ".rules[0].statuses[1]"));
  EXPECT_THAT(error(R"({"rules": [{"statuses": [], "verdict": "retry"}]})"),
              HasSubstr(at + ".rules[0].statuses"));
  EXPECT_THAT(error(R"({"rules": [{"header": "a b", "verdict": "retry"}]})"),
              HasSubstr(at + ".rules[0].header"));
  EXPECT_THAT(error(R"({"rules": [{"headerValue": "x", "verdict": "retry"}]})"),
              HasSubstr(at + ".rules[0].headerValue: needs \"header\""));
  EXPECT_THAT(error(R"({"rules": [{"jsonPointer": "error", "verdict": "retry"}]})"),
              HasSubstr(at + ".rules[0].jsonPointer: must be a JSON Pointer"));
  EXPECT_THAT(error(R"({"rules": [{"jsonPointer": "/e", "jsonValue": [1], "verdict": "retry"}]})"),
              HasSubstr(at + ".rules[0].jsonValue"));
  EXPECT_THAT(error(R"({"rules": [{"bodyContains": "", "verdict": "retry"}]})"),
              HasSubstr(at + ".rules[0].bodyContains"));
  EXPECT_THAT(error(R"({"rules": [{"statuses": [200], "verdict": "retry", "x": 1}]})"),
              HasSubstr(at + ".rules[0]"));
  EXPECT_THAT(error(R"({"maxBodyBytes": 0, "rules": [{"bodyContains": "x", "verdict": "retry"}]})"),
              HasSubstr(at + ".maxBodyBytes: is 0, but " + at + ".rules[0] reads the body"));
}

}  // namespace
}  // namespace saferetry

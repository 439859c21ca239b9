// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// W3C Trace Context: the parser and the tracestate rules; then calls on the
// fake transport with the exact traceparent / tracestate headers of every
// attempt and status query — the caller's context passed through, the
// request's own headers, a tracer's spans, malformed contexts dropped with
// the call going on — the evidence's ids and resend counts, and no
// allocation added to a default call.

#include "saferetry/trace_context.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "saferetry/client.h"
#include "saferetry/testing/fake_clock.h"
#include "saferetry/testing/fake_random.h"
#include "saferetry/testing/fake_transport.h"

// Counts operator new while `g_count_allocations` is set. GCC flags free()
// of memory from a replaced operator new as mismatched; both sides are ours.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
std::atomic<bool> g_count_allocations{false};
std::atomic<long> g_allocations{0};

void* operator new(std::size_t n) {
  if (g_count_allocations.load(std::memory_order_relaxed)) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace saferetry {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using testkit::FakeClock;
using testkit::FakeTransport;
using testkit::ScriptedRandom;
using testkit::SentRequest;
using testkit::Step;

constexpr char kParent[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
constexpr char kTraceIdHex[] = "4bf92f3577b34da6a3ce929d0e0e4736";
constexpr char kState[] = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7";

// --- The parser ------------------------------------------------------------

TEST(ParseTraceParentTest, ReadsTheFourFields) {
  const std::optional<TraceParent> p = ParseTraceParent(kParent);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->version, 0);
  EXPECT_EQ(TraceIdHex(p->trace_id), kTraceIdHex);
  EXPECT_EQ(SpanIdHex(p->parent_id), "00f067aa0ba902b7");
  EXPECT_EQ(p->flags, 1);
  EXPECT_TRUE(p->sampled());
  EXPECT_EQ(FormatTraceParent(*p), kParent);

  const std::optional<TraceParent> unsampled =
      ParseTraceParent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
  ASSERT_TRUE(unsampled.has_value());
  EXPECT_FALSE(unsampled->sampled());
  // Unknown flag bits are kept.
  EXPECT_EQ(ParseTraceParent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff")->flags,
            0xff);
  // Optional white space around the value.
  EXPECT_EQ(ParseTraceParent(std::string(" \t") + kParent + " "), p);
}

TEST(ParseTraceParentTest, AHigherVersionIsReadByItsFirstFourFields) {
  const std::optional<TraceParent> p =
      ParseTraceParent("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->version, 0xcc);
  EXPECT_EQ(TraceIdHex(p->trace_id), kTraceIdHex);
  // Written as version 00, the only one this library writes.
  EXPECT_EQ(FormatTraceParent(*p), kParent);
  EXPECT_TRUE(ParseTraceParent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
  // But the fields must end where version 00's do.
  EXPECT_FALSE(ParseTraceParent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x"));
}

// Every malformed form the specification names, and some more.
const char* const kMalformed[] = {
    "",
    "garbage",
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",        // no flags
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",    // version 00, too long
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-00",  // version 00, extra field
    "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",     // upper case
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01",     // upper case
    "00-00000000000000000000000000000000-00f067aa0ba902b7-01",     // zero trace id
    "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",     // zero parent id
    "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",     // version ff
    "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",     // not hex
    "00-4bf92f3577b34da6a3ce929d0e0e473z-00f067aa0ba902b7-01",     // not hex
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x",     // not hex
    "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",     // separators
    "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",     // fields shifted
    "0-04bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",     // fields shifted
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\nX-Evil: 1",  // injection
};

TEST(ParseTraceParentTest, MalformedValuesAreRejected) {
  for (const char* value : kMalformed) {
    EXPECT_FALSE(ParseTraceParent(value).has_value()) << value;
  }
  // A NUL inside.
  std::string nul = kParent;
  nul[10] = '\0';
  EXPECT_FALSE(ParseTraceParent(nul).has_value());
}

TEST(ParseTraceParentTest, FormatWritesVersion00) {
  TraceParent p;
  p.version = 7;
  p.trace_id[15] = 1;
  p.parent_id[0] = 0xff;
  p.flags = 0x03;
  EXPECT_EQ(FormatTraceParent(p), "00-00000000000000000000000000000001-ff00000000000000-03");
  EXPECT_TRUE(IsValidTraceId(p.trace_id));
  EXPECT_FALSE(IsValidTraceId(TraceId{}));
  EXPECT_FALSE(IsValidSpanId(SpanId{}));
}

// --- tracestate ------------------------------------------------------------

TEST(SanitizeTraceStateTest, AValidValueComesBackUnchanged) {
  EXPECT_EQ(SanitizeTraceState(kState), kState);
  // Optional white space and empty members are allowed, and kept as given.
  EXPECT_EQ(SanitizeTraceState(" congo=t61rcWkgMzE ,\t, rojo=00f067aa0ba902b7 "),
            " congo=t61rcWkgMzE ,\t, rojo=00f067aa0ba902b7 ");
  // Multi-tenant keys, and values with inner spaces and any printable but
  // ',' and '='.
  EXPECT_EQ(SanitizeTraceState("tenant1@vendor=a b!~"), "tenant1@vendor=a b!~");
  EXPECT_EQ(SanitizeTraceState("a_-*/9=x"), "a_-*/9=x");
  EXPECT_EQ(SanitizeTraceState(""), std::nullopt);
  EXPECT_EQ(SanitizeTraceState(" , "), std::nullopt);
}

TEST(SanitizeTraceStateTest, InvalidValuesAreDropped) {
  for (const char* value : {
           "Congo=t61",                   // upper-case key
           "1congo=t61",                  // simple key starting with a digit
           "congo",                       // no '='
           "congo=",                      // empty value
           "congo=a\x7f",                 // DEL
           "congo=a=b",                   // '=' in the value
           "congo=t61,congo=t62",         // a key twice
           "@vendor=x",                   // empty tenant
           "tenant@=x",                   // empty system
           "tenant@vendor12345678901=x",  // system id too long
           "congo=t\x01",                 // control character
           "congo=t61\r\nX-Evil: 1",
       }) {
    EXPECT_EQ(SanitizeTraceState(value), std::nullopt) << value;
  }
  EXPECT_EQ(SanitizeTraceState(std::string(257, 'k') + "=v"), std::nullopt);  // key too long
  EXPECT_EQ(SanitizeTraceState("k=" + std::string(257, 'v')), std::nullopt);  // value too long
}

std::string Members(int n, int value_length = 1) {
  std::string s;
  for (int i = 0; i < n; ++i) {
    if (i > 0) s += ',';
    s += "k" + std::to_string(i) + "=" + std::string(static_cast<std::size_t>(value_length), 'v');
  }
  return s;
}

TEST(SanitizeTraceStateTest, AtMost32Members) {
  EXPECT_EQ(SanitizeTraceState(Members(32)), Members(32));
  EXPECT_EQ(SanitizeTraceState(Members(33)), std::nullopt);
}

TEST(SanitizeTraceStateTest, ALongValueIsTruncatedAsTheSpecificationSays) {
  // 16 members of "kN=" + 30 characters: 16 * 33 or 34 + 15 commas > 512.
  const std::string sixteen = Members(16, 30);
  ASSERT_GT(sixteen.size(), kMaxTraceStateLength);
  // Members are dropped from the end until it fits.
  const std::optional<std::string> cut = SanitizeTraceState(sixteen);
  ASSERT_TRUE(cut.has_value());
  EXPECT_EQ(*cut, Members(14, 30));
  EXPECT_LE(cut->size(), kMaxTraceStateLength);

  // A member longer than 128 characters goes first, wherever it is.
  const std::string big = "big=" + std::string(200, 'x');
  const std::string with_big = "a=1," + big + "," + Members(12, 30);
  ASSERT_GT(with_big.size(), kMaxTraceStateLength);
  EXPECT_EQ(SanitizeTraceState(with_big), "a=1," + Members(12, 30));

  // Exactly 512 characters pass unchanged; optional white space is not
  // counted.
  const std::string exact = "k=" + std::string(256, 'v') + ",j=" + std::string(251, 'v');
  ASSERT_EQ(exact.size(), kMaxTraceStateLength);
  EXPECT_EQ(SanitizeTraceState(exact), exact);
  EXPECT_EQ(SanitizeTraceState(exact + " ,  "), exact + " ,  ");
}

// --- Calls -----------------------------------------------------------------

// The values of every `name` header of a sent request, in order.
std::vector<std::string> Values(const SentRequest& sent, std::string_view name) {
  std::vector<std::string> out;
  for (const Header& h : sent.request.headers) {
    if (absl::EqualsIgnoreCase(h.first, std::string(name))) out.push_back(h.second);
  }
  return out;
}

struct Span {
  int number;
  bool is_status_query;
  int resend_count;
  bool had_caller;
};

// Mints span 0x..aa<n> (0x..bb<n> for status queries) under the caller's
// trace, or under trace 0x..01 when there is no caller.
class RecordingTracer : public AttemptTracer {
 public:
  std::optional<AttemptSpan> OnAttemptStart(const AttemptSpanStart& start) override {
    starts.push_back(
        Span{start.number, start.is_status_query, start.resend_count, start.caller != nullptr});
    caller_states.emplace_back(start.caller_tracestate);
    urls.emplace_back(start.url);
    AttemptSpan span;
    if (start.caller != nullptr) {
      span.traceparent = *start.caller;
    } else {
      span.traceparent.trace_id[15] = 1;
    }
    span.traceparent.parent_id = {0,
                                  0,
                                  0,
                                  0,
                                  0,
                                  0,
                                  static_cast<std::uint8_t>(start.is_status_query ? 0xbb : 0xaa),
                                  static_cast<std::uint8_t>(start.number)};
    if (replace_state.has_value()) span.tracestate = replace_state;
    return span;
  }
  void OnAttemptEnd(const AttemptEvidence& evidence) override {
    ended.push_back(SpanIdHex(evidence.span_id));
  }
  void OnCallEnd() override { ++call_ends; }

  std::vector<Span> starts;
  std::vector<std::string> caller_states;
  std::vector<std::string> urls;
  std::vector<std::string> ended;
  std::optional<std::string> replace_state;
  int call_ends = 0;
};

class TraceCallTest : public ::testing::Test {
 protected:
  TraceCallTest() {
    ClientOptions o;
    o.transport = fake_;
    o.clock = clock_;
    o.random = std::make_shared<ScriptedRandom>();
    o.budget = MakeUnlimitedBudget();
    o.status_query_budget = MakeUnlimitedBudget();
    client_ = *Client::Create(std::move(o));
    post_ = Request{"POST",
                    "http://127.0.0.1:8080/orders",
                    {{"Content-Type", "application/json"}},
                    R"({"sku":"a"})"};
    call_.status_url = "http://127.0.0.1:8080/orders/by-key/{key}";
  }

  // 503 (refused before any work), then committed and lost, then two status
  // queries: processing, found.
  CallResult RetriedAndQueried(const Request& request) {
    const int before = fake_->send_count();
    fake_->Push(Step::RespondRejected())
        .Push(Step::CommitThenLost())
        .Push(Step::Respond(202))
        .Push(Step::Respond(200, {}, R"({"order":1})"));
    CallResult r = client_->Execute(request, call_);
    EXPECT_EQ(r.outcome, Outcome::kSucceeded);
    EXPECT_EQ(r.attempts, 2);
    EXPECT_EQ(r.status_queries, 2);
    EXPECT_EQ(fake_->send_count() - before, 4);
    return r;
  }

  std::vector<std::vector<std::string>> SentValues(std::string_view name) const {
    std::vector<std::vector<std::string>> out;
    for (const SentRequest& s : fake_->sent()) out.push_back(Values(s, name));
    return out;
  }

  std::shared_ptr<FakeClock> clock_ = std::make_shared<FakeClock>();
  std::shared_ptr<FakeTransport> fake_ = std::make_shared<FakeTransport>(clock_);
  std::unique_ptr<Client> client_;
  Request post_;
  CallOptions call_;
};

using One = std::vector<std::string>;
using None = std::vector<std::string>;

TEST_F(TraceCallTest, ByDefaultNothingIsAddedAndTheEvidenceHasNoIds) {
  CallResult r = RetriedAndQueried(post_);
  EXPECT_THAT(SentValues("traceparent"), ElementsAre(None{}, None{}, None{}, None{}));
  EXPECT_THAT(SentValues("tracestate"), ElementsAre(None{}, None{}, None{}, None{}));
  std::vector<int> resends;
  for (const AttemptEvidence& ev : r.evidence) {
    resends.push_back(ev.resend_count);
    EXPECT_FALSE(IsValidTraceId(ev.trace_id));
    EXPECT_FALSE(IsValidSpanId(ev.span_id));
    EXPECT_EQ(ev.redirects, 0);
  }
  EXPECT_THAT(resends, ElementsAre(0, 1, 0, 1));
}

TEST_F(TraceCallTest, TheRequestsOwnHeadersPassThroughUnchangedByDefault) {
  Request req = post_;
  req.headers.emplace_back("TraceParent", kParent);
  req.headers.emplace_back("tracestate", kState);
  CallResult r = RetriedAndQueried(req);
  EXPECT_THAT(SentValues("traceparent"),
              ElementsAre(One{kParent}, One{kParent}, One{kParent}, One{kParent}));
  EXPECT_THAT(SentValues("tracestate"),
              ElementsAre(One{kState}, One{kState}, One{kState}, One{kState}));
  for (const AttemptEvidence& ev : r.evidence) {
    EXPECT_EQ(TraceIdHex(ev.trace_id), kTraceIdHex);
    EXPECT_EQ(SpanIdHex(ev.span_id), "00f067aa0ba902b7");
    EXPECT_EQ(ev.trace_flags, 1);
  }
}

TEST_F(TraceCallTest, AMalformedRequestHeaderIsLeftAloneByDefault) {
  // saferetry does not take part in tracing unless asked: the request is
  // sent as the caller built it; the evidence records no ids.
  Request req = post_;
  req.headers.emplace_back("traceparent", "00-garbage");
  CallResult r = RetriedAndQueried(req);
  EXPECT_THAT(SentValues("traceparent"), ElementsAre(One{"00-garbage"}, One{"00-garbage"},
                                                     One{"00-garbage"}, One{"00-garbage"}));
  for (const AttemptEvidence& ev : r.evidence) EXPECT_FALSE(IsValidTraceId(ev.trace_id));
}

TEST_F(TraceCallTest, TheCallersContextGoesUnchangedWithEveryAttemptAndQuery) {
  call_.trace_context = TraceContext{kParent, kState};
  CallResult r = RetriedAndQueried(post_);
  EXPECT_THAT(SentValues("traceparent"),
              ElementsAre(One{kParent}, One{kParent}, One{kParent}, One{kParent}));
  EXPECT_THAT(SentValues("tracestate"),
              ElementsAre(One{kState}, One{kState}, One{kState}, One{kState}));
  std::vector<int> resends;
  for (const AttemptEvidence& ev : r.evidence) {
    resends.push_back(ev.resend_count);
    EXPECT_EQ(TraceIdHex(ev.trace_id), kTraceIdHex);
    EXPECT_EQ(SpanIdHex(ev.span_id), "00f067aa0ba902b7");
    EXPECT_EQ(ev.trace_flags, 1);
  }
  EXPECT_THAT(resends, ElementsAre(0, 1, 0, 1));
  // The other headers are as before: the key on all four, the body's type
  // not on the queries.
  const std::vector<SentRequest> sent = fake_->sent();
  for (const SentRequest& s : sent) {
    EXPECT_EQ(Values(s, "Idempotency-Key"), One{*r.idempotency_key});
  }
  EXPECT_EQ(Values(sent[0], "Content-Type"), One{"application/json"});
  EXPECT_THAT(Values(sent[2], "Content-Type"), IsEmpty());
}

TEST_F(TraceCallTest, TheCallersContextReplacesTheRequestsOwnHeaders) {
  Request req = post_;
  req.headers.emplace_back("traceparent",
                           "00-11111111111111111111111111111111-2222222222222222-00");
  req.headers.emplace_back("tracestate", "old=1");
  req.headers.emplace_back("TRACESTATE", "older=2");
  call_.trace_context = TraceContext{kParent, ""};
  (void)RetriedAndQueried(req);
  EXPECT_THAT(SentValues("traceparent"),
              ElementsAre(One{kParent}, One{kParent}, One{kParent}, One{kParent}));
  // The call's context has no tracestate: none is sent.
  EXPECT_THAT(SentValues("tracestate"), ElementsAre(None{}, None{}, None{}, None{}));
}

// The request sent without its own trace headers is otherwise the caller's:
// method, URL, body, the other headers in order, the declared idempotency.
TEST_F(TraceCallTest, TheRequestWithoutItsTraceHeadersIsOtherwiseTheSame) {
  Request req = post_;
  req.headers = {{"A", "1"}, {"traceparent", kParent}, {"B", "2"}, {"tracestate", kState}};
  req.idempotency = Idempotency::kIdempotent;
  call_.trace_context = TraceContext{kParent, ""};
  fake_->Push(Step::Respond(200));
  CallResult r = client_->Execute(req, call_);
  ASSERT_EQ(r.outcome, Outcome::kSucceeded);
  const std::vector<SentRequest> all = fake_->sent();
  ASSERT_EQ(all.size(), 1u);
  const Request& sent = all[0].request;
  EXPECT_EQ(sent.method, "POST");
  EXPECT_EQ(sent.url, post_.url);
  EXPECT_EQ(sent.body, post_.body);
  EXPECT_EQ(sent.idempotency, Idempotency::kIdempotent);
  std::vector<std::string> names;
  for (const Header& h : sent.headers) names.push_back(h.first);
  EXPECT_THAT(names,
              ElementsAre("A", "B", "X-Request-Timeout-Ms", "X-Retry-Attempt", "traceparent"));
}

TEST_F(TraceCallTest, TheCallersContextIsNotChangedInTheRequest) {
  // The caller's request object is never modified.
  Request req = post_;
  req.headers.emplace_back("traceparent", kParent);
  const Request copy = req;
  call_.trace_context = TraceContext{kParent, ""};
  (void)RetriedAndQueried(req);
  EXPECT_EQ(req.headers, copy.headers);
}

TEST_F(TraceCallTest, AnInvalidTraceStateIsDroppedAndTheTraceparentKept) {
  call_.trace_context = TraceContext{kParent, "Bad Key=1"};
  (void)RetriedAndQueried(post_);
  EXPECT_THAT(SentValues("traceparent"),
              ElementsAre(One{kParent}, One{kParent}, One{kParent}, One{kParent}));
  EXPECT_THAT(SentValues("tracestate"), ElementsAre(None{}, None{}, None{}, None{}));
}

class MalformedContextTest : public TraceCallTest,
                             public ::testing::WithParamInterface<const char*> {};

// A caller's traceparent that does not parse is dropped with its tracestate,
// from every attempt and query, and the call goes on as without one.
TEST_P(MalformedContextTest, IsDroppedWithItsTraceStateAndTheCallSucceeds) {
  Request req = post_;
  req.headers.emplace_back("traceparent", kParent);  // replaced by the call's context
  call_.trace_context = TraceContext{GetParam(), kState};
  CallResult r = RetriedAndQueried(req);
  EXPECT_THAT(SentValues("traceparent"), ElementsAre(None{}, None{}, None{}, None{}));
  EXPECT_THAT(SentValues("tracestate"), ElementsAre(None{}, None{}, None{}, None{}));
  for (const AttemptEvidence& ev : r.evidence) EXPECT_FALSE(IsValidTraceId(ev.trace_id));
  EXPECT_TRUE(r.status.ok());
}

// With a tracer, it is told there is no caller context, and its spans (here
// in a new trace) are what is sent.
TEST_P(MalformedContextTest, ATracerStartsFromNoContext) {
  // A header value with a line break is refused with the request, before
  // anything is sent (ValidateRequest); the call's context is not a header.
  if (std::string_view(GetParam()).find('\r') != std::string_view::npos) return;
  RecordingTracer tracer;
  call_.tracer = &tracer;
  Request req = post_;
  req.headers.emplace_back("traceparent", GetParam());
  req.headers.emplace_back("tracestate", kState);
  CallResult r = RetriedAndQueried(req);
  ASSERT_EQ(tracer.starts.size(), 4u);
  for (const Span& s : tracer.starts) EXPECT_FALSE(s.had_caller);
  for (const std::string& state : tracer.caller_states) EXPECT_EQ(state, "");
  EXPECT_THAT(SentValues("traceparent"),
              ElementsAre(One{"00-00000000000000000000000000000001-000000000000aa01-00"},
                          One{"00-00000000000000000000000000000001-000000000000aa02-00"},
                          One{"00-00000000000000000000000000000001-000000000000bb01-00"},
                          One{"00-00000000000000000000000000000001-000000000000bb02-00"}));
  EXPECT_THAT(SentValues("tracestate"), ElementsAre(None{}, None{}, None{}, None{}));
}

INSTANTIATE_TEST_SUITE_P(Forms, MalformedContextTest, ::testing::ValuesIn(kMalformed));

TEST_F(TraceCallTest, TwoTraceparentHeadersInTheRequestAreNoContext) {
  RecordingTracer tracer;
  call_.tracer = &tracer;
  Request req = post_;
  req.headers.emplace_back("traceparent", kParent);
  req.headers.emplace_back("traceparent", kParent);
  (void)RetriedAndQueried(req);
  for (const Span& s : tracer.starts) EXPECT_FALSE(s.had_caller);
  // Exactly one header on each, the tracer's.
  for (const std::vector<std::string>& v : SentValues("traceparent")) EXPECT_EQ(v.size(), 1u);
}

TEST_F(TraceCallTest, ATracerGivesEachAttemptAndQueryItsSpan) {
  RecordingTracer tracer;
  call_.tracer = &tracer;
  call_.trace_context = TraceContext{kParent, kState};
  CallResult r = RetriedAndQueried(post_);
  EXPECT_THAT(SentValues("traceparent"),
              ElementsAre(One{"00-4bf92f3577b34da6a3ce929d0e0e4736-000000000000aa01-01"},
                          One{"00-4bf92f3577b34da6a3ce929d0e0e4736-000000000000aa02-01"},
                          One{"00-4bf92f3577b34da6a3ce929d0e0e4736-000000000000bb01-01"},
                          One{"00-4bf92f3577b34da6a3ce929d0e0e4736-000000000000bb02-01"}));
  // The caller's tracestate goes with the spans.
  EXPECT_THAT(SentValues("tracestate"),
              ElementsAre(One{kState}, One{kState}, One{kState}, One{kState}));

  ASSERT_EQ(tracer.starts.size(), 4u);
  const std::vector<std::tuple<int, bool, int, bool>> expected = {
      {1, false, 0, true}, {2, false, 1, true}, {1, true, 0, true}, {2, true, 1, true}};
  for (std::size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    const Span& s = tracer.starts[i];
    EXPECT_EQ(std::make_tuple(s.number, s.is_status_query, s.resend_count, s.had_caller),
              expected[i]);
    EXPECT_EQ(tracer.caller_states[i], kState);
  }
  EXPECT_THAT(tracer.urls,
              ElementsAre("http://127.0.0.1:8080/orders", "http://127.0.0.1:8080/orders",
                          "http://127.0.0.1:8080/orders/by-key/" + *r.idempotency_key,
                          "http://127.0.0.1:8080/orders/by-key/" + *r.idempotency_key));
  EXPECT_THAT(tracer.ended, ElementsAre("000000000000aa01", "000000000000aa02", "000000000000bb01",
                                        "000000000000bb02"));
  EXPECT_EQ(tracer.call_ends, 1);
  std::vector<std::string> spans;
  for (const AttemptEvidence& ev : r.evidence) {
    EXPECT_EQ(TraceIdHex(ev.trace_id), kTraceIdHex);
    spans.push_back(SpanIdHex(ev.span_id));
  }
  EXPECT_THAT(spans, ElementsAre("000000000000aa01", "000000000000aa02", "000000000000bb01",
                                 "000000000000bb02"));
}

TEST_F(TraceCallTest, ATracerMayReplaceTheTraceState) {
  RecordingTracer tracer;
  tracer.replace_state = "mine=1,congo=t61rcWkgMzE";
  call_.tracer = &tracer;
  call_.trace_context = TraceContext{kParent, kState};
  (void)RetriedAndQueried(post_);
  const One mine{"mine=1,congo=t61rcWkgMzE"};
  EXPECT_THAT(SentValues("tracestate"), ElementsAre(mine, mine, mine, mine));

  // An invalid one sends none.
  fake_ = std::make_shared<FakeTransport>(clock_);
  ClientOptions o;
  o.transport = fake_;
  o.clock = clock_;
  o.budget = MakeUnlimitedBudget();
  o.status_query_budget = MakeUnlimitedBudget();
  client_ = *Client::Create(std::move(o));
  tracer.replace_state = "MINE=1";
  (void)RetriedAndQueried(post_);
  EXPECT_THAT(SentValues("tracestate"), ElementsAre(None{}, None{}, None{}, None{}));
}

// A client-wide tracer serves calls that name none; the call's wins.
TEST_F(TraceCallTest, TheClientsTracerAndTheCallsTracer) {
  auto shared = std::make_shared<RecordingTracer>();
  ClientOptions o;
  o.transport = fake_;
  o.clock = clock_;
  o.budget = MakeUnlimitedBudget();
  o.status_query_budget = MakeUnlimitedBudget();
  o.tracer = shared;
  client_ = *Client::Create(std::move(o));
  call_.trace_context = TraceContext{kParent, ""};
  (void)RetriedAndQueried(post_);
  EXPECT_EQ(shared->starts.size(), 4u);
  RecordingTracer own;
  call_.tracer = &own;
  (void)RetriedAndQueried(post_);
  EXPECT_EQ(shared->starts.size(), 4u);
  EXPECT_EQ(own.starts.size(), 4u);
}

// A tracer's span that is not valid is ignored: the caller's context goes.
TEST_F(TraceCallTest, AnInvalidSpanFromTheTracerFallsBackToTheCallers) {
  struct BadTracer final : AttemptTracer {
    std::optional<AttemptSpan> OnAttemptStart(const AttemptSpanStart& start) override {
      AttemptSpan span;
      span.traceparent = *start.caller;
      switch (start.number + (start.is_status_query ? 2 : 0)) {
        case 1:
          span.traceparent.parent_id = SpanId{};
          break;
        case 2:
          span.traceparent.trace_id = TraceId{};
          break;
        case 3:
          span.traceparent.version = 0xff;
          break;
        default:
          return std::nullopt;
      }
      return span;
    }
  } tracer;
  call_.tracer = &tracer;
  call_.trace_context = TraceContext{kParent, kState};
  CallResult r = RetriedAndQueried(post_);
  EXPECT_THAT(SentValues("traceparent"),
              ElementsAre(One{kParent}, One{kParent}, One{kParent}, One{kParent}));
  for (const AttemptEvidence& ev : r.evidence) {
    EXPECT_EQ(SpanIdHex(ev.span_id), "00f067aa0ba902b7");
  }
}

// A span of a later version is written as version 00.
TEST_F(TraceCallTest, ATracersSpanIsWrittenAsVersion00) {
  struct V1Tracer final : AttemptTracer {
    std::optional<AttemptSpan> OnAttemptStart(const AttemptSpanStart& start) override {
      AttemptSpan span;
      span.traceparent = *start.caller;
      span.traceparent.version = 1;
      span.traceparent.parent_id[0] = 0x99;
      return span;
    }
  } tracer;
  call_.tracer = &tracer;
  call_.trace_context = TraceContext{kParent, ""};
  fake_->Push(Step::Respond(200));
  CallResult r = client_->Execute(post_, call_);
  ASSERT_EQ(r.outcome, Outcome::kSucceeded);
  EXPECT_THAT(SentValues("traceparent"),
              ElementsAre(One{"00-4bf92f3577b34da6a3ce929d0e0e4736-99f067aa0ba902b7-01"}));
}

// Redirect hops the transport followed are resends: they count in the next
// attempt's resend_count.
TEST_F(TraceCallTest, RedirectHopsCountAsResends) {
  Step redirected = Step::Respond(503);
  redirected.result.redirects = 2;
  fake_->Push(redirected).Push(Step::Respond(200));
  CallResult r = client_->Execute(Request{"GET", "http://127.0.0.1:8080/orders/1", {}, ""}, call_);
  ASSERT_EQ(r.outcome, Outcome::kSucceeded);
  ASSERT_EQ(r.evidence.size(), 2u);
  EXPECT_EQ(r.evidence[0].resend_count, 0);
  EXPECT_EQ(r.evidence[0].redirects, 2);
  EXPECT_EQ(r.evidence[1].resend_count, 3);
  EXPECT_EQ(r.evidence[1].redirects, 0);
}

// A status query answered by the policy's callback is not a request: no
// trace context, no tracer; it still counts with the queries.
TEST_F(TraceCallTest, ACallbackQueryCarriesNoContext) {
  RetryPolicyOptions p;
  p.status_query.callback = [n = 0](std::string_view, Duration) mutable {
    StatusQueryReply reply;
    reply.answer = ++n == 1 ? StatusAnswer::kProcessing : StatusAnswer::kFound;
    reply.result.delivery = Delivery::kResponseReceived;
    reply.result.response = Response{n == 1 ? 202 : 200, {}, "", false};
    return reply;
  };
  call_.policy = *RetryPolicy::Create(p);
  call_.status_url.clear();
  RecordingTracer tracer;
  call_.tracer = &tracer;
  call_.trace_context = TraceContext{kParent, ""};
  fake_->Push(Step::CommitThenLost());
  CallResult r = client_->Execute(post_, call_);
  ASSERT_EQ(r.outcome, Outcome::kSucceeded);
  ASSERT_EQ(r.evidence.size(), 3u);
  EXPECT_EQ(tracer.starts.size(), 1u);
  EXPECT_EQ(tracer.ended.size(), 1u);
  EXPECT_TRUE(IsValidTraceId(r.evidence[0].trace_id));
  EXPECT_FALSE(IsValidTraceId(r.evidence[1].trace_id));
  EXPECT_EQ(r.evidence[1].resend_count, 0);
  EXPECT_EQ(r.evidence[2].resend_count, 1);
}

// --- No allocation added to a default call ---------------------------------

// Answers 200 and records nothing: only the client's own allocations count.
class OkTransport final : public Transport {
 public:
  TransportResult Send(const Request&, const AttemptOptions&) override {
    TransportResult r;
    r.delivery = Delivery::kResponseReceived;
    r.response.emplace();
    r.response->status_code = 200;
    return r;
  }
};

long AllocationsOfOneCall(Client& client, const Request& request, const CallOptions& call) {
  g_allocations.store(0);
  g_count_allocations.store(true);
  {
    CallResult r = client.Execute(request, call);
    (void)r;
  }
  g_count_allocations.store(false);
  return g_allocations.load();
}

TEST(TraceAllocationTest, TheRequestsOwnTraceparentCostsADefaultCallNoAllocation) {
  ClientOptions o;
  o.transport = std::make_shared<OkTransport>();
  o.clock = std::make_shared<FakeClock>();
  o.budget = MakeUnlimitedBudget();
  std::unique_ptr<Client> client = *Client::Create(std::move(o));
  const Request plain{"GET", "http://127.0.0.1:8080/orders/1", {}, ""};
  Request traced = plain;
  traced.headers = {{"traceparent", kParent}, {"tracestate", kState}};
  const CallOptions call;
  (void)AllocationsOfOneCall(*client, plain, call);  // warm up
  const long without = AllocationsOfOneCall(*client, plain, call);
  const long with = AllocationsOfOneCall(*client, traced, call);
  EXPECT_EQ(with, without);
  // And the evidence has the ids.
  CallResult r = client->Execute(traced, call);
  ASSERT_EQ(r.evidence.size(), 1u);
  EXPECT_EQ(TraceIdHex(r.evidence[0].trace_id), kTraceIdHex);
}

}  // namespace
}  // namespace saferetry

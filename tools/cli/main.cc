// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// saferetry [OPTIONS] URL: performs one HTTP request safely (one idempotency
// key per invocation, a status query before any resend of an ambiguous
// attempt, the deadline honoured) and says whether it SUCCEEDED, FAILED or is
// UNKNOWN. The interface is documented in docs/cli.md.
//
// saferetry reconcile --journal FILE ...: resolves the journal's unfinished
// intents by status queries and prints one JSON line per intent.
//
// saferetry --version: prints "saferetry MAJOR.MINOR.PATCH".
//
// Exit codes: 0 SUCCEEDED, 1 FAILED, 2 UNKNOWN, 64 usage error or bad input,
// 74 the journal cannot be opened, read or written.

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "saferetry/cancellation.h"
#include "saferetry/client.h"
#include "saferetry/config.h"
#include "saferetry/curl_transport.h"
#include "saferetry/reconciler.h"
#include "saferetry/redaction.h"
#include "saferetry/result.h"
#include "saferetry/sqlite_journal.h"
#include "saferetry/version.h"
#ifdef SAFERETRY_CLI_HAS_POSTGRES
#include "saferetry/postgres_journal.h"
#endif
#include "tools/cli/duration.h"
#include "tools/cli/report.h"

namespace saferetry {
namespace internal {
namespace {

constexpr std::string_view kDefaultDeadline = "30s";

// The command line as given, before interpretation.
struct Flags {
  std::string url;
  std::string method;
  std::string data;
  std::vector<std::string> headers;
  std::string idempotency_key;
  bool no_idempotency_key = false;
  std::string status_url;
  bool assume_dedup = false;
  std::string deadline = std::string(kDefaultDeadline);
  std::string attempt_timeout;
  std::string max_attempts;
  std::string max_status_queries;
  std::string resolution_window;
  std::string connect_timeout;
  std::string first_byte_timeout;
  std::string speed_limit;
  std::string speed_time;
  bool fence = false;
  std::string policy;
  bool verbose = false;
  bool summary_json = false;
  std::string journal;
  std::string journal_schema;
  std::string proxy;
  std::string noproxy;
  std::string cacert;
  std::string capath;
  HttpVersion http_version = HttpVersion::kHttp2OverTls;

  // Which options were given at all.
  bool method_given = false;
  bool data_given = false;
  bool key_given = false;
  bool deadline_given = false;
  bool attempt_timeout_given = false;
  bool max_attempts_given = false;
  bool max_status_queries_given = false;
  bool resolution_window_given = false;
  bool connect_timeout_given = false;
  bool first_byte_timeout_given = false;
  bool speed_limit_given = false;
  bool speed_time_given = false;
};

// Everything needed to run the call.
struct Invocation {
  Request request;
  RetryPolicyOptions retry;  // the policy file's, with the flags applied
  CallOptions call;
  ClientOptions client;
  bool verbose = false;
  bool summary_json = false;
  std::vector<std::string> warnings;
};

absl::string_view AsAbsl(std::string_view s) { return absl::string_view(s.data(), s.size()); }
std::string_view AsStd(absl::string_view s) { return std::string_view(s.data(), s.size()); }

// One line: CLI11 and library messages never need more.
std::string OneLine(std::string_view message) {
  std::string out(message);
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

absl::Status Usage(std::string_view flag, std::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(AsAbsl(flag), ": ", AsAbsl(message)));
}

// -d DATA, -d @FILE, -d @- (standard input).
absl::StatusOr<std::string> ReadData(const std::string& data) {
  if (data.empty() || data.front() != '@') return data;
  const std::string path = data.substr(1);
  if (path == "-") {
    std::string body((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    if (std::cin.bad()) return Usage("--data", "cannot read standard input");
    return body;
  }
  if (path.empty()) return Usage("--data", "\"@\" must be followed by a file name");
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Usage("--data", absl::StrCat("cannot read file \"", path, "\": ", std::strerror(errno)));
  }
  std::ostringstream body;
  body << in.rdbuf();
  if (in.bad()) {
    return Usage("--data", absl::StrCat("cannot read file \"", path, "\": read error"));
  }
  return body.str();
}

// "Name: value" -> {"Name", "value"}; the value is trimmed of blanks.
absl::StatusOr<Header> ParseHeaderFlag(std::string_view text) {
  const std::size_t colon = text.find(':');
  if (colon == std::string_view::npos) {
    return Usage("--header", absl::StrCat("expected \"Name: value\", got \"",
                                          absl::CHexEscape(AsAbsl(text)), "\" (no colon)"));
  }
  std::string_view value = text.substr(colon + 1);
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  return Header(std::string(text.substr(0, colon)), std::string(value));
}

// Names the command-line flag behind a library validation message.
absl::Status AttributeRequestError(const absl::Status& s) {
  const std::string_view m = AsStd(s.message());
  if (absl::StartsWith(AsAbsl(m), "request.url")) return Usage("URL", m);
  if (absl::StartsWith(AsAbsl(m), "request.method")) return Usage("--request", m);
  if (absl::StartsWith(AsAbsl(m), "request.headers")) return Usage("--header", m);
  return s;
}

absl::StatusOr<int> ParseCount(std::string_view flag, const std::string& text, int minimum) {
  int n = 0;
  if (!absl::SimpleAtoi(text, &n)) {
    return Usage(flag,
                 absl::StrCat("expected a whole number, got \"", absl::CHexEscape(text), "\""));
  }
  if (n < minimum) return Usage(flag, absl::StrCat("must be >= ", minimum, ", got ", n));
  return n;
}

// --connect-timeout, --first-byte-timeout, --speed-limit and --speed-time
// over the policy file's limits. As curl: a speed limit alone is checked
// over 30 s, a speed time alone against 1 byte per second.
absl::Status ApplyPhaseLimitFlags(const Flags& flags, PhaseLimits* limits) {
  if (flags.connect_timeout_given) {
    absl::StatusOr<Duration> d = ParseDuration(flags.connect_timeout);
    if (!d.ok()) return Usage("--connect-timeout", AsStd(d.status().message()));
    limits->connect = *d;
  }
  if (flags.first_byte_timeout_given) {
    absl::StatusOr<Duration> d = ParseDuration(flags.first_byte_timeout);
    if (!d.ok()) return Usage("--first-byte-timeout", AsStd(d.status().message()));
    limits->first_byte = *d;
  }
  if (flags.speed_limit_given) {
    std::int64_t n = 0;
    if (!absl::SimpleAtoi(flags.speed_limit, &n) || n < 1 || n > INT32_MAX) {
      return Usage("--speed-limit",
                   absl::StrCat("expected bytes per second, a whole number in 1..", INT32_MAX,
                                ", got \"", absl::CHexEscape(flags.speed_limit), "\""));
    }
    limits->speed_limit = n;
    if (!flags.speed_time_given && limits->speed_time == Duration(0)) {
      limits->speed_time = std::chrono::seconds(30);
    }
  }
  if (flags.speed_time_given) {
    absl::StatusOr<Duration> d = ParseDuration(flags.speed_time);
    if (!d.ok()) return Usage("--speed-time", AsStd(d.status().message()));
    if (*d % std::chrono::seconds(1) != Duration(0)) {
      return Usage("--speed-time", absl::StrCat("libcurl counts whole seconds, got \"",
                                                absl::CHexEscape(flags.speed_time), "\""));
    }
    limits->speed_time = *d;
    if (!flags.speed_limit_given && limits->speed_limit == 0) limits->speed_limit = 1;
  }
  return absl::OkStatus();
}

absl::StatusOr<Invocation> Interpret(const Flags& flags, TimePoint start) {
  Invocation inv;
  inv.verbose = flags.verbose;
  inv.summary_json = flags.summary_json;

  // Policy first: every flag given on the command line overrides it.
  if (!flags.policy.empty()) {
    absl::StatusOr<Policy> policy = LoadPolicyFile(flags.policy);
    if (!policy.ok()) return Usage("--policy", AsStd(policy.status().message()));
    for (const std::string& w : policy->warnings) {
      inv.warnings.push_back(absl::StrCat("--policy: ", w));
    }
    inv.retry = *policy;
    absl::Status s = ApplyToClientOptions(*policy, &inv.client);
    if (!s.ok()) return Usage("--policy", AsStd(s.message()));
  }

  Request& req = inv.request;
  req.url = flags.url;
  if (flags.data_given) {
    absl::StatusOr<std::string> body = ReadData(flags.data);
    if (!body.ok()) return body.status();
    req.body = *std::move(body);
  }
  req.method = flags.method_given ? flags.method : (flags.data_given ? "POST" : "GET");
  for (const std::string& h : flags.headers) {
    absl::StatusOr<Header> header = ParseHeaderFlag(h);
    if (!header.ok()) return header.status();
    req.headers.push_back(*std::move(header));
  }
  if (absl::Status s = ValidateRequest(req); !s.ok()) return AttributeRequestError(s);

  CallOptions& call = inv.call;
  RetryPolicyOptions& retry = inv.retry;
  // The deadline counts from process start, not from the first send.
  Duration deadline = retry.timeout;
  if (flags.deadline_given || flags.policy.empty()) {
    absl::StatusOr<Duration> d = ParseDuration(flags.deadline);
    if (!d.ok()) return Usage("--deadline", AsStd(d.status().message()));
    deadline = *d;
  }
  call.deadline = Deadline::After(start, deadline);
  if (flags.attempt_timeout_given) {
    absl::StatusOr<Duration> d = ParseDuration(flags.attempt_timeout);
    if (!d.ok()) return Usage("--attempt-timeout", AsStd(d.status().message()));
    retry.deadline_options.attempt_cap = *d;
  }
  if (flags.max_attempts_given) {
    absl::StatusOr<int> n = ParseCount("--max-attempts", flags.max_attempts, 1);
    if (!n.ok()) return n.status();
    retry.max_attempts = *n;
  }
  if (flags.max_status_queries_given) {
    absl::StatusOr<int> n = ParseCount("--max-status-queries", flags.max_status_queries, 0);
    if (!n.ok()) return n.status();
    retry.max_status_queries = *n;
    if (retry.max_status_queries > kMaxStatusQueriesHardCap) {
      inv.warnings.push_back(absl::StrCat("--max-status-queries: ", retry.max_status_queries,
                                          " is above the hard cap; using ",
                                          kMaxStatusQueriesHardCap));
      retry.max_status_queries = kMaxStatusQueriesHardCap;
    }
  }
  if (flags.resolution_window_given) {
    absl::StatusOr<Duration> d = ParseDuration(flags.resolution_window);
    if (!d.ok()) return Usage("--resolution-window", AsStd(d.status().message()));
    retry.deadline_options.resolution_window = *d;
  }
  if (absl::Status s = ApplyPhaseLimitFlags(flags, &retry.phase_limits); !s.ok()) return s;
  if (flags.fence) retry.status_query.fence_when_giving_up = true;
  if (retry.max_attempts > kMaxAttemptsHardCap) {
    inv.warnings.push_back(absl::StrCat("--max-attempts: ", retry.max_attempts,
                                        " is above the hard cap; using ", kMaxAttemptsHardCap));
    retry.max_attempts = kMaxAttemptsHardCap;
  }

  if (flags.no_idempotency_key) {
    retry.key_mode = KeyMode::kNever;
    if (FindHeader(req.headers, retry.idempotency_header).has_value()) {
      return Usage("--no-idempotency-key",
                   absl::StrCat("conflicts with the ", retry.idempotency_header,
                                " header given with --header"));
    }
  }
  if (flags.key_given) {
    if (absl::Status s = ValidateIdempotencyKey(flags.idempotency_key); !s.ok()) {
      return Usage("--idempotency-key", AsStd(s.message()));
    }
    call.idempotency_key = flags.idempotency_key;
    if (retry.key_mode == KeyMode::kNever) retry.key_mode = KeyMode::kAuto;  // from a policy
  }
  if (!flags.status_url.empty()) {
    StatusQuery query;
    query.url_template = flags.status_url;
    if (absl::Status s = ValidateStatusQuery(query); !s.ok()) {
      return Usage("--status-url", AsStd(s.message()));
    }
    call.status_url = flags.status_url;
  }
  if (flags.assume_dedup) retry.server_deduplicates = true;
  // Built once, for the client and the call.
  absl::StatusOr<std::shared_ptr<const RetryPolicy>> built = RetryPolicy::Create(retry);
  if (!built.ok()) return built.status();
  inv.client.policy = *built;
  call.policy = *std::move(built);
  if (absl::Status s = ValidateCallOptions(call); !s.ok()) return s;

  const bool keyed = retry.key_mode != KeyMode::kNever &&
                     (!call.idempotency_key.empty() ||
                      FindHeader(req.headers, retry.idempotency_header).has_value() ||
                      retry.key_mode == KeyMode::kAlways || !IsIdempotent(req));
  if (!keyed && !(call.status_url.empty() && retry.status_query.url_template.empty())) {
    inv.warnings.push_back(
        "--status-url: unused, the request carries no idempotency key (give --idempotency-key)");
  }
  if (!keyed && !flags.journal.empty()) {
    inv.warnings.push_back(
        "--journal: unused, the request carries no idempotency key (give --idempotency-key)");
  }
  if (!keyed && retry.server_deduplicates) {
    inv.warnings.push_back("--assume-dedup: unused, the request carries no idempotency key");
  }
  return inv;
}

// Prints each attempt's evidence on stderr. Header values are never
// printed; the URL is printed without its userinfo (credentials).
class VerboseListener final : public CallListener {
 public:
  explicit VerboseListener(const Request& request) : request_(request) {}
  void OnAttemptStart(int number, bool is_status_query) override {
    if (is_status_query) {
      std::fprintf(stderr, "saferetry: > status query %d\n", number);
    } else {
      const std::string url = RedactUrl(request_.url);
      std::fprintf(stderr, "saferetry: > attempt %d: %s %s\n", number, request_.method.c_str(),
                   url.c_str());
    }
  }
  void OnAttemptEnd(const AttemptEvidence& evidence) override {
    std::fprintf(stderr, "saferetry: < %s\n", DescribeEvidence(evidence).c_str());
  }

 private:
  const Request& request_;
};

// Turns SIGINT and SIGTERM into `CancellationToken::Cancel()`. The signals
// must be blocked in every thread before any is started (see `main`); a
// dedicated thread takes them with sigwait, so nothing runs in a signal
// handler.
class SignalCanceller {
 public:
  explicit SignalCanceller(CancellationToken* token) : token_(token) {
    thread_ = std::thread([this] { Run(); });
  }
  ~SignalCanceller() {
    stopping_.store(true, std::memory_order_release);
    // Wakes the sigwait below; it sees `stopping_` and leaves.
    pthread_kill(thread_.native_handle(), SIGINT);
    thread_.join();
  }
  SignalCanceller(const SignalCanceller&) = delete;
  SignalCanceller& operator=(const SignalCanceller&) = delete;

 private:
  void Run() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) continue;
      if (stopping_.load(std::memory_order_acquire)) return;
      token_->Cancel();
    }
  }

  CancellationToken* token_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

void PrintError(std::string_view message) {
  std::fprintf(stderr, "saferetry: %s\n", OneLine(message).c_str());
}

// Opens the journal for the tool: a libpq URI (postgresql://..., postgres://...)
// is the PostgreSQL journal, in `schema` when given; anything else is the
// path of the SQLite journal (created 0600 if missing).
absl::StatusOr<std::shared_ptr<IntentJournal>> OpenJournal(const std::string& path,
                                                           const std::string& schema) {
  if (absl::StartsWith(path, "postgresql://") || absl::StartsWith(path, "postgres://")) {
#ifdef SAFERETRY_CLI_HAS_POSTGRES
    PostgresJournalOptions options;
    options.dsn = path;
    options.schema = schema;
    options.max_connections = 2;
    return OpenPostgresJournal(options);
#else
    return absl::UnimplementedError(
        "a PostgreSQL journal needs saferetry built with libpq (saferetry::journal_postgres)");
#endif
  }
  if (!schema.empty()) {
    return absl::InvalidArgumentError(
        "--journal-schema: only for a PostgreSQL journal (postgresql://...)");
  }
  SqliteJournalOptions options;
  options.path = path;
  return OpenSqliteJournal(options);
}

// A non-negative duration: "0s" (or "0", "0ms", ...) is zero; anything else
// as `ParseDuration`.
absl::StatusOr<Duration> ParseAge(const std::string& text) {
  const std::size_t digits = text.find_first_not_of('0');
  if (!text.empty() && digits != 0) {
    const std::string unit = digits == std::string::npos ? "" : text.substr(digits);
    if (unit.empty() || unit == "ms" || unit == "s" || unit == "m" || unit == "h") {
      return Duration::zero();
    }
  }
  return ParseDuration(text);
}

// A transport option's error under the flag that set it ("proxy: ..." ->
// "--proxy: ...").
std::string AsFlagError(absl::string_view message) {
  static constexpr std::pair<const char*, const char*> kFlags[] = {
      {"no_proxy: ", "--noproxy: "},
      {"proxy: ", "--proxy: "},
      {"ca_file: ", "--cacert: "},
      {"ca_dir: ", "--capath: "},
      {"http_version: ", "--http2-prior-knowledge: "}};
  for (const auto& [field, flag] : kFlags) {
    if (absl::StartsWith(message, field)) {
      return absl::StrCat(flag, message.substr(std::string_view(field).size()));
    }
  }
  return std::string(message);
}

// Reports a transport that could not be made: a bad option under its flag
// (exit 64), anything else as a failure to start (exit 1).
int TransportExitCode(const absl::Status& status) {
  if (status.code() == absl::StatusCode::kInvalidArgument) {
    PrintError(AsFlagError(status.message()));
    return kExitUsage;
  }
  PrintError(absl::StrCat("cannot start the HTTP transport: ", status.ToString()));
  return kExitFailed;
}

// The transport's proxy as curl chooses it (docs/cli.md): `--proxy` (empty:
// none), else the environment for the URL's scheme — `https_proxy` or
// `HTTPS_PROXY` for https, `http_proxy` (lower case only, as curl) for http,
// then `all_proxy` or `ALL_PROXY`; `--noproxy`, else `no_proxy` or
// `NO_PROXY`. Read once, here: the library itself never reads them.
// `cacert` / `capath`: the CAs to trust instead of the system's (--cacert,
// --capath); empty: the system's. `http_version`: --http1.1, --http2,
// --http2-prior-knowledge.
CurlTransportOptions TransportOptionsFor(std::string_view url, const std::string& proxy,
                                         bool proxy_given, const std::string& noproxy,
                                         bool noproxy_given, const std::string& cacert,
                                         const std::string& capath, HttpVersion http_version) {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v != nullptr ? v : "";
  };
  CurlTransportOptions o;
  // One call per process: libcurl's own sentence for a failure, as curl
  // prints it, is worth its 256 bytes here.
  o.libcurl_error_text = true;
  o.ca_file = cacert;
  o.ca_dir = capath;
  o.http_version = http_version;
  if (proxy_given) {
    o.proxy = proxy;
  } else {
    const bool https =
        absl::StartsWithIgnoreCase(absl::string_view(url.data(), url.size()), "https:");
    o.proxy = https ? env("https_proxy") : env("http_proxy");
    if (o.proxy.empty() && https) o.proxy = env("HTTPS_PROXY");
    if (o.proxy.empty()) o.proxy = env("all_proxy");
    if (o.proxy.empty()) o.proxy = env("ALL_PROXY");
  }
  o.no_proxy = noproxy_given ? noproxy : env("no_proxy");
  if (!noproxy_given && o.no_proxy.empty()) o.no_proxy = env("NO_PROXY");
  return o;
}

// curl's HTTP version flags, at most one of them: --http1.1, --http2 (h2
// over TLS by ALPN, HTTP/1.1 otherwise: the default) and
// --http2-prior-knowledge (h2 from the first byte, also h2c on http://).
void AddHttpVersionFlags(CLI::App& app, HttpVersion* version) {
  CLI::Option* h1 = app.add_flag_callback(
      "--http1.1", [version] { *version = HttpVersion::kHttp1_1; }, "Speak HTTP/1.1 only");
  CLI::Option* h2 = app.add_flag_callback(
      "--http2", [version] { *version = HttpVersion::kHttp2OverTls; },
      "HTTP/2 over TLS when the server agrees (ALPN), else HTTP/1.1 (the default)");
  CLI::Option* h2pk = app.add_flag_callback(
      "--http2-prior-knowledge", [version] { *version = HttpVersion::kHttp2PriorKnowledge; },
      "HTTP/2 from the first byte, without negotiation: also h2c on http:// URLs");
  h1->excludes(h2)->excludes(h2pk);
  h2->excludes(h1)->excludes(h2pk);
  h2pk->excludes(h1)->excludes(h2);
}

// saferetry reconcile: see docs/cli.md.
int RunReconcile(int argc, char** argv, std::shared_ptr<Clock> clock) {
  std::string journal_path;
  std::string journal_schema;
  std::string status_url;
  std::vector<std::string> headers;
  std::string older_than;
  std::string prune_older_than;
  std::string timeout = "10s";
  std::string time_limit = "5m";
  std::string max_intents = "1000";
  bool fence = false;
  CLI::App app{
      "Resolves the journal's unfinished intents (PENDING, SENT, UNKNOWN) by status queries "
      "only and prints one JSON object per intent tried, then one per unfinished intent left "
      "alone (claimed, in flight), and a summary line on stderr. Exit 0 when every intent tried "
      "ended SUCCEEDED or FAILED (claimed or in-flight intents do not count), 2 when any is "
      "still UNKNOWN, 74 when the journal cannot be read or written, 64 for bad input.",
      "saferetry reconcile"};
  app.add_option("--journal", journal_path,
                 "The intent journal: a SQLite file, or a PostgreSQL URI postgresql://...")
      ->required();
  app.add_option("--journal-schema", journal_schema,
                 "The schema of a PostgreSQL journal (default: the server's search_path)");
  app.add_option("--status-url", status_url,
                 "Status URL with {key} (default: the one recorded with each intent)");
  app.add_option("-H,--header", headers,
                 "\"Name: value\" sent on every status query, e.g. credentials (repeatable)")
      ->allow_extra_args(false);
  CLI::Option* older = app.add_option(
      "--older-than", older_than,
      "Every unfinished intent created at least this long ago whose claim has expired, "
      "whatever its deadline (0s: all). Default: those whose deadline has passed");
  app.add_flag("--fence", fence,
               "After a \"not found\", ask the server to fence the key (a fenced \"not "
               "found\" ends FAILED)");
  CLI::Option* prune = app.add_option(
      "--prune-older-than", prune_older_than,
      "Afterwards, delete SUCCEEDED and FAILED intents last updated this long ago (unresolved "
      "intents are never deleted)");
  app.add_option("--timeout", timeout, "Time per intent (default 10s)");
  app.add_option("--time-limit", time_limit, "No intent is started after this (default 5m)");
  app.add_option("--max-intents", max_intents, "Intents per run (default 1000)");
  std::string proxy;
  std::string noproxy;
  CLI::Option* proxy_option = app.add_option(
      "--proxy", proxy,
      "Proxy for the status queries (\"\": none). Default: the environment's variables, as curl "
      "reads them, for the --status-url scheme");
  CLI::Option* noproxy_option =
      app.add_option("--noproxy", noproxy, "Hosts that bypass the proxy. Default: no_proxy");
  std::string cacert;
  std::string capath;
  app.add_option("--cacert", cacert, "PEM file of the CAs to trust instead of the system's");
  app.add_option("--capath", capath, "Directory of CA certificates named by hash, searched too");
  HttpVersion http_version = HttpVersion::kHttp2OverTls;
  AddHttpVersionFlags(app, &http_version);
  std::string wait_for_claims;
  CLI::Option* wait = app.add_option(
      "--wait-for-claims", wait_for_claims,
      "After the walk, wait up to this long for claimed intents' claims to run out, then try "
      "them (within --time-limit). Default: do not wait");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    PrintError(absl::StrCat(e.what(), " (see saferetry reconcile --help)"));
    return kExitUsage;
  }

  ReconcilerOptions options;
  options.resolve.status_url_template = status_url;
  options.resolve.fence = fence;
  for (const std::string& h : headers) {
    absl::StatusOr<Header> header = ParseHeaderFlag(h);
    if (!header.ok()) {
      PrintError(AsStd(header.status().message()));
      return kExitUsage;
    }
    if (absl::Status s = ValidateHeader(*header, "--header"); !s.ok()) {
      PrintError(AsStd(s.message()));
      return kExitUsage;
    }
    options.resolve.headers.push_back(*std::move(header));
  }
  if (!status_url.empty()) {
    StatusQuery q;
    q.url_template = status_url;
    if (absl::Status s = ValidateStatusQuery(q); !s.ok()) {
      PrintError(absl::StrCat("--status-url: ", s.message()));
      return kExitUsage;
    }
  }
  const auto as_ms = [](Duration d) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(d);
  };
  if (older->count() > 0) {
    absl::StatusOr<Duration> d = ParseAge(older_than);
    if (!d.ok()) {
      PrintError(absl::StrCat("--older-than: ", d.status().message()));
      return kExitUsage;
    }
    options.older_than = as_ms(*d);
  }
  if (prune->count() > 0) {
    absl::StatusOr<Duration> d = ParseAge(prune_older_than);
    if (!d.ok()) {
      PrintError(absl::StrCat("--prune-older-than: ", d.status().message()));
      return kExitUsage;
    }
    options.prune_older_than = as_ms(*d);
  }
  absl::StatusOr<Duration> per_intent = ParseDuration(timeout);
  if (!per_intent.ok()) {
    PrintError(absl::StrCat("--timeout: ", per_intent.status().message()));
    return kExitUsage;
  }
  options.resolve.timeout = *per_intent;
  absl::StatusOr<Duration> limit = ParseDuration(time_limit);
  if (!limit.ok()) {
    PrintError(absl::StrCat("--time-limit: ", limit.status().message()));
    return kExitUsage;
  }
  options.time_limit = *limit;
  absl::StatusOr<int> count = ParseCount("--max-intents", max_intents, 1);
  if (!count.ok()) {
    PrintError(AsStd(count.status().message()));
    return kExitUsage;
  }
  options.max_intents = static_cast<std::size_t>(*count);
  if (wait->count() > 0) {
    absl::StatusOr<Duration> d = ParseDuration(wait_for_claims);
    if (!d.ok()) {
      PrintError(absl::StrCat("--wait-for-claims: ", d.status().message()));
      return kExitUsage;
    }
    options.wait_for_claims = *d;
  }

  absl::StatusOr<std::shared_ptr<IntentJournal>> journal =
      OpenJournal(journal_path, journal_schema);
  if (!journal.ok()) {
    PrintError(absl::StrCat("--journal: ", journal.status().message()));
    return kExitJournal;
  }
  absl::StatusOr<std::shared_ptr<Transport>> transport = MakeCurlTransport(TransportOptionsFor(
      status_url.empty() ? std::string_view("http:") : std::string_view(status_url), proxy,
      proxy_option->count() > 0, noproxy, noproxy_option->count() > 0, cacert, capath,
      http_version));
  if (!transport.ok()) return TransportExitCode(transport.status());
  ClientOptions client_options;
  client_options.transport = *std::move(transport);
  client_options.clock = std::move(clock);
  client_options.journal = *std::move(journal);
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(std::move(client_options));
  if (!client.ok()) {
    PrintError(AsStd(client.status().message()));
    return kExitUsage;
  }
  Reconciler reconciler(client->get(), options);
  absl::StatusOr<ReconcileReport> report = reconciler.RunOnce();
  if (!report.ok()) {
    PrintError(absl::StrCat("--journal: ", report.status().message()));
    return report.status().code() == absl::StatusCode::kInvalidArgument ? kExitUsage : kExitJournal;
  }
  for (const ReconciledIntent& r : report->tried) {
    std::string line = ReconcileText(r.intent.key, r.result);
    line.push_back('\n');
    std::fwrite(line.data(), 1, line.size(), stdout);
  }
  // Nothing unresolved goes unmentioned: the intents left alone, and why.
  for (const SkippedIntent& s : report->skipped) {
    std::string line = SkippedText(s);
    line.push_back('\n');
    std::fwrite(line.data(), 1, line.size(), stdout);
  }
  std::fflush(stdout);
  PrintError(ReconcileSummaryLine(*report).substr(std::string_view("saferetry: ").size()));
  if (report->pruned.has_value() && report->pruned->kept_unresolved > 0) {
    PrintError(absl::StrCat("warning: ", report->pruned->kept_unresolved,
                            " unresolved intent(s) older than --prune-older-than were kept"));
  }
  if (!report->journal_status.ok()) {
    PrintError(absl::StrCat("--journal: ", report->journal_status.message()));
    return kExitJournal;
  }
  if (report->stopped_early) {
    PrintError("warning: stopped before every eligible intent was tried (time limit or budget)");
  }
  return report->unknown > 0 ? kExitUnknown : kExitSucceeded;
}

int Run(int argc, char** argv) {
  // Before anything else: the deadline counts from here, and the signals are
  // blocked before any thread (ours or libcurl's) exists so all inherit it.
  std::shared_ptr<Clock> clock = SystemClock();
  const TimePoint start = clock->Now();
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  if (argc >= 2 && std::string_view(argv[1]) == "reconcile") {
    return RunReconcile(argc - 1, argv + 1, clock);
  }

  Flags flags;
  CLI::App app{
      "Performs one HTTP request safely: one idempotency key per invocation, a status query "
      "before any resend of an ambiguous attempt, the deadline honoured. Says whether the "
      "request SUCCEEDED (exit 0), FAILED (exit 1) or is UNKNOWN (exit 2); exit 64 for bad "
      "input.",
      "saferetry"};
  app.set_version_flag("--version", "saferetry " SAFERETRY_VERSION_STRING,
                       "Print the version (saferetry MAJOR.MINOR.PATCH) and exit");
  app.footer(
      "Subcommands:\n"
      "  reconcile   Resolve a journal's unfinished intents by status queries (saferetry "
      "reconcile --help)");
  app.add_option("URL", flags.url, "Absolute http:// or https:// URL")->required();
  CLI::Option* method = app.add_option("-X,--request", flags.method,
                                       "Method (default GET, or POST when a body is given)");
  CLI::Option* data =
      app.add_option("-d,--data", flags.data, "Request body; @FILE reads a file, @- stdin");
  app.add_option("-H,--header", flags.headers,
                 "\"Name: value\", sent on every attempt (repeatable)")
      ->allow_extra_args(false);
  CLI::Option* key =
      app.add_option("--idempotency-key", flags.idempotency_key,
                     "Key sent on every attempt (default: a fresh UUIDv4 for POST and PATCH)");
  app.add_flag("--no-idempotency-key", flags.no_idempotency_key, "Send no idempotency key")
      ->excludes(key);
  app.add_option("--status-url", flags.status_url,
                 "Status URL with {key}: how an ambiguous outcome is resolved");
  app.add_flag("--assume-dedup", flags.assume_dedup,
               "The server deduplicates keys: an ambiguous attempt may be resent with the same "
               "key");
  CLI::Option* deadline =
      app.add_option("--deadline", flags.deadline,
                     "Total time from process start, e.g. 1500ms, 2s, 1m (default 30s)");
  CLI::Option* attempt_timeout = app.add_option("--attempt-timeout", flags.attempt_timeout,
                                                "Cap on each attempt (default: what remains)");
  CLI::Option* max_attempts = app.add_option("--max-attempts", flags.max_attempts,
                                             "Sends of the request (default 3, at most 10)");
  CLI::Option* max_status_queries = app.add_option(
      "--max-status-queries", flags.max_status_queries,
      "Polls: status queries and resends answered 409 (default 0: derived from the deadline, "
      "e.g. 17 for 5s, 127 for 60s; at most 1000)");
  CLI::Option* resolution_window = app.add_option(
      "--resolution-window", flags.resolution_window,
      "Time kept after an attempt to resolve it (default 30% of the deadline; 0s: none)");
  CLI::Option* connect_timeout = app.add_option(
      "--connect-timeout", flags.connect_timeout,
      "Limit on each attempt's connect: name lookup, TCP and TLS (default: the attempt's own)");
  CLI::Option* first_byte_timeout =
      app.add_option("--first-byte-timeout", flags.first_byte_timeout,
                     "Limit on the wait for the response's first byte once the request was written "
                     "(default: none)");
  CLI::Option* speed_limit =
      app.add_option("--speed-limit", flags.speed_limit,
                     "Bytes per second below which, for --speed-time, an attempt fails");
  CLI::Option* speed_time =
      app.add_option("--speed-time", flags.speed_time,
                     "Whole seconds, e.g. 5s: how long --speed-limit is measured (default 30s)");
  app.add_flag("--fence", flags.fence,
               "When giving up on a \"not found\" key, ask the server to fence it (a fenced "
               "\"not found\" ends FAILED)");
  app.add_option("--policy", flags.policy, "JSON retry policy file (docs/configuration.md)");
  app.add_option("--journal", flags.journal,
                 "Record the call in this intent journal before sending (exit 74 when it "
                 "cannot be written): a SQLite file, or a PostgreSQL URI postgresql://...; see "
                 "saferetry reconcile");
  app.add_option("--journal-schema", flags.journal_schema,
                 "The schema of a PostgreSQL journal (default: the server's search_path)");
  CLI::Option* proxy = app.add_option(
      "--proxy", flags.proxy,
      "Proxy for every request, e.g. http://proxy:3128 (\"\": none). Default: the environment's "
      "https_proxy/http_proxy/all_proxy, as curl reads them");
  CLI::Option* noproxy =
      app.add_option("--noproxy", flags.noproxy,
                     "Comma-separated hosts that bypass the proxy (\"*\": all). Default: no_proxy");
  app.add_option("--cacert", flags.cacert,
                 "PEM file of the CAs to trust instead of the system's (a private CA)");
  app.add_option("--capath", flags.capath,
                 "Directory of CA certificates named by hash (openssl rehash), searched too");
  AddHttpVersionFlags(app, &flags.http_version);
  app.add_flag("-v,--verbose", flags.verbose, "Print each attempt's evidence on stderr");
  app.add_flag("--summary-json", flags.summary_json,
               "Print one JSON object on stdout instead of the body");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);  // Prints the help on stdout; 0.
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);  // Prints the version on stdout; 0.
  } catch (const CLI::RequiredError& e) {
    // CLI11 checks required arguments before unexpected ones: name an unknown
    // flag first, it is the likelier mistake.
    const std::vector<std::string> extras = app.remaining();
    PrintError(absl::StrCat(extras.empty()
                                ? std::string(e.what())
                                : "The following argument was not expected: " + extras.front(),
                            " (see saferetry --help)"));
    return kExitUsage;
  } catch (const CLI::ParseError& e) {
    PrintError(absl::StrCat(e.what(), " (see saferetry --help)"));
    return kExitUsage;
  }
  flags.method_given = method->count() > 0;
  flags.data_given = data->count() > 0;
  flags.key_given = key->count() > 0;
  flags.deadline_given = deadline->count() > 0;
  flags.attempt_timeout_given = attempt_timeout->count() > 0;
  flags.max_attempts_given = max_attempts->count() > 0;
  flags.max_status_queries_given = max_status_queries->count() > 0;
  flags.resolution_window_given = resolution_window->count() > 0;
  flags.connect_timeout_given = connect_timeout->count() > 0;
  flags.first_byte_timeout_given = first_byte_timeout->count() > 0;
  flags.speed_limit_given = speed_limit->count() > 0;
  flags.speed_time_given = speed_time->count() > 0;

  absl::StatusOr<Invocation> inv = Interpret(flags, start);
  if (!inv.ok()) {
    PrintError(AsStd(inv.status().message()));
    return kExitUsage;
  }
  for (const std::string& w : inv->warnings) PrintError(absl::StrCat("warning: ", w));

  absl::StatusOr<std::shared_ptr<Transport>> transport = MakeCurlTransport(
      TransportOptionsFor(flags.url, flags.proxy, proxy->count() > 0, flags.noproxy,
                          noproxy->count() > 0, flags.cacert, flags.capath, flags.http_version));
  if (!transport.ok()) return TransportExitCode(transport.status());
  inv->client.transport = *std::move(transport);
  inv->client.clock = clock;
  if (!flags.journal.empty()) {
    absl::StatusOr<std::shared_ptr<IntentJournal>> journal =
        OpenJournal(flags.journal, flags.journal_schema);
    if (!journal.ok()) {
      PrintError(absl::StrCat("--journal: ", journal.status().message()));
      return kExitJournal;
    }
    inv->client.journal = *std::move(journal);
  }
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(std::move(inv->client));
  if (!client.ok()) {
    PrintError(AsStd(client.status().message()));
    return kExitUsage;
  }

  CancellationToken cancellation;
  VerboseListener listener(inv->request);
  inv->call.cancellation = &cancellation;
  if (inv->verbose) inv->call.listener = &listener;

  CallResult result;
  {
    SignalCanceller canceller(&cancellation);
    result = (*client)->Execute(inv->request, inv->call);
  }
  if (result.stop_reason == StopReason::kInvalidArgument) {
    PrintError(AsStd(result.status.message()));
    return kExitUsage;
  }
  if (result.stop_reason == StopReason::kJournalUnavailable) {
    PrintError(absl::StrCat("--journal: ", result.status.message()));
    return kExitJournal;
  }

  const Duration elapsed = clock->Now() - start;
  if (inv->summary_json) {
    std::string text = SummaryText(result, elapsed);
    text.push_back('\n');
    std::fwrite(text.data(), 1, text.size(), stdout);
  } else {
    if (result.outcome != Outcome::kUnknown && result.last_response.has_value()) {
      const std::string& body = result.last_response->body;
      std::fwrite(body.data(), 1, body.size(), stdout);
    }
    std::fflush(stdout);
    std::fprintf(stderr, "%s\n", OutcomeLine(result).c_str());
  }
  std::fflush(stdout);
  return ExitCodeFor(result.outcome);
}

}  // namespace
}  // namespace internal
}  // namespace saferetry

int main(int argc, char** argv) { return saferetry::internal::Run(argc, argv); }

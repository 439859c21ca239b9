// Copyright 2026 The saferetry Authors. Licensed under the Apache License,
// Version 2.0.
//
// The `saferetry` binary as a black box: each test spawns it against a
// scripted loopback order service and asserts its exit code, its stdout (the
// body or the --summary-json object), its stderr, and what the server saw
// (requests, keys, effects).

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loopback_server.h"
#include "nghttpd_server.h"
#include "nlohmann/json.hpp"
#ifdef SAFERETRY_CLI_TEST_POSTGRES
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "pg_dsn.h"
#include "saferetry/server/postgres_store.h"
#endif

extern char** environ;

namespace saferetry {
namespace {

using ::saferetry::testkit::AfterRequest;
using ::saferetry::testkit::FullBacklogListener;
using ::saferetry::testkit::LoopbackConnection;
using ::saferetry::testkit::LoopbackServer;
using ::saferetry::testkit::NghttpdServer;
using ::saferetry::testkit::ReceivedRequest;
using ::saferetry::testkit::UnusedLoopbackPort;
using std::chrono::milliseconds;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::Ge;
using ::testing::HasSubstr;
using ::testing::Lt;
using ::testing::MatchesRegex;
using ::testing::Not;
using ::testing::StartsWith;
using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

constexpr char kUuidV4[] = "[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}";

// ---------------------------------------------------------------------------
// Running the binary.

struct CliRun {
  int exit_code = -1;
  std::string out;
  std::string err;
  json summary;  // stdout parsed, when it was JSON
  milliseconds wall{0};
};

// The environment without proxy settings: every request must go to loopback.
std::vector<std::string> ChildEnvironment() {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string v(*e);
    std::string name = v.substr(0, v.find('='));
    std::transform(name.begin(), name.end(), name.begin(), ::tolower);
    if (name.find("proxy") != std::string::npos) continue;
    env.push_back(std::move(v));
  }
  return env;
}

class Child {
 public:
  // `extra_env`: "NAME=value" entries added to the (proxy-free) environment.
  explicit Child(const std::vector<std::string>& args, const std::string& stdin_data = "",
                 const std::vector<std::string>& extra_env = {}) {
    int out[2], err[2], in[2];
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(err, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(in, O_CLOEXEC), 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_adddup2(&actions, err[1], 2);
    // The test runner may block signals; the tool must start with defaults.
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGTERM);
    sigaddset(&defaults, SIGPIPE);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

    std::vector<std::string> argv_storage = {SAFERETRY_CLI_PATH};
    argv_storage.insert(argv_storage.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_storage) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_storage = ChildEnvironment();
    env_storage.insert(env_storage.end(), extra_env.begin(), extra_env.end());
    std::vector<char*> envp;
    for (auto& e : env_storage) envp.push_back(e.data());
    envp.push_back(nullptr);

    start_ = Clock::now();
    const int rc =
        ::posix_spawn(&pid_, SAFERETRY_CLI_PATH, &actions, &attr, argv.data(), envp.data());
    EXPECT_EQ(rc, 0) << std::strerror(rc);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    ::close(out[1]);
    ::close(err[1]);
    ::close(in[0]);
    out_fd_ = out[0];
    err_fd_ = err[0];
    // Small inputs only: they fit in the pipe buffer.
    if (!stdin_data.empty()) {
      EXPECT_EQ(::write(in[1], stdin_data.data(), stdin_data.size()),
                static_cast<ssize_t>(stdin_data.size()));
    }
    ::close(in[1]);
  }

  pid_t pid() const { return pid_; }

  // kill -9, then reaps the child; true when SIGKILL is what ended it.
  bool KillNine() {
    ::kill(pid_, SIGKILL);
    ::close(out_fd_);
    ::close(err_fd_);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  }

  // Collects the output and the exit code; kills the child after 20 s.
  CliRun Wait() {
    CliRun run;
    const auto give_up = Clock::now() + std::chrono::seconds(20);
    pollfd fds[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
    int open = 2;
    char buf[4096];
    while (open > 0) {
      const auto left = std::chrono::duration_cast<milliseconds>(give_up - Clock::now()).count();
      if (left <= 0) {
        ADD_FAILURE() << "the tool did not finish within 20 s";
        ::kill(pid_, SIGKILL);
        break;
      }
      if (::poll(fds, 2, static_cast<int>(left)) < 0) continue;
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || fds[i].revents == 0) continue;
        const ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
        if (n > 0) {
          (i == 0 ? run.out : run.err).append(buf, static_cast<std::size_t>(n));
        } else if (n == 0 || errno != EINTR) {
          ::close(fds[i].fd);
          fds[i].fd = -1;
          --open;
        }
      }
    }
    for (auto& f : fds) {
      if (f.fd >= 0) ::close(f.fd);
    }
    int status = 0;
    ::waitpid(pid_, &status, 0);
    run.wall = std::chrono::duration_cast<milliseconds>(Clock::now() - start_);
    if (WIFEXITED(status)) {
      run.exit_code = WEXITSTATUS(status);
    } else {
      ADD_FAILURE() << "the tool was killed by signal " << WTERMSIG(status)
                    << "; stderr: " << run.err;
    }
    run.summary = json::parse(run.out, nullptr, /*allow_exceptions=*/false);
    return run;
  }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  Clock::time_point start_;
};

CliRun RunCli(const std::vector<std::string>& args, const std::string& stdin_data = "",
              const std::vector<std::string>& extra_env = {}) {
  return Child(args, stdin_data, extra_env).Wait();
}

// Waits (bounded) until `done()` holds.
template <typename F>
bool WaitUntil(F done, milliseconds limit = milliseconds(5000)) {
  const auto end = Clock::now() + limit;
  while (Clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return done();
}

std::string TempFile(const std::string& name, const std::string& contents) {
  const char* dir = std::getenv("TMPDIR");
  std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/saferetry_cli_test_" +
                     std::to_string(::getpid()) + "_" + name;
  std::ofstream f(path, std::ios::binary);
  f << contents;
  return path;
}

std::string PercentDecode(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      out.push_back(static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------
// A scripted order service on the loopback server.
//
//   POST (or any method) /orders   takes the next scripted step (default:
//                                  commit, 201 with the order)
//   GET /status/{key}              200 + the order when the key took effect,
//                                  404 when it did not (or the next scripted
//                                  status reply)
//
// Committing records the effect for the request's Idempotency-Key; with
// `dedup` a known key is replayed (200, same order) instead of a new effect.

enum class Fault {
  kNone,  ///< Write the scripted response.
  kDrop,  ///< Close after reading the request, no response.
  kHang,  ///< Keep the connection open without answering until the client
          ///< leaves.
};

struct Step {
  bool commit = true;
  int status = 201;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;  // empty: the order, when committed
  Fault fault = Fault::kNone;
};

Step Respond(int status, std::string body = "", bool commit = false) {
  Step s;
  s.status = status;
  s.body = std::move(body);
  s.commit = commit;
  return s;
}

Step CommitThen(Fault fault) {
  Step s;
  s.fault = fault;
  return s;
}

Step WithHeaders(Step s, Headers headers) {
  s.headers = std::move(headers);
  return s;
}

// The service's own 503, marked `Idempotency-Key-State: rejected` as the
// server half marks it: refused before any work, so retried as transient.
// An unmarked 503 is doubt (docs/adr/0031-unmarked-503-is-doubt.md).
Step Refused503(std::string body = "", Headers headers = {}) {
  Step s = Respond(503, std::move(body));
  headers.emplace_back("Idempotency-Key-State", "rejected");
  s.headers = std::move(headers);
  return s;
}

struct ServerOptions {
  std::vector<Step> script;
  std::vector<Step> status_script;
  bool dedup = false;
  // The first request of a key holds this long before committing; same-key
  // requests meanwhile get 409.
  milliseconds processing{0};
  // Connections (0-based) closed at once, unread: a reset before commit.
  std::set<int> reset_connections;
};

ServerOptions Scripted(std::vector<Step> script) {
  ServerOptions o;
  o.script = std::move(script);
  return o;
}

class OrderService {
 public:
  explicit OrderService(ServerOptions options)
      : options_(std::move(options)),
        script_(options_.script.begin(), options_.script.end()),
        status_script_(options_.status_script.begin(), options_.status_script.end()),
        server_([this](const ReceivedRequest& r, LoopbackConnection& c) { return Handle(r, c); },
                [this](int index) { return options_.reset_connections.count(index) == 0; }) {}

  std::string OrdersUrl() const { return server_.Url("/orders"); }
  std::string StatusUrl() const { return server_.Url("/status/{key}"); }
  int port() const { return server_.port(); }

  int effects() const {
    std::lock_guard<std::mutex> lock(mu_);
    return effects_;
  }
  // The requests to /orders and to /status, in arrival order.
  std::vector<ReceivedRequest> orders_requests() const { return Filter(false); }
  std::vector<ReceivedRequest> status_requests() const { return Filter(true); }
  std::vector<Clock::time_point> arrivals() const {
    std::lock_guard<std::mutex> lock(mu_);
    return arrivals_;
  }

 private:
  static bool IsStatus(const ReceivedRequest& r) { return r.target.rfind("/status/", 0) == 0; }

  std::vector<ReceivedRequest> Filter(bool status) const {
    std::vector<ReceivedRequest> out;
    for (auto& r : server_.requests()) {
      if (IsStatus(r) == status) out.push_back(r);
    }
    return out;
  }

  AfterRequest Handle(const ReceivedRequest& req, LoopbackConnection& conn) {
    std::unique_lock<std::mutex> lock(mu_);
    if (IsStatus(req)) {
      const std::string key = PercentDecode(req.target.substr(8));
      if (!status_script_.empty()) {
        Step s = status_script_.front();
        status_script_.pop_front();
        lock.unlock();
        conn.Write(LoopbackServer::Reply(s.status, s.headers, s.body));
        return AfterRequest::kKeepAlive;
      }
      auto it = orders_.find(key);
      const std::string reply = it != orders_.end() ? LoopbackServer::Reply(200, {}, it->second)
                                                    : LoopbackServer::Reply(404, {}, "no such key");
      lock.unlock();
      conn.Write(reply);
      return AfterRequest::kKeepAlive;
    }

    arrivals_.push_back(Clock::now());
    Step step;
    if (!script_.empty()) {
      step = script_.front();
      script_.pop_front();
    }
    const std::string key = req.Header("Idempotency-Key").value_or("");
    if (!key.empty() && in_progress_.count(key) > 0) {
      lock.unlock();
      conn.Write(LoopbackServer::Reply(409, {}, "in progress"));
      return AfterRequest::kKeepAlive;
    }
    std::string order;
    if (step.commit) {
      auto it = orders_.find(key);
      if (options_.dedup && !key.empty() && it != orders_.end()) {
        order = it->second;
        if (step.fault == Fault::kNone && step.status == 201) step.status = 200;  // a replay
      } else {
        if (options_.processing > milliseconds(0) && !key.empty()) {
          in_progress_.insert(key);
          lock.unlock();
          std::this_thread::sleep_for(options_.processing);
          lock.lock();
          in_progress_.erase(key);
        }
        ++effects_;
        order = json{{"order", effects_}, {"key", key}, {"body", req.body}}.dump(
            -1, ' ', false, json::error_handler_t::replace);
        if (!key.empty()) orders_[key] = order;
      }
    }
    lock.unlock();
    switch (step.fault) {
      case Fault::kNone:
        conn.Write(LoopbackServer::Reply(step.status, step.headers,
                                         step.body.empty() ? order : step.body));
        return AfterRequest::kKeepAlive;
      case Fault::kDrop:
        return AfterRequest::kClose;
      case Fault::kHang:
        conn.WaitForPeerClose(milliseconds(10000));
        return AfterRequest::kClose;
    }
    return AfterRequest::kClose;
  }

  ServerOptions options_;
  mutable std::mutex mu_;
  std::deque<Step> script_;                    // Guarded by mu_.
  std::deque<Step> status_script_;             // Guarded by mu_.
  std::map<std::string, std::string> orders_;  // Guarded by mu_.
  std::set<std::string> in_progress_;          // Guarded by mu_.
  int effects_ = 0;                            // Guarded by mu_.
  std::vector<Clock::time_point> arrivals_;    // Guarded by mu_.
  LoopbackServer server_;                      // Last: stopped first.
};

// The key header of every request, in order ("" when absent).
std::vector<std::string> Keys(const std::vector<ReceivedRequest>& requests) {
  std::vector<std::string> keys;
  for (const auto& r : requests) keys.push_back(r.Header("Idempotency-Key").value_or(""));
  return keys;
}

void ExpectSummaryFields(const json& s) {
  ASSERT_TRUE(s.is_object()) << s;
  std::vector<std::string> names;
  for (auto it = s.begin(); it != s.end(); ++it) names.push_back(it.key());
  // nlohmann::json sorts keys; the tool prints them in definition order.
  EXPECT_THAT(names, ElementsAre("attempts", "body", "elapsed_ms", "http_status", "idempotency_key",
                                 "outcome", "resolved_by", "status_queries", "stop_reason"));
}

// ---------------------------------------------------------------------------
// Bad input: exit 64, one line on stderr naming the flag, nothing sent.

class BadInputTest : public ::testing::Test {
 protected:
  void ExpectUsageError(std::vector<std::string> args, const std::string& message) {
    CliRun run = RunCli(args);
    EXPECT_EQ(run.exit_code, 64) << run.err;
    EXPECT_EQ(run.out, "");
    EXPECT_THAT(run.err, StartsWith("saferetry: "));
    EXPECT_THAT(run.err, HasSubstr(message));
    EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
    EXPECT_EQ(server_.orders_requests().size(), 0u);
  }
  OrderService server_{ServerOptions{}};
};

TEST_F(BadInputTest, MissingUrl) { ExpectUsageError({}, "URL is required"); }

TEST_F(BadInputTest, UnknownFlagIsNamedEvenWithoutAUrl) {
  ExpectUsageError({"--bogus"}, "--bogus");
}

TEST_F(BadInputTest, UnknownFlag) {
  ExpectUsageError({"--retry-forever", server_.OrdersUrl()}, "--retry-forever");
}

TEST_F(BadInputTest, ExtraPositional) {
  ExpectUsageError({server_.OrdersUrl(), server_.OrdersUrl()}, "not expected");
}

TEST_F(BadInputTest, NotAUrl) {
  ExpectUsageError({"orders"}, "URL: request.url: must be an absolute http:// or https:// URL");
}

TEST_F(BadInputTest, UnsupportedScheme) {
  ExpectUsageError({"ftp://127.0.0.1/orders"}, "URL: request.url: unsupported scheme \"ftp\"");
}

TEST_F(BadInputTest, PortOutOfRange) {
  ExpectUsageError({"http://127.0.0.1:65536/orders"}, "port \"65536\" is out of range 1-65535");
  ExpectUsageError({"http://127.0.0.1:0/orders"}, "port \"0\" is out of range 1-65535");
}

TEST_F(BadInputTest, HeaderWithoutColon) {
  ExpectUsageError({"-H", "X-Trace t1", server_.OrdersUrl()},
                   "--header: expected \"Name: value\", got \"X-Trace t1\" (no colon)");
}

TEST_F(BadInputTest, HeaderNameNotAToken) {
  ExpectUsageError({"-H", "X Trace: t1", server_.OrdersUrl()},
                   "--header: request.headers[0].name: \"X Trace\" is not a token");
}

TEST_F(BadInputTest, MethodNotAToken) {
  ExpectUsageError({"-X", "PO ST", server_.OrdersUrl()}, "--request: request.method");
}

TEST_F(BadInputTest, BadDurations) {
  for (const char* d : {"5", "0s", "-1s", "1.5s", "soon", "1us", ""}) {
    SCOPED_TRACE(d);
    ExpectUsageError({"--deadline", d, server_.OrdersUrl()}, "--deadline: invalid duration");
    ExpectUsageError({"--attempt-timeout", d, server_.OrdersUrl()},
                     "--attempt-timeout: invalid duration");
  }
}

TEST_F(BadInputTest, BadNumbers) {
  ExpectUsageError({"--max-attempts", "three", server_.OrdersUrl()},
                   "--max-attempts: expected a whole number, got \"three\"");
  ExpectUsageError({"--max-attempts", "2.5", server_.OrdersUrl()},
                   "--max-attempts: expected a whole number");
  ExpectUsageError({"--max-attempts", "0", server_.OrdersUrl()},
                   "--max-attempts: must be >= 1, got 0");
  ExpectUsageError({"--max-attempts=-3", server_.OrdersUrl()},
                   "--max-attempts: must be >= 1, got -3");
}

TEST_F(BadInputTest, UnreadableDataFile) {
  ExpectUsageError({"-d", "@/nonexistent/order.json", server_.OrdersUrl()},
                   "--data: cannot read file \"/nonexistent/order.json\": No such file");
  ExpectUsageError({"-d", "@", server_.OrdersUrl()}, "--data: \"@\" must be followed by a file");
}

TEST_F(BadInputTest, BadIdempotencyKey) {
  ExpectUsageError({"--idempotency-key", "two words", "-d", "x", server_.OrdersUrl()},
                   "--idempotency-key: idempotency_key");
  ExpectUsageError({"--idempotency-key", std::string(256, 'k'), "-d", "x", server_.OrdersUrl()},
                   "--idempotency-key: idempotency_key");
}

TEST_F(BadInputTest, KeyAndNoKey) {
  ExpectUsageError({"--idempotency-key", "k", "--no-idempotency-key", server_.OrdersUrl()},
                   "excludes");
  ExpectUsageError(
      {"-H", "Idempotency-Key: k", "--no-idempotency-key", "-d", "x", server_.OrdersUrl()},
      "--no-idempotency-key: conflicts with the Idempotency-Key header");
}

TEST_F(BadInputTest, KeyFlagDiffersFromKeyHeader) {
  ExpectUsageError(
      {"-H", "Idempotency-Key: a", "--idempotency-key", "b", "-d", "x", server_.OrdersUrl()},
      "call.idempotency_key: differs from the request's own "
      "idempotency header");
}

TEST_F(BadInputTest, StatusUrlWithoutKeyPlaceholderOrBad) {
  ExpectUsageError({"--status-url", "http://127.0.0.1:1/status", server_.OrdersUrl()},
                   "--status-url: status_query.url_template: must contain {key}");
  ExpectUsageError({"--status-url", "gopher://h/{key}", server_.OrdersUrl()},
                   "--status-url: status_query.url_template: request.url: "
                   "unsupported scheme");
}

TEST_F(BadInputTest, PolicyFileMissingOrInvalid) {
  ExpectUsageError({"--policy", "/nonexistent/policy.json", server_.OrdersUrl()},
                   "--policy: /nonexistent/policy.json: cannot open");
  const std::string bad =
      TempFile("bad_policy.json", R"({"retryPolicy": {"maxAttempts": "three"}})");
  ExpectUsageError({"--policy", bad, server_.OrdersUrl()}, "$.retryPolicy.maxAttempts");
  std::remove(bad.c_str());
}

TEST(HelpTest, HelpPrintsUsageAndExitsZero) {
  CliRun run = RunCli({"--help"});
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("Usage: saferetry [OPTIONS] URL"));
  for (const char* flag : {"--request",
                           "--data",
                           "--header",
                           "--idempotency-key",
                           "--no-idempotency-key",
                           "--status-url",
                           "--assume-dedup",
                           "--deadline",
                           "--attempt-timeout",
                           "--max-attempts",
                           "--policy",
                           "--verbose",
                           "--summary-json",
                           "--http1.1",
                           "--http2",
                           "--http2-prior-knowledge",
                           "--connect-timeout",
                           "--first-byte-timeout",
                           "--speed-limit",
                           "--speed-time"}) {
    EXPECT_THAT(run.out, HasSubstr(flag));
  }
  EXPECT_EQ(run.err, "");
}

TEST(HelpTest, HelpListsTheSubcommands) {
  CliRun run = RunCli({"--help"});
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("Subcommands:\n  reconcile "));
  EXPECT_THAT(run.out, HasSubstr("--version"));
}

TEST(HelpTest, VersionPrintsTheProjectVersionAndExitsZero) {
  // Without a URL too: --version needs nothing else.
  CliRun run = RunCli({"--version"});
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_EQ(run.out, "saferetry " SAFERETRY_PROJECT_VERSION "\n");
  EXPECT_EQ(run.err, "");
}

// ---------------------------------------------------------------------------
// Success and the default key.

TEST(CliTest, PostSucceedsWithAFreshUuidKeySentBare) {
  OrderService server(ServerOptions{});
  CliRun run = RunCli({"--summary-json", "-d", R"({"sku":"a"})", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  ExpectSummaryFields(run.summary);
  const auto requests = server.orders_requests();
  ASSERT_EQ(requests.size(), 1u);
  const std::string key = requests[0].Header("Idempotency-Key").value_or("");
  EXPECT_THAT(key, MatchesRegex(kUuidV4));
  EXPECT_EQ(requests[0].method, "POST");
  EXPECT_EQ(requests[0].body, R"({"sku":"a"})");
  EXPECT_EQ(run.summary["outcome"], "SUCCEEDED");
  EXPECT_EQ(run.summary["stop_reason"], "success");
  EXPECT_EQ(run.summary["attempts"], 1);
  EXPECT_EQ(run.summary["status_queries"], 0);
  EXPECT_EQ(run.summary["http_status"], 201);
  EXPECT_EQ(run.summary["idempotency_key"], key);
  EXPECT_EQ(run.summary["resolved_by"], "response");
  EXPECT_EQ(run.summary["body"],
            json({{"order", 1}, {"key", key}, {"body", R"({"sku":"a"})"}}).dump());
  EXPECT_THAT(run.summary["elapsed_ms"].get<int>(), AllOf(Ge(0), Lt(5000)));
  EXPECT_EQ(run.err, "");
  EXPECT_EQ(server.effects(), 1);
}

TEST(CliTest, WithoutSummaryTheBodyGoesToStdoutAndTheOutcomeToStderr) {
  OrderService server(Scripted({Respond(201, "created\n", true)}));
  CliRun run = RunCli({"-d", "x", "--idempotency-key", "k-1", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_EQ(run.out, "created\n");
  EXPECT_EQ(run.err,
            "saferetry: SUCCEEDED (success) after 1 attempt, HTTP 201; "
            "idempotency key "
            "k-1\n");
}

TEST(CliTest, EachInvocationMintsItsOwnKey) {
  OrderService server(ServerOptions{});
  EXPECT_EQ(RunCli({"-d", "x", server.OrdersUrl()}).exit_code, 0);
  EXPECT_EQ(RunCli({"-d", "x", server.OrdersUrl()}).exit_code, 0);
  const auto keys = Keys(server.orders_requests());
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_NE(keys[0], keys[1]);
  EXPECT_EQ(server.effects(), 2);
}

TEST(CliTest, PatchGetsAKeyGetPutDeleteDoNot) {
  OrderService server(ServerOptions{});
  CliRun patch = RunCli({"--summary-json", "-X", "PATCH", "-d", "x", server.OrdersUrl()});
  EXPECT_THAT(patch.summary["idempotency_key"].get<std::string>(), MatchesRegex(kUuidV4));
  for (const char* method : {"GET", "PUT", "DELETE"}) {
    CliRun run = RunCli({"--summary-json", "-X", method, server.OrdersUrl()});
    EXPECT_EQ(run.exit_code, 0) << method;
    EXPECT_TRUE(run.summary["idempotency_key"].is_null()) << method;
  }
  const auto requests = server.orders_requests();
  ASSERT_EQ(requests.size(), 4u);
  EXPECT_EQ(requests[0].method, "PATCH");
  EXPECT_EQ(requests[0].Header("Idempotency-Key"),
            patch.summary["idempotency_key"].get<std::string>());
  for (int i = 1; i < 4; ++i) EXPECT_EQ(requests[i].Header("Idempotency-Key"), std::nullopt);
}

TEST(CliTest, MethodDefaultsToGetAndToPostWithABody) {
  OrderService server(ServerOptions{});
  RunCli({server.OrdersUrl()});
  RunCli({"-d", "", server.OrdersUrl()});
  RunCli({"-X", "PUT", "-d", "p", server.OrdersUrl()});
  const auto requests = server.orders_requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[0].method, "GET");
  EXPECT_EQ(requests[1].method, "POST");
  EXPECT_EQ(requests[2].method, "PUT");
  EXPECT_EQ(requests[2].body, "p");
}

TEST(CliTest, DataFromFileAndFromStdinIsSentByteForByte) {
  OrderService server(ServerOptions{});
  const std::string contents("line 1\nline 2\r\n\x01\xff", 17);
  const std::string path = TempFile("body.bin", contents);
  EXPECT_EQ(RunCli({"-d", "@" + path, server.OrdersUrl()}).exit_code, 0);
  EXPECT_EQ(RunCli({"-d", "@-", server.OrdersUrl()}, "from stdin").exit_code, 0);
  std::remove(path.c_str());
  const auto requests = server.orders_requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].body, contents);
  EXPECT_EQ(requests[1].body, "from stdin");
}

TEST(CliTest, ExplicitKeyIsSentBareOnEveryAttemptAndPercentEncodedInTheStatusUrl) {
  ServerOptions o;
  o.script = {CommitThen(Fault::kDrop)};
  OrderService server(o);
  CliRun run = RunCli({"--summary-json", "--idempotency-key", "ord/1+x", "--status-url",
                       server.StatusUrl(), "-d", "x", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(Keys(server.orders_requests()), ElementsAre("ord/1+x"));
  const auto status = server.status_requests();
  ASSERT_EQ(status.size(), 1u);
  EXPECT_EQ(status[0].target, "/status/ord%2F1%2Bx");
  EXPECT_EQ(status[0].method, "GET");
  EXPECT_EQ(status[0].Header("Idempotency-Key"), "ord/1+x");
  EXPECT_EQ(run.summary["idempotency_key"], "ord/1+x");
}

TEST(CliTest, HeadersGoOnEveryAttemptAndOnStatusQueriesExceptBodyHeaders) {
  ServerOptions o;
  o.script = {Refused503(), CommitThen(Fault::kDrop)};
  OrderService server(o);
  CliRun run = RunCli({"--summary-json", "-H", "X-Trace: t1", "-H", "Content-Type:application/json",
                       "--status-url", server.StatusUrl(), "-d", "{}", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.summary["attempts"], 2);
  EXPECT_EQ(run.summary["status_queries"], 1);
  for (const auto& r : server.orders_requests()) {
    EXPECT_EQ(r.Header("X-Trace"), "t1");
    EXPECT_EQ(r.Header("Content-Type"), "application/json");
  }
  const auto status = server.status_requests();
  ASSERT_EQ(status.size(), 1u);
  EXPECT_EQ(status[0].Header("X-Trace"), "t1");
  EXPECT_EQ(status[0].Header("Content-Type"), std::nullopt);
  // The same key on both sends and on the query.
  const auto keys = Keys(server.orders_requests());
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0], keys[1]);
  EXPECT_EQ(status[0].Header("Idempotency-Key"), keys[0]);
}

// ---------------------------------------------------------------------------
// Faults.

TEST(CliTest, RefusedIsRetriedEvenForPostThenFails) {
  const std::string url = "http://127.0.0.1:" + std::to_string(UnusedLoopbackPort()) + "/orders";
  CliRun run = RunCli({"--summary-json", "-d", "x", url});
  EXPECT_EQ(run.exit_code, 1) << run.err;
  ExpectSummaryFields(run.summary);
  EXPECT_EQ(run.summary["outcome"], "FAILED");
  EXPECT_EQ(run.summary["stop_reason"], "attempts_exhausted");
  EXPECT_EQ(run.summary["attempts"], 3);
  EXPECT_EQ(run.summary["status_queries"], 0);
  EXPECT_TRUE(run.summary["http_status"].is_null());
  EXPECT_THAT(run.summary["idempotency_key"].get<std::string>(), MatchesRegex(kUuidV4));
  EXPECT_TRUE(run.summary["resolved_by"].is_null());
  EXPECT_TRUE(run.summary["body"].is_null());

  CliRun plain = RunCli({"-d", "x", url});
  EXPECT_EQ(plain.exit_code, 1);
  EXPECT_EQ(plain.out, "");
  EXPECT_THAT(plain.err, StartsWith("saferetry: FAILED (attempts_exhausted) after 3 attempts"));
}

// Limits per phase. An attempt's evidence, as -v prints it: its delivery, the
// phase its time ran out in, and how long it took.
struct PrintedAttempt {
  std::string delivery;
  std::string timed_out;
  double took_ms = -1;
};

std::vector<PrintedAttempt> PrintedAttempts(const std::string& err) {
  std::vector<PrintedAttempt> out;
  for (absl::string_view line : absl::StrSplit(err, '\n')) {
    if (!absl::StartsWith(line, "saferetry: < attempt ")) continue;
    PrintedAttempt a;
    const auto field = [&](absl::string_view name) {
      const std::size_t at = line.find(absl::StrCat(" ", name, "="));
      if (at == absl::string_view::npos) return std::string();
      absl::string_view rest = line.substr(at + name.size() + 2);
      return std::string(rest.substr(0, rest.find(' ')));
    };
    a.delivery = field("delivery");
    a.timed_out = field("timed_out");
    const std::string took = field("took");
    if (absl::EndsWith(took, "ms")) a.took_ms = std::atof(took.c_str());
    out.push_back(a);
  }
  return out;
}

// A server that accepts and never answers: the first-byte limit ends the
// attempt at its limit, long before the attempt's own timeout, and the
// phase is named. The tolerances allow a loaded two-core machine.
TEST(CliTest, TheFirstByteLimitEndsAnAttemptAtItsLimitAndNamesThePhase) {
  LoopbackServer server([](const ReceivedRequest&, LoopbackConnection& conn) {
    conn.WaitForPeerClose(milliseconds(10000));
    return AfterRequest::kClose;
  });
  CliRun run = RunCli({"-v", "--summary-json", "--first-byte-timeout", "300ms", "--attempt-timeout",
                       "3s", "--deadline", "20s", "--max-attempts", "1", server.Url("/orders")});
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_EQ(run.summary["outcome"], "FAILED");
  EXPECT_EQ(run.summary["attempts"], 1);
  const std::vector<PrintedAttempt> attempts = PrintedAttempts(run.err);
  ASSERT_EQ(attempts.size(), 1u) << run.err;
  EXPECT_EQ(attempts[0].delivery, "maybe_delivered");
  EXPECT_EQ(attempts[0].timed_out, "first_byte");
  EXPECT_GE(attempts[0].took_ms, 295);
  EXPECT_LT(attempts[0].took_ms, 1500) << "the attempt's own 3 s timeout must not be what ended it";
  EXPECT_THAT(run.err, HasSubstr("time ran out in the first_byte phase"));
  EXPECT_EQ(server.requests().size(), 1u);
}

// A connect that never completes (a full accept queue): the connect limit
// ends each attempt at its limit, and nothing having been sent, a keyless
// POST is sent again.
TEST(CliTest, TheConnectLimitEndsAnAttemptAndAKeylessPostIsRetried) {
  FullBacklogListener blackhole;
  ASSERT_TRUE(blackhole.full()) << "the accept queue could not be filled";
  CliRun run = RunCli({"-v", "--summary-json", "--no-idempotency-key", "-d", "x",
                       "--connect-timeout", "300ms", "--attempt-timeout", "3s", "--deadline", "20s",
                       "--max-attempts", "2", blackhole.Url("/orders")});
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_EQ(run.summary["outcome"], "FAILED");
  EXPECT_EQ(run.summary["stop_reason"], "attempts_exhausted");
  EXPECT_EQ(run.summary["attempts"], 2);
  const std::vector<PrintedAttempt> attempts = PrintedAttempts(run.err);
  ASSERT_EQ(attempts.size(), 2u) << run.err;
  for (const PrintedAttempt& a : attempts) {
    EXPECT_EQ(a.delivery, "not_sent");
    EXPECT_EQ(a.timed_out, "connect");
    EXPECT_GE(a.took_ms, 295);
    EXPECT_LT(a.took_ms, 1500);
  }
  EXPECT_LT(run.wall, milliseconds(3000)) << "two 300 ms connects and a backoff";
}

TEST_F(BadInputTest, BadPhaseLimits) {
  ExpectUsageError({"--first-byte-timeout", "0s", server_.OrdersUrl()},
                   "--first-byte-timeout: invalid duration");
  ExpectUsageError({"--connect-timeout", "fast", server_.OrdersUrl()},
                   "--connect-timeout: invalid duration");
  ExpectUsageError({"--speed-time", "1500ms", server_.OrdersUrl()},
                   "--speed-time: libcurl counts whole seconds, got \"1500ms\"");
  ExpectUsageError({"--speed-limit", "0", server_.OrdersUrl()},
                   "--speed-limit: expected bytes per second");
}

// A policy file's response predicate, end to end: the server's 200 says
// "throttled" and created nothing; the predicate calls it "not applied", and
// the POST is resent with the same key and creates exactly one order.
TEST(CliTest, APolicyFilesResponsePredicateResendsAThrottledPostWithTheSameKey) {
  ServerOptions o;
  o.script = {Respond(200, R"({"error":"throttled"})", /*commit=*/false)};
  OrderService server(o);
  const std::string policy = TempFile("predicate_policy.json", R"({"saferetry": {
      "responsePredicate": {"rules": [{"statuses": [200], "jsonPointer": "/error",
                                       "jsonValue": "throttled", "verdict": "notApplied"}]}}})");
  CliRun run = RunCli({"--summary-json", "--policy", policy, "-d", "x", server.OrdersUrl()});
  std::remove(policy.c_str());
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.summary["outcome"], "SUCCEEDED");
  EXPECT_EQ(run.summary["attempts"], 2);
  EXPECT_EQ(run.summary["http_status"], 201);
  const std::vector<std::string> keys = Keys(server.orders_requests());
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0], keys[1]);
  EXPECT_EQ(run.summary["idempotency_key"], keys[0]);
  EXPECT_EQ(server.effects(), 1);

  // Without the policy the same answer is the call's success.
  ServerOptions plain;
  plain.script = {Respond(200, R"({"error":"throttled"})", /*commit=*/false)};
  OrderService again(plain);
  CliRun bare = RunCli({"--summary-json", "-d", "x", again.OrdersUrl()});
  EXPECT_EQ(bare.exit_code, 0) << bare.err;
  EXPECT_EQ(bare.summary["attempts"], 1);
  EXPECT_EQ(again.effects(), 0);
}

TEST(CliTest, CommitThenDropWithoutStatusUrlIsUnknown) {
  ServerOptions o;
  o.script = {CommitThen(Fault::kDrop)};
  OrderService server(o);
  CliRun run = RunCli({"--summary-json", "-d", "x", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  ExpectSummaryFields(run.summary);
  EXPECT_EQ(run.summary["outcome"], "UNKNOWN");
  EXPECT_EQ(run.summary["stop_reason"], "ambiguous_unresolved");
  EXPECT_EQ(run.summary["attempts"], 1);
  EXPECT_EQ(run.summary["status_queries"], 0);
  EXPECT_TRUE(run.summary["http_status"].is_null());
  EXPECT_TRUE(run.summary["resolved_by"].is_null());
  EXPECT_TRUE(run.summary["body"].is_null());
  EXPECT_EQ(run.summary["idempotency_key"], Keys(server.orders_requests()).at(0));
  EXPECT_EQ(server.orders_requests().size(), 1u);
  EXPECT_EQ(server.effects(), 1);
}

TEST(CliTest, UnknownPrintsNoBodyAndTheKeyOnStderr) {
  ServerOptions o;
  o.script = {Respond(500, "internal error", true)};
  OrderService server(o);
  CliRun run = RunCli({"-d", "x", "--idempotency-key", "k-9", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.out, "");
  EXPECT_EQ(run.err,
            "saferetry: UNKNOWN (ambiguous_unresolved) after 1 attempt, HTTP "
            "500; idempotency key "
            "k-9; the request may have taken effect: check with the server "
            "using this key before "
            "sending it again\n");
}

TEST(CliTest, CommitThenDropResolvedByStatusQuery) {
  ServerOptions o;
  o.script = {CommitThen(Fault::kDrop)};
  OrderService server(o);
  CliRun run =
      RunCli({"--summary-json", "--status-url", server.StatusUrl(), "-d", "x", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  ExpectSummaryFields(run.summary);
  const std::string key = Keys(server.orders_requests()).at(0);
  EXPECT_EQ(run.summary["outcome"], "SUCCEEDED");
  EXPECT_EQ(run.summary["stop_reason"], "success");
  EXPECT_EQ(run.summary["attempts"], 1);
  EXPECT_EQ(run.summary["status_queries"], 1);
  EXPECT_EQ(run.summary["http_status"], 200);
  EXPECT_EQ(run.summary["resolved_by"], "status_query");
  EXPECT_EQ(run.summary["body"], json({{"order", 1}, {"key", key}, {"body", "x"}}).dump());
  EXPECT_EQ(server.orders_requests().size(), 1u);
  EXPECT_EQ(server.effects(), 1);
}

TEST(CliTest, CommitThenDropWithAssumeDedupResendsTheSameKey) {
  ServerOptions o;
  o.script = {CommitThen(Fault::kDrop)};
  o.dedup = true;
  OrderService server(o);
  CliRun run = RunCli({"--summary-json", "--assume-dedup", "-d", "x", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.summary["outcome"], "SUCCEEDED");
  EXPECT_EQ(run.summary["attempts"], 2);
  EXPECT_EQ(run.summary["status_queries"], 0);
  EXPECT_EQ(run.summary["http_status"], 200);
  EXPECT_EQ(run.summary["resolved_by"], "response");
  const auto keys = Keys(server.orders_requests());
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0], keys[1]);
  EXPECT_EQ(server.effects(), 1);
}

TEST(CliTest, NoKeyMeansNoStatusQueryAndNoResend) {
  ServerOptions o;
  o.script = {CommitThen(Fault::kDrop)};
  o.dedup = true;
  OrderService server(o);
  CliRun run = RunCli({"--summary-json", "--no-idempotency-key", "--status-url", server.StatusUrl(),
                       "--assume-dedup", "-d", "x", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.summary["outcome"], "UNKNOWN");
  EXPECT_EQ(run.summary["stop_reason"], "ambiguous_unresolved");
  EXPECT_TRUE(run.summary["idempotency_key"].is_null());
  EXPECT_EQ(run.summary["status_queries"], 0);
  EXPECT_THAT(Keys(server.orders_requests()), ElementsAre(""));
  EXPECT_THAT(run.err, HasSubstr("saferetry: warning: --status-url: unused"));
  EXPECT_THAT(run.err, HasSubstr("saferetry: warning: --assume-dedup: unused"));
}

TEST(CliTest, HangAfterCommitEndsUnknownAtTheDeadline) {
  ServerOptions o;
  o.script = {CommitThen(Fault::kHang)};
  OrderService server(o);
  CliRun run = RunCli({"--summary-json", "--deadline", "700ms", "-d", "x", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_EQ(run.summary["outcome"], "UNKNOWN");
  EXPECT_EQ(run.summary["stop_reason"], "ambiguous_unresolved");
  EXPECT_EQ(run.summary["attempts"], 1);
  // The attempt's timeout ends 10 ms (the margin) before the deadline; what
  // follows (classification, the summary) may take a few ms more, more so
  // under the sanitizers.
  EXPECT_THAT(run.summary["elapsed_ms"].get<int>(), AllOf(Ge(600), Lt(760)));
  EXPECT_THAT(run.wall.count(), Lt(1500));
}

TEST(CliTest, HangAfterCommitWithAttemptTimeoutIsResolvedByStatusQuery) {
  ServerOptions o;
  o.script = {CommitThen(Fault::kHang)};
  OrderService server(o);
  CliRun run = RunCli({"--summary-json", "--deadline", "5s", "--attempt-timeout", "300ms",
                       "--status-url", server.StatusUrl(), "-d", "x", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.summary["resolved_by"], "status_query");
  EXPECT_EQ(run.summary["attempts"], 1);
  EXPECT_EQ(run.summary["status_queries"], 1);
  EXPECT_THAT(run.summary["elapsed_ms"].get<int>(), AllOf(Ge(300), Lt(1500)));
  EXPECT_EQ(server.effects(), 1);
}

// Only a deadline and a status URL: the time plan keeps 30 % of the deadline
// to resolve the hang (a 2 s POST gets 1390 ms), and a status query finds the
// order. One POST, one order.
TEST(CliTest, HangAfterCommitWithDefaultsIsResolvedByStatusQuery) {
  ServerOptions o;
  o.script = {CommitThen(Fault::kHang)};
  OrderService server(o);
  CliRun run = RunCli({"--summary-json", "--deadline", "2s", "--status-url", server.StatusUrl(),
                       "-d", "x", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.summary["outcome"], "SUCCEEDED");
  EXPECT_EQ(run.summary["resolved_by"], "status_query");
  EXPECT_EQ(run.summary["attempts"], 1);
  EXPECT_EQ(run.summary["status_queries"], 1);
  EXPECT_THAT(run.summary["elapsed_ms"].get<int>(), AllOf(Ge(1390), Lt(2000)));
  EXPECT_EQ(server.orders_requests().size(), 1u);
  EXPECT_EQ(server.effects(), 1);
}

// A GET that hangs is retried with defaults: each attempt gets half the call.
TEST(CliTest, GetThatHangsIsRetriedWithDefaults) {
  ServerOptions o;
  o.script = {CommitThen(Fault::kHang), Respond(200, "fine")};
  OrderService server(o);
  CliRun run = RunCli({"--summary-json", "--deadline", "1s", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.summary["attempts"], 2);
  EXPECT_EQ(run.summary["body"], "fine");
  EXPECT_THAT(run.summary["elapsed_ms"].get<int>(), AllOf(Ge(495), Lt(1000)));
}

TEST(CliTest, GetThatHangsIsRetried) {
  ServerOptions o;
  o.script = {CommitThen(Fault::kHang), Respond(200, "fine")};
  OrderService server(o);
  CliRun run = RunCli({"--summary-json", "--attempt-timeout", "200ms", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.summary["attempts"], 2);
  EXPECT_EQ(run.summary["body"], "fine");
  EXPECT_TRUE(run.summary["idempotency_key"].is_null());
}

TEST(CliTest, ResetBeforeCommitWithoutStatusUrlIsUnknown) {
  ServerOptions o;
  o.reset_connections = {0};
  OrderService server(o);
  CliRun run = RunCli({"--summary-json", "-d", "x", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_EQ(run.summary["stop_reason"], "ambiguous_unresolved");
  EXPECT_EQ(run.summary["attempts"], 1);
  EXPECT_EQ(server.effects(), 0);
}

TEST(CliTest, ResetBeforeCommitIsNotFoundByStatusQueryThenResent) {
  ServerOptions o;
  o.reset_connections = {0};
  OrderService server(o);
  CliRun run =
      RunCli({"--summary-json", "--status-url", server.StatusUrl(), "-d", "x", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.summary["outcome"], "SUCCEEDED");
  EXPECT_EQ(run.summary["attempts"], 2);
  EXPECT_EQ(run.summary["status_queries"], 1);
  EXPECT_EQ(run.summary["http_status"], 201);
  EXPECT_EQ(run.summary["resolved_by"], "response");
  EXPECT_EQ(server.effects(), 1);
  ASSERT_EQ(server.status_requests().size(), 1u);
}

// Finding 4: reset before it reached the service, "not found", a same-key
// resend answered with the service's first-time stored 400 (marked with the
// key's state): definite, FAILED at once, no second status query.
TEST(CliTest, ResetThenFirstTimeStoredErrorFails) {
  ServerOptions o;
  o.reset_connections = {0};
  o.script = {
      WithHeaders(Respond(400, "sku out of stock"), {{"Idempotency-Key-State", "completed"}})};
  OrderService server(o);
  CliRun run = RunCli({"--summary-json", "--deadline", "3s", "--status-url", server.StatusUrl(),
                       "-d", "x", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_EQ(run.summary["outcome"], "FAILED");
  EXPECT_EQ(run.summary["stop_reason"], "permanent_error");
  EXPECT_EQ(run.summary["resolved_by"], "response");
  EXPECT_EQ(run.summary["attempts"], 2);
  EXPECT_EQ(run.summary["status_queries"], 1);
  EXPECT_EQ(server.effects(), 0);
}

// The same with a 400 nobody marked (a gateway's): one settling status
// query, no resend after it, UNKNOWN with a reason that does not read as a
// failure.
TEST(CliTest, ResetThenUnmarkedClientErrorIsUnknownAfterOneSettlingQuery) {
  ServerOptions o;
  o.reset_connections = {0};
  o.script = {Respond(400, "bad request")};
  OrderService server(o);
  CliRun run = RunCli({"--summary-json", "--deadline", "3s", "--status-url", server.StatusUrl(),
                       "-d", "x", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_EQ(run.summary["outcome"], "UNKNOWN");
  EXPECT_EQ(run.summary["stop_reason"], "answer_not_definite");
  EXPECT_EQ(run.summary["attempts"], 2);
  EXPECT_EQ(run.summary["status_queries"], 2);
  // The reset connection was closed unread: the resend is the one request
  // the service read.
  EXPECT_EQ(server.orders_requests().size(), 1u);
  EXPECT_EQ(server.status_requests().size(), 2u);
}

// Finding 1: a key kept for the retention and then expired: 410 `expired`.
// With a status URL that finds the order: SUCCEEDED with it; without one:
// UNKNOWN `key_expired`, never FAILED, never a resend.
TEST(CliTest, ExpiredKeyWithAStatusUrlSucceedsAndWithoutOneIsUnknown) {
  ServerOptions o;
  o.dedup = true;
  o.script = {Respond(201, "", true),
              WithHeaders(Respond(410, "key expired"), {{"Idempotency-Key-State", "expired"}}),
              WithHeaders(Respond(410, "key expired"), {{"Idempotency-Key-State", "expired"}})};
  OrderService server(o);
  const std::vector<std::string> base = {"--summary-json", "--idempotency-key", "order-0042", "-d",
                                         "x"};
  std::vector<std::string> first = base;
  first.push_back(server.OrdersUrl());
  ASSERT_EQ(RunCli(first).exit_code, 0);

  std::vector<std::string> with_status = base;
  with_status.insert(with_status.end(), {"--status-url", server.StatusUrl(), server.OrdersUrl()});
  CliRun run = RunCli(with_status);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.summary["outcome"], "SUCCEEDED");
  EXPECT_EQ(run.summary["resolved_by"], "status_query");
  EXPECT_EQ(run.summary["http_status"], 200);
  EXPECT_EQ(run.summary["attempts"], 1);
  EXPECT_EQ(run.summary["status_queries"], 1);

  std::vector<std::string> blind = base;
  blind.push_back(server.OrdersUrl());
  CliRun unknown = RunCli(blind);
  EXPECT_EQ(unknown.exit_code, 2) << unknown.err;
  EXPECT_EQ(unknown.summary["outcome"], "UNKNOWN");
  EXPECT_EQ(unknown.summary["stop_reason"], "key_expired");
  EXPECT_EQ(unknown.summary["attempts"], 1);
  EXPECT_EQ(server.orders_requests().size(), 3u);
  EXPECT_EQ(server.effects(), 1);
}

// One attempt's line of `-v`: the deadline left when it ended and the wait
// the call chose after it (none when it stopped there).
struct VerboseAttempt {
  double remaining_ms = -1;
  std::optional<double> next_wait_ms;
};
std::vector<VerboseAttempt> VerboseAttempts(const std::string& err) {
  std::vector<VerboseAttempt> out;
  for (absl::string_view line : absl::StrSplit(err, '\n')) {
    if (!absl::StartsWith(line, "saferetry: < attempt ")) continue;
    VerboseAttempt a;
    const auto number_after = [&](absl::string_view key) -> std::optional<double> {
      const std::size_t at = line.find(key);
      if (at == absl::string_view::npos) return std::nullopt;
      return std::strtod(std::string(line.substr(at + key.size())).c_str(), nullptr);
    };
    a.remaining_ms = number_after(" remaining=").value_or(-1);
    a.next_wait_ms = number_after(" next_wait=");
    out.push_back(a);
  }
  return out;
}

// Finding 5 on the real clock: always 503, a 1.5 s deadline, 1 s attempt
// cap, many attempts allowed: the call keeps trying until no useful attempt
// fits, so its last send leaves after 1 s and it never stops on a wait it
// chose itself.
//
// What the machine chose is read from its own evidence (`-v`: the deadline
// left after each attempt and the wait it chose), so the check does not
// depend on how late the host wakes the process: every wait must leave a
// useful attempt (50 ms) and the margin (10 ms). A call that ends after a
// wait must have been woken later than the machine forgives (half a useful
// attempt, 25 ms, beyond the wait's slack); such a run says nothing about
// where the last send could have gone, so where the call stopped is
// asserted on the runs the host woke in time, at least one of them.
TEST(CliTest, AlwaysUnavailableKeepsTryingUntilNoUsefulAttemptFits) {
  constexpr double kDeadlineMs = 1500;
  constexpr double kUsefulPlusMarginMs = 60;
  constexpr double kForgivenMs = 25;
  constexpr double kClockSlackMs = 5;  // the CLI's elapsed and the evidence are read apart
  int on_time_runs = 0;
  for (int run_index = 0; run_index < 8 && on_time_runs < 3; ++run_index) {
    SCOPED_TRACE(run_index);
    ServerOptions o;
    for (int i = 0; i < 12; ++i) {
      o.script.push_back(
          WithHeaders(Respond(503, "busy"), {{"Idempotency-Key-State", "rejected"}}));
    }
    OrderService server(o);
    CliRun run = RunCli({"--summary-json", "-v", "--deadline", "1500ms", "--max-attempts", "50",
                         "--attempt-timeout", "1s", "-d", "x", server.OrdersUrl()});
    EXPECT_EQ(run.exit_code, 1) << run.err;
    EXPECT_EQ(run.summary["outcome"], "FAILED");
    EXPECT_EQ(run.summary["stop_reason"], "no_time_for_useful_attempt") << run.err;
    const std::vector<VerboseAttempt> attempts = VerboseAttempts(run.err);
    ASSERT_EQ(attempts.size(), run.summary["attempts"].get<std::size_t>()) << run.err;
    // Every wait it chose leaves a useful attempt before the deadline.
    for (const VerboseAttempt& a : attempts) {
      if (a.next_wait_ms.has_value()) {
        EXPECT_GE(a.remaining_ms - *a.next_wait_ms, kUsefulPlusMarginMs - 0.1) << run.err;
      }
    }
    const auto at = server.arrivals();
    ASSERT_GE(at.size(), 2u);
    const auto last_ms = std::chrono::duration_cast<milliseconds>(at.back() - at.front()).count();
    const double elapsed_ms = run.summary["elapsed_ms"].get<double>();
    const VerboseAttempt& last = attempts.back();
    if (last.next_wait_ms.has_value()) {
      // It ended after a wait: only a wake-up later than forgiven does that.
      const double wake_due_ms = kDeadlineMs - last.remaining_ms + *last.next_wait_ms;
      const double slack_ms = last.remaining_ms - *last.next_wait_ms - kUsefulPlusMarginMs;
      EXPECT_GT(elapsed_ms - wake_due_ms, kForgivenMs + slack_ms - kClockSlackMs)
          << run.summary.dump() << "\n"
          << run.err;
      continue;
    }
    ++on_time_runs;
    EXPECT_GT(last_ms, 1000) << run.summary.dump();
    // It stopped right after its last attempt, chose no wait, because not
    // even an immediate useful attempt fitted: the attempt ended less than
    // 50 ms useful attempt + 10 ms margin before the deadline (a wait that
    // would not fit is shortened, never a reason to stop while one fits).
    EXPECT_LT(last.remaining_ms, kUsefulPlusMarginMs + 0.1) << run.err;
    EXPECT_LT(elapsed_ms - (kDeadlineMs - last.remaining_ms), 100) << run.summary.dump();
  }
  EXPECT_GE(on_time_runs, 1) << "the host woke every run later than the machine forgives";
}

// The tool reads the proxy environment as curl does (the library does not):
// http_proxy for an http URL; --noproxy and --proxy "" bypass it; --proxy
// names one.
TEST(CliTest, ProxyFromTheEnvironmentAsCurlAndFromTheFlags) {
  OrderService server(ServerOptions{});
  LoopbackServer proxy([](const ReceivedRequest&, LoopbackConnection& conn) {
    conn.Write(LoopbackServer::Reply(200, {}, "via proxy"));
    return AfterRequest::kKeepAlive;
  });
  const std::string proxy_url = proxy.Url("");
  const std::vector<std::string> env = {"http_proxy=" + proxy_url};
  CliRun via_env = RunCli({"--summary-json", server.OrdersUrl()}, "", env);
  EXPECT_EQ(via_env.exit_code, 0) << via_env.err;
  EXPECT_EQ(via_env.summary["body"], "via proxy");
  ASSERT_EQ(proxy.requests().size(), 1u);
  EXPECT_EQ(proxy.requests()[0].target, server.OrdersUrl());

  CliRun bypass = RunCli({"--summary-json", "--noproxy", "127.0.0.1", server.OrdersUrl()}, "", env);
  EXPECT_EQ(bypass.exit_code, 0) << bypass.err;
  EXPECT_NE(bypass.summary["body"], "via proxy");
  CliRun none = RunCli({"--summary-json", "--proxy", "", server.OrdersUrl()}, "", env);
  EXPECT_NE(none.summary["body"], "via proxy");
  EXPECT_EQ(proxy.requests().size(), 1u);

  CliRun named = RunCli({"--summary-json", "--proxy", proxy_url, server.OrdersUrl()});
  EXPECT_EQ(named.summary["body"], "via proxy");
  EXPECT_EQ(proxy.requests().size(), 2u);
  CliRun bad = RunCli({"--proxy", "http://p\nX", server.OrdersUrl()});
  EXPECT_EQ(bad.exit_code, 64) << bad.err;
  EXPECT_THAT(bad.err, HasSubstr("--proxy"));
}

// Runs `command` with /bin/sh; true when it exits 0.
bool Shell(const std::string& command) { return std::system(command.c_str()) == 0; }

// A TLS server on loopback whose certificate a private CA signed:
// `openssl s_server -www` (it answers GET with a status page). Skips the test
// when openssl is missing.
class PrivateCaServer {
 public:
  PrivateCaServer() {
    char dir_template[] = "/tmp/saferetry-tls-XXXXXX";
    const char* made = mkdtemp(dir_template);
    if (made == nullptr) return;
    dir_ = made;
    const std::string d = dir_;
    const std::string q = " > /dev/null 2>&1";
    ok_ = Shell("command -v openssl > /dev/null") &&
          Shell("openssl req -x509 -newkey rsa:2048 -nodes -keyout " + d + "/ca.key -out " + d +
                "/ca.pem -days 2 -subj '/CN=saferetry test CA'" + q) &&
          Shell("openssl req -newkey rsa:2048 -nodes -keyout " + d + "/srv.key -out " + d +
                "/srv.csr -subj '/CN=127.0.0.1'" + q) &&
          Shell("printf 'subjectAltName=IP:127.0.0.1\\n' > " + d + "/ext") &&
          Shell("openssl x509 -req -in " + d + "/srv.csr -CA " + d + "/ca.pem -CAkey " + d +
                "/ca.key -CAcreateserial -out " + d + "/srv.pem -days 2 -extfile " + d + "/ext" +
                q) &&
          Shell("mkdir " + d + "/capath && cp " + d + "/ca.pem " + d +
                "/capath/ && openssl rehash " + d + "/capath" + q);
    if (!ok_) return;
    port_ = UnusedLoopbackPort();
    const std::string cert = d + "/srv.pem", key = d + "/srv.key", port = std::to_string(port_);
    pid_ = fork();
    if (pid_ == 0) {
      const int null_fd = ::open("/dev/null", O_RDWR);
      if (null_fd >= 0) {
        dup2(null_fd, 0);
        dup2(null_fd, 1);
        dup2(null_fd, 2);
      }
      execlp("openssl", "openssl", "s_server", "-accept", port.c_str(), "-cert", cert.c_str(),
             "-key", key.c_str(), "-www", "-quiet", static_cast<char*>(nullptr));
      _exit(127);
    }
    // Ready when it accepts a connection.
    ok_ = WaitUntil([&] {
      const int fd = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<std::uint16_t>(port_));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      const bool up = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
      close(fd);
      return up;
    });
  }
  ~PrivateCaServer() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (!dir_.empty()) Shell("rm -rf " + dir_);
  }
  bool ok() const { return ok_; }
  std::string Url() const { return "https://127.0.0.1:" + std::to_string(port_) + "/"; }
  std::string CaFile() const { return dir_ + "/ca.pem"; }
  std::string CaDir() const { return dir_ + "/capath"; }

 private:
  std::string dir_;
  bool ok_ = false;
  int port_ = 0;
  pid_t pid_ = -1;
};

// --cacert and --capath trust a private CA without touching the system
// bundle; without them its certificate is rejected (FAILED, nothing to retry).
TEST(CliTest, CacertAndCapathTrustAPrivateCa) {
  PrivateCaServer server;
  if (!server.ok()) GTEST_SKIP() << "openssl is not installed";
  CliRun untrusted = RunCli({"--summary-json", server.Url()});
  EXPECT_EQ(untrusted.exit_code, 1) << untrusted.err;
  EXPECT_EQ(untrusted.summary["stop_reason"], "permanent_error");
  EXPECT_EQ(untrusted.summary["attempts"], 1);
  CliRun cacert = RunCli({"--summary-json", "--cacert", server.CaFile(), server.Url()});
  EXPECT_EQ(cacert.exit_code, 0) << cacert.err;
  EXPECT_EQ(cacert.summary["http_status"], 200);
  CliRun capath = RunCli({"--summary-json", "--capath", server.CaDir(), server.Url()});
  EXPECT_EQ(capath.exit_code, 0) << capath.err;
  EXPECT_EQ(capath.summary["http_status"], 200);
}

// curl's HTTP version flags against nghttpd, an HTTP/2-only server: h2c
// needs --http2-prior-knowledge (without it the CLI speaks HTTP/1.1, and the
// h2 frames that come back are no HTTP/1.1 answer); over TLS, h2 is agreed
// by ALPN, as with --http2.
TEST(CliTest, Http2PriorKnowledgeGetsFromCleartextNghttpd) {
  if (NghttpdServer::Executable().empty()) {
    GTEST_SKIP() << "nghttpd is not installed (Debian package nghttp2-server)";
  }
  NghttpdServer server(NghttpdServer::Mode::kCleartext);
  ASSERT_TRUE(server.ok()) << server.error();
  CliRun h2c = RunCli({"--summary-json", "--http2-prior-knowledge", server.Url("/hello.txt")});
  EXPECT_EQ(h2c.exit_code, 0) << h2c.err;
  EXPECT_EQ(h2c.summary["http_status"], 200);
  EXPECT_EQ(h2c.summary["body"], NghttpdServer::HelloBody());
  EXPECT_EQ(h2c.summary["attempts"], 1);
  CliRun h1 = RunCli({"--summary-json", "--max-attempts", "1", server.Url("/hello.txt")});
  EXPECT_EQ(h1.exit_code, 1) << h1.err;
  EXPECT_TRUE(h1.summary["http_status"].is_null());
}

TEST(CliTest, Http2OverTlsWithAPrivateCa) {
  if (NghttpdServer::Executable().empty()) {
    GTEST_SKIP() << "nghttpd is not installed (Debian package nghttp2-server)";
  }
  NghttpdServer server(NghttpdServer::Mode::kTls);
  ASSERT_TRUE(server.ok()) << server.error();
  for (const char* flag : {"--http2", "--http2-prior-knowledge"}) {
    SCOPED_TRACE(flag);
    CliRun run =
        RunCli({"--summary-json", flag, "--cacert", server.CaFile(), server.Url("/hello.txt")});
    EXPECT_EQ(run.exit_code, 0) << run.err;
    EXPECT_EQ(run.summary["http_status"], 200);
    EXPECT_EQ(run.summary["body"], NghttpdServer::HelloBody());
  }
  CliRun h1 = RunCli({"--summary-json", "--max-attempts", "1", "--http1.1", "--cacert",
                      server.CaFile(), server.Url("/hello.txt")});
  EXPECT_NE(h1.exit_code, 0) << h1.err;
  EXPECT_TRUE(h1.summary["http_status"].is_null());
}

TEST(CliTest, HttpVersionFlagsExcludeEachOther) {
  for (const char* command : {"", "reconcile"}) {
    std::vector<std::string> args;
    if (command[0] != '\0') args = {command, "--journal", TempFile("v.db", "")};
    args.insert(args.end(), {"--http1.1", "--http2-prior-knowledge", "http://127.0.0.1:1/"});
    if (command[0] != '\0') args.pop_back();
    CliRun run = RunCli(args);
    EXPECT_EQ(run.exit_code, 64) << command;
    EXPECT_THAT(run.err, HasSubstr("excludes")) << command;
  }
}

TEST(CliTest, NotFoundWithNoAttemptLeftIsUnknown) {
  ServerOptions o;
  o.reset_connections = {0};
  OrderService server(o);
  CliRun run = RunCli({"--summary-json", "--max-attempts", "1", "--status-url", server.StatusUrl(),
                       "-d", "x", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_EQ(run.summary["outcome"], "UNKNOWN");
  EXPECT_EQ(run.summary["stop_reason"], "not_found_no_attempts_left");
  EXPECT_EQ(run.summary["attempts"], 1);
  EXPECT_EQ(run.summary["status_queries"], 1);
  EXPECT_TRUE(run.summary["http_status"].is_null());
  EXPECT_TRUE(run.summary["resolved_by"].is_null());
  EXPECT_EQ(server.effects(), 0);
}

TEST(CliTest, FiveHundredAfterCommitIsUnknownWithItsBody) {
  ServerOptions o;
  o.script = {Respond(500, "internal error", true)};
  OrderService server(o);
  CliRun run = RunCli({"--summary-json", "-d", "x", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_EQ(run.summary["outcome"], "UNKNOWN");
  EXPECT_EQ(run.summary["stop_reason"], "ambiguous_unresolved");
  EXPECT_EQ(run.summary["http_status"], 500);
  EXPECT_EQ(run.summary["body"], "internal error");
  EXPECT_TRUE(run.summary["resolved_by"].is_null());
  EXPECT_EQ(server.effects(), 1);
}

// A forwarding gateway answers 503 itself after the origin committed (the
// body is Envoy's local reply), with no Retry-After and no key state.
constexpr char kGatewayReset[] = "upstream connect error or disconnect/reset before headers";

TEST(CliTest, GatewayUnavailableAfterCommitIsSettledByTheStatusQuery) {
  ServerOptions o;
  o.script = {Respond(503, kGatewayReset, true), Respond(503, kGatewayReset, true),
              Respond(503, kGatewayReset, true)};
  OrderService server(o);
  CliRun run = RunCli({"--summary-json", "--max-attempts", "3", "--status-url", server.StatusUrl(),
                       "-d", "x", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.summary["outcome"], "SUCCEEDED");
  EXPECT_EQ(run.summary["resolved_by"], "status_query");
  EXPECT_EQ(run.summary["attempts"], 1);
  EXPECT_EQ(run.summary["status_queries"], 1);
  EXPECT_EQ(server.orders_requests().size(), 1u);
  EXPECT_EQ(server.effects(), 1);
}

TEST(CliTest, GatewayUnavailableAfterCommitWithoutAStatusUrlIsUnknown) {
  ServerOptions o;
  o.script = {Respond(503, kGatewayReset, true), Respond(503, kGatewayReset, true),
              Respond(503, kGatewayReset, true)};
  OrderService server(o);
  CliRun run = RunCli({"--summary-json", "--max-attempts", "3", "-d", "x", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_EQ(run.summary["outcome"], "UNKNOWN");
  EXPECT_EQ(run.summary["stop_reason"], "unavailable_unresolved");
  EXPECT_EQ(run.summary["attempts"], 1);
  EXPECT_EQ(server.orders_requests().size(), 1u);
  EXPECT_EQ(server.effects(), 1);
}

TEST(CliTest, GatewayUnavailableAfterCommitWithoutAKeyIsSentOnce) {
  ServerOptions o;
  o.script = {Respond(503, kGatewayReset, true), Respond(503, kGatewayReset, true),
              Respond(503, kGatewayReset, true)};
  OrderService server(o);
  CliRun run = RunCli({"--summary-json", "--max-attempts", "3", "--no-idempotency-key", "-d", "x",
                       server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_EQ(run.summary["outcome"], "UNKNOWN");
  EXPECT_EQ(run.summary["stop_reason"], "unavailable_unresolved");
  EXPECT_EQ(run.summary["attempts"], 1);
  EXPECT_TRUE(run.summary["idempotency_key"].is_null());
  EXPECT_THAT(Keys(server.orders_requests()), ElementsAre(""));
  EXPECT_EQ(server.effects(), 1);
}

// The same server answering 503 without committing: the status query comes
// before the end, and its plain "not found" proves nothing, so the same key
// is resent; with every send answered so, the call ends UNKNOWN, not FAILED.
TEST(CliTest, UnavailableWithoutCommitIsQueriedAndNeverFailedOnAPlainNotFound) {
  ServerOptions o;
  o.script = {Respond(503, kGatewayReset), Respond(503, kGatewayReset),
              Respond(503, kGatewayReset)};
  OrderService server(o);
  CliRun run = RunCli({"--summary-json", "--max-attempts", "3", "--status-url", server.StatusUrl(),
                       "-d", "x", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_EQ(run.summary["outcome"], "UNKNOWN");
  EXPECT_EQ(run.summary["stop_reason"], "not_found_no_attempts_left");
  EXPECT_EQ(run.summary["attempts"], 3);
  EXPECT_EQ(run.summary["status_queries"], 3);
  EXPECT_EQ(server.status_requests().size(), 3u);
  EXPECT_EQ(server.effects(), 0);
  const std::vector<std::string> sent = Keys(server.orders_requests());
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(std::set<std::string>(sent.begin(), sent.end()).size(), 1u);  // one key
}

TEST(CliTest, UnavailableWithoutCommitOrStatusUrlIsUnknown) {
  ServerOptions o;
  o.script = {Respond(503, kGatewayReset)};
  OrderService server(o);
  CliRun run = RunCli({"--summary-json", "--max-attempts", "3", "-d", "x", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_EQ(run.summary["outcome"], "UNKNOWN");
  EXPECT_EQ(run.summary["stop_reason"], "unavailable_unresolved");
  EXPECT_EQ(server.orders_requests().size(), 1u);
  EXPECT_EQ(server.effects(), 0);
}

// `Idempotency-Key-State: rejected` proves the 503 did nothing: retried, and
// FAILED once the attempts are used up.
TEST(CliTest, MarkedUnavailableIsRetriedThenFailed) {
  const Headers rejected = {{"Idempotency-Key-State", "rejected"}};
  ServerOptions o;
  o.script = {WithHeaders(Respond(503, "busy"), rejected),
              WithHeaders(Respond(503, "busy"), rejected),
              WithHeaders(Respond(503, "busy"), rejected)};
  OrderService server(o);
  CliRun run = RunCli({"--summary-json", "--max-attempts", "3", "--status-url", server.StatusUrl(),
                       "-d", "x", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_EQ(run.summary["outcome"], "FAILED");
  EXPECT_EQ(run.summary["stop_reason"], "attempts_exhausted");
  EXPECT_EQ(run.summary["attempts"], 3);
  EXPECT_EQ(run.summary["status_queries"], 0);
  EXPECT_EQ(server.effects(), 0);
}

TEST(CliTest, FiveHundredAfterCommitResolvedByStatusQuery) {
  ServerOptions o;
  o.script = {Respond(500, "internal error", true)};
  OrderService server(o);
  CliRun run =
      RunCli({"--summary-json", "--status-url", server.StatusUrl(), "-d", "x", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.summary["resolved_by"], "status_query");
  EXPECT_EQ(run.summary["http_status"], 200);
  EXPECT_EQ(run.summary["attempts"], 1);
  EXPECT_EQ(server.orders_requests().size(), 1u);
  EXPECT_EQ(server.effects(), 1);
}

TEST(CliTest, StatusQueryThatNeverAnswersLeavesItUnknown) {
  ServerOptions o;
  o.script = {Respond(500, "internal error", true)};
  o.status_script = {Respond(500, "status broken"), Respond(500, "status broken")};
  OrderService server(o);
  CliRun run = RunCli({"--summary-json", "--policy",
                       TempFile("two_queries.json", R"({"saferetry": {"maxStatusQueries": 2}})"),
                       "--status-url", server.StatusUrl(), "-d", "x", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_EQ(run.summary["stop_reason"], "status_queries_exhausted");
  EXPECT_EQ(run.summary["attempts"], 1);
  EXPECT_EQ(run.summary["status_queries"], 2);
  // The last response to the request, not the status answer.
  EXPECT_EQ(run.summary["http_status"], 500);
  EXPECT_EQ(run.summary["body"], "internal error");
  EXPECT_EQ(server.orders_requests().size(), 1u);
}

TEST(CliTest, ConflictThenOkResendsTheSameKey) {
  ServerOptions o;
  o.script = {Respond(409, "in progress"), Respond(201, "made", true)};
  OrderService server(o);
  CliRun run = RunCli({"--summary-json", "-d", "x", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.summary["attempts"], 2);
  EXPECT_EQ(run.summary["http_status"], 201);
  EXPECT_EQ(run.summary["body"], "made");
  EXPECT_EQ(run.summary["resolved_by"], "response");
  const auto keys = Keys(server.orders_requests());
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0], keys[1]);
}

TEST(CliTest, ConflictWithStatusUrlPollsInsteadOfResending) {
  ServerOptions o;
  o.script = {Respond(409, "in progress", true)};
  OrderService server(o);
  CliRun run =
      RunCli({"--summary-json", "--status-url", server.StatusUrl(), "-d", "x", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.summary["attempts"], 1);
  EXPECT_EQ(run.summary["status_queries"], 1);
  EXPECT_EQ(run.summary["resolved_by"], "status_query");
  EXPECT_EQ(server.effects(), 1);
}

TEST(CliTest, PermanentErrorsFail) {
  for (int status : {400, 422}) {
    SCOPED_TRACE(status);
    ServerOptions o;
    o.script = {Respond(status, "bad order")};
    OrderService server(o);
    CliRun run = RunCli({"--summary-json", "-d", "x", server.OrdersUrl()});
    EXPECT_EQ(run.exit_code, 1) << run.err;
    ExpectSummaryFields(run.summary);
    EXPECT_EQ(run.summary["outcome"], "FAILED");
    EXPECT_EQ(run.summary["stop_reason"], "permanent_error");
    EXPECT_EQ(run.summary["attempts"], 1);
    EXPECT_EQ(run.summary["http_status"], status);
    EXPECT_EQ(run.summary["resolved_by"], "response");
    EXPECT_EQ(run.summary["body"], "bad order");
    EXPECT_EQ(server.orders_requests().size(), 1u);
  }
}

TEST(CliTest, FailedPrintsTheBody) {
  ServerOptions o;
  o.script = {Respond(422, "sku unknown")};
  OrderService server(o);
  CliRun run = RunCli({"-d", "x", "--no-idempotency-key", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.out, "sku unknown");
  EXPECT_EQ(run.err, "saferetry: FAILED (permanent_error) after 1 attempt, HTTP 422\n");
}

TEST(CliTest, ServiceUnavailableUntilAttemptsRunOut) {
  ServerOptions o;
  o.script = {Refused503("busy"), Refused503("busy"), Refused503("still busy")};
  OrderService server(o);
  CliRun run = RunCli({"--summary-json", "-d", "x", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_EQ(run.summary["outcome"], "FAILED");
  EXPECT_EQ(run.summary["stop_reason"], "attempts_exhausted");
  EXPECT_EQ(run.summary["attempts"], 3);
  EXPECT_EQ(run.summary["http_status"], 503);
  EXPECT_EQ(run.summary["body"], "still busy");
  EXPECT_EQ(run.summary["resolved_by"], "response");
}

TEST(CliTest, RetryAfterSecondsIsHonoured) {
  ServerOptions o;
  o.script = {Refused503("", {{"Retry-After", "1"}})};
  OrderService server(o);
  CliRun run = RunCli({"--summary-json", "--verbose", "-d", "x", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.summary["attempts"], 2);
  const auto at = server.arrivals();
  ASSERT_EQ(at.size(), 2u);
  EXPECT_THAT(std::chrono::duration_cast<milliseconds>(at[1] - at[0]).count(),
              AllOf(Ge(1000), Lt(1400)));
  EXPECT_THAT(run.summary["elapsed_ms"].get<int>(), Ge(1000));
  EXPECT_THAT(run.err, HasSubstr("saferetry: > attempt 1: POST " + server.OrdersUrl() + "\n"));
  EXPECT_THAT(run.err, HasSubstr("saferetry: < attempt 1: delivery=response_received http=503 "
                                 "class=retryable_transient"));
  EXPECT_THAT(run.err, HasSubstr("retry_after=1000.0ms"));
  EXPECT_THAT(run.err, HasSubstr("next_wait=1000.0ms (server hint)"));
  EXPECT_THAT(run.err, HasSubstr("saferetry: < attempt 2: delivery=response_received http=201"));
}

TEST(CliTest, VerboseNeverPrintsUrlCredentialsOrSecretHeaders) {
  ServerOptions o;
  o.script = {Refused503()};
  OrderService server(o);
  const std::string clean = server.OrdersUrl();
  ASSERT_TRUE(clean.rfind("http://", 0) == 0);
  const std::string with_credentials = "http://bob:pa55word@" + clean.substr(7);
  CliRun run = RunCli({"--summary-json", "--verbose", "-d", "x", "-H",
                       "Authorization: Bearer s3cr3t-token", "-H", "Cookie: session=abc123", "-H",
                       "Proxy-Authorization: Basic pr0xy", with_credentials});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.err, HasSubstr("saferetry: > attempt 1: POST " + clean + "\n"));
  EXPECT_THAT(run.err, HasSubstr("saferetry: > attempt 2: POST " + clean + "\n"));
  for (const char* secret : {"pa55word", "bob", "s3cr3t-token", "session=abc123", "pr0xy"}) {
    EXPECT_THAT(run.err, Not(HasSubstr(secret))) << secret;
    EXPECT_THAT(run.out, Not(HasSubstr(secret))) << secret;
  }
}

TEST(CliTest, TransportErrorsNeverPrintUrlCredentials) {
  const std::string url =
      "http://bob:pa55word@127.0.0.1:" + std::to_string(UnusedLoopbackPort()) + "/orders";
  CliRun verbose = RunCli({"--verbose", "--max-attempts", "1", "-d", "x", url});
  EXPECT_EQ(verbose.exit_code, 1) << verbose.err;
  EXPECT_THAT(verbose.err, HasSubstr("saferetry: > attempt 1: POST http://127.0.0.1:"));
  EXPECT_THAT(verbose.err, HasSubstr("transport=\""));
  EXPECT_THAT(verbose.err, Not(HasSubstr("pa55word")));
  EXPECT_THAT(verbose.err, Not(HasSubstr("bob")));
}

TEST(CliTest, RetryAfterDateIsMeasuredAgainstTheResponseDate) {
  ServerOptions o;
  o.script = {Refused503("", {{"Date", "Sun, 06 Nov 1994 08:49:37 GMT"},
                              {"Retry-After", "Sun, 06 Nov 1994 08:49:38 GMT"}})};
  OrderService server(o);
  CliRun run = RunCli({"--summary-json", "-d", "x", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  const auto at = server.arrivals();
  ASSERT_EQ(at.size(), 2u);
  EXPECT_THAT(std::chrono::duration_cast<milliseconds>(at[1] - at[0]).count(),
              AllOf(Ge(1000), Lt(1400)));
}

TEST(CliTest, RetryAfterPastTheDeadlineGivesUpAtOnce) {
  ServerOptions o;
  o.script = {Refused503("later", {{"Retry-After", "5"}})};
  OrderService server(o);
  CliRun run = RunCli({"--summary-json", "--deadline", "2s", "-d", "x", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_EQ(run.summary["outcome"], "FAILED");
  EXPECT_EQ(run.summary["stop_reason"], "retry_after_beyond_deadline");
  EXPECT_EQ(run.summary["attempts"], 1);
  EXPECT_EQ(run.summary["http_status"], 503);
  EXPECT_EQ(run.summary["resolved_by"], "response");
  EXPECT_THAT(run.summary["elapsed_ms"].get<int>(), Lt(500));
  EXPECT_EQ(server.orders_requests().size(), 1u);
}

TEST(CliTest, DeadlineTooShortForAnyAttemptSendsNothing) {
  OrderService server(ServerOptions{});
  CliRun run = RunCli({"--summary-json", "--deadline", "1ms", "-d", "x", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_EQ(run.summary["stop_reason"], "deadline_exceeded");
  EXPECT_EQ(run.summary["attempts"], 0);
  EXPECT_TRUE(run.summary["http_status"].is_null());
  EXPECT_TRUE(run.summary["resolved_by"].is_null());
  EXPECT_EQ(server.orders_requests().size(), 0u);
}

// ---------------------------------------------------------------------------
// --max-attempts and --policy.

TEST(CliTest, MaxAttemptsAboveTheCapIsClampedWithAWarning) {
  OrderService server(Scripted(std::vector<Step>(12, Refused503())));
  const std::string fast =
      TempFile("fast.json",
               R"({"retryPolicy": {"initialBackoff": "0.001s", "maxBackoff": "0.002s",
                      "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}})");
  CliRun run = RunCli(
      {"--summary-json", "--policy", fast, "--max-attempts", "50", "-d", "x", server.OrdersUrl()});
  std::remove(fast.c_str());
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_EQ(run.summary["stop_reason"], "attempts_exhausted");
  EXPECT_EQ(run.summary["attempts"], 10);
  EXPECT_EQ(server.orders_requests().size(), 10u);
  EXPECT_EQ(run.err,
            "saferetry: warning: --max-attempts: 50 is above the hard cap; "
            "using 10\n");
}

TEST(CliTest, MaxAttemptsOne) {
  OrderService server(Scripted({Refused503()}));
  CliRun run = RunCli({"--summary-json", "--max-attempts", "1", "-d", "x", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.summary["stop_reason"], "attempts_exhausted");
  EXPECT_EQ(run.summary["attempts"], 1);
}

TEST(CliTest, PolicyDoNotRetryHeaderStopsTheCall) {
  ServerOptions o;
  o.script = {Refused503("go away", {{"X-Do-Not-Retry", "1"}})};
  OrderService server(o);
  const std::string policy =
      TempFile("dnr.json", R"({"saferetry": {"doNotRetryHeader": "X-Do-Not-Retry"}})");
  CliRun run = RunCli({"--summary-json", "--policy", policy, "-d", "x", server.OrdersUrl()});
  std::remove(policy.c_str());
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_EQ(run.summary["stop_reason"], "server_do_not_retry");
  EXPECT_EQ(run.summary["attempts"], 1);
  EXPECT_EQ(run.summary["http_status"], 503);
}

TEST(CliTest, PolicyWithNoRetryBudgetStopsAtTheFirstRetry) {
  ServerOptions o;
  o.script = {Refused503("busy")};
  OrderService server(o);
  const std::string policy = TempFile("budget.json", R"({"saferetry": {"budget": "ratio",
                                       "ratioBudget": {"percent": 0, "minPerSecond": 0}}})");
  CliRun run = RunCli({"--summary-json", "--policy", policy, "-d", "x", server.OrdersUrl()});
  std::remove(policy.c_str());
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_EQ(run.summary["stop_reason"], "budget_exhausted");
  EXPECT_EQ(run.summary["attempts"], 1);
}

TEST(CliTest, FlagsOverrideThePolicy) {
  ServerOptions o;
  o.script = {CommitThen(Fault::kDrop)};
  o.dedup = true;
  OrderService server(o);
  // The policy asks for no key and three attempts; the flags for a key and
  // one attempt.
  const std::string policy = TempFile(
      "override.json",
      R"({"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "0.002s",
                          "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]},
          "saferetry": {"idempotency": {"mode": "never"}, "serverDeduplicates": true}})");
  CliRun run = RunCli({"--summary-json", "--policy", policy, "--idempotency-key", "pk",
                       "--max-attempts", "2", "-d", "x", server.OrdersUrl()});
  std::remove(policy.c_str());
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.summary["attempts"], 2);
  EXPECT_EQ(run.summary["idempotency_key"], "pk");
  EXPECT_THAT(Keys(server.orders_requests()), ElementsAre("pk", "pk"));
  EXPECT_EQ(server.effects(), 1);
}

// ---------------------------------------------------------------------------
// SIGINT.

// The aborted attempt may have been delivered: UNKNOWN, stopped as cancelled
// (with or without a status URL: nothing is sent after the cancellation).
TEST(CliTest, SigintWhileAnAttemptMayHaveBeenDeliveredIsUnknown) {
  for (bool with_status_url : {true, false}) {
    SCOPED_TRACE(with_status_url);
    ServerOptions o;
    o.script = {CommitThen(Fault::kHang)};
    OrderService server(o);
    std::vector<std::string> args = {"--summary-json", "-d", "x", server.OrdersUrl()};
    if (with_status_url) args.insert(args.begin(), {"--status-url", server.StatusUrl()});
    Child child(args);
    ASSERT_TRUE(WaitUntil([&] { return server.orders_requests().size() == 1; }));
    const auto sent = Clock::now();
    ::kill(child.pid(), SIGINT);
    CliRun run = child.Wait();
    const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - sent);
    EXPECT_EQ(run.exit_code, 2) << run.err;
    EXPECT_EQ(run.summary["outcome"], "UNKNOWN");
    EXPECT_EQ(run.summary["stop_reason"], "cancelled");
    EXPECT_EQ(run.summary["attempts"], 1);
    EXPECT_EQ(run.summary["status_queries"], 0);
    EXPECT_TRUE(run.summary["resolved_by"].is_null());
    EXPECT_THAT(took.count(), Lt(1500));
    EXPECT_EQ(server.status_requests().size(), 0u);
  }
}

TEST(CliTest, SigintDuringAWaitAfterACleanRefusalFails) {
  ServerOptions o;
  o.script = {Refused503("", {{"Retry-After", "20"}})};
  OrderService server(o);
  Child child({"--summary-json", "-d", "x", server.OrdersUrl()});
  ASSERT_TRUE(WaitUntil([&] { return server.orders_requests().size() == 1; }));
  std::this_thread::sleep_for(milliseconds(200));  // The answer arrives, the wait begins.
  const auto sent = Clock::now();
  ::kill(child.pid(), SIGINT);
  CliRun run = child.Wait();
  const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - sent);
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_EQ(run.summary["outcome"], "FAILED");
  EXPECT_EQ(run.summary["stop_reason"], "cancelled");
  EXPECT_EQ(run.summary["attempts"], 1);
  EXPECT_EQ(run.summary["http_status"], 503);
  EXPECT_THAT(took.count(), Lt(500));
  EXPECT_EQ(server.orders_requests().size(), 1u);
}

// ---------------------------------------------------------------------------
// Many invocations, one intent.

TEST(CliTest, TwentyConcurrentInvocationsWithOneKeyMakeOneEffect) {
  ServerOptions o;
  o.dedup = true;
  o.processing = milliseconds(100);
  OrderService server(o);
  std::vector<std::unique_ptr<Child>> children;
  for (int i = 0; i < 20; ++i) {
    children.push_back(std::make_unique<Child>(std::vector<std::string>{
        "--summary-json", "--idempotency-key", "order-42", "--max-attempts", "10", "--deadline",
        "15s", "-d", R"({"sku":"a"})", server.OrdersUrl()}));
  }
  std::set<std::string> bodies;
  for (auto& c : children) {
    CliRun run = c->Wait();
    EXPECT_EQ(run.exit_code, 0) << run.err;
    EXPECT_EQ(run.summary["outcome"], "SUCCEEDED");
    EXPECT_EQ(run.summary["idempotency_key"], "order-42");
    bodies.insert(run.summary["body"].get<std::string>());
  }
  EXPECT_EQ(server.effects(), 1);
  EXPECT_EQ(bodies.size(), 1u);
  EXPECT_THAT(server.orders_requests().size(), Ge(20u));
}

// ---------------------------------------------------------------------------
// The intent journal: --journal records the call, `saferetry reconcile`
// settles what a call left unresolved.

// A fresh journal path (the file does not exist yet).
std::string JournalPath(const std::string& name) {
  const std::string path = TempFile(name + ".db", "");
  for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
  return path;
}

// The lines of `saferetry reconcile`'s stdout, each parsed.
std::vector<json> JsonLines(const std::string& out) {
  std::vector<json> lines;
  std::size_t start = 0;
  while (start < out.size()) {
    const std::size_t end = out.find('\n', start);
    lines.push_back(json::parse(out.substr(start, end - start), nullptr, false));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return lines;
}

void ExpectReconcileFields(const json& line) {
  ASSERT_TRUE(line.is_object()) << line;
  std::vector<std::string> names;
  for (auto it = line.begin(); it != line.end(); ++it) names.push_back(it.key());
  EXPECT_THAT(names, ElementsAre("http_status", "idempotency_key", "outcome", "resolved_by",
                                 "stop_reason"));
}

TEST(CliJournalTest, KillNineWhileTheAttemptHangsThenReconcileSucceedsByAStatusQuery) {
  OrderService server(Scripted({CommitThen(Fault::kHang)}));
  const std::string journal = JournalPath("kill9");
  Child cli({"-d", R"({"sku":"a"})", "--idempotency-key", "order-kill-9", "--status-url",
             server.StatusUrl(), "--deadline", "1500ms", "--journal", journal, server.OrdersUrl()});
  // The order is committed and the attempt hangs: kill the tool there.
  ASSERT_TRUE(WaitUntil([&] { return server.effects() == 1; }));
  ASSERT_TRUE(cli.KillNine());
  EXPECT_EQ(server.status_requests().size(), 0u);

  // Its claim lasts until the call's deadline plus the grace (2 s); until
  // then a cron-style run leaves it alone, says so (who holds it, until
  // when) and exits 0: a claimed intent is not a failure.
  CliRun claimed = RunCli({"reconcile", "--journal", journal, "--older-than", "0s"});
  EXPECT_EQ(claimed.exit_code, 0) << claimed.err;
  std::vector<json> skipped = JsonLines(claimed.out);
  ASSERT_EQ(skipped.size(), 1u) << claimed.out;
  EXPECT_EQ(skipped[0]["idempotency_key"], "order-kill-9");
  EXPECT_EQ(skipped[0]["skipped"], "claimed");
  EXPECT_EQ(skipped[0]["state"], "SENT");
  EXPECT_TRUE(skipped[0]["claim_owner"].is_string());
  EXPECT_THAT(skipped[0]["claim_until"].get<std::string>(),
              MatchesRegex("[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z"));
  EXPECT_THAT(claimed.err,
              HasSubstr("0 tried (0 resolved: 0 succeeded, 0 failed; 0 still unknown), "
                        "1 claimed (the next claim ends "));
  EXPECT_EQ(server.status_requests().size(), 0u);

  CliRun run;
  ASSERT_TRUE(WaitUntil(
      [&] {
        run = RunCli({"reconcile", "--journal", journal, "--older-than", "0s"});
        return run.out.find("\"outcome\"") != std::string::npos || run.exit_code != 0;
      },
      milliseconds(10000)));
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.err, HasSubstr("1 tried (1 resolved: 1 succeeded, 0 failed; 0 still unknown), "
                                 "0 claimed, 0 in flight"));
  std::vector<json> lines = JsonLines(run.out);
  ASSERT_EQ(lines.size(), 1u) << run.out;
  ExpectReconcileFields(lines[0]);
  EXPECT_EQ(lines[0]["idempotency_key"], "order-kill-9");
  EXPECT_EQ(lines[0]["outcome"], "SUCCEEDED");
  EXPECT_EQ(lines[0]["stop_reason"], "success");
  EXPECT_EQ(lines[0]["resolved_by"], "status_query");
  EXPECT_EQ(lines[0]["http_status"], 200);
  EXPECT_EQ(server.effects(), 1);
  EXPECT_EQ(server.orders_requests().size(), 1u);  // one POST, never resent
  ASSERT_EQ(server.status_requests().size(), 1u);
  EXPECT_EQ(server.status_requests()[0].target, "/status/order-kill-9");

  // Resolved for good: the next run has nothing to do.
  CliRun again = RunCli({"reconcile", "--journal", journal, "--older-than", "0s"});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.out, "");
  EXPECT_EQ(server.status_requests().size(), 1u);
}

// One cron-style run next to a killed call: --wait-for-claims waits for its
// claim to run out and then settles it; an eligible intent that stays
// unresolved makes the run exit 2.
TEST(CliJournalTest, ReconcileWaitsForClaimsWithinItsBoundAndFailsOnlyOnUnresolvedTriedIntents) {
  OrderService server(Scripted({CommitThen(Fault::kHang)}));
  const std::string journal = JournalPath("wait-claims");
  Child cli({"-d", R"({"sku":"a"})", "--idempotency-key", "order-wait", "--status-url",
             server.StatusUrl(), "--deadline", "1s", "--journal", journal, server.OrdersUrl()});
  ASSERT_TRUE(WaitUntil([&] { return server.effects() == 1; }));
  ASSERT_TRUE(cli.KillNine());
  // Too short a wait: still claimed, exit 0.
  CliRun short_wait = RunCli(
      {"reconcile", "--journal", journal, "--older-than", "0s", "--wait-for-claims", "100ms"});
  EXPECT_EQ(short_wait.exit_code, 0) << short_wait.err;
  EXPECT_THAT(short_wait.out, HasSubstr("\"skipped\":\"claimed\""));
  // Long enough (the claim ends 1 s + 2 s after the call's start).
  CliRun waited =
      RunCli({"reconcile", "--journal", journal, "--older-than", "0s", "--wait-for-claims", "6s"});
  EXPECT_EQ(waited.exit_code, 0) << waited.err;
  std::vector<json> lines = JsonLines(waited.out);
  ASSERT_EQ(lines.size(), 1u) << waited.out;
  EXPECT_EQ(lines[0]["outcome"], "SUCCEEDED");
  EXPECT_THAT(waited.err, HasSubstr("1 tried (1 resolved"));

  // An intent it can try that stays UNKNOWN ("not found", no fence): exit 2.
  const std::string journal2 = JournalPath("wait-claims-unknown");
  ServerOptions reset;
  reset.reset_connections = {0};
  OrderService dropped(reset);
  CliRun call = RunCli({"-d", "x", "--idempotency-key", "order-lost", "--max-attempts", "1",
                        "--journal", journal2, dropped.OrdersUrl()});
  ASSERT_EQ(call.exit_code, 2) << call.err;
  CliRun unresolved = RunCli({"reconcile", "--journal", journal2, "--older-than", "0s",
                              "--status-url", dropped.StatusUrl()});
  EXPECT_EQ(unresolved.exit_code, 2) << unresolved.err;
  EXPECT_THAT(unresolved.err,
              HasSubstr("1 tried (0 resolved: 0 succeeded, 0 failed; 1 still unknown)"));
}

TEST(CliJournalTest, JournaledCallThatSucceededLeavesNothingToReconcile) {
  OrderService server(ServerOptions{});
  const std::string journal = JournalPath("ok");
  CliRun run = RunCli({"--summary-json", "-d", "x", "--journal", journal, server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  CliRun reconcile = RunCli({"reconcile", "--journal", journal, "--older-than", "0s"});
  EXPECT_EQ(reconcile.exit_code, 0) << reconcile.err;
  EXPECT_EQ(reconcile.out, "");
  EXPECT_EQ(server.status_requests().size(), 0u);
}

TEST(CliJournalTest, UnknownWithoutATemplateNeedsStatusUrlAndSendsTheGivenCredentials) {
  OrderService server(Scripted({CommitThen(Fault::kDrop)}));
  const std::string journal = JournalPath("unknown");
  CliRun run = RunCli({"-d", "x", "--idempotency-key", "k-unknown", "--max-attempts", "1",
                       "--journal", journal, server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 2) << run.err;

  CliRun without = RunCli({"reconcile", "--journal", journal, "--older-than", "0s"});
  EXPECT_EQ(without.exit_code, 2) << without.err;
  std::vector<json> lines = JsonLines(without.out);
  ASSERT_EQ(lines.size(), 1u) << without.out;
  ExpectReconcileFields(lines[0]);
  EXPECT_EQ(lines[0]["outcome"], "UNKNOWN");
  EXPECT_EQ(lines[0]["stop_reason"], "invalid_argument");
  EXPECT_TRUE(lines[0]["resolved_by"].is_null());
  EXPECT_TRUE(lines[0]["http_status"].is_null());

  CliRun with = RunCli({"reconcile", "--journal", journal, "--older-than", "0s", "--status-url",
                        server.StatusUrl(), "-H", "Authorization: Bearer reconcile-token"});
  EXPECT_EQ(with.exit_code, 0) << with.err;
  lines = JsonLines(with.out);
  ASSERT_EQ(lines.size(), 1u) << with.out;
  EXPECT_EQ(lines[0]["idempotency_key"], "k-unknown");
  EXPECT_EQ(lines[0]["outcome"], "SUCCEEDED");
  EXPECT_EQ(lines[0]["resolved_by"], "status_query");
  ASSERT_EQ(server.status_requests().size(), 1u);
  EXPECT_EQ(server.status_requests()[0].Header("Authorization").value_or(""),
            "Bearer reconcile-token");
  EXPECT_EQ(server.status_requests()[0].Header("Idempotency-Key").value_or(""), "k-unknown");
  EXPECT_EQ(server.effects(), 1);
  EXPECT_EQ(server.orders_requests().size(), 1u);
}

TEST(CliJournalTest, NotFoundStaysUnknownUnlessFenced) {
  Step lost = CommitThen(Fault::kDrop);
  lost.commit = false;
  ServerOptions o = Scripted({lost});
  o.status_script = {Respond(404), Respond(404),
                     WithHeaders(Respond(404), {{"Idempotency-Key-State", "fenced"}})};
  OrderService server(o);
  const std::string journal = JournalPath("fence");
  CliRun run = RunCli({"-d", "x", "--idempotency-key", "k-fence", "--max-attempts", "1",
                       "--journal", journal, server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  const std::vector<std::string> reconcile = {
      "reconcile", "--journal", journal, "--older-than", "0s", "--status-url", server.StatusUrl()};

  CliRun unfenced = RunCli(reconcile);
  EXPECT_EQ(unfenced.exit_code, 2) << unfenced.err;
  std::vector<json> lines = JsonLines(unfenced.out);
  ASSERT_EQ(lines.size(), 1u) << unfenced.out;
  EXPECT_EQ(lines[0]["outcome"], "UNKNOWN");
  EXPECT_EQ(lines[0]["stop_reason"], "not_found_no_attempts_left");
  EXPECT_EQ(lines[0]["http_status"], 404);

  std::vector<std::string> fenced_args = reconcile;
  fenced_args.push_back("--fence");
  CliRun fenced = RunCli(fenced_args);
  EXPECT_EQ(fenced.exit_code, 0) << fenced.err;
  lines = JsonLines(fenced.out);
  ASSERT_EQ(lines.size(), 1u) << fenced.out;
  EXPECT_EQ(lines[0]["outcome"], "FAILED");
  EXPECT_EQ(lines[0]["stop_reason"], "fenced");
  EXPECT_EQ(lines[0]["resolved_by"], "status_query");
  const std::vector<ReceivedRequest> queries = server.status_requests();
  ASSERT_EQ(queries.size(), 3u);
  EXPECT_FALSE(queries[1].Header("Idempotency-Key-Fence").has_value());
  EXPECT_EQ(queries[2].Header("Idempotency-Key-Fence").value_or(""), "true");
  EXPECT_EQ(server.effects(), 0);
}

TEST(CliJournalTest, PruneDeletesResolvedIntentsOnly) {
  OrderService server(ServerOptions{});
  const std::string journal = JournalPath("prune");
  ASSERT_EQ(
      RunCli({"-d", "x", "--idempotency-key", "k-pruned", "--journal", journal, server.OrdersUrl()})
          .exit_code,
      0);
  CliRun pruned = RunCli({"reconcile", "--journal", journal, "--prune-older-than", "0s"});
  EXPECT_EQ(pruned.exit_code, 0) << pruned.err;
  // Pruned: the key may now be recorded for another request.
  CliRun reuse = RunCli(
      {"-d", "other", "--idempotency-key", "k-pruned", "--journal", journal, server.OrdersUrl()});
  EXPECT_EQ(reuse.exit_code, 0) << reuse.err;
}

TEST(CliJournalTest, KeyReusedWithAnotherBodyIsRefusedAcrossInvocations) {
  OrderService server(ServerOptions{});
  const std::string journal = JournalPath("reuse");
  ASSERT_EQ(
      RunCli({"-d", "a", "--idempotency-key", "k-reuse", "--journal", journal, server.OrdersUrl()})
          .exit_code,
      0);
  CliRun reuse =
      RunCli({"-d", "b", "--idempotency-key", "k-reuse", "--journal", journal, server.OrdersUrl()});
  EXPECT_EQ(reuse.exit_code, 64) << reuse.err;
  EXPECT_THAT(reuse.err, HasSubstr("idempotency_key"));
  EXPECT_EQ(server.orders_requests().size(), 1u);
}

TEST(CliJournalTest, JournalThatCannotBeOpenedExits74AndSendsNothing) {
  OrderService server(ServerOptions{});
  CliRun run = RunCli({"-d", "x", "--journal", "/nonexistent-dir/j.db", server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 74) << run.err;
  EXPECT_THAT(run.err, HasSubstr("--journal"));
  EXPECT_EQ(server.orders_requests().size(), 0u);
  CliRun reconcile = RunCli({"reconcile", "--journal", "/nonexistent-dir/j.db"});
  EXPECT_EQ(reconcile.exit_code, 74) << reconcile.err;
}

TEST(CliJournalTest, UnkeyedRequestIsNotJournaledAndSaysSo) {
  OrderService server(ServerOptions{});
  const std::string journal = JournalPath("unkeyed");
  CliRun run = RunCli({"--journal", journal, server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.err, HasSubstr("warning: --journal: unused"));
  CliRun reconcile = RunCli({"reconcile", "--journal", journal, "--older-than", "0s"});
  EXPECT_EQ(reconcile.exit_code, 0) << reconcile.err;
  EXPECT_EQ(reconcile.out, "");
}

// reconcile's status queries honour --http2-prior-knowledge: the status
// server speaks only h2c, and serves the key's record.
TEST(CliJournalTest, ReconcileQueriesAnH2cStatusServerWithPriorKnowledge) {
  if (NghttpdServer::Executable().empty()) {
    GTEST_SKIP() << "nghttpd is not installed (Debian package nghttp2-server)";
  }
  NghttpdServer status(NghttpdServer::Mode::kCleartext);
  ASSERT_TRUE(status.ok()) << status.error();
  std::ofstream(status.DocumentRoot() + "/k-h2") << R"({"order_id":7})";
  OrderService server(Scripted({CommitThen(Fault::kDrop)}));
  const std::string journal = JournalPath("h2");
  CliRun run = RunCli({"-d", "x", "--idempotency-key", "k-h2", "--max-attempts", "1", "--journal",
                       journal, server.OrdersUrl()});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  const std::string status_url = status.Url("/{key}");
  CliRun h1 =
      RunCli({"reconcile", "--journal", journal, "--older-than", "0s", "--status-url", status_url});
  EXPECT_EQ(h1.exit_code, 2) << h1.err;
  CliRun h2 = RunCli({"reconcile", "--journal", journal, "--older-than", "0s", "--status-url",
                      status_url, "--http2-prior-knowledge"});
  EXPECT_EQ(h2.exit_code, 0) << h2.err;
  std::vector<json> lines = JsonLines(h2.out);
  ASSERT_EQ(lines.size(), 1u) << h2.out;
  EXPECT_EQ(lines[0]["outcome"], "SUCCEEDED");
  EXPECT_EQ(lines[0]["resolved_by"], "status_query");
}

TEST(CliJournalTest, ReconcileBadInputExits64NamingTheFlag) {
  const std::string journal = JournalPath("bad");
  CliRun missing = RunCli({"reconcile"});
  EXPECT_EQ(missing.exit_code, 64);
  EXPECT_THAT(missing.err, HasSubstr("--journal"));
  CliRun age = RunCli({"reconcile", "--journal", journal, "--older-than", "soon"});
  EXPECT_EQ(age.exit_code, 64);
  EXPECT_THAT(age.err, HasSubstr("--older-than"));
  CliRun url = RunCli({"reconcile", "--journal", journal, "--status-url", "http://x/no-key"});
  EXPECT_EQ(url.exit_code, 64);
  EXPECT_THAT(url.err, HasSubstr("--status-url"));
  CliRun header = RunCli({"reconcile", "--journal", journal, "-H", "NoColon"});
  EXPECT_EQ(header.exit_code, 64);
  EXPECT_THAT(header.err, HasSubstr("--header"));
}

#ifdef SAFERETRY_CLI_TEST_POSTGRES
// --journal postgresql://...: the call is killed while its attempt hangs on a
// committed order; `saferetry reconcile` in another process, reading the
// same PostgreSQL journal, settles it SUCCEEDED by a status query, with
// exactly one order. (ctest runs these with the `postgres` fixture.)

// The test database as a libpq URI (the fixture writes key=value).
std::string PostgresUri() { return pg_test::PostgresUri(pg_test::Dsn()); }

absl::Status PgAdmin(const std::string& sql) {
  server::PostgresOptions pg;
  pg.conninfo = pg_test::Dsn();
  pg.max_connections = 1;
  auto db = server::OpenPostgresDatabase(pg);
  if (!db.ok()) return db.status();
  return (*db)->RunInTransaction(server::TransactionMode::kWrite,
                                 [&](server::Transaction& t) { return t.Execute(sql).status(); });
}

TEST(CliPostgresJournalTest, KillNineWhileTheAttemptHangsThenReconcileElsewhereSucceeds) {
  if (pg_test::Dsn().empty()) {
    if (pg_test::Required()) FAIL() << "SAFERETRY_REQUIRE_POSTGRES=1 but no database";
    GTEST_SKIP() << pg_test::SkipReason();
  }
  const std::string schema = "cli_journal_" + std::to_string(getpid());
  ASSERT_TRUE(PgAdmin("CREATE SCHEMA " + schema).ok());
  const std::string journal = PostgresUri();
  OrderService server(Scripted({CommitThen(Fault::kHang)}));
  Child cli({"-d", R"({"sku":"a"})", "--idempotency-key", "order-pg-kill-9", "--status-url",
             server.StatusUrl(), "--deadline", "1500ms", "--journal", journal, "--journal-schema",
             schema, server.OrdersUrl()});
  ASSERT_TRUE(WaitUntil([&] { return server.effects() == 1; }));
  ASSERT_TRUE(cli.KillNine());

  CliRun run;
  ASSERT_TRUE(WaitUntil(
      [&] {
        run = RunCli(
            {"reconcile", "--journal", journal, "--journal-schema", schema, "--older-than", "0s"});
        return run.out.find("\"outcome\"") != std::string::npos || run.exit_code != 0;
      },
      milliseconds(10000)));
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.err, HasSubstr("1 tried (1 resolved: 1 succeeded, 0 failed; 0 still unknown)"));
  std::vector<json> lines = JsonLines(run.out);
  ASSERT_EQ(lines.size(), 1u) << run.out;
  EXPECT_EQ(lines[0]["idempotency_key"], "order-pg-kill-9");
  EXPECT_EQ(lines[0]["outcome"], "SUCCEEDED");
  EXPECT_EQ(lines[0]["resolved_by"], "status_query");
  EXPECT_EQ(server.effects(), 1);
  EXPECT_EQ(server.orders_requests().size(), 1u);  // one POST, never resent
  EXPECT_EQ(server.status_requests().size(), 1u);

  // The journal is in the schema given, and the intent is resolved there.
  CliRun again =
      RunCli({"reconcile", "--journal", journal, "--journal-schema", schema, "--older-than", "0s"});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.out, "");
  // --journal-schema is for PostgreSQL only; a bad schema name is bad input to the journal.
  CliRun sqlite_schema =
      RunCli({"reconcile", "--journal", JournalPath("pg-schema"), "--journal-schema", schema});
  EXPECT_EQ(sqlite_schema.exit_code, 74);
  EXPECT_THAT(sqlite_schema.err, HasSubstr("--journal-schema: only for a PostgreSQL journal"));
  (void)PgAdmin("DROP SCHEMA " + schema + " CASCADE");
}
#endif  // SAFERETRY_CLI_TEST_POSTGRES

}  // namespace
}  // namespace saferetry

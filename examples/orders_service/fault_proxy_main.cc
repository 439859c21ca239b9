// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// saferetry-fault-proxy: a fault-injecting HTTP/1.1 proxy on loopback.
//
//   saferetry-fault-proxy --upstream-port 8080 --drop 0.2 --hang 0.05 --seed 7
//
// Repeat --upstream-port for several instances of a service: requests are
// then balanced over them round-robin, one instance per request.
//
// Prints "listening <port>" once bound, serves until SIGINT or SIGTERM, then
// prints its counters as one JSON line.

#include <signal.h>

#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_split.h"
#include "orders_service/duration_flag.h"
#include "orders_service/fault_proxy.h"

namespace {

using ::saferetry::example::FaultProxy;
using ::saferetry::example::ParseDurationFlag;
using ::saferetry::example::ParseFaultKind;
using ::saferetry::example::ProxyOptions;

int Run(int argc, char** argv) {
  ProxyOptions options;
  std::string delay = "200ms", hang_limit = "30s", idle = "30s", methods = "POST", script;
  std::vector<int> upstream_ports;
  CLI::App app{"Fault-injecting HTTP/1.1 proxy for loopback tests and demos"};
  app.add_option("--listen-host", options.listen_host)->capture_default_str();
  app.add_option("--listen-port", options.listen_port, "0 picks a free port")
      ->capture_default_str();
  app.add_option("--upstream-host", options.upstream_host)->capture_default_str();
  app.add_option("--upstream-port", upstream_ports,
                 "Service port; repeat for round-robin over several instances")
      ->required()
      ->allow_extra_args(false)
      ->check(CLI::Range(1, 65535));
  app.add_option("--reset", options.faults.reset_before_commit,
                 "Probability: reset the client before forwarding");
  app.add_option("--unavailable", options.faults.unavailable,
                 "Probability: answer 503 + Retry-After without forwarding");
  app.add_option("--drop", options.faults.drop_after_commit,
                 "Probability: forward, then reset the client instead of answering");
  app.add_option("--hang", options.faults.hang_after_commit,
                 "Probability: forward, then hold the answer until the client gives up");
  app.add_option("--delay", options.faults.delay, "Probability: wait --delay-for, then forward");
  app.add_option("--delay-for", delay, "Added delay (e.g. 200ms)")->capture_default_str();
  app.add_option("--retry-after", options.faults.retry_after_seconds,
                 "Retry-After seconds on injected 503s")
      ->capture_default_str();
  app.add_option("--hang-limit", hang_limit, "Longest hold of a hung answer")
      ->capture_default_str();
  app.add_option("--seed", options.faults.seed, "Seed of the fault draws")->capture_default_str();
  app.add_option("--methods", methods, "Comma-separated methods to fault; * for all")
      ->capture_default_str();
  app.add_option("--path-prefix", options.faults.path_prefix,
                 "Only fault targets with this prefix");
  app.add_option("--script", script,
                 "Comma-separated faults for the first matching requests "
                 "(none,delay,503,reset,drop,hang)");
  app.add_option("--max-connections", options.max_connections)->capture_default_str();
  app.add_option("--idle-timeout", idle)->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  for (auto [value, name, out] :
       {std::make_tuple(&delay, "delay-for", &options.faults.delay_duration),
        std::make_tuple(&hang_limit, "hang-limit", &options.faults.hang_limit),
        std::make_tuple(&idle, "idle-timeout", &options.idle_timeout)}) {
    auto d = ParseDurationFlag(*value, name);
    if (!d.ok()) {
      std::cerr << d.status().message() << "\n";
      return 2;
    }
    *out = *d;
  }
  if (upstream_ports.size() == 1) {
    options.upstream_port = upstream_ports.front();
  } else {
    options.upstream_ports = upstream_ports;
  }
  options.faults.methods.clear();
  if (methods != "*") {
    options.faults.methods = absl::StrSplit(methods, ',', absl::SkipEmpty());
  }
  for (const std::string& name :
       std::vector<std::string>(absl::StrSplit(script, ',', absl::SkipEmpty()))) {
    auto kind = ParseFaultKind(name);
    if (!kind.ok()) {
      std::cerr << kind.status().message() << "\n";
      return 2;
    }
    options.faults.script.push_back(*kind);
  }

  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto proxy = FaultProxy::Start(options);
  if (!proxy.ok()) {
    std::cerr << proxy.status().message() << "\n";
    return 2;
  }
  std::cout << "listening " << (*proxy)->port() << std::endl;
  int sig = 0;
  sigwait(&stop_signals, &sig);
  (*proxy)->Stop();
  const auto c = (*proxy)->counters();
  std::cout << "{\"connections\":" << c.connections << ",\"requests_seen\":" << c.requests_seen
            << ",\"requests_matched\":" << c.requests_matched << ",\"forwarded\":" << c.forwarded
            << ",\"delayed\":" << c.delayed << ",\"unavailable\":" << c.unavailable
            << ",\"reset_before_commit\":" << c.reset_before_commit
            << ",\"drop_after_commit\":" << c.drop_after_commit
            << ",\"hang_after_commit\":" << c.hang_after_commit
            << ",\"upstream_errors\":" << c.upstream_errors << ",\"sent_per_upstream\":[";
  for (std::size_t i = 0; i < c.sent_per_upstream.size(); ++i) {
    std::cout << (i == 0 ? "" : ",") << c.sent_per_upstream[i];
  }
  std::cout << "]}" << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Run(argc, argv); }

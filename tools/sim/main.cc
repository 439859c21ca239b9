// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// saferetry-sim: reproduce retry figures for a policy. See docs/simulator.md.
//
//   saferetry-sim --preset contention --sweep
//   saferetry-sim --preset brown-out --failure-rate 0.5 --json
//   saferetry-sim --preset outage --timeline-csv outage.csv --plot outage.png
//   saferetry-sim --preset tail --json
//
// Exit codes: 0 done, 64 bad flags (the message names the flag), 66 an
// unreadable --policy file, 73 an output file that cannot be written.

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "saferetry/version.h"
#include "tools/sim/policy_file.h"
#include "tools/sim/presets.h"

extern char** environ;

namespace {

using saferetry::sim::Row;

constexpr int kExitUsage = 64;
constexpr int kExitNoInput = 66;
constexpr int kExitCantCreate = 73;

int Usage(const std::string& message) {
  std::cerr << "saferetry-sim: " << message << "\n";
  return kExitUsage;
}

bool OnPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return false;
  for (absl::string_view dir : absl::StrSplit(path, ':')) {
    if (dir.empty()) continue;
    const std::string candidate = absl::StrCat(dir, "/", program);
    if (::access(candidate.c_str(), X_OK) == 0) return true;
  }
  return false;
}

std::string Cell(const nlohmann::ordered_json& v) {
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

// A plain table; a new header whenever the columns change (brown-out has two
// kinds of rows).
void PrintTable(const std::vector<Row>& rows, std::ostream& out) {
  std::vector<std::string> columns;
  for (const Row& row : rows) {
    std::vector<std::string> keys;
    for (auto it = row.begin(); it != row.end(); ++it) keys.push_back(it.key());
    if (keys != columns) {
      columns = keys;
      out << "\n";
      for (std::size_t i = 0; i < columns.size(); ++i) out << (i ? "\t" : "") << columns[i];
      out << "\n";
    }
    std::size_t i = 0;
    for (auto it = row.begin(); it != row.end(); ++it, ++i) out << (i ? "\t" : "") << Cell(*it);
    out << "\n";
  }
}

bool WriteTimelineCsv(const std::string& file,
                      const std::vector<saferetry::sim::TimelineBucket>& timeline,
                      saferetry::Duration bucket) {
  std::ofstream out(file);
  if (!out) return false;
  out << "t_s,attempts,status_queries,arrivals,succeeded,rejected\n";
  const double width = std::chrono::duration<double>(bucket).count();
  for (std::size_t i = 0; i < timeline.size(); ++i) {
    const auto& b = timeline[i];
    out << static_cast<double>(i) * width << ',' << b.attempts << ',' << b.status_queries << ','
        << b.arrivals << ',' << b.succeeded << ',' << b.rejected << '\n';
  }
  return static_cast<bool>(out);
}

// Runs gnuplot on a small script; no shell is involved.
bool Plot(const std::string& csv, const std::string& png, const std::string& title) {
  const std::string script = png + ".gp";
  {
    std::ofstream gp(script);
    if (!gp) return false;
    gp << "set terminal png size 1000,500\n"
       << "set output '" << png << "'\n"
       << "set datafile separator ','\n"
       << "set key autotitle columnhead\n"
       << "set title '" << title << "'\n"
       << "set xlabel 'simulated time (s)'\n"
       << "set ylabel 'per bucket'\n"
       << "plot '" << csv << "' using 1:2 with lines, '' using 1:3 with lines, "
       << "'' using 1:5 with lines, '' using 1:6 with lines\n";
  }
  char arg0[] = "gnuplot";
  std::vector<char> arg1(script.begin(), script.end());
  arg1.push_back('\0');
  char* argv[] = {arg0, arg1.data(), nullptr};
  pid_t pid = 0;
  if (posix_spawnp(&pid, "gnuplot", nullptr, nullptr, argv, environ) != 0) return false;
  int status = 0;
  if (::waitpid(pid, &status, 0) < 0) return false;
  std::remove(script.c_str());
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"saferetry-sim: a deterministic discrete-event simulation of retry policies"};
  app.set_version_flag("--version", "saferetry-sim " SAFERETRY_VERSION_STRING,
                       "Print the version (saferetry-sim MAJOR.MINOR.PATCH) and exit");
  std::string preset;
  bool sweep = false;
  bool breaker = false;
  int clients = 0;
  int trials = 0;
  std::uint64_t seed = 1;
  std::string policy_file;
  std::string jitter;
  double failure_rate = -1;
  double loss_rate = -1;
  double slow_rate = -1;
  double load_factor = -1;
  double tail_rate = -1;
  double tail_factor = -1;
  double hedge_delay_ms = -1;
  std::string client;
  double rate = 1000;
  double seconds = 0;
  bool json = false;
  std::string timeline_csv;
  std::string plot;

  app.add_option("--preset", preset,
                 "contention | brown-out | lost-responses | hang | outage | tail")
      ->required();
  app.add_flag("--sweep", sweep, "Run the whole figure instead of one point");
  auto* clients_opt =
      app.add_option("--clients", clients, "contention: clients that start together");
  app.add_option("--trials", trials,
                 "Trials per point, averaged (contention default 100, others 1)");
  app.add_option("--seed", seed, "Seed of the first trial (trial i uses seed + i)");
  app.add_option("--policy", policy_file, "JSON policy file for the saferetry client");
  auto* jitter_opt = app.add_option("--jitter", jitter, "none | full | equal | decorrelated");
  auto* failure_opt =
      app.add_option("--failure-rate", failure_rate, "Independent failure rate, 0..1");
  auto* loss_opt = app.add_option(
      "--loss-rate", loss_rate,
      "Lost-response rate, 0..1 (lost-responses: a reset; hang: hangs until the attempt timeout)");
  auto* slow_opt = app.add_option(
      "--slow-rate", slow_rate, "lost-responses, hang: slow-commit rate, 0..1 (hang default 0.02)");
  auto* load_opt = app.add_option("--load-factor", load_factor,
                                  "brown-out overload: offered load / server capacity");
  auto* tail_rate_opt =
      app.add_option("--tail-rate", tail_rate,
                     "tail: fraction of responses in the slow tail, 0..1 (default 0.02)");
  auto* tail_factor_opt =
      app.add_option("--tail-factor", tail_factor,
                     "tail: how much slower a tail response is, 1..10000 (default 100)");
  auto* hedge_delay_opt = app.add_option(
      "--hedge-delay-ms", hedge_delay_ms,
      "tail: fixed hedge delay in milliseconds (default: the observed p95 attempt latency)");
  auto* client_opt = app.add_option(
      "--client", client,
      "no-retry | retries3 | token-bucket | ratio-budget | saferetry | careless | no-jitter-10 | "
      "full-jitter-10");
  app.add_option("--rate", rate, "Open-loop arrivals, calls per second (default 1000)");
  app.add_option("--seconds", seconds, "Arrival window in simulated seconds (preset default)");
  app.add_flag("--breaker", breaker,
               "outage: run each client without and with a circuit breaker (the policy's, else "
               "the defaults)");
  app.add_flag("--json", json, "Print one JSON object");
  app.add_option("--timeline-csv", timeline_csv, "Write attempts per time bucket (single point)");
  app.add_option("--plot", plot, "Plot the timeline to a PNG with gnuplot (single point)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return Usage(e.what());
  }

  saferetry::sim::PresetOptions o;
  o.preset = preset;
  o.sweep = sweep;
  if (*clients_opt) o.clients = clients;
  o.trials = trials;
  if (trials < 0 || (app.count("--trials") > 0 && trials == 0)) {
    return Usage(absl::StrCat("--trials: must be >= 1, got ", trials));
  }
  o.seed = seed;
  if (!policy_file.empty()) {
    if (::access(policy_file.c_str(), R_OK) != 0) {
      std::cerr << "saferetry-sim: --policy: cannot read " << policy_file << "\n";
      return kExitNoInput;
    }
    auto base = saferetry::sim::LoadBasePolicy(policy_file);
    if (!base.ok()) {
      std::cerr << "saferetry-sim: --policy: " << base.status().message() << "\n";
      return base.status().code() == absl::StatusCode::kInvalidArgument ? kExitUsage : kExitNoInput;
    }
    o.policy = *std::move(base);
  }
  if (*jitter_opt) {
    saferetry::JitterKind kind;
    if (!saferetry::ParseJitterKind(jitter, &kind)) {
      return Usage(absl::StrCat("--jitter: unknown kind \"", jitter,
                                "\" (none, full, equal, decorrelated)"));
    }
    o.jitter = kind;
    o.policy.backoff.jitter = kind;
  }
  if (*failure_opt) o.failure_rate = failure_rate;
  if (*loss_opt) o.loss_rate = loss_rate;
  if (*slow_opt) o.slow_rate = slow_rate;
  if (*load_opt) o.load_factor = load_factor;
  if (*tail_rate_opt) o.tail_rate = tail_rate;
  if (*tail_factor_opt) o.tail_factor = tail_factor;
  if (*hedge_delay_opt) o.hedge_delay_ms = hedge_delay_ms;
  if (*client_opt) {
    saferetry::sim::ClientVariant v;
    if (!saferetry::sim::ParseClientVariant(client, &v)) {
      return Usage(absl::StrCat("--client: unknown client \"", client, "\""));
    }
    o.client = v;
  }
  o.rate = rate;
  o.seconds = seconds;
  o.breaker = breaker;
  if ((!timeline_csv.empty() || !plot.empty()) && (sweep || preset == "contention")) {
    return Usage(absl::StrCat(timeline_csv.empty() ? "--plot" : "--timeline-csv",
                              ": needs a single point of a call preset (drop --sweep; not "
                              "contention)"));
  }
  std::vector<saferetry::sim::TimelineBucket> timeline;
  saferetry::Duration bucket{0};
  o.timeline = &timeline;
  o.timeline_bucket = &bucket;

  absl::StatusOr<std::vector<Row>> rows = saferetry::sim::RunPreset(o);
  if (!rows.ok()) return Usage(std::string(rows.status().message()));

  if (json) {
    nlohmann::ordered_json out;
    out["preset"] = preset;
    out["seed"] = seed;
    out["policy"] = o.policy.source;
    if (rows->size() == 1 && !sweep) {
      for (auto it = rows->front().begin(); it != rows->front().end(); ++it) out[it.key()] = *it;
    } else {
      out["points"] = *rows;
    }
    std::cout << out.dump() << "\n";
  } else {
    std::cout << "saferetry-sim --preset " << preset << ": "
              << saferetry::sim::PresetDescription(preset) << "\n"
              << "seed " << seed << ", policy: " << o.policy.source << "\n";
    PrintTable(*rows, std::cout);
  }

  std::string csv = timeline_csv;
  if (!plot.empty() && csv.empty()) csv = plot + ".csv";
  if (!csv.empty()) {
    if (!WriteTimelineCsv(csv, timeline, bucket)) {
      std::cerr << "saferetry-sim: --timeline-csv: cannot write " << csv << "\n";
      return kExitCantCreate;
    }
  }
  if (!plot.empty()) {
    if (!OnPath("gnuplot")) {
      std::cerr << "saferetry-sim: --plot: gnuplot is not on PATH; the timeline is in " << csv
                << "\n";
    } else if (!Plot(csv, plot, absl::StrCat("saferetry-sim ", preset))) {
      std::cerr << "saferetry-sim: --plot: gnuplot failed to write " << plot << "\n";
      return kExitCantCreate;
    }
    if (timeline_csv.empty() && OnPath("gnuplot")) std::remove(csv.c_str());
  }
  return 0;
}

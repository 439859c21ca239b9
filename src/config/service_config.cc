// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// A whole gRPC service config: which method config applies to the method
// named in LoadOptions (gRPC's matching: exact name, then service, then the
// default), and what of it has an HTTP meaning.

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>

#include "config/config_internal.h"

namespace saferetry {
namespace config_internal {
namespace {

// Does method config `mc`'s name list match `service`/`method`? Returns the
// match strength: 3 exact, 2 service-wide, 1 default, 0 none.
int MatchStrength(const json& names, std::string_view service, std::string_view method) {
  int best = 0;
  if (!names.is_array()) return 0;
  for (const json& n : names) {
    if (!n.is_object()) continue;
    const std::string s =
        n.contains("service") && n["service"].is_string() ? n["service"].get<std::string>() : "";
    const std::string m =
        n.contains("method") && n["method"].is_string() ? n["method"].get<std::string>() : "";
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
  if (!names.is_array())
    return Expected(path, "an array of {\"service\", \"method\"} objects", names);
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

}  // namespace

absl::Status LoadServiceConfig(const json& doc, const LoadOptions& options, Loader& loader) {
  Policy& policy = *loader.policy;
  SAFERETRY_RETURN_IF_ERROR(CheckKeys(doc, "$",
                                      {"methodConfig", "retryThrottling", "loadBalancingPolicy",
                                       "loadBalancingConfig", "healthCheckConfig", "saferetry"}));
  for (std::string_view ignored :
       {"loadBalancingPolicy", "loadBalancingConfig", "healthCheckConfig"}) {
    if (doc.contains(ignored)) {
      loader.Warn(Cat(Child("$", ignored), ": ignored (no HTTP meaning)"));
    }
  }
  const json& configs = doc["methodConfig"];
  if (!configs.is_array()) return Expected("$.methodConfig", "an array", configs);
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const std::string p = Index("$.methodConfig", i);
    SAFERETRY_RETURN_IF_ERROR(ReadObject(configs[i], p));
    SAFERETRY_RETURN_IF_ERROR(
        CheckKeys(configs[i], p,
                  {"name", "waitForReady", "timeout", "maxRequestMessageBytes",
                   "maxResponseMessageBytes", "retryPolicy", "hedgingPolicy"}));
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
      const int m =
          configs[i].contains("name") ? MatchStrength(configs[i]["name"], service, method) : 0;
      if (m > best) {
        best = m;
        chosen = i;
      }
    }
    if (best == 0) {
      return Invalid("$.methodConfig", Cat("no method config matches \"", options.method, "\""));
    }
  }

  const json& mc = configs[chosen];
  const std::string p = Index("$.methodConfig", chosen);
  for (std::string_view ignored :
       {"waitForReady", "maxRequestMessageBytes", "maxResponseMessageBytes"}) {
    if (mc.contains(ignored)) {
      loader.Warn(Cat(Child(p, ignored), ": ignored (no HTTP meaning)"));
    }
  }
  if (mc.contains("timeout")) {
    SAFERETRY_RETURN_IF_ERROR(
        ReadDuration(mc["timeout"], Child(p, "timeout"), false, &policy.timeout));
  }
  if (mc.contains("retryPolicy") && mc.contains("hedgingPolicy")) {
    return Invalid(Child(p, "hedgingPolicy"),
                   Cat("cannot be combined with ", Child(p, "retryPolicy"),
                       " (one or the other, as in gRPC)"));
  }
  if (mc.contains("retryPolicy")) {
    SAFERETRY_RETURN_IF_ERROR(loader.RetryPolicy(mc["retryPolicy"], Child(p, "retryPolicy"), true));
  } else if (mc.contains("hedgingPolicy")) {
    SAFERETRY_RETURN_IF_ERROR(
        loader.HedgingPolicy(mc["hedgingPolicy"], Child(p, "hedgingPolicy"), true));
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

}  // namespace config_internal
}  // namespace saferetry

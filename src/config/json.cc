// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Value formats and typed readers of the JSON policy files. Each reader
// checks the type before it touches the value.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/ascii.h"
#include "config/config_internal.h"
#include "saferetry/request.h"

namespace saferetry {
namespace config_internal {
namespace {

std::string Join(const std::vector<std::string_view>& parts, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out.append(sep);
    out.append(parts[i]);
  }
  return out;
}

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

}  // namespace

std::string Child(const std::string& path, std::string_view key) {
  if (IsIdentifier(key)) return Cat(path, ".", key);
  return Cat(path, "[", json(std::string(key)).dump(-1, ' ', false, json::error_handler_t::replace),
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

absl::Status ReadObject(const json& j, const std::string& path) {
  if (!j.is_object()) return Expected(path, "an object", j);
  return absl::OkStatus();
}

absl::Status CheckKeys(const json& j, const std::string& path,
                       const std::vector<std::string_view>& allowed) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (std::find(allowed.begin(), allowed.end(), it.key()) == allowed.end()) {
      return Invalid(Child(path, it.key()),
                     Cat("unknown field (expected one of ", Join(allowed, ", "), ")"));
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

}  // namespace config_internal
}  // namespace saferetry

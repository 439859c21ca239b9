// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "saferetry/trace_context.h"

#include <algorithm>

namespace saferetry {
namespace {

constexpr char kHex[] = "0123456789abcdef";

// Lower-case hex only: the specification rejects upper case.
int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

bool ReadHex(std::string_view text, std::uint8_t* out) {
  for (std::size_t i = 0; i < text.size(); i += 2) {
    const int hi = HexValue(text[i]);
    const int lo = HexValue(text[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i / 2] = static_cast<std::uint8_t>(hi * 16 + lo);
  }
  return true;
}

void WriteHex(const std::uint8_t* in, std::size_t n, char* out) {
  for (std::size_t i = 0; i < n; ++i) {
    out[2 * i] = kHex[in[i] >> 4];
    out[2 * i + 1] = kHex[in[i] & 0xf];
  }
}

bool IsOws(char c) { return c == ' ' || c == '\t'; }

std::string_view TrimOws(std::string_view v) {
  while (!v.empty() && IsOws(v.front())) v.remove_prefix(1);
  while (!v.empty() && IsOws(v.back())) v.remove_suffix(1);
  return v;
}

bool IsLcAlpha(char c) { return c >= 'a' && c <= 'z'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsKeyChar(char c) {
  return IsLcAlpha(c) || IsDigit(c) || c == '_' || c == '-' || c == '*' || c == '/';
}
// nblk-chr: printable ASCII except ',' and '='.
bool IsValueNonBlank(char c) { return c >= 0x21 && c <= 0x7e && c != ',' && c != '='; }

// simple-key = lcalpha 0*255(keychar);
// multi-tenant-key = (lcalpha / DIGIT) 0*240(keychar) "@" lcalpha 0*13(keychar).
bool IsValidKey(std::string_view key) {
  const std::size_t at = key.find('@');
  if (at == std::string_view::npos) {
    if (key.empty() || key.size() > 256 || !IsLcAlpha(key[0])) return false;
    return std::all_of(key.begin() + 1, key.end(), IsKeyChar);
  }
  const std::string_view tenant = key.substr(0, at);
  const std::string_view system = key.substr(at + 1);
  if (tenant.empty() || tenant.size() > 241 || !(IsLcAlpha(tenant[0]) || IsDigit(tenant[0]))) {
    return false;
  }
  if (system.empty() || system.size() > 14 || !IsLcAlpha(system[0])) return false;
  return std::all_of(tenant.begin() + 1, tenant.end(), IsKeyChar) &&
         std::all_of(system.begin() + 1, system.end(), IsKeyChar);
}

// value = 0*255(chr) nblk-chr; chr = SP / nblk-chr.
bool IsValidValue(std::string_view value) {
  if (value.empty() || value.size() > 256 || !IsValueNonBlank(value.back())) return false;
  return std::all_of(value.begin(), value.end(),
                     [](char c) { return c == ' ' || IsValueNonBlank(c); });
}

}  // namespace

std::optional<TraceParent> ParseTraceParent(std::string_view value) {
  value = TrimOws(value);
  if (value.size() < kTraceParentLength) return std::nullopt;
  if (value[2] != '-' || value[35] != '-' || value[52] != '-') return std::nullopt;
  TraceParent p;
  if (!ReadHex(value.substr(0, 2), &p.version) || p.version == 0xff) return std::nullopt;
  // Version 00 is exactly 55 characters; a later version may append fields
  // after a '-', which a version-00 reader ignores.
  if (p.version == 0 && value.size() != kTraceParentLength) return std::nullopt;
  if (value.size() > kTraceParentLength && value[kTraceParentLength] != '-') return std::nullopt;
  if (!ReadHex(value.substr(3, 32), p.trace_id.data()) ||
      !ReadHex(value.substr(36, 16), p.parent_id.data()) ||
      !ReadHex(value.substr(53, 2), &p.flags)) {
    return std::nullopt;
  }
  if (!IsValidTraceId(p.trace_id) || !IsValidSpanId(p.parent_id)) return std::nullopt;
  return p;
}

void FormatTraceParent(const TraceParent& parent, std::array<char, kTraceParentLength>& out) {
  char* o = out.data();
  o[0] = '0';
  o[1] = '0';
  o[2] = '-';
  WriteHex(parent.trace_id.data(), parent.trace_id.size(), o + 3);
  o[35] = '-';
  WriteHex(parent.parent_id.data(), parent.parent_id.size(), o + 36);
  o[52] = '-';
  WriteHex(&parent.flags, 1, o + 53);
}

std::string FormatTraceParent(const TraceParent& parent) {
  std::array<char, kTraceParentLength> buf;
  FormatTraceParent(parent, buf);
  return std::string(buf.data(), buf.size());
}

bool IsValidTraceId(const TraceId& id) {
  return std::any_of(id.begin(), id.end(), [](std::uint8_t b) { return b != 0; });
}
bool IsValidSpanId(const SpanId& id) {
  return std::any_of(id.begin(), id.end(), [](std::uint8_t b) { return b != 0; });
}

std::string TraceIdHex(const TraceId& id) {
  std::string s(2 * id.size(), '0');
  WriteHex(id.data(), id.size(), s.data());
  return s;
}
std::string SpanIdHex(const SpanId& id) {
  std::string s(2 * id.size(), '0');
  WriteHex(id.data(), id.size(), s.data());
  return s;
}

std::optional<std::string> SanitizeTraceState(std::string_view value) {
  std::array<std::string_view, kMaxTraceStateMembers> members;
  std::size_t count = 0;
  std::size_t length = 0;  // without optional white space, commas included
  std::string_view rest = value;
  for (;;) {
    const std::size_t comma = rest.find(',');
    const std::string_view member = TrimOws(rest.substr(0, comma));
    if (!member.empty()) {
      const std::size_t eq = member.find('=');
      if (eq == std::string_view::npos || !IsValidKey(member.substr(0, eq)) ||
          !IsValidValue(member.substr(eq + 1))) {
        return std::nullopt;
      }
      if (count == kMaxTraceStateMembers) return std::nullopt;
      const std::string_view key = member.substr(0, eq + 1);  // with '=': a whole key
      for (std::size_t i = 0; i < count; ++i) {
        if (members[i].substr(0, key.size()) == key) return std::nullopt;  // duplicate key
      }
      length += member.size() + (count > 0 ? 1 : 0);
      members[count++] = member;
    }
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  if (count == 0) return std::nullopt;
  if (length <= kMaxTraceStateLength) return std::string(value);

  // Too long: members over 128 characters go first, from the end, then any
  // member from the end, until it fits.
  std::array<bool, kMaxTraceStateMembers> kept;
  kept.fill(true);
  std::size_t kept_count = count;
  auto drop = [&](std::size_t i) {
    kept[i] = false;
    --kept_count;
    length -= members[i].size() + (kept_count > 0 ? 1 : 0);
  };
  for (std::size_t i = count; i-- > 0 && length > kMaxTraceStateLength;) {
    if (members[i].size() > 128) drop(i);
  }
  for (std::size_t i = count; i-- > 0 && length > kMaxTraceStateLength;) {
    if (kept[i]) drop(i);
  }
  if (kept_count == 0) return std::nullopt;
  std::string out;
  out.reserve(length);
  for (std::size_t i = 0; i < count; ++i) {
    if (!kept[i]) continue;
    if (!out.empty()) out.push_back(',');
    out.append(members[i]);
  }
  return out;
}

}  // namespace saferetry

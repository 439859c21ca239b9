// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Not API. A call validates its request once, when it starts
// (`ValidateRequest`), and builds the headers it adds from a validated policy
// and key. While one of its sends runs, `ValidatedSend` marks that request and
// those headers on the sending thread, and saferetry's own transports do not
// check them a second time (`CheckSend`). A transport called directly, or for
// anything else (a status query, a resolve's rebuilt request, a redirect),
// checks as before: the mark is set only by the drivers, never through the
// API, and covers exactly the objects it names.
#ifndef SAFERETRY_SRC_COMMON_VALIDATED_SEND_H_
#define SAFERETRY_SRC_COMMON_VALIDATED_SEND_H_

#include <cstddef>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "saferetry/request.h"

namespace saferetry {
namespace internal {

/// Marks `request` and `extra` as validated by the call for this thread,
/// until destroyed. Nests (restores the previous mark).
// The sending thread's mark: the request and headers of the send it is in.
// No member initialisers: a thread's mark starts zeroed, so the compiler
// knows it needs no initialisation and reads it without a call.
struct SendMark {
  const Request* request;
  const HeaderRef* extra;
  std::size_t count;
};
extern thread_local SendMark t_send_mark;

class ValidatedSend {
 public:
  ValidatedSend(const Request& request, HeaderRefs extra) : previous_(t_send_mark) {
    t_send_mark = {&request, extra.data(), extra.size()};
  }
  ~ValidatedSend() { t_send_mark = previous_; }
  ValidatedSend(const ValidatedSend&) = delete;
  ValidatedSend& operator=(const ValidatedSend&) = delete;

  /// Whether this thread is inside a `ValidatedSend` of exactly these
  /// objects: the same request object, the same header array and count.
  static bool Covers(const Request& request, HeaderRefs extra) {
    const SendMark& m = t_send_mark;
    return m.request == &request && m.extra == extra.data() && m.count == extra.size();
  }

 private:
  SendMark previous_;  // restored when the send is over (sends may nest)
};

/// Derived from by saferetry's own transports, the only ones that read the
/// mark (`CheckSend`). A driver finds out once, when it is made, whether its
/// transport is one (`ReadsSendMarks`), and marks sends only then: for any
/// other transport the mark would be a few stores and loads per send for
/// nothing.
class SendMarkReader {
 public:
  SendMarkReader() = default;
  SendMarkReader(const SendMarkReader&) = default;
  SendMarkReader& operator=(const SendMarkReader&) = default;

 protected:
  virtual ~SendMarkReader() = default;
};

/// Whether `transport` (a `Transport` or an `AsyncTransport`; may be null)
/// reads the mark: whether it is a `SendMarkReader`.
template <typename T>
bool ReadsSendMarks(const T* transport) {
  return dynamic_cast<const SendMarkReader*>(transport) != nullptr;
}

/// Returns `send()`, run with `request` and `extra` marked (`ValidatedSend`)
/// when `mark` is true: the drivers' one way to mark a send. `mark`: the
/// driver's transport reads the marks (`ReadsSendMarks`) and this send is of
/// the request its call validated.
template <typename Send>
decltype(auto) SendMarked(bool mark, const Request& request, HeaderRefs extra, Send&& send) {
  std::optional<ValidatedSend> validated;
  if (mark) validated.emplace(request, extra);
  return std::forward<Send>(send)();
}

/// A transport's check of what it was asked to send: nothing when the call
/// validated it (`ValidatedSend::Covers`), else `ValidateRequest(request)`
/// and each added header (errors name `extra_headers[i]`).
absl::Status CheckSend(const Request& request, HeaderRefs extra);

}  // namespace internal
}  // namespace saferetry

#endif  // SAFERETRY_SRC_COMMON_VALIDATED_SEND_H_

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// Not API: what tests reach inside an AsyncClient with.

#ifndef SAFERETRY_SRC_CALL_ASYNC_CLIENT_PEER_H_
#define SAFERETRY_SRC_CALL_ASYNC_CLIENT_PEER_H_

#include "saferetry/async_client.h"

namespace saferetry {
namespace internal {

class AsyncClientPeer {
 public:
  /// The next call the client accepts gets the id `next`, the ones after it
  /// count up from there. Lets a test run calls whose ids are too large for
  /// the packed form of a send's callback (2^48 and above). Call it before
  /// any call is accepted.
  static void StartCallIdsAt(AsyncClient& client, AsyncClient::CallId next);
};

}  // namespace internal
}  // namespace saferetry

#endif  // SAFERETRY_SRC_CALL_ASYNC_CLIENT_PEER_H_

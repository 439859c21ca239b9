// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
//
// The installed saferetry::asio component: the Asio adapter runs a posted
// task and two timers due at the same time, in the order they were added.

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "saferetry/asio_event_loop.h"

int main() {
  asio::io_context io;
  auto loop = std::make_shared<saferetry::AsioEventLoop>(io);
  std::string ran;
  loop->Post([&] {
    ran += "p";
    loop->AddTimer(std::chrono::milliseconds(1), [&] { ran += "a"; });
    loop->AddTimer(std::chrono::milliseconds(1), [&] { ran += "b"; });
  });
  io.run();
  if (ran != "pab") {
    std::fprintf(stderr, "asio consumer: ran \"%s\", want \"pab\"\n", ran.c_str());
    return 1;
  }
  std::printf("asio consumer: ok\n");
  return 0;
}

// Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.

#include "nghttpd_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "loopback_server.h"

namespace saferetry {
namespace testkit {
namespace {

bool Shell(const std::string& command) { return std::system(command.c_str()) == 0; }

bool Accepts(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool up = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return up;
}

bool Exited(pid_t pid) { return ::waitpid(pid, nullptr, WNOHANG) == pid; }

}  // namespace

std::string NghttpdServer::Executable() {
  if (::access("/usr/sbin/nghttpd", X_OK) == 0) return "/usr/sbin/nghttpd";
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    std::size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::string candidate = dirs.substr(start, end - start) + "/nghttpd";
    if (end > start && ::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

NghttpdServer::NghttpdServer(Mode mode) : mode_(mode) {
  const std::string exe = Executable();
  if (exe.empty()) {
    error_ = "nghttpd is not installed (Debian package nghttp2-server)";
    return;
  }
  char dir_template[] = "/tmp/saferetry-h2-XXXXXX";
  const char* made = ::mkdtemp(dir_template);
  if (made == nullptr) {
    error_ = "mkdtemp failed";
    return;
  }
  dir_ = made;
  const std::string d = dir_;
  if (!Shell("mkdir " + d + "/htdocs")) {
    error_ = "cannot make the document root";
    return;
  }
  std::ofstream(d + "/htdocs/hello.txt") << HelloBody();
  if (mode == Mode::kTls) {
    const std::string q = " > /dev/null 2>&1";
    const bool made_ca =
        Shell("command -v openssl > /dev/null") &&
        Shell("openssl req -x509 -newkey rsa:2048 -nodes -keyout " + d + "/ca.key -out " + d +
              "/ca.pem -days 2 -subj '/CN=saferetry h2 test CA'" + q) &&
        Shell("openssl req -newkey rsa:2048 -nodes -keyout " + d + "/srv.key -out " + d +
              "/srv.csr -subj '/CN=127.0.0.1'" + q) &&
        Shell("printf 'subjectAltName=IP:127.0.0.1\\n' > " + d + "/ext") &&
        Shell("openssl x509 -req -in " + d + "/srv.csr -CA " + d + "/ca.pem -CAkey " + d +
              "/ca.key -CAcreateserial -out " + d + "/srv.pem -days 2 -extfile " + d + "/ext" + q);
    if (!made_ca) {
      error_ = "openssl could not make the test CA (is openssl installed?)";
      return;
    }
  }
  for (int attempt = 0; attempt < 5 && !ok_; ++attempt) {
    ok_ = Start(exe, UnusedLoopbackPort());
  }
  if (!ok_) error_ = "nghttpd did not start on a free loopback port in 5 tries";
}

bool NghttpdServer::Start(const std::string& exe, int port) {
  const std::string port_text = std::to_string(port);
  const std::string htdocs = "--htdocs=" + dir_ + "/htdocs";
  const std::string key = dir_ + "/srv.key", cert = dir_ + "/srv.pem";
  pid_ = ::fork();
  if (pid_ < 0) return false;
  if (pid_ == 0) {
    const int null_fd = ::open("/dev/null", O_RDWR);
    if (null_fd >= 0) {
      ::dup2(null_fd, 0);
      ::dup2(null_fd, 1);
      ::dup2(null_fd, 2);
    }
    if (mode_ == Mode::kCleartext) {
      ::execl(exe.c_str(), "nghttpd", "--address=127.0.0.1", "--no-tls", "--echo-upload",
              htdocs.c_str(), port_text.c_str(), static_cast<char*>(nullptr));
    } else {
      ::execl(exe.c_str(), "nghttpd", "--address=127.0.0.1", "--echo-upload", htdocs.c_str(),
              port_text.c_str(), key.c_str(), cert.c_str(), static_cast<char*>(nullptr));
    }
    ::_exit(127);
  }
  // Up when it accepts, and still running a moment later (a port taken by
  // another process accepts too, while nghttpd exits failing to bind).
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < end) {
    if (Exited(pid_)) break;
    if (Accepts(port)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (Exited(pid_)) break;
      port_ = port;
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!Exited(pid_)) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  pid_ = -1;
  return false;
}

NghttpdServer::~NghttpdServer() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  if (!dir_.empty()) Shell("rm -rf " + dir_);
}

std::string NghttpdServer::Url(std::string_view path) const {
  return std::string(mode_ == Mode::kTls ? "https" : "http") +
         "://127.0.0.1:" + std::to_string(port_) + std::string(path);
}

}  // namespace testkit
}  // namespace saferetry

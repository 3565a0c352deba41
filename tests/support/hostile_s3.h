// A hostile S3 server for tests (tests/support/hostile_s3.py), started on a
// free loopback port for one test and killed by its PID when the test ends.
// Honest until told otherwise: Set("ignore_prefix=1"), Set("missing=..."),
// Set("silent=1"), ... (the script's header lists the faults).
#ifndef CKPT_TESTS_SUPPORT_HOSTILE_S3_H_
#define CKPT_TESTS_SUPPORT_HOSTILE_S3_H_

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "util/strings.h"

#ifndef HOSTILE_S3_SCRIPT
#error "HOSTILE_S3_SCRIPT must name tests/support/hostile_s3.py"
#endif

extern char** environ;

namespace ckpt::testing {

class HostileS3 {
 public:
  /// Starts the server; `dir` holds its port file.
  explicit HostileS3(const std::string& dir) {
    // Any credentials do: the server does not check signatures.
    setenv("AWS_ACCESS_KEY_ID", "hostile", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "hostile-secret", 1);
    setenv("AWS_DEFAULT_REGION", "us-east-1", 1);
    const std::string port_file = dir + "/hostile-s3.port";
    const std::string log = dir + "/hostile-s3.log";
    const char* argv[] = {"/usr/bin/python3", HOSTILE_S3_SCRIPT, port_file.c_str(), nullptr};
    // Its output goes to a file: a server holding the test's stdout would
    // keep a pipe open after the test.
    posix_spawn_file_actions_t io;
    posix_spawn_file_actions_init(&io);
    posix_spawn_file_actions_addopen(&io, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&io, 1, 2);
    if (posix_spawn(&pid_, argv[0], &io, nullptr, const_cast<char**>(argv), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&io);
    for (int i = 0; i < 200 && pid_ > 0 && port_ == 0; ++i) {
      std::ifstream in(port_file);
      if (!(in >> port_)) std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
  }
  ~HostileS3() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  HostileS3(const HostileS3&) = delete;
  HostileS3& operator=(const HostileS3&) = delete;

  bool up() const { return port_ > 0; }
  int port() const { return port_; }
  std::string endpoint() const { return StrCat("http://127.0.0.1:", port_); }
  /// s3://BUCKET/PREFIX on this server; `extra` adds "&k=v" options.
  std::string Uri(const std::string& bucket_and_prefix, const std::string& extra = "") const {
    return StrCat("s3://", bucket_and_prefix, "?endpoint=", endpoint(), "&addressing=path", extra);
  }
  /// Faults, as "name=value" lines (an empty value turns one off).
  bool Set(const std::string& lines) {
    return Request("POST", "/__hostile__", lines).find(" 200 ") != std::string::npos;
  }
  /// Every key stored in `bucket`, sorted.
  std::vector<std::string> Keys(const std::string& bucket) {
    const std::string r = Request("GET", StrCat("/__hostile__/keys/", bucket), "");
    std::vector<std::string> keys;
    const size_t body = r.find("\r\n\r\n");
    if (body == std::string::npos) return keys;
    std::istringstream in(r.substr(body + 4));
    for (std::string line; std::getline(in, line);) keys.push_back(line);
    return keys;
  }
  /// S3 requests served so far (all methods).
  int Requests() {
    const std::string r = Request("GET", "/__hostile__", "");
    const size_t body = r.find("\r\n\r\n");
    int total = 0;
    if (body == std::string::npos) return -1;
    std::istringstream in(r.substr(body + 4));
    std::string method;
    for (int n; in >> method >> n;) total += n;
    return total;
  }

 private:
  std::string Request(const std::string& method, const std::string& path, const std::string& body) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port_));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::string out;
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
      timeval tv{10, 0};
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      const std::string req = StrCat(method, " ", path, " HTTP/1.0\r\nContent-Length: ", body.size(), "\r\n\r\n", body);
      if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
        char buf[4096];
        ssize_t n;
        while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
      }
    }
    close(fd);
    return out;
  }

  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace ckpt::testing

#endif  // CKPT_TESTS_SUPPORT_HOSTILE_S3_H_

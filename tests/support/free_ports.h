// Loopback ports for servers a test starts, and starts again on the same port.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <vector>

namespace ckpt::testing {

// `n` distinct free loopback ports, chosen below the kernel's ephemeral range
// (ip_local_port_range): a port there is never handed to another process's
// outgoing connection, so a server killed and started again on its port finds
// it free. Ephemeral ports, as bind(0) gives them, are taken by any connect()
// on the machine, and a test beside this one making connections (an object
// store's clients) takes them within seconds. Every socket stays bound until
// all are chosen, so two calls in a row are never handed the same port.
inline std::vector<int> FreePorts(int n) {
  int ephemeral_low = 32768;
  if (std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range"); range) range >> ephemeral_low;
  const int low = 10000, high = std::max(low + 1000, ephemeral_low);
  static thread_local std::mt19937 rng(
      static_cast<unsigned>(getpid()) * 2654435761u ^
      static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count()));
  std::vector<int> fds, ports;
  for (int tries = 0; static_cast<int>(ports.size()) < n && tries < 10000; ++tries) {
    const int port = low + static_cast<int>(rng() % static_cast<unsigned>(high - low));
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      close(fd);
      continue;
    }
    fds.push_back(fd);
    ports.push_back(port);
  }
  for (int fd : fds) close(fd);
  if (static_cast<int>(ports.size()) < n) {
    std::fprintf(stderr, "FreePorts: no %d free ports below %d\n", n, high);
    std::abort();
  }
  return ports;
}

inline int FreePort() { return FreePorts(1)[0]; }

}  // namespace ckpt::testing

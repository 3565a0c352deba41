// Test helper: a peer-memory holder as a process of its own, for tests that
// kill one while it streams.
//
//   peer_holder DIR SERVE_BYTES TOKEN [MAX_UNAUTHENTICATED [LISTEN]]
//
// LISTEN: HOST:PORT to listen on (default 127.0.0.1:0), for a holder on a
// host of a namespace cluster.
// Writes its endpoint to DIR/endpoint. Once it has taken on serving
// SERVE_BYTES bytes it writes the count to DIR/serving and stops itself
// (SIGSTOP: every thread at once, mid-stream), to be killed.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "ckpt/peer.h"

namespace {

bool WriteWhole(const std::string& path, const std::string& text) {
  {
    std::ofstream f(path + ".tmp");
    f << text;
    if (!f.good()) return false;
  }
  return std::rename((path + ".tmp").c_str(), path.c_str()) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || argc > 6) {
    std::fprintf(stderr, "usage: peer_holder DIR SERVE_BYTES TOKEN [MAX_UNAUTHENTICATED [LISTEN]]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const long long threshold = std::atoll(argv[2]);
  ckpt::PeerMemoryOptions o;
  o.token = argv[3];
  o.domain = "node-k";
  o.budget_bytes = int64_t{1} << 30;
  o.io_timeout_s = 5;
  if (argc >= 5) o.max_unauthenticated = std::atoi(argv[4]);
  if (argc == 6) o.listen = argv[5];
  o.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  auto m = ckpt::PeerMemory::Start(o);
  if (!m.ok()) {
    std::fprintf(stderr, "start: %s\n", std::string(m.status().message()).c_str());
    return 1;
  }
  if (!WriteWhole(dir + "/endpoint", (*m)->endpoint())) return 1;
  for (int i = 0; i < 60000; ++i) {  // a minute
    const int64_t served = (*m)->Stats().bytes_served;
    if (served >= threshold) {
      if (!WriteWhole(dir + "/serving", std::to_string(served))) return 1;
      raise(SIGSTOP);
      return 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::fprintf(stderr, "never asked to serve %lld bytes\n", threshold);
  return 1;
}

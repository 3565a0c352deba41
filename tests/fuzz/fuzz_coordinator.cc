// libFuzzer target: the coordinator's frame parser and message handlers,
// through a real socket. One coordinator serves the whole run; each input
// goes over a fresh connection, after a valid hello and join when its first
// byte is odd (so the handlers behind the join are reached), and the
// connection is then half-closed and drained. A crash or sanitizer report
// in the coordinator is a finding; garbage must only ever close the
// connection that sent it.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>

#include "ckpt/coordinator.h"
#include "coordinator/sim_member.h"

namespace {

constexpr char kToken[] = "fuzz-token";

ckpt::Coordinator* Server() {
  static std::unique_ptr<ckpt::Coordinator> server = [] {
    ckpt::CoordinatorOptions o;
    char dir[] = "/tmp/ckpt-fuzz-coordinator-XXXXXX";
    o.state_dir = mkdtemp(dir);
    o.token = kToken;
    o.min_nodes = o.max_nodes = 1;
    o.heartbeat_s = 0.05;
    o.dead_after = 1;
    o.join_timeout_s = 0.01;
    o.max_frame_bytes = 1 << 20;
    o.log = [](const std::string&) {};
    auto c = ckpt::Coordinator::Start(o);
    if (!c.ok()) __builtin_trap();
    return std::move(c).value();
  }();
  return server.get();
}

}  // namespace

// Starts the coordinator and lets OpenSSL set up its global state before
// the first input, so that neither counts as a leak of that input.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  Server();
  (void)ckpt::coord::Hmac(kToken, "warm-up");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ckpt::coord::SimMember m;
  if (!m.Connect(Server()->port())) return 0;
  if (size > 0 && (data[0] & 1) != 0) {
    if (!m.SendJoin(kToken, "fuzz")) return 0;
    ++data;
    --size;
  }
  m.SendRaw(std::string_view(reinterpret_cast<const char*>(data), size));
  m.CloseWrite();
  m.Drain(0.05);
  return 0;
}

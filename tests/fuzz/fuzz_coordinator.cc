// libFuzzer target: the coordinator's frame parser and message handlers,
// through a real socket. One coordinator serves the whole run; each input
// goes over a fresh connection. Its first byte chooses the state the rest
// is sent in:
//   bit 0: after a valid join (the handlers behind the join are reached)
//   bit 1: left open afterwards, among the last 12 such connections, so
//          the unauthenticated limit (4), the handshake deadline (0.2 s) and
//          the idle timeout (0.3 s) drop connections in every state
//   bit 2: closed abruptly instead of half-closed and drained
// A crash or sanitizer report in the coordinator is a finding; garbage must
// only ever close the connection that sent it.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "ckpt/coordinator.h"
#include "support/sim_member.h"

namespace {

constexpr char kToken[] = "fuzz-token-0123456789";

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
    o.max_unauthenticated = 4;
    o.handshake_timeout_s = 0.2;
    o.idle_timeout_s = 0.3;
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
  static std::deque<std::unique_ptr<ckpt::coord::SimMember>> held;
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  ++data;
  --size;
  auto m = std::make_unique<ckpt::coord::SimMember>();
  if (!m->Connect(Server()->port())) return 0;
  if ((mode & 1) != 0 && !m->SendJoin(kToken, "fuzz")) return 0;
  m->SendRaw(std::string_view(reinterpret_cast<const char*>(data), size));
  if ((mode & 2) != 0) {
    held.push_back(std::move(m));
    if (held.size() > 12) held.pop_front();
    return 0;
  }
  if ((mode & 4) == 0) {
    m->CloseWrite();
    m->Drain(0.05);
  }
  return 0;
}

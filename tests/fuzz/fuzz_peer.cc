// libFuzzer target: the peer-memory server (the memory level's data plane)
// through a real socket. One server serves the whole run, holding one file;
// each input goes over a fresh connection. Its first byte chooses how the
// rest is sent:
//   bit 0: after a valid authentication (the request handlers are reached)
//   bit 1: as frames made by the fuzzer from (op, length, payload) triples,
//          each with a correct header and checksum, so that the payload
//          decoders see arbitrary payloads; otherwise as raw bytes
// A crash or sanitizer report in the server is a finding; garbage must only
// ever close the connection that sent it.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>

#include "ckpt/peer.h"
#include "peer/peer_client.h"
#include "peer/peer_wire.h"
#include "util/bytes.h"

namespace {

constexpr char kToken[] = "fuzz-peer-token-0123456789";

ckpt::PeerMemory* Server() {
  static std::shared_ptr<ckpt::PeerMemory> server = [] {
    ckpt::PeerMemoryOptions o;
    o.token = kToken;
    o.domain = "fuzz";
    o.budget_bytes = 1 << 20;
    o.io_timeout_s = 0.2;
    o.log = [](const std::string&) {};
    auto m = ckpt::PeerMemory::Start(o);
    if (!m.ok()) __builtin_trap();
    auto c = ckpt::peer::PeerConnection::Open((*m)->endpoint(), kToken, 5);
    if (!c.ok()) __builtin_trap();
    const std::string file(3000, 'f');
    if (!(*c)->Put("step-0000000001/rank-000000.ckd", {reinterpret_cast<const std::byte*>(file.data()), file.size()}, 1)
             .ok()) {
      __builtin_trap();
    }
    return *m;
  }();
  return server.get();
}

// Reads one frame (header and payload); empty when none comes within 1 s.
std::string ReadFrame(int fd) {
  std::string got;
  size_t want = ckpt::peer::kHeaderSize;
  while (got.size() < want) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 1000) <= 0) return {};
    char buf[4096];
    const ssize_t n = read(fd, buf, std::min(sizeof(buf), want - got.size()));
    if (n <= 0) return {};
    got.append(buf, static_cast<size_t>(n));
    if (got.size() == ckpt::peer::kHeaderSize) {
      want += ckpt::LoadLE64(got.data() + 8);
    }
  }
  return got;
}

// Reads what arrives within `ms` (or until the server closes).
std::string Drain(int fd, int ms) {
  std::string got;
  char buf[65536];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, ms) <= 0) break;
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
    if (got.size() > (1u << 22)) break;
  }
  return got;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  ckpt::PeerMemory* server = Server();
  const std::string ep = server->endpoint();
  const int port = std::stoi(ep.substr(ep.rfind(':') + 1));
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) __builtin_trap();
  const uint8_t mode = data[0];
  ++data;
  --size;
  const std::string hello = ReadFrame(fd);
  if (hello.empty()) __builtin_trap();  // a server that does not greet
  if (mode & 1) {
    ckpt::ByteReader r(std::string_view(hello).substr(ckpt::peer::kHeaderSize), "hello");
    const std::string nonce = r.Str(256);
    const auto mac = ckpt::peer::AuthMac(kToken, nonce);
    ckpt::ByteWriter w;
    w.Str(std::string_view(reinterpret_cast<const char*>(mac.data()), mac.size()));
    const std::string auth = ckpt::peer::Frame(ckpt::peer::Op::kAuth, w.Take());
    (void)!send(fd, auth.data(), auth.size(), MSG_NOSIGNAL);
    if (ReadFrame(fd).empty()) __builtin_trap();  // the token is right: an ok must come
  }
  std::string out;
  if (mode & 2) {
    for (size_t i = 0; i + 2 <= size;) {
      const uint8_t op = data[i], len = data[i + 1];
      i += 2;
      const size_t n = std::min<size_t>(len, size - i);
      out += ckpt::peer::Frame(static_cast<ckpt::peer::Op>(op % 16),
                               std::string_view(reinterpret_cast<const char*>(data + i), n), n > 0 ? data[i] : 0);
      i += n;
    }
  } else {
    out.assign(reinterpret_cast<const char*>(data), size);
  }
  (void)!send(fd, out.data(), out.size(), MSG_NOSIGNAL);
  shutdown(fd, SHUT_WR);
  (void)Drain(fd, 1000);  // until the server closes on the end of input
  close(fd);
  return 0;
}

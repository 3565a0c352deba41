// A member that speaks the coordinator protocol directly on one blocking
// socket, without threads: tests and benchmarks run thousands of them from
// one thread. Every call reports failure as false / nullopt.
#ifndef CKPT_TESTS_SUPPORT_SIM_MEMBER_H_
#define CKPT_TESTS_SUPPORT_SIM_MEMBER_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "coordinator/protocol.h"
#include "util/bytes.h"

namespace ckpt::coord {
class SimMember {
 public:
  bool Connect(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ < 0 || connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return false;
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto hello = Request(MsgType::kHello, "");
    if (!hello) return false;
    ByteReader r(hello->second, "hello");
    nonce_ = r.Str();
    return r.ok();
  }
  bool SendJoin(std::string_view token, const std::string& host) {
    ByteWriter w;
    w.Str("sim");
    w.Str(host);
    w.Var(1);
    w.Var(0);
    w.SVar(-1);
    w.U8(0);
    const auto mac = Hmac(token, JoinChallenge(nonce_, "sim", host));
    w.Str(std::string_view(reinterpret_cast<const char*>(mac.data()), mac.size()));
    return Send(MsgType::kJoin, w.Take());
  }
  bool ReadAssign() {
    auto f = Read();
    if (!f || f->first != MsgType::kAssign) return false;
    ByteReader r(f->second, "assign");
    if (r.U8() != 0) return false;
    (void)r.Str();
    member_ = r.Var();
    generation_ = r.SVar();
    rank_ = static_cast<int>(r.Var());
    return r.ok();
  }
  bool Heartbeat() {
    ByteWriter w;
    w.Var(member_);
    w.SVar(generation_);
    auto f = Request(MsgType::kHeartbeat, w.Take());
    return f && f->first == MsgType::kHeartbeatAck;
  }
  bool SendVote(int64_t step) {
    ByteWriter w;
    w.SVar(generation_);
    w.Var(static_cast<uint64_t>(rank_));
    w.SVar(step);
    w.U8(1);
    w.Str("");
    w.U64(0);
    w.U64(0);
    w.SVar(0);
    w.Var(0);
    return Send(MsgType::kVote, w.Take());
  }
  bool SendDecide(int64_t step) {
    ByteWriter w;
    w.SVar(generation_);
    w.SVar(step);
    w.Var(10000);
    return Send(MsgType::kDecide, w.Take());
  }
  bool SendBarrier(uint64_t seq) {
    ByteWriter w;
    w.SVar(generation_);
    w.Var(static_cast<uint64_t>(rank_));
    w.Var(seq);
    w.U8(3);
    w.Var(10000);
    w.Str("");
    return Send(MsgType::kCollective, w.Take());
  }
  std::optional<std::pair<MsgType, std::string>> Read() {
    uint8_t h[kHeaderSize];
    if (!ReadAll(reinterpret_cast<char*>(h), sizeof(h))) return std::nullopt;
    auto header = ParseHeader(h, 1 << 26);
    if (!header.ok()) return std::nullopt;
    std::string payload(header->length, '\0');
    if (!ReadAll(payload.data(), payload.size())) return std::nullopt;
    return std::make_pair(header->type, payload);
  }
  bool SendAwaitOutcome(int64_t step) {
    ByteWriter w;
    w.SVar(generation_);
    w.SVar(step);
    w.Var(10000);
    return Send(MsgType::kAwaitOutcome, w.Take());
  }
  bool SendPublished(int64_t step) {
    ByteWriter w;
    w.SVar(generation_);
    w.SVar(step);
    w.U8(1);
    w.Str("");
    return Send(MsgType::kPublished, w.Take());
  }
  bool SendHeartbeat() {
    ByteWriter w;
    w.Var(member_);
    w.SVar(generation_);
    return Send(MsgType::kHeartbeat, w.Take());
  }
  int rank() const { return rank_; }
  /// Bytes as they are, framed or not.
  bool SendRaw(std::string_view bytes) {
    return bytes.empty() || send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
  }
  void CloseWrite() { shutdown(fd_, SHUT_WR); }
  /// Reads whatever comes until the peer closes or `timeout_s` passes.
  void Drain(double timeout_s) {
    char buf[4096];
    pollfd p{fd_, POLLIN, 0};
    while (poll(&p, 1, static_cast<int>(timeout_s * 1000)) > 0) {
      if (recv(fd_, buf, sizeof(buf), 0) <= 0) return;
    }
  }
  ~SimMember() {
    if (fd_ >= 0) close(fd_);
  }

 private:
  bool Send(MsgType t, std::string_view payload) {
    const std::string f = EncodeFrame(t, ++id_, payload);
    return send(fd_, f.data(), f.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(f.size());
  }
  std::optional<std::pair<MsgType, std::string>> Request(MsgType t, std::string_view payload) {
    if (!Send(t, payload)) return std::nullopt;
    return Read();
  }
  bool ReadAll(char* p, size_t n) {
    while (n > 0) {
      const ssize_t got = recv(fd_, p, n, 0);
      if (got <= 0) return false;
      p += got;
      n -= static_cast<size_t>(got);
    }
    return true;
  }
  int fd_ = -1;
  uint64_t id_ = 0, member_ = 0;
  int64_t generation_ = 0;
  int rank_ = -1;
  std::string nonce_;
};

}  // namespace ckpt::coord

#endif  // CKPT_TESTS_SUPPORT_SIM_MEMBER_H_

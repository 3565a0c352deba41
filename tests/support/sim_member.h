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

#include "coordinator/messages.h"
#include "coordinator/protocol.h"

namespace ckpt::coord {
class SimMember {
 public:
  /// `source` > 0 connects from the loopback address 127.1.H.L (H, L from
  /// it) instead of 127.0.0.1: thousands of members from one address make
  /// the kernel's search for a free local port the bottleneck.
  bool Connect(int port, uint32_t source = 0) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return false;
    if (source > 0) {
      int one = 1;
      setsockopt(fd_, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
      sockaddr_in from{};
      from.sin_family = AF_INET;
      from.sin_addr.s_addr = htonl((127u << 24) | (1u << 16) | ((source >> 8) & 0xff) << 8 | (source & 0xff));
      if (bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0) return false;
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return false;
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto hello = Request(MsgType::kHello, "");
    if (!hello) return false;
    auto h = Decode<HelloReply>(hello->second);
    if (!h.ok()) return false;
    nonce_ = h->nonce;
    hello_ = *std::move(h);
    return true;
  }
  /// What the coordinator said to the hello of Connect.
  const HelloReply& hello() const { return hello_; }
  bool SendJoin(std::string_view token, const std::string& host) {
    JoinRequest j;
    j.job = "sim";
    j.host = host;
    const auto mac = Hmac(token, JoinChallenge(nonce_, "sim", host));
    j.mac.assign(reinterpret_cast<const char*>(mac.data()), mac.size());
    return Send(MsgType::kJoin, Encode(j));
  }
  bool ReadAssign() {
    auto f = Read();
    if (!f || f->first != MsgType::kAssign) return false;
    auto a = Decode<AssignReply>(f->second);
    if (!a.ok() || a->status != AssignReply::kAssigned) return false;
    member_ = a->member_id;
    generation_ = a->generation;
    rank_ = static_cast<int>(a->first_rank);
    return true;
  }
  bool Heartbeat() {
    auto f = Request(MsgType::kHeartbeat, Encode(HeartbeatRequest{member_, generation_}));
    return f && f->first == MsgType::kHeartbeatAck;
  }
  bool SendVote(int64_t step) {
    VoteRequest v;
    v.generation = generation_;
    v.rank = static_cast<uint64_t>(rank_);
    v.step = step;
    return Send(MsgType::kVote, Encode(v));
  }
  bool SendDecide(int64_t step) { return Send(MsgType::kDecide, Encode(StepWaitRequest{generation_, step, 10000})); }
  bool SendBarrier(uint64_t seq) {
    CollectiveRequest c;
    c.generation = generation_;
    c.rank = static_cast<uint64_t>(rank_);
    c.seq = seq;
    c.op = CollectiveOp::kBarrier;
    c.timeout_ms = 10000;
    return Send(MsgType::kCollective, Encode(c));
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
    return Send(MsgType::kAwaitOutcome, Encode(StepWaitRequest{generation_, step, 10000}));
  }
  bool SendPublished(int64_t step) {
    return Send(MsgType::kPublished, Encode(PublishedRequest{generation_, step, true, ""}));
  }
  bool SendHeartbeat() { return Send(MsgType::kHeartbeat, Encode(HeartbeatRequest{member_, generation_})); }
  /// Sends one frame and reads the next frame that comes back.
  std::optional<std::pair<MsgType, std::string>> Request(MsgType t, std::string_view payload) {
    if (!Send(t, payload)) return std::nullopt;
    return Read();
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
  HelloReply hello_;
};

}  // namespace ckpt::coord

#endif  // CKPT_TESTS_SUPPORT_SIM_MEMBER_H_

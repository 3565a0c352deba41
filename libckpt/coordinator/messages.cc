#include "coordinator/messages.h"

#include <bit>
#include <utility>

#include "ckpt/limits.h"
#include "util/bytes.h"
#include "util/status_wire.h"
#include "util/strings.h"

namespace ckpt::coord {
namespace {

// Most replica hashes one vote may carry, and most parts of a gather.
constexpr uint64_t kMaxListEntries = uint64_t{1} << 24;
// Most local ranks one member may bring.
constexpr uint64_t kMaxLocalRanks = uint64_t{1} << 20;
// Longest nonce and MAC.
constexpr uint64_t kMaxNonceBytes = 256;
constexpr uint64_t kMaxMacBytes = 64;
constexpr uint64_t kMaxHeldSteps = 64;

template <typename T>
absl::StatusOr<T> Done(const ByteReader& r, T m) {
  if (!r.ok()) return r.status();
  return m;
}

}  // namespace

std::string Encode(const HelloReply& m) {
  ByteWriter w;
  w.Str(m.nonce);
  w.Str(m.coordinator_id);
  w.Var(m.max_frame);
  if (!m.standby_of.empty()) w.Str(m.standby_of);
  return w.Take();
}
absl::StatusOr<HelloReply> DecodeHello(std::string_view payload) {
  ByteReader r(payload, "hello");
  HelloReply m;
  m.nonce = r.Str(kMaxNonceBytes);
  if (r.ok() && !r.AtEnd()) {
    m.coordinator_id = r.Str(kMaxNonceBytes);
    m.max_frame = r.Var();
    if (r.ok() && !r.AtEnd()) m.standby_of = r.Str(4 * kMaxNonceBytes);
  }
  return Done(r, std::move(m));
}

std::string Encode(const JoinRequest& m) {
  ByteWriter w;
  w.Str(m.job);
  w.Str(m.host);
  w.Var(m.local_ranks);
  w.Var(m.previous_member);
  w.SVar(m.previous_generation);
  w.U8(m.resume ? 1 : 0);
  w.Str(m.mac);
  if (!m.peer_endpoint.empty()) {
    w.Str(m.peer_endpoint);
    w.Str(m.peer_domain);
    w.Var(m.held.size());
    for (const HeldStep& h : m.held) {
      w.SVar(h.step);
      w.SVar(h.generation);
      w.Var(h.owners.size());
      for (uint32_t o : h.owners) w.Var(o);
    }
  }
  return w.Take();
}
absl::StatusOr<JoinRequest> DecodeJoin(std::string_view payload) {
  ByteReader r(payload, "join");
  JoinRequest m;
  m.job = r.Str(kMaxJoinFieldBytes);
  m.host = r.Str(kMaxJoinFieldBytes);
  m.local_ranks = r.Count(kMaxLocalRanks, "local ranks");
  m.previous_member = r.Var();
  m.previous_generation = r.SVar();
  m.resume = r.U8() != 0;
  m.mac = r.Str(kMaxMacBytes);
  if (r.ok() && !r.AtEnd()) {
    m.peer_endpoint = r.Str(kMaxJoinFieldBytes);
    m.peer_domain = r.Str(kMaxJoinFieldBytes);
    const uint64_t n = r.Count(kMaxHeldSteps, "held steps");
    for (uint64_t i = 0; i < n && r.ok(); ++i) {
      HeldStep h;
      h.step = r.SVar();
      h.generation = r.SVar();
      const uint64_t k = r.Count(kMaxLocalRanks, "held owners");
      for (uint64_t j = 0; j < k && r.ok(); ++j)
        h.owners.push_back(static_cast<uint32_t>(r.Count(kMaxLocalRanks * 64, "owner")));
      m.held.push_back(std::move(h));
    }
  }
  return Done(r, std::move(m));
}

std::string Encode(const AssignReply& m) {
  ByteWriter w;
  w.U8(m.status);
  w.Str(m.message);
  if (m.status != AssignReply::kAssigned) return w.Take();
  w.Var(m.member_id);
  w.SVar(m.generation);
  w.Var(m.first_rank);
  w.Var(m.local_ranks);
  w.Var(m.world_size);
  w.Var(m.members);
  w.SVar(m.restore_step);
  w.Var(m.heartbeat_ms);
  w.U8(m.restore_level);
  w.Str(m.memory_note);
  w.Var(m.endpoints.size());
  for (const std::string& e : m.endpoints) w.Str(e);
  for (const auto* lists : {&m.holders, &m.restore_holders}) {
    w.Var(lists->size());
    for (const auto& l : *lists) {
      w.Var(l.size());
      for (uint32_t i : l) w.Var(i);
    }
  }
  return w.Take();
}
absl::StatusOr<AssignReply> DecodeAssign(std::string_view payload) {
  ByteReader r(payload, "assign");
  AssignReply m;
  m.status = r.U8();
  m.message = r.Str(kMaxWireTextBytes);
  if (!r.ok() || m.status != AssignReply::kAssigned) return Done(r, std::move(m));
  m.member_id = r.Var();
  m.generation = r.SVar();
  m.first_rank = r.Var();
  m.local_ranks = r.Var();
  m.world_size = r.Var();
  m.members = r.Var();
  m.restore_step = r.SVar();
  m.heartbeat_ms = r.Var();
  if (r.ok() && !r.AtEnd()) {
    m.restore_level = r.U8();
    m.memory_note = r.Str(kMaxWireTextBytes);
    const uint64_t n = r.Count(kMaxListEntries, "endpoints");
    for (uint64_t i = 0; i < n && r.ok(); ++i) m.endpoints.push_back(r.Str(kMaxJoinFieldBytes));
    for (auto* lists : {&m.holders, &m.restore_holders}) {
      const uint64_t k = r.Count(kMaxListEntries, "ranks");
      for (uint64_t i = 0; i < k && r.ok(); ++i) {
        std::vector<uint32_t> l(r.Count(64, "holders"));
        for (uint32_t& x : l) {
          const uint64_t v = r.Var();
          if (r.ok() && v >= n) r.Fail(StrCat("holder ", v, " is not one of the ", n, " endpoints"));
          x = static_cast<uint32_t>(v);
        }
        lists->push_back(std::move(l));
      }
    }
  }
  return Done(r, std::move(m));
}

std::string Encode(const HeartbeatRequest& m) {
  ByteWriter w;
  w.Var(m.member);
  w.SVar(m.generation);
  return w.Take();
}
absl::StatusOr<HeartbeatRequest> DecodeHeartbeat(std::string_view payload) {
  ByteReader r(payload, "heartbeat");
  HeartbeatRequest m;
  m.member = r.Var();
  m.generation = r.SVar();
  return Done(r, std::move(m));
}

std::string Encode(const HeartbeatAck& m) {
  ByteWriter w;
  w.SVar(m.generation);
  w.U8(m.stop ? 1 : 0);
  w.Str(m.reason);
  return w.Take();
}
absl::StatusOr<HeartbeatAck> DecodeHeartbeatAck(std::string_view payload) {
  ByteReader r(payload, "heartbeat ack");
  HeartbeatAck m;
  m.generation = r.SVar();
  m.stop = r.U8() != 0;
  m.reason = r.Str(kMaxWireTextBytes);
  return Done(r, std::move(m));
}

std::string Encode(const StopPush& m) {
  ByteWriter w;
  w.SVar(m.generation);
  w.Str(m.reason);
  return w.Take();
}
absl::StatusOr<StopPush> DecodeStop(std::string_view payload) {
  ByteReader r(payload, "stop");
  StopPush m;
  m.generation = r.SVar();
  m.reason = r.Str(kMaxWireTextBytes);
  return Done(r, std::move(m));
}

std::string Encode(const CollectiveRequest& m) {
  ByteWriter w;
  w.SVar(m.generation);
  w.Var(m.rank);
  w.Var(m.seq);
  w.U8(static_cast<uint8_t>(m.op));
  w.Var(m.timeout_ms);
  w.Str(m.part);
  return w.Take();
}
absl::StatusOr<CollectiveRequest> DecodeCollective(std::string_view payload, uint64_t max_part) {
  ByteReader r(payload, "collective");
  CollectiveRequest m;
  m.generation = r.SVar();
  m.rank = r.Var();
  m.seq = r.Var();
  const uint8_t op = r.U8();
  m.timeout_ms = r.Var();
  m.part = r.Str(max_part);
  if (!r.ok()) return r.status();
  if (op > static_cast<uint8_t>(CollectiveOp::kBarrier)) {
    return absl::InvalidArgumentError(StrCat("unknown collective ", static_cast<int>(op)));
  }
  m.op = static_cast<CollectiveOp>(op);
  return m;
}

std::string Encode(const VoteRequest& m) {
  ByteWriter w;
  w.SVar(m.generation);
  w.Var(m.rank);
  w.SVar(m.step);
  w.U8(m.vote.ok ? 1 : 0);
  w.Str(m.vote.error);
  w.U64(std::bit_cast<uint64_t>(m.vote.stall_s));
  w.U64(std::bit_cast<uint64_t>(m.vote.write_s));
  w.SVar(m.vote.bytes);
  w.Var(m.vote.replicas.size());
  for (const ReplicaHash& h : m.vote.replicas) {
    w.Str(h.key);
    w.U64(h.hash);
    w.U8(h.written ? 1 : 0);
  }
  if (m.level != 0) w.U8(m.level);  // appended only where it says more than the default
  return w.Take();
}
absl::StatusOr<VoteRequest> DecodeVote(std::string_view payload) {
  ByteReader r(payload, "vote");
  VoteRequest m;
  m.generation = r.SVar();
  m.rank = r.Var();
  m.step = r.SVar();
  m.vote.ok = r.U8() != 0;
  m.vote.error = r.Str(kMaxWireTextBytes);
  m.vote.stall_s = std::bit_cast<double>(r.U64());
  m.vote.write_s = std::bit_cast<double>(r.U64());
  m.vote.bytes = r.SVar();
  const uint64_t n = r.Count(kMaxListEntries, "replica hashes");
  for (uint64_t i = 0; i < n && r.ok(); ++i) {
    ReplicaHash rh;
    rh.key = r.Str(kMaxWireTextBytes);
    rh.hash = r.U64();
    rh.written = r.U8() != 0;
    m.vote.replicas.push_back(std::move(rh));
  }
  if (r.ok() && !r.AtEnd()) m.level = r.U8();
  return Done(r, std::move(m));
}

std::string Encode(const StepWaitRequest& m) {
  ByteWriter w;
  w.SVar(m.generation);
  w.SVar(m.step);
  w.Var(m.timeout_ms);
  if (m.level != 0) w.U8(m.level);  // appended only where it says more than the default
  return w.Take();
}
absl::StatusOr<StepWaitRequest> DecodeStepWait(std::string_view payload) {
  ByteReader r(payload, "step wait");
  StepWaitRequest m;
  m.generation = r.SVar();
  m.step = r.SVar();
  m.timeout_ms = r.Var();
  if (r.ok() && !r.AtEnd()) m.level = r.U8();
  return Done(r, std::move(m));
}

std::string Encode(const PublishedRequest& m) {
  ByteWriter w;
  w.SVar(m.generation);
  w.SVar(m.step);
  w.U8(m.ok ? 1 : 0);
  w.Str(m.message);
  if (m.level != 0) w.U8(m.level);  // appended only where it says more than the default
  return w.Take();
}
absl::StatusOr<PublishedRequest> DecodePublished(std::string_view payload) {
  ByteReader r(payload, "published");
  PublishedRequest m;
  m.generation = r.SVar();
  m.step = r.SVar();
  m.ok = r.U8() != 0;
  m.message = r.Str(kMaxWireTextBytes);
  if (r.ok() && !r.AtEnd()) m.level = r.U8();
  return Done(r, std::move(m));
}

std::string Encode(const LeaveRequest& m) {
  ByteWriter w;
  w.Var(m.member);
  return w.Take();
}
absl::StatusOr<LeaveRequest> DecodeLeave(std::string_view payload) {
  ByteReader r(payload, "leave");
  LeaveRequest m;
  m.member = r.Var();
  return Done(r, std::move(m));
}

std::string Encode(const StatusRequest& m) {
  ByteWriter w;
  w.U8(m.text ? 1 : 0);
  return w.Take();
}
absl::StatusOr<StatusRequest> DecodeStatusRequest(std::string_view payload) {
  StatusRequest m;
  if (payload.empty()) return m;
  ByteReader r(payload, "status");
  m.text = r.U8() == 1;
  return Done(r, std::move(m));
}

std::string EncodeDecision(const absl::Status& s) {
  ByteWriter w;
  w.U8(s.ok() ? 1 : 0);
  WriteStatus(w, s);
  return w.Take();
}
absl::Status DecodeDecision(std::string_view payload, absl::Status* decision) {
  ByteReader r(payload, "decision");
  const bool ok = r.U8() != 0;
  const absl::Status s = ReadStatus(r);
  if (!r.ok()) return r.status();
  *decision = ok ? absl::OkStatus() : (s.ok() ? absl::AbortedError("") : s);
  return absl::OkStatus();
}

std::string EncodeParts(const std::vector<std::string>& parts) {
  ByteWriter w;
  w.Var(parts.size());
  for (const std::string& p : parts) w.Str(p);
  return w.Take();
}
absl::StatusOr<std::vector<std::string>> DecodeParts(std::string_view payload, uint64_t max_part,
                                                     std::string_view what) {
  ByteReader r(payload, std::string(what));
  const uint64_t n = r.Count(kMaxListEntries, "messages");
  std::vector<std::string> out;
  for (uint64_t i = 0; i < n && r.ok(); ++i) out.push_back(r.Str(max_part));
  return Done(r, std::move(out));
}

std::string EncodeBytes(std::string_view bytes) {
  ByteWriter w;
  w.Str(bytes);
  return w.Take();
}
absl::StatusOr<std::string> DecodeBytes(std::string_view payload, uint64_t max_len, std::string_view what) {
  ByteReader r(payload, std::string(what));
  std::string out = r.Str(max_len);
  return Done(r, std::move(out));
}

}  // namespace ckpt::coord

#include "coordinator/messages.h"

#include <bit>
#include <concepts>
#include <string>
#include <type_traits>
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

// Each message's fields are listed once, in a Fields() function that a
// FieldWriter walks to encode and a FieldReader walks to decode. A field
// read past the payload, or over its limit, fails the reader (DataLoss,
// naming the message and the byte offset); every later read is a no-op.
class FieldWriter {
 public:
  static constexpr bool kReading = false;
  void U8(uint8_t v) { w_.U8(v); }
  void Bool(bool v) { w_.U8(v ? 1 : 0); }
  void Var(uint64_t v) { w_.Var(v); }
  void Count(uint64_t v, uint64_t /*limit*/, std::string_view /*what*/) { w_.Var(v); }
  void SVar(int64_t v) { w_.SVar(v); }
  void U64(uint64_t v) { w_.U64(v); }
  void F64(double v) { w_.U64(std::bit_cast<uint64_t>(v)); }
  void Str(const std::string& s, uint64_t /*limit*/) { w_.Str(s); }
  // An index into a list of `n`: written as it is.
  void Index(uint32_t v, size_t /*n*/, std::string_view /*what*/, std::string_view /*of*/) { w_.Var(v); }
  // A part appended in a later version: written when `present`.
  bool Tail(bool present) const { return present; }
  bool ok() const { return true; }
  template <typename T, typename Each>
  void List(const std::vector<T>& v, uint64_t /*limit*/, std::string_view /*what*/, Each each) {
    w_.Var(v.size());
    for (const T& x : v) each(x);
  }
  std::string Take() { return w_.Take(); }

 private:
  ByteWriter w_;
};

class FieldReader {
 public:
  static constexpr bool kReading = true;
  FieldReader(std::string_view payload, std::string what) : r_(payload, std::move(what)) {}
  void U8(uint8_t& v) { v = r_.U8(); }
  void Bool(bool& v) { v = r_.U8() != 0; }
  void Var(uint64_t& v) { v = r_.Var(); }
  void Count(uint64_t& v, uint64_t limit, std::string_view what) { v = r_.Count(limit, what); }
  void Count(uint32_t& v, uint64_t limit, std::string_view what) { v = static_cast<uint32_t>(r_.Count(limit, what)); }
  void SVar(int64_t& v) { v = r_.SVar(); }
  void U64(uint64_t& v) { v = r_.U64(); }
  void F64(double& v) { v = std::bit_cast<double>(r_.U64()); }
  void Str(std::string& s, uint64_t limit) { s = r_.Str(limit); }
  // An index into a list of `n` ("holder 2 is not one of the 2 endpoints").
  void Index(uint32_t& v, size_t n, std::string_view what, std::string_view of) {
    const uint64_t x = r_.Var();
    if (r_.ok() && x >= n) r_.Fail(StrCat(what, " ", x, " is not one of the ", n, " ", of));
    v = static_cast<uint32_t>(x);
  }
  // A part appended in a later version: read when bytes remain.
  bool Tail(bool /*present*/) const { return r_.ok() && !r_.AtEnd(); }
  bool ok() const { return r_.ok(); }
  const absl::Status& status() const { return r_.status(); }
  template <typename T, typename Each>
  void List(std::vector<T>& v, uint64_t limit, std::string_view what, Each each) {
    const uint64_t n = r_.Count(limit, what);
    for (uint64_t i = 0; i < n && r_.ok(); ++i) {
      T x{};
      each(x);
      v.push_back(std::move(x));
    }
  }

 private:
  ByteReader r_;
};

// M is the message type T, const when it is written.
template <typename M, typename T>
concept Message = std::same_as<std::remove_const_t<M>, T>;

template <typename F, Message<HelloReply> M>
void Fields(F& f, M& m) {
  f.Str(m.nonce, kMaxNonceBytes);
  if (f.Tail(true)) {
    f.Str(m.coordinator_id, kMaxNonceBytes);
    f.Var(m.max_frame);
    if (f.Tail(!m.standby_of.empty())) f.Str(m.standby_of, 4 * kMaxNonceBytes);
  }
}

template <typename F, Message<JoinRequest> M>
void Fields(F& f, M& m) {
  f.Str(m.job, kMaxJoinFieldBytes);
  f.Str(m.host, kMaxJoinFieldBytes);
  f.Count(m.local_ranks, kMaxLocalRanks, "local ranks");
  f.Var(m.previous_member);
  f.SVar(m.previous_generation);
  f.Bool(m.resume);
  f.Str(m.mac, kMaxMacBytes);
  if (f.Tail(!m.peer_endpoint.empty())) {  // the memory level
    f.Str(m.peer_endpoint, kMaxJoinFieldBytes);
    f.Str(m.peer_domain, kMaxJoinFieldBytes);
    f.List(m.held, kMaxHeldSteps, "held steps", [&](auto& h) {
      f.SVar(h.step);
      f.SVar(h.generation);
      f.List(h.owners, kMaxLocalRanks, "held owners", [&](auto& o) { f.Count(o, kMaxLocalRanks * 64, "owner"); });
    });
  }
}

template <typename F, Message<AssignReply> M>
void Fields(F& f, M& m) {
  f.U8(m.status);
  f.Str(m.message, kMaxWireTextBytes);
  if (!f.ok() || m.status != AssignReply::kAssigned) return;
  f.Var(m.member_id);
  f.SVar(m.generation);
  f.Var(m.first_rank);
  f.Var(m.local_ranks);
  f.Var(m.world_size);
  f.Var(m.members);
  f.SVar(m.restore_step);
  f.Var(m.heartbeat_ms);
  if (f.Tail(true)) {  // the memory level
    f.U8(m.restore_level);
    f.Str(m.memory_note, kMaxWireTextBytes);
    f.List(m.endpoints, kMaxListEntries, "endpoints", [&](auto& e) { f.Str(e, kMaxJoinFieldBytes); });
    auto holders = [&](auto& lists) {
      f.List(lists, kMaxListEntries, "ranks", [&](auto& l) {
        f.List(l, 64, "holders", [&](auto& x) { f.Index(x, m.endpoints.size(), "holder", "endpoints"); });
      });
    };
    holders(m.holders);
    holders(m.restore_holders);
  }
}

template <typename F, Message<HeartbeatRequest> M>
void Fields(F& f, M& m) {
  f.Var(m.member);
  f.SVar(m.generation);
}

template <typename F, Message<HeartbeatAck> M>
void Fields(F& f, M& m) {
  f.SVar(m.generation);
  f.Bool(m.stop);
  f.Str(m.reason, kMaxWireTextBytes);
}

template <typename F, Message<StopPush> M>
void Fields(F& f, M& m) {
  f.SVar(m.generation);
  f.Str(m.reason, kMaxWireTextBytes);
}

// The op travels as a byte, checked by the decoder once every field is read.
template <typename F, Message<CollectiveRequest> M>
void Fields(F& f, M& m, uint8_t& op, uint64_t max_part) {
  f.SVar(m.generation);
  f.Var(m.rank);
  f.Var(m.seq);
  f.U8(op);
  f.Var(m.timeout_ms);
  f.Str(m.part, max_part);
}

template <typename F, Message<VoteRequest> M>
void Fields(F& f, M& m) {
  f.SVar(m.generation);
  f.Var(m.rank);
  f.SVar(m.step);
  f.Bool(m.vote.ok);
  f.Str(m.vote.error, kMaxWireTextBytes);
  f.F64(m.vote.stall_s);
  f.F64(m.vote.write_s);
  f.SVar(m.vote.bytes);
  f.List(m.vote.replicas, kMaxListEntries, "replica hashes", [&](auto& h) {
    f.Str(h.key, kMaxWireTextBytes);
    f.U64(h.hash);
    f.Bool(h.written);
  });
  if (f.Tail(m.level != 0)) f.U8(m.level);  // appended only where it says more than the default
}

template <typename F, Message<StepWaitRequest> M>
void Fields(F& f, M& m) {
  f.SVar(m.generation);
  f.SVar(m.step);
  f.Var(m.timeout_ms);
  if (f.Tail(m.level != 0)) f.U8(m.level);
}

template <typename F, Message<PublishedRequest> M>
void Fields(F& f, M& m) {
  f.SVar(m.generation);
  f.SVar(m.step);
  f.Bool(m.ok);
  f.Str(m.message, kMaxWireTextBytes);
  if (f.Tail(m.level != 0)) f.U8(m.level);
}

template <typename F, Message<LeaveRequest> M>
void Fields(F& f, M& m) {
  f.Var(m.member);
}

// An empty payload asks for JSON.
template <typename F, Message<StatusRequest> M>
void Fields(F& f, M& m) {
  if (!f.Tail(true)) return;
  uint8_t text = m.text ? 1 : 0;
  f.U8(text);
  if constexpr (F::kReading) m.text = text == 1;
}

template <typename T>
std::string EncodeFields(const T& m) {
  FieldWriter w;
  Fields(w, m);
  return w.Take();
}

template <typename T>
absl::StatusOr<T> DecodeFields(std::string_view payload, const char* what) {
  FieldReader r(payload, what);
  T m;
  Fields(r, m);
  if (!r.ok()) return r.status();
  return m;
}

}  // namespace

std::string Encode(const HelloReply& m) { return EncodeFields(m); }
std::string Encode(const JoinRequest& m) { return EncodeFields(m); }
std::string Encode(const AssignReply& m) { return EncodeFields(m); }
std::string Encode(const HeartbeatRequest& m) { return EncodeFields(m); }
std::string Encode(const HeartbeatAck& m) { return EncodeFields(m); }
std::string Encode(const StopPush& m) { return EncodeFields(m); }
std::string Encode(const VoteRequest& m) { return EncodeFields(m); }
std::string Encode(const StepWaitRequest& m) { return EncodeFields(m); }
std::string Encode(const PublishedRequest& m) { return EncodeFields(m); }
std::string Encode(const LeaveRequest& m) { return EncodeFields(m); }
std::string Encode(const StatusRequest& m) { return EncodeFields(m); }
std::string Encode(const CollectiveRequest& m) {
  FieldWriter w;
  uint8_t op = static_cast<uint8_t>(m.op);
  Fields(w, m, op, 0);
  return w.Take();
}

absl::StatusOr<HelloReply> DecodeHello(std::string_view p) { return DecodeFields<HelloReply>(p, "hello"); }
absl::StatusOr<JoinRequest> DecodeJoin(std::string_view p) { return DecodeFields<JoinRequest>(p, "join"); }
absl::StatusOr<AssignReply> DecodeAssign(std::string_view p) { return DecodeFields<AssignReply>(p, "assign"); }
absl::StatusOr<HeartbeatRequest> DecodeHeartbeat(std::string_view p) {
  return DecodeFields<HeartbeatRequest>(p, "heartbeat");
}
absl::StatusOr<HeartbeatAck> DecodeHeartbeatAck(std::string_view p) {
  return DecodeFields<HeartbeatAck>(p, "heartbeat ack");
}
absl::StatusOr<StopPush> DecodeStop(std::string_view p) { return DecodeFields<StopPush>(p, "stop"); }
absl::StatusOr<VoteRequest> DecodeVote(std::string_view p) { return DecodeFields<VoteRequest>(p, "vote"); }
absl::StatusOr<StepWaitRequest> DecodeStepWait(std::string_view p) {
  return DecodeFields<StepWaitRequest>(p, "step wait");
}
absl::StatusOr<PublishedRequest> DecodePublished(std::string_view p) {
  return DecodeFields<PublishedRequest>(p, "published");
}
absl::StatusOr<LeaveRequest> DecodeLeave(std::string_view p) { return DecodeFields<LeaveRequest>(p, "leave"); }
absl::StatusOr<StatusRequest> DecodeStatusRequest(std::string_view p) {
  return DecodeFields<StatusRequest>(p, "status");
}
absl::StatusOr<CollectiveRequest> DecodeCollective(std::string_view payload, uint64_t max_part) {
  FieldReader r(payload, "collective");
  CollectiveRequest m;
  uint8_t op = 0;
  Fields(r, m, op, max_part);
  if (!r.ok()) return r.status();
  if (op > static_cast<uint8_t>(CollectiveOp::kBarrier)) {
    return absl::InvalidArgumentError(StrCat("unknown collective ", static_cast<int>(op)));
  }
  m.op = static_cast<CollectiveOp>(op);
  return m;
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

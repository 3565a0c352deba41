// The payloads of the coordinator's frames, as types. Each message's fields
// are listed once (its Fields(), beside its members); Encode and Decode<T>
// are both walks over that list, used by the server, the client and the test
// double (tests/support/sim_member.h). The byte layout is docs/protocol.md's
// (messages_test pins it). A decoder refuses a payload that is short or
// exceeds a limit of ckpt/limits.h (DataLoss, naming the message and the
// byte offset); bytes after the fields it knows are ignored, so a newer peer
// may append fields.
#ifndef CKPT_COORDINATOR_MESSAGES_H_
#define CKPT_COORDINATOR_MESSAGES_H_

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ckpt/experimental/commit_arbiter.h"
#include "ckpt/limits.h"
#include "coordinator/message_fields.h"

namespace ckpt::coord {

/// SaveLevel::kMemory on the wire (ckpt/options.h); 0 is the durable level.
inline constexpr uint8_t kMemoryLevel = 1;

enum class CollectiveOp : uint8_t { kGather = 0, kScatter = 1, kBroadcast = 2, kBarrier = 3 };

/// hello (S->C): the nonce a join signs, who answers, its frame limit.
struct HelloReply {
  std::string nonce;
  std::string coordinator_id;
  uint64_t max_frame = 0;
  /// Set by a standby replica: who leads (workers move to the next
  /// address). Empty: this coordinator serves.
  std::string standby_of;
  static constexpr const char* kName = "hello";
  template <typename F, typename M>
  static void Fields(F& f, M& m) {
    f.Str(m.nonce, kMaxNonceBytes);
    if (f.Tail(true)) {
      f.Str(m.coordinator_id, kMaxNonceBytes);
      f.Var(m.max_frame);
      if (f.Tail(!m.standby_of.empty())) f.Str(m.standby_of, 4 * kMaxNonceBytes);
    }
  }
};

/// What a member's memory holds of one step (the memory level): the
/// owners (ranks of the save) whose files it holds whole, written by
/// generation `generation`.
struct HeldStep {
  int64_t step = 0;
  int64_t generation = 0;
  std::vector<uint32_t> owners;
};

/// join (C->S).
struct JoinRequest {
  std::string job;
  std::string host;
  uint64_t local_ranks = 1;
  uint64_t previous_member = 0;  ///< 0: a new member
  int64_t previous_generation = -1;
  bool resume = false;  ///< reconnecting to `previous_generation`
  std::string mac;      ///< HMAC of JoinChallenge(nonce, job, host)
  // The memory level (appended; absent from members without one):
  std::string peer_endpoint;  ///< where its peer memory listens
  std::string peer_domain;    ///< its failure domain
  std::vector<HeldStep> held;
  static constexpr const char* kName = "join";
  template <typename F, typename M>
  static void Fields(F& f, M& m) {
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
};

/// assign (S->C): a place in a generation, or why there is none.
struct AssignReply {
  /// kJobFinished: every member of the generation left, the job is over;
  /// a member that waited as a spare has nothing left to do.
  enum Status : uint8_t { kAssigned = 0, kRefused = 1, kNotResumable = 2, kJobFinished = 3 };
  uint8_t status = kAssigned;
  std::string message;  ///< why, when not assigned
  uint64_t member_id = 0;
  int64_t generation = 0;
  uint64_t first_rank = 0;
  uint64_t local_ranks = 0;
  uint64_t world_size = 0;
  uint64_t members = 0;
  int64_t restore_step = -1;
  uint64_t heartbeat_ms = 0;
  // The memory level (appended):
  uint8_t restore_level = 0;  ///< SaveLevel of restore_step
  /// Why the memory level cannot be used in this generation (too few
  /// failure domains, members without peer memory); empty when it can.
  std::string memory_note;
  /// Peer endpoints the lists below index.
  std::vector<std::string> endpoints;
  /// Per rank of this generation: its own endpoint, then its replica
  /// holders'.
  std::vector<std::vector<uint32_t>> holders;
  /// For a memory restore, per rank of the save: the live endpoints holding
  /// its files.
  std::vector<std::vector<uint32_t>> restore_holders;
  // Erasure coding (appended): this generation's saves are cut into k data
  // and m parity pieces, holders[r][j] holding piece j; 0: whole copies.
  uint8_t erasure_k = 0;
  uint8_t erasure_m = 0;
  static constexpr const char* kName = "assign";
  template <typename F, typename M>
  static void Fields(F& f, M& m) {
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
      if (f.Tail(m.erasure_k != 0)) {  // erasure coding
        f.U8(m.erasure_k);
        f.U8(m.erasure_m);
        f.Check(m.erasure_k >= 1 && m.erasure_m >= 1 && m.erasure_k + m.erasure_m <= 32,
                "erasure coding needs 1 <= k, 1 <= m, k + m <= 32");
      }
    }
  }
};

/// heartbeat (C->S).
struct HeartbeatRequest {
  uint64_t member = 0;
  int64_t generation = 0;
  static constexpr const char* kName = "heartbeat";
  template <typename F, typename M>
  static void Fields(F& f, M& m) {
    f.Var(m.member);
    f.SVar(m.generation);
  }
};

/// heartbeat ack (S->C), and the stop push (S->C, without `generation` first
/// being the coordinator's: it is the generation that ended).
struct HeartbeatAck {
  int64_t generation = 0;
  bool stop = false;
  std::string reason;
  static constexpr const char* kName = "heartbeat ack";
  template <typename F, typename M>
  static void Fields(F& f, M& m) {
    f.SVar(m.generation);
    f.Bool(m.stop);
    f.Str(m.reason, kMaxWireTextBytes);
  }
};
struct StopPush {
  int64_t generation = 0;
  std::string reason;
  static constexpr const char* kName = "stop";
  template <typename F, typename M>
  static void Fields(F& f, M& m) {
    f.SVar(m.generation);
    f.Str(m.reason, kMaxWireTextBytes);
  }
};

/// collective (C->S): one rank's part.
struct CollectiveRequest {
  int64_t generation = 0;
  uint64_t rank = 0;
  uint64_t seq = 0;
  CollectiveOp op = CollectiveOp::kBarrier;
  uint64_t timeout_ms = 0;
  std::string part;
  static constexpr const char* kName = "collective";
  template <typename F, typename M>
  static void Fields(F& f, M& m) {
    f.SVar(m.generation);
    f.Var(m.rank);
    f.Var(m.seq);
    f.Enum(m.op, CollectiveOp::kBarrier, "collective");
    f.Var(m.timeout_ms);
    f.Str(m.part, f.PartLimit());
  }
};

/// vote (C->S): phase 1 of the commit.
struct VoteRequest {
  int64_t generation = 0;
  uint64_t rank = 0;
  int64_t step = 0;
  SaveVote vote;
  uint8_t level = 0;  ///< SaveLevel (appended)
  static constexpr const char* kName = "vote";
  template <typename F, typename M>
  static void Fields(F& f, M& m) {
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
};

/// decide and await-outcome (C->S): wait for a step's decision or outcome.
struct StepWaitRequest {
  int64_t generation = 0;
  int64_t step = 0;
  uint64_t timeout_ms = 0;
  uint8_t level = 0;  ///< SaveLevel (appended)
  static constexpr const char* kName = "step wait";
  template <typename F, typename M>
  static void Fields(F& f, M& m) {
    f.SVar(m.generation);
    f.SVar(m.step);
    f.Var(m.timeout_ms);
    if (f.Tail(m.level != 0)) f.U8(m.level);
  }
};

/// published (C->S, the leader): the manifest is published, or why not.
struct PublishedRequest {
  int64_t generation = 0;
  int64_t step = 0;
  bool ok = true;
  std::string message;
  uint8_t level = 0;  ///< SaveLevel (appended)
  static constexpr const char* kName = "published";
  template <typename F, typename M>
  static void Fields(F& f, M& m) {
    f.SVar(m.generation);
    f.SVar(m.step);
    f.Bool(m.ok);
    f.Str(m.message, kMaxWireTextBytes);
    if (f.Tail(m.level != 0)) f.U8(m.level);
  }
};

/// leave (C->S).
struct LeaveRequest {
  uint64_t member = 0;
  static constexpr const char* kName = "leave";
  template <typename F, typename M>
  static void Fields(F& f, M& m) {
    f.Var(m.member);
  }
};

/// status (C->S) and its reply.
struct StatusRequest {
  bool text = false;  ///< human-readable instead of JSON
  static constexpr const char* kName = "status";
  template <typename F, typename M>
  static void Fields(F& f, M& m) {
    // An empty payload (older clients) asks for JSON.
    if (!f.Tail(true)) return;
    uint8_t text = m.text ? 1 : 0;
    f.U8(text);
    if constexpr (F::kReading) m.text = text == 1;
  }
};

/// A message's payload: its Fields() written in order.
template <typename T>
std::string Encode(const T& m) {
  FieldWriter w;
  T::Fields(w, m);
  return w.Take();
}

/// Decodes a message of type T. `part_limit`: the largest part a
/// collective accepts (the server's frame limit).
template <typename T>
absl::StatusOr<T> Decode(std::string_view payload, uint64_t part_limit = std::numeric_limits<uint64_t>::max()) {
  FieldReader r(payload, T::kName, part_limit);
  T m;
  T::Fields(r, m);
  if (!r.ok()) return r.status();
  return m;
}

/// decision and outcome (S->C): OK, or the status that stopped the step.
std::string EncodeDecision(const absl::Status& s);
/// Decodes a decision into `*decision` (OK, or the error that stopped the
/// step); the result says whether the payload decoded.
absl::Status DecodeDecision(std::string_view payload, absl::Status* decision);

/// A list of byte strings: the gather result (on the leader; other ranks get
/// an empty list) and the leader's part of a scatter.
std::string EncodeParts(const std::vector<std::string>& parts);
absl::StatusOr<std::vector<std::string>> DecodeParts(std::string_view payload, uint64_t max_part,
                                                     std::string_view what);
/// One byte string: the scatter and broadcast results, the status reply.
std::string EncodeBytes(std::string_view bytes);
absl::StatusOr<std::string> DecodeBytes(std::string_view payload, uint64_t max_len, std::string_view what);

}  // namespace ckpt::coord

#endif  // CKPT_COORDINATOR_MESSAGES_H_

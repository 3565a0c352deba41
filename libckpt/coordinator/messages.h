// The payloads of the coordinator's frames, as types. Each message's fields
// are listed once (its Fields() in messages.cc); its encoder and decoder are
// both walks over that list, used by the server, the client and the test
// double (tests/support/sim_member.h). The byte layout is docs/protocol.md's
// (messages_test pins it). A decoder refuses a payload that is short or
// exceeds a limit of ckpt/limits.h (DataLoss, naming the message and the
// byte offset); bytes after the fields it knows are ignored, so a newer peer
// may append fields.
#ifndef CKPT_COORDINATOR_MESSAGES_H_
#define CKPT_COORDINATOR_MESSAGES_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ckpt/experimental/commit_arbiter.h"

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
};

/// assign (S->C): a place in a generation, or why there is none.
struct AssignReply {
  enum Status : uint8_t { kAssigned = 0, kRefused = 1, kNotResumable = 2 };
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
};

/// heartbeat (C->S).
struct HeartbeatRequest {
  uint64_t member = 0;
  int64_t generation = 0;
};

/// heartbeat ack (S->C), and the stop push (S->C, without `generation` first
/// being the coordinator's: it is the generation that ended).
struct HeartbeatAck {
  int64_t generation = 0;
  bool stop = false;
  std::string reason;
};
struct StopPush {
  int64_t generation = 0;
  std::string reason;
};

/// collective (C->S): one rank's part.
struct CollectiveRequest {
  int64_t generation = 0;
  uint64_t rank = 0;
  uint64_t seq = 0;
  CollectiveOp op = CollectiveOp::kBarrier;
  uint64_t timeout_ms = 0;
  std::string part;
};

/// vote (C->S): phase 1 of the commit.
struct VoteRequest {
  int64_t generation = 0;
  uint64_t rank = 0;
  int64_t step = 0;
  SaveVote vote;
  uint8_t level = 0;  ///< SaveLevel (appended)
};

/// decide and await-outcome (C->S): wait for a step's decision or outcome.
struct StepWaitRequest {
  int64_t generation = 0;
  int64_t step = 0;
  uint64_t timeout_ms = 0;
  uint8_t level = 0;  ///< SaveLevel (appended)
};

/// published (C->S, the leader): the manifest is published, or why not.
struct PublishedRequest {
  int64_t generation = 0;
  int64_t step = 0;
  bool ok = true;
  std::string message;
  uint8_t level = 0;  ///< SaveLevel (appended)
};

/// leave (C->S).
struct LeaveRequest {
  uint64_t member = 0;
};

/// status (C->S) and its reply.
struct StatusRequest {
  bool text = false;  ///< human-readable instead of JSON
};

std::string Encode(const HelloReply& m);
std::string Encode(const JoinRequest& m);
std::string Encode(const AssignReply& m);
std::string Encode(const HeartbeatRequest& m);
std::string Encode(const HeartbeatAck& m);
std::string Encode(const StopPush& m);
std::string Encode(const CollectiveRequest& m);
std::string Encode(const VoteRequest& m);
std::string Encode(const StepWaitRequest& m);
std::string Encode(const PublishedRequest& m);
std::string Encode(const LeaveRequest& m);
std::string Encode(const StatusRequest& m);

absl::StatusOr<HelloReply> DecodeHello(std::string_view payload);
absl::StatusOr<JoinRequest> DecodeJoin(std::string_view payload);
absl::StatusOr<AssignReply> DecodeAssign(std::string_view payload);
absl::StatusOr<HeartbeatRequest> DecodeHeartbeat(std::string_view payload);
absl::StatusOr<HeartbeatAck> DecodeHeartbeatAck(std::string_view payload);
absl::StatusOr<StopPush> DecodeStop(std::string_view payload);
/// `max_part`: the largest part accepted (the server's frame limit).
absl::StatusOr<CollectiveRequest> DecodeCollective(std::string_view payload, uint64_t max_part);
absl::StatusOr<VoteRequest> DecodeVote(std::string_view payload);
absl::StatusOr<StepWaitRequest> DecodeStepWait(std::string_view payload);
absl::StatusOr<PublishedRequest> DecodePublished(std::string_view payload);
absl::StatusOr<LeaveRequest> DecodeLeave(std::string_view payload);
/// An empty payload (older clients) asks for JSON.
absl::StatusOr<StatusRequest> DecodeStatusRequest(std::string_view payload);

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

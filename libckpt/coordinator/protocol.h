// The coordinator's wire protocol (docs/protocol.md): the frames of
// net/wire.h under the magic "CKCO", their kind a MsgType, their tag the
// request id. Payloads are encoded with ByteWriter (little-endian, varints)
// per message type (messages.h).
#ifndef CKPT_COORDINATOR_PROTOCOL_H_
#define CKPT_COORDINATOR_PROTOCOL_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "ckpt/limits.h"
#include "net/wire.h"

namespace ckpt::coord {

inline constexpr uint32_t kFrameMagic = 0x4f434b43;  // "CKCO" little-endian
/// The coordinator's messages' version: 2 since they travel on net/wire.h's frames.
inline constexpr uint8_t kProtocolVersion = 2;
inline constexpr size_t kHeaderSize = wire::kHeaderSize;
inline constexpr size_t kNonceSize = wire::kNonceSize;
inline constexpr size_t kMacSize = wire::kMacSize;

/// Who may send a request, checked before its handler runs.
enum class Admits : uint8_t {
  kAnyone,   ///< answered by a standby replica too
  kServing,  ///< the serving coordinator, before a join
  kMember,   ///< a member that joined
};

// Every frame kind, listed once. A request (C->S) names who may send it;
// the server calls its handler `On<Name>` (declared from this list in
// server_impl.h, dispatched from it in server.cc). Replies and pushes
// (S->C) have no handler. A new message: a line here, its payload in
// messages.h, its handler in the server file of its concern, its call in
// client.cc.
//
// X(Name, number on the wire, name in logs, Admits)
#define CKPT_COORDINATOR_REQUESTS(X)                                                                \
  X(Hello, 1, "hello", kAnyone)                 /* S->C on connect too: nonce, coordinator id */    \
  X(Join, 2, "join", kServing)                  /* job, host, local ranks, previous member, HMAC */ \
  X(Heartbeat, 4, "heartbeat", kMember)         /* member, generation */                            \
  X(Collective, 7, "collective", kMember)       /* one rank's part of a collective */               \
  X(Vote, 9, "vote", kMember)                   /* phase 1 of the commit, per rank and step */      \
  X(Decide, 10, "decide", kMember)              /* the leader waits for the decision */             \
  X(Published, 12, "published", kMember)        /* the leader: the manifest is published, or not */ \
  X(AwaitOutcome, 13, "await-outcome", kMember) /* wait until a step commits or aborts */           \
  X(Status, 15, "status", kAnyone)              /* the coordinator's state, JSON or text */         \
  X(Leave, 19, "leave", kMember)                /* the member leaves for good */

// X(Name, number on the wire, name in logs)
#define CKPT_COORDINATOR_REPLIES(X)                                                     \
  X(Assign, 3, "assign")              /* a new generation's membership, or a refusal */ \
  X(HeartbeatAck, 5, "heartbeat-ack") /* current generation, whether to stop */         \
  X(Stop, 6, "stop")                  /* push: the generation ended */                  \
  X(CollectiveResult, 8, "collective-result")                                           \
  X(Decision, 11, "decision")                                                           \
  X(Outcome, 14, "outcome")                                                             \
  X(StatusReply, 16, "status-reply")                                                    \
  X(Ack, 17, "ack")                                                                     \
  X(Error, 18, "error") /* the request failed: status code, message */

enum class MsgType : uint16_t {
#define CKPT_MSG_TYPE_REQUEST(name, number, text, admits) k##name = number,
#define CKPT_MSG_TYPE_REPLY(name, number, text) k##name = number,
  CKPT_COORDINATOR_REQUESTS(CKPT_MSG_TYPE_REQUEST) CKPT_COORDINATOR_REPLIES(CKPT_MSG_TYPE_REPLY)
#undef CKPT_MSG_TYPE_REQUEST
#undef CKPT_MSG_TYPE_REPLY
};

const char* MsgTypeName(MsgType t);
/// The protocol on net/wire.h's frames.
extern const wire::Protocol kCoordinatorProtocol;

struct FrameHeader {
  MsgType type = MsgType::kAck;
  uint64_t request_id = 0;  ///< echoed in the reply; 0 for pushes
  uint64_t length = 0;
  uint64_t checksum = 0;  ///< xxh3 of the payload
};

/// A whole frame: header and payload.
std::string EncodeFrame(MsgType type, uint64_t request_id, std::string_view payload);

/// Parses a header. Errors (bad magic, unknown version, payload larger than
/// `max_payload`) are InvalidArgument and say what was wrong.
absl::StatusOr<FrameHeader> ParseHeader(const uint8_t* bytes, uint64_t max_payload);

/// Checks a payload against its header's checksum.
absl::Status CheckPayload(const FrameHeader& h, std::string_view payload);

/// HMAC-SHA256(key, message).
inline std::array<uint8_t, kMacSize> Hmac(std::string_view key, std::string_view message) {
  return wire::Mac(key, message);
}

/// What a joining member signs: the coordinator's nonce, the job and host.
std::string JoinChallenge(std::string_view nonce, std::string_view job, std::string_view host);

using wire::CheckTokenStrength;
using wire::MacEqual;

}  // namespace ckpt::coord

#endif  // CKPT_COORDINATOR_PROTOCOL_H_

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

enum class MsgType : uint16_t {
  kHello = 1,         ///< S->C on connect: nonce, coordinator id
  kJoin = 2,          ///< C->S: job, host, local ranks, previous member id, HMAC
  kAssign = 3,        ///< S->C: membership of a new generation (or a refusal)
  kHeartbeat = 4,     ///< C->S: member, generation
  kHeartbeatAck = 5,  ///< S->C: current generation, whether to stop
  kStop = 6,          ///< S->C push: the generation ended (a member died)
  kCollective = 7,    ///< C->S: one rank's part of a gather/scatter/broadcast/barrier
  kCollectiveResult = 8,
  kVote = 9,     ///< C->S: phase 1 of the commit, one per rank and step
  kDecide = 10,  ///< C->S (leader): wait for the commit decision
  kDecision = 11,
  kPublished = 12,     ///< C->S (leader): the manifest is published (or not)
  kAwaitOutcome = 13,  ///< C->S: wait until the step is committed or aborted
  kOutcome = 14,
  kStatus = 15,  ///< C->S: the coordinator's state, as JSON
  kStatusReply = 16,
  kAck = 17,
  kError = 18,  ///< S->C: the request failed (status code, message)
  kLeave = 19,  ///< C->S: the member leaves for good
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

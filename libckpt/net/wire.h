// The one framed, authenticated transport under the coordinator ("CKCO")
// and the memory level ("CKPM"); docs/protocol.md, "Frames". Each protocol
// is a magic and a set of message kinds on the same frame:
//
//   u32 magic | u8 frame version | u8 flags (0) | u16 kind
//   | u64 payload length | u64 tag | u64 xxh3(payload)          (32 bytes)
//
// The tag is the coordinator's request id, the memory level's byte offset.
// The server speaks first (a hello carrying a fresh nonce); the client
// proves the job's token with an HMAC-SHA256 over the nonce. Until it has,
// no frame's payload may exceed kMaxPreAuthPayload (ckpt/limits.h): an
// unauthenticated peer makes the server allocate no more than that.
#ifndef CKPT_NET_WIRE_H_
#define CKPT_NET_WIRE_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "ckpt/limits.h"

namespace ckpt::wire {

inline constexpr size_t kHeaderSize = 32;
/// The frame layout's version: the same for every protocol on it.
inline constexpr uint8_t kFrameVersion = 2;
inline constexpr size_t kNonceSize = 32;
inline constexpr size_t kMacSize = 32;

/// A protocol spoken in these frames.
struct Protocol {
  uint32_t magic;
  const char* name;  ///< for messages: "coordinator", "peer-memory"
  uint16_t first_kind, last_kind;
  const char* (*kind_name)(uint16_t kind);
};

struct Header {
  uint16_t kind = 0;
  uint64_t length = 0;
  uint64_t tag = 0;
  uint64_t checksum = 0;  ///< xxh3 of the payload
};

void EncodeHeader(const Protocol& p, uint16_t kind, uint64_t length, uint64_t tag, uint64_t checksum,
                  uint8_t out[kHeaderSize]);
/// Header and payload in one string.
std::string EncodeFrame(const Protocol& p, uint16_t kind, uint64_t tag, std::string_view payload);
/// Parses a header. InvalidArgument names what is wrong: the magic, the
/// frame version, the flags, a kind the protocol lacks, a payload over
/// `max_payload`.
absl::StatusOr<Header> ParseHeader(const Protocol& p, const uint8_t* bytes, uint64_t max_payload);
/// Checks a payload against its header's checksum.
absl::Status CheckPayload(const Protocol& p, const Header& h, std::string_view payload);

/// A fresh random nonce (getrandom).
std::string Nonce();
/// HMAC-SHA256(token, message).
std::array<uint8_t, kMacSize> Mac(std::string_view token, std::string_view message);
/// Constant-time comparison of two MACs.
bool MacEqual(const uint8_t* a, const uint8_t* b);
/// Refuses a token shorter than kMinTokenBytes or only whitespace, saying
/// how to make a good one.
absl::Status CheckTokenStrength(std::string_view token);

}  // namespace ckpt::wire

#endif  // CKPT_NET_WIRE_H_

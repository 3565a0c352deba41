// The memory level's data plane (docs/protocol.md "Peer memory"): the
// frames of net/wire.h under the magic "CKPM", their kind an Op, their tag
// the byte offset of put-data and data.
//
// The server speaks first (hello: nonce, endpoint, domain); the client's
// first frame is auth (HMAC-SHA256 of the nonce under the job's token).
// Before it only frames of kMaxPreAuthPayload bytes are read; the limits
// are ckpt/limits.h's.
#ifndef CKPT_PEER_PEER_WIRE_H_
#define CKPT_PEER_PEER_WIRE_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "ckpt/limits.h"
#include "net/wire.h"

namespace ckpt::peer {

inline constexpr uint32_t kMagic = 0x4d504b43;  // "CKPM" little-endian
inline constexpr size_t kHeaderSize = wire::kHeaderSize;
inline constexpr size_t kNonceSize = wire::kNonceSize;
inline constexpr size_t kMacSize = wire::kMacSize;
/// Puts send a file in pieces of this size from its start, and reads are
/// split at the same boundaries: the holder keeps each piece's checksum as
/// it arrived and answers a read of a whole piece with it, without hashing
/// what it sends. A read then also proves that the holder's memory still
/// holds what the writer sent.
inline constexpr uint64_t kPieceBytes = uint64_t{1} << 20;
/// Bulk bytes go through a buffer of this size on both ends: the kernel
/// copies between the socket and the same few cache-hot pages, and the
/// program copies them to or from the file. On hosts where the kernel's
/// access to a page of a process is expensive the first time (virtual
/// machines with shadow page tables), sending or receiving straight from a
/// gigabyte-sized file ran far below the loopback rate (docs/performance.md,
/// "Figures behind the code").
inline constexpr size_t kBounceBytes = size_t{256} << 10;

enum class Op : uint8_t {
  kHello = 1,       ///< S->C: str nonce, str endpoint, str domain
  kAuth = 2,        ///< C->S: str mac
  kOk = 3,          ///< S->C: the request's result (may be empty)
  kError = 4,       ///< S->C: a status (util/status_wire.h)
  kPutBegin = 5,    ///< C->S: str path, var size, svar generation -> ok | error (budget)
  kPutData = 6,     ///< C->S: argument = offset, payload = bytes; no reply
  kPutEnd = 7,      ///< C->S: u64 xxh3 of the whole file -> ok | error
  kGet = 8,         ///< C->S: str path, var offset, var length -> data | error
  kData = 9,        ///< S->C: argument = offset, payload = bytes
  kStat = 10,       ///< C->S: str path -> ok(var size) | error
  kList = 11,       ///< C->S: str dir -> ok(var n, n x (str name, u8 is_dir)) | error
  kRemove = 12,     ///< C->S: str path -> ok | error
  kRemoveAll = 13,  ///< C->S: str dir -> ok
  kDropBefore = 14  ///< C->S: svar step -> ok
};

const char* OpName(Op op);
/// The protocol on net/wire.h's frames.
extern const wire::Protocol kPeerProtocol;

struct Header {
  Op op = Op::kOk;
  uint64_t length = 0;
  uint64_t arg = 0;
  uint64_t checksum = 0;
};

void EncodeHeader(Op op, uint64_t length, uint64_t arg, uint64_t checksum, uint8_t out[kHeaderSize]);
/// Header and payload in one string.
std::string Frame(Op op, std::string_view payload, uint64_t arg = 0);
/// Parses a header; InvalidArgument naming what is wrong (magic, version,
/// op, a payload over `max_payload`).
absl::StatusOr<Header> ParseHeader(const uint8_t* bytes, uint64_t max_payload);
/// The payload limit of a frame of kind `op` once authenticated.
uint64_t PayloadLimit(Op op);

/// HMAC-SHA256 under `token` of what a client signs for `nonce`.
std::array<uint8_t, kMacSize> AuthMac(std::string_view token, std::string_view nonce);
/// Whether `a` (as received) is the MAC `b`, in constant time.
bool MacEqual(std::string_view a, const std::array<uint8_t, kMacSize>& b);

}  // namespace ckpt::peer

#endif  // CKPT_PEER_PEER_WIRE_H_

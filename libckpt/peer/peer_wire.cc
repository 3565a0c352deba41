#include "peer/peer_wire.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "util/bytes.h"
#include "util/crypto.h"
#include "util/errors.h"
#include "util/hash.h"
#include "util/strings.h"

namespace ckpt::peer {

const char* OpName(Op op) {
  switch (op) {
    case Op::kHello:
      return "hello";
    case Op::kAuth:
      return "auth";
    case Op::kOk:
      return "ok";
    case Op::kError:
      return "error";
    case Op::kPutBegin:
      return "put-begin";
    case Op::kPutData:
      return "put-data";
    case Op::kPutEnd:
      return "put-end";
    case Op::kGet:
      return "get";
    case Op::kData:
      return "data";
    case Op::kStat:
      return "stat";
    case Op::kList:
      return "list";
    case Op::kRemove:
      return "remove";
    case Op::kRemoveAll:
      return "remove-all";
    case Op::kDropBefore:
      return "drop-before";
  }
  return "unknown";
}

namespace {
const char* KindName(uint16_t kind) { return OpName(static_cast<Op>(kind)); }
}  // namespace

const wire::Protocol kPeerProtocol{kMagic, "peer-memory", static_cast<uint16_t>(Op::kHello),
                                   static_cast<uint16_t>(Op::kDropBefore), KindName};

void EncodeHeader(Op op, uint64_t length, uint64_t arg, uint64_t checksum, uint8_t out[kHeaderSize]) {
  wire::EncodeHeader(kPeerProtocol, static_cast<uint16_t>(op), length, arg, checksum, out);
}

std::string Frame(Op op, std::string_view payload, uint64_t arg) {
  return wire::EncodeFrame(kPeerProtocol, static_cast<uint16_t>(op), arg, payload);
}

uint64_t PayloadLimit(Op op) {
  return op == Op::kPutData || op == Op::kData ? kMaxPeerDataPayload : kMaxPeerControlPayload;
}

absl::StatusOr<Header> ParseHeader(const uint8_t* b, uint64_t max_payload) {
  // The kind first, for the limit of its kind.
  CKPT_ASSIGN_OR_RETURN(const wire::Header w, wire::ParseHeader(kPeerProtocol, b, max_payload));
  Header h;
  h.op = static_cast<Op>(w.kind);
  h.length = w.length;
  h.arg = w.tag;
  h.checksum = w.checksum;
  const uint64_t limit = std::min(max_payload, PayloadLimit(h.op));
  if (h.length > limit) {
    return absl::InvalidArgumentError(
        StrCat(OpName(h.op), " frame of ", h.length, " bytes exceeds the limit of ", limit));
  }
  return h;
}

std::array<uint8_t, kMacSize> AuthMac(std::string_view token, std::string_view nonce) {
  ByteWriter w;
  w.Str("ckpt-peer-v1");
  w.Str(nonce);
  return wire::Mac(token, w.Take());
}

bool MacEqual(std::string_view a, const std::array<uint8_t, kMacSize>& b) {
  return a.size() == kMacSize && wire::MacEqual(reinterpret_cast<const uint8_t*>(a.data()), b.data());
}

}  // namespace ckpt::peer

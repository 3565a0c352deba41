#include "peer/peer_wire.h"

#include <openssl/crypto.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "util/bytes.h"
#include "util/crypto.h"
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

void EncodeHeader(Op op, uint64_t length, uint64_t arg, uint64_t checksum, uint8_t out[kHeaderSize]) {
  StoreLE32(out, kMagic);
  out[4] = kVersion;
  out[5] = static_cast<uint8_t>(op);
  out[6] = out[7] = 0;
  StoreLE64(out + 8, length);
  StoreLE64(out + 16, arg);
  StoreLE64(out + 24, checksum);
}

std::string Frame(Op op, std::string_view payload, uint64_t arg) {
  std::string out(kHeaderSize, '\0');
  EncodeHeader(op, payload.size(), arg, Xxh3(payload), reinterpret_cast<uint8_t*>(out.data()));
  out.append(payload);
  return out;
}

uint64_t PayloadLimit(Op op) { return op == Op::kPutData || op == Op::kData ? kMaxChunk : kMaxControlPayload; }

absl::StatusOr<Header> ParseHeader(const uint8_t* b, uint64_t max_payload) {
  const uint32_t magic = LoadLE32(b);
  if (magic != kMagic) {
    return absl::InvalidArgumentError(absl::StrCat("not a peer-memory frame (magic 0x", absl::Hex(magic), ")"));
  }
  if (b[4] != kVersion) {
    return absl::InvalidArgumentError(
        StrCat("peer-memory protocol version ", int{b[4]}, " (this build speaks ", int{kVersion}, ")"));
  }
  const uint8_t op = b[5];
  if (op < static_cast<uint8_t>(Op::kHello) || op > static_cast<uint8_t>(Op::kDropBefore)) {
    return absl::InvalidArgumentError(StrCat("unknown peer-memory op ", int{op}));
  }
  Header h;
  h.op = static_cast<Op>(op);
  h.length = LoadLE64(b + 8);
  h.arg = LoadLE64(b + 16);
  h.checksum = LoadLE64(b + 24);
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
  return HmacSha256(token, w.Take());
}

bool MacEqual(std::string_view a, const std::array<uint8_t, kMacSize>& b) {
  return a.size() == kMacSize && CRYPTO_memcmp(a.data(), b.data(), kMacSize) == 0;
}

std::string Nonce() { return RandomBytes(kNonceSize); }

}  // namespace ckpt::peer

#include "net/wire.h"

#include "absl/strings/str_cat.h"
#include "util/bytes.h"
#include "util/crypto.h"
#include "util/hash.h"
#include "util/strings.h"

namespace ckpt::wire {

void EncodeHeader(const Protocol& p, uint16_t kind, uint64_t length, uint64_t tag, uint64_t checksum,
                  uint8_t out[kHeaderSize]) {
  StoreLE32(out, p.magic);
  out[4] = kFrameVersion;
  out[5] = 0;
  StoreLE16(out + 6, kind);
  StoreLE64(out + 8, length);
  StoreLE64(out + 16, tag);
  StoreLE64(out + 24, checksum);
}

std::string EncodeFrame(const Protocol& p, uint16_t kind, uint64_t tag, std::string_view payload) {
  std::string out(kHeaderSize, '\0');
  EncodeHeader(p, kind, payload.size(), tag, Xxh3(payload), reinterpret_cast<uint8_t*>(out.data()));
  out.append(payload);
  return out;
}

absl::StatusOr<Header> ParseHeader(const Protocol& p, const uint8_t* b, uint64_t max_payload) {
  const uint32_t magic = LoadLE32(b);
  if (magic != p.magic) {
    return absl::InvalidArgumentError(StrCat("not a ckpt ", p.name, " frame (magic 0x", absl::Hex(magic), ")"));
  }
  if (b[4] != kFrameVersion) {
    return absl::InvalidArgumentError(
        StrCat(p.name, " frame version ", int{b[4]}, " is not supported (this side speaks ", int{kFrameVersion}, ")"));
  }
  if (b[5] != 0) return absl::InvalidArgumentError(StrCat("unknown ", p.name, " frame flags 0x", absl::Hex(b[5])));
  Header h;
  h.kind = LoadLE16(b + 6);
  if (h.kind < p.first_kind || h.kind > p.last_kind) {
    return absl::InvalidArgumentError(StrCat("unknown ", p.name, " message kind ", h.kind));
  }
  h.length = LoadLE64(b + 8);
  h.tag = LoadLE64(b + 16);
  h.checksum = LoadLE64(b + 24);
  if (h.length > max_payload) {
    return absl::InvalidArgumentError(
        StrCat(p.kind_name(h.kind), " frame of ", h.length, " bytes exceeds the limit of ", max_payload));
  }
  return h;
}

absl::Status CheckPayload(const Protocol& p, const Header& h, std::string_view payload) {
  if (Xxh3(payload) != h.checksum) {
    return absl::InvalidArgumentError(StrCat(p.kind_name(h.kind), " frame: payload checksum mismatch"));
  }
  return absl::OkStatus();
}

std::string Nonce() { return RandomBytes(kNonceSize); }

std::array<uint8_t, kMacSize> Mac(std::string_view token, std::string_view message) {
  return HmacSha256(token, message);
}

bool MacEqual(const uint8_t* a, const uint8_t* b) {
  uint8_t diff = 0;
  for (size_t i = 0; i < kMacSize; ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

absl::Status CheckTokenStrength(std::string_view token) {
  constexpr char kHowTo[] = "make one with: (umask 077; head -c 32 /dev/urandom | base64 > TOKEN_FILE)";
  if (token.find_first_not_of(" \t\r\n\v\f") == std::string_view::npos) {
    return absl::InvalidArgumentError(StrCat("the job token is only whitespace (", kHowTo, ")"));
  }
  if (token.size() < kMinTokenBytes) {
    return absl::InvalidArgumentError(StrCat("the job token has ", token.size(), " byte(s); at least ", kMinTokenBytes,
                                             " are required (", kHowTo, ")"));
  }
  return absl::OkStatus();
}

}  // namespace ckpt::wire

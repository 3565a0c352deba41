#include "coordinator/protocol.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "ckpt/coordinator.h"
#include "util/bytes.h"
#include "util/crypto.h"
#include "util/errors.h"
#include "util/hash.h"
#include "util/strings.h"

namespace ckpt::coord {

const char* MsgTypeName(MsgType t) {
  switch (t) {
    case MsgType::kHello:
      return "hello";
    case MsgType::kJoin:
      return "join";
    case MsgType::kAssign:
      return "assign";
    case MsgType::kHeartbeat:
      return "heartbeat";
    case MsgType::kHeartbeatAck:
      return "heartbeat-ack";
    case MsgType::kStop:
      return "stop";
    case MsgType::kCollective:
      return "collective";
    case MsgType::kCollectiveResult:
      return "collective-result";
    case MsgType::kVote:
      return "vote";
    case MsgType::kDecide:
      return "decide";
    case MsgType::kDecision:
      return "decision";
    case MsgType::kPublished:
      return "published";
    case MsgType::kAwaitOutcome:
      return "await-outcome";
    case MsgType::kOutcome:
      return "outcome";
    case MsgType::kStatus:
      return "status";
    case MsgType::kStatusReply:
      return "status-reply";
    case MsgType::kAck:
      return "ack";
    case MsgType::kError:
      return "error";
    case MsgType::kLeave:
      return "leave";
  }
  return "unknown";
}

std::string EncodeFrame(MsgType type, uint64_t request_id, std::string_view payload) {
  ByteWriter w;
  w.U32(kFrameMagic);
  w.U8(kProtocolVersion);
  w.U8(0);  // flags, reserved
  w.U16(static_cast<uint16_t>(type));
  w.U64(request_id);
  w.U32(static_cast<uint32_t>(payload.size()));
  w.U32(static_cast<uint32_t>(Xxh3(payload)));
  w.Raw(payload.data(), payload.size());
  return w.Take();
}

absl::StatusOr<FrameHeader> ParseHeader(const uint8_t* b, uint32_t max_payload) {
  if (LoadLE32(b) != kFrameMagic) {
    return absl::InvalidArgumentError(StrCat("not a ckpt coordinator frame (magic 0x", absl::Hex(LoadLE32(b)), ")"));
  }
  FrameHeader h;
  h.version = b[4];
  if (h.version != kProtocolVersion) {
    return absl::InvalidArgumentError(
        StrCat("protocol version ", h.version, " is not supported (this side speaks ", kProtocolVersion, ")"));
  }
  if (b[5] != 0) return absl::InvalidArgumentError(StrCat("unknown frame flags 0x", absl::Hex(b[5])));
  h.type = static_cast<MsgType>(LoadLE16(b + 6));
  if (static_cast<uint16_t>(h.type) < 1 || static_cast<uint16_t>(h.type) > 19) {
    return absl::InvalidArgumentError(StrCat("unknown message type ", LoadLE16(b + 6)));
  }
  h.request_id = LoadLE64(b + 8);
  h.length = LoadLE32(b + 16);
  h.checksum = LoadLE32(b + 20);
  if (h.length > max_payload) {
    return absl::InvalidArgumentError(
        StrCat(MsgTypeName(h.type), " frame of ", h.length, " bytes exceeds the limit of ", max_payload));
  }
  return h;
}

absl::Status CheckPayload(const FrameHeader& h, std::string_view payload) {
  if (static_cast<uint32_t>(Xxh3(payload)) != h.checksum) {
    return absl::InvalidArgumentError(StrCat(MsgTypeName(h.type), " frame: payload checksum mismatch"));
  }
  return absl::OkStatus();
}

std::array<uint8_t, kMacSize> Hmac(std::string_view key, std::string_view message) { return HmacSha256(key, message); }

std::string JoinChallenge(std::string_view nonce, std::string_view job, std::string_view host) {
  ByteWriter w;
  w.Str("ckpt-join-v1");
  w.Str(nonce);
  w.Str(job);
  w.Str(host);
  return w.Take();
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

bool MacEqual(const uint8_t* a, const uint8_t* b) {
  uint8_t diff = 0;
  for (size_t i = 0; i < kMacSize; ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

}  // namespace ckpt::coord

namespace ckpt {

absl::StatusOr<std::string> ReadJobToken(const std::string& path) {
  auto opened = OpenRegularFile(path);
  if (!opened.ok()) {
    return absl::InvalidArgumentError(StrCat("cannot read the token file: ", opened.status().message()));
  }
  const int fd = *opened;
  struct stat st {};
  std::string token;
  bool ok = ::fstat(fd, &st) == 0;
  if (ok && (st.st_mode & 077) == 0) {
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof(buf))) > 0 && token.size() < (1u << 20))
      token.append(buf, static_cast<size_t>(n));
    ok = n >= 0;
  }
  const int err = errno;
  ::close(fd);
  if (!ok) return absl::InvalidArgumentError(StrCat("cannot read the token file ", path, ": ", std::strerror(err)));
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return absl::PermissionDeniedError(StrCat("the token file ", path, " has mode ", mode,
                                              ": group and others must have no access (chmod 600 ", path, ")"));
  }
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  if (absl::Status s = coord::CheckTokenStrength(token); !s.ok()) {
    return absl::InvalidArgumentError(StrCat(path, ": ", s.message()));
  }
  return token;
}

}  // namespace ckpt

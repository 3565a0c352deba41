#include "coordinator/protocol.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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
#define CKPT_MSG_NAME_REQUEST(name, number, text, admits) \
  case MsgType::k##name:                                  \
    return text;
#define CKPT_MSG_NAME_REPLY(name, number, text) \
  case MsgType::k##name:                        \
    return text;
    CKPT_COORDINATOR_REQUESTS(CKPT_MSG_NAME_REQUEST)
    CKPT_COORDINATOR_REPLIES(CKPT_MSG_NAME_REPLY)
#undef CKPT_MSG_NAME_REQUEST
#undef CKPT_MSG_NAME_REPLY
  }
  return "unknown";
}

namespace {
const char* KindName(uint16_t kind) { return MsgTypeName(static_cast<MsgType>(kind)); }

// The kinds span 1 to the largest number in the lists.
#define CKPT_MSG_NUMBER_REQUEST(name, number, text, admits) number,
#define CKPT_MSG_NUMBER_REPLY(name, number, text) number,
constexpr uint16_t kLastKind =
    std::max({CKPT_COORDINATOR_REQUESTS(CKPT_MSG_NUMBER_REQUEST) CKPT_COORDINATOR_REPLIES(CKPT_MSG_NUMBER_REPLY)});
#undef CKPT_MSG_NUMBER_REQUEST
#undef CKPT_MSG_NUMBER_REPLY
}  // namespace

const wire::Protocol kCoordinatorProtocol{kFrameMagic, "coordinator", 1, kLastKind, KindName};

std::string EncodeFrame(MsgType type, uint64_t request_id, std::string_view payload) {
  return wire::EncodeFrame(kCoordinatorProtocol, static_cast<uint16_t>(type), request_id, payload);
}

absl::StatusOr<FrameHeader> ParseHeader(const uint8_t* b, uint64_t max_payload) {
  CKPT_ASSIGN_OR_RETURN(const wire::Header w, wire::ParseHeader(kCoordinatorProtocol, b, max_payload));
  return FrameHeader{static_cast<MsgType>(w.kind), w.tag, w.length, w.checksum};
}

absl::Status CheckPayload(const FrameHeader& h, std::string_view payload) {
  return wire::CheckPayload(kCoordinatorProtocol,
                            wire::Header{static_cast<uint16_t>(h.type), h.length, h.request_id, h.checksum}, payload);
}

std::string JoinChallenge(std::string_view nonce, std::string_view job, std::string_view host) {
  ByteWriter w;
  w.Str("ckpt-join-v1");
  w.Str(nonce);
  w.Str(job);
  w.Str(host);
  return w.Take();
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
  if (absl::Status s = wire::CheckTokenStrength(token); !s.ok()) {
    return absl::InvalidArgumentError(StrCat(path, ": ", s.message()));
  }
  return token;
}

}  // namespace ckpt

#include "peer/peer_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "util/bytes.h"
#include "util/errors.h"
#include "util/hash.h"
#include "util/status_wire.h"
#include "util/strings.h"

namespace ckpt::peer {
namespace {

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Waits until fd is ready for `events` or the deadline passes.
absl::Status WaitFd(int fd, short events, double deadline, std::string_view endpoint, std::string_view doing) {
  for (;;) {
    const double left = deadline - Now();
    if (left <= 0) {
      return absl::DeadlineExceededError(StrCat("peer ", endpoint, ": no progress ", doing, " in time"));
    }
    pollfd p{fd, events, 0};
    const int r = poll(&p, 1, static_cast<int>(std::min(left * 1000 + 1, 1e9)));
    if (r > 0) return absl::OkStatus();
    if (r < 0 && errno != EINTR)
      return absl::UnavailableError(StrCat("peer ", endpoint, ": poll: ", std::strerror(errno)));
  }
}

}  // namespace

PeerConnection::PeerConnection(int fd, std::string endpoint, double timeout_s)
    : fd_(fd), endpoint_(std::move(endpoint)), timeout_s_(timeout_s) {}

PeerConnection::~PeerConnection() {
  if (fd_ >= 0) close(fd_);
}

absl::Status PeerConnection::Fail(absl::Status s) {
  broken_ = true;
  return s;
}

absl::StatusOr<std::unique_ptr<PeerConnection>> PeerConnection::Open(const std::string& endpoint,
                                                                     std::string_view token, double timeout_s) {
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(StrCat("peer address wants HOST:PORT, got '", endpoint, "'"));
  }
  std::string host = endpoint.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port = endpoint.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int e = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); e != 0) {
    return absl::UnavailableError(StrCat("peer ", endpoint, ": resolving: ", gai_strerror(e)));
  }
  const double deadline = Now() + timeout_s;
  int fd = -1;
  std::string why = "no address";
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    int rc = connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      absl::Status w = WaitFd(fd, POLLOUT, deadline, endpoint, "connecting");
      int err = 0;
      socklen_t len = sizeof(err);
      if (w.ok()) getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (!w.ok()) {
        why = std::string(w.message());
        rc = -1;
      } else if (err != 0) {
        why = std::strerror(err);
        rc = -1;
      } else {
        rc = 0;
      }
    } else if (rc != 0) {
      why = std::strerror(errno);
    }
    if (rc != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) return absl::UnavailableError(StrCat("peer ", endpoint, ": connecting: ", why));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  int big = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
  // Blocking from here on, each call bounded by the timeout: a 4 MiB frame
  // then arrives in one recv (MSG_WAITALL) and leaves in one send, where a
  // non-blocking socket took a poll and a recv per 64 KiB (system calls are
  // what loopback transfers cost most on virtual machines).
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout_s);
  tv.tv_usec = static_cast<suseconds_t>((timeout_s - static_cast<double>(tv.tv_sec)) * 1e6);
  if (tv.tv_sec == 0 && tv.tv_usec == 0) tv.tv_usec = 1000;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  std::unique_ptr<PeerConnection> c(new PeerConnection(fd, endpoint, timeout_s));
  // hello
  auto h = c->RecvHeader(kMaxPreAuthPayload);
  if (!h.ok()) return h.status();
  std::string payload(h->length, '\0');
  CKPT_RETURN_IF_ERROR(c->RecvExact(payload.data(), payload.size()));
  if (h->op != Op::kHello || Xxh3(payload) != h->checksum) {
    return absl::DataLossError(StrCat("peer ", endpoint, " did not greet like a ckpt peer memory"));
  }
  ByteReader r(payload, StrCat("hello from peer ", endpoint));
  const std::string nonce = r.Str(256);
  (void)r.Str(1024);  // its endpoint as it sees itself
  c->domain_ = r.Str(1024);
  if (!r.ok() || nonce.size() != kNonceSize) {
    return absl::DataLossError(StrCat("peer ", endpoint, " sent a malformed hello"));
  }
  const auto mac = AuthMac(token, nonce);
  ByteWriter w;
  w.Str(std::string_view(reinterpret_cast<const char*>(mac.data()), mac.size()));
  CKPT_RETURN_IF_ERROR(c->SendFrame(Op::kAuth, w.Take()));
  auto ok = c->Reply("auth");
  if (!ok.ok()) return ok.status();
  return c;
}

absl::Status PeerConnection::Send(std::string_view bytes) {
  const double deadline = Now() + timeout_s_;
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
      if (done < bytes.size() && Now() > deadline) {
        return Fail(
            absl::DeadlineExceededError(StrCat("peer ", endpoint_, ": sending: not done within ", timeout_s_, " s")));
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      absl::Status w = WaitFd(fd_, POLLOUT, deadline, endpoint_, "sending");
      if (!w.ok()) return Fail(w);
      continue;
    }
    return Fail(absl::UnavailableError(StrCat("peer ", endpoint_, ": sending: ", std::strerror(errno))));
  }
  return absl::OkStatus();
}

absl::Status PeerConnection::SendFrame(Op op, std::string_view payload, uint64_t arg) {
  return Send(Frame(op, payload, arg));
}

absl::Status PeerConnection::RecvExact(void* dst, size_t n) {
  const double deadline = Now() + timeout_s_;
  char* p = static_cast<char*>(dst);
  size_t done = 0;
  while (done < n) {
    const ssize_t r = recv(fd_, p + done, n - done, MSG_WAITALL);
    if (r > 0) {
      done += static_cast<size_t>(r);
      if (done < n && Now() > deadline) {
        return Fail(
            absl::DeadlineExceededError(StrCat("peer ", endpoint_, ": receiving: not done within ", timeout_s_, " s")));
      }
      continue;
    }
    if (r == 0) return Fail(absl::UnavailableError(StrCat("peer ", endpoint_, " closed the connection")));
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      absl::Status w = WaitFd(fd_, POLLIN, deadline, endpoint_, "receiving");
      if (!w.ok()) return Fail(w);
      continue;
    }
    return Fail(absl::UnavailableError(StrCat("peer ", endpoint_, ": receiving: ", std::strerror(errno))));
  }
  return absl::OkStatus();
}

char* PeerConnection::bounce() {
  if (bounce_ == nullptr) bounce_ = std::make_unique<char[]>(kBounceBytes);
  return bounce_.get();
}

absl::Status PeerConnection::SendBulk(std::string_view bytes, Xxh3Stream* sum) {
  char* b = bounce();
  for (size_t off = 0; off < bytes.size(); off += kBounceBytes) {
    const size_t n = std::min(kBounceBytes, bytes.size() - off);
    std::memcpy(b, bytes.data() + off, n);
    if (sum != nullptr) sum->Update(b, n);
    CKPT_RETURN_IF_ERROR(Send(std::string_view(b, n)));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> PeerConnection::RecvBulk(std::byte* dst, size_t n) {
  char* b = bounce();
  Xxh3Stream sum;
  for (size_t off = 0; off < n; off += kBounceBytes) {
    const size_t k = std::min(kBounceBytes, n - off);
    CKPT_RETURN_IF_ERROR(RecvExact(b, k));
    sum.Update(b, k);
    std::memcpy(dst + off, b, k);
  }
  return sum.Digest();
}

absl::StatusOr<Header> PeerConnection::RecvHeader(uint64_t max_payload) {
  uint8_t b[kHeaderSize];
  CKPT_RETURN_IF_ERROR(RecvExact(b, sizeof(b)));
  auto h = ParseHeader(b, max_payload);
  if (!h.ok()) return Fail(absl::DataLossError(StrCat("peer ", endpoint_, " sent garbage: ", h.status().message())));
  return h;
}

absl::StatusOr<std::string> PeerConnection::Reply(std::string_view what) {
  auto h = RecvHeader(kMaxPeerControlPayload);
  if (!h.ok()) return h.status();
  std::string payload(h->length, '\0');
  CKPT_RETURN_IF_ERROR(RecvExact(payload.data(), payload.size()));
  if (Xxh3(payload) != h->checksum) {
    return Fail(absl::DataLossError(StrCat("peer ", endpoint_, ": checksum mismatch in the reply to ", what)));
  }
  if (h->op == Op::kError) {
    ByteReader r(payload, StrCat("error from peer ", endpoint_));
    absl::Status s = ReadStatus(r);
    if (!r.ok() || s.ok()) return Fail(absl::DataLossError(StrCat("peer ", endpoint_, " sent a malformed error")));
    // A refusal (budget, not found) leaves the connection usable; a refused
    // token does not.
    if (absl::IsPermissionDenied(s)) broken_ = true;
    return absl::Status(s.code(), StrCat("peer ", endpoint_, ": ", s.message()));
  }
  if (h->op != Op::kOk) {
    return Fail(absl::DataLossError(StrCat("peer ", endpoint_, " answered ", what, " with ", OpName(h->op))));
  }
  return payload;
}

absl::Status PeerConnection::Put(std::string_view path, absl::Span<const std::byte> data, int64_t generation,
                                 RatePacer* pacer) {
  ByteWriter w;
  w.Str(path);
  w.Var(data.size());
  w.SVar(generation);
  CKPT_RETURN_IF_ERROR(SendFrame(Op::kPutBegin, w.Take()));
  auto begun = Reply(StrCat("put ", path));
  if (!begun.ok()) return begun.status();
  const std::string_view all(reinterpret_cast<const char*>(data.data()), data.size());
  Xxh3Stream whole;  // of what left this process, through the bounce buffer
  for (uint64_t off = 0; off < data.size(); off += kPieceBytes) {
    const std::string_view part = all.substr(off, kPieceBytes);
    if (pacer != nullptr) pacer->Charge(static_cast<double>(part.size()));
    uint8_t hdr[kHeaderSize];
    EncodeHeader(Op::kPutData, part.size(), off, Xxh3(part), hdr);
    CKPT_RETURN_IF_ERROR(Send(std::string_view(reinterpret_cast<const char*>(hdr), sizeof(hdr))));
    CKPT_RETURN_IF_ERROR(SendBulk(part, &whole));
  }
  ByteWriter e;
  e.U64(whole.Digest());
  CKPT_RETURN_IF_ERROR(SendFrame(Op::kPutEnd, e.Take()));
  return Reply(StrCat("put ", path)).status();
}

absl::Status PeerConnection::Get(std::string_view path, uint64_t offset, absl::Span<std::byte> dst) {
  // Every request first (they are small), then the replies in order: the
  // peer streams one frame while the next request waits in its socket.
  // Requests end on the file's piece boundaries, so that all but the first
  // and last are whole pieces (see kPieceBytes).
  auto piece_end = [&](uint64_t off) {
    const uint64_t at = offset + off;
    return std::min<uint64_t>(dst.size(), (at / kPieceBytes + 1) * kPieceBytes - offset);
  };
  std::string requests;
  for (uint64_t off = 0; off < dst.size(); off = piece_end(off)) {
    ByteWriter w;
    w.Str(path);
    w.Var(offset + off);
    w.Var(piece_end(off) - off);
    requests += Frame(Op::kGet, w.Take());
  }
  if (dst.empty()) {
    ByteWriter w;
    w.Str(path);
    w.Var(offset);
    w.Var(0);
    requests += Frame(Op::kGet, w.Take());
  }
  CKPT_RETURN_IF_ERROR(Send(requests));
  uint64_t off = 0;
  do {
    const uint64_t want = dst.empty() ? 0 : piece_end(off) - off;
    auto h = RecvHeader(kMaxPeerControlPayload);
    if (!h.ok()) return h.status();
    if (h->op == Op::kError) {
      std::string payload(h->length, '\0');
      CKPT_RETURN_IF_ERROR(RecvExact(payload.data(), payload.size()));
      ByteReader r(payload, StrCat("error from peer ", endpoint_));
      absl::Status s = ReadStatus(r);
      broken_ = true;  // replies to the other requests are still coming
      if (!r.ok() || s.ok()) return absl::DataLossError(StrCat("peer ", endpoint_, " sent a malformed error"));
      return absl::Status(s.code(), StrCat("peer ", endpoint_, ": ", s.message()));
    }
    if (h->op != Op::kData || h->length != want || h->arg != offset + off) {
      return Fail(
          absl::DataLossError(StrCat("peer ", endpoint_, " answered a read of ", path, " at byte offset ", offset + off,
                                     " with ", OpName(h->op), " of ", h->length, " bytes at offset ", h->arg)));
    }
    auto sum = RecvBulk(dst.data() + off, want);
    if (!sum.ok()) return sum.status();
    if (*sum != h->checksum) {
      return Fail(absl::DataLossError(StrCat("peer ", endpoint_, ": checksum mismatch in ", path, " bytes [",
                                             offset + off, ", ", offset + off + want, ")")));
    }
    off += want;
  } while (off < dst.size());
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> PeerConnection::Stat(std::string_view path) {
  ByteWriter w;
  w.Str(path);
  CKPT_RETURN_IF_ERROR(SendFrame(Op::kStat, w.Take()));
  auto p = Reply(StrCat("stat ", path));
  if (!p.ok()) return p.status();
  ByteReader r(*p, StrCat("stat reply from peer ", endpoint_));
  const uint64_t size = r.Var();
  if (!r.ok()) return Fail(r.status());
  return size;
}

absl::StatusOr<std::vector<DirEntry>> PeerConnection::List(std::string_view dir) {
  ByteWriter w;
  w.Str(dir);
  CKPT_RETURN_IF_ERROR(SendFrame(Op::kList, w.Take()));
  auto p = Reply(StrCat("list ", dir));
  if (!p.ok()) return p.status();
  ByteReader r(*p, StrCat("listing from peer ", endpoint_));
  const uint64_t n = r.Count(p->size(), "entries");
  std::vector<DirEntry> out;
  for (uint64_t i = 0; i < n && r.ok(); ++i) {
    DirEntry e;
    e.name = r.Str(kMaxPeerPathBytes);
    e.is_dir = r.U8() != 0;
    out.push_back(std::move(e));
  }
  if (!r.ok()) return Fail(r.status());
  return out;
}

absl::Status PeerConnection::Remove(std::string_view path) {
  ByteWriter w;
  w.Str(path);
  CKPT_RETURN_IF_ERROR(SendFrame(Op::kRemove, w.Take()));
  return Reply(StrCat("remove ", path)).status();
}

absl::Status PeerConnection::RemoveAll(std::string_view dir) {
  ByteWriter w;
  w.Str(dir);
  CKPT_RETURN_IF_ERROR(SendFrame(Op::kRemoveAll, w.Take()));
  return Reply(StrCat("remove ", dir)).status();
}

absl::Status PeerConnection::DropBefore(int64_t step) {
  ByteWriter w;
  w.SVar(step);
  CKPT_RETURN_IF_ERROR(SendFrame(Op::kDropBefore, w.Take()));
  return Reply("drop").status();
}

}  // namespace ckpt::peer

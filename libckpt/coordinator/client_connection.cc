// The coordinator client (client_impl.h): connecting to the first replica
// that serves, the frames, the reader thread that matches replies and
// reconnects, and the heartbeat thread.
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "ckpt/coordinator.h"
#include "coordinator/client_impl.h"
#include "coordinator/messages.h"
#include "coordinator/protocol.h"
#include "coordinator/records.h"
#include "util/bytes.h"
#include "util/clock.h"
#include "util/errors.h"
#include "util/status_wire.h"
#include "util/strings.h"

namespace ckpt::coord {

absl::Status ClientImpl::ConnectOnce() {
  std::vector<std::string> addresses;
  for (std::string_view rest = options_.address; !rest.empty();) {
    const size_t comma = rest.find(',');
    addresses.emplace_back(Trim(rest.substr(0, comma)));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  if (addresses.empty()) return absl::InvalidArgumentError("no coordinator address");
  absl::Status last;
  for (size_t i = 0; i < addresses.size(); ++i) {
    const size_t k = (good_address_ + i) % addresses.size();
    last = ConnectTo(addresses[k]);
    if (last.ok()) {
      good_address_ = k;
      return last;
    }
    if (!absl::IsUnavailable(last) && !absl::IsDeadlineExceeded(last)) return last;
  }
  return last;
}

absl::Status ClientImpl::ConnectTo(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(StrCat("coordinator address wants HOST:PORT, got '", address, "'"));
  }
  const std::string host = address.substr(0, colon), port = address.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int e = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); e != 0) {
    return absl::UnavailableError(StrCat("resolving ", address, ": ", gai_strerror(e)));
  }
  int fd = -1;
  int err = 0;
  // Each attempt is bounded: a host cut off answers no SYN, and the
  // kernel would retry for minutes before the next replica is tried.
  const int connect_ms = static_cast<int>(std::max(1.0, 2 * options_.heartbeat_s) * 1000);
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    int rc = connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd pfd{fd, POLLOUT, 0};
      rc = poll(&pfd, 1, connect_ms);
      if (rc == 1) {
        socklen_t len = sizeof(err);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      } else {
        errno = rc == 0 ? ETIMEDOUT : errno;
        rc = -1;
      }
    }
    if (rc != 0) {
      err = errno;
      close(fd);
      fd = -1;
      continue;
    }
    // Blocking again for the exchanges that follow (they bound their own reads).
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  }
  freeaddrinfo(res);
  if (fd < 0) return absl::UnavailableError(StrCat("connecting to ", address, ": ", std::strerror(err)));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // Hello, then (when joined before) resume, synchronously on this fd.
  auto exchange = [&](MsgType type, std::string_view payload) -> absl::StatusOr<Reply> {
    const std::string frame = EncodeFrame(type, 0, payload);
    if (!WriteAll(fd, frame)) return absl::UnavailableError("connection lost");
    return ReadFrame(fd, 10);
  };
  auto hello = exchange(MsgType::kHello, "");
  if (!hello.ok()) {
    close(fd);
    return hello.status();
  }
  auto hello_reply = Decode<HelloReply>(hello->payload);
  if (!hello_reply.ok() || hello->type != MsgType::kHello) {
    close(fd);
    return absl::DataLossError(StrCat(address, " did not answer like a ckpt coordinator"));
  }
  if (!hello_reply->standby_of.empty() && !options_.accept_standby) {
    close(fd);
    return absl::UnavailableError(StrCat(address, " stands by (leader: ", hello_reply->standby_of, ")"));
  }
  const std::string nonce = hello_reply->nonce;
  bool resumed = false, lost_generation = false;
  std::string lost_reason;
  Assignment a;
  bool joined;
  {
    std::lock_guard<std::mutex> lock(mu_);
    joined = joined_;
    a = assignment_;
  }
  if (joined) {
    auto r = exchange(MsgType::kJoin, Encode(JoinFor(nonce, a.generation, true)));
    if (!r.ok()) {
      close(fd);
      return r.status();
    }
    auto parsed = ParseAssign(r->payload);
    if (parsed.ok() && parsed->generation == a.generation) {
      resumed = true;
    } else {
      lost_generation = true;
      lost_reason = parsed.ok() ? "a new generation formed" : std::string(parsed.status().message());
    }
  }
  std::vector<std::string> resend;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fd_ = fd;
    nonce_ = nonce;
    connected_ = true;
    if (lost_generation) {
      joined_ = false;
      stop_requested_ = true;
      stop_reason_ = lost_reason;
    }
    for (auto& [id, p] : pending_) {
      if (p->reply) continue;
      if (p->resend && resumed) {
        resend.push_back(EncodeFrame(p->type, id, p->payload));
      } else if (p->type != MsgType::kStatus && p->type != MsgType::kHeartbeat) {
        p->failure = lost_generation ? absl::AbortedError(StrCat("coordinator: ", lost_reason))
                                     : absl::UnavailableError("the connection to the coordinator was lost");
      }
    }
    if (resumed) {
      for (auto& [key, payload] : votes_) resend.push_back(EncodeFrame(MsgType::kVote, next_id_++, payload));
    }
  }
  cv_.notify_all();
  for (const std::string& f : resend) (void)SendFrame(f);
  return absl::OkStatus();
}

bool ClientImpl::WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

bool ClientImpl::ReadAll(int fd, char* p, size_t n, double timeout_s) {
  const double deadline = timeout_s > 0 ? NowSeconds() + timeout_s : 0;
  while (n > 0) {
    if (deadline > 0) {
      pollfd pfd{fd, POLLIN, 0};
      const int left = static_cast<int>(std::max(0.0, deadline - NowSeconds()) * 1000);
      if (poll(&pfd, 1, left) <= 0) return false;
    }
    const ssize_t got = recv(fd, p, n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

absl::StatusOr<Reply> ClientImpl::ReadFrame(int fd, double timeout_s, uint64_t* request_id) {
  uint8_t header[kHeaderSize];
  if (!ReadAll(fd, reinterpret_cast<char*>(header), kHeaderSize, timeout_s)) {
    return absl::UnavailableError("the connection to the coordinator was lost");
  }
  CKPT_ASSIGN_OR_RETURN(FrameHeader h, ParseHeader(header, kDefaultMaxPayload * 4));
  Reply r;
  r.type = h.type;
  r.payload.resize(h.length);
  if (!ReadAll(fd, r.payload.data(), h.length, timeout_s)) {
    return absl::UnavailableError("the connection to the coordinator was lost");
  }
  CKPT_RETURN_IF_ERROR(CheckPayload(h, r.payload));
  if (request_id != nullptr) *request_id = h.request_id;
  return r;
}

bool ClientImpl::SendFrame(const std::string& frame) {
  std::lock_guard<std::mutex> wl(write_mu_);
  int fd;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!connected_) return false;
    fd = fd_;
  }
  return WriteAll(fd, frame);
}

void ClientImpl::ReadLoop() {
  while (true) {
    int fd;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (shutting_down_) return;
      fd = fd_;
    }
    uint64_t id = 0;
    auto frame = ReadFrame(fd, 0, &id);
    if (frame.ok()) {
      Dispatch(id, std::move(frame).value());
      continue;
    }
    // Lost: reconnect with backoff, resuming where possible. The shutdown
    // wakes a sender blocked on the dead socket; the descriptor is closed
    // only while no sender holds it, so a send never lands on a descriptor
    // this process has since opened for something else.
    {
      std::lock_guard<std::mutex> lock(mu_);
      connected_ = false;
      shutdown(fd_, SHUT_RDWR);
    }
    {
      std::lock_guard<std::mutex> wl(write_mu_);
      std::lock_guard<std::mutex> lock(mu_);
      close(fd_);
      fd_ = -1;
      for (auto& [pid, p] : pending_) {
        if (!p->resend && !p->reply && p->failure.ok()) {
          p->failure = absl::UnavailableError("the connection to the coordinator was lost");
        }
      }
    }
    cv_.notify_all();
    const double give_up = NowSeconds() + options_.reconnect_timeout_s;
    double delay = 0.05;
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (cv_.wait_for(lock, std::chrono::duration<double>(delay), [&] { return shutting_down_; })) return;
      }
      if (ConnectOnce().ok()) break;
      // Replicas: a standby takes over within its lease, so look again
      // often; one coordinator restarting is given more room.
      delay = std::min(delay * 2, options_.address.find(',') != std::string::npos ? 0.25 : 2.0);
      if (NowSeconds() > give_up) {
        std::lock_guard<std::mutex> lock(mu_);
        for (auto& [pid, p] : pending_) {
          if (!p->reply && p->failure.ok()) {
            p->failure = absl::UnavailableError(StrCat("the coordinator at ", options_.address, " is unreachable for ",
                                                       options_.reconnect_timeout_s, " s"));
          }
        }
        stop_requested_ = true;
        stop_reason_ = "the coordinator is unreachable";
        cv_.notify_all();
        // Keep trying in the background (the next round of this loop);
        // calls fail meanwhile.
        break;
      }
    }
  }
}

void ClientImpl::Dispatch(uint64_t id, Reply r) {
  if (r.type == MsgType::kStop) {
    auto stop = Decode<StopPush>(r.payload);
    if (!stop.ok()) return;  // nothing to act on
    std::lock_guard<std::mutex> lock(mu_);
    if (stop->generation != assignment_.generation) return;  // about one this member already left
    stop_requested_ = true;
    stop_reason_ = stop->reason;
    joined_ = false;
    cv_.notify_all();
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(id);
  if (it == pending_.end()) return;  // answered after its caller gave up, or a resent vote
  it->second->reply = std::move(r);
  cv_.notify_all();
}

void ClientImpl::HeartbeatLoop() {
  // Heartbeats in a row that got no answer over a connection that looks
  // open: a partition closes no socket, so a coordinator cut off (or its
  // host) is noticed only by its silence.
  int unanswered = 0;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, std::chrono::duration<double>(options_.heartbeat_s), [&] { return shutting_down_; })) {
        return;
      }
      if (!connected_ || member_id_ == 0) continue;
    }
    const int64_t generation = assignment().generation;
    auto r = Call(MsgType::kHeartbeat, Encode(HeartbeatRequest{member_id_.load(), generation}),
                  options_.heartbeat_s * 2, false);
    if (!r.ok() && absl::IsDeadlineExceeded(r.status()) && ++unanswered >= kSilentHeartbeats) {
      // Dropped: the reader reconnects, to another replica if this one
      // stays silent.
      unanswered = 0;
      std::lock_guard<std::mutex> lock(mu_);
      if (connected_ && fd_ >= 0) shutdown(fd_, SHUT_RDWR);
      continue;
    }
    if (!r.ok() || r->type != MsgType::kHeartbeatAck) continue;
    unanswered = 0;
    auto ack = Decode<HeartbeatAck>(r->payload);
    if (!ack.ok()) continue;
    const bool stop = ack->stop;
    const std::string& reason = ack->reason;
    std::lock_guard<std::mutex> lock(mu_);
    // A stop about a generation this member has since left is stale.
    if (stop && joined_ && assignment_.generation == generation) {
      stop_requested_ = true;
      stop_reason_ = reason;
      joined_ = false;
      cv_.notify_all();
    }
  }
}

}  // namespace ckpt::coord

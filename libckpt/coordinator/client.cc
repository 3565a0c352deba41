// The worker side: one TCP connection, a reader thread that matches replies
// to requests and reconnects (with backoff) when the connection drops, and a
// heartbeat thread. Requests the coordinator treats idempotently
// (collectives, votes, decisions) are sent again after a reconnect.
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
#include "coordinator/messages.h"
#include "coordinator/protocol.h"
#include "coordinator/records.h"
#include "util/bytes.h"
#include "util/clock.h"
#include "util/errors.h"
#include "util/status_wire.h"
#include "util/strings.h"

namespace ckpt {
namespace coord {
namespace {

// Heartbeats in a row without an answer after which a connection that
// looks open is taken for a cut-off coordinator and dropped.
constexpr int kSilentHeartbeats = 3;

struct Reply {
  MsgType type = MsgType::kAck;
  std::string payload;
};

absl::Status DecodeError(std::string_view payload) {
  ByteReader r(payload, "error reply");
  const absl::Status s = ReadStatus(r);
  if (!r.ok()) return r.status();
  return absl::Status(s.ok() ? absl::StatusCode::kUnknown : s.code(), StrCat("coordinator: ", s.message()));
}

// The step's decision, or why the reply does not decode.
absl::Status DecisionOf(std::string_view payload) {
  absl::Status decision;
  if (absl::Status s = DecodeDecision(payload, &decision); !s.ok()) return s;
  return decision;
}

class ClientImpl;

class CoordinatorComm final : public Communicator {
 public:
  CoordinatorComm(ClientImpl& client, int local_rank) : client_(client), local_rank_(local_rank) {}
  int rank() const override;
  int size() const override;
  absl::StatusOr<std::vector<std::string>> Gather(std::string_view mine, double timeout_s) override;
  absl::StatusOr<std::string> Scatter(const std::vector<std::string>& from_leader, double timeout_s) override;
  absl::StatusOr<std::string> Broadcast(std::string_view from_leader, double timeout_s) override;
  absl::Status Barrier(double timeout_s) override;
  /// Calls go through the client's connection, under its lock.
  bool CallableFromAnyThread() const override { return true; }

 private:
  absl::StatusOr<std::string> Run(CollectiveOp op, std::string part, double timeout_s);
  ClientImpl& client_;
  int local_rank_;
  int64_t generation_ = -1;
  uint64_t seq_ = 0;
};

class CoordinatorArbiter final : public CommitArbiter {
 public:
  CoordinatorArbiter(ClientImpl& client, uint8_t level) : client_(client), level_(level) {}
  absl::Status Vote(int rank, int64_t step, const SaveVote& vote) override;
  absl::Status AwaitDecision(int64_t step, double timeout_s) override;
  absl::Status Published(int64_t step, const absl::Status& outcome) override;
  absl::Status AwaitOutcome(int64_t step, double timeout_s) override;

 private:
  int64_t Key(int64_t step) const { return StepKey(step, level_ == kMemoryLevel); }
  ClientImpl& client_;
  const uint8_t level_;
};

class ClientImpl final : public CoordinatorClient {
 public:
  explicit ClientImpl(CoordinatorClientOptions o) : options_(std::move(o)) {
    if (options_.host.empty()) {
      char name[256] = {};
      gethostname(name, sizeof(name) - 1);
      options_.host = StrCat(name, ":", getpid());
    }
  }

  ~ClientImpl() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      shutting_down_ = true;
    }
    cv_.notify_all();
    CloseSocket();
    if (heartbeat_.joinable()) heartbeat_.join();
    if (reader_.joinable()) reader_.join();
  }

  absl::Status Start() {
    CKPT_RETURN_IF_ERROR(ConnectOnce());
    reader_ = std::thread([this] { ReadLoop(); });
    heartbeat_ = std::thread([this] { HeartbeatLoop(); });
    return absl::OkStatus();
  }

  // ---------------- CoordinatorClient ----------------
  absl::StatusOr<Assignment> Join(double timeout_s) override {
    CKPT_RETURN_IF_ERROR(CheckTokenStrength(options_.token));
    const double deadline = NowSeconds() + timeout_s;
    while (true) {
      std::string nonce;
      {
        std::lock_guard<std::mutex> lock(mu_);
        nonce = nonce_;
      }
      auto reply = Call(MsgType::kJoin, Encode(JoinFor(nonce, -1, false)), deadline - NowSeconds(), /*resend=*/false);
      if (!reply.ok()) {
        if (absl::IsUnavailable(reply.status()) && NowSeconds() < deadline) continue;  // reconnected: sign again
        return reply.status();
      }
      auto a = ParseAssign(reply->payload);
      if (!a.ok()) return a.status();
      {
        std::lock_guard<std::mutex> lock(mu_);
        assignment_ = *a;
        joined_ = true;
        stop_requested_ = false;
        stop_reason_.clear();
      }
      return *a;
    }
  }

  std::shared_ptr<Communicator> communicator(int local_rank) override {
    return std::make_shared<CoordinatorComm>(*this, local_rank);
  }
  std::shared_ptr<CommitArbiter> arbiter() override { return std::make_shared<CoordinatorArbiter>(*this, 0); }
  std::shared_ptr<CommitArbiter> memory_arbiter() override {
    return std::make_shared<CoordinatorArbiter>(*this, kMemoryLevel);
  }

  bool stop_requested() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stop_requested_;
  }
  std::string stop_reason() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stop_reason_;
  }

  absl::StatusOr<std::string> Status(bool text) override {
    CKPT_ASSIGN_OR_RETURN(Reply r, Call(MsgType::kStatus, Encode(StatusRequest{text}), 10, false));
    return DecodeBytes(r.payload, kMaxStatusBytes, "status reply");
  }

  absl::Status Leave() override {
    auto r = Call(MsgType::kLeave, Encode(LeaveRequest{member_id_.load()}), 10, false);
    std::lock_guard<std::mutex> lock(mu_);
    joined_ = false;
    return r.status();
  }

  // ---------------- used by the communicator and arbiter ----------------
  Assignment assignment() const {
    std::lock_guard<std::mutex> lock(mu_);
    return assignment_;
  }

  absl::StatusOr<Reply> Call(MsgType type, std::string payload, double timeout_s, bool resend) {
    auto p = std::make_shared<Pending>();
    uint64_t id;
    {
      std::lock_guard<std::mutex> lock(mu_);
      id = next_id_++;
      p->type = type;
      p->payload = std::move(payload);
      p->resend = resend;
      pending_[id] = p;
    }
    (void)SendFrame(EncodeFrame(type, id, p->payload));  // a failed send waits for the reconnect
    std::unique_lock<std::mutex> lock(mu_);
    const bool done = cv_.wait_for(lock, std::chrono::duration<double>(std::max(0.0, timeout_s)),
                                   [&] { return p->reply.has_value() || !p->failure.ok() || shutting_down_; });
    pending_.erase(id);
    if (!p->failure.ok()) return p->failure;
    if (!done || !p->reply) {
      if (shutting_down_) return absl::CancelledError("the coordinator client is closing");
      return absl::DeadlineExceededError(StrCat(MsgTypeName(type), " to the coordinator at ", options_.address,
                                                ": no reply within ", timeout_s, " s"));
    }
    if (p->reply->type == MsgType::kError) return DecodeError(p->reply->payload);
    return std::move(*p->reply);
  }

  /// Votes are kept until their step's outcome is known: a restarted
  /// coordinator gets them again.
  void RememberVote(int rank, int64_t step, const std::string& payload) {
    std::lock_guard<std::mutex> lock(mu_);
    votes_[{step, rank}] = payload;
  }
  // `step` is a StepKey: votes of its level up to it are done with.
  void ForgetVotes(int64_t step) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = votes_.begin(); it != votes_.end();) {
      const int64_t k = it->first.first;
      it = IsMemoryKey(k) == IsMemoryKey(step) && k <= step ? votes_.erase(it) : std::next(it);
    }
  }

 private:
  struct Pending {
    MsgType type;
    std::string payload;
    bool resend = false;
    std::optional<Reply> reply;
    absl::Status failure;
  };

  absl::StatusOr<Assignment> ParseAssign(std::string_view payload) {
    CKPT_ASSIGN_OR_RETURN(const AssignReply m, DecodeAssign(payload));
    if (m.status == AssignReply::kRefused) return absl::PermissionDeniedError(StrCat("coordinator: ", m.message));
    if (m.status != AssignReply::kAssigned) return absl::AbortedError(StrCat("coordinator: ", m.message));
    Assignment a;
    a.generation = m.generation;
    a.first_rank = static_cast<int>(m.first_rank);
    a.local_ranks = static_cast<int>(m.local_ranks);
    a.world_size = static_cast<int>(m.world_size);
    a.members = static_cast<int>(m.members);
    a.restore_step = m.restore_step;
    a.restore_level = m.restore_level == kMemoryLevel ? SaveLevel::kMemory : SaveLevel::kDurable;
    a.memory_note = m.memory_note;
    a.peer_endpoints = m.endpoints;
    a.peer_holders = m.holders;
    a.restore_holders = m.restore_holders;
    member_id_ = m.member_id;
    return a;
  }

  // A join of this member, signed over the coordinator's nonce.
  JoinRequest JoinFor(std::string_view nonce, int64_t previous_generation, bool resume) const {
    JoinRequest j;
    j.job = options_.job;
    j.host = options_.host;
    j.local_ranks = static_cast<uint64_t>(options_.local_ranks);
    j.previous_member = member_id_.load();
    j.previous_generation = previous_generation;
    j.resume = resume;
    const auto mac = Hmac(options_.token, JoinChallenge(nonce, options_.job, options_.host));
    j.mac.assign(reinterpret_cast<const char*>(mac.data()), mac.size());
    if (options_.peer_memory) {
      j.peer_endpoint = options_.peer_memory->endpoint();
      j.peer_domain = options_.peer_memory->domain();
      for (const PeerHolding& h : options_.peer_memory->Holdings()) {
        HeldStep held;
        held.step = h.step;
        held.generation = h.generation;
        for (int o : h.owners) held.owners.push_back(static_cast<uint32_t>(o));
        j.held.push_back(std::move(held));
      }
    }
    return j;
  }

  // Tries each coordinator address in turn (the one that answered last
  // first): replicas of one job are given as "A,B,C"; standbys say so in
  // their hello and are passed over.
  absl::Status ConnectOnce() {
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

  // Connects to one address and exchanges hellos; with a current
  // assignment, resumes it.
  absl::Status ConnectTo(const std::string& address) {
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
    auto hello_reply = DecodeHello(hello->payload);
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

  static bool WriteAll(int fd, std::string_view data) {
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

  static bool ReadAll(int fd, char* p, size_t n, double timeout_s) {
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

  absl::StatusOr<Reply> ReadFrame(int fd, double timeout_s, uint64_t* request_id = nullptr) {
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

  bool SendFrame(const std::string& frame) {
    std::lock_guard<std::mutex> wl(write_mu_);
    int fd;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!connected_) return false;
      fd = fd_;
    }
    return WriteAll(fd, frame);
  }

  void CloseSocket() {
    std::lock_guard<std::mutex> lock(mu_);
    if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);
  }

  void ReadLoop() {
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
              p->failure = absl::UnavailableError(StrCat("the coordinator at ", options_.address,
                                                         " is unreachable for ", options_.reconnect_timeout_s, " s"));
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

  void Dispatch(uint64_t id, Reply r) {
    if (r.type == MsgType::kStop) {
      auto stop = DecodeStop(r.payload);
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

  void HeartbeatLoop() {
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
      auto ack = DecodeHeartbeatAck(r->payload);
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

  CoordinatorClientOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::mutex write_mu_;  // one frame at a time on the socket
  int fd_ = -1;
  bool connected_ = false;
  bool shutting_down_ = false;
  std::string nonce_;
  std::atomic<uint64_t> member_id_{0};
  size_t good_address_ = 0;  // of options_.address, the one that answered last
  bool joined_ = false;
  Assignment assignment_;
  bool stop_requested_ = false;
  std::string stop_reason_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, std::shared_ptr<Pending>> pending_;
  std::map<std::pair<int64_t, int>, std::string> votes_;
  std::thread reader_, heartbeat_;
};

int CoordinatorComm::rank() const {
  const Assignment a = client_.assignment();
  return a.first_rank + local_rank_;
}
int CoordinatorComm::size() const { return client_.assignment().world_size; }

absl::StatusOr<std::string> CoordinatorComm::Run(CollectiveOp op, std::string part, double timeout_s) {
  const Assignment a = client_.assignment();
  if (a.generation != generation_) {
    generation_ = a.generation;
    seq_ = 0;
  }
  CollectiveRequest req;
  req.generation = a.generation;
  req.rank = static_cast<uint64_t>(a.first_rank + local_rank_);
  req.seq = seq_++;
  req.op = op;
  req.timeout_ms = static_cast<uint64_t>(timeout_s * 1000);
  req.part = std::move(part);
  CKPT_ASSIGN_OR_RETURN(Reply r, client_.Call(MsgType::kCollective, Encode(req), timeout_s + 5, true));
  return std::move(r.payload);
}

absl::StatusOr<std::vector<std::string>> CoordinatorComm::Gather(std::string_view mine, double timeout_s) {
  CKPT_ASSIGN_OR_RETURN(std::string reply, Run(CollectiveOp::kGather, std::string(mine), timeout_s));
  return DecodeParts(reply, uint64_t{1} << 30, "gather result");
}

absl::StatusOr<std::string> CoordinatorComm::Scatter(const std::vector<std::string>& from_leader, double timeout_s) {
  std::string part;
  if (rank() == 0) {
    if (static_cast<int>(from_leader.size()) != size()) {
      return absl::InvalidArgumentError(StrCat("scatter needs ", size(), " messages, got ", from_leader.size()));
    }
    part = EncodeParts(from_leader);
  }
  CKPT_ASSIGN_OR_RETURN(std::string reply, Run(CollectiveOp::kScatter, std::move(part), timeout_s));
  return DecodeBytes(reply, uint64_t{1} << 30, "scatter result");
}

absl::StatusOr<std::string> CoordinatorComm::Broadcast(std::string_view from_leader, double timeout_s) {
  CKPT_ASSIGN_OR_RETURN(std::string reply, Run(CollectiveOp::kBroadcast,
                                               rank() == 0 ? std::string(from_leader) : std::string(), timeout_s));
  return DecodeBytes(reply, uint64_t{1} << 30, "broadcast result");
}

absl::Status CoordinatorComm::Barrier(double timeout_s) { return Run(CollectiveOp::kBarrier, "", timeout_s).status(); }

absl::Status CoordinatorArbiter::Vote(int rank, int64_t step, const SaveVote& vote) {
  VoteRequest req;
  req.generation = client_.assignment().generation;
  req.rank = static_cast<uint64_t>(rank);
  req.step = step;
  req.vote = vote;
  req.level = level_;
  std::string payload = Encode(req);
  client_.RememberVote(rank, Key(step), payload);
  return client_.Call(MsgType::kVote, std::move(payload), 60, true).status();
}

absl::Status CoordinatorArbiter::AwaitDecision(int64_t step, double timeout_s) {
  const StepWaitRequest req{client_.assignment().generation, step, static_cast<uint64_t>(timeout_s * 1000), level_};
  auto r = client_.Call(MsgType::kDecide, Encode(req), timeout_s + 5, true);
  if (!r.ok()) return r.status();
  absl::Status d = DecisionOf(r->payload);
  if (!d.ok()) client_.ForgetVotes(Key(step));
  return d;
}

absl::Status CoordinatorArbiter::Published(int64_t step, const absl::Status& outcome) {
  PublishedRequest req;
  req.generation = client_.assignment().generation;
  req.step = step;
  req.ok = outcome.ok();
  req.message = std::string(outcome.message());
  req.level = level_;
  auto r = client_.Call(MsgType::kPublished, Encode(req), 60, true);
  client_.ForgetVotes(Key(step));
  return r.status();
}

absl::Status CoordinatorArbiter::AwaitOutcome(int64_t step, double timeout_s) {
  const StepWaitRequest req{client_.assignment().generation, step, static_cast<uint64_t>(timeout_s * 1000), level_};
  auto r = client_.Call(MsgType::kAwaitOutcome, Encode(req), timeout_s + 5, true);
  if (!r.ok()) return r.status();
  client_.ForgetVotes(Key(step));
  return DecisionOf(r->payload);
}

}  // namespace
}  // namespace coord

PeerRoute Assignment::memory_route(int local_rank) const {
  PeerRoute route;
  route.generation = generation;
  route.peers = peer_endpoints;
  const size_t rank = static_cast<size_t>(first_rank + local_rank);
  if (rank < peer_holders.size()) {
    for (size_t i = 1; i < peer_holders[rank].size(); ++i)
      route.replicas.push_back(peer_endpoints[peer_holders[rank][i]]);
  }
  // Files of the step being restored are where the coordinator found them;
  // those of this generation's saves (and LATEST, step -1, the leader's)
  // with their writer and its replica holders.
  route.holders = [endpoints = peer_endpoints, now = peer_holders, restored = restore_holders,
                   restore = restore_level == SaveLevel::kMemory ? restore_step : -2](int64_t step, int owner) {
    const auto& table = step == restore ? restored : now;
    std::vector<std::string> out;
    const size_t o = static_cast<size_t>(std::max(owner, 0));
    if (o < table.size()) {
      for (uint32_t i : table[o]) out.push_back(endpoints[i]);
    }
    return out;
  };
  return route;
}

absl::StatusOr<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Connect(const CoordinatorClientOptions& options) {
  auto c = std::make_unique<coord::ClientImpl>(options);
  if (absl::Status s = c->Start(); !s.ok()) return s;
  return std::unique_ptr<CoordinatorClient>(std::move(c));
}

}  // namespace ckpt

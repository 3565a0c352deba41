// The coordinator client (ckpt/coordinator.h), declared once and defined in
// client.cc (joining, calls, the communicator and the arbiter) and
// client_connection.cc (connecting, frames, the reader and heartbeat
// threads). The worker side: one TCP connection, a reader thread that matches replies
// to requests and reconnects (with backoff) when the connection drops, and a
// heartbeat thread. Requests the coordinator treats idempotently
// (collectives, votes, decisions) are sent again after a reconnect.
#ifndef CKPT_COORDINATOR_CLIENT_IMPL_H_
#define CKPT_COORDINATOR_CLIENT_IMPL_H_

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

namespace ckpt::coord {

// Heartbeats in a row without an answer after which a connection that
// looks open is taken for a cut-off coordinator and dropped.
inline constexpr int kSilentHeartbeats = 3;

struct Reply {
  MsgType type = MsgType::kAck;
  std::string payload;
};

inline absl::Status DecodeError(std::string_view payload) {
  ByteReader r(payload, "error reply");
  const absl::Status s = ReadStatus(r);
  if (!r.ok()) return r.status();
  return absl::Status(s.ok() ? absl::StatusCode::kUnknown : s.code(), StrCat("coordinator: ", s.message()));
}

// The step's decision, or why the reply does not decode.
inline absl::Status DecisionOf(std::string_view payload) {
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
  explicit ClientImpl(CoordinatorClientOptions o);

  ~ClientImpl() override;

  absl::Status Start();

  // ---------------- CoordinatorClient ----------------
  absl::StatusOr<Assignment> Join(double timeout_s) override;

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

  absl::Status Leave() override;

  // ---------------- used by the communicator and arbiter ----------------
  Assignment assignment() const {
    std::lock_guard<std::mutex> lock(mu_);
    return assignment_;
  }

  absl::StatusOr<Reply> Call(MsgType type, std::string payload, double timeout_s, bool resend);

  /// Votes are kept until their step's outcome is known: a restarted
  /// coordinator gets them again.
  void RememberVote(int rank, int64_t step, const std::string& payload) {
    std::lock_guard<std::mutex> lock(mu_);
    votes_[{step, rank}] = payload;
  }
  // `step` is a StepKey: votes of its level up to it are done with.
  void ForgetVotes(int64_t step);

 private:
  struct Pending {
    MsgType type;
    std::string payload;
    bool resend = false;
    std::optional<Reply> reply;
    absl::Status failure;
  };

  absl::StatusOr<Assignment> ParseAssign(std::string_view payload);

  // A join of this member, signed over the coordinator's nonce.
  JoinRequest JoinFor(std::string_view nonce, int64_t previous_generation, bool resume) const;

  // ---------------- the connection (client_connection.cc) ----------------
  // Tries each coordinator address in turn (the one that answered last
  // first): replicas of one job are given as "A,B,C"; standbys say so in
  // their hello and are passed over.
  absl::Status ConnectOnce();

  // Connects to one address and exchanges hellos; with a current
  // assignment, resumes it.
  absl::Status ConnectTo(const std::string& address);

  static bool WriteAll(int fd, std::string_view data);

  static bool ReadAll(int fd, char* p, size_t n, double timeout_s);

  absl::StatusOr<Reply> ReadFrame(int fd, double timeout_s, uint64_t* request_id = nullptr);

  bool SendFrame(const std::string& frame);

  void CloseSocket() {
    std::lock_guard<std::mutex> lock(mu_);
    if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);
  }

  void ReadLoop();

  void Dispatch(uint64_t id, Reply r);

  void HeartbeatLoop();

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

}  // namespace ckpt::coord

#endif  // CKPT_COORDINATOR_CLIENT_IMPL_H_

// The coordinator client (client_impl.h): joining, calls, the communicator
// and the arbiter.
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

namespace ckpt {
namespace coord {

ClientImpl::ClientImpl(CoordinatorClientOptions o) : options_(std::move(o)) {
  if (options_.host.empty()) {
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    options_.host = StrCat(name, ":", getpid());
  }
}

ClientImpl::~ClientImpl() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutting_down_ = true;
  }
  cv_.notify_all();
  CloseSocket();
  if (heartbeat_.joinable()) heartbeat_.join();
  if (reader_.joinable()) reader_.join();
}

absl::Status ClientImpl::Start() {
  CKPT_RETURN_IF_ERROR(ConnectOnce());
  reader_ = std::thread([this] { ReadLoop(); });
  heartbeat_ = std::thread([this] { HeartbeatLoop(); });
  return absl::OkStatus();
}

absl::StatusOr<Assignment> ClientImpl::Join(double timeout_s) {
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

absl::Status ClientImpl::Leave() {
  auto r = Call(MsgType::kLeave, Encode(LeaveRequest{member_id_.load()}), 10, false);
  std::lock_guard<std::mutex> lock(mu_);
  joined_ = false;
  return r.status();
}

absl::StatusOr<Reply> ClientImpl::Call(MsgType type, std::string payload, double timeout_s, bool resend) {
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
    return absl::DeadlineExceededError(
        StrCat(MsgTypeName(type), " to the coordinator at ", options_.address, ": no reply within ", timeout_s, " s"));
  }
  if (p->reply->type == MsgType::kError) return DecodeError(p->reply->payload);
  return std::move(*p->reply);
}

void ClientImpl::ForgetVotes(int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = votes_.begin(); it != votes_.end();) {
    const int64_t k = it->first.first;
    it = IsMemoryKey(k) == IsMemoryKey(step) && k <= step ? votes_.erase(it) : std::next(it);
  }
}

absl::StatusOr<Assignment> ClientImpl::ParseAssign(std::string_view payload) {
  CKPT_ASSIGN_OR_RETURN(const AssignReply m, Decode<AssignReply>(payload));
  if (m.status == AssignReply::kRefused) return absl::PermissionDeniedError(StrCat("coordinator: ", m.message));
  if (m.status == AssignReply::kJobFinished) return absl::OutOfRangeError(StrCat("coordinator: ", m.message));
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
  a.memory_erasure_k = m.erasure_k;
  a.memory_erasure_m = m.erasure_m;
  member_id_ = m.member_id;
  return a;
}

JoinRequest ClientImpl::JoinFor(std::string_view nonce, int64_t previous_generation, bool resume) const {
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

}  // namespace coord

PeerRoute Assignment::memory_route(int local_rank) const {
  PeerRoute route;
  route.generation = generation;
  route.peers = peer_endpoints;
  const size_t rank = static_cast<size_t>(first_rank + local_rank);
  if (rank < peer_holders.size()) {
    for (size_t i = 1; i < peer_holders[rank].size(); ++i)
      route.replicas.push_back(peer_endpoints[peer_holders[rank][i]]);
    // With erasure coding the holders are piece 0 (this rank) to k + m - 1.
    if (memory_erasure_k > 0 && static_cast<int>(peer_holders[rank].size()) == memory_erasure_k + memory_erasure_m) {
      route.erasure_k = memory_erasure_k;
      route.erasure_m = memory_erasure_m;
    }
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

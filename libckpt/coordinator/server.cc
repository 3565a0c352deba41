// The coordinator service. Everything runs on one Asio thread: sessions,
// timers and the state they share need no locks. Durable decisions are
// journaled (and fsynced) before anyone is told of them.
#include "coordinator/server.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <future>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "ckpt/checkpointer.h"
#include "ckpt/coordinator.h"
#include "ckpt/peer.h"
#include "ckpt/storage.h"
#include "ckpt/verify.h"
#include "coordinator/commit_book.h"
#include "coordinator/membership.h"
#include "coordinator/messages.h"
#include "coordinator/protocol.h"
#include "coordinator/records.h"
#include "coordinator/session.h"
#include "coordinator/state_log.h"
#include "coordinator/status.h"
#include "util/bytes.h"
#include "util/clock.h"
#include "util/descriptors.h"
#include "util/errors.h"
#include "util/status_wire.h"
#include "util/strings.h"

namespace ckpt {
namespace coord {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

struct Waiter {
  std::weak_ptr<Session> session;
  uint64_t request_id = 0;
  double deadline = 0;
};

struct Collective {
  CollectiveOp op = CollectiveOp::kBarrier;
  std::map<int, std::string> parts;  // rank -> its contribution
  std::map<int, Waiter> waiters;     // rank -> who to answer
  double deadline = 0;
};

// Who waits for a step's decision (the leader) or outcome (every rank).
struct StepWaiters {
  std::vector<Waiter> decide;
  std::vector<Waiter> outcome;
};

class CoordinatorImpl final : public Coordinator, public SessionOwner {
 public:
  explicit CoordinatorImpl(const CoordinatorOptions& o) : options_(o), acceptor_(io_), tick_(io_), form_timer_(io_) {}

  ~CoordinatorImpl() override {
    asio::post(io_, [this] {
      boost::system::error_code ec;
      acceptor_.close(ec);
      accept_pause_.cancel();
      tick_.cancel();
      form_timer_.cancel();
      for (auto& w : sessions_) {
        if (auto s = w.lock()) s->Close("coordinator shutting down");
      }
      io_.stop();
    });
    if (thread_.joinable()) thread_.join();
    if (verifier_.joinable()) verifier_.join();
  }

  // `log`: where the state lives, or null for the one the options name.
  absl::Status Init(std::unique_ptr<StateLog> log) {
    if (options_.state_dir.empty() && options_.store.empty() && !log) {
      return absl::InvalidArgumentError("the coordinator needs a state dir or a store");
    }
    if (options_.token.empty()) return absl::InvalidArgumentError("the coordinator needs a token");
    CKPT_RETURN_IF_ERROR(CheckTokenStrength(options_.token));
    if (options_.handshake_timeout_s <= 0 || options_.idle_timeout_s < 0 || options_.max_unauthenticated < 1) {
      return absl::InvalidArgumentError(
          "the handshake timeout must be positive, the idle timeout not negative and at least one unauthenticated "
          "connection allowed");
    }
    idle_timeout_s_ = options_.idle_timeout_s > 0
                          ? options_.idle_timeout_s
                          : std::max(30.0, 4 * options_.heartbeat_s * std::max(1, options_.dead_after));
    LogDescriptorLimit(RaiseDescriptorLimit());
    // It listens before it leads: a standby answers hellos (saying who
    // leads, so workers move on) and status requests.
    const size_t colon = options_.listen.rfind(':');
    if (colon == std::string::npos) {
      return absl::InvalidArgumentError(StrCat("--listen wants HOST:PORT, got '", options_.listen, "'"));
    }
    boost::system::error_code ec;
    const auto addr = asio::ip::make_address(options_.listen.substr(0, colon), ec);
    if (ec) return absl::InvalidArgumentError(StrCat("--listen: bad address in '", options_.listen, "'"));
    int port = 0;
    try {
      port = std::stoi(options_.listen.substr(colon + 1));
    } catch (...) {
      return absl::InvalidArgumentError(StrCat("--listen: bad port in '", options_.listen, "'"));
    }
    tcp::endpoint ep(addr, static_cast<unsigned short>(port));
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return absl::UnavailableError(StrCat("listening on ", options_.listen, ": ", ec.message()));
    port_ = acceptor_.local_endpoint().port();
    address_ = StrCat(addr.to_string(), ":", port_);
    uint64_t torn = 0;
    if (log) {
      log_ = std::move(log);
    } else if (!options_.store.empty()) {
      CKPT_ASSIGN_OR_RETURN(log_, NewEtcdLog(
                                      options_.store, StrCat(ThisProcess(), " ", address_),
                                      [this](const std::string& line) { Log(line); }, options_.wait_for_store));
    } else {
      if (options_.state_dir.empty()) return absl::InvalidArgumentError("the coordinator needs a state dir or a store");
      log_ = NewJournalLog(options_.state_dir);
    }
    Accept();
    thread_ = std::thread([this] { io_.run(); });
    // Replay runs on this thread while the io thread serves only hellos and
    // status as a standby; the state is handed over by the post below.
    absl::Status s = log_->Open([this](std::string_view r) { return Replay(r); }, &torn);
    if (!s.ok()) return s;
    if (torn > 0) Log(StrCat(log_->Describe(), ": cut a torn tail of ", torn, " bytes"));
    book_.Trim(256, /*only_decided=*/false);
    if (membership_.running()) {
      // Members get the usual grace to reconnect after a restart (from
      // when it starts serving, below).
      Log(StrCat("resuming generation ", membership_.generation(), " (", membership_.member_count(), " members, world ",
                 membership_.world(), ") from the journal"));
    }
    std::promise<void> serving;
    asio::post(io_, [&] {
      serving_ = true;
      if (membership_.running()) membership_.HeardFromAll(NowSeconds());
      Tick();
      serving.set_value();
    });
    serving.get_future().wait();
    Log(StrCat("serving on ", address_, ", state in ", log_->Describe()));
    return absl::OkStatus();
  }

  int port() const override { return port_; }

  std::string StatusJson() override {
    std::promise<std::string> p;
    auto f = p.get_future();
    asio::post(io_, [&] { p.set_value(BuildStatus()); });
    return f.get();
  }

  // --- called by sessions, on the io thread ---

  std::string StatusOnIoThread() override { return BuildStatus(); }

  uint32_t max_frame() const override { return options_.max_frame_bytes; }
  // Called from the io thread, the starting thread (replay) and the state
  // log's own threads: the caller's logger sees one line at a time.
  void Log(const std::string& line) override {
    std::lock_guard<std::mutex> lock(log_mu_);
    if (options_.log) {
      options_.log(line);
    } else {
      std::fprintf(stderr, "ckpt coordinator: %s\n", line.c_str());
    }
  }
  double handshake_timeout() const override { return options_.handshake_timeout_s; }
  double idle_timeout() const override { return idle_timeout_s_; }

  // A new connection starts unauthenticated; past the limit the oldest
  // unauthenticated one makes room.
  void Track(const std::shared_ptr<Session>& s) {
    // Closed sessions are swept when the list has doubled since the last
    // sweep: amortised O(1) per connection.
    if (sessions_.size() >= sweep_at_) {
      sessions_.erase(std::remove_if(sessions_.begin(), sessions_.end(), [](auto& w) { return w.expired(); }),
                      sessions_.end());
      sweep_at_ = std::max<size_t>(64, 2 * sessions_.size());
    }
    sessions_.push_back(s);
    s->unauthenticated = unauthenticated_.insert(unauthenticated_.end(), s);
    while (unauthenticated_.size() > static_cast<size_t>(std::max(1, options_.max_unauthenticated))) {
      auto oldest = unauthenticated_.front().lock();
      if (!oldest) {
        unauthenticated_.pop_front();
        continue;
      }
      oldest->Drop(DropReason::kUnauthenticatedLimit,
                   StrCat(options_.max_unauthenticated, " connections are waiting to join; the oldest is dropped"));
    }
  }
  void Untrack(Session& s) override {
    if (s.unauthenticated) unauthenticated_.erase(*s.unauthenticated);
    s.unauthenticated.reset();
  }
  // The session proved the token: it no longer counts against the
  // unauthenticated limit and its deadline becomes the idle timeout.
  void Authenticated(Session& s) {
    s.authenticated = true;
    Untrack(s);
  }
  // A member waiting for its generation to form sends nothing meanwhile.
  bool AwaitingAssignment(const Session& s) const override {
    auto it = pending_joins_.find(s.member_id);
    return it != pending_joins_.end() && it->second.session.lock().get() == &s;
  }
  uint64_t bad_frames() const { return drops_[static_cast<size_t>(DropReason::kBadFrame)]; }
  size_t JoinedConnections() const {
    size_t n = 0;
    for (const auto& w : sessions_) {
      auto s = w.lock();
      if (s && !s->closed() && s->member_id != 0) ++n;
    }
    return n;
  }
  void CountDrop(DropReason reason, const std::string& line) override {
    const auto i = static_cast<size_t>(reason);
    ++drops_[i];
    LogThrottled(i, line);
  }
  // Logs a line of kind `kind` at most once a minute, saying how many were
  // left out since.
  void LogThrottled(size_t kind, const std::string& line) {
    Throttle& t = throttles_[kind];
    const double now = NowSeconds();
    if (t.last > 0 && now - t.last < 60) {
      ++t.suppressed;
      return;
    }
    Log(t.suppressed > 0 ? StrCat(line, " (and ", t.suppressed, " more like it in the last minute)") : line);
    t.last = now;
    t.suppressed = 0;
  }

  absl::Status Handle(const std::shared_ptr<Session>& s, const FrameHeader& h, std::string_view payload) override {
    switch (h.type) {
      case MsgType::kHello: {
        HelloReply hello{s->nonce(), coordinator_id_, options_.max_frame_bytes, ""};
        if (!serving_) hello.standby_of = StandbyOf();
        s->Reply(h.request_id, MsgType::kHello, Encode(hello));
        return absl::OkStatus();
      }
      case MsgType::kStatus: {
        CKPT_ASSIGN_OR_RETURN(const StatusRequest req, DecodeStatusRequest(payload));
        s->Reply(h.request_id, MsgType::kStatusReply, EncodeBytes(req.text ? BuildStatusText() : BuildStatus()));
        return absl::OkStatus();
      }
      default:
        break;
    }
    if (!serving_) {
      // A standby acts on nothing: the client goes to the next address.
      s->ReplyError(h.request_id, absl::UnavailableError(StrCat("the coordinator replica at ", address_,
                                                                " stands by (leader: ", StandbyOf(), ")")));
      s->CloseAfterWrite();
      return absl::OkStatus();
    }
    if (h.type == MsgType::kJoin) return OnJoin(s, h, payload);
    if (s->member_id == 0) {
      return absl::PermissionDeniedError(StrCat(MsgTypeName(h.type), " before a successful join"));
    }
    switch (h.type) {
      case MsgType::kHeartbeat:
        return OnHeartbeat(s, h, payload);
      case MsgType::kCollective:
        return OnCollective(s, h, payload);
      case MsgType::kVote:
        return OnVote(s, h, payload);
      case MsgType::kDecide:
        return OnDecide(s, h, payload);
      case MsgType::kPublished:
        return OnPublished(s, h, payload);
      case MsgType::kAwaitOutcome:
        return OnAwaitOutcome(s, h, payload);
      case MsgType::kLeave:
        return OnLeave(s, h, payload);
      default:
        return absl::InvalidArgumentError(StrCat("a coordinator does not take ", MsgTypeName(h.type), " frames"));
    }
  }

  std::string Metrics() override { return PrometheusMetrics(View()); }

 private:
  // ---------------- journal ----------------
  absl::Status Replay(std::string_view rec) {
    if (!rec.empty() && static_cast<JournalKind>(rec[0]) == JournalKind::kGeneration) {
      ByteReader r(rec.substr(1), "journal record");
      return membership_.ReplayGeneration(r);
    }
    CKPT_ASSIGN_OR_RETURN(RecordView r, DecodeRecord(0, rec));
    switch (r.kind) {
      case JournalKind::kEnded:
        membership_.ReplayEnded();
        break;
      case JournalKind::kCommitted:
        if (r.memory) {
          memory_commits_[r.step] = MemoryCommit{r.generation, r.save_world};
        } else {
          last_committed_ = std::max(last_committed_, r.step);
        }
        book_.ReplayCommitted(StepKey(r.step, r.memory), r.generation);
        ++commits_;
        break;
      case JournalKind::kAborted:
        book_.ReplayAborted(StepKey(r.step, r.memory), r.generation);
        ++aborts_;
        break;
      case JournalKind::kDecided:
        if (!r.memory) last_decided_ = std::max(last_decided_, r.step);
        book_.ReplayDecided(StepKey(r.step, r.memory), r.generation);
        break;
      case JournalKind::kSdc:
        sdc_.push_back(SdcAlert{r.step, std::move(r.chunk), std::move(r.detail)});
        break;
      case JournalKind::kGeneration:
        break;  // above
    }
    return absl::OkStatus();
  }

  // Records `rec` before it is acted on. When it cannot be recorded (the
  // disk, the store unreachable, or another coordinator fenced this one
  // off), the coordinator stops acting at all: what it holds in memory may
  // no longer be what a restart would find, and a decision never recorded
  // must never be heard. Returns false then; callers stop there.
  bool Journaled(const std::string& rec) {
    if (!halted_.empty()) return false;
    const double t0 = NowSeconds();
    absl::Status s = log_->Append(rec);
    appends_.Add(NowSeconds() - t0);
    if (s.ok()) return true;
    Halt(StrCat("cannot record its state (", s.message(), ")"));
    return false;
  }

  void Halt(const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(halt_mu_);
      halted_ = why;
    }
    Log(StrCat("STOPPED ACTING: ", why, "; restart it (it resumes from ", log_->Describe(), ")"));
    boost::system::error_code ec;
    acceptor_.close(ec);
    for (auto& w : sessions_) {
      if (auto sess = w.lock()) sess->Close("the coordinator stopped acting");
    }
  }

 public:
  std::string halted() const override {
    std::lock_guard<std::mutex> lock(halt_mu_);
    return halted_;
  }

 private:
  // ---------------- rendezvous ----------------
  absl::Status OnJoin(const std::shared_ptr<Session>& s, const FrameHeader& h, std::string_view payload) {
    CKPT_ASSIGN_OR_RETURN(const JoinRequest join, DecodeJoin(payload));
    const std::string& job = join.job;
    const std::string& host = join.host;
    const int local = static_cast<int>(join.local_ranks);
    const uint64_t previous = join.previous_member;
    const int64_t previous_gen = join.previous_generation;
    const bool resume = join.resume;
    const std::string& mac = join.mac;
    const auto expect = Hmac(options_.token, JoinChallenge(s->nonce(), job, host));
    if (mac.size() != kMacSize || !MacEqual(expect.data(), reinterpret_cast<const uint8_t*>(mac.data()))) {
      ++refused_;
      CountDrop(DropReason::kRefusedJoin,
                StrCat("refused a join from ", s->peer(), " (host '", host, "', job '", job, "'): wrong token"));
      AssignReply refused;
      refused.status = AssignReply::kRefused;
      refused.message = "refused: the join was not signed with the job's token";
      s->Reply(h.request_id, MsgType::kAssign, Encode(refused));
      s->CloseAfterWrite();  // one guess per connection
      return absl::OkStatus();
    }
    Authenticated(*s);
    if (local < 1) return absl::InvalidArgumentError("a member needs at least one local rank");
    // A member of the running generation reconnecting (the coordinator
    // restarted, or the network dropped): it keeps its place.
    if (resume && membership_.CanResume(previous, previous_gen)) {
      const Member& m = membership_.Resume(previous, s, NowSeconds());
      s->member_id = previous;
      s->Reply(h.request_id, MsgType::kAssign, AssignPayload(m));
      Log(StrCat("member ", previous, " (", m.host, ") reconnected to generation ", membership_.generation()));
      return absl::OkStatus();
    }
    if (resume) {
      // Its generation is over (or unknown here): it must join afresh.
      AssignReply over;
      over.status = AssignReply::kNotResumable;
      over.message =
          StrCat("generation ", previous_gen, " is over (current: ", membership_.generation(), "); join again");
      s->Reply(h.request_id, MsgType::kAssign, Encode(over));
      return absl::OkStatus();
    }
    const uint64_t id = membership_.IdFor(previous);
    if (membership_.IsMember(id)) {
      // Its previous incarnation is gone: the generation cannot go on.
      EndGeneration(
          StrCat("member ", id, " (", membership_.Find(id)->host, ") re-joined: its previous process is gone"));
    }
    s->member_id = id;
    Member m;
    m.id = id;
    m.host = host;
    m.local_ranks = local;
    m.session = s;
    m.last_seen = NowSeconds();
    m.peer_endpoint = join.peer_endpoint;
    m.peer_domain = join.peer_domain;
    m.held = join.held;
    membership_.AddWaiting(std::move(m));
    pending_joins_[id] = Waiter{s, h.request_id, 0};
    Log(StrCat("member ", id, " (", host, ", ", local, " rank(s)) joined; ", membership_.waiting_count(), " waiting"));
    MaybeForm(false);
    return absl::OkStatus();
  }

  std::string AssignPayload(const Member& m) {
    AssignReply a;
    a.member_id = m.id;
    a.generation = membership_.generation();
    a.first_rank = static_cast<uint64_t>(m.first_rank);
    a.local_ranks = static_cast<uint64_t>(m.local_ranks);
    a.world_size = static_cast<uint64_t>(membership_.world());
    a.members = membership_.member_count();
    a.restore_step = membership_.restore_step();
    a.heartbeat_ms = static_cast<uint64_t>(options_.heartbeat_s * 1000);
    a.restore_level = restore_level_;
    a.memory_note = memory_note_;
    a.endpoints = peer_endpoints_;
    a.holders = peer_holders_;
    a.restore_holders = restore_holders_;
    return Encode(a);
  }

  // Waiting members whose connection is gone are forgotten.
  void ForgetDisconnectedWaiters() {
    for (uint64_t id : membership_.ForgetDisconnected()) pending_joins_.erase(id);
  }

  void MaybeForm(bool timer_fired) {
    if (membership_.running()) return;  // newcomers wait as spares for the next generation
    int n = static_cast<int>(membership_.waiting_count());
    if (n >= options_.max_nodes || (timer_fired && n >= options_.min_nodes)) {
      // Waiters whose connection is gone are counted out only here, when a
      // generation may form: once per join, it would cost every rendezvous
      // time quadratic in its size.
      ForgetDisconnectedWaiters();
      n = static_cast<int>(membership_.waiting_count());
      if (n >= options_.max_nodes || (timer_fired && n >= options_.min_nodes)) {
        Form();
        return;
      }
    }
    if (n >= options_.min_nodes) {
      // Wait a little for more; every join restarts the wait.
      form_timer_.expires_after(std::chrono::milliseconds(static_cast<int64_t>(options_.join_timeout_s * 1000)));
      form_timer_.async_wait([this](const boost::system::error_code& ec) {
        if (!ec) MaybeForm(true);
      });
    }
  }

  // Forming a generation has two halves. The members waiting now are enough;
  // which step they restore is decided by verifying the newest committed
  // steps, which reads storage and may take seconds: that runs on its own
  // thread, so heartbeats, status requests and joins are served meanwhile.
  // The generation forms (FinishForm, on the io thread) from the members
  // still waiting when the verification ends.
  void Form() {
    form_timer_.cancel();
    if (forming_) return;
    forming_ = true;
    // A step decided for commit may have been published by its leader
    // without the coordinator hearing of it (the generation ended, or the
    // coordinator stopped, in between): with a root to check, the newest
    // step the storage holds committed up to the newest decision is the
    // restore step. Without one, only steps known committed are.
    const int64_t at_most = options_.root.empty() ? last_committed_ : std::max(last_committed_, last_decided_);
    if (verifier_.joinable()) verifier_.join();  // the previous one has posted its result and ended
    verifier_ = std::thread([this, at_most] {
      const int64_t step = PickRestoreStep(at_most);
      asio::post(io_, [this, step] { FinishForm(step); });
    });
  }

  void FinishForm(int64_t restore_step) {
    forming_ = false;
    if (membership_.running()) return;
    ForgetDisconnectedWaiters();
    if (static_cast<int>(membership_.waiting_count()) < options_.min_nodes) {
      Log(StrCat("not forming a generation: ", membership_.waiting_count(),
                 " member(s) still waiting after the restore step was chosen, fewer than ", options_.min_nodes));
      return;
    }
    std::vector<uint64_t> ids = membership_.Form(restore_step, options_.max_nodes, NowSeconds());
    collectives_.clear();
    const int64_t from_memory = PlanMemoryLevel(restore_step);
    if (from_memory > restore_step) {
      restore_step = from_memory;
      membership_.SetRestoreStep(restore_step);
    }
    ByteWriter w;
    w.U8(static_cast<uint8_t>(JournalKind::kGeneration));
    membership_.EncodeGeneration(w);
    if (!Journaled(w.Take())) return;
    formed_at_ = NowSeconds();
    Log(StrCat("generation ", membership_.generation(), " formed: ", ids.size(), " member(s), world size ",
               membership_.world(),
               restore_step >= 0 ? StrCat(", restore ", restore_level_ == kMemoryLevel ? "memory step " : "step ",
                                          restore_step, restore_level_ == kMemoryLevel ? " from peers' memory" : "")
                                 : std::string(", nothing to restore")));
    size_t told = 0;
    for (uint64_t id : ids) {
      if (2 * told >= ids.size() && told > 0) CrashPoint("rendezvous");
      auto it = pending_joins_.find(id);
      if (it == pending_joins_.end()) continue;
      if (auto s = it->second.session.lock()) {
        s->Reply(it->second.request_id, MsgType::kAssign, AssignPayload(*membership_.Find(id)));
      }
      pending_joins_.erase(it);
      ++told;
    }
  }

  // The memory level of the generation just formed: the peer endpoints of
  // its members, each rank's replica holders (in other failure domains),
  // and whether a memory step newer than `durable` can be restored from
  // what the members hold: the newest one whose every rank's files some
  // member holds, from the save that committed it. Returns that step (or
  // -1) and says why newer ones cannot be.
  int64_t PlanMemoryLevel(int64_t durable) {
    restore_level_ = 0;
    memory_note_.clear();
    peer_endpoints_.clear();
    peer_holders_.clear();
    restore_holders_.clear();
    const std::vector<const Member*> members = membership_.Members();
    std::map<std::string, uint32_t> index;
    std::vector<std::string> domains;
    std::vector<uint32_t> rank_endpoint;
    for (const Member* m : members) {
      if (m->peer_endpoint.empty()) {
        memory_note_ = StrCat("member ", m->id, " (", m->host, ") has no peer memory");
        continue;
      }
      auto [it, fresh] = index.emplace(m->peer_endpoint, static_cast<uint32_t>(peer_endpoints_.size()));
      if (fresh) peer_endpoints_.push_back(m->peer_endpoint);
      for (int r = 0; r < m->local_ranks; ++r) {
        domains.push_back(m->peer_domain);
        rank_endpoint.push_back(it->second);
      }
    }
    if (peer_endpoints_.empty()) return -1;  // no member has a memory level
    if (memory_note_.empty()) {
      auto placement = PlaceReplicas(domains, options_.memory_replicas);
      if (placement.ok()) {
        for (size_t r = 0; r < domains.size(); ++r) {
          std::vector<uint32_t> h = {rank_endpoint[r]};
          for (int k : (*placement)[r]) h.push_back(rank_endpoint[static_cast<size_t>(k)]);
          peer_holders_.push_back(std::move(h));
        }
      } else {
        memory_note_ = std::string(placement.status().message());
      }
    }
    if (!memory_note_.empty()) Log(StrCat("no memory-level saves in this generation: ", memory_note_));
    for (auto it = memory_commits_.rbegin(); it != memory_commits_.rend() && it->first > durable; ++it) {
      const int64_t step = it->first;
      const MemoryCommit& mc = it->second;
      std::vector<std::vector<uint32_t>> holders(static_cast<size_t>(std::max(mc.world, 0)));
      for (const Member* m : members) {
        auto e = index.find(m->peer_endpoint);
        if (e == index.end()) continue;
        for (const HeldStep& h : m->held) {
          if (h.step != step || h.generation != mc.generation) continue;
          for (uint32_t o : h.owners) {
            if (o < holders.size()) holders[o].push_back(e->second);
          }
        }
      }
      std::vector<std::string> missing;
      for (size_t o = 0; o < holders.size(); ++o) {
        if (holders[o].empty()) missing.push_back(std::to_string(o));
      }
      if (!holders.empty() && missing.empty()) {
        restore_level_ = kMemoryLevel;
        restore_holders_ = std::move(holders);
        return step;
      }
      if (missing.size() > 8) {
        const size_t n = missing.size();
        missing.resize(8);
        missing.push_back(StrCat("... (", n, " in all)"));
      }
      Log(StrCat("memory step ", step, " (generation ", mc.generation, ", ", mc.world,
                 " ranks) cannot be restored: no live member holds the files of rank(s) ", absl::StrJoin(missing, ", "),
                 " of its save", durable >= 0 ? StrCat("; restoring durable step ", durable) : std::string()));
    }
    return -1;
  }

  // On the verifier thread: touches no member state.
  int64_t PickRestoreStep(int64_t last_committed) {
    if (last_committed < 0 || options_.root.empty()) return last_committed;
    auto storage = OpenStorage(options_.root);
    if (!storage.ok()) {
      Log(StrCat("cannot open ", options_.root, " to check the restore step: ", storage.status().message()));
      return last_committed;
    }
    return NewestRestorableStep(**storage, last_committed, [this](const std::string& line) { Log(line); });
  }

  // Growing back (CoordinatorOptions::grow): a step of the running
  // generation was just committed, so ending it now loses no saved work; the
  // spares waiting join the next generation, which restores that step.
  void MaybeGrow(int64_t step, int64_t generation) {
    if (!options_.grow || !membership_.running() || membership_.generation() != generation || forming_) return;
    if (membership_.waiting_count() == 0 || static_cast<int>(membership_.member_count()) >= options_.max_nodes) return;
    if (NowSeconds() - formed_at_ < options_.grow_spacing_s) return;
    ForgetDisconnectedWaiters();
    const size_t spares = membership_.waiting_count();
    if (spares == 0) return;
    ++grows_;
    EndGeneration(StrCat("growing back: ", spares, " member(s) wait beside the ", membership_.member_count(),
                         " of this generation (at most ", options_.max_nodes, "), and ", StepName(step),
                         " is committed"));
  }

  // `finished`: every member left, the job is over (its processes' memory
  // level with it); recorded so that the log tells that from a failure.
  void EndGeneration(const std::string& reason, bool finished = false) {
    if (!membership_.running()) return;
    const int64_t generation = membership_.generation();
    ByteWriter w;
    w.U8(static_cast<uint8_t>(JournalKind::kEnded));
    w.SVar(generation);
    if (finished) w.U8(1);
    if (!Journaled(w.Take())) return;
    Log(StrCat("generation ", generation, " ended: ", reason));
    const absl::Status why = absl::AbortedError(StrCat("generation ", generation, " ended: ", reason));
    for (auto& [seq, c] : collectives_) {
      for (auto& [rank, wt] : c.waiters) {
        if (auto s = wt.session.lock()) s->ReplyError(wt.request_id, why);
      }
    }
    collectives_.clear();
    Apply(book_.AbortGeneration(generation, why));
    for (const Member& m : membership_.End()) {
      if (auto s = m.session.lock()) s->Send(EncodeFrame(MsgType::kStop, 0, Encode(StopPush{generation, reason})));
    }
    MaybeForm(false);
  }

  // ---------------- heartbeats and failure detection ----------------
  absl::Status OnHeartbeat(const std::shared_ptr<Session>& s, const FrameHeader& h, std::string_view payload) {
    CKPT_ASSIGN_OR_RETURN(const HeartbeatRequest hb, DecodeHeartbeat(payload));
    const uint64_t id = hb.member;
    const int64_t gen = hb.generation;
    HeartbeatAck ack;
    ack.generation = membership_.generation();
    if (membership_.Heartbeat(id, gen, s->member_id, NowSeconds()) == Membership::Beat::kStale) {
      ack.stop = true;
      ack.reason = StrCat("generation ", gen, " is over (current: ", membership_.generation(), "); join again");
    }
    s->Reply(h.request_id, MsgType::kHeartbeatAck, Encode(ack));
    return absl::OkStatus();
  }

  void Tick() {
    tick_.expires_after(std::chrono::milliseconds(50));
    tick_.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      const double now = NowSeconds();
      const Membership::Silence silence = membership_.CheckSilence(now, options_.heartbeat_s, options_.dead_after);
      heartbeat_misses_ += silence.new_misses;
      if (silence.dead) {
        ++deaths_;
        EndGeneration(*silence.dead);
      }
      ExpireWaiters(now);
      if (!membership_.running()) ForgetDisconnectedWaiters();  // so status lists only live spares
      if (absl::Status h = log_->Health(); !h.ok() && halted().empty()) Halt(std::string(h.message()));
      Tick();
    });
  }

  void ExpireWaiters(double now) {
    // A collective past its deadline means ranks that heartbeat but no
    // longer move together (a hung rank, or replies lost when the
    // coordinator died mid-answer): the generation cannot go on.
    for (auto& [seq, c] : collectives_) {
      if (c.deadline > 0 && now > c.deadline) {
        std::vector<int> missing;
        for (int r = 0; r < membership_.world() && missing.size() < 16; ++r) {
          if (!c.parts.count(r)) missing.push_back(r);
        }
        EndGeneration(
            StrCat("collective ", seq, " timed out: rank(s) ", absl::StrJoin(missing, ", "), " did not take part"));
        break;  // EndGeneration answered and cleared every collective
      }
    }
    for (auto wit = waiters_.begin(); wit != waiters_.end();) {
      const int64_t step = wit->first;
      const CommitBook::Step* st = book_.Find(step);
      const size_t voted = st ? st->votes.size() : 0;
      for (auto* list : {&wit->second.decide, &wit->second.outcome}) {
        for (auto it = list->begin(); it != list->end();) {
          if (it->deadline > 0 && now > it->deadline) {
            if (auto s = it->session.lock()) {
              s->ReplyError(it->request_id,
                            absl::DeadlineExceededError(StrCat(StepName(step), ": no decision within the deadline; ",
                                                               voted, " of ", membership_.world(), " ranks voted")));
            }
            it = list->erase(it);
          } else {
            ++it;
          }
        }
      }
      wit = wit->second.decide.empty() && wit->second.outcome.empty() ? waiters_.erase(wit) : std::next(wit);
    }
  }

  absl::Status OnLeave(const std::shared_ptr<Session>& s, const FrameHeader& h, std::string_view payload) {
    CKPT_ASSIGN_OR_RETURN(const LeaveRequest leave, DecodeLeave(payload));
    const uint64_t id = leave.member;
    if (id != s->member_id) return absl::PermissionDeniedError("a member can only leave for itself");
    pending_joins_.erase(id);
    // Leaving ends the generation only when others would wait for it.
    if (membership_.Leave(id)) EndGeneration("every member left: the job finished", true);
    s->Reply(h.request_id, MsgType::kAck, "");
    return absl::OkStatus();
  }

  // ---------------- collectives ----------------
  absl::Status CheckRank(const std::shared_ptr<Session>& s, int64_t gen, int rank) {
    if (!membership_.running() || gen != membership_.generation()) {
      return absl::AbortedError(
          StrCat("generation ", gen, " is over (current: ", membership_.generation(), "); join again"));
    }
    if (!membership_.OwnsRank(s->member_id, rank)) {
      return absl::PermissionDeniedError(StrCat("rank ", rank, " does not belong to member ", s->member_id));
    }
    return absl::OkStatus();
  }

  absl::Status OnCollective(const std::shared_ptr<Session>& s, const FrameHeader& h, std::string_view payload) {
    CKPT_ASSIGN_OR_RETURN(CollectiveRequest req, DecodeCollective(payload, options_.max_frame_bytes));
    const int64_t gen = req.generation;
    const int rank = static_cast<int>(req.rank);
    const uint64_t seq = req.seq;
    const CollectiveOp op = req.op;
    const double timeout = static_cast<double>(req.timeout_ms) / 1000.0;
    std::string& part = req.part;
    if (absl::Status st = CheckRank(s, gen, rank); !st.ok()) {
      s->ReplyError(h.request_id, st);
      return absl::OkStatus();
    }
    Collective& c = collectives_[seq];
    if (c.parts.empty()) c.op = op;
    if (c.op != op) {
      s->ReplyError(h.request_id, absl::FailedPreconditionError(
                                      StrCat("collective ", seq, ": rank ", rank, " called a different collective")));
      return absl::OkStatus();
    }
    c.parts[rank] = std::move(part);  // a resend after a reconnect replaces the first
    c.waiters[rank] = Waiter{s, h.request_id, 0};
    const double deadline = NowSeconds() + timeout;
    c.deadline = c.deadline == 0 ? deadline : std::max(c.deadline, deadline);
    if (static_cast<int>(c.parts.size()) < membership_.world()) return absl::OkStatus();
    // Everyone arrived: answer each rank.
    std::vector<std::string> pieces;
    if (op == CollectiveOp::kScatter) {
      auto from_leader = DecodeParts(c.parts[0], options_.max_frame_bytes, "scatter from the leader");
      if (from_leader.ok()) pieces = std::move(from_leader).value();
      if (static_cast<int>(pieces.size()) != membership_.world()) {
        pieces.assign(static_cast<size_t>(membership_.world()), "");
      }
    }
    for (auto& [rk, wt] : c.waiters) {
      auto ws = wt.session.lock();
      if (!ws) continue;
      std::string result;
      switch (op) {
        case CollectiveOp::kGather: {
          std::vector<std::string> all;
          if (rk == 0) {
            for (auto& [pr, p] : c.parts) all.push_back(p);
          }
          result = EncodeParts(all);
          break;
        }
        case CollectiveOp::kScatter:
          result = EncodeBytes(pieces[static_cast<size_t>(rk)]);
          break;
        case CollectiveOp::kBroadcast:
          result = EncodeBytes(c.parts[0]);
          break;
        case CollectiveOp::kBarrier:
          break;
      }
      ws->Reply(wt.request_id, MsgType::kCollectiveResult, result);
    }
    collectives_.erase(seq);
    return absl::OkStatus();
  }

  // ---------------- two-phase commit ----------------
  // The ledger is the CommitBook (commit_book.h); here its decisions are
  // journaled, logged and told to whoever waits.

  // Fault injection for the failover tests: with CKPT_COORDINATOR_CRASH_AT
  // set to a phase, the process SIGKILLs itself the first time it reaches it:
  //   rendezvous  a generation is recorded and half its members were told
  //   votes       every vote is in; the decision is not recorded
  //   decided     a commit decision is recorded; the leader rank not told
  //   outcome     a commit is recorded and half the ranks were told
  // (Replies are written as they are queued, so "told" ones mostly have
  // their bytes in the kernel when the process dies.)
  void CrashPoint(std::string_view phase) {
    static const char* const at = std::getenv("CKPT_COORDINATOR_CRASH_AT");
    if (at == nullptr || phase != at) return;
    Log(StrCat("crash point '", phase, "' reached: SIGKILL"));
    ::kill(::getpid(), SIGKILL);
  }

  // Answers everyone waiting on a step's decision or outcome with `why`.
  static void AnswerAll(StepWaiters& w, const absl::Status& why) {
    for (const Waiter& d : w.decide) {
      if (auto s = d.session.lock()) s->Reply(d.request_id, MsgType::kDecision, EncodeDecision(why));
    }
    for (const Waiter& o : w.outcome) {
      if (auto s = o.session.lock()) s->Reply(o.request_id, MsgType::kOutcome, EncodeDecision(why));
    }
    w.decide.clear();
    w.outcome.clear();
  }

  // The book's entry of `step` for generation `gen`. When an older
  // generation left it uncommitted, `gen` saves it again from scratch, and
  // whoever still waited on the old attempt is told it is over (a new
  // generation's requests must never see an older one's outcome, nor the
  // reverse).
  const CommitBook::Step& StepFor(int64_t step, int64_t gen) {
    const CommitBook::Step* old = book_.Find(step);
    if (old != nullptr && old->generation < gen && (!(old->outcome && old->outcome->ok()) || IsMemoryKey(step))) {
      if (auto it = waiters_.find(step); it != waiters_.end()) {
        AnswerAll(it->second, absl::AbortedError(StrCat(StepName(step), " of generation ", old->generation,
                                                        " is over: generation ", gen, " saves it again")));
        waiters_.erase(it);
      }
    }
    return book_.For(step, gen);
  }

  // `step` is a StepKey; a memory step's commit also records the ranks of
  // its save (`save_world`), which a restore from memory needs.
  bool JournalStep(JournalKind kind, int64_t step, int64_t generation, int save_world = 0) {
    ByteWriter w;
    w.U8(static_cast<uint8_t>(kind));
    w.SVar(step);
    w.SVar(generation);
    if (save_world > 0) w.Var(static_cast<uint64_t>(save_world));
    return Journaled(w.Take());
  }

  void RaiseAlerts(std::vector<SdcAlert> alerts) {
    for (SdcAlert& alert : alerts) {
      ByteWriter w;
      w.U8(static_cast<uint8_t>(JournalKind::kSdc));
      w.SVar(alert.step);
      w.Str(alert.key);
      w.Str(alert.detail);
      if (!Journaled(w.Take())) return;
      Log(StrCat("SDC ALERT step ", alert.step, " ", alert.key, ": ", alert.detail));
      sdc_.push_back(std::move(alert));
    }
  }

  // Journaled first: after a restart, whoever asks again must find the
  // decision; then counted, logged and answered.
  void Apply(std::vector<BookEvent> events) {
    for (BookEvent& e : events) {
      StepWaiters& w = waiters_[e.step];
      switch (e.kind) {
        case BookEvent::Kind::kDecidedCommit:
          CrashPoint("votes");
          if (!JournalStep(JournalKind::kDecided, e.step, e.generation)) return;
          CrashPoint("decided");
          if (!IsMemoryKey(e.step)) last_decided_ = std::max(last_decided_, e.step);
          for (Waiter& d : w.decide) {
            if (auto s = d.session.lock()) s->Reply(d.request_id, MsgType::kDecision, EncodeDecision(absl::OkStatus()));
          }
          w.decide.clear();
          break;
        case BookEvent::Kind::kAborted:
          if (!JournalStep(JournalKind::kAborted, e.step, e.generation)) return;
          ++aborts_;
          Log(StrCat(StepName(e.step), " aborted: ", e.status.message()));
          AnswerAll(w, e.status);
          break;
        case BookEvent::Kind::kCommitted:
          if (IsMemoryKey(e.step)) {
            const int world = static_cast<int>(e.durations.stall.size());
            if (!JournalStep(JournalKind::kCommitted, e.step, e.generation, world)) return;
            memory_commits_[StepOfKey(e.step)] = MemoryCommit{e.generation, world};
            while (memory_commits_.size() > 64) memory_commits_.erase(memory_commits_.begin());
          } else {
            if (!JournalStep(JournalKind::kCommitted, e.step, e.generation)) return;
            last_committed_ = std::max(last_committed_, e.step);
          }
          ++commits_;
          // Once this event's answers are out, spares may join.
          asio::post(io_, [this, step = e.step, gen = e.generation] { MaybeGrow(step, gen); });
          RecordDurations(std::move(e.durations));
          for (size_t i = 0; i < w.outcome.size(); ++i) {
            if (2 * i >= w.outcome.size() && i > 0) CrashPoint("outcome");
            const Waiter& o = w.outcome[i];
            if (auto s = o.session.lock()) s->Reply(o.request_id, MsgType::kOutcome, EncodeDecision(absl::OkStatus()));
          }
          w.outcome.clear();
          break;
      }
      if (w.decide.empty() && w.outcome.empty()) waiters_.erase(e.step);
    }
  }

  absl::Status OnVote(const std::shared_ptr<Session>& s, const FrameHeader& h, std::string_view payload) {
    CKPT_ASSIGN_OR_RETURN(VoteRequest req, DecodeVote(payload));
    const int64_t gen = req.generation;
    const int rank = static_cast<int>(req.rank);
    const int64_t step = StepKey(req.step, req.level == kMemoryLevel);
    SaveVote& v = req.vote;
    if (absl::Status st = CheckRank(s, gen, rank); !st.ok()) {
      s->ReplyError(h.request_id, st);
      return absl::OkStatus();
    }
    s->Reply(h.request_id, MsgType::kAck, "");
    std::vector<SdcAlert> alerts;
    StepFor(step, gen);
    std::vector<BookEvent> events = book_.Vote(step, gen, rank, std::move(v), membership_.world(), &alerts);
    RaiseAlerts(std::move(alerts));
    Apply(std::move(events));
    return absl::OkStatus();
  }

  absl::Status OnDecide(const std::shared_ptr<Session>& s, const FrameHeader& h, std::string_view payload) {
    CKPT_ASSIGN_OR_RETURN(const StepWaitRequest req, DecodeStepWait(payload));
    const int64_t gen = req.generation;
    const int64_t step = StepKey(req.step, req.level == kMemoryLevel);
    const double timeout = static_cast<double>(req.timeout_ms) / 1000.0;
    if (absl::Status st = CheckRank(s, gen, 0); !st.ok()) {
      s->ReplyError(h.request_id, st);
      return absl::OkStatus();
    }
    const CommitBook::Step& st = StepFor(step, gen);
    if (st.decision && st.generation == gen) {
      s->Reply(h.request_id, MsgType::kDecision, EncodeDecision(*st.decision));
      return absl::OkStatus();
    }
    waiters_[step].decide.push_back(Waiter{s, h.request_id, NowSeconds() + timeout});
    return absl::OkStatus();
  }

  absl::Status OnPublished(const std::shared_ptr<Session>& s, const FrameHeader& h, std::string_view payload) {
    CKPT_ASSIGN_OR_RETURN(const PublishedRequest req, DecodePublished(payload));
    const int64_t gen = req.generation;
    const int64_t step = StepKey(req.step, req.level == kMemoryLevel);
    const bool ok = req.ok;
    const std::string& message = req.message;
    if (absl::Status st = CheckRank(s, gen, 0); !st.ok()) {
      s->ReplyError(h.request_id, st);
      return absl::OkStatus();
    }
    StepFor(step, gen);
    auto events = book_.Published(step, gen, ok, message);
    if (!events.ok()) {
      s->ReplyError(h.request_id, events.status());
      return absl::OkStatus();
    }
    Apply(std::move(events).value());
    s->Reply(h.request_id, MsgType::kAck, "");
    // Old steps are not needed once decided (the journal keeps their outcome).
    book_.Trim(256, /*only_decided=*/true);
    return absl::OkStatus();
  }

  void RecordDurations(SaveDurations d) {
    last_save_ = {{"stall", d.stall}, {"write", d.write}};
    stragglers_ = d.stragglers;
    if (!stragglers_.empty()) {
      std::string list;
      for (const auto& [rank, x] : stragglers_) StrAppend(&list, list.empty() ? "" : ", ", "rank ", rank, " ", x, " s");
      Log(StrCat(StepName(d.step), ": stragglers (median write ", d.median_write, " s): ", list));
    }
    straggler_step_ = d.step;
  }

  absl::Status OnAwaitOutcome(const std::shared_ptr<Session>& s, const FrameHeader& h, std::string_view payload) {
    CKPT_ASSIGN_OR_RETURN(const StepWaitRequest req, DecodeStepWait(payload));
    const int64_t gen = req.generation;
    const int64_t step = StepKey(req.step, req.level == kMemoryLevel);
    const double timeout = static_cast<double>(req.timeout_ms) / 1000.0;
    const CommitBook::Step& st = StepFor(step, gen);
    if (st.generation > gen) {
      // A newer generation saves this step again: this attempt is over.
      s->Reply(h.request_id, MsgType::kOutcome,
               EncodeDecision(absl::AbortedError(StrCat(StepName(step), " of generation ", gen, " is over: generation ",
                                                        st.generation, " saves it again"))));
      return absl::OkStatus();
    }
    if (st.outcome) {
      s->Reply(h.request_id, MsgType::kOutcome, EncodeDecision(*st.outcome));
      return absl::OkStatus();
    }
    if (gen != membership_.generation() || !membership_.running()) {
      s->Reply(h.request_id, MsgType::kOutcome,
               EncodeDecision(absl::AbortedError(StrCat(StepName(step), ": generation ", gen, " is over"))));
      return absl::OkStatus();
    }
    waiters_[step].outcome.push_back(Waiter{s, h.request_id, NowSeconds() + timeout});
    return absl::OkStatus();
  }

  // ---------------- status ----------------

  std::string BuildStatusText() { return StatusText(View()); }
  std::string BuildStatus() { return coord::StatusJson(View()); }

  // Who leads, as a standby last saw it, or why none does yet. Runs on the
  // io thread while Init replays: it reads only the log's view.
  std::string StandbyOf() const {
    if (!log_) return "not known yet";
    const StoreView v = log_->View();
    if (!v.leader.empty()) return v.leader;
    return v.kind == "journal" ? StrCat("none: ", address_, " is replaying its journal") : "not known yet";
  }

  // A snapshot of everything the status and the metrics show. A standby
  // shows only the store and itself: its state is not replayed yet.
  StatusView View() {
    StatusView v;
    if (log_) v.store = log_->View();
    v.store.leading = serving_ && halted().empty();
    v.appends = appends_;
    if (!serving_) {
      v.serving = false;
      return v;
    }
    v.generation = membership_.generation();
    v.running = membership_.running();
    v.forming = forming_;
    v.world_size = membership_.world();
    v.restore_step = membership_.restore_step();
    v.last_committed_step = last_committed_;
    v.commits = commits_;
    v.aborts = aborts_;
    v.deaths = deaths_;
    v.grows = grows_;
    v.heartbeat_misses = heartbeat_misses_;
    v.refused_joins = refused_;
    v.bad_frames = bad_frames();
    for (size_t i = 0; i < static_cast<size_t>(DropReason::kCount); ++i) {
      v.dropped.emplace_back(DropReasonName(static_cast<DropReason>(i)), drops_[i]);
    }
    v.unauthenticated_connections = unauthenticated_.size();
    v.joined_connections = JoinedConnections();
    const double now = NowSeconds();
    for (const Member* m : membership_.Members()) {
      v.members.push_back({m->id, m->host, m->first_rank, m->local_ranks, now - m->last_seen, !m->session.expired()});
    }
    for (const Member* m : membership_.Waiting()) v.waiting.push_back({m->id, m->host});
    v.last_save = last_save_;
    v.straggler_step = straggler_step_;
    v.stragglers = stragglers_;
    v.sdc_alerts = sdc_;
    return v;
  }

  // Says the descriptor limit in force (Init raises the soft one to the
  // hard one: each member holds one connection, and the unauthenticated
  // ones are capped).
  void LogDescriptorLimit(const rlimit& rl) {
    Log(StrCat("descriptor limit ", rl.rlim_cur, " (hard ", rl.rlim_max, "); at most ", options_.max_unauthenticated,
               " connections may wait to join, for ", options_.handshake_timeout_s,
               " s each; joined connections idle for ", idle_timeout_s_, " s are dropped"));
  }

  // Out of descriptors: the oldest connection that has not joined makes
  // room; with none, the reserve descriptor is given up to accept the
  // newcomer and close it, and accepting pauses briefly. Never a busy loop.
  void OnAcceptOutOfDescriptors(const boost::system::error_code& ec) {
    if (auto oldest = unauthenticated_.empty() ? nullptr : unauthenticated_.front().lock()) {
      oldest->Drop(DropReason::kDescriptors, StrCat("out of descriptors (", ec.message(),
                                                    "): the oldest connection that has not joined makes room"));
      Accept();
      return;
    }
    if (reserve_.RefuseOne(acceptor_.native_handle())) {
      CountDrop(DropReason::kDescriptors,
                StrCat("out of descriptors (", ec.message(), "): refused a connection; every open one has joined"));
    }
    accept_pause_.expires_after(std::chrono::milliseconds(100));
    accept_pause_.async_wait([this](const boost::system::error_code& e) {
      if (!e) Accept();
    });
  }

  void Accept() {
    acceptor_.async_accept([this](const boost::system::error_code& ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted) return;
      if (OutOfDescriptors(ec.value())) return OnAcceptOutOfDescriptors(ec);
      if (ec) {
        Accept();  // the peer went away before it was accepted
        return;
      }
      boost::system::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      auto s = std::make_shared<Session>(std::move(socket), *this);
      Track(s);
      s->Start();
      Accept();
    });
  }

  const CoordinatorOptions options_;
  std::mutex log_mu_;  // one line at a time into options_.log
  asio::io_context io_;
  tcp::acceptor acceptor_;
  asio::steady_timer tick_;
  asio::steady_timer form_timer_;
  std::thread thread_;
  std::thread verifier_;  // chooses the restore step of a forming generation
  bool forming_ = false;  // a verification for Form is in flight
  int port_ = 0;
  std::string address_;   // HOST:PORT it listens on
  bool serving_ = false;  // leads and has replayed the state (io thread)
  LatencyStats appends_;  // of records made durable (io thread)
  std::unique_ptr<StateLog> log_;
  mutable std::mutex halt_mu_;
  std::string halted_;  // why it stopped acting; written on the io thread
  std::string coordinator_id_ = StrCat("ckpt-coordinator/", kProtocolVersion);
  std::vector<std::weak_ptr<Session>> sessions_;
  size_t sweep_at_ = 64;                               // sessions_ is swept of closed ones at this size
  std::list<std::weak_ptr<Session>> unauthenticated_;  // oldest first
  double idle_timeout_s_ = 30;
  DescriptorReserve reserve_;  // given up to accept (and close) a connection when descriptors run out
  asio::steady_timer accept_pause_{io_};
  uint64_t drops_[static_cast<size_t>(DropReason::kCount)] = {};
  struct Throttle {
    double last = 0;
    uint64_t suppressed = 0;
  };
  Throttle throttles_[static_cast<size_t>(DropReason::kCount)];

  Membership membership_;
  int64_t last_committed_ = -1;  // newest durable step committed
  double formed_at_ = 0;         // when the running generation formed
  uint64_t grows_ = 0;           // generations ended to grow back
  // Memory steps committed: the generation that saved each and its ranks.
  struct MemoryCommit {
    int64_t generation = 0;
    int world = 0;
  };
  std::map<int64_t, MemoryCommit> memory_commits_;
  // The running generation's memory level: what its members were told.
  uint8_t restore_level_ = 0;
  std::string memory_note_;
  std::vector<std::string> peer_endpoints_;
  std::vector<std::vector<uint32_t>> peer_holders_, restore_holders_;
  int64_t last_decided_ = -1;  // newest step decided for commit (its leader may have published it)
  std::map<uint64_t, Waiter> pending_joins_;
  std::map<uint64_t, Collective> collectives_;
  CommitBook book_;
  std::map<int64_t, StepWaiters> waiters_;
  std::vector<SdcAlert> sdc_;
  std::vector<std::pair<std::string, std::vector<double>>> last_save_;
  std::vector<std::pair<int, double>> stragglers_;
  int64_t straggler_step_ = -1;
  uint64_t commits_ = 0, aborts_ = 0, deaths_ = 0, heartbeat_misses_ = 0, refused_ = 0;
};

}  // namespace
}  // namespace coord

namespace coord {

absl::StatusOr<std::unique_ptr<Coordinator>> StartCoordinator(const CoordinatorOptions& options,
                                                              std::unique_ptr<StateLog> log) {
  auto c = std::make_unique<CoordinatorImpl>(options);
  if (absl::Status s = c->Init(std::move(log)); !s.ok()) return s;
  return std::unique_ptr<Coordinator>(std::move(c));
}

}  // namespace coord

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Start(const CoordinatorOptions& options) {
  return coord::StartCoordinator(options, nullptr);
}

}  // namespace ckpt

// The coordinator service's one class, declared once and defined by concern,
// one file each: server.cc (starting, connections, dispatch), server_state.cc
// (replaying and recording the state), server_rendezvous.cc (joins, forming
// and ending generations, growing back), server_liveness.cc (heartbeats,
// failure detection, leaving), server_collectives.cc, server_commit.cc (the
// two-phase commit's votes, decisions and outcomes), server_status.cc
// (status and metrics). Everything runs on one Asio thread: sessions,
// timers and the state they share need no locks. Durable decisions are
// journaled (and fsynced) before anyone is told of them.
#ifndef CKPT_COORDINATOR_SERVER_IMPL_H_
#define CKPT_COORDINATOR_SERVER_IMPL_H_

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

namespace ckpt::coord {

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

  ~CoordinatorImpl() override;

  // `log`: where the state lives, or null for the one the options name.
  absl::Status Init(std::unique_ptr<StateLog> log);

  int port() const override { return port_; }

  std::string StatusJson() override;

  // --- called by sessions, on the io thread ---

  std::string StatusOnIoThread() override { return BuildStatus(); }

  uint32_t max_frame() const override { return options_.max_frame_bytes; }
  // Called from the io thread, the starting thread (replay) and the state
  // log's own threads: the caller's logger sees one line at a time.
  void Log(const std::string& line) override;
  double handshake_timeout() const override { return options_.handshake_timeout_s; }
  double idle_timeout() const override { return idle_timeout_s_; }

  // A new connection starts unauthenticated; past the limit the oldest
  // unauthenticated one makes room.
  void Track(const std::shared_ptr<Session>& s);
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
  size_t JoinedConnections() const;
  void CountDrop(DropReason reason, const std::string& line) override {
    const auto i = static_cast<size_t>(reason);
    ++drops_[i];
    LogThrottled(i, line);
  }
  // Logs a line of kind `kind` at most once a minute, saying how many were
  // left out since.
  void LogThrottled(size_t kind, const std::string& line);

  absl::Status Handle(const std::shared_ptr<Session>& s, const FrameHeader& h, std::string_view payload) override;

  std::string Metrics() override { return PrometheusMetrics(View()); }

 private:
  // ---------------- journal (server_state.cc) ----------------
  absl::Status Replay(std::string_view rec);

  // Records `rec` before it is acted on. When it cannot be recorded (the
  // disk, the store unreachable, or another coordinator fenced this one
  // off), the coordinator stops acting at all: what it holds in memory may
  // no longer be what a restart would find, and a decision never recorded
  // must never be heard. Returns false then; callers stop there.
  bool Journaled(const std::string& rec);

  void Halt(const std::string& why);

 public:
  std::string halted() const override {
    std::lock_guard<std::mutex> lock(halt_mu_);
    return halted_;
  }

 private:
  // ---------------- the handlers ----------------
  // One per request of protocol.h's list, `On<Name>`, each in the file of
  // its concern (hello and status: server_status.cc; join:
  // server_rendezvous.cc; heartbeat and leave: server_liveness.cc;
  // collective: server_collectives.cc; vote, decide, published and
  // await-outcome: server_commit.cc). Handle() checks who may send it first.
#define CKPT_DECLARE_HANDLER(name, number, text, admits) \
  absl::Status On##name(const std::shared_ptr<Session>& s, const FrameHeader& h, std::string_view payload);
  CKPT_COORDINATOR_REQUESTS(CKPT_DECLARE_HANDLER)
#undef CKPT_DECLARE_HANDLER
  // Who may send a request, and its handler (server.cc).
  struct Route;
  static Route RouteOf(MsgType type);

  // ---------------- rendezvous (server_rendezvous.cc) ----------------
  std::string AssignPayload(const Member& m);

  // Waiting members whose connection is gone are forgotten.
  void ForgetDisconnectedWaiters() {
    for (uint64_t id : membership_.ForgetDisconnected()) pending_joins_.erase(id);
  }

  void MaybeForm(bool timer_fired);

  // Forming a generation has two halves. The members waiting now are enough;
  // which step they restore is decided by verifying the newest committed
  // steps, which reads storage and may take seconds: that runs on its own
  // thread, so heartbeats, status requests and joins are served meanwhile.
  // The generation forms (FinishForm, on the io thread) from the members
  // still waiting when the verification ends.
  void Form();

  void FinishForm(int64_t restore_step);

  // The memory level of the generation just formed: the peer endpoints of
  // its members, each rank's replica holders (in other failure domains),
  // and whether a memory step newer than `durable` can be restored from
  // what the members hold: the newest one whose every rank's files some
  // member holds, from the save that committed it. Returns that step (or
  // -1) and says why newer ones cannot be.
  int64_t PlanMemoryLevel(int64_t durable);

  // On the verifier thread: touches no member state.
  int64_t PickRestoreStep(int64_t last_committed);

  // Growing back (CoordinatorOptions::grow): a step of the running
  // generation was just committed, so ending it now loses no saved work; the
  // spares waiting join the next generation, which restores that step.
  void MaybeGrow(int64_t step, int64_t generation);

  // `finished`: every member left, the job is over (its processes' memory
  // level with it); recorded so that the log tells that from a failure.
  void EndGeneration(const std::string& reason, bool finished = false);

  // ---------------- heartbeats and failure detection (server_liveness.cc) ----------------
  void Tick();

  void ExpireWaiters(double now);

  // ---------------- collectives (server_collectives.cc) ----------------
  absl::Status CheckRank(const std::shared_ptr<Session>& s, int64_t gen, int rank);

  // ---------------- two-phase commit (server_commit.cc) ----------------
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
  void CrashPoint(std::string_view phase);

  // Answers everyone waiting on a step's decision or outcome with `why`.
  static void AnswerAll(StepWaiters& w, const absl::Status& why);

  // The book's entry of `step` for generation `gen`. When an older
  // generation left it uncommitted, `gen` saves it again from scratch, and
  // whoever still waited on the old attempt is told it is over (a new
  // generation's requests must never see an older one's outcome, nor the
  // reverse).
  const CommitBook::Step& StepFor(int64_t step, int64_t gen);

  // `step` is a StepKey; a memory step's commit also records the ranks of
  // its save (`save_world`), which a restore from memory needs.
  bool JournalStep(JournalKind kind, int64_t step, int64_t generation, int save_world = 0, int erasure_k = 0,
                   int erasure_m = 0);

  void RaiseAlerts(std::vector<SdcAlert> alerts);

  // Journaled first: after a restart, whoever asks again must find the
  // decision; then counted, logged and answered.
  void Apply(std::vector<BookEvent> events);

  void RecordDurations(SaveDurations d);

  // ---------------- status (server_status.cc) ----------------

  std::string BuildStatusText() { return StatusText(View()); }
  std::string BuildStatus() { return coord::StatusJson(View()); }

  // Who leads, as a standby last saw it, or why none does yet. Runs on the
  // io thread while Init replays: it reads only the log's view.
  std::string StandbyOf() const;

  // A snapshot of everything the status and the metrics show. A standby
  // shows only the store and itself: its state is not replayed yet.
  StatusView View();

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
  void OnAcceptOutOfDescriptors(const boost::system::error_code& ec);

  void Accept();

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
    /// Members that must hold some of a rank's files to restore it: 1 for
    /// whole copies, k with erasure coding (the commit's record says which).
    int pieces_needed = 1;
  };
  int PiecesNeeded() const { return options_.memory_erasure_k > 0 ? options_.memory_erasure_k : 1; }
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

}  // namespace ckpt::coord

#endif  // CKPT_COORDINATOR_SERVER_IMPL_H_

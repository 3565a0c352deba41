// The elastic-restart coordinator: a control-plane service (Boost.Asio, one
// TCP port) that forms generations of workers, detects dead ones by missed
// heartbeats, relays the small collectives of Save and Load, arbitrates the
// two-phase commit and compares replica hashes. Tensors never pass through
// it. Protocol: docs/protocol.md. Library: ckpt::ckpt_coordinator.
//
//   auto client = ckpt::CoordinatorClient::Connect({.address = "127.0.0.1:7070",
//                                                   .token = token, .job = "run-7"});
//   auto a = (*client)->Join(600);                // blocks until a generation forms
//   opts.rank = a->first_rank; opts.world_size = a->world_size;
//   opts.communicator = (*client)->communicator(0);
//   opts.arbiter = (*client)->arbiter();
//   ... if ((*client)->stop_requested()) re-join and restore a->restore_step
#ifndef CKPT_COORDINATOR_H_
#define CKPT_COORDINATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/checkpointer.h"
#include "ckpt/communicator.h"
#include "ckpt/experimental/commit_arbiter.h"
#include "ckpt/export.h"
#include "ckpt/options.h"
#include "ckpt/peer.h"

namespace ckpt {

struct CKPT_EXPORT CoordinatorOptions {
  /// HOST:PORT to listen on; port 0 picks a free one (see port()).
  std::string listen = "127.0.0.1:0";
  /// Where the journal lives (generations, commits, SDC alerts). Required
  /// unless `store` is set.
  std::string state_dir;
  /// The state in etcd instead, so that it survives this machine:
  /// "etcd://HOST:PORT[,HOST:PORT...]/PREFIX[?ca_file=&cert_file=&key_file=&user=&password_file=]"
  /// (password also from $CKPT_ETCD_PASSWORD). Each record is created only
  /// if absent: a second coordinator on the same prefix is fenced off.
  std::string store;
  /// With `store`: a store that does not answer at first is waited for as
  /// a standby waits (Start returns once this coordinator leads), rather
  /// than failing Start as a setup error. `ckpt coordinator` sets it when a
  /// replica that stopped acting stands by again.
  bool wait_for_store = false;
  /// Shared secret of the job; joining proves knowledge of it (HMAC). At
  /// least 16 bytes, not only whitespace.
  std::string token;
  /// A generation forms once `min_nodes` members wait and either
  /// `max_nodes` are there or `join_timeout_s` passed since the last join.
  int min_nodes = 1;
  int max_nodes = 1 << 20;
  double join_timeout_s = 2;
  /// Growing back: while members wait as spares and the running generation
  /// has fewer than `max_nodes` members, the generation ends (a planned end)
  /// right after its next committed step, and the next one forms with the
  /// spares and restores that step. At most once every `grow_spacing_s`
  /// since the last generation formed. Off: spares wait until a member fails.
  bool grow = true;
  double grow_spacing_s = 10;
  /// A member that sent no heartbeat for heartbeat_s * dead_after is dead.
  double heartbeat_s = 1;
  int dead_after = 5;
  /// Frames larger than this are refused (the connection is closed). Before
  /// a connection has joined, its frames may not exceed 16 KiB whatever this
  /// says, and a payload's buffer grows only as its bytes arrive.
  uint32_t max_frame_bytes = 64u << 20;
  /// Connections that have not joined (status readers, members mid-handshake,
  /// HTTP scrapes) held at once; past it the oldest such one is dropped.
  int max_unauthenticated = 256;
  /// Seconds a connection has to join, or to finish its status or HTTP
  /// request, before it is dropped.
  double handshake_timeout_s = 10;
  /// A joined connection that sends nothing for this long is dropped (a
  /// member waiting for its generation to form is exempt). 0: the larger of
  /// 30 s and 4 x heartbeat_s x dead_after.
  double idle_timeout_s = 0;
  /// Optional checkpoint root: the step named for a restore is the latest
  /// committed one whose manifest passes `verify --fast`.
  std::string root;
  /// The memory level (ckpt/peer.h): how many other failure domains hold a
  /// copy of each rank's files. A generation whose members span fewer than
  /// memory_replicas + 1 domains makes no memory-level saves.
  int memory_replicas = 1;
  /// The memory level erasure coded instead (PlaceErasure): each rank's
  /// files cut into memory_erasure_k data and memory_erasure_m parity
  /// pieces, each in another failure domain; memory_replicas is then not
  /// used. 0: whole copies. A generation whose members span fewer than k + m
  /// domains makes no memory-level saves.
  int memory_erasure_k = 0;
  int memory_erasure_m = 0;
  /// Log lines (joins, deaths, refusals, SDC alerts); default: the
  /// process's log sink (ckpt/log.h), component "coordinator", level info.
  std::function<void(const std::string&)> log;
};

/// The job token in the file at `path`, without trailing newlines. Refuses,
/// with the fix in the message, a file that group or others may access and
/// a token shorter than 16 bytes or only whitespace.
CKPT_EXPORT absl::StatusOr<std::string> ReadJobToken(const std::string& path);

/// A running coordinator, serving on its own thread until destroyed.
class CKPT_EXPORT Coordinator {
 public:
  /// Replays the journal in state_dir, binds and starts serving.
  static absl::StatusOr<std::unique_ptr<Coordinator>> Start(const CoordinatorOptions& options);
  virtual ~Coordinator() = default;
  virtual int port() const = 0;
  /// Why it stopped acting (its state could not be recorded, or another
  /// coordinator took over the store); empty while it serves.
  virtual std::string halted() const = 0;
  /// The same JSON that `ckpt coordinator status` prints.
  virtual std::string StatusJson() = 0;
};

struct CKPT_EXPORT CoordinatorClientOptions {
  /// HOST:PORT; replicas of one coordinator as "HOST:PORT,HOST:PORT,...",
  /// tried in turn (the one that answered last first).
  std::string address;
  std::string token;
  std::string job = "default";
  std::string host;     ///< default: gethostname() and the pid
  int local_ranks = 1;  ///< ranks this worker runs (consecutive ranks)
  double heartbeat_s = 1;
  /// How long to keep reconnecting (with backoff) when the coordinator is
  /// unreachable, before failing every call.
  double reconnect_timeout_s = 60;
  /// Stay connected to a standby replica too (it answers only Status):
  /// for reading one replica's own view.
  bool accept_standby = false;
  /// This process's memory level: each join tells the coordinator where it
  /// listens, its failure domain and what it holds, and the assignment
  /// names the replica holders and, for a memory restore, the copies.
  std::shared_ptr<PeerMemory> peer_memory;
};

/// What a generation gives a member.
struct CKPT_EXPORT Assignment {
  int64_t generation = 0;
  int first_rank = 0;
  int local_ranks = 1;
  int world_size = 1;
  int members = 1;
  /// Step every rank restores (-1: none committed yet), and from which
  /// level: kMemory when every rank's files of a newer memory step are in
  /// some member's memory.
  int64_t restore_step = -1;
  SaveLevel restore_level = SaveLevel::kDurable;
  /// Why this generation makes no memory-level saves (fewer failure
  /// domains than replicas + 1, a member without peer memory); empty when
  /// it can.
  std::string memory_note;
  /// The memory level's directory, as the coordinator gave it: peer
  /// endpoints, each rank's own and replica holders' (indexes into
  /// `peer_endpoints`), and for a memory restore each saved rank's live
  /// copies.
  std::vector<std::string> peer_endpoints;
  std::vector<std::vector<uint32_t>> peer_holders, restore_holders;
  /// Erasure coding of this generation's memory-level saves (then
  /// peer_holders lists each rank's piece holders, piece 0 its own); 0:
  /// whole copies.
  int memory_erasure_k = 0;
  int memory_erasure_m = 0;

  /// Whether memory-level saves can be made in this generation.
  bool memory_level() const { return !peer_holders.empty() && memory_note.empty(); }
  /// The route of rank first_rank + local_rank for OpenPeerStorage.
  PeerRoute memory_route(int local_rank = 0) const;
};

/// A worker's connection: joins, heartbeats on a background thread,
/// reconnects after a coordinator restart, and provides the Communicator
/// and CommitArbiter of the current generation. Thread-safe.
class CKPT_EXPORT CoordinatorClient {
 public:
  static absl::StatusOr<std::unique_ptr<CoordinatorClient>> Connect(const CoordinatorClientOptions& options);
  virtual ~CoordinatorClient() = default;

  /// Joins (or re-joins) and blocks until a generation that includes this
  /// member forms. Clears stop_requested(). OutOfRange: the job finished
  /// while this member waited (every member of the running generation
  /// left); there is nothing left to do. PermissionDenied: a wrong token.
  virtual absl::StatusOr<Assignment> Join(double timeout_s) = 0;
  /// Collectives among the ranks of the current generation; `local_rank`
  /// in [0, local_ranks). Calls fail with Aborted once the generation ends.
  virtual std::shared_ptr<Communicator> communicator(int local_rank) = 0;
  virtual std::shared_ptr<CommitArbiter> arbiter() = 0;
  /// The memory level's arbiter (CheckpointerOptions::memory_arbiter).
  virtual std::shared_ptr<CommitArbiter> memory_arbiter() = 0;
  /// True once the coordinator ended this member's generation (a member
  /// died): stop training, Join again, restore.
  virtual bool stop_requested() const = 0;
  virtual std::string stop_reason() const = 0;
  /// The coordinator's status: JSON, or lines of text for people.
  virtual absl::StatusOr<std::string> Status(bool text = false) = 0;
  /// Leaves for good (the job finished on this member).
  virtual absl::Status Leave() = 0;
};

/// The kinds of record in a coordinator's state log (their numbers are the
/// log's).
enum class CoordinatorRecordKind : uint8_t {
  kGeneration = 1,
  kEnded = 2,
  kCommitted = 3,
  kAborted = 4,
  kSdc = 5,
  kDecided = 6
};

/// "generation", "ended", "committed", "aborted", "sdc", "decided".
CKPT_EXPORT const char* CoordinatorRecordKindName(CoordinatorRecordKind kind);

/// One record of a coordinator's state log, decoded.
struct CKPT_EXPORT CoordinatorRecord {
  int64_t seq = 0;  ///< 1-based position in the log
  CoordinatorRecordKind kind = CoordinatorRecordKind::kGeneration;
  int64_t generation = -1;
  int64_t step = -1;    ///< steps and SDC alerts
  bool memory = false;  ///< a step of the memory level
  int save_world = 0;   ///< a memory step's commit: the ranks of its save
  /// A memory step's commit: its files erasure coded k+m (0: whole copies).
  int erasure_k = 0;
  int erasure_m = 0;
  bool finished = false;  ///< a generation's end: every member left (the job finished)
  // A generation:
  int world = 0;
  int64_t restore_step = -1;
  struct Member {
    uint64_t id = 0;
    std::string host;
    int first_rank = 0;
    int local_ranks = 0;
  };
  std::vector<Member> members;
  // An SDC alert:
  std::string chunk, detail;
};

/// The memory level as a log shows it: the memory step committed last and
/// whether the job's processes still hold it.
struct CKPT_EXPORT CoordinatorMemoryLevel {
  enum class State : uint8_t {
    kNone,         ///< no memory step was ever committed
    kHeld,         ///< the running generation committed or restored it
    kUnconfirmed,  ///< the generation holding it ended and no other formed yet
    kDropped,      ///< a later generation did not restore it
    kGone,         ///< the job finished: every member left, its processes exited
  };
  State state = State::kNone;
  int64_t step = -1;
  int64_t generation = -1;  ///< the generation whose save committed it
  int save_world = 0;       ///< ranks of that save
  int erasure_k = 0;        ///< its files erasure coded k+m (0: whole copies)
  int erasure_m = 0;
  int64_t held_by = -1;  ///< the generation that held it last, or the one that dropped it
};

/// "none", "held", "unconfirmed", "dropped", "gone".
CKPT_EXPORT const char* CoordinatorMemoryStateName(CoordinatorMemoryLevel::State state);

/// Every decision a coordinator's log holds, and what contradicts in them:
/// a step of one generation both committed and aborted, or decided for
/// commit after it was aborted; a durable step committed by two
/// generations; a generation number that does not grow. (A step decided for
/// commit may still abort: its leader could not publish it; a step aborted
/// in one generation is saved again in the next.)
struct CKPT_EXPORT CoordinatorHistory {
  std::vector<CoordinatorRecord> records;
  std::set<int64_t> committed, aborted, decided;  ///< durable steps, in any generation
  std::set<int64_t> memory_committed;             ///< memory steps, in any generation
  std::vector<std::string> contradictions;
  /// Each process keeps the newest committed memory step (docs/levels.md),
  /// and a generation restores it or drops it: this follows that through
  /// the log. A log cannot tell which processes survived a generation's
  /// end, so between generations the step is only kUnconfirmed.
  CoordinatorMemoryLevel memory;
  std::string where;  ///< the journal or store read
};

/// Reads a coordinator's state log, its journal (`state_dir`) or its etcd
/// store (`store`, as CoordinatorOptions::store), without leading or
/// writing: safe while the coordinator runs (`ckpt coordinator history`,
/// `ckpt list --state-dir`).
CKPT_EXPORT absl::StatusOr<CoordinatorHistory> ReadCoordinatorHistory(const std::string& state_dir,
                                                                      const std::string& store);

}  // namespace ckpt

#endif  // CKPT_COORDINATOR_H_

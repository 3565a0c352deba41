// The memory level: checkpoints held in the host memory of the job's own
// processes, each rank's files copied to replica holders in other failure
// domains, so that losing a node restores from peers without touching
// storage. Library: ckpt::ckpt_coordinator (it needs Boost.Asio).
//
//   auto memory = ckpt::PeerMemory::Start({.token = token, .domain = "node-3"});
//   // the coordinator's assignment names the replica holders and, for a
//   // memory restore, who holds what (Assignment::memory_route):
//   auto storage = ckpt::OpenPeerStorage(*memory, route);
//   opts.memory_storage = *storage;   // CheckpointerOptions
//   cp->Save(step, state, {.level = ckpt::SaveLevel::kMemory});
//
// A file is written whole into this process's memory and then into the
// memory of every replica holder before Finish returns, so a rank's vote
// (and so a commit) means r + 1 copies. With erasure coding (PeerRoute::
// erasure_k) Finish returns once all k + m pieces are placed, each in
// another failure domain: (k + m) / k of the state in memory, and any m
// domains may be lost. Data plane: one TCP port per
// process, every connection proves knowledge of the job's token (HMAC of a
// nonce), every frame carries the xxh3 of its payload. docs/levels.md.
#ifndef CKPT_PEER_H_
#define CKPT_PEER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/communicator.h"
#include "ckpt/export.h"
#include "ckpt/load_exchange.h"
#include "ckpt/storage.h"

namespace ckpt {

struct CKPT_EXPORT PeerMemoryOptions {
  /// HOST:PORT to listen on; port 0 picks a free one (see endpoint()).
  std::string listen = "127.0.0.1:0";
  /// The job's shared secret (at least 16 bytes): every connection, in
  /// either direction, proves it knows it.
  std::string token;
  /// Failure domain of this process (a node, a rack): replicas go to other
  /// domains. Default: the host name.
  std::string domain;
  /// Bytes of checkpoint data (own files and replicas) held at most; a file
  /// that does not fit is refused with ResourceExhausted.
  int64_t budget_bytes = int64_t{4} << 30;
  /// Limit of each network operation (connect, one request's reply); a
  /// connection that has not proved the token within it is dropped.
  double io_timeout_s = 30;
  /// Connections that have not proved the token yet, held at once; past it
  /// the oldest such one is dropped (as the coordinator does).
  int max_unauthenticated = 64;
  /// Refusals and failovers; default: the process's log sink (ckpt/log.h),
  /// component "peer", level info.
  std::function<void(const std::string&)> log;
};

/// The files of one step a process holds whole, by the rank of the save
/// that wrote them (the owner), for each generation that wrote some. The owner of MANIFEST, CLAIM and LATEST is
/// the save's leader, rank 0; rank 0 counts as held only with its MANIFEST.
struct CKPT_EXPORT PeerHolding {
  int64_t step = 0;
  int64_t generation = 0;   ///< PeerRoute::generation of the writer
  std::vector<int> owners;  ///< ascending
};

struct CKPT_EXPORT PeerMemoryStats {
  int64_t budget_bytes = 0;
  int64_t held_bytes = 0;  ///< files held now (own and replicas)
  int64_t peak_bytes = 0;  ///< most held at once, uploads in progress included
  int64_t files = 0;
  int64_t refused = 0;         ///< files refused for the budget
  int64_t bytes_received = 0;  ///< from peers (replicas placed here)
  int64_t bytes_served = 0;    ///< to peers (restores)
  /// Memory of dropped files kept to hold the next ones without new page
  /// faults (counted against the budget's free part).
  int64_t spare_bytes = 0;
};

/// One process's memory store and the server that lets peers place and read
/// copies in it. Thread-safe.
class CKPT_EXPORT PeerMemory {
 public:
  static absl::StatusOr<std::shared_ptr<PeerMemory>> Start(const PeerMemoryOptions& options);
  virtual ~PeerMemory() = default;
  /// HOST:PORT peers connect to.
  virtual std::string endpoint() const = 0;
  virtual std::string domain() const = 0;
  /// What this process can serve, newest step last.
  virtual std::vector<PeerHolding> Holdings() const = 0;
  /// Forgets every step older than `step` (once `step` is committed at the
  /// memory level, older ones are not needed).
  virtual void DropStepsBefore(int64_t step) = 0;
  /// Forgets every step but `step` (-1: all), and the files outside steps
  /// (LATEST): a generation that restored `step` saves the later ones again.
  virtual void DropStepsExcept(int64_t step) = 0;
  virtual PeerMemoryStats Stats() const = 0;
};

/// Where a rank's files go, and where the files of a save are found.
struct CKPT_EXPORT PeerRoute {
  /// Endpoints of this rank's replica holders: every file this rank writes
  /// is placed in their memory too. With erasure coding, the holders of
  /// pieces 1 .. k + m - 1 in order (piece 0 stays in this memory).
  std::vector<std::string> replicas;
  /// Erasure coding (PlaceErasure) instead of whole copies: every file this
  /// rank writes is cut into `erasure_k` data and `erasure_m` parity pieces
  /// (Reed-Solomon), held as "<path>.ec<j>", piece j in the memory of
  /// holder j. A read gathers data pieces where they live and rebuilds a
  /// missing one from parity; any erasure_m holders may be lost. 0: whole
  /// copies. Reads find coded and whole files whatever this says.
  int erasure_k = 0;
  int erasure_m = 0;
  /// Endpoints holding the files rank `owner` wrote when saving `step`
  /// (step -1: files outside a step, as LATEST), nearest first. This
  /// process's own memory is always looked in first.
  std::function<std::vector<std::string>(int64_t step, int owner)> holders;
  /// Every process of the job, for List: a listing is the union of this
  /// process's memory and theirs (what a leader needs to find the ranks'
  /// reports when no outside arbiter takes the votes). Empty: this
  /// process's memory alone.
  std::vector<std::string> peers;
  /// Tags every file written (see PeerHolding), so that what one
  /// generation saved is never taken for another's save of the same step.
  int64_t generation = 0;
  /// Paces the copies this rank sends, all replica holders together, to
  /// this many bytes per second (at least 1 MiB/s), so that they leave
  /// room on the network for the trainer's own traffic; 0: as fast as the
  /// network takes them.
  double send_bytes_per_s = 0;
};

/// Where bytes read through a peer storage came from.
struct CKPT_EXPORT PeerReadCounters {
  int64_t from_own = 0;    ///< this process's memory
  int64_t from_peers = 0;  ///< other processes' memory
  int64_t failovers = 0;   ///< reads moved to another copy after one failed
  /// Erasure-coded files: file bytes rebuilt from parity, and the data
  /// pieces that had to be (missing, or refused as damaged).
  int64_t bytes_rebuilt = 0;
  int64_t pieces_lost = 0;
};

/// A Storage over the memory level: writes go to `memory` and to every
/// replica of `route`; reads come from `memory`, else from the holders
/// `route` names, moving to the next copy when one fails (a dead peer, a bad
/// checksum). Not durable.
CKPT_EXPORT absl::StatusOr<std::shared_ptr<Storage>> OpenPeerStorage(std::shared_ptr<PeerMemory> memory,
                                                                     PeerRoute route);
/// The counters of a storage from OpenPeerStorage (zeros for any other).
CKPT_EXPORT PeerReadCounters PeerStorageCounters(Storage& storage);

/// A LoadExchange (ckpt/load_exchange.h) on the memory level's transport,
/// for CheckpointerOptions::load_exchange: a rank offers the pieces it reads
/// for others as files of `memory` (within its budget, until the load ends),
/// and fetches the others' from their memory. A collective over `comm`
/// (every rank calls it, each with its own memory): the leader gathers the
/// ranks' endpoints and domains and hands every rank the table. The
/// domains are the hosts the load spreads its readers over.
CKPT_EXPORT absl::StatusOr<std::shared_ptr<LoadExchange>> OpenLoadExchange(std::shared_ptr<PeerMemory> memory,
                                                                           Communicator& comm, double timeout_s = 300);

/// Replica holders for every rank: `domains[i]` is rank i's failure domain.
/// Rank i's holders are `replicas` ranks, each in another domain and no two
/// in the same one, spread so that every rank holds about `replicas` others'
/// files. FailedPrecondition when there are fewer than replicas + 1 domains.
CKPT_EXPORT absl::StatusOr<std::vector<std::vector<int>>> PlaceReplicas(const std::vector<std::string>& domains,
                                                                        int replicas);

/// Holders of the erasure-coded pieces of every rank's files (k data and m
/// parity pieces, Reed-Solomon): `domains[i]` is rank i's failure domain.
/// Rank i's k + m holders, piece j held by out[i][j], are in k + m
/// different domains, piece 0 by rank i itself, and every rank holds about
/// k + m pieces, so that losing any m domains leaves k pieces of every
/// file. FailedPrecondition when there are fewer than k + m domains,
/// InvalidArgument for a shape outside 1 <= k, 1 <= m, k + m <= 32.
CKPT_EXPORT absl::StatusOr<std::vector<std::vector<int>>> PlaceErasure(const std::vector<std::string>& domains, int k,
                                                                       int m);

}  // namespace ckpt

#endif  // CKPT_PEER_H_

// Where the coordinator keeps its durable state: an ordered log of records
// (generations, step decisions, SDC alerts), each durable before the
// coordinator acts on it. Two homes behind one interface:
//   - a journal file in --state-dir (journal.h): survives a restart on the
//     same machine;
//   - etcd (--store etcd://...): survives the machine. Record N is the key
//     PREFIX/log/<N, 20 digits>, created only if absent, so of two
//     coordinators appending on one store only one can write record N, and
//     only the one holding the leader key may write at all; the other is
//     fenced off: its append fails and it stops acting.
#ifndef CKPT_COORDINATOR_STATE_LOG_H_
#define CKPT_COORDINATOR_STATE_LOG_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/records.h"

namespace ckpt::coord {

/// Where the state lives and who writes it, for status and metrics.
struct StoreView {
  std::string kind;                   ///< "journal" or "etcd"
  std::string where;                  ///< Describe()
  std::string self;                   ///< this replica ("host pid N HOST:PORT")
  std::string leader;                 ///< the replica that writes the state ("" not known)
  bool leading = true;                ///< this replica is the leader
  std::vector<std::string> standbys;  ///< the other replicas on the store
  /// Leaders the store has had, this one included (etcd: one key each).
  int64_t leaders = 1;
  struct Endpoint {
    std::string url;
    bool up = false;
    bool raft_leader = false;  ///< this member leads the etcd cluster
    int64_t raft_term = 0;
    int64_t db_bytes = 0;
    double rtt_s = 0;  ///< of the status request
    std::string error;
  };
  std::vector<Endpoint> endpoints;  ///< etcd members as last probed
  double probed_s_ago = -1;         ///< -1: not probed yet
};

/// Threads: the coordinator calls Open once, on the thread that starts it,
/// while its io thread already answers hellos and status as a standby; it
/// calls Append and Health on the io thread, after Open returned. Describe
/// and View may be called from any thread at any time, Open included.
class StateLog {
 public:
  virtual ~StateLog() = default;
  /// Calls `replay` for every record in order. A journal file cuts a torn
  /// tail (counted in `torn`); a store refuses gaps and undecodable entries,
  /// naming the key.
  virtual absl::Status Open(const std::function<absl::Status(std::string_view)>& replay, uint64_t* torn) = 0;
  /// Makes `record` durable after the others. FailedPrecondition when
  /// another writer took its place (this one is fenced off).
  virtual absl::Status Append(std::string_view record) = 0;
  /// "journal /var/ckpt/journal", "etcd http://10.0.0.1:2379 /ckpt/job42/".
  /// Fixed at construction: callable from any thread, also while Open runs.
  virtual std::string Describe() const = 0;
  /// Not OK once this writer may no longer append (its leadership lapsed).
  virtual absl::Status Health() const { return absl::OkStatus(); }
  /// The store as last observed (cheap: a background thread refreshes it;
  /// callable from any thread, also while Open waits as a standby).
  virtual StoreView View() const = 0;
};

std::unique_ptr<StateLog> NewJournalLog(const std::string& dir);
/// etcd://HOST:PORT[,HOST:PORT...]/PREFIX (etcd_client.h has the options).
/// Open first makes this writer the leader of the prefix: the key
/// PREFIX/leader (holding `identity`) created under a lease it renews; while
/// another holds it, Open waits (a standby), saying so through `log`. Every
/// append is conditioned on that key being the one this writer created, so
/// a leader whose lease lapsed (paused, cut off) cannot append anything.
/// `identity` defaults to ThisProcess(). Each replica registers
/// PREFIX/replicas/<lease> (its identity) under its
/// lease, and each new leader PREFIX/leaders/<revision>, so that status
/// can name the standbys and count leader changes.
/// "host pid N": who this process is, in leader and replica keys.
std::string ThisProcess();

/// `patient`: Open waits, standing by, while the store does not answer,
/// even before it answered once (otherwise that is a setup error).
absl::StatusOr<std::unique_ptr<StateLog>> NewEtcdLog(std::string_view uri, std::string identity = "",
                                                     std::function<void(const std::string&)> log = nullptr,
                                                     bool patient = false);

/// The records of a store or journal, read without leading or writing
/// (`ckpt coordinator history`). `replay` as for Open.
absl::Status ReadStateLog(const std::string& state_dir, const std::string& store,
                          const std::function<absl::Status(int64_t seq, std::string_view record)>& replay,
                          std::string* where);

/// Every record of a store or journal decoded into `*history` (read only).
absl::Status ReadHistory(const std::string& state_dir, const std::string& store, History* history, std::string* where);

}  // namespace ckpt::coord

#endif  // CKPT_COORDINATOR_STATE_LOG_H_

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

#include "absl/status/statusor.h"

namespace ckpt::coord {

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
  virtual std::string Describe() const = 0;
  /// Not OK once this writer may no longer append (its leadership lapsed).
  virtual absl::Status Health() const { return absl::OkStatus(); }
};

std::unique_ptr<StateLog> NewJournalLog(const std::string& dir);
/// etcd://HOST:PORT[,HOST:PORT...]/PREFIX (etcd_client.h has the options).
/// Open first makes this writer the leader of the prefix: the key
/// PREFIX/leader (holding `identity`) created under a lease it renews; while
/// another holds it, Open waits (a standby), saying so through `log`. Every
/// append is conditioned on that key being the one this writer created, so
/// a leader whose lease lapsed (paused, cut off) cannot append anything.
absl::StatusOr<std::unique_ptr<StateLog>> NewEtcdLog(std::string_view uri, std::string identity = "",
                                                     std::function<void(const std::string&)> log = nullptr);

}  // namespace ckpt::coord

#endif  // CKPT_COORDINATOR_STATE_LOG_H_

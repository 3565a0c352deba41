// Collectives among the ranks of a job, used for planning (which replica
// writes a chunk, which blocks each rank reads). Tensors never pass through
// it: only small metadata messages.
#ifndef CKPT_COMMUNICATOR_H_
#define CKPT_COMMUNICATOR_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ckpt/export.h"

namespace ckpt {

/// Every rank must call the same collectives in the same order. Each call
/// gives up with DeadlineExceeded after `timeout_s` (a dead rank must not
/// hang the others). Rank 0 is the leader. Implementations: local threads
/// (CreateLocalCommunicators), MPI (ckpt/mpi.h), the elastic coordinator.
/// Thread-safety: one collective at a time per Communicator object.
class CKPT_EXPORT Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  /// The leader receives every rank's message, in rank order; the others
  /// receive an empty vector.
  virtual absl::StatusOr<std::vector<std::string>> Gather(std::string_view mine, double timeout_s) = 0;
  /// The leader passes one message per rank; each rank receives its own.
  virtual absl::StatusOr<std::string> Scatter(const std::vector<std::string>& from_leader, double timeout_s) = 0;
  /// Every rank receives the leader's message.
  virtual absl::StatusOr<std::string> Broadcast(std::string_view from_leader, double timeout_s) = 0;
  virtual absl::Status Barrier(double timeout_s) = 0;
  /// Whether the collectives may be called from any thread (still one at a
  /// time). Save then takes the step's claim (a broadcast from the leader)
  /// on a thread of its own while it stages; otherwise ckpt calls the
  /// communicator only from the thread that calls Save or Load. The local
  /// and coordinator communicators may; MPI's does not (its thread level
  /// is the application's choice).
  virtual bool CallableFromAnyThread() const { return false; }
};

/// `n` communicators for ranks that are threads of one process.
CKPT_EXPORT std::vector<std::shared_ptr<Communicator>> CreateLocalCommunicators(int n);

}  // namespace ckpt

#endif  // CKPT_COMMUNICATOR_H_

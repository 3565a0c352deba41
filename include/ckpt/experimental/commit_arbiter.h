// EXPERIMENTAL: the seam between a Checkpointer and an outside commit
// arbiter (the elastic coordinator's client implements it). It may change
// in any minor version; the stable API is ckpt/checkpointer.h.
#ifndef CKPT_EXPERIMENTAL_COMMIT_ARBITER_H_
#define CKPT_EXPERIMENTAL_COMMIT_ARBITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ckpt/export.h"

namespace ckpt {

/// A rank's copy of a shard that other ranks hold too (data-parallel
/// replicas), hashed at Save so that an arbiter can catch silent data
/// corruption: replicas of one box must agree.
struct CKPT_EXPORT ReplicaHash {
  std::string key;       ///< tensor fqn and box, e.g. "w[0:4096,0:512]"
  uint64_t hash = 0;     ///< xxh3 of the packed bytes
  bool written = false;  ///< this rank's copy is the one saved
};

/// One rank's phase-1 vote on a step.
struct CKPT_EXPORT SaveVote {
  bool ok = true;
  uint64_t save_id = 0;  ///< the save's identity (its CLAIM)
  std::string error;     ///< when !ok
  double stall_s = 0;
  double write_s = 0;
  int64_t bytes = 0;
  std::vector<ReplicaHash> replicas;
};

/// Two-phase commit through an outside arbiter (the elastic coordinator)
/// instead of the shared storage: every rank votes once its data is durable
/// (or failed); the leader publishes the manifest only after the arbiter
/// decided to commit (every rank of the generation voted yes, none died,
/// replicas agree), then reports the outcome; the other ranks learn it from
/// the arbiter. Thread-safe.
class CKPT_EXPORT CommitArbiter {
 public:
  virtual ~CommitArbiter() = default;
  /// Phase 1, every rank.
  virtual absl::Status Vote(int rank, int64_t step, const SaveVote& vote) = 0;
  /// Leader: blocks until the arbiter decides. OK: publish; otherwise the
  /// step is aborted and the error says why (a rank failed or died, replicas
  /// disagree, the deadline passed).
  virtual absl::Status AwaitDecision(int64_t step, double timeout_s) = 0;
  /// Leader: whether the manifest was published.
  virtual absl::Status Published(int64_t step, const absl::Status& outcome) = 0;
  /// Other ranks: blocks until the step is committed (OK) or aborted.
  virtual absl::Status AwaitOutcome(int64_t step, double timeout_s) = 0;
};

}  // namespace ckpt

#endif  // CKPT_EXPERIMENTAL_COMMIT_ARBITER_H_

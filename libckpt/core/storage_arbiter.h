// The commit protocol without a coordinator, as a CommitArbiter: the leader
// learns the votes by polling the shared storage for every rank's report
// (or a rank's FAILED marker, or its own claim lost), and the other ranks
// learn the outcome by polling for MANIFEST or ABORTED. The Checkpointer
// writes the reports and markers; this only reads them, so the files on the
// storage are the same whichever arbiter decides.
#ifndef CKPT_CORE_STORAGE_ARBITER_H_
#define CKPT_CORE_STORAGE_ARBITER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "ckpt/experimental/commit_arbiter.h"
#include "ckpt/storage.h"

namespace ckpt {

class StorageArbiter final : public CommitArbiter {
 public:
  StorageArbiter(std::shared_ptr<Storage> storage, int world_size);

  /// Records the save id of this rank's save of `step` (the report or the
  /// FAILED marker is already on the storage).
  absl::Status Vote(int rank, int64_t step, const SaveVote& vote) override;
  /// Leader: OK once every rank reported; a rank's FAILED marker of this
  /// save, the deadline or a lost claim decide against the commit.
  absl::Status AwaitDecision(int64_t step, double timeout_s) override;
  absl::Status Published(int64_t step, const absl::Status& outcome) override;
  /// Other ranks: OK once MANIFEST exists and the claim is this save's;
  /// this save's ABORTED, or the claim lost, decide against it.
  absl::Status AwaitOutcome(int64_t step, double timeout_s) override;

 private:
  /// The save id voted for `step` (and forgets it).
  uint64_t TakeId(int64_t step);

  std::shared_ptr<Storage> storage_;
  int world_size_;
  std::mutex mu_;
  std::map<int64_t, uint64_t> ids_;
};

}  // namespace ckpt

#endif  // CKPT_CORE_STORAGE_ARBITER_H_

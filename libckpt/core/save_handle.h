// Shared state behind SaveHandle.
#ifndef CKPT_CORE_SAVE_HANDLE_H_
#define CKPT_CORE_SAVE_HANDLE_H_

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "ckpt/checkpointer.h"
#include "pipeline/save_engine.h"

namespace ckpt {

struct SaveHandle::Shared {
  int64_t step = 0;
  double t_start = 0;

  /// Written by the save engine.
  std::shared_ptr<SaveCounters> counters = std::make_shared<SaveCounters>();

  mutable std::mutex mu;
  std::condition_variable cv;
  bool durable = false;
  absl::Status durable_status;
  bool done = false;
  absl::Status status;
  SaveStats stats;
  std::shared_ptr<Storage> storage;  ///< for WaitReplicated

  /// This rank's data and report are durable (or failed).
  void SetDurable(absl::Status s, double write_s);
  /// The step committed (or failed). Implies durable.
  void SetDone(absl::Status s, double commit_s);
};

}  // namespace ckpt

#endif  // CKPT_CORE_SAVE_HANDLE_H_

// The leader's half of a commit on the storage, once the arbiter decided:
// every rank's report becomes the step's MANIFEST (and its copy) and LATEST
// moves to it; or the step is given up.
#ifndef CKPT_CORE_PUBLISH_H_
#define CKPT_CORE_PUBLISH_H_

#include <cstdint>

#include "absl/status/status.h"
#include "ckpt/storage.h"

namespace ckpt {

/// Merges the `world_size` reports of save `save_id` into the manifest,
/// checks the claim a last time (the manifest keeps its bytes), writes
/// MANIFEST, then MANIFEST.copy and LATEST (failures of those two are said on
/// stderr: the step is committed without them), and removes the reports.
/// A report of another save, a merge that fails or a lost claim leaves the
/// step uncommitted (AbortStep). Retention is the caller's.
absl::Status PublishStep(Storage& storage, int64_t step, uint64_t save_id, int world_size);

/// The leader gives up on the step: ABORTED tells the other ranks, and the
/// claim is released so that the step can be saved again. Nothing is written
/// into a step another save holds. Returns `why`.
absl::Status AbortStep(Storage& storage, int64_t step, uint64_t save_id, absl::Status why);

}  // namespace ckpt

#endif  // CKPT_CORE_PUBLISH_H_

// The leader's half of a commit on the storage, once the arbiter decided:
// every rank's report becomes the step's MANIFEST (and its copy) and LATEST
// moves to it; or the step is given up.
#ifndef CKPT_CORE_PUBLISH_H_
#define CKPT_CORE_PUBLISH_H_

#include <cstdint>

#include "absl/status/status.h"
#include "ckpt/storage.h"
#include "core/rule_commit.h"

namespace ckpt {

/// A save of laid-out states: the rules and the leader's manifest of them,
/// and the leader's own report (its head: metadata, codec, times).
struct RuleCommit {
  const SaveRules* rules = nullptr;
  RuleManifest* manifest = nullptr;
  const Manifest* head = nullptr;
};

/// Merges the `world_size` reports of save `save_id` into the manifest (or,
/// when they are summaries, fills the rules' manifest from them: `rules`
/// must then be given),
/// checks the claim a last time (the manifest keeps its bytes), writes
/// MANIFEST, then MANIFEST.copy and LATEST (failures of those two are said on
/// stderr: the step is committed without them), and removes the reports.
/// A report of another save, a merge that fails or a lost claim leaves the
/// step uncommitted (AbortStep). Retention is the caller's.
absl::Status PublishStep(Storage& storage, int64_t step, uint64_t save_id, int world_size,
                         const RuleCommit* rules = nullptr);

/// The leader gives up on the step: ABORTED tells the other ranks, and the
/// claim is released so that the step can be saved again. Nothing is written
/// into a step another save holds. Returns `why`.
absl::Status AbortStep(Storage& storage, int64_t step, uint64_t save_id, absl::Status why);

}  // namespace ckpt

#endif  // CKPT_CORE_PUBLISH_H_

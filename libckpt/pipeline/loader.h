// The load path: overlaps of the target's boxes with the saved chunks ->
// the minimal set of blocks -> ranged reads -> both checksums -> decode ->
// scatter into the target's memory.
#ifndef CKPT_PIPELINE_LOADER_H_
#define CKPT_PIPELINE_LOADER_H_

#include "absl/status/statusor.h"
#include "ckpt/options.h"
#include "ckpt/state.h"
#include "ckpt/storage.h"
#include "format/manifest.h"

namespace ckpt {

/// Fills `target` from the committed step described by `manifest`. `rank`
/// selects per-rank blobs whose source rank is unspecified.
absl::StatusOr<LoadStats> LoadFromManifest(Storage& storage, const Manifest& manifest, const State& target, int rank,
                                           const LoadOptions& options);

/// What LoadFromManifest would read, planned by its own code and nothing
/// read: the chunks and blobs met and their blocks.
struct LoadPlanCounts {
  int64_t chunks = 0;  ///< chunks and blobs read from
  int64_t blocks = 0;
  int64_t bytes_needed = 0;
};
absl::StatusOr<LoadPlanCounts> PlanLoad(const Manifest& manifest, const State& target, int rank,
                                        const LoadOptions& options = {});

}  // namespace ckpt

#endif  // CKPT_PIPELINE_LOADER_H_

// The load path: overlaps of the target's boxes with the saved chunks ->
// the minimal set of blocks -> ranged reads -> both checksums -> decode ->
// scatter into the target's memory.
#ifndef CKPT_PIPELINE_LOADER_H_
#define CKPT_PIPELINE_LOADER_H_

#include "absl/status/statusor.h"
#include "ckpt/options.h"
#include "ckpt/state.h"
#include "ckpt/storage.h"
#include "format/data_file.h"
#include "format/manifest.h"
#include "pipeline/delta_chain.h"

namespace ckpt {

/// Where a load reads its data files' frames: given each file it needs as
/// storage opened it, with the file's block index, the file to read the
/// frames from instead (a cooperative load's, core/coop_load.h). Route is
/// called for every file before the first frame is read.
class ReadRouter {
 public:
  virtual ~ReadRouter() = default;
  /// `file` indexes the manifest's files. The router keeps `stored`; what
  /// it returns is used until the load returns.
  virtual std::unique_ptr<ReadableFile> Route(uint32_t file, std::unique_ptr<ReadableFile> stored,
                                              const std::vector<IndexEntry>& index) = 0;
  /// Every file is routed; frames are about to be read.
  virtual void Start() {}
};

/// Fills `target` from the committed step described by `manifest`. `rank`
/// selects per-rank blobs whose source rank is unspecified. With a
/// `router`, frames are read where it says. Blocks stored as deltas are
/// rebuilt along their chains from the steps `bases` gives (read from
/// `storage`, never through the router); without it they are refused.
absl::StatusOr<LoadStats> LoadFromManifest(Storage& storage, const Manifest& manifest, const State& target, int rank,
                                           const LoadOptions& options, ReadRouter* router = nullptr,
                                           BaseManifests* bases = nullptr);

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

// The one read planner of a target box: which saved chunks of a tensor it
// meets (on the tensor's grid, or through an interval index of its listed
// chunks) and which blocks of each hold the intersection. The loader
// (LoadFromManifest, PlanLoad), `ckpt plan`'s load plan (PlanMeshLoad) and
// the restart benchmarks plan through it.
#ifndef CKPT_PLAN_BOX_READS_H_
#define CKPT_PLAN_BOX_READS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/tensor.h"
#include "format/manifest.h"
#include "plan/cover.h"

namespace ckpt {

/// The tensor of step `m` a target of `want` reads: NotFound when the step
/// has none of that name, InvalidArgument when its dtype or shape differ
/// (both naming the tensor and the step).
absl::StatusOr<const ManifestTensor*> FindSavedTensor(const Manifest& m, const TensorSpec& want);

/// The saved chunks of one tensor that target boxes meet.
class ChunkFinder {
 public:
  /// `t` and `files` (its manifest's) must outlive the finder.
  ChunkFinder(const ManifestTensor& t, const std::vector<ManifestFile>& files);
  ChunkFinder(const ChunkFinder&) = delete;
  ChunkFinder& operator=(const ChunkFinder&) = delete;

  /// Calls `fn` for every chunk meeting `box`, in the tensor's chunk order:
  /// a listed chunk is `t`'s own (its address stays valid), a grid cell of a
  /// grid-only tensor a value made for the call (GridChunk).
  void ForEachMeeting(const Box& box, const std::function<void(const ManifestChunk&)>& fn);
  /// The same when only each chunk's box and file are needed: a grid cell's
  /// first block is not looked up.
  void ForEachBoxMeeting(const Box& box, const std::function<void(const Box& chunk, uint32_t file)>& fn);

 private:
  const ManifestTensor& t_;
  const std::vector<ManifestFile>& files_;
  std::vector<Box> boxes_;             // the listed chunks' boxes, for the index
  std::unique_ptr<ChunkIndex> index_;  // built on first use
};

/// The blocks of a chunk of box `chunk` (elements of `elem_size` bytes, blocks of
/// `block_size` raw bytes) that hold its intersection with `box`, appended
/// to `ranges` as inclusive block ranges relative to the chunk's first block.
void BlocksToRead(const Box& chunk, const Box& box, uint64_t elem_size, uint64_t block_size,
                  std::vector<std::pair<uint64_t, uint64_t>>* ranges);

}  // namespace ckpt

#endif  // CKPT_PLAN_BOX_READS_H_

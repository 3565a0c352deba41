// Save planning over a mesh: every global box written exactly once, each
// replicated chunk by one replica chosen to balance bytes within its group.
#ifndef CKPT_PLAN_H_
#define CKPT_PLAN_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/export.h"
#include "ckpt/mesh.h"

namespace ckpt {

/// One chunk to write: tensor index into the layout list, its box, the rank
/// that writes it and how many ranks hold a copy.
struct CKPT_EXPORT ChunkAssignment {
  int32_t tensor = 0;
  Box box;
  int64_t writer = 0;
  int64_t replicas = 1;
};

struct CKPT_EXPORT SavePlan {
  Mesh mesh;
  std::vector<ChunkAssignment> chunks;
  /// Per rank: indices into `chunks` it writes.
  std::vector<std::vector<int64_t>> by_rank;
  /// Per rank: bytes it writes.
  std::vector<int64_t> bytes_by_rank;
};

/// Plans a save of `layouts` over `mesh`. Empty boxes are skipped. A box
/// held by several ranks is written by the holder to which that replica
/// group's earlier boxes (largest first, ties in the order of the tensors'
/// names) gave the fewest bytes, ties to the lowest rank: a rule each holder
/// can apply alone, from the layouts. The Checkpointer's saves follow it,
/// with layouts or given boxes.
CKPT_EXPORT absl::StatusOr<SavePlan> PlanSave(const std::vector<TensorLayout>& layouts, const Mesh& mesh);

/// One box a rank holds, and whether it writes it.
struct CKPT_EXPORT RankWrite {
  int32_t tensor = 0;  ///< index into the layout list
  Box box;
  bool writes = true;
};

/// One rank's part of PlanSave, computed alone: the non-empty boxes `rank`
/// holds, in layout order, each marked with whether PlanSave's rule makes
/// this rank its writer. It costs the rank's own boxes (times the size of
/// their replica groups), not the mesh's, and needs nothing from the other
/// ranks: every holder of a replicated box reaches the same writer.
CKPT_EXPORT absl::StatusOr<std::vector<RankWrite>> PlanRankWrites(const std::vector<TensorLayout>& layouts,
                                                                  const Mesh& mesh, int64_t rank);

/// What a save's manifest built from the layouts' rules holds (the
/// manifest its leader commits).
struct CKPT_EXPORT RuleManifestStats {
  int64_t chunks = 0;         ///< every tensor's chunks, grid cells included
  int64_t grid_tensors = 0;   ///< tensors described by their grid alone
  int64_t listed_chunks = 0;  ///< chunks of the tensors that are not a grid
  /// Per rank of the mesh: raw bytes it writes.
  std::vector<int64_t> bytes_by_rank;
};

/// The load of a whole mesh planned against a manifest: what every rank
/// reads.
struct CKPT_EXPORT LoadPlanStats {
  int64_t ranks = 0;
  int64_t distinct_boxes = 0;  ///< target boxes planned (replicas share one)
  int64_t overlaps = 0;        ///< (target box, saved chunk) pairs
  int64_t block_ranges = 0;    ///< contiguous read requests, all ranks
  int64_t blocks = 0;          ///< blocks read, all ranks
  int64_t bytes_needed = 0;    ///< raw bytes the ranks ask for, all ranks
  int64_t bytes_read = 0;      ///< raw bytes of the blocks read, all ranks
  double Amplification() const {
    return bytes_needed ? static_cast<double>(bytes_read) / static_cast<double>(bytes_needed) : 1.0;
  }
  /// Per target tensor (same order as the layouts): bytes needed and read.
  std::vector<std::pair<int64_t, int64_t>> per_tensor;
};

}  // namespace ckpt

#endif  // CKPT_PLAN_H_

// Save planning over a mesh: every global box written exactly once, each
// replicated chunk by one replica chosen to balance bytes within its group.
#ifndef CKPT_PLAN_H_
#define CKPT_PLAN_H_

#include <cstdint>
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

}  // namespace ckpt

#endif  // CKPT_PLAN_H_

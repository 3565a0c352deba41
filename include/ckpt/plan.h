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
/// group's earlier boxes (in tensor order) gave the fewest bytes, ties to the
/// lowest rank: a rule each holder can apply alone, from the layouts.
CKPT_EXPORT absl::StatusOr<SavePlan> PlanSave(const std::vector<TensorLayout>& layouts, const Mesh& mesh);

}  // namespace ckpt

#endif  // CKPT_PLAN_H_

// Visiting the distinct boxes of a tensor laid out over a mesh.
#ifndef CKPT_PLAN_GRID_H_
#define CKPT_PLAN_GRID_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "ckpt/mesh.h"

namespace ckpt {

/// What one step along each mesh dimension adds to a rank (row-major).
std::vector<int64_t> RankStrides(const Mesh& mesh);

/// Calls fn(box, base_rank, replica_offsets) once per distinct non-empty box
/// of `layout` over `mesh`: the ranks holding it are base_rank + each of
/// replica_offsets (the coordinates of the mesh dimensions that replicate
/// the tensor). Costs one box computation per distinct box, not per rank.
absl::Status ForEachDistinctBox(
    const TensorLayout& layout, const Mesh& mesh,
    const std::function<void(Box&& box, int64_t base_rank, const std::vector<int64_t>& replica_offsets)>& fn);

}  // namespace ckpt

#endif  // CKPT_PLAN_GRID_H_

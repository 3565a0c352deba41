// Planning the load of a whole mesh from a manifest, without tensor data:
// which blocks every rank of the new mesh reads, and what that costs.
#ifndef CKPT_PLAN_LOAD_PLAN_H_
#define CKPT_PLAN_LOAD_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/mesh.h"
#include "format/manifest.h"

namespace ckpt {

struct LoadPlanStats {
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

/// Plans the load of `target` (tensor layouts over `mesh`) from `m`: for each
/// distinct target box, the overlapping chunks (interval index) and the
/// blocks holding the intersections (on the grid of a grid-only tensor);
/// every rank holding the box counts. Fails
/// when a target tensor is missing or differs in dtype or shape.
absl::StatusOr<LoadPlanStats> PlanMeshLoad(const Manifest& m, const std::vector<TensorLayout>& target,
                                           const Mesh& mesh);

}  // namespace ckpt

#endif  // CKPT_PLAN_LOAD_PLAN_H_

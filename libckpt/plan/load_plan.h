// Planning the load of a whole mesh from a manifest, without tensor data:
// which blocks every rank of the new mesh reads, and what that costs.
#ifndef CKPT_PLAN_LOAD_PLAN_H_
#define CKPT_PLAN_LOAD_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/mesh.h"
#include "ckpt/plan.h"
#include "format/manifest.h"

namespace ckpt {

/// Plans the load of `target` (tensor layouts over `mesh`) from `m`: for each
/// distinct target box, the overlapping chunks (interval index) and the
/// blocks holding the intersections (on the grid of a grid-only tensor);
/// every rank holding the box counts. Fails
/// when a target tensor is missing or differs in dtype or shape.
absl::StatusOr<LoadPlanStats> PlanMeshLoad(const Manifest& m, const std::vector<TensorLayout>& target,
                                           const Mesh& mesh);

}  // namespace ckpt

#endif  // CKPT_PLAN_LOAD_PLAN_H_

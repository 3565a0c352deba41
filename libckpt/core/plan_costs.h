// One rank's restart planned from its part of a manifest (plan_costs.cc):
// shared by MeasurePlanCosts and the benchmarks that time it on files.
#ifndef CKPT_CORE_PLAN_COSTS_H_
#define CKPT_CORE_PLAN_COSTS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/mesh.h"
#include "format/manifest_part.h"

namespace ckpt {

/// Rank `rank` of `mesh` restarting: its boxes of `target` (a laid-out
/// State with no memory behind it), its part of a version-4 manifest of
/// `size` bytes read through `read`, and the loader's own plan of it
/// (PlanLoad). Returns the chunks met; `stats` gets what was read.
absl::StatusOr<int64_t> PlanRankFromManifestPart(const ManifestRangeReader& read, uint64_t size,
                                                 const std::vector<TensorLayout>& target, const Mesh& mesh,
                                                 int64_t rank, ManifestPartStats* stats);

}  // namespace ckpt

#endif  // CKPT_CORE_PLAN_COSTS_H_

// The manifest a save of tensor layouts over a mesh commits, built from the
// layouts' rules: each tensor's grid (its cuts from the placements and their
// split order, each cell's writer by the replica-group rule, each cell's
// first block from its writer's running count) without one object per chunk.
#ifndef CKPT_PLAN_RULE_MANIFEST_H_
#define CKPT_PLAN_RULE_MANIFEST_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/mesh.h"
#include "ckpt/plan.h"
#include "format/manifest.h"

namespace ckpt {

/// The manifest of step 1 of a save of `layouts` over `mesh` (one data file
/// per rank, `block_size` raw bytes per uncompressed block, column tiles as
/// ColumnTiles cuts them with `max_tiles`), as the leader would commit it.
/// A tensor whose chunks are the cells of a grid gets `grid` and no listed
/// chunks (ManifestTensor's grid-only form); any other tensor (scalars, tiles
/// that differ from row to row, layouts whose splits do not nest) is listed
/// box by box, then described by a grid where DetectGrid finds one. Writers
/// follow PlanSave's rule and each file's blocks follow tensor order, so the
/// encoding equals that of the manifest built from PlanSave chunk by chunk.
absl::StatusOr<Manifest> SaveManifestByRules(const std::vector<TensorLayout>& layouts, const Mesh& mesh,
                                             uint64_t block_size, int max_tiles, RuleManifestStats* stats = nullptr);

}  // namespace ckpt

#endif  // CKPT_PLAN_RULE_MANIFEST_H_

// Which holder of a replicated box writes it, by a rule each holder can
// apply alone.
#ifndef CKPT_PLAN_REPLICA_WRITERS_H_
#define CKPT_PLAN_REPLICA_WRITERS_H_

#include <cstdint>
#include <vector>

#include "ckpt/mesh.h"

namespace ckpt {

/// The mesh dimensions that replicate `layout` (neither its owner dimension
/// nor one that shards it), as a bit mask.
uint32_t ReplicaMask(const TensorLayout& layout, const Mesh& mesh);

/// A box held by several ranks (its replica group: base + each of
/// *offsets, the ranks that differ from its base holder only in the
/// coordinates of the replicating dimensions in `mask`), waiting for its
/// writer.
struct ReplicatedBox {
  int64_t bytes = 0;
  int32_t tensor = 0;
  uint32_t mask = 0;
  int64_t base = 0;
  const std::vector<int64_t>* offsets = nullptr;  ///< ascending
  int64_t writer = -1;                            ///< the choice
};

/// The rule: within each replica group, its boxes largest first (ties in
/// tensor order) go each to the member to which the group's earlier boxes
/// gave the fewest bytes (ties to the lowest rank). Only the group's own
/// boxes count and every member holds all of them, so each member can name
/// every writer of its group from the layouts alone, without exchanging
/// shard lists. Sets `writer` of every box.
void ChooseReplicaWriters(std::vector<ReplicatedBox>& boxes);

/// The holders of a box relative to its base holder, ascending: every
/// combination of the coordinates of the mesh dimensions in `mask`.
std::vector<int64_t> ReplicaOffsets(uint32_t mask, const Mesh& mesh);

}  // namespace ckpt

#endif  // CKPT_PLAN_REPLICA_WRITERS_H_

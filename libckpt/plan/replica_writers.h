// Which holder of a replicated box writes it, by a rule each holder can
// apply alone.
#ifndef CKPT_PLAN_REPLICA_WRITERS_H_
#define CKPT_PLAN_REPLICA_WRITERS_H_

#include <cstdint>
#include <vector>

#include "ckpt/mesh.h"

namespace ckpt {

/// The mesh dimensions that replicate `layout` (neither its owner dimension
/// nor one that shards it, and of more than one rank), as a bit mask: with a
/// base rank it names a replica group, and two groups with the same members
/// get the same mask.
uint32_t ReplicaMask(const TensorLayout& layout, const Mesh& mesh);

/// A box held by several ranks (its replica group: base + each of
/// *offsets), waiting for its writer. Over a mesh the group is the ranks that
/// differ from its base holder only in the coordinates of the replicating
/// dimensions (`group` = ReplicaMask); for boxes given one by one it is the
/// ranks that hold the box (`group` numbers the distinct sets of holders).
/// (group, base) names the group: equal for every box the same ranks hold.
struct ReplicatedBox {
  int64_t bytes = 0;
  /// The tensor's place in the order of tensor names: ties of size go to the
  /// earlier name, whatever order a caller lists its tensors in.
  int32_t order = 0;
  uint32_t group = 0;
  int64_t base = 0;
  const std::vector<int64_t>* offsets = nullptr;  ///< ascending
  int64_t writer = -1;                            ///< the choice
};

/// The rule: within each replica group, its boxes largest first (ties in
/// name order, then in the order given) go each to the member to which the group's earlier boxes
/// gave the fewest bytes (ties to the lowest rank). Only the group's own
/// boxes count and every member holds all of them, so each member can name
/// every writer of its group from the layouts alone, without exchanging
/// shard lists. Sets `writer` of every box.
void ChooseReplicaWriters(std::vector<ReplicatedBox>& boxes);

/// Per layout, its place in the order of the tensors' names (ReplicatedBox's
/// `order`).
std::vector<int32_t> NameOrder(const std::vector<TensorLayout>& layouts);

/// The holders of a box relative to its base holder, ascending: every
/// combination of the coordinates of the mesh dimensions in `mask`.
std::vector<int64_t> ReplicaOffsets(uint32_t mask, const Mesh& mesh);

}  // namespace ckpt

#endif  // CKPT_PLAN_REPLICA_WRITERS_H_

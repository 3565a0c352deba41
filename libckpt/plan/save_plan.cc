#include <algorithm>
#include <map>
#include <numeric>

#include "ckpt/plan.h"
#include "plan/grid.h"
#include "plan/replica_writers.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt {

std::vector<int64_t> RankStrides(const Mesh& mesh) {
  std::vector<int64_t> stride(mesh.ndim(), 1);
  for (int d = mesh.ndim() - 2; d >= 0; --d) stride[d] = stride[d + 1] * mesh.sizes[d + 1];
  return stride;
}

absl::Status ForEachDistinctBox(
    const TensorLayout& layout, const Mesh& mesh,
    const std::function<void(Box&& box, int64_t base_rank, const std::vector<int64_t>& replica_offsets)>& fn) {
  if (layout.owner_dim >= mesh.ndim()) {
    return absl::InvalidArgumentError(
        StrCat("tensor '", layout.spec.fqn, "': owner mesh dim ", layout.owner_dim, " outside mesh ", mesh.ToString()));
  }
  if (mesh.ndim() > kMaxTensorRank) {
    return absl::InvalidArgumentError(
        StrCat("mesh ", mesh.ToString(), " has more than ", kMaxTensorRank, " dimensions"));
  }
  const uint32_t mask = ReplicaMask(layout, mesh);
  std::vector<int> shard_dims;
  for (int md = 0; md < mesh.ndim(); ++md) {
    if (md != layout.owner_dim && !(mask & (uint32_t{1} << md))) shard_dims.push_back(md);
  }
  const std::vector<int64_t> offsets = ReplicaOffsets(mask, mesh);
  std::vector<int64_t> coords(mesh.ndim(), 0);
  if (layout.owner_dim >= 0) {
    if (layout.owner_index < 0 || layout.owner_index >= mesh.sizes[layout.owner_dim]) {
      return absl::OkStatus();  // its stage does not exist on this mesh
    }
    coords[layout.owner_dim] = layout.owner_index;
  }
  while (true) {
    CKPT_ASSIGN_OR_RETURN(std::optional<Box> box, BoxAtCoords(layout, mesh, coords));
    if (box.has_value() && !box->Empty()) fn(std::move(*box), mesh.RankOf(coords), offsets);
    int k = static_cast<int>(shard_dims.size()) - 1;
    for (; k >= 0; --k) {
      const int md = shard_dims[k];
      if (++coords[md] < mesh.sizes[md]) break;
      coords[md] = 0;
    }
    if (k < 0) break;
  }
  return absl::OkStatus();
}

uint32_t ReplicaMask(const TensorLayout& layout, const Mesh& mesh) {
  uint32_t mask = 0;
  for (int md = 0; md < mesh.ndim(); ++md) {
    if (md == layout.owner_dim) continue;
    const bool shard =
        md < static_cast<int>(layout.placements.size()) && layout.placements[md].kind == Placement::Kind::kShard;
    if (!shard && mesh.sizes[md] > 1) mask |= uint32_t{1} << md;
  }
  return mask;
}

void ChooseReplicaWriters(std::vector<ReplicatedBox>& boxes) {
  std::vector<size_t> order(boxes.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return boxes[a].bytes != boxes[b].bytes ? boxes[a].bytes > boxes[b].bytes : boxes[a].order < boxes[b].order;
  });
  // Per replica group (mask, base): bytes given to each member so far.
  std::map<std::pair<uint32_t, int64_t>, std::vector<int64_t>> given;
  for (size_t i : order) {
    ReplicatedBox& box = boxes[i];
    std::vector<int64_t>& g = given[{box.group, box.base}];
    if (g.empty()) g.assign(box.offsets->size(), 0);
    size_t best = 0;
    for (size_t k = 1; k < g.size(); ++k) {
      if (g[k] < g[best]) best = k;  // offsets ascend: ties keep the lowest rank
    }
    g[best] += box.bytes;
    box.writer = box.base + (*box.offsets)[best];
  }
}

std::vector<int32_t> NameOrder(const std::vector<TensorLayout>& layouts) {
  std::vector<int32_t> by_name(layouts.size());
  std::iota(by_name.begin(), by_name.end(), 0);
  std::stable_sort(by_name.begin(), by_name.end(),
                   [&](int32_t a, int32_t b) { return layouts[a].spec.fqn < layouts[b].spec.fqn; });
  std::vector<int32_t> place(layouts.size());
  for (size_t i = 0; i < by_name.size(); ++i) place[by_name[i]] = static_cast<int32_t>(i);
  return place;
}

std::vector<int64_t> ReplicaOffsets(uint32_t mask, const Mesh& mesh) {
  const std::vector<int64_t> stride = RankStrides(mesh);
  std::vector<int64_t> offsets = {0};
  for (int md = 0; md < mesh.ndim(); ++md) {
    if (!(mask & (uint32_t{1} << md))) continue;
    std::vector<int64_t> next;
    next.reserve(offsets.size() * static_cast<size_t>(mesh.sizes[md]));
    for (int64_t base : offsets) {
      for (int64_t i = 0; i < mesh.sizes[md]; ++i) next.push_back(base + i * stride[md]);
    }
    offsets = std::move(next);
  }
  return offsets;
}

absl::StatusOr<std::vector<RankWrite>> PlanRankWrites(const std::vector<TensorLayout>& layouts, const Mesh& mesh,
                                                      int64_t rank) {
  CKPT_RETURN_IF_ERROR(CheckMesh(mesh));
  if (rank < 0 || rank >= mesh.NumRanks()) {
    return absl::InvalidArgumentError(StrCat("rank ", rank, " is outside mesh ", mesh.ToString()));
  }
  const std::vector<int64_t> coords = mesh.Coords(rank);
  const std::vector<int64_t> stride = RankStrides(mesh);
  std::map<uint32_t, std::vector<int64_t>> offsets_of;  // per replica mask
  const std::vector<int32_t> name_order = NameOrder(layouts);
  std::vector<RankWrite> out;
  std::vector<ReplicatedBox> replicated;
  std::vector<size_t> write_of;
  for (size_t t = 0; t < layouts.size(); ++t) {
    if (layouts[t].owner_dim >= mesh.ndim()) {
      return absl::InvalidArgumentError(StrCat("tensor '", layouts[t].spec.fqn, "': owner mesh dim ",
                                               layouts[t].owner_dim, " outside mesh ", mesh.ToString()));
    }
    CKPT_ASSIGN_OR_RETURN(std::optional<Box> box, BoxAtCoords(layouts[t], mesh, coords));
    if (!box.has_value() || box->Empty()) continue;
    const uint32_t mask = ReplicaMask(layouts[t], mesh);
    auto [it, fresh] = offsets_of.try_emplace(mask);
    if (fresh) it->second = ReplicaOffsets(mask, mesh);
    int64_t base = rank;
    for (int md = 0; md < mesh.ndim(); ++md) {
      if (mask & (uint32_t{1} << md)) base -= coords[md] * stride[md];
    }
    const int64_t bytes = box->Volume() * static_cast<int64_t>(DTypeSize(layouts[t].spec.dtype));
    out.push_back(RankWrite{static_cast<int32_t>(t), std::move(*box), true});
    if (it->second.size() > 1) {
      replicated.push_back(ReplicatedBox{bytes, name_order[t], mask, base, &it->second, -1});
      write_of.push_back(out.size() - 1);
    }
  }
  // Every group this rank is in has exactly the boxes it holds under that
  // mask, so the rule gives here what it gives over the whole mesh.
  ChooseReplicaWriters(replicated);
  for (size_t i = 0; i < replicated.size(); ++i) out[write_of[i]].writes = replicated[i].writer == rank;
  return out;
}

absl::StatusOr<SavePlan> PlanSave(const std::vector<TensorLayout>& layouts, const Mesh& mesh) {
  SavePlan plan;
  plan.mesh = mesh;
  const int64_t nranks = mesh.NumRanks();
  plan.by_rank.resize(nranks);
  plan.bytes_by_rank.assign(nranks, 0);

  // Distinct boxes come from the coordinates of the dimensions that shard a
  // tensor; the replicas of each box differ only in the other coordinates.
  // This visits each box once instead of once per rank.
  std::vector<int64_t> base_rank;   // per chunk: its holder with replica coords 0
  std::vector<int32_t> offsets_of;  // per chunk: index into replica_offsets
  std::vector<std::vector<int64_t>> replica_offsets;
  // At most one chunk per combination of the coordinates that shard a
  // tensor: reserved up front, so millions of boxes are never moved.
  uint64_t most = 0;
  for (const TensorLayout& layout : layouts) {
    uint64_t n = 1;
    for (int md = 0; md < mesh.ndim(); ++md) {
      if (md != layout.owner_dim && md < static_cast<int>(layout.placements.size()) &&
          layout.placements[md].kind == Placement::Kind::kShard) {
        n *= static_cast<uint64_t>(mesh.sizes[md]);
      }
    }
    most += n;
  }
  plan.chunks.reserve(most);
  base_rank.reserve(most);
  offsets_of.reserve(most);
  std::vector<uint32_t> masks(layouts.size());
  for (size_t t = 0; t < layouts.size(); ++t) {
    masks[t] = ReplicaMask(layouts[t], mesh);
    bool first = true;
    CKPT_RETURN_IF_ERROR(
        ForEachDistinctBox(layouts[t], mesh, [&](Box&& box, int64_t base, const std::vector<int64_t>& offsets) {
          if (first) {
            replica_offsets.push_back(offsets);
            first = false;
          }
          ChunkAssignment c;
          c.tensor = static_cast<int32_t>(t);
          c.box = std::move(box);
          c.replicas = static_cast<int64_t>(offsets.size());
          plan.chunks.push_back(std::move(c));
          base_rank.push_back(base);
          offsets_of.push_back(static_cast<int32_t>(replica_offsets.size() - 1));
        }));
  }

  // The writer of a box held by one rank is that rank; the others by the
  // replica-group rule.
  const std::vector<int32_t> name_order = NameOrder(layouts);
  std::vector<ReplicatedBox> replicated;
  std::vector<size_t> chunk_of;
  for (size_t c = 0; c < plan.chunks.size(); ++c) {
    ChunkAssignment& chunk = plan.chunks[c];
    const std::vector<int64_t>& offs = replica_offsets[offsets_of[c]];
    if (offs.size() == 1) {
      chunk.writer = base_rank[c] + offs.front();
      continue;
    }
    ReplicatedBox box;
    box.bytes = chunk.box.Volume() * static_cast<int64_t>(DTypeSize(layouts[chunk.tensor].spec.dtype));
    box.order = name_order[chunk.tensor];
    box.group = masks[chunk.tensor];
    box.base = base_rank[c];
    box.offsets = &offs;
    replicated.push_back(box);
    chunk_of.push_back(c);
  }
  ChooseReplicaWriters(replicated);
  for (size_t i = 0; i < replicated.size(); ++i) plan.chunks[chunk_of[i]].writer = replicated[i].writer;
  for (const ChunkAssignment& chunk : plan.chunks) {
    plan.bytes_by_rank[chunk.writer] +=
        chunk.box.Volume() * static_cast<int64_t>(DTypeSize(layouts[chunk.tensor].spec.dtype));
  }
  for (size_t c = 0; c < plan.chunks.size(); ++c) {
    plan.by_rank[plan.chunks[c].writer].push_back(static_cast<int64_t>(c));
  }
  return plan;
}

}  // namespace ckpt

#include "plan/load_plan.h"

#include <memory>

#include "plan/block_ranges.h"
#include "plan/cover.h"
#include "plan/grid.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt {

absl::StatusOr<LoadPlanStats> PlanMeshLoad(const Manifest& m, const std::vector<TensorLayout>& target,
                                           const Mesh& mesh) {
  LoadPlanStats stats;
  stats.ranks = mesh.NumRanks();
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const TensorLayout& layout : target) {
    const ManifestTensor* t = m.FindTensor(layout.spec.fqn);
    if (t == nullptr) {
      return absl::NotFoundError(StrCat("tensor '", layout.spec.fqn, "' is not in step ", m.step));
    }
    if (!(t->spec == layout.spec)) {
      return absl::InvalidArgumentError(StrCat("tensor '", layout.spec.fqn, "': step has ", DTypeName(t->spec.dtype),
                                               " ", ShapeToString(t->spec.shape), ", target asks ",
                                               DTypeName(layout.spec.dtype), " ", ShapeToString(layout.spec.shape)));
    }
    std::vector<Box> boxes;
    boxes.reserve(t->chunks.size());
    for (const ManifestChunk& c : t->chunks) boxes.push_back(c.box);
    ChunkIndex index(boxes);
    const uint64_t es = DTypeSize(t->spec.dtype);
    const int64_t needed0 = stats.bytes_needed, read0 = stats.bytes_read;
    CKPT_RETURN_IF_ERROR(
        ForEachDistinctBox(layout, mesh, [&](Box&& box, int64_t, const std::vector<int64_t>& replicas) {
          const int64_t holders = static_cast<int64_t>(replicas.size());
          ++stats.distinct_boxes;
          stats.bytes_needed += holders * box.Volume() * static_cast<int64_t>(es);
          for (int64_t ci : index.Query(box)) {
            const ManifestChunk& c = t->chunks[ci];
            const uint64_t bs = m.files[c.file].block_size;
            const uint64_t stream = static_cast<uint64_t>(c.box.Volume()) * es;
            ranges.clear();
            NeededBlocks(c.box, Intersect(c.box, box), es, bs, &ranges);
            ++stats.overlaps;
            stats.block_ranges += holders * static_cast<int64_t>(ranges.size());
            for (const auto& [b0, b1] : ranges) {
              const uint64_t end = std::min<uint64_t>((b1 + 1) * bs, stream);
              stats.blocks += holders * static_cast<int64_t>(b1 - b0 + 1);
              stats.bytes_read += holders * static_cast<int64_t>(end - b0 * bs);
            }
          }
        }));
    stats.per_tensor.push_back({stats.bytes_needed - needed0, stats.bytes_read - read0});
  }
  return stats;
}

}  // namespace ckpt

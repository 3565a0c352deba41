#include "plan/load_plan.h"

#include <algorithm>
#include <memory>
#include <optional>

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
    const uint64_t es = DTypeSize(t->spec.dtype);
    const int64_t needed0 = stats.bytes_needed, read0 = stats.bytes_read;
    // One (target box, saved chunk) overlap: the blocks holding it.
    auto overlap = [&](const Box& chunk, uint64_t block_size, const Box& box, int64_t holders) {
      const uint64_t stream = static_cast<uint64_t>(chunk.Volume()) * es;
      ranges.clear();
      NeededBlocks(chunk, Intersect(chunk, box), es, block_size, &ranges);
      ++stats.overlaps;
      stats.block_ranges += holders * static_cast<int64_t>(ranges.size());
      for (const auto& [b0, b1] : ranges) {
        const uint64_t end = std::min<uint64_t>((b1 + 1) * block_size, stream);
        stats.blocks += holders * static_cast<int64_t>(b1 - b0 + 1);
        stats.bytes_read += holders * static_cast<int64_t>(end - b0 * block_size);
      }
    };
    std::optional<ChunkIndex> index;
    std::vector<Box> boxes;  // the index points into it
    if (!t->GridOnly()) {
      boxes.reserve(t->chunks.size());
      for (const ManifestChunk& c : t->chunks) boxes.push_back(c.box);
      index.emplace(boxes);
    }
    CKPT_RETURN_IF_ERROR(
        ForEachDistinctBox(layout, mesh, [&](Box&& box, int64_t, const std::vector<int64_t>& replicas) {
          const int64_t holders = static_cast<int64_t>(replicas.size());
          ++stats.distinct_boxes;
          stats.bytes_needed += holders * box.Volume() * static_cast<int64_t>(es);
          if (index.has_value()) {
            for (int64_t ci : index->Query(box)) {
              const ManifestChunk& c = t->chunks[ci];
              overlap(c.box, m.files[c.file].block_size, box, holders);
            }
          } else {
            t->grid->ForEachCellMeeting(box, [&](uint64_t cell) {
              overlap(t->grid->CellBox(cell), m.files[t->grid->files.At(cell)].block_size, box, holders);
            });
          }
        }));
    stats.per_tensor.push_back({stats.bytes_needed - needed0, stats.bytes_read - read0});
  }
  return stats;
}

}  // namespace ckpt

#include "plan/load_plan.h"

#include <algorithm>

#include "plan/box_reads.h"
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
    CKPT_ASSIGN_OR_RETURN(const ManifestTensor* t, FindSavedTensor(m, layout.spec));
    const uint64_t es = DTypeSize(t->spec.dtype);
    const int64_t needed0 = stats.bytes_needed, read0 = stats.bytes_read;
    ChunkFinder finder(*t, m.files);
    CKPT_RETURN_IF_ERROR(
        ForEachDistinctBox(layout, mesh, [&](Box&& box, int64_t, const std::vector<int64_t>& replicas) {
          const int64_t holders = static_cast<int64_t>(replicas.size());
          ++stats.distinct_boxes;
          stats.bytes_needed += holders * box.Volume() * static_cast<int64_t>(es);
          // One (target box, saved chunk) overlap: the blocks holding it.
          finder.ForEachBoxMeeting(box, [&](const Box& chunk, uint32_t file) {
            const uint64_t block_size = m.files[file].block_size;
            const uint64_t stream = static_cast<uint64_t>(chunk.Volume()) * es;
            ranges.clear();
            BlocksToRead(chunk, box, es, block_size, &ranges);
            ++stats.overlaps;
            stats.block_ranges += holders * static_cast<int64_t>(ranges.size());
            for (const auto& [b0, b1] : ranges) {
              const uint64_t end = std::min<uint64_t>((b1 + 1) * block_size, stream);
              stats.blocks += holders * static_cast<int64_t>(b1 - b0 + 1);
              stats.bytes_read += holders * static_cast<int64_t>(end - b0 * block_size);
            }
          });
        }));
    stats.per_tensor.push_back({stats.bytes_needed - needed0, stats.bytes_read - read0});
  }
  return stats;
}

}  // namespace ckpt

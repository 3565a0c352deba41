// Exact-cover check (every element of a tensor in exactly one chunk) and the
// overlap index used by load planning. Both sort and sweep; neither compares
// chunks pairwise.
#ifndef CKPT_PLAN_COVER_H_
#define CKPT_PLAN_COVER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "ckpt/tensor.h"

namespace ckpt {

/// OK when `boxes` (empty ones ignored) tile `spec.shape` exactly. Otherwise
/// DataLoss naming the tensor and a region that is uncovered or covered
/// twice (with the two boxes).
absl::Status CheckExactCover(const TensorSpec& spec, const std::vector<Box>& boxes);

/// OK when the parts of `boxes` inside `region` tile it exactly (a load's
/// target box: what covers it twice or not at all is refused before any byte
/// is placed). Otherwise DataLoss naming the tensor, the region of elements
/// and the chunks.
absl::Status CheckExactCoverOf(const TensorSpec& spec, const Box& region, const std::vector<const Box*>& boxes);

/// Finds the boxes that intersect a query box. Built once per tensor; boxes
/// are expected not to overlap (queries stay correct if they do, only
/// slower).
class ChunkIndex {
 public:
  explicit ChunkIndex(const std::vector<Box>& boxes);
  /// Indices of boxes with a non-empty intersection with `query`, ascending.
  std::vector<int64_t> Query(const Box& query) const;

 private:
  const std::vector<Box>* boxes_;
  int dim_ = -1;                 ///< sweep dimension, -1 for scalars
  std::vector<int64_t> order_;   ///< box ids sorted by offset on dim_
  std::vector<int64_t> starts_;  ///< offsets on dim_, in order_
  int64_t max_len_ = 0;
};

}  // namespace ckpt

#endif  // CKPT_PLAN_COVER_H_

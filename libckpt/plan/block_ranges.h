// Which blocks of a saved chunk hold the elements of a sub-box.
#ifndef CKPT_PLAN_BLOCK_RANGES_H_
#define CKPT_PLAN_BLOCK_RANGES_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "ckpt/tensor.h"

namespace ckpt {

/// Appends to `out` the blocks (numbered from the chunk's first block) that
/// hold the elements of `inter` (a sub-box of `chunk`) in the chunk's
/// row-major stream cut into `block_size`-byte blocks, as sorted, disjoint,
/// non-adjacent inclusive ranges [first, last]. Runs of `inter` separated by
/// less than a block are merged analytically, so the cost grows with the
/// number of block ranges returned, not with the number of rows.
void NeededBlocks(const Box& chunk, const Box& inter, uint64_t elem_size, uint64_t block_size,
                  std::vector<std::pair<uint64_t, uint64_t>>* out);

/// Sorts ranges and merges overlapping or adjacent ones.
void NormalizeRanges(std::vector<std::pair<uint64_t, uint64_t>>* ranges);

/// Number of blocks in the ranges.
uint64_t CountBlocks(const std::vector<std::pair<uint64_t, uint64_t>>& ranges);

}  // namespace ckpt

#endif  // CKPT_PLAN_BLOCK_RANGES_H_

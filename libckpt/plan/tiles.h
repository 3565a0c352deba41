// Cutting large shards into column tiles at save time.
//
// A chunk's blocks are runs of its row-major bytes, so a later load that
// keeps all rows but only some columns (a tensor-parallel degree change on a
// row-parallel weight) would read every block. Saving a large shard as a few
// column tiles, each its own chunk, keeps that load to the tiles it needs.
#ifndef CKPT_PLAN_TILES_H_
#define CKPT_PLAN_TILES_H_

#include <cstdint>
#include <vector>

#include "ckpt/state.h"
#include "ckpt/tensor.h"

namespace ckpt {

/// Splits `box` along its last dimension into T equal tiles, T the largest
/// power of two up to `max_tiles` that divides the last extent while each
/// tile keeps rows of at least 1 KiB and at least one block of bytes.
/// Returns {box} when no split qualifies (1-d boxes, small shards).
std::vector<Box> ColumnTiles(const Box& box, uint64_t elem_size, uint64_t block_size, int max_tiles);

/// `shard` as its column tiles (ColumnTiles of its box), each a Shard that
/// views the same memory with the parent's strides; {shard} when it is not
/// split, or when its rows are not contiguous in memory (tiles are staged by
/// walking the parent's rows).
std::vector<Shard> TileShard(const Shard& shard, uint64_t block_size, int max_tiles);

}  // namespace ckpt

#endif  // CKPT_PLAN_TILES_H_

// Cutting shards into tiles at save time: column tiles for column-sharded
// shards, row slabs for row-sharded ones.
//
// A chunk's blocks are runs of its row-major bytes, so a later load that
// keeps all rows but only some columns (a tensor-parallel degree change on a
// row-parallel weight) would read every block. Saving such a shard as column
// tiles, each its own chunk, cut where the loads users move to would cut,
// keeps those loads to exactly the tiles they need.
#ifndef CKPT_PLAN_TILES_H_
#define CKPT_PLAN_TILES_H_

#include <cstdint>
#include <vector>

#include "ckpt/state.h"
#include "ckpt/tensor.h"

namespace ckpt {

/// Column intervals of a tensor (all its rows) under twice this are not cut:
/// each tile costs a frame (up to 4 KiB of padding) and a manifest entry.
inline constexpr uint64_t kMinTileBytes = 64 << 10;
/// Nor are boxes whose tiles would hold less than this on average (a box of
/// a few rows: the frame padding would be a quarter of the bytes or more).
inline constexpr uint64_t kMinMeanTileBytes = 16 << 10;
/// Boxes with shorter rows are not cut: they come from nested splits (tensor
/// and data parallel on one dimension, as ZeRO shards optimizer state), whose
/// loads cut where no expected split does.
inline constexpr uint64_t kMinRowBytesToTile = 256;
/// Tiles of a whole (unsharded) tensor keep rows of at least this many bytes.
inline constexpr uint64_t kMinWholeTileRowBytes = 1024;
/// Boxes under twice this are not cut into row slabs (RowTiles): each slab
/// costs a frame (up to 4 KiB of padding) and a grid cell.
inline constexpr uint64_t kMinRowTileBytes = 128 << 10;
/// Nor are boxes that are one of more parts than this of their first
/// dimension: they come from nested splits (ZeRO's data-parallel split of a
/// tensor-parallel shard), whose loads onto another mesh cut where no
/// expected split does, and at scale they are most of the chunks (slabs of
/// them made the manifest of 131,072 ranks four times larger).
inline constexpr int64_t kMaxRowTileParts = 32;

/// The part counts a load is expected to split the last dimension into, for
/// a box that is one of `parts` torch.chunk-style parts of it (1: the whole
/// extent), in the order their cuts are worth keeping: the divisors and
/// double of `parts` (tensor-parallel halving and doubling), then the usual
/// uneven moves (8 -> 12, 8 -> 6, 4 -> 3, 16 -> 24). A whole extent
/// expects 2, 3, 4, 6 and 8.
std::vector<int64_t> ExpectedColumnSplits(int64_t parts);

/// Splits `box` (of a tensor of shape `shape`) along its last dimension at
/// the cuts that loads onto ExpectedColumnSplits would make (global
/// torch.chunk boundaries that fall inside the box), as far as `max_tiles`
/// tiles allow: all of one split's cuts or none, and exactly where that
/// split cuts (torch.chunk's uneven parts put the cuts of 6 and 12 a column
/// apart, and a cut moved by a column would make the load on its other side
/// read a whole tile for that column). Boxes whose last dimension is whole
/// while another is cut are not split (a load onto another mesh cuts their
/// rows, which are contiguous already), nor are 1-d boxes, ones whose columns
/// over all the tensor's rows are under 2 * kMinTileBytes, ones with rows
/// under kMinRowBytesToTile, and ones whose tiles would average under
/// kMinMeanTileBytes. A whole
/// tensor takes only splits whose tiles keep kMinWholeTileRowBytes per row. Returns {box} when nothing qualifies.
std::vector<Box> ColumnTiles(const Box& box, const Shape& shape, uint64_t elem_size, int max_tiles);

/// Splits a box cut along its first dimension only (every other dimension
/// whole: a tensor-parallel shard of a column-parallel weight) into row slabs
/// at the cuts that loads onto ExpectedColumnSplits of its part count would
/// make along that dimension, all of one split's cuts or none, within
/// `max_tiles` slabs, in boxes of at least 2 * kMinRowTileBytes that are
/// one of at most kMaxRowTileParts parts. A block holds a
/// run of the box's rows, so without a slab ending there a load that starts
/// or ends mid-box reads the block across its cut whole; with one, exactly
/// its rows. Returns {box} when nothing qualifies.
std::vector<Box> RowTiles(const Box& box, const Shape& shape, uint64_t elem_size, int max_tiles);

/// The chunks a save cuts `box` into: its column tiles where ColumnTiles
/// cuts it, else its row slabs (RowTiles).
std::vector<Box> SaveTiles(const Box& box, const Shape& shape, uint64_t elem_size, int max_tiles);

/// `shard` as its tiles (SaveTiles of its box), each a Shard that views the
/// same memory with the parent's strides; {shard} when it is not split, or
/// when its rows are not contiguous in memory (tiles are staged by walking
/// the parent's rows).
std::vector<Shard> TileShard(const Shard& shard, int max_tiles);

}  // namespace ckpt

#endif  // CKPT_PLAN_TILES_H_

#include "plan/tiles.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ckpt/mesh.h"

namespace ckpt {

std::vector<int64_t> ExpectedColumnSplits(int64_t parts) {
  std::vector<int64_t> out;
  auto add = [&](int64_t k) {
    if (k >= 2 && std::find(out.begin(), out.end(), k) == out.end()) out.push_back(k);
  };
  if (parts <= 1) {
    for (int64_t k : {2, 3, 4, 6, 8}) add(k);
    return out;
  }
  for (int64_t d = parts / 2; d >= 2; --d) {
    if (parts % d == 0) add(d);
  }
  add(2 * parts);
  if (parts % 2 == 0) add(parts * 3 / 2);
  if (parts % 4 == 0) add(parts * 3 / 4);
  return out;
}

std::vector<Box> ColumnTiles(const Box& box, const Shape& shape, uint64_t elem_size, int max_tiles) {
  const int nd = box.ndim();
  if (nd < 2 || box.Empty() || max_tiles < 2 || static_cast<int>(shape.size()) != nd) return {box};
  const int64_t extent = shape[nd - 1];
  const int64_t lo = box.offsets[nd - 1];
  const int64_t width = box.sizes[nd - 1];
  const int64_t hi = lo + width;
  bool other_cut = false;
  for (int d = 0; d + 1 < nd; ++d) other_cut = other_cut || box.sizes[d] < shape[d];
  if (width == extent && other_cut) return {box};
  // Whether the columns are worth cutting is decided on the tensor's rows,
  // not the box's: every box of a split's column interval is then cut alike
  // (the last, shorter part of an uneven split of the rows included), and a
  // save's chunks stay one grid.
  uint64_t interval = static_cast<uint64_t>(width) * elem_size;
  for (int d = 0; d + 1 < nd; ++d) interval *= static_cast<uint64_t>(shape[d]);
  if (interval < 2 * kMinTileBytes || static_cast<uint64_t>(width) * elem_size < kMinRowBytesToTile) return {box};
  const int64_t parts = width == extent ? 1 : std::max<int64_t>(1, std::llround(static_cast<double>(extent) / width));
  std::vector<int64_t> cuts = {lo, hi};  // sorted boundaries kept so far
  for (int64_t k : ExpectedColumnSplits(parts)) {
    std::vector<int64_t> mine;
    for (int64_t b : ChunkBoundaries(extent, k)) {
      if (b > lo && b < hi && !std::binary_search(cuts.begin(), cuts.end(), b)) mine.push_back(b);
    }
    // A split's cuts are kept all or none: a load onto it reads a whole tile
    // at each missing cut, however close another cut is (its columns are in
    // every row of the tile).
    if (mine.empty() || static_cast<int64_t>(cuts.size() - 1 + mine.size()) > max_tiles) continue;
    std::vector<int64_t> merged = cuts;
    merged.insert(merged.end(), mine.begin(), mine.end());
    std::sort(merged.begin(), merged.end());
    // A whole tensor is cut only into tiles of wide rows: staging gathers
    // short segments at two thirds of a plain copy's speed, and every save
    // pays that for a load onto a mesh that may never come.
    bool wide = true;
    for (size_t i = 1; parts == 1 && i < merged.size(); ++i) {
      wide = wide && static_cast<uint64_t>(merged[i] - merged[i - 1]) * elem_size >= kMinWholeTileRowBytes;
    }
    if (wide) cuts = std::move(merged);
  }
  if (cuts.size() == 2) return {box};
  // A box of a few rows (rows split very finely) is left whole: each tile
  // would be mostly frame padding.
  if (static_cast<uint64_t>(box.Volume()) * elem_size < kMinMeanTileBytes * (cuts.size() - 1)) return {box};
  std::vector<Box> tiles;
  tiles.reserve(cuts.size() - 1);
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    Box b = box;
    b.offsets[nd - 1] = cuts[i];
    b.sizes[nd - 1] = cuts[i + 1] - cuts[i];
    tiles.push_back(std::move(b));
  }
  return tiles;
}

std::vector<Box> RowTiles(const Box& box, const Shape& shape, uint64_t elem_size, int max_tiles) {
  const int nd = box.ndim();
  if (nd < 2 || box.Empty() || max_tiles < 2 || static_cast<int>(shape.size()) != nd) return {box};
  uint64_t row_bytes = elem_size;
  for (int d = 1; d < nd; ++d) {
    if (box.sizes[d] != shape[d]) return {box};
    row_bytes *= static_cast<uint64_t>(shape[d]);
  }
  const int64_t extent = shape[0];
  const int64_t lo = box.offsets[0];
  const int64_t height = box.sizes[0];
  const int64_t hi = lo + height;
  if (height == extent || static_cast<uint64_t>(height) * row_bytes < 2 * kMinRowTileBytes) return {box};
  const int64_t parts = std::max<int64_t>(1, std::llround(static_cast<double>(extent) / height));
  if (parts > kMaxRowTileParts) return {box};
  std::vector<int64_t> cuts = {lo, hi};
  for (int64_t k : ExpectedColumnSplits(parts)) {
    std::vector<int64_t> mine;
    for (int64_t b : ChunkBoundaries(extent, k)) {
      if (b > lo && b < hi && !std::binary_search(cuts.begin(), cuts.end(), b)) mine.push_back(b);
    }
    if (mine.empty() || static_cast<int64_t>(cuts.size() - 1 + mine.size()) > max_tiles) continue;
    // A slab of a row or two is kept: torch.chunk's parts of 8H + 1 rows
    // into 4 and 8 end a row apart, and without that row's own slab a load
    // onto 8 would read the block across it.
    cuts.insert(cuts.end(), mine.begin(), mine.end());
    std::sort(cuts.begin(), cuts.end());
  }
  if (cuts.size() == 2) return {box};
  std::vector<Box> slabs;
  slabs.reserve(cuts.size() - 1);
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    Box b = box;
    b.offsets[0] = cuts[i];
    b.sizes[0] = cuts[i + 1] - cuts[i];
    slabs.push_back(std::move(b));
  }
  return slabs;
}

std::vector<Box> SaveTiles(const Box& box, const Shape& shape, uint64_t elem_size, int max_tiles) {
  std::vector<Box> tiles = ColumnTiles(box, shape, elem_size, max_tiles);
  if (tiles.size() > 1) return tiles;
  return RowTiles(box, shape, elem_size, max_tiles);
}

std::vector<Shard> TileShard(const Shard& shard, int max_tiles) {
  const uint64_t es = DTypeSize(shard.spec.dtype);
  const bool rows_contiguous = shard.strides.empty() || shard.strides.back() == 1;
  if (!rows_contiguous) return {shard};
  const std::vector<Box> boxes = SaveTiles(shard.box, shard.spec.shape, es, max_tiles);
  if (boxes.size() == 1) return {shard};
  std::vector<int64_t> strides = shard.strides;
  if (strides.empty()) {
    strides.assign(shard.box.ndim(), 1);
    for (int d = shard.box.ndim() - 2; d >= 0; --d) strides[d] = strides[d + 1] * shard.box.sizes[d + 1];
  }
  std::vector<Shard> tiles;
  tiles.reserve(boxes.size());
  for (const Box& b : boxes) {
    Shard t = shard;
    int64_t off = 0;
    for (int d = 0; d < b.ndim(); ++d) off += (b.offsets[d] - shard.box.offsets[d]) * strides[d];
    t.box = b;
    t.data = static_cast<std::byte*>(shard.data) + off * static_cast<int64_t>(es);
    t.strides = strides;
    tiles.push_back(std::move(t));
  }
  return tiles;
}

}  // namespace ckpt

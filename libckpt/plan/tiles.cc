#include "plan/tiles.h"

namespace ckpt {
namespace {

// Shorter rows make staging a gather of many small copies.
constexpr uint64_t kMinTileRowBytes = 1024;

}  // namespace

std::vector<Box> ColumnTiles(const Box& box, uint64_t elem_size, uint64_t block_size, int max_tiles) {
  const int nd = box.ndim();
  if (nd < 2 || box.Empty() || max_tiles < 2) return {box};
  const int64_t cols = box.sizes[nd - 1];
  const uint64_t bytes = static_cast<uint64_t>(box.Volume()) * elem_size;
  int64_t t = 1;
  for (int64_t cand = 2; cand <= max_tiles; cand *= 2) {
    if (cols % cand != 0) break;
    if (static_cast<uint64_t>(cols / cand) * elem_size < kMinTileRowBytes) break;
    // A tile smaller than a block saves no read, and costs a frame.
    if (bytes / static_cast<uint64_t>(cand) < block_size) break;
    t = cand;
  }
  if (t == 1) return {box};
  std::vector<Box> tiles;
  tiles.reserve(t);
  const int64_t w = cols / t;
  for (int64_t i = 0; i < t; ++i) {
    Box b = box;
    b.offsets[nd - 1] += i * w;
    b.sizes[nd - 1] = w;
    tiles.push_back(std::move(b));
  }
  return tiles;
}

std::vector<Shard> TileShard(const Shard& shard, uint64_t block_size, int max_tiles) {
  const uint64_t es = DTypeSize(shard.spec.dtype);
  const bool rows_contiguous = shard.strides.empty() || shard.strides.back() == 1;
  if (!rows_contiguous) return {shard};
  const std::vector<Box> boxes = ColumnTiles(shard.box, es, block_size, max_tiles);
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

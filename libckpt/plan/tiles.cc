#include "plan/tiles.h"

namespace ckpt {
namespace {

// Shorter rows make staging a gather of many small copies.
constexpr uint64_t kMinTileRowBytes = 1024;

}  // namespace

std::vector<Box> ColumnTiles(const Box& box, uint64_t elem_size, uint64_t block_size,
                             int max_tiles) {
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

}  // namespace ckpt

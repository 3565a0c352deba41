#include "plan/block_ranges.h"

#include <algorithm>

namespace ckpt {

void NeededBlocks(const Box& chunk, const Box& inter, uint64_t elem_size, uint64_t block_size,
                  std::vector<std::pair<uint64_t, uint64_t>>* out) {
  if (inter.Empty()) return;
  const int nd = chunk.ndim();
  if (nd == 0) {
    out->push_back({0, 0});
    return;
  }
  // Element strides of the chunk's row-major layout.
  std::vector<uint64_t> stride(nd, 1);
  for (int d = nd - 2; d >= 0; --d) stride[d] = stride[d + 1] * chunk.sizes[d + 1];
  // Start (in elements) of the first run, and the run: the innermost dims
  // merge while consecutive pieces are closer than one block.
  uint64_t start = 0;
  for (int d = 0; d < nd; ++d) start += (inter.offsets[d] - chunk.offsets[d]) * stride[d];
  uint64_t len = static_cast<uint64_t>(inter.sizes[nd - 1]);
  int d = nd - 2;
  for (; d >= 0; --d) {
    const uint64_t n = static_cast<uint64_t>(inter.sizes[d]);
    const uint64_t gap = stride[d] - len;  // elements skipped between pieces
    if (n > 1 && gap * elem_size >= block_size) break;
    len = (n - 1) * stride[d] + len;
  }
  // Dims 0..d are enumerated explicitly; consecutive runs there are at least
  // a block apart, so each contributes its own ranges.
  auto emit = [&](uint64_t s) {
    const uint64_t b0 = s * elem_size / block_size;
    const uint64_t b1 = ((s + len) * elem_size - 1) / block_size;
    if (!out->empty() && out->back().second + 1 >= b0) {
      if (b1 > out->back().second) out->back().second = b1;
    } else {
      out->push_back({b0, b1});
    }
  };
  if (d < 0) {
    emit(start);
    return;
  }
  std::vector<int64_t> idx(d + 1, 0);
  while (true) {
    uint64_t s = start;
    for (int k = 0; k <= d; ++k) s += static_cast<uint64_t>(idx[k]) * stride[k];
    emit(s);
    int k = d;
    for (; k >= 0; --k) {
      if (++idx[k] < inter.sizes[k]) break;
      idx[k] = 0;
    }
    if (k < 0) break;
  }
}

void NormalizeRanges(std::vector<std::pair<uint64_t, uint64_t>>* ranges) {
  std::sort(ranges->begin(), ranges->end());
  size_t w = 0;
  for (size_t i = 0; i < ranges->size(); ++i) {
    if (w > 0 && (*ranges)[w - 1].second + 1 >= (*ranges)[i].first) {
      (*ranges)[w - 1].second = std::max((*ranges)[w - 1].second, (*ranges)[i].second);
    } else {
      (*ranges)[w++] = (*ranges)[i];
    }
  }
  ranges->resize(w);
}

uint64_t CountBlocks(const std::vector<std::pair<uint64_t, uint64_t>>& ranges) {
  uint64_t n = 0;
  for (const auto& r : ranges) n += r.second - r.first + 1;
  return n;
}

}  // namespace ckpt

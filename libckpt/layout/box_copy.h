// Copying between a shard's (possibly strided) memory and the packed
// row-major byte stream of its box.
#ifndef CKPT_LAYOUT_BOX_COPY_H_
#define CKPT_LAYOUT_BOX_COPY_H_

#include <cstddef>
#include <cstdint>
#include <utility>

#include "ckpt/state.h"

namespace ckpt {

/// Copies elements [first, first + count) of the packed row-major order of
/// `shard.box` from the shard's memory into `dst` (staging memory: written
/// with streaming stores).
void GatherPacked(const Shard& shard, int64_t first, int64_t count, std::byte* dst);

/// The inverse: writes packed elements [first, first + count) into the
/// shard's memory.
void ScatterPacked(const Shard& shard, int64_t first, int64_t count, const std::byte* src);

/// Rows of the shard's box: the product of every size but the last (1 for a
/// box of one dimension).
inline int64_t RowCount(const Shard& shard) {
  int64_t rows = 1;
  for (int d = 0; d + 1 < shard.box.ndim(); ++d) rows *= shard.box.sizes[d];
  return rows;
}

/// Calls fn(row) for rows [first, last) of the shard's box in row-major
/// order, `row` pointing at the row's first element; stops early when fn
/// returns false. REQUIRES: the last dimension is contiguous (stride 1),
/// box non-empty, 0 <= first <= last <= RowCount(shard).
template <typename Fn>
void ForEachRowIn(const Shard& shard, int64_t first, int64_t last, Fn&& fn) {
  const int nd = shard.box.ndim();
  const size_t es = DTypeSize(shard.spec.dtype);
  const std::byte* base = static_cast<const std::byte*>(shard.data);
  if (first >= last) return;
  if (nd <= 1) {
    fn(base);
    return;
  }
  int64_t strides[32];
  if (shard.strides.empty()) {
    strides[nd - 1] = 1;
    for (int d = nd - 2; d >= 0; --d) strides[d] = strides[d + 1] * shard.box.sizes[d + 1];
  } else {
    for (int d = 0; d < nd; ++d) strides[d] = shard.strides[d];
  }
  // The index of row `first`, outermost dimension first.
  int64_t idx[32] = {};
  int64_t mem = 0;
  for (int64_t r = first, d = nd - 2; d >= 0; --d) {
    idx[d] = r % shard.box.sizes[d];
    r /= shard.box.sizes[d];
    mem += idx[d] * strides[d];
  }
  for (int64_t left = last - first; left > 0; --left) {
    if (!fn(base + mem * static_cast<int64_t>(es))) return;
    for (int d = nd - 2; d >= 0; --d) {
      mem += strides[d];
      if (++idx[d] < shard.box.sizes[d]) break;
      mem -= idx[d] * strides[d];
      idx[d] = 0;
    }
  }
}

/// Every row of the shard's box (ForEachRowIn over all of them).
template <typename Fn>
void ForEachRow(const Shard& shard, Fn&& fn) {
  ForEachRowIn(shard, 0, RowCount(shard), std::forward<Fn>(fn));
}

/// xxh3 of the shard's packed row-major bytes, chained row by row (each
/// row's hash seeds the next): the same values give the same hash whatever
/// the shard's strides. REQUIRES: box non-empty.
uint64_t HashPacked(const Shard& shard);

}  // namespace ckpt

#endif  // CKPT_LAYOUT_BOX_COPY_H_

#include "layout/box_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "util/hash.h"
#include "util/stream_copy.h"

namespace ckpt {
namespace {

// Walks packed elements [first, first + count) of the box, calling
// fn(packed_index, memory_element_offset, run_length, last_stride) per run
// along the last dimension.
template <typename Fn>
void ForEachStridedRun(const Shard& shard, int64_t first, int64_t count, Fn&& fn) {
  const int nd = shard.box.ndim();
  if (nd == 0) {
    if (count > 0) fn(0, 0, 1, 1);
    return;
  }
  int64_t packed_strides[32];
  const int64_t* strides = shard.strides.data();
  if (shard.strides.empty()) {
    packed_strides[nd - 1] = 1;
    for (int d = nd - 2; d >= 0; --d) packed_strides[d] = packed_strides[d + 1] * shard.box.sizes[d + 1];
    strides = packed_strides;
  }
  const int64_t row = shard.box.sizes[nd - 1];
  // Multi-index and memory offset of `first`, then advanced run by run with
  // carries instead of being recomputed.
  int64_t idx[32];
  int64_t rem = first;
  for (int d = nd - 1; d >= 0; --d) {
    idx[d] = rem % shard.box.sizes[d];
    rem /= shard.box.sizes[d];
  }
  int64_t mem = 0;
  for (int d = 0; d < nd; ++d) mem += idx[d] * strides[d];
  int64_t packed = first;
  const int64_t end = first + count;
  while (packed < end) {
    const int64_t run = std::min(row - idx[nd - 1], end - packed);
    fn(packed, mem, run, strides[nd - 1]);
    packed += run;
    mem -= idx[nd - 1] * strides[nd - 1];
    idx[nd - 1] = 0;
    for (int d = nd - 2; d >= 0; --d) {
      mem += strides[d];
      if (++idx[d] < shard.box.sizes[d]) break;
      mem -= idx[d] * strides[d];
      idx[d] = 0;
    }
  }
}

}  // namespace

void GatherPacked(const Shard& shard, int64_t first, int64_t count, std::byte* dst) {
  const size_t es = DTypeSize(shard.spec.dtype);
  const std::byte* base = static_cast<const std::byte*>(shard.data);
  if (shard.Contiguous()) {
    StreamCopy(dst, base + first * es, count * es);
    return;
  }
  // Runs appended in whole cache lines where dst is line-aligned (a staging
  // slot): short runs (column tiles) streamed one by one would leave a
  // partial line at both ends of each.
  const bool lines = reinterpret_cast<uintptr_t>(dst) % StreamAppender::kLine == 0;
  StreamAppender out;
  out.Reset(dst);
  ForEachStridedRun(shard, first, count, [&](int64_t packed, int64_t mem, int64_t run, int64_t last) {
    if (last == 1 && lines) {
      out.Append(base + mem * es, run * es);
    } else if (last == 1) {
      StreamCopyNoFence(dst + (packed - first) * es, base + mem * es, run * es);
    } else {
      std::byte* o = dst + (packed - first) * es;
      for (int64_t i = 0; i < run; ++i) std::memcpy(o + i * es, base + (mem + i * last) * es, es);
    }
  });
  if (lines) out.Finish();
  StreamFence();
}

void ScatterPacked(const Shard& shard, int64_t first, int64_t count, const std::byte* src) {
  const size_t es = DTypeSize(shard.spec.dtype);
  std::byte* base = static_cast<std::byte*>(shard.data);
  if (shard.Contiguous()) {
    std::memcpy(base + first * es, src, count * es);
    return;
  }
  ForEachStridedRun(shard, first, count, [&](int64_t packed, int64_t mem, int64_t run, int64_t last) {
    const std::byte* in = src + (packed - first) * es;
    if (last == 1) {
      std::memcpy(base + mem * es, in, run * es);
    } else {
      for (int64_t i = 0; i < run; ++i) {
        std::memcpy(base + (mem + i * last) * es, in + i * es, es);
      }
    }
  });
}

uint64_t HashPacked(const Shard& shard) {
  const int nd = shard.box.ndim();
  const size_t es = DTypeSize(shard.spec.dtype);
  if (nd == 0) return Xxh3Seeded(shard.data, es, 0);
  const int64_t row = shard.box.sizes[nd - 1];
  const size_t row_bytes = static_cast<size_t>(row) * es;
  uint64_t h = 0;
  if (shard.strides.empty() || shard.strides.back() == 1) {
    ForEachRow(shard, [&](const std::byte* p) {
      h = Xxh3Seeded(p, row_bytes, h);
      return true;
    });
    return h;
  }
  std::vector<std::byte> packed(row_bytes);
  const int64_t rows = shard.box.Volume() / row;
  for (int64_t r = 0; r < rows; ++r) {
    GatherPacked(shard, r * row, row, packed.data());
    h = Xxh3Seeded(packed.data(), row_bytes, h);
  }
  return h;
}

}  // namespace ckpt

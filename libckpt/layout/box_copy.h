// Copying between a shard's (possibly strided) memory and the packed
// row-major byte stream of its box.
#ifndef CKPT_LAYOUT_BOX_COPY_H_
#define CKPT_LAYOUT_BOX_COPY_H_

#include <cstddef>
#include <cstdint>

#include "ckpt/state.h"

namespace ckpt {

/// Copies elements [first, first + count) of the packed row-major order of
/// `shard.box` from the shard's memory into `dst` (staging memory: written
/// with streaming stores).
void GatherPacked(const Shard& shard, int64_t first, int64_t count,
                  std::byte* dst);

/// The inverse: writes packed elements [first, first + count) into the
/// shard's memory.
void ScatterPacked(const Shard& shard, int64_t first, int64_t count,
                   const std::byte* src);

}  // namespace ckpt

#endif  // CKPT_LAYOUT_BOX_COPY_H_

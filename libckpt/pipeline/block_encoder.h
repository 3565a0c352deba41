// The codec workers' step: a staged block becomes the bytes that are
// written, in the slot it was staged in. No I/O and no threads; the save
// engine runs it on its workers and block_encoder_test alone.
#ifndef CKPT_PIPELINE_BLOCK_ENCODER_H_
#define CKPT_PIPELINE_BLOCK_ENCODER_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ckpt/codec.h"
#include "ckpt/tensor.h"
#include "codec/codec.h"
#include "format/data_file.h"

namespace ckpt {

struct BlockEncoding {
  /// Framed: compressed where that saves bytes, then a trailer and zero
  /// padding to a 4 KiB multiple (ckpt files). Otherwise bare: the raw
  /// bytes exactly as staged (HDF5 datasets).
  bool framed = true;
  Codec codec = Codec::kNone;
  int zstd_level = 1;
  /// A delta (kFlagDelta): the slot holds the block's differences from its
  /// base's
  /// bytes, and `raw_hash` is the xxh3 of the block itself, taken before.
  bool delta = false;
  uint64_t raw_hash = 0;
};

/// Encodes block `block_id`, `raw_len` bytes of `dtype` at `slot`, in place.
/// A framed slot must hold FrameLength(raw_len) bytes; compressed bytes are
/// produced in `scratch` (BlockCodec::MaxStoredBytes(raw_len) at least) and
/// copied back over the raw ones, which they never outgrow. Returns the
/// block's index entry (offset 0: the layout places it); its frame_len is
/// how many bytes of the slot are to be written.
absl::StatusOr<IndexEntry> EncodeBlockInPlace(BlockCodec& codec, const BlockEncoding& how, DType dtype,
                                              uint32_t block_id, std::byte* slot, uint32_t raw_len,
                                              absl::Span<std::byte> scratch);

}  // namespace ckpt

#endif  // CKPT_PIPELINE_BLOCK_ENCODER_H_

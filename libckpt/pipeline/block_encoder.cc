#include "pipeline/block_encoder.h"

#include <cstring>

#include "util/errors.h"
#include "util/hash.h"

namespace ckpt {

absl::StatusOr<IndexEntry> EncodeBlockInPlace(BlockCodec& codec, const BlockEncoding& how, DType dtype,
                                              uint32_t block_id, std::byte* slot, uint32_t raw_len,
                                              absl::Span<std::byte> scratch) {
  FrameTrailer t;
  t.block_id = block_id;
  t.raw_len = raw_len;
  t.elem_width = static_cast<uint8_t>(DTypeSize(dtype));
  t.raw_hash = how.delta ? how.raw_hash : Xxh3(slot, raw_len);
  t.codec = static_cast<uint8_t>(Codec::kNone);
  t.stored_len = raw_len;
  if (!how.framed) {
    t.flags = kFlagBareBlock;
  } else if (how.codec != Codec::kNone) {
    codec.set_level(how.zstd_level);
    codec.set_rotate_floats(!how.delta);
    CKPT_ASSIGN_OR_RETURN(EncodedBlock enc,
                          codec.Encode(how.codec, dtype, absl::Span<const std::byte>(slot, raw_len), scratch));
    if (enc.codec != Codec::kNone) {
      // The encoded bytes go back into the slot (they are fewer than the
      // raw ones, and the slot's frame room is sized for the raw block), so
      // the scratch buffers never bound how many writes are in flight: the
      // disk wants deep queues.
      std::memcpy(slot, scratch.data(), enc.stored_len);
      t.codec = static_cast<uint8_t>(enc.codec);
      t.stored_len = enc.stored_len;
      t.flags = enc.flags;
      t.elem_width = enc.elem_width;
    }
  }
  if (how.delta) t.flags |= kFlagDelta;
  t.stored_hash = t.codec == static_cast<uint8_t>(Codec::kNone) && !how.delta ? t.raw_hash : Xxh3(slot, t.stored_len);
  const uint64_t frame_len = how.framed ? FrameLength(t.stored_len) : t.stored_len;
  if (how.framed) {
    EncodeTrailer(t, slot + t.stored_len);
    std::memset(slot + t.stored_len + kTrailerSize, 0, frame_len - t.stored_len - kTrailerSize);
  }
  IndexEntry e;
  e.raw_len = t.raw_len;
  e.stored_len = t.stored_len;
  e.raw_hash = t.raw_hash;
  e.stored_hash = t.stored_hash;
  e.codec = t.codec;
  e.elem_width = t.elem_width;
  e.flags = t.flags;
  e.frame_len = static_cast<uint32_t>(frame_len);
  return e;
}

}  // namespace ckpt

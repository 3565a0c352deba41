// The bits of a block's 16-bit `flags` (a frame's and its index entry's,
// docs/format.md), all in one place: the codec sets one, the data-file
// format the others.
#ifndef CKPT_UTIL_BLOCK_FLAGS_H_
#define CKPT_UTIL_BLOCK_FLAGS_H_

#include <cstdint>

namespace ckpt {

/// Shuffle planes were rotated so a float's exponent bits lead (codec).
constexpr uint16_t kFlagRotated = 0x1;
/// A bare block (HDF5 containers) has no trailer or padding; its frame is
/// exactly its stored bytes, stored uncompressed, and the index entry alone
/// carries its checksum.
constexpr uint16_t kFlagBareBlock = 0x2;
/// With kFlagBareBlock: the block comes from a file that carries no
/// checksums (a safetensors model read in place), so its hashes are 0 and
/// nothing can be checked but its place and length. Only entries of
/// *.safetensors files carry it, and those always do (ReadFileIndex).
constexpr uint16_t kFlagUnchecked = 0x4;
/// A delta (ckpt data files only): the decoded bytes are the block's
/// elements as differences from the same block of its chunk's base step
/// (ManifestChunk::base; MakeDelta); the raw xxh3 covers the block's own
/// bytes, rebuilt.
constexpr uint16_t kFlagDelta = 0x8;

}  // namespace ckpt

#endif  // CKPT_UTIL_BLOCK_FLAGS_H_

// Block codecs: none, zstd, and shuffle-zstd (byte planes by element width,
// each plane zstd-compressed or stored raw when it would not shrink).
#ifndef CKPT_CODEC_CODEC_H_
#define CKPT_CODEC_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ckpt/codec.h"
#include "ckpt/dtype.h"
#include "util/block_flags.h"

struct ZSTD_CCtx_s;
struct ZSTD_DCtx_s;

namespace ckpt {

struct EncodedBlock {
  Codec codec = Codec::kNone;  ///< kNone: store the raw bytes instead
  uint32_t stored_len = 0;
  uint8_t elem_width = 1;
  uint16_t flags = 0;
};

namespace internal {
/// Shuffle's byte planes: `n` elements of `width` bytes at `in` become
/// `width` planes of n bytes at `out`, the most significant byte's first
/// (after a left rotation by one bit with `rotate`), and back. `vector`
/// false keeps to the scalar loops (tests compare the two).
void SplitBytePlanes(size_t width, const std::byte* in, size_t n, bool rotate, std::byte* out, bool vector);
void JoinBytePlanes(size_t width, const std::byte* in, size_t n, bool rotate, std::byte* out, bool vector);
}  // namespace internal

/// Per-thread codec state. Not thread-safe: one instance per worker.
class BlockCodec {
 public:
  explicit BlockCodec(int zstd_level = 1);
  ~BlockCodec();
  BlockCodec(const BlockCodec&) = delete;
  BlockCodec& operator=(const BlockCodec&) = delete;

  /// Upper bound of the stored size for `raw_len` bytes under any codec.
  static size_t MaxStoredBytes(size_t raw_len);

  void set_level(int zstd_level) { level_ = zstd_level; }
  /// Whether shuffle-zstd rotates floating-point elements so that their
  /// exponent bits lead (kFlagRotated). A delta's elements are small
  /// integers, which the rotation would spread over one more plane.
  void set_rotate_floats(bool rotate) { rotate_floats_ = rotate; }

  /// Compresses `raw` into `out` (capacity >= MaxStoredBytes). Returns
  /// codec kNone, leaving `out` unspecified, when compression would not
  /// make the block smaller; the caller then stores `raw` itself.
  absl::StatusOr<EncodedBlock> Encode(Codec codec, DType dtype, absl::Span<const std::byte> raw,
                                      absl::Span<std::byte> out);

  /// Decodes `stored` into exactly `raw_out.size()` bytes. `where` names the
  /// block (file, offset) in error messages.
  absl::Status Decode(Codec codec, uint8_t elem_width, uint16_t flags, absl::Span<const std::byte> stored,
                      absl::Span<std::byte> raw_out, std::string_view where);

 private:
  size_t CompressPlane(absl::Span<const std::byte> in, std::byte* out, size_t cap);
  /// One byte plane of a shuffled block (see kPlaneLevel).
  size_t CompressBytePlane(absl::Span<const std::byte> in, std::byte* out, size_t cap);

  int level_;
  bool rotate_floats_ = true;
  ZSTD_CCtx_s* cctx_ = nullptr;
  ZSTD_CCtx_s* plane_cctx_ = nullptr;
  bool plane_ready_ = false;
  ZSTD_DCtx_s* dctx_ = nullptr;
  std::vector<std::byte> planes_;
};

/// Estimated Shannon entropy (bits per byte) from a sample of `data`.
double SampledEntropyBits(absl::Span<const std::byte> data);

}  // namespace ckpt

#endif  // CKPT_CODEC_CODEC_H_

// The block codecs a checkpoint may use.
#ifndef CKPT_CODEC_H_
#define CKPT_CODEC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ckpt/export.h"

namespace ckpt {

/// Block codec. The numeric values are part of the on-disk format.
enum class Codec : uint8_t {
  kNone = 0,         ///< stored as is
  kZstd = 1,         ///< Zstandard over the whole block
  kShuffleZstd = 2,  ///< byte planes by element width, each zstd or raw
  /// A save's choice per block (never a block's codec): shuffle-zstd (zstd
  /// for one-byte types) when the storage's backlog, at the rate it is
  /// measured to drain, outlasts compressing the block at the rate that
  /// dtype is measured to compress; as is otherwise, and for a kind of
  /// tensor that does not compress. Each block records what it got.
  kAuto = 3,
};
CKPT_EXPORT std::string_view CodecName(Codec codec);
/// The codec of a name CodecName gives ("shuffle" is also shuffle-zstd).
CKPT_EXPORT std::optional<Codec> ParseCodec(std::string_view name);
/// Every codec's name, for help and error messages: "none, zstd,
/// shuffle-zstd or auto".
CKPT_EXPORT std::string CodecChoices();

}  // namespace ckpt

#endif  // CKPT_CODEC_H_

// Verifying what was read back: frames against their index entry, and a data
// file's index against the manifest.
#ifndef CKPT_FORMAT_FRAME_CHECK_H_
#define CKPT_FORMAT_FRAME_CHECK_H_

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ckpt/storage.h"
#include "format/data_file.h"
#include "format/manifest.h"

namespace ckpt {

class BlockCodec;

/// Checks a whole frame (as read from offset e.offset of `file`): length,
/// trailer magic and checksum, trailer fields equal to the index entry,
/// zero padding, and the xxh3 of the stored bytes. Errors are DataLoss and
/// give the file and byte offset.
absl::Status CheckFrame(absl::Span<const std::byte> frame, const IndexEntry& e, uint64_t block_id,
                        std::string_view file);

/// Rebuilds a delta block's bytes from its decoded deltas and its base
/// (DeltaChain).
using DeltaBaseFn = std::function<absl::Status(absl::Span<std::byte> bytes)>;

/// Decodes a checked frame's stored bytes and verifies the xxh3 of the raw
/// bytes. Returns the raw bytes: the payload itself for codec none,
/// otherwise `scratch`. A delta block (kFlagDelta) is rebuilt in `scratch`
/// by `base` before the check; without `base` it is refused.
absl::StatusOr<absl::Span<const std::byte>> DecodeFrame(BlockCodec& codec, absl::Span<const std::byte> frame,
                                                        const IndexEntry& e, std::vector<std::byte>& scratch,
                                                        std::string_view file, const DeltaBaseFn* base = nullptr);

/// Reads and checks a data file's block index: file size, index checksum
/// against the manifest, entry count, and entries that lie in the data area
/// without overlapping. `file` is the display name.
absl::StatusOr<std::vector<IndexEntry>> ReadFileIndex(ReadableFile& f, const ManifestFile& mf, std::string_view file);

}  // namespace ckpt

#endif  // CKPT_FORMAT_FRAME_CHECK_H_

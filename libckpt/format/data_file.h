// Byte layout of a rank's data file (docs/format.md):
//
//   [header: 4096 bytes][frame]...[frame][index][footer: 64 bytes]
//
// Each frame is the stored block, a 48-byte trailer and zero padding to the
// next multiple of 4096, so frames can be written with O_DIRECT straight
// from staging memory. The footer points at the index; the index gives every
// frame's offset and checksums, so any block is two reads away.
#ifndef CKPT_FORMAT_DATA_FILE_H_
#define CKPT_FORMAT_DATA_FILE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ckpt/limits.h"
#include "util/block_flags.h"

namespace ckpt {

constexpr size_t kFrameAlign = 4096;
constexpr size_t kDataHeaderSize = 4096;
constexpr size_t kTrailerSize = 48;
constexpr size_t kIndexEntrySize = 40;
constexpr size_t kIndexHeaderSize = 16;
constexpr size_t kFooterSize = 64;
constexpr uint32_t kDataFormatVersion = 1;

inline uint64_t FrameLength(uint64_t stored_len) {
  return (stored_len + kTrailerSize + kFrameAlign - 1) / kFrameAlign * kFrameAlign;
}

struct DataFileHeader {
  uint32_t version = kDataFormatVersion;
  int64_t step = 0;
  uint32_t rank = 0;
  uint64_t save_id = 0;  ///< random per save; ties files to their manifest
};

/// Self-description of one block, written after its stored bytes.
struct FrameTrailer {
  uint8_t codec = 0;
  uint8_t elem_width = 1;
  uint16_t flags = 0;
  uint32_t raw_len = 0;
  uint32_t stored_len = 0;
  uint32_t block_id = 0;
  uint64_t raw_hash = 0;     ///< xxh3 of the decoded bytes
  uint64_t stored_hash = 0;  ///< xxh3 of the stored bytes
};

/// One index entry per frame, in block-id order.
/// Index entry flags: util/block_flags.h.
struct IndexEntry {
  uint64_t offset = 0;  ///< frame start in the file (multiple of 4096)
  uint32_t raw_len = 0;
  uint32_t stored_len = 0;
  uint64_t raw_hash = 0;
  uint64_t stored_hash = 0;
  uint8_t codec = 0;
  uint8_t elem_width = 1;
  uint16_t flags = 0;
  uint32_t frame_len = 0;
};

struct DataFileFooter {
  uint32_t version = kDataFormatVersion;
  uint64_t index_offset = 0;
  uint64_t index_len = 0;
  uint64_t block_count = 0;
  uint64_t index_hash = 0;
  uint64_t save_id = 0;
};

/// The name of rank `rank`'s data file in its step directory:
/// "rank-000003.ckd".
std::string DataFileName(int rank);

void EncodeDataHeader(const DataFileHeader& h, std::byte* out);  // 4096 bytes
/// Checks magic, header checksum, version and zero padding. `file` names
/// the file in messages.
absl::StatusOr<DataFileHeader> DecodeDataHeader(const std::byte* in, std::string_view file);

void EncodeTrailer(const FrameTrailer& t, std::byte* out);  // 48 bytes
/// Checks magic and trailer checksum; `offset` is where the trailer starts.
absl::StatusOr<FrameTrailer> DecodeTrailer(const std::byte* in, std::string_view file, uint64_t offset);

std::string EncodeIndex(const std::vector<IndexEntry>& entries);
absl::StatusOr<std::vector<IndexEntry>> DecodeIndex(std::string_view bytes, std::string_view file, uint64_t offset);

void EncodeFooter(const DataFileFooter& f, std::byte* out);  // 64 bytes
absl::StatusOr<DataFileFooter> DecodeFooter(const std::byte* in, std::string_view file, uint64_t offset);

}  // namespace ckpt

#endif  // CKPT_FORMAT_DATA_FILE_H_

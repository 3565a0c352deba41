// The safetensors format (Hugging Face): an 8-byte little-endian header
// length N, N bytes of JSON, then the byte buffer. The JSON maps each tensor
// name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets into the
// buffer, which the tensors must cover exactly, without holes or overlaps)
// and may hold "__metadata__", a map of strings. Sharded models add
// model.safetensors.index.json: {"metadata": {"total_size": N},
// "weight_map": {tensor: file}}. Nothing is checksummed.
//
// Everything read here is checked before it is used: the header's length
// against the file and kMaxSafetensorsHeader, the JSON strictly, each dtype,
// shape and offset range, and the cover of the buffer. Errors name the file
// and the tensor. The writers and the structs are public (ckpt/safetensors.h).
#ifndef CKPT_FORMAT_SAFETENSORS_H_
#define CKPT_FORMAT_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/safetensors.h"
#include "ckpt/tensor.h"

namespace ckpt {

struct SafetensorsFile {
  uint64_t header_len = 0;
  uint64_t data_start = 0;                 ///< 8 + header_len: where the buffer starts
  std::vector<SafetensorsTensor> tensors;  ///< ascending by begin
  std::map<std::string, std::string> metadata;
};

/// Bits per element of a safetensors dtype name, 0 when unknown.
uint32_t SafetensorsDTypeBits(std::string_view name);

/// The header length from a file's first 8 bytes, checked against the file
/// size and kMaxSafetensorsHeader.
absl::StatusOr<uint64_t> DecodeSafetensorsPrefix(const std::byte* first8, uint64_t file_size, std::string_view file);

/// Parses and checks the JSON header of a file of `file_size` bytes whose
/// header is `header_len` bytes long.
absl::StatusOr<SafetensorsFile> DecodeSafetensorsHeader(std::string_view json, uint64_t file_size,
                                                        std::string_view file);

/// Data files of a safetensors root end in ".safetensors": their blocks are
/// bare and unchecked.
bool IsSafetensorsDataFile(std::string_view name);
/// The block size of a safetensors model read in place: small, so that a
/// rank reading its rows reads little more than those rows.
inline constexpr uint64_t kSafetensorsBlockBytes = 64u << 10;

/// Parses model.safetensors.index.json. Shard names must be plain file names
/// (no directories).
absl::StatusOr<SafetensorsIndex> DecodeSafetensorsIndex(std::string_view json, std::string_view file);

}  // namespace ckpt

#endif  // CKPT_FORMAT_SAFETENSORS_H_

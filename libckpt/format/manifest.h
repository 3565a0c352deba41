// The manifest of a committed step, and the per-rank report that the leader
// merges into it. Both use one binary encoding (docs/format.md): a 48-byte
// header with magic, version and checksums, then a varint-coded body.
#ifndef CKPT_FORMAT_MANIFEST_H_
#define CKPT_FORMAT_MANIFEST_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/codec.h"
#include "ckpt/limits.h"
#include "ckpt/mesh.h"
#include "ckpt/tensor.h"

namespace ckpt {

/// 1: the original format. 2: the same bytes; a committed step also holds
/// MANIFEST.copy, byte-identical, so a missing copy is damage only from 2 on.
/// 3: the manifest ends with the step's CLAIM, byte for byte, and every file
/// it commits carries that claim's save id.
constexpr uint32_t kManifestVersion = 3;
constexpr size_t kManifestHeaderSize = 48;

/// A data file of the step.
struct ManifestFile {
  std::string name;  ///< relative to the step directory
  int32_t rank = 0;
  uint64_t size = 0;
  uint64_t index_offset = 0;
  uint64_t index_len = 0;
  uint64_t index_hash = 0;
  uint64_t block_count = 0;
  uint64_t block_size = 0;  ///< raw bytes per block (the last of a chunk less)
  uint64_t save_id = 0;
  /// HDF5 containers (version 2 on): xxh3 of every byte libhdf5 wrote, the
  /// ranges outside the blocks and the index, concatenated in file order.
  /// 0 for .ckd files, whose every byte has a checksum of its own.
  uint64_t container_hash = 0;
};

/// A saved box of a tensor: blocks [first_block, first_block + block_count)
/// of file `file` hold its bytes, row-major.
struct ManifestChunk {
  uint32_t file = 0;
  uint64_t first_block = 0;
  uint64_t block_count = 0;
  Box box;
};

struct ManifestTensor {
  TensorSpec spec;
  std::vector<ManifestChunk> chunks;
};

struct ManifestBlob {
  std::string name;
  int32_t rank = -1;  ///< -1: global
  uint64_t size = 0;
  uint32_t file = 0;
  uint64_t first_block = 0;
  uint64_t block_count = 0;
};

struct Manifest {
  enum class Kind : uint8_t { kManifest = 0, kRankReport = 1 };
  Kind kind = Kind::kManifest;
  /// The format version it was decoded from (encoding writes the newest).
  uint32_t format_version = kManifestVersion;
  int64_t step = 0;
  int32_t world_size = 1;
  int64_t created_unix_ns = 0;
  std::string library_version;
  Codec codec = Codec::kNone;
  std::optional<Mesh> mesh;
  std::map<std::string, std::string> metadata;
  std::vector<ManifestFile> files;
  std::vector<ManifestTensor> tensors;  ///< sorted by fqn
  std::vector<ManifestBlob> blobs;
  /// Rank report only: timing of that rank's save.
  double stall_s = 0;
  double write_s = 0;
  int64_t bytes_logical = 0;
  int64_t bytes_stored = 0;
  /// Version 3 manifests: the bytes of the step's CLAIM when it was
  /// committed (empty in rank reports).
  std::string claim;

  const ManifestTensor* FindTensor(std::string_view fqn) const;
  int64_t LogicalBytes() const;
};

std::string EncodeManifest(const Manifest& m);
/// Decodes and checks everything that can be checked without the data
/// files: magic, version, checksums, lengths, dtypes, boxes within shapes,
/// file and block references. `what` names the object in messages.
absl::StatusOr<Manifest> DecodeManifest(std::string_view bytes, std::string_view what);

/// Raw byte range [begin, end) of block `b` (relative to the chunk's first
/// block) within a stream of `total` bytes cut into `block_size` blocks.
inline uint64_t BlockBegin(uint64_t b, uint64_t block_size) { return b * block_size; }

}  // namespace ckpt

#endif  // CKPT_FORMAT_MANIFEST_H_

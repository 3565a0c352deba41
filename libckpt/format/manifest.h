// The manifest of a committed step, and the per-rank report that the leader
// merges into it. Both use one binary encoding (docs/format.md): a 48-byte
// header with magic, version and checksums, then a varint-coded body.
#ifndef CKPT_FORMAT_MANIFEST_H_
#define CKPT_FORMAT_MANIFEST_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/codec.h"
#include "ckpt/limits.h"
#include "ckpt/mesh.h"
#include "ckpt/tensor.h"
#include "format/chunk_grid.h"

namespace ckpt {

class Xxh3Stream;

/// 1: the original format. 2: the same bytes; a committed step also holds
/// MANIFEST.copy, byte-identical, so a missing copy is damage only from 2 on.
/// 3: the manifest ends with the step's CLAIM, byte for byte, and every file
/// it commits carries that claim's save id.
/// 4: sections a reader can fetch apart (a head, fixed-size file records, a
/// tensor directory, one record per tensor), each under its own checksum, and
/// tensors whose chunks form a grid stored as the grid (ChunkGrid).
/// 5: a grid's run-coded sequences keep a pattern of runs that repeats once,
/// with its repeat count (IntRuns groups).
/// 6: delta chains. The head lists the steps the manifest's chunks are
/// deltas against (ManifestBase), and each listed chunk names its base;
/// chunks with a base are never coded as a grid.
constexpr uint32_t kManifestVersion = 6;
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
  /// Version 6: 0 when the chunk is stored whole; i >= 1 when its blocks
  /// flagged kFlagDelta hold their elements as differences from the same
  /// block of the chunk with the same box in step Manifest::bases[i - 1]
  /// (whose own blocks may be deltas in turn: a chain).
  uint32_t base = 0;
};

/// A step that chunks of a manifest are deltas against, and the save that
/// wrote it (the base's files carry that save id).
struct ManifestBase {
  int64_t step = 0;
  uint64_t save_id = 0;
  bool operator==(const ManifestBase&) const = default;
};

struct ManifestTensor {
  TensorSpec spec;
  /// Every chunk, also when `grid` describes them (then in its cell order);
  /// empty in the grid-only form (`grid` set and the chunks not expanded:
  /// SaveManifestByRules builds it, DecodeManifest with kGridsOnly keeps it).
  std::vector<ManifestChunk> chunks;
  /// Version 4: set when the chunks are the cells of a grid, which is how
  /// the tensor is then encoded (DescribeByRules sets it; decoding keeps it).
  /// Encoding checks it against `chunks` when they are listed and lists them
  /// when they differ.
  std::optional<ChunkGrid> grid;

  /// True when only `grid` describes the chunks.
  bool GridOnly() const { return grid.has_value() && chunks.empty(); }
  /// Chunks, grid cells included.
  uint64_t ChunkCount() const { return GridOnly() ? grid->NumCells() : chunks.size(); }
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
  /// Version 6: the bases of the chunks' deltas: distinct steps, each older
  /// than `step`.
  std::vector<ManifestBase> bases;

  const ManifestTensor* FindTensor(std::string_view fqn) const;
  int64_t LogicalBytes() const;
  /// The base a chunk's `base` names; null for 0 or a number out of range.
  const ManifestBase* BaseOf(const ManifestChunk& c) const {
    return c.base == 0 || c.base > bases.size() ? nullptr : &bases[c.base - 1];
  }
  /// Adds `b` to `bases` unless its step is there, and returns its number
  /// for ManifestChunk::base.
  uint32_t AddBase(const ManifestBase& b);
};

/// Where the manifest's file `f` lives under the root: in its step's
/// directory.
std::string ManifestFilePath(const Manifest& m, const ManifestFile& f);

std::string EncodeManifest(const Manifest& m);
/// Decodes and checks everything that can be checked without the data
/// files: magic, version, checksums, lengths, dtypes, boxes within shapes,
/// file and block references. `what` names the object in messages. At most
/// `max_chunks` chunks (grid cells included) are accepted. kGridsOnly leaves
/// grid tensors in the grid-only form (no ManifestChunk per cell; every cell's
/// file and blocks are still checked), for readers that look tensors up by
/// their grid; kExpandGrids lists every cell as a chunk too.
enum class GridChunks : uint8_t { kExpandGrids, kGridsOnly };
absl::StatusOr<Manifest> DecodeManifest(std::string_view bytes, std::string_view what,
                                        uint64_t max_chunks = kMaxManifestChunks,
                                        GridChunks grids = GridChunks::kExpandGrids);

// ---- Reading a version-4 manifest in parts (ranged reads) ----

constexpr size_t kManifestFileRecordSize = 96;

/// Where the sections of a version-4 manifest are, in bytes from its start.
struct ManifestSections {
  uint64_t size = 0;
  uint64_t files_at = 0, file_count = 0;
  uint64_t names_at = 0, names_len = 0;
  uint64_t directory_at = 0, directory_len = 0, directory_hash = 0;
  uint64_t tensors_at = 0, tensors_len = 0, tensor_count = 0;
  uint64_t FileRecordAt(uint64_t i) const { return files_at + kManifestFileRecordSize * i; }
};

/// From the 48-byte header: how many bytes from the start hold the header
/// and the head. FailedPrecondition for versions 1-3, which have no sections.
absl::StatusOr<uint64_t> ManifestHeadBytes(std::string_view header, std::string_view what);
/// Decodes the header and head from `prefix` (at least ManifestHeadBytes
/// long) of a manifest of `size` bytes: everything but files and tensors,
/// and where the sections are.
absl::StatusOr<Manifest> DecodeManifestHead(std::string_view prefix, uint64_t size, std::string_view what,
                                            ManifestSections* sections);

/// Where the name a file record stores lies (len 0: the default name).
struct FileRecordName {
  uint64_t at = 0;
  uint32_t len = 0;
};
FileRecordName PeekFileRecordName(std::string_view record, const ManifestSections& sections);
/// File record `index` from its 96 bytes and the name bytes it points at.
/// `hash` (optional) is a stream to reuse.
absl::StatusOr<ManifestFile> DecodeFileRecord(std::string_view record, std::string_view name,
                                              const ManifestSections& sections, uint64_t index, std::string_view what,
                                              Xxh3Stream* hash = nullptr);

/// A tensor's entry in the directory: its record at [at, at + len).
struct TensorEntry {
  std::string fqn;
  uint64_t at = 0;
  uint64_t len = 0;
  uint64_t hash = 0;
};
absl::StatusOr<std::vector<TensorEntry>> DecodeTensorDirectory(std::string_view directory,
                                                               const ManifestSections& sections, std::string_view what);
/// Decodes a tensor record into `t`: a grid is left unexpanded (t->chunks
/// empty; see GridChunk), listed chunks are checked against `file_count`
/// and, when `files` is given, their block ranges. `chunk_budget` is
/// decreased by the chunks or cells it holds, which may not exceed it.
/// `version` is the manifest's (its codings differ).
absl::Status DecodeTensorRecord(std::string_view record, const TensorEntry& entry,
                                const std::vector<ManifestFile>* files, uint64_t file_count, uint32_t version,
                                uint64_t* chunk_budget, std::string_view what, ManifestTensor* t);
/// Every listed chunk of `t` names a base `m` has (or none).
absl::Status CheckChunkBases(const Manifest& m, const ManifestTensor& t, std::string_view what);
/// The chunk of grid cell `cell`, its file's block size given.
ManifestChunk GridChunk(const ManifestTensor& t, uint64_t cell, uint64_t block_size);

/// The grid `t`'s chunks form, when they do: every chunk one cell, listed in
/// row-major cell order, each chunk's block count the blocks of its bytes at
/// its file's block size. nullopt otherwise (and for scalars and tensors
/// without chunks).
std::optional<ChunkGrid> DetectGrid(const ManifestTensor& t, const std::vector<ManifestFile>& files);

/// For a manifest (not a rank report) of the newest version: puts each
/// tensor's chunks in row-major order of their offsets and sets `grid` where
/// they form one, so the encoding describes them by their rule.
void DescribeByRules(Manifest& m);
/// DescribeByRules for one tensor of a manifest with these files.
void DescribeTensorByRules(ManifestTensor& t, const std::vector<ManifestFile>& files);

/// Raw byte range [begin, end) of block `b` (relative to the chunk's first
/// block) within a stream of `total` bytes cut into `block_size` blocks.
inline uint64_t BlockBegin(uint64_t b, uint64_t block_size) { return b * block_size; }

}  // namespace ckpt

#endif  // CKPT_FORMAT_MANIFEST_H_

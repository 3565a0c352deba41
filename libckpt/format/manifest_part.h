// The part of a version-4 manifest one rank needs, read by ranges: the head,
// the tensor directory, the records of the tensors it loads and the file
// records of the chunks that meet its boxes. What it returns is what
// RestrictManifest makes from the whole manifest, file for file and chunk for
// chunk, so a loader can plan from it alone.
#ifndef CKPT_FORMAT_MANIFEST_PART_H_
#define CKPT_FORMAT_MANIFEST_PART_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/storage.h"
#include "format/manifest.h"

namespace ckpt {

struct ManifestWants {
  /// Tensor name and a box of it to load (names may repeat; empty boxes keep
  /// the tensor's spec in the result, with no chunks).
  std::vector<std::pair<std::string, Box>> boxes;
  /// Blob name and owner rank (-1: global).
  std::vector<std::pair<std::string, int32_t>> blobs;
};

struct ManifestPartStats {
  uint64_t bytes_read = 0;
  uint64_t reads = 0;
};

/// Reads `len` bytes at `offset` of the manifest.
using ManifestRangeReader = std::function<absl::StatusOr<std::string>(uint64_t offset, uint64_t len)>;

/// A reader of `file` by ReadableFile::ReadAt (which must outlive it).
ManifestRangeReader FileRangeReader(ReadableFile& file);

/// Reads what `wants` needs of a version-4 manifest of `size` bytes, every
/// part checked against its checksum. Tensors and blobs the step lacks are
/// left out (the loader names them). FailedPrecondition for versions 1-3.
absl::StatusOr<Manifest> ReadManifestPart(const ManifestRangeReader& read, uint64_t size, const ManifestWants& wants,
                                          std::string_view what, ManifestPartStats* stats = nullptr);

}  // namespace ckpt

#endif  // CKPT_FORMAT_MANIFEST_PART_H_

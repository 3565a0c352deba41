// The pieces of the manifest's encoding that its versions share, and
// version 4's encoder and decoder (manifest_v4.cc); manifest.cc holds the
// rest (versions 1 to 3, the public entry points). Internal to format/.
#ifndef CKPT_FORMAT_MANIFEST_CODEC_H_
#define CKPT_FORMAT_MANIFEST_CODEC_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "format/manifest.h"
#include "util/bytes.h"

namespace ckpt::manifest_codec {

// Version 4: a file record's size, the bytes of it its hash covers, and how
// a tensor record gives its chunks.
inline constexpr size_t kFileRecordSize = kManifestFileRecordSize;
inline constexpr size_t kFileRecordHashed = 88;
enum : uint8_t { kChunksListed = 0, kChunksGrid = 1 };

// The header (magic, checksum, version) before `body`, `head_len` bytes of
// which the header's checksum covers.
std::string WithHeader(uint32_t version, const std::string& body, uint64_t head_len);
// The header's magic, checksum and version (known to this reader).
absl::StatusOr<uint32_t> CheckHeader(std::string_view header, std::string_view what);

void WritePreamble(ByteWriter& w, const Manifest& m);
void ReadPreamble(ByteReader& r, Manifest& m);
void WriteBlobs(ByteWriter& w, const Manifest& m);
// Blobs refer to files by index; `files` may be empty when the files come
// later in the encoding (version 4), which then checks the references.
void ReadBlobs(ByteReader& r, Manifest& m, uint64_t nfiles, bool check_blocks);
void WriteTail(ByteWriter& w, const Manifest& m);
void ReadTail(ByteReader& r, Manifest& m);
void WriteExplicitChunks(ByteWriter& w, const ManifestTensor& t, uint32_t version);
// Reads `nchunks` explicitly listed chunks of `t` (its spec already read).
// Version 6 adds each chunk's base (checked against the manifest's bases
// by the caller: CheckChunkBases).
void ReadExplicitChunks(ByteReader& r, const std::vector<ManifestFile>* files, uint64_t nfiles, uint64_t nchunks,
                        uint32_t version, ManifestTensor& t);

std::string EncodeV4(const Manifest& m);
absl::StatusOr<Manifest> DecodeV4(std::string_view bytes, std::string_view what, uint64_t max_chunks, GridChunks grids);
// Reads one tensor record (spec after the name, then its chunks): a grid is
// not expanded; listed chunks are checked against `nfiles` and the shape,
// their blocks against `files` when given.
void ReadTensorRecord(ByteReader& r, const std::vector<ManifestFile>* files, uint64_t nfiles, uint32_t version,
                      uint64_t* chunk_budget, ManifestTensor& t);

}  // namespace ckpt::manifest_codec

#endif  // CKPT_FORMAT_MANIFEST_CODEC_H_

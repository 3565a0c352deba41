// The HDF5 container layout (hdf5:// roots): each rank's data file is an
// HDF5 file in which every saved chunk is a dataset h5py and h5dump read
// directly, and the ckpt block index is one more dataset.
//
// The file is created by libhdf5 with every dataset contiguous, allocated up
// front and never filled, so each dataset has a fixed byte range; the save
// pipeline then writes the chunk bytes into those ranges itself (raw, as
// "bare" blocks without trailers: codec none, flag kBareBlock) and the block
// index into its dataset. Loading needs no HDF5 library: the manifest points
// at the index, the index at the bytes.
#ifndef CKPT_FORMAT_HDF5_CONTAINER_H_
#define CKPT_FORMAT_HDF5_CONTAINER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/tensor.h"

namespace ckpt {

/// One dataset of the container.
struct Hdf5Chunk {
  std::string path;  ///< HDF5 path, e.g. "/layers.0.w/chunk_0_128"
  DType dtype = DType::kU8;
  Shape global_shape;  ///< tensor chunks: the tensor's shape (attribute)
  Box box;             ///< tensor chunks: where the chunk sits (shape and attribute)
  uint64_t bytes = 0;  ///< blobs: length (a u8 vector)
  bool is_blob = false;
};

struct Hdf5Container {
  std::vector<uint64_t> offsets;  ///< per chunk: byte offset of its data
  uint64_t index_offset = 0;      ///< where the block index goes
  uint64_t file_size = 0;
};

/// HDF5 path of a tensor chunk: "/" + fqn + "/chunk_" + offsets joined by '_'.
std::string Hdf5ChunkPath(std::string_view fqn, const Box& box);
/// HDF5 path of a blob: "/_ckpt_blobs/name" (global) or ".../rank-R/name".
std::string Hdf5BlobPath(std::string_view name, int rank);

/// Creates the container at `local_path` (replacing it) with the chunks and
/// an `index_bytes` long "/_ckpt_index" dataset, and returns the byte
/// ranges. Data regions are left unwritten.
absl::StatusOr<Hdf5Container> CreateHdf5Container(const std::string& local_path, const std::vector<Hdf5Chunk>& chunks,
                                                  uint64_t index_bytes, int64_t step, int rank);

/// The byte ranges of a container that libhdf5 wrote: everything in
/// [0, file_size) outside `used` (the blocks and the index), ascending.
std::vector<std::pair<uint64_t, uint64_t>> Hdf5MetadataRanges(std::vector<std::pair<uint64_t, uint64_t>> used,
                                                              uint64_t file_size);

/// xxh3 of the bytes of `ranges` of a container, concatenated in order, read
/// through `read(offset, length, out)`. It covers every byte ckpt's own
/// checksums do not (the manifest records it as the file's container_hash).
absl::StatusOr<uint64_t> Hdf5MetadataHash(const std::vector<std::pair<uint64_t, uint64_t>>& ranges,
                                          const std::function<absl::Status(uint64_t, uint64_t, char*)>& read);

/// Data files of hdf5:// roots end in ".h5".
bool IsHdf5DataFile(std::string_view name);
std::string Hdf5DataFileName(int rank);

}  // namespace ckpt

#endif  // CKPT_FORMAT_HDF5_CONTAINER_H_

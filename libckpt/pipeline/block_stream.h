// Streaming every block of chosen tensors of a committed step, decoded and
// checked, in file order with bounded memory: the read path of the audits
// (stats, diff), which need every value once but never a whole tensor.
#ifndef CKPT_PIPELINE_BLOCK_STREAM_H_
#define CKPT_PIPELINE_BLOCK_STREAM_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ckpt/storage.h"
#include "codec/codec.h"
#include "format/data_file.h"
#include "format/manifest.h"
#include "pipeline/frame_reader.h"
#include "util/aligned_buffer.h"

namespace ckpt {

/// The data files of one step, each opened and its index read and checked
/// against the manifest once, on first use. Thread-safe.
class DeltaChain;

class StepFiles {
 public:
  struct File {
    std::unique_ptr<ReadableFile> file;
    std::vector<IndexEntry> index;
    std::string path;  ///< for messages
  };

  StepFiles(Storage& storage, const Manifest& manifest) : storage_(storage), m_(manifest) {}

  const Manifest& manifest() const { return m_; }
  /// Where blocks stored as deltas find their bases (pipeline/
  /// delta_chain.h); null: such blocks are refused.
  void set_chain(DeltaChain* chain) { chain_ = chain; }
  DeltaChain* chain() const { return chain_; }

  /// The file `i` of the manifest, opened.
  absl::StatusOr<const File*> Open(uint32_t i);

  /// The index entry of block `block` (relative to the chunk) of `chunk`,
  /// after checking that it exists and holds as many raw bytes as the
  /// chunk's stream needs there. Errors name the tensor, chunk and file.
  absl::StatusOr<const IndexEntry*> Entry(const ManifestTensor& tensor, const ManifestChunk& chunk, uint64_t block);

 private:
  Storage& storage_;
  const Manifest& m_;
  DeltaChain* chain_ = nullptr;
  std::mutex mu_;
  std::map<uint32_t, std::unique_ptr<File>> files_;
};

/// One decoded block of a chunk: elements [first_element, first_element +
/// raw.size() / element size) of the chunk's row-major stream.
struct StreamedBlock {
  const ManifestTensor* tensor = nullptr;
  const ManifestChunk* chunk = nullptr;
  int64_t first_element = 0;
  absl::Span<const std::byte> raw;
  /// Position in the stream, 0 .. count-1: blocks are visited concurrently,
  /// a caller that reduces in this order gets the same result every run.
  size_t sequence = 0;
};

/// Calls `visit` for every block of every chunk of `tensors`, read in file
/// order (adjacent frames in one request), each checked (frame checksum,
/// raw checksum) before it is decoded. `visit` runs on worker threads,
/// concurrently; its first error stops the stream and is returned. Memory:
/// options.buffer_bytes of reads in flight plus a block per worker.
absl::Status StreamTensorBlocks(StepFiles& files, const std::vector<const ManifestTensor*>& tensors,
                                const FrameReaderOptions& options,
                                const std::function<absl::Status(const StreamedBlock&)>& visit);

/// Number of blocks StreamTensorBlocks visits for `tensors`.
size_t CountTensorBlocks(const std::vector<const ManifestTensor*>& tensors);

/// Reads single blocks of chunks on demand, checked and decoded, keeping the
/// last one so that consecutive requests for the same block read it once.
/// REQUIRES: one thread at a time.
class BlockFetcher {
 public:
  explicit BlockFetcher(StepFiles& files) : files_(files) {}
  absl::StatusOr<absl::Span<const std::byte>> Fetch(const ManifestTensor& tensor, const ManifestChunk& chunk,
                                                    uint64_t block);

 private:
  StepFiles& files_;
  const ManifestChunk* cached_chunk_ = nullptr;
  uint64_t cached_block_ = 0;
  absl::Span<const std::byte> cached_;
  AlignedBuffer frame_;
  BlockCodec codec_;
  std::vector<std::byte> scratch_;
};

}  // namespace ckpt

#endif  // CKPT_PIPELINE_BLOCK_STREAM_H_

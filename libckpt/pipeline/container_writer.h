// The layout of one rank's data file, behind one interface: the save engine
// stages, checksums and (where the layout allows) compresses blocks, and a
// ContainerWriter decides where each block lands and writes what surrounds
// the blocks. Two layouts exist:
//
//   CkptFileWriter  header, framed blocks in completion order, index, footer
//                   (format/data_file.h)
//   Hdf5FileWriter  an HDF5 file laid out by libhdf5 up front; raw blocks at
//                   their datasets' fixed places, the index in its dataset
//                   (format/hdf5_container.h)
//
// A new layout implements this class and gets a DataContainer value.
#ifndef CKPT_PIPELINE_CONTAINER_WRITER_H_
#define CKPT_PIPELINE_CONTAINER_WRITER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "ckpt/options.h"
#include "ckpt/storage.h"

namespace ckpt {

struct SaveJob;
struct SavePiece;

/// Writes one data file. Used by one job: Open, then Place and file() from
/// any thread (Place under the job's mutex), then Close or Abandon once.
class ContainerWriter {
 public:
  virtual ~ContainerWriter() = default;

  /// The data file's name inside the step directory.
  virtual std::string FileName(int rank) const = 0;
  /// Whether blocks are compressed and framed with a trailer (otherwise they
  /// are written raw, exactly as staged).
  virtual bool frames_blocks() const = 0;
  /// Whether a large shard may be saved as several column tiles (otherwise
  /// each shard is one piece).
  virtual bool tiles_shards() const = 0;

  /// Creates job.data_path for the numbered pieces (job.index sized,
  /// job.block_size set). Bytes that precede the blocks, if any, are then
  /// in prologue(), to be written at offset 0.
  virtual absl::Status Open(SaveJob& job, const std::vector<SavePiece>& pieces) = 0;
  virtual absl::Span<const std::byte> prologue() const { return {}; }
  /// The byte offset of block `block_id`, whose written length is
  /// `frame_len`. Called under the job's mutex, once per block.
  virtual uint64_t Place(uint32_t block_id, uint64_t frame_len) = 0;
  /// After every block's write completed: writes the index and what ends
  /// the file, makes the file durable, and sets job.index_offset, index_len,
  /// index_hash and file_size.
  virtual absl::Status Close(SaveJob& job) = 0;

  WritableFile& file() { return *file_; }
  /// Waits for writes in flight and closes the file (after a failure).
  void Abandon();

 protected:
  std::unique_ptr<WritableFile> file_;
};

/// kAuto: kHdf5 for a root whose URI scheme is "hdf5", kCkpt otherwise.
DataContainer ResolveContainer(DataContainer container, std::string_view root_uri);
/// A writer for a resolved container (kCkpt or kHdf5).
std::unique_ptr<ContainerWriter> MakeContainerWriter(DataContainer container);

}  // namespace ckpt

#endif  // CKPT_PIPELINE_CONTAINER_WRITER_H_

// An HDF5 data file (format/hdf5_container.h): libhdf5 lays the whole file
// out when it is opened (metadata, one contiguous dataset per piece, the
// index dataset); the blocks are then written raw into their datasets'
// byte ranges and the index into its own.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "format/data_file.h"
#include "format/hdf5_container.h"
#include "pipeline/container_writer.h"
#include "pipeline/save_engine.h"
#include "util/errors.h"
#include "util/hash.h"
#include "util/strings.h"

namespace ckpt {
namespace {

class Hdf5FileWriter : public ContainerWriter {
 public:
  std::string FileName(int rank) const override { return Hdf5DataFileName(rank); }
  // h5py reads the datasets as they are: raw bytes, one dataset per shard.
  bool frames_blocks() const override { return false; }
  bool tiles_shards() const override { return false; }

  absl::Status Open(SaveJob& job, const std::vector<SavePiece>& pieces) override {
    const std::string local = LocalPath(*job.storage, job.data_path);
    if (local.empty()) {
      return absl::FailedPreconditionError(StrCat(job.storage->uri(), ": an HDF5 container needs a local file"));
    }
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(local).parent_path(), ec);
    std::vector<Hdf5Chunk> chunks;
    for (const SavePiece& p : pieces) {
      Hdf5Chunk c;
      if (p.shard != nullptr) {
        c.path = Hdf5ChunkPath(p.shard->spec.fqn, p.shard->box);
        c.dtype = p.shard->spec.dtype;
        c.global_shape = p.shard->spec.shape;
        c.box = p.shard->box;
      } else {
        c.is_blob = true;
        c.path = Hdf5BlobPath(p.blob_name, p.blob_rank);
        c.bytes = p.bytes;
      }
      chunks.push_back(std::move(c));
    }
    const uint64_t index_bytes = kIndexHeaderSize + job.index.size() * kIndexEntrySize;
    CKPT_ASSIGN_OR_RETURN(Hdf5Container container, CreateHdf5Container(local, chunks, index_bytes, job.step, job.rank));
    block_offsets_.assign(job.index.size(), 0);
    for (size_t i = 0; i < pieces.size(); ++i) {
      for (uint64_t b = 0; b < pieces[i].block_count; ++b) {
        block_offsets_[pieces[i].first_block + b] = container.offsets[i] + b * job.block_size;
      }
    }
    index_offset_ = container.index_offset;
    file_size_ = container.file_size;
    // libhdf5's own bytes get a checksum too: everything outside the data
    // regions (written later, block by block) and the index.
    std::vector<std::pair<uint64_t, uint64_t>> used = {{container.index_offset, index_bytes}};
    for (size_t i = 0; i < pieces.size(); ++i) used.push_back({container.offsets[i], pieces[i].bytes});
    const int fd = ::open(local.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return absl::InternalError(StrCat("reopening ", local, ": ", std::strerror(errno)));
    auto hash = Hdf5MetadataHash(Hdf5MetadataRanges(std::move(used), container.file_size),
                                 [&](uint64_t offset, uint64_t length, char* out) -> absl::Status {
                                   const ssize_t n = ::pread(fd, out, length, static_cast<off_t>(offset));
                                   if (n != static_cast<ssize_t>(length)) {
                                     return absl::DataLossError(StrCat(local, ": short read at byte offset ", offset));
                                   }
                                   return absl::OkStatus();
                                 });
    ::close(fd);
    if (!hash.ok()) return hash.status();
    job.container_hash = *hash;
    WriteOptions wo;
    wo.direct = false;
    wo.truncate = false;
    CKPT_ASSIGN_OR_RETURN(file_, job.storage->OpenWritable(job.data_path, wo));
    return absl::OkStatus();
  }

  uint64_t Place(uint32_t block_id, uint64_t) override { return block_offsets_[block_id]; }

  absl::Status Close(SaveJob& job) override {
    std::string index = EncodeIndex(job.index);
    job.index_offset = index_offset_;
    job.index_len = index.size();
    job.index_hash = Xxh3(index);
    job.file_size = file_size_;
    absl::Status write_status;
    file_->WriteAsync(index_offset_,
                      absl::Span<const std::byte>(reinterpret_cast<const std::byte*>(index.data()), index.size()),
                      [&write_status](absl::Status s) { write_status = s; });
    CKPT_RETURN_IF_ERROR(file_->Drain());
    CKPT_RETURN_IF_ERROR(write_status);
    CKPT_RETURN_IF_ERROR(file_->Finish(file_size_));
    file_.reset();
    return absl::OkStatus();
  }

 private:
  std::vector<uint64_t> block_offsets_;  // fixed by the layout
  uint64_t index_offset_ = 0;
  uint64_t file_size_ = 0;
};

}  // namespace

std::unique_ptr<ContainerWriter> MakeHdf5FileWriter() { return std::make_unique<Hdf5FileWriter>(); }

}  // namespace ckpt

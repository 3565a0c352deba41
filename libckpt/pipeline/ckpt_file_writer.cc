// ckpt's own data file: a header, framed blocks in the order their writes
// are placed, the block index and a footer (format/data_file.h).
#include <cstring>

#include "absl/strings/str_cat.h"
#include "format/data_file.h"
#include "pipeline/container_writer.h"
#include "pipeline/save_engine.h"
#include "util/aligned_buffer.h"
#include "util/errors.h"
#include "util/hash.h"
#include "util/strings.h"

namespace ckpt {
namespace {

class CkptFileWriter : public ContainerWriter {
 public:
  std::string FileName(int rank) const override { return DataFileName(rank); }
  bool frames_blocks() const override { return true; }
  bool tiles_shards() const override { return true; }

  absl::Status Open(SaveJob& job, const std::vector<SavePiece>& pieces) override {
    CKPT_ASSIGN_OR_RETURN(file_, job.storage->OpenWritable(job.data_path, WriteOptions{job.direct}));
    if (file_->alignment() > kFrameAlign || kFrameAlign % file_->alignment() != 0) {
      return absl::FailedPreconditionError(StrCat(job.data_path, ": storage requires ", file_->alignment(),
                                                  "-byte alignment, more than the format's 4096"));
    }
    // The most the file can take: the frames (compressed ones take less;
    // Finish cuts the file to its length), the block index and the footer.
    // Writes inside the file's length do not serialize on the inode the way
    // appending ones do, and a file gathered in memory is sized once.
    uint64_t frames = kDataHeaderSize, blocks = 0;
    for (const SavePiece& p : pieces) {
      if (p.block_count == 0) continue;
      blocks += p.block_count;
      frames += (p.block_count - 1) * FrameLength(job.block_size) +
                FrameLength(p.bytes - (p.block_count - 1) * job.block_size);
    }
    file_->Reserve(frames + AlignUp(kIndexHeaderSize + blocks * kIndexEntrySize + kFooterSize, kFrameAlign));
    CKPT_ASSIGN_OR_RETURN(header_, AlignedBuffer::Allocate(kDataHeaderSize, false));
    DataFileHeader hdr;
    hdr.step = job.step;
    hdr.rank = static_cast<uint32_t>(job.rank);
    hdr.save_id = job.save_id;
    EncodeDataHeader(hdr, header_.data());
    next_offset_ = kDataHeaderSize;
    return absl::OkStatus();
  }

  absl::Span<const std::byte> prologue() const override {
    return absl::Span<const std::byte>(header_.data(), kDataHeaderSize);
  }

  uint64_t Place(uint32_t, uint64_t frame_len) override {
    const uint64_t offset = next_offset_;
    next_offset_ += frame_len;
    return offset;
  }

  absl::Status Close(SaveJob& job) override {
    std::string index = EncodeIndex(job.index);
    job.index_offset = next_offset_;
    job.index_len = index.size();
    job.index_hash = Xxh3(index);
    DataFileFooter footer;
    footer.index_offset = job.index_offset;
    footer.index_len = job.index_len;
    footer.block_count = job.index.size();
    footer.index_hash = job.index_hash;
    footer.save_id = job.save_id;
    const uint64_t tail = index.size() + kFooterSize;
    job.file_size = job.index_offset + tail;
    CKPT_ASSIGN_OR_RETURN(AlignedBuffer buf, AlignedBuffer::Allocate(AlignUp(tail, kFrameAlign), false));
    std::memcpy(buf.data(), index.data(), index.size());
    EncodeFooter(footer, buf.data() + index.size());
    std::memset(buf.data() + tail, 0, buf.size() - tail);
    absl::Status write_status;
    file_->WriteAsync(job.index_offset, absl::Span<const std::byte>(buf.data(), buf.size()),
                      [&write_status](absl::Status s) { write_status = s; });
    CKPT_RETURN_IF_ERROR(file_->Drain());
    CKPT_RETURN_IF_ERROR(write_status);
    CKPT_RETURN_IF_ERROR(file_->Finish(job.file_size));
    file_.reset();
    header_ = AlignedBuffer();
    return absl::OkStatus();
  }

 private:
  AlignedBuffer header_;
  uint64_t next_offset_ = 0;
};

}  // namespace

std::unique_ptr<ContainerWriter> MakeCkptFileWriter() { return std::make_unique<CkptFileWriter>(); }

}  // namespace ckpt

#include "pipeline/block_stream.h"

#include <algorithm>

#include "format/frame_check.h"
#include "pipeline/delta_chain.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt {
namespace {

std::string ChunkName(const ManifestTensor& t, const ManifestChunk& c) {
  return StrCat("tensor '", t.spec.fqn, "' chunk ", c.box.ToString());
}

struct BlockTag {
  const ManifestTensor* tensor;
  const ManifestChunk* chunk;
  uint64_t block;  // relative to the chunk
  const std::string* path;
  size_t sequence;
};

}  // namespace

absl::StatusOr<const StepFiles::File*> StepFiles::Open(uint32_t i) {
  std::lock_guard<std::mutex> lock(mu_);
  std::unique_ptr<File>& f = files_[i];
  if (f) return f.get();
  if (i >= m_.files.size()) {
    return absl::DataLossError(StrCat("step ", m_.step, ": the manifest names file ", i, " of ", m_.files.size()));
  }
  const ManifestFile& mf = m_.files[i];
  auto file = std::make_unique<File>();
  file->path = ManifestFilePath(m_, mf);
  auto opened = storage_.OpenReadable(file->path);
  if (!opened.ok()) return Annotate(opened.status(), StrCat("step ", m_.step));
  file->file = std::move(opened).value();
  CKPT_ASSIGN_OR_RETURN(file->index, ReadFileIndex(*file->file, mf, file->path));
  f = std::move(file);
  return f.get();
}

absl::StatusOr<const IndexEntry*> StepFiles::Entry(const ManifestTensor& tensor, const ManifestChunk& chunk,
                                                   uint64_t block) {
  CKPT_ASSIGN_OR_RETURN(const File* f, Open(chunk.file));
  const uint64_t bs = m_.files[chunk.file].block_size;
  const size_t es = DTypeSize(tensor.spec.dtype);
  const uint64_t stream = static_cast<uint64_t>(chunk.box.Volume()) * es;
  if (bs == 0 || bs % es != 0) {
    return absl::DataLossError(StrCat(ChunkName(tensor, chunk), ": file ", f->path, " has an invalid block size ", bs));
  }
  const uint64_t expect_blocks = (stream + bs - 1) / bs;
  if (chunk.block_count != expect_blocks) {
    return absl::DataLossError(StrCat(ChunkName(tensor, chunk), ": manifest gives ", chunk.block_count, " blocks, ",
                                      expect_blocks, " expected for ", stream, " bytes"));
  }
  const uint64_t global = chunk.first_block + block;
  if (block >= chunk.block_count || global >= f->index.size()) {
    return absl::DataLossError(
        StrCat(ChunkName(tensor, chunk), ": block ", global, " is beyond the index of ", f->path));
  }
  const IndexEntry& e = f->index[global];
  const uint64_t expect_raw = std::min<uint64_t>(bs, stream - block * bs);
  if (e.raw_len != expect_raw) {
    return absl::DataLossError(StrCat(ChunkName(tensor, chunk), ": block ", global, " of ", f->path, " at byte offset ",
                                      e.offset, " holds ", e.raw_len, " bytes, expected ", expect_raw));
  }
  return &e;
}

size_t CountTensorBlocks(const std::vector<const ManifestTensor*>& tensors) {
  size_t n = 0;
  for (const ManifestTensor* t : tensors) {
    for (const ManifestChunk& c : t->chunks) n += c.block_count;
  }
  return n;
}

absl::Status StreamTensorBlocks(StepFiles& files, const std::vector<const ManifestTensor*>& tensors,
                                const FrameReaderOptions& options,
                                const std::function<absl::Status(const StreamedBlock&)>& visit) {
  std::vector<BlockTag> tags;
  tags.reserve(CountTensorBlocks(tensors));
  std::vector<std::pair<const StepFiles::File*, const IndexEntry*>> where;
  where.reserve(tags.capacity());
  for (const ManifestTensor* t : tensors) {
    for (const ManifestChunk& c : t->chunks) {
      for (uint64_t b = 0; b < c.block_count; ++b) {
        CKPT_ASSIGN_OR_RETURN(const IndexEntry* e, files.Entry(*t, c, b));
        CKPT_ASSIGN_OR_RETURN(const StepFiles::File* f, files.Open(c.file));
        tags.push_back(BlockTag{t, &c, b, &f->path, 0});
        where.emplace_back(f, e);
      }
    }
  }
  // File order, so that each file is read sequentially.
  std::vector<size_t> order(tags.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    if (tags[x].chunk->file != tags[y].chunk->file) return tags[x].chunk->file < tags[y].chunk->file;
    return where[x].second->offset < where[y].second->offset;
  });
  std::vector<FrameTask> tasks;
  tasks.reserve(order.size());
  std::vector<DeltaChain::Need> needs;
  for (size_t k = 0; k < order.size(); ++k) {
    BlockTag& tag = tags[order[k]];
    tag.sequence = k;
    const auto& [f, e] = where[order[k]];
    tasks.push_back(FrameTask{f->file.get(), e, tag.chunk->first_block + tag.block, &tag});
    if ((e->flags & kFlagDelta) != 0 && files.chain() != nullptr) {
      needs.push_back(DeltaChain::Need{tag.tensor, tag.chunk, tag.block});
    }
  }
  if (!needs.empty()) files.chain()->Plan(files.manifest(), needs);
  std::mutex mu;
  std::string first_error_context;
  absl::Status s = ReadFrames(
      tasks, options,
      [&](const FrameTask& t, absl::Span<const std::byte> frame, BlockCodec& codec,
          std::vector<std::byte>& scratch) -> absl::Status {
        const BlockTag& tag = *static_cast<const BlockTag*>(t.tag);
        absl::Status st = CheckFrame(frame, *t.entry, t.block_id, *tag.path);
        if (!st.ok()) return Annotate(st, ChunkName(*tag.tensor, *tag.chunk));
        DeltaBaseFn base;
        if ((t.entry->flags & kFlagDelta) != 0 && files.chain() != nullptr) {
          base = files.chain()->For(files.manifest(), *tag.tensor, *tag.chunk, tag.block);
        }
        auto raw = DecodeFrame(codec, frame, *t.entry, scratch, *tag.path, &base);
        if (!raw.ok()) return Annotate(raw.status(), ChunkName(*tag.tensor, *tag.chunk));
        const uint64_t bs = files.manifest().files[tag.chunk->file].block_size;
        StreamedBlock b;
        b.tensor = tag.tensor;
        b.chunk = tag.chunk;
        b.first_element = static_cast<int64_t>(tag.block * bs / DTypeSize(tag.tensor->spec.dtype));
        b.raw = *raw;
        b.sequence = tag.sequence;
        return visit(b);
      },
      [&](const FrameTask& t, const absl::Status&) {
        const BlockTag& tag = *static_cast<const BlockTag*>(t.tag);
        std::lock_guard<std::mutex> lock(mu);
        if (first_error_context.empty()) {
          first_error_context = StrCat(ChunkName(*tag.tensor, *tag.chunk), " block ", t.block_id);
        }
      });
  if (!s.ok() && s.message().find("tensor '") == absl::string_view::npos) {
    s = Annotate(s, first_error_context);
  }
  return s;
}

absl::StatusOr<absl::Span<const std::byte>> BlockFetcher::Fetch(const ManifestTensor& tensor,
                                                                const ManifestChunk& chunk, uint64_t block) {
  if (cached_chunk_ == &chunk && cached_block_ == block) return cached_;
  cached_chunk_ = nullptr;
  CKPT_ASSIGN_OR_RETURN(const IndexEntry* e, files_.Entry(tensor, chunk, block));
  CKPT_ASSIGN_OR_RETURN(const StepFiles::File* f, files_.Open(chunk.file));
  if (frame_.size() < e->frame_len) {
    CKPT_ASSIGN_OR_RETURN(frame_, AlignedBuffer::Allocate(e->frame_len, false));
  }
  const absl::Span<std::byte> dst(frame_.data(), e->frame_len);
  const std::string name = ChunkName(tensor, chunk);
  CKPT_RETURN_IF_ERROR(Annotate(f->file->ReadAt(e->offset, dst), name));
  const uint64_t global = chunk.first_block + block;
  CKPT_RETURN_IF_ERROR(Annotate(CheckFrame(dst, *e, global, f->path), name));
  DeltaBaseFn base;
  if ((e->flags & kFlagDelta) != 0 && files_.chain() != nullptr) {
    base = files_.chain()->For(files_.manifest(), tensor, chunk, block);
  }
  auto raw = DecodeFrame(codec_, dst, *e, scratch_, f->path, &base);
  if (!raw.ok()) return Annotate(raw.status(), name);
  cached_chunk_ = &chunk;
  cached_block_ = block;
  cached_ = *raw;
  return cached_;
}

}  // namespace ckpt

#include "pipeline/loader.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "codec/codec.h"
#include "format/frame_check.h"
#include "layout/box_copy.h"
#include "pipeline/frame_reader.h"
#include "plan/block_ranges.h"
#include "plan/box_reads.h"
#include "plan/cover.h"
#include "util/aligned_buffer.h"
#include "util/clock.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt {
namespace {

// Part of a target shard that one saved chunk provides.
struct Piece {
  const Shard* shard = nullptr;
  Box inter;
};

// A saved chunk (or blob) that some target needs, with the blocks to read.
struct ChunkWork {
  const ManifestTensor* tensor = nullptr;  // null for a blob
  const ManifestChunk* chunk = nullptr;
  const ManifestBlob* blob = nullptr;
  std::string* blob_out = nullptr;
  uint32_t file = 0;
  uint64_t first_block = 0;
  uint64_t stream_bytes = 0;
  std::vector<Piece> pieces;
  std::vector<uint64_t> blocks;  // relative to first_block, ascending
};

struct BlockTask {
  ChunkWork* work = nullptr;
  uint64_t rel_block = 0;
  const IndexEntry* entry = nullptr;
  std::string_view file_name;
  /// Where the entry's bytes start in the chunk's byte stream: the block's
  /// start, or later for a part of an unchecked block.
  uint64_t stream_offset = 0;
};

// Reads of the parts of an unchecked block closer than this are merged.
constexpr uint64_t kPartGap = 4096;

std::vector<int64_t> PackedStrides(const Dims& sizes) {
  std::vector<int64_t> s(sizes.size(), 1);
  for (int d = static_cast<int>(sizes.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * sizes[d + 1];
  return s;
}

// Runs of `inter` in the packed order of `chunk`: run k covers chunk
// elements [ChunkStart(k), ChunkStart(k) + run_len). Trailing dimensions
// that `inter` spans whole in both the chunk and the shard are folded into
// the run (consecutive rows are then adjacent in both), so a row slab of a
// row-major chunk is one run, not one per row.
class RunMap {
 public:
  RunMap(const Box& chunk, const Box& shard, const Box& inter) : chunk_(chunk), shard_(shard), inter_(inter) {
    const int nd = inter.ndim();
    cstride_ = PackedStrides(chunk.sizes);
    sstride_ = PackedStrides(shard.sizes);
    // nd_: the dimensions left once full trailing ones are folded; a run
    // goes along dimension nd_ - 1 and over every dimension after it.
    nd_ = nd;
    while (nd_ > 1 && inter.sizes[nd_ - 1] == chunk.sizes[nd_ - 1] && inter.sizes[nd_ - 1] == shard.sizes[nd_ - 1]) {
      --nd_;
    }
    run_len_ = 1;
    for (int d = std::max(nd_ - 1, 0); d < nd; ++d) run_len_ *= inter.sizes[d];
    nruns_ = 1;
    for (int d = 0; d + 1 < nd_; ++d) nruns_ *= inter.sizes[d];
    if (inter.Empty()) nruns_ = 0;
  }
  int64_t nruns() const { return nruns_; }
  int64_t run_len() const { return run_len_; }
  void Starts(int64_t k, int64_t* chunk_start, int64_t* shard_start) const {
    int64_t c = 0, s = 0;
    for (int d = nd_ - 2; d >= 0; --d) {
      const int64_t i = k % inter_.sizes[d];
      k /= inter_.sizes[d];
      c += (inter_.offsets[d] - chunk_.offsets[d] + i) * cstride_[d];
      s += (inter_.offsets[d] - shard_.offsets[d] + i) * sstride_[d];
    }
    if (nd_ > 0) {
      c += (inter_.offsets[nd_ - 1] - chunk_.offsets[nd_ - 1]) * cstride_[nd_ - 1];
      s += (inter_.offsets[nd_ - 1] - shard_.offsets[nd_ - 1]) * sstride_[nd_ - 1];
    }
    *chunk_start = c;
    *shard_start = s;
  }
  // First run whose end lies beyond chunk element `e`.
  int64_t FirstRunEndingAfter(int64_t e) const {
    int64_t lo = 0, hi = nruns_;
    while (lo < hi) {
      int64_t mid = lo + (hi - lo) / 2;
      int64_t c, s;
      Starts(mid, &c, &s);
      if (c + run_len_ <= e)
        lo = mid + 1;
      else
        hi = mid;
    }
    return lo;
  }

 private:
  const Box& chunk_;
  const Box& shard_;
  const Box& inter_;
  int nd_ = 0;
  std::vector<int64_t> cstride_, sstride_;
  int64_t run_len_ = 1;
  int64_t nruns_ = 0;
};

std::string ChunkName(const ChunkWork& w) {
  if (w.tensor != nullptr) {
    return StrCat("tensor '", w.tensor->spec.fqn, "' chunk ", w.chunk->box.ToString());
  }
  return StrCat("blob '", w.blob->name, "'");
}

class Loader {
 public:
  // `storage` may be null for Plan alone.
  Loader(Storage* storage, const Manifest& m, const LoadOptions& options, ReadRouter* router = nullptr,
         BaseManifests* bases = nullptr)
      : storage_(storage), m_(m), options_(options), router_(router) {
    if (storage != nullptr && !m.bases.empty()) chain_ = std::make_unique<DeltaChain>(*storage, bases);
  }

  absl::StatusOr<LoadPlanCounts> PlanOnly(const State& target, int rank) {
    CKPT_RETURN_IF_ERROR(Plan(target, rank));
    LoadPlanCounts out;
    out.bytes_needed = stats_.bytes_needed;
    for (const auto& w : work_) {
      ++out.chunks;
      out.blocks += static_cast<int64_t>(w->blocks.size());
    }
    return out;
  }

  absl::StatusOr<LoadStats> Run(const State& target, int rank) {
    const double t0 = NowSeconds();
    CKPT_RETURN_IF_ERROR(Plan(target, rank));
    CKPT_RETURN_IF_ERROR(ReadIndexes());
    CKPT_RETURN_IF_ERROR(Execute());
    stats_.step = m_.step;
    stats_.seconds = NowSeconds() - t0;
    return stats_;
  }

 private:
  absl::Status Plan(const State& target, int rank) {
    // Per tensor, its chunk finder (plan/'s read planner); per chunk met, its
    // work (a chunk is named by its file and first block).
    std::map<const ManifestTensor*, std::unique_ptr<ChunkFinder>> finders;
    std::map<std::pair<uint32_t, uint64_t>, ChunkWork*> by_chunk;
    std::vector<const ManifestChunk*> hits;
    for (const Shard& shard : target.shards()) {
      auto found = FindSavedTensor(m_, shard.spec);
      if (!found.ok()) {
        if (absl::IsNotFound(found.status()) && options_.allow_missing) continue;
        return found.status();
      }
      const ManifestTensor* t = *found;
      if (shard.box.Empty()) continue;
      std::unique_ptr<ChunkFinder>& finder = finders[t];
      if (finder == nullptr) finder = std::make_unique<ChunkFinder>(*t, m_.files);
      hits.clear();
      finder->ForEachMeeting(shard.box, [&](const ManifestChunk& c) {
        if (t->GridOnly()) {
          grid_chunks_.push_back(c);  // a grid cell: kept while the load runs
          hits.push_back(&grid_chunks_.back());
        } else {
          hits.push_back(&c);
        }
      });
      // Geometry, not counts: the chunks must tile the target box (an
      // overlap and a gap of equal size would balance a count).
      {
        std::vector<const Box*> hit_boxes;
        hit_boxes.reserve(hits.size());
        for (const ManifestChunk* c : hits) hit_boxes.push_back(&c->box);
        if (absl::Status cover = CheckExactCoverOf(t->spec, shard.box, hit_boxes); !cover.ok()) {
          return absl::DataLossError(
              StrCat("step ", m_.step, ": ", cover.message(), " (loading box ", shard.box.ToString(), ")"));
        }
      }
      for (const ManifestChunk* c : hits) {
        Box inter = Intersect(c->box, shard.box);
        ChunkWork*& w = by_chunk[{c->file, c->first_block}];
        if (w == nullptr) {
          work_.push_back(std::make_unique<ChunkWork>());
          w = work_.back().get();
          w->tensor = t;
          w->chunk = c;
          w->file = c->file;
          w->first_block = c->first_block;
          w->stream_bytes = static_cast<uint64_t>(c->box.Volume()) * DTypeSize(t->spec.dtype);
        }
        w->pieces.push_back(Piece{&shard, std::move(inter)});
      }
      stats_.bytes_needed += shard.PackedBytes();
    }
    for (const Blob& blob : target.blobs()) {
      if (blob.out == nullptr) continue;
      const int32_t want = blob.scope == BlobScope::kGlobal ? -1 : (blob.source_rank >= 0 ? blob.source_rank : rank);
      const ManifestBlob* found = nullptr;
      for (const ManifestBlob& b : m_.blobs) {
        if (b.name == blob.name && b.rank == want) found = &b;
      }
      if (found == nullptr) {
        if (options_.allow_missing) continue;
        return absl::NotFoundError(StrCat("blob '", blob.name, "' (",
                                          want < 0 ? std::string("global") : StrCat("rank ", want), ") is not in step ",
                                          m_.step));
      }
      blob.out->assign(found->size, '\0');
      stats_.bytes_needed += static_cast<int64_t>(found->size);
      if (found->size == 0) continue;
      work_.push_back(std::make_unique<ChunkWork>());
      ChunkWork* w = work_.back().get();
      w->blob = found;
      w->blob_out = blob.out;
      w->file = found->file;
      w->first_block = found->first_block;
      w->stream_bytes = found->size;
      for (uint64_t b = 0; b < found->block_count; ++b) w->blocks.push_back(b);
    }
    // Blocks each chunk must read.
    for (auto& w : work_) {
      if (w->tensor == nullptr) continue;
      const uint64_t bs = m_.files[w->file].block_size;
      const size_t es = DTypeSize(w->tensor->spec.dtype);
      if (bs == 0 || bs % es != 0) {
        return absl::DataLossError(
            StrCat(ChunkName(*w), ": file ", m_.files[w->file].name, " has an invalid block size ", bs));
      }
      std::vector<std::pair<uint64_t, uint64_t>> ranges;
      for (const Piece& p : w->pieces) BlocksToRead(w->chunk->box, p.inter, es, bs, &ranges);
      NormalizeRanges(&ranges);
      for (const auto& [b0, b1] : ranges) {
        for (uint64_t b = b0; b <= b1; ++b) w->blocks.push_back(b);
      }
      const uint64_t expect = (w->stream_bytes + bs - 1) / bs;
      if (w->chunk->block_count != expect) {
        return absl::DataLossError(StrCat(ChunkName(*w), ": manifest gives ", w->chunk->block_count, " blocks, ",
                                          expect, " expected for ", w->stream_bytes, " bytes"));
      }
    }
    return absl::OkStatus();
  }

  absl::Status ReadIndexes() {
    std::map<uint32_t, bool> needed;
    for (auto& w : work_) {
      if (!w->blocks.empty()) needed[w->file] = true;
    }
    for (const auto& [file, unused] : needed) {
      const ManifestFile& mf = m_.files[file];
      const std::string path = ManifestFilePath(m_, mf);
      auto f = storage_->OpenReadable(path);
      if (!f.ok()) return Annotate(f.status(), StrCat("step ", m_.step));
      auto entries = ReadFileIndex(**f, mf, path);
      if (!entries.ok()) return entries.status();
      std::unique_ptr<ReadableFile> readable = std::move(f).value();
      if (router_ != nullptr) readable = router_->Route(file, std::move(readable), *entries);
      files_[file] = OpenFile{std::move(readable), std::move(entries).value(), path};
    }
    if (router_ != nullptr) router_->Start();
    return absl::OkStatus();
  }

  absl::Status Execute() {
    std::vector<BlockTask> blocks;
    for (auto& w : work_) {
      OpenFile& f = files_[w->file];
      for (uint64_t b : w->blocks) {
        const uint64_t global = w->first_block + b;
        if (global >= f.index.size()) {
          return absl::DataLossError(StrCat(ChunkName(*w), ": block ", global, " is beyond the index of ", f.path));
        }
        const IndexEntry& e = f.index[global];
        const uint64_t bs = m_.files[w->file].block_size;
        const uint64_t expect_raw = std::min<uint64_t>(bs, w->stream_bytes - b * bs);
        if (e.raw_len != expect_raw) {
          return absl::DataLossError(StrCat(ChunkName(*w), ": block ", global, " of ", f.path, " at byte offset ",
                                            e.offset, " holds ", e.raw_len, " bytes, expected ", expect_raw));
        }
        if ((e.flags & kFlagUnchecked) != 0 && w->tensor != nullptr) {
          // No checksum covers the block (a safetensors file read in
          // place): read only the byte ranges its pieces need, so a rank
          // that takes some columns reads those columns.
          AddParts(*w, b, bs, e, f.path, &blocks);
          continue;
        }
        blocks.push_back(BlockTask{w.get(), b, &e, f.path, b * bs});
      }
    }
    // Read in file order for sequential access.
    std::sort(blocks.begin(), blocks.end(), [](const BlockTask& a, const BlockTask& b) {
      if (a.work->file != b.work->file) return a.work->file < b.work->file;
      return a.entry->offset < b.entry->offset;
    });
    std::vector<FrameTask> tasks;
    tasks.reserve(blocks.size());
    std::vector<DeltaChain::Need> needs;
    for (const BlockTask& b : blocks) {
      tasks.push_back(FrameTask{files_[b.work->file].file.get(), b.entry, b.work->first_block + b.rel_block, &b});
      if ((b.entry->flags & kFlagDelta) != 0 && b.work->tensor != nullptr && chain_ != nullptr) {
        needs.push_back(DeltaChain::Need{b.work->tensor, b.work->chunk, b.rel_block});
      }
    }
    // The bases' frames are read ahead in the order the deltas are.
    if (!needs.empty()) chain_->Plan(m_, needs);
    FrameReaderOptions fo;
    fo.worker_threads = options_.worker_threads;
    fo.buffer_bytes = options_.read_buffer_bytes;
    std::atomic<int64_t> bytes_read{0}, bytes_decoded{0}, nread{0};
    absl::Status s = ReadFrames(
        tasks, fo,
        [&](const FrameTask& t, absl::Span<const std::byte> frame, BlockCodec& codec, std::vector<std::byte>& scratch) {
          const BlockTask& b = *static_cast<const BlockTask*>(t.tag);
          absl::Status st = ProcessBlock(b, frame, codec, scratch);
          if (st.ok()) {
            bytes_read += b.entry->frame_len;
            bytes_decoded += b.entry->raw_len;
            nread += 1;
          }
          return st;
        },
        [&](const FrameTask& t, const absl::Status& st) {
          const BlockTask& b = *static_cast<const BlockTask*>(t.tag);
          if (first_error_context_.empty()) {
            first_error_context_ = StrCat(ChunkName(*b.work), " block ", t.block_id);
          }
        });
    stats_.bytes_read = bytes_read;
    stats_.bytes_decoded = bytes_decoded;
    stats_.blocks_read = nread;
    stats_.delta_blocks = delta_blocks_;
    if (chain_ != nullptr) stats_.bytes_read_from_bases = chain_->bytes_read();
    if (!s.ok() && s.message().find("tensor '") == absl::string_view::npos &&
        s.message().find("blob '") == absl::string_view::npos) {
      s = Annotate(s, first_error_context_);
    }
    return s;
  }

  // The byte ranges of block `b` of `w` (stream bytes [b*bs, b*bs +
  // e.raw_len)) that the pieces need, nearby ones merged, each a task of
  // its own with an entry for just those bytes.
  void AddParts(ChunkWork& w, uint64_t b, uint64_t bs, const IndexEntry& e, std::string_view path,
                std::vector<BlockTask>* out) {
    const size_t es = DTypeSize(w.tensor->spec.dtype);
    const uint64_t begin = b * bs;
    const int64_t e0 = static_cast<int64_t>(begin / es);
    const int64_t e1 = e0 + static_cast<int64_t>(e.raw_len / es);
    std::vector<std::pair<uint64_t, uint64_t>> ranges;  // bytes within the block
    for (const Piece& p : w.pieces) {
      RunMap runs(w.chunk->box, p.shard->box, p.inter);
      for (int64_t k = runs.FirstRunEndingAfter(e0); k < runs.nruns(); ++k) {
        int64_t c, sh;
        runs.Starts(k, &c, &sh);
        if (c >= e1) break;
        const int64_t lo = std::max(c, e0), hi = std::min(c + runs.run_len(), e1);
        ranges.push_back({static_cast<uint64_t>(lo - e0) * es, static_cast<uint64_t>(hi - e0) * es});
      }
    }
    std::sort(ranges.begin(), ranges.end());
    std::vector<std::pair<uint64_t, uint64_t>> merged;
    for (const auto& r : ranges) {
      if (!merged.empty() && r.first <= merged.back().second + kPartGap) {
        merged.back().second = std::max(merged.back().second, r.second);
      } else {
        merged.push_back(r);
      }
    }
    for (const auto& [lo, hi] : merged) {
      IndexEntry& part = parts_.emplace_back(e);
      part.offset = e.offset + lo;
      part.raw_len = part.stored_len = part.frame_len = static_cast<uint32_t>(hi - lo);
      out->push_back(BlockTask{&w, b, &part, path, begin + lo});
    }
  }

  absl::Status ProcessBlock(const BlockTask& task, absl::Span<const std::byte> frame, BlockCodec& codec,
                            std::vector<std::byte>& scratch) {
    const ChunkWork& w = *task.work;
    const IndexEntry& e = *task.entry;
    const uint64_t global = w.first_block + task.rel_block;
    absl::Status s = CheckFrame(frame, e, global, task.file_name);
    if (!s.ok()) return Annotate(s, ChunkName(w));
    DeltaBaseFn base;
    if ((e.flags & kFlagDelta) != 0 && w.tensor != nullptr && chain_ != nullptr) {
      base = chain_->For(m_, *w.tensor, *w.chunk, task.rel_block);
      delta_blocks_.fetch_add(1, std::memory_order_relaxed);
    }
    auto raw = DecodeFrame(codec, frame, e, scratch, task.file_name, &base);
    if (!raw.ok()) return Annotate(raw.status(), ChunkName(w));
    const uint64_t begin = task.stream_offset;  // byte offset in the stream
    if (w.blob_out != nullptr) {
      std::memcpy(w.blob_out->data() + begin, raw->data(), raw->size());
      return absl::OkStatus();
    }
    const size_t es = DTypeSize(w.tensor->spec.dtype);
    const int64_t e0 = static_cast<int64_t>(begin / es);
    const int64_t e1 = e0 + static_cast<int64_t>(raw->size() / es);
    for (const Piece& p : w.pieces) {
      RunMap runs(w.chunk->box, p.shard->box, p.inter);
      const bool contiguous = p.shard->Contiguous();
      std::byte* dst = static_cast<std::byte*>(p.shard->data);
      for (int64_t k = runs.FirstRunEndingAfter(e0); k < runs.nruns(); ++k) {
        int64_t c, sh;
        runs.Starts(k, &c, &sh);
        if (c >= e1) break;
        const int64_t lo = std::max(c, e0);
        const int64_t hi = std::min(c + runs.run_len(), e1);
        const std::byte* src = raw->data() + (lo - e0) * es;
        const int64_t first = sh + (lo - c);
        if (contiguous) {
          std::memcpy(dst + first * es, src, (hi - lo) * es);
        } else {
          ScatterPacked(*p.shard, first, hi - lo, src);
        }
      }
    }
    return absl::OkStatus();
  }

  struct OpenFile {
    std::unique_ptr<ReadableFile> file;
    std::vector<IndexEntry> index;
    std::string path;
  };

  Storage* storage_;
  const Manifest& m_;
  LoadOptions options_;
  ReadRouter* router_;
  std::vector<std::unique_ptr<ChunkWork>> work_;
  std::map<uint32_t, OpenFile> files_;
  std::deque<IndexEntry> parts_;           // entries of the parts of unchecked blocks (stable addresses)
  std::deque<ManifestChunk> grid_chunks_;  // the grid cells met (stable addresses)
  LoadStats stats_;
  std::string first_error_context_;
  std::unique_ptr<DeltaChain> chain_;  // steps with bases only
  std::atomic<int64_t> delta_blocks_{0};
};

}  // namespace

absl::StatusOr<LoadStats> LoadFromManifest(Storage& storage, const Manifest& manifest, const State& target, int rank,
                                           const LoadOptions& options, ReadRouter* router, BaseManifests* bases) {
  Loader loader(&storage, manifest, options, router, bases);
  return loader.Run(target, rank);
}

absl::StatusOr<LoadPlanCounts> PlanLoad(const Manifest& manifest, const State& target, int rank,
                                        const LoadOptions& options) {
  Loader loader(nullptr, manifest, options);
  return loader.PlanOnly(target, rank);
}

double LoadStats::ReadAmplification() const {
  if (bytes_needed == 0) return 1.0;
  return static_cast<double>(bytes_decoded) / static_cast<double>(bytes_needed);
}

}  // namespace ckpt

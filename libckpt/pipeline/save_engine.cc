#include "pipeline/save_engine.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "codec/codec.h"
#include "layout/box_copy.h"
#include "pipeline/block_encoder.h"
#include "pipeline/delta_chain.h"
#include "pipeline/staging_arena.h"
#include "util/background.h"
#include "util/clock.h"
#include "util/errors.h"
#include "util/hash.h"
#include "util/stream_copy.h"
#include "util/strings.h"
#include "util/task_pool.h"

namespace ckpt {
namespace {

// Background work must not slow the trainer's own threads (the staging copy
// runs on the caller's thread): util/background.h (docs/performance.md,
// "Figures behind the code").
BackgroundPriority PriorityOf(const SaveEngineOptions& o) {
  return BackgroundPriority{o.background_nice, o.background_idle, o.background_io_idle};
}

}  // namespace

int DefaultStagingThreads() {
  return static_cast<int>(std::min(4u, std::max(1u, std::thread::hardware_concurrency())));
}

absl::StatusOr<std::shared_ptr<SaveEngine>> SaveEngine::Create(const SaveEngineOptions& options) {
  if (options.block_size < (64u << 10) || options.block_size > kMaxBlockBytes ||
      options.block_size % kFrameAlign != 0) {
    return absl::InvalidArgumentError(
        StrCat("block size ", options.block_size, " must be a multiple of 4096 between 64 KiB and 64 MiB"));
  }
  std::shared_ptr<SaveEngine> engine(new SaveEngine(options));
  CKPT_RETURN_IF_ERROR(engine->Init());
  return engine;
}

absl::StatusOr<std::shared_ptr<SaveEngine>> CreateSaveEngine(const SaveEngineOptions& options) {
  return SaveEngine::Create(options);
}

SaveEngine::SaveEngine(const SaveEngineOptions& options) : options_(options) {}

absl::Status SaveEngine::Init() {
  int workers = options_.worker_threads;
  if (workers <= 0) {
    workers = static_cast<int>(std::min(4u, std::max(1u, std::thread::hardware_concurrency())));
  }
  if (options_.cpu_budget < 0 || options_.cpu_budget > 4096) {
    return absl::InvalidArgumentError(
        StrCat("cpu budget ", options_.cpu_budget, " must be 0 (none) or a count of cores"));
  }
  if (options_.cpu_budget > 0) {
    workers = std::min(workers, static_cast<int>(std::ceil(options_.cpu_budget)));
    pacer_ = std::make_unique<RatePacer>(options_.cpu_budget, 0.02 * options_.cpu_budget);  // 20 ms of slack
  }
  // A block's frame is the longest request; the arena holds at least two.
  const size_t frame_bytes = FrameLength(options_.block_size);
  const size_t arena_bytes =
      std::max(2 * frame_bytes, options_.staging_bytes / StagingArena::kPage * StagingArena::kPage);
  out_bytes_ = AlignUp(BlockCodec::MaxStoredBytes(options_.block_size) + kTrailerSize, kFrameAlign);
  CKPT_ASSIGN_OR_RETURN(arena_, StagingArena::Create(frame_bytes, arena_bytes, /*prefault=*/true));
  // One output buffer per worker: a block is encoded into it and copied back
  // into its slot, which is what gets written. Touched on first use only: a
  // save without compression never needs them.
  CKPT_ASSIGN_OR_RETURN(out_arena_, AlignedBuffer::Allocate(workers * out_bytes_, false));
  for (int i = 0; i < workers; ++i) {
    workers_.emplace_back([this, out = out_arena_.data() + i * out_bytes_] { WorkerLoop(out); });
  }
  // Closing a finished job's file, one at a time, in the background.
  finalizer_ = std::make_unique<TaskPool>(1, 0, [p = PriorityOf(options_)] { LowerThisThread(p); });
  int stagers = options_.staging_threads;
  if (stagers <= 0) stagers = DefaultStagingThreads();
  for (int i = 1; i < stagers; ++i) stagers_.emplace_back([this] { StagerLoop(); });
  pause_workers_ = options_.pause_workers_while_staging > 0 ||
                   (options_.pause_workers_while_staging < 0 &&
                    static_cast<unsigned>(stagers + workers) > std::max(1u, std::thread::hardware_concurrency()));
  arena_->SetOnFull([this] {
    // A staging thread waits for room: only the workers free any.
    {
      std::lock_guard<std::mutex> lock(queue_mu_);
      if (stagings_ == 0 || arena_ran_full_) return;
      arena_ran_full_ = true;
    }
    queue_cv_.notify_all();
  });
  // Threads in a tile pass hold extents while they wait for one more: with
  // fewer than half the arena's frames held that way, the rest of it always
  // has room for a whole frame (StagingArena).
  tile_budget_ = tile_budget_max_ = arena_bytes / frame_bytes / 2;
  // Until the rates are measured: a backlog of one block per worker twice
  // over, so the storage is still writing when the blocks being compressed
  // arrive.
  auto_ = std::make_unique<AutoChooser>(static_cast<int64_t>(2 * static_cast<size_t>(workers) * options_.block_size));
  return absl::OkStatus();
}

SaveEngine::~SaveEngine() {
  {
    std::lock_guard<std::mutex> lock(stage_mu_);
    stop_stagers_ = true;
  }
  stage_cv_.notify_all();
  for (auto& t : stagers_) t.join();
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    stop_ = true;
  }
  queue_cv_.notify_all();
  for (auto& t : workers_) t.join();
  finalizer_.reset();  // closes the files of jobs still queued
  for (auto& t : registrars_) t.join();
  std::lock_guard<std::mutex> lock(reg_mu_);
  for (auto& [ptr, known] : storages_) {
    if (auto s = known.storage.lock()) {
      if (auto* r = FindCapability<BufferRegistry>(*s); r != nullptr && known.token != 0)
        r->UnregisterBuffers(known.token);
    }
  }
}

std::shared_ptr<SinkMeter> SaveEngine::RegisterWith(const std::shared_ptr<Storage>& storage) {
  // Pinning hundreds of MiB takes tens of milliseconds; do it off the
  // caller's path. Writes submitted before it completes use unregistered
  // buffers, which is equally correct.
  std::lock_guard<std::mutex> lock(reg_mu_);
  KnownStorage& known = storages_[storage.get()];
  if (known.sink != nullptr && !known.storage.expired()) return known.sink;
  known = KnownStorage{storage, 0, std::make_shared<SinkMeter>()};
  std::weak_ptr<Storage> weak = storage;
  Storage* key = storage.get();
  registrars_.emplace_back([this, weak, key] {
    std::shared_ptr<Storage> s = weak.lock();
    if (!s) return;
    BufferRegistry* registry = FindCapability<BufferRegistry>(*s);
    const uint64_t token =
        registry == nullptr ? 0 : registry->RegisterBuffers({absl::Span<std::byte>(arena_->data(), arena_->size())});
    std::lock_guard<std::mutex> l(reg_mu_);
    storages_[key].token = token;
  });
  return known.sink;
}

absl::Status SaveEngine::Run(std::shared_ptr<SaveJob> job, std::vector<SavePiece>& pieces) {
  SaveJob& j = *job;
  j.block_size = options_.block_size;
  if (j.writer == nullptr) j.writer = MakeContainerWriter(DataContainer::kCkpt);
  // Block numbering: pieces in order, each cut into block_size pieces.
  uint64_t nblocks = 0;
  for (SavePiece& p : pieces) {
    p.first_block = nblocks;
    p.block_count = (p.bytes + options_.block_size - 1) / options_.block_size;
    nblocks += p.block_count;
    j.bytes_logical += static_cast<int64_t>(p.bytes);
  }
  if (nblocks > UINT32_MAX) {
    return absl::InvalidArgumentError(StrCat("rank ", j.rank, " step ", j.step, ": ", nblocks,
                                             " blocks exceed one file's limit; raise the block size"));
  }
  j.index.assign(nblocks, IndexEntry{});
  for (const SavePiece& p : pieces) {
    const bool delta = p.delta_reference != nullptr || p.delta_capture != nullptr;
    if (!delta && !p.compress_whole) continue;
    if (delta && !j.writer->frames_blocks()) {
      return absl::InvalidArgumentError(StrCat("rank ", j.rank, " step ", j.step,
                                               ": deltas are stored in ckpt data files only, not in this container"));
    }
    if (j.deltas.empty()) j.deltas.resize(nblocks);
    for (uint64_t b = 0; b < p.block_count; ++b) {
      const uint64_t at = b * options_.block_size;
      SaveJob::BlockDelta& d = j.deltas[p.first_block + b];
      if (p.delta_reference != nullptr) d.reference = p.delta_reference + at;
      if (p.delta_capture != nullptr) d.capture = p.delta_capture + at;
      d.compress_whole = p.compress_whole;
    }
  }
  j.counters->blocks_total = static_cast<int64_t>(nblocks);
  j.sink = RegisterWith(j.storage);
  if (!j.before_writes) {
    CKPT_RETURN_IF_ERROR(OpenFile(job, pieces));
    Stage(job, pieces);
    StagingDone(job);
    return absl::OkStatus();
  }
  // Staged blocks wait for before_writes; one count keeps the job from
  // finishing before it returned.
  {
    std::lock_guard<std::mutex> lock(j.mu);
    j.holding = true;
    j.outstanding = 1;
  }
  absl::Status opened;
  std::thread opener([&] { opened = OpenWhileStaging(job, pieces); });
  Stage(job, pieces);
  opener.join();
  StagingDone(job);
  return opened;
}

absl::Status SaveEngine::OpenFile(const std::shared_ptr<SaveJob>& job, const std::vector<SavePiece>& pieces) {
  SaveJob& j = *job;
  CKPT_RETURN_IF_ERROR(j.writer->Open(j, pieces));
  const absl::Span<const std::byte> prologue = j.writer->prologue();
  {
    std::lock_guard<std::mutex> lock(j.mu);
    j.opened = true;
    if (!prologue.empty()) ++j.outstanding;
  }
  if (!prologue.empty()) {
    j.writer->file().WriteAsync(0, prologue, [this, job](absl::Status s) {
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(job->mu);
        if (job->error.ok()) job->error = s;
      }
      BlockDone(job);
    });
  }
  return absl::OkStatus();
}

absl::Status SaveEngine::OpenWhileStaging(const std::shared_ptr<SaveJob>& job, const std::vector<SavePiece>& pieces) {
  SaveJob& j = *job;
  absl::Status s = j.before_writes(j);
  if (s.ok()) s = OpenFile(job, pieces);
  std::vector<SaveJob::HeldBlock> held;
  {
    std::lock_guard<std::mutex> lock(j.mu);
    // Run returns `s`; blocks staged from now on are dropped by the workers,
    // which stops the staging. The job's copy shares nothing with it: the
    // finalizer may free the job while the caller reads what Run returned.
    if (!s.ok() && j.error.ok()) j.error = absl::Status(s.code(), s.message());
    j.holding = false;
    held.swap(j.held);
  }
  if (s.ok()) {
    {
      std::lock_guard<std::mutex> lock(queue_mu_);
      for (const SaveJob::HeldBlock& b : held) queue_.push_back(WorkItem{job, b.block_id, b.slot, b.raw_len, b.dtype});
    }
    queue_cv_.notify_all();
  } else {
    for (const SaveJob::HeldBlock& b : held) {
      arena_->Release(b.slot);
      BlockDone(job);
    }
  }
  BlockDone(job);  // the count Run took
  return s;
}

void SaveEngine::StagingDone(const std::shared_ptr<SaveJob>& job) {
  bool finalize = false;
  {
    std::lock_guard<std::mutex> lock(job->mu);
    job->staging_done = true;
    finalize = job->outstanding == 0;
  }
  if (finalize) finalizer_->Submit([this, job] { Finalize(*job); });
}

bool SaveEngine::Enqueue(const std::shared_ptr<SaveJob>& job, uint64_t block_id, std::byte* slot, uint64_t len,
                         DType dtype) {
  job->counters->bytes_staged += static_cast<int64_t>(len);
  bytes_staged_.fetch_add(static_cast<int64_t>(len), std::memory_order_relaxed);
  bool failed;
  {
    std::lock_guard<std::mutex> lock(job->mu);
    ++job->outstanding;
    failed = !job->error.ok();
    if (job->holding) {
      job->held.push_back(SaveJob::HeldBlock{static_cast<uint32_t>(block_id), slot, static_cast<uint32_t>(len), dtype});
      return true;
    }
  }
  WorkItem item;
  item.job = job;
  item.block_id = static_cast<uint32_t>(block_id);
  item.slot = slot;
  item.raw_len = static_cast<uint32_t>(len);
  item.dtype = dtype;
  bool wake;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    queue_.push_back(std::move(item));
    wake = !WorkersPausedLocked();
  }
  if (wake) queue_cv_.notify_one();
  // A failed job's blocks are dropped by the workers; stop copying more.
  return !failed;
}

bool SaveEngine::StageTiles(const std::shared_ptr<SaveJob>& job, const std::vector<SavePiece>& pieces, size_t first,
                            size_t last, int64_t row_begin, int64_t row_end) {
  const Shard& parent = *pieces[first].parent;
  const uint64_t es = DTypeSize(parent.spec.dtype);
  const uint64_t bs = options_.block_size;
  const size_t ntiles = last - first;
  // Per tile: the slot being filled, bytes in it, next block, row segment.
  struct Stream {
    std::byte* slot = nullptr;
    uint64_t fill = 0;
    uint64_t block = 0;
    uint64_t seg = 0;
    uint64_t col_offset = 0;  // bytes from the row start
    uint64_t left = 0;        // bytes of the tile not yet handed to workers
  };
  std::vector<Stream> streams(ntiles);
  const int nd = parent.box.ndim();
  for (size_t t = 0; t < ntiles; ++t) {
    const Shard& tile = *pieces[first + t].shard;
    streams[t].seg = static_cast<uint64_t>(tile.box.sizes[nd - 1]) * es;
    streams[t].col_offset = static_cast<uint64_t>(tile.box.offsets[nd - 1] - parent.box.offsets[nd - 1]) * es;
    const uint64_t skipped = static_cast<uint64_t>(row_begin) * streams[t].seg;  // a multiple of bs
    streams[t].block = pieces[first + t].first_block + skipped / bs;
    streams[t].left = static_cast<uint64_t>(row_end - row_begin) * streams[t].seg;
  }
  bool ok = true;
  auto flush = [&](Stream& st, DType dtype) {
    ok = Enqueue(job, st.block++, st.slot, st.fill, dtype) && ok;
    st.left -= st.fill;
    st.slot = nullptr;
    st.fill = 0;
  };
  // Rows are read in order and each tile's segment is appended to its
  // slot in whole cache lines (see StreamAppender). (Taking a band of rows
  // tile by tile, so one output stream is written at a time, measured
  // slower: docs/performance.md, "Figures behind the code".)
  std::vector<StreamAppender> out(ntiles);
  ForEachRowIn(parent, row_begin, row_end, [&](const std::byte* row) {
    for (size_t t = 0; t < ntiles && ok; ++t) {
      Stream& st = streams[t];
      const std::byte* src = row + st.col_offset;
      uint64_t left = st.seg;
      while (left > 0) {
        if (st.slot == nullptr) {
          st.slot = arena_->Acquire(FrameLength(std::min(bs, st.left)));
          out[t].Reset(st.slot);
        }
        const uint64_t n = std::min(left, bs - st.fill);
        out[t].Append(src, n);
        st.fill += n;
        src += n;
        left -= n;
        if (st.fill == bs) {
          StreamFence();
          flush(st, parent.spec.dtype);
          if (!ok) break;
        }
      }
    }
    return ok;
  });
  // Only slots still held get their unfinished last line (a flushed
  // slot ended on a line boundary and belongs to the workers now).
  for (size_t t = 0; t < ntiles; ++t) {
    if (streams[t].slot != nullptr) out[t].Finish();
  }
  StreamFence();
  for (Stream& st : streams) {
    if (st.slot != nullptr) {
      if (ok && st.fill > 0) {
        flush(st, parent.spec.dtype);
      } else {
        arena_->Release(st.slot);
      }
    }
  }
  return ok;
}

namespace {

// About this many blocks over all tiles per band (16 MiB with the default
// blocks): passes over whole matrices of tens of megabytes left one thread
// copying the last of them while the others had finished.
constexpr uint64_t kTileBandBlocks = 16;

}  // namespace

int64_t TileBandRows(const std::vector<SavePiece>& pieces, size_t first, size_t last, uint64_t block_size) {
  const Shard& parent = *pieces[first].parent;
  const int64_t rows = RowCount(parent);
  const uint64_t es = DTypeSize(parent.spec.dtype);
  const int nd = parent.box.ndim();
  if (nd <= 1) return rows;
  uint64_t step = 1;  // rows after which every tile is on a block boundary
  for (size_t t = first; t < last; ++t) {
    const uint64_t seg = static_cast<uint64_t>(pieces[t].shard->box.sizes[nd - 1]) * es;
    step = std::lcm(step, block_size / std::gcd(block_size, seg));
    if (step >= static_cast<uint64_t>(rows)) return rows;
  }
  const uint64_t row_bytes = static_cast<uint64_t>(parent.box.sizes[nd - 1]) * es;
  const uint64_t want = std::max<uint64_t>(1, kTileBandBlocks * block_size / std::max<uint64_t>(1, row_bytes));
  const uint64_t band = std::max<uint64_t>(step, want / step * step);
  return static_cast<int64_t>(std::min<uint64_t>(band, static_cast<uint64_t>(rows)));
}

struct SaveEngine::StageTask {
  std::shared_ptr<SaveJob> job;
  const std::vector<SavePiece>* pieces = nullptr;
  /// What one thread stages at a time, largest first: a block of a piece,
  /// or (end > piece + 1) rows [row_begin, row_end) of the column tiles
  /// [piece, end) of one shard in one pass over those rows.
  struct Unit {
    uint32_t piece = 0;
    uint32_t end = 0;
    uint64_t block = 0;
    int64_t row_begin = 0;
    int64_t row_end = 0;
    uint64_t bytes = 0;  ///< staged by the unit
  };
  std::vector<Unit> units;
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::condition_variable cv;
  int helpers = 0;  ///< helpers inside StageUnits
};

void SaveEngine::Stage(const std::shared_ptr<SaveJob>& job, const std::vector<SavePiece>& pieces) {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    ++stagings_;
  }
  StageAll(job, pieces);
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    if (--stagings_ == 0) arena_ran_full_ = false;
  }
  queue_cv_.notify_all();
}

void SaveEngine::StageAll(const std::shared_ptr<SaveJob>& job, const std::vector<SavePiece>& pieces) {
  auto task = std::make_shared<StageTask>();
  task->job = job;
  task->pieces = &pieces;
  for (size_t pi = 0; pi < pieces.size();) {
    const SavePiece& p = pieces[pi];
    if (p.parent != nullptr) {
      size_t end = pi + 1;
      while (end < pieces.size() && pieces[end].parent == p.parent) ++end;
      // One pass over the rows holds a frame per tile at once; passes share
      // half the arena (below). A shard with more tiles than that has each
      // tile gathered block by block instead.
      if (end - pi + 1 <= tile_budget_max_) {
        const int64_t rows = RowCount(*p.parent);
        const int64_t band = TileBandRows(pieces, pi, end, options_.block_size);
        uint64_t row_bytes = 0;  // of all the tiles
        for (size_t t = pi; t < end; ++t)
          row_bytes += pieces[t].bytes / static_cast<uint64_t>(std::max<int64_t>(1, rows));
        for (int64_t r = 0; r < rows; r += band) {
          const int64_t r1 = std::min(rows, r + band);
          task->units.push_back({static_cast<uint32_t>(pi), static_cast<uint32_t>(end), 0, r, r1,
                                 row_bytes * static_cast<uint64_t>(r1 - r)});
        }
        pi = end;
        continue;
      }
    }
    for (uint64_t b = 0; b < p.block_count; ++b) {
      task->units.push_back({static_cast<uint32_t>(pi), static_cast<uint32_t>(pi + 1), b, 0, 0,
                             std::min<uint64_t>(options_.block_size, p.bytes - b * options_.block_size)});
    }
    ++pi;
  }
  // Largest first: a pass over a whole matrix (one band when its tiles'
  // rows meet block boundaries only at its end) taken last kept one thread
  // copying tens of megabytes after the others had nothing left; taken
  // first, the small units that follow even the threads out.
  std::stable_sort(task->units.begin(), task->units.end(),
                   [](const StageTask::Unit& a, const StageTask::Unit& b) { return a.bytes > b.bytes; });
  // The helpers join unless another rank's Run has them (it then stages
  // alone on its own thread).
  bool shared = false;
  if (!stagers_.empty() && task->units.size() > 1) {
    std::lock_guard<std::mutex> lock(stage_mu_);
    if (stage_task_ == nullptr) {
      stage_task_ = task;
      ++stage_generation_;
      shared = true;
    }
  }
  if (shared) stage_cv_.notify_all();
  StageUnits(*task);
  if (!shared) return;
  {
    std::lock_guard<std::mutex> lock(stage_mu_);
    stage_task_.reset();
  }
  // No helper joins after this; wait for those inside, since `pieces` is
  // the caller's.
  std::unique_lock<std::mutex> lock(task->mu);
  task->cv.wait(lock, [&] { return task->helpers == 0; });
}

void SaveEngine::StageUnits(StageTask& task) {
  const std::vector<SavePiece>& pieces = *task.pieces;
  while (!task.failed.load(std::memory_order_relaxed)) {
    const size_t i = task.next.fetch_add(1, std::memory_order_relaxed);
    if (i >= task.units.size()) return;
    const StageTask::Unit& u = task.units[i];
    bool ok = true;
    if (u.end > u.piece + 1) {
      // Each thread in a pass holds up to a frame per tile while it waits
      // for one more: passes take their frames from a budget of half the
      // arena's, so the others (one frame per thread) always find room.
      const size_t need = u.end - u.piece + 1;
      {
        std::unique_lock<std::mutex> lock(budget_mu_);
        budget_cv_.wait(lock, [&] { return tile_budget_ >= need; });
        tile_budget_ -= need;
      }
      ok = StageTiles(task.job, pieces, u.piece, u.end, u.row_begin, u.row_end);
      {
        std::lock_guard<std::mutex> lock(budget_mu_);
        tile_budget_ += need;
      }
      budget_cv_.notify_all();
    } else {
      const SavePiece& p = pieces[u.piece];
      const size_t es = DTypeSize(p.dtype);
      const uint64_t begin = u.block * options_.block_size;
      const uint64_t len = std::min<uint64_t>(options_.block_size, p.bytes - begin);
      std::byte* slot = arena_->Acquire(FrameLength(len));
      if (p.shard != nullptr) {
        GatherPacked(*p.shard, static_cast<int64_t>(begin / es), static_cast<int64_t>(len / es), slot);
      } else {
        StreamCopy(slot, p.blob + begin, len);
      }
      ok = Enqueue(task.job, p.first_block + u.block, slot, len, p.dtype);
    }
    if (!ok) task.failed = true;
  }
}

void SaveEngine::StagerLoop() {
  // Staging is the trainer's stall: helpers keep the caller's priority.
  uint64_t seen = 0;
  while (true) {
    std::shared_ptr<StageTask> task;
    {
      std::unique_lock<std::mutex> lock(stage_mu_);
      stage_cv_.wait(lock, [&] { return stop_stagers_ || (stage_task_ != nullptr && stage_generation_ != seen); });
      if (stop_stagers_) return;
      seen = stage_generation_;
      task = stage_task_;
      std::lock_guard<std::mutex> l(task->mu);
      ++task->helpers;
    }
    StageUnits(*task);
    {
      std::lock_guard<std::mutex> l(task->mu);
      --task->helpers;
    }
    task->cv.notify_all();
  }
}

void SaveEngine::WorkerLoop(std::byte* out) {
  LowerThisThread(PriorityOf(options_));
  BlockCodec codec;
  while (true) {
    WorkItem item;
    {
      std::unique_lock<std::mutex> lock(queue_mu_);
      queue_cv_.wait(lock, [&] { return stop_ || (!queue_.empty() && !WorkersPausedLocked()); });
      if (queue_.empty()) return;
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    if (pacer_) {
      const double cpu0 = ThisThreadCpuSeconds();
      ProcessBlock(item, codec, out);
      pacer_->Charge(ThisThreadCpuSeconds() - cpu0);
    } else {
      ProcessBlock(item, codec, out);
    }
  }
}

void SaveEngine::ProcessBlock(WorkItem& item, BlockCodec& codec, std::byte* out) {
  const std::shared_ptr<SaveJob>& job = item.job;
  bool failed;
  {
    std::lock_guard<std::mutex> lock(job->mu);
    failed = !job->error.ok();
  }
  if (failed) {
    arena_->Release(item.slot);
    BlockDone(job);
    return;
  }
  BlockEncoding how;
  how.framed = job->writer->frames_blocks();
  const SaveJob::BlockDelta* delta = job->deltas.empty() ? nullptr : &job->deltas[item.block_id];
  if (delta != nullptr && delta->capture != nullptr) std::memcpy(delta->capture, item.slot, item.raw_len);
  if (delta != nullptr && delta->reference != nullptr) {
    how.delta = true;
    how.raw_hash = Xxh3(item.slot, item.raw_len);
    MakeDelta(absl::Span<std::byte>(item.slot, item.raw_len),
              absl::Span<const std::byte>(delta->reference, item.raw_len), DTypeSize(item.dtype));
  }
  // A delta is mostly zero bytes: it is worth storing compressed whatever
  // the codec asked for, and its ratio says nothing about the auto
  // chooser's next whole block. The other blocks of a delta chain's
  // chunks are compressed too (SavePiece::compress_whole): its base, read
  // by every load of the chain, and a chunk whose deltas did not pay,
  // which its delta's coding would have cost as much.
  const bool compress_whole = delta != nullptr && delta->compress_whole && job->codec == Codec::kAuto;
  const bool automatic = job->codec == Codec::kAuto && !how.delta && !compress_whole;
  if (automatic) {
    how.codec = auto_->Choose(item.dtype, item.raw_len, *job->sink);
  } else if (compress_whole || (how.delta && (job->codec == Codec::kNone || job->codec == Codec::kAuto))) {
    how.codec = Codec::kShuffleZstd;
  } else {
    how.codec = job->codec;
  }
  how.zstd_level = job->zstd_level;
  const double t0 = automatic ? NowSeconds() : 0;
  auto entry = EncodeBlockInPlace(codec, how, item.dtype, item.block_id, item.slot, item.raw_len,
                                  absl::Span<std::byte>(out, out_bytes_ - kTrailerSize));
  if (!entry.ok()) {
    arena_->Release(item.slot);
    {
      std::lock_guard<std::mutex> lock(job->mu);
      if (job->error.ok()) job->error = Annotate(entry.status(), job->data_path);
    }
    BlockDone(job);
    return;
  }
  if (automatic && how.codec != Codec::kNone) {
    auto_->Record(item.dtype, item.raw_len, entry->stored_len, NowSeconds() - t0);
  }
  const uint64_t frame_len = entry->frame_len;
  {
    std::lock_guard<std::mutex> lock(job->mu);
    entry->offset = job->writer->Place(item.block_id, frame_len);
    job->index[item.block_id] = *entry;
    job->bytes_stored += entry->stored_len;
  }
  SubmitFrame(job, item.block_id, item.slot, frame_len);
}

void SaveEngine::SubmitFrame(const std::shared_ptr<SaveJob>& job, uint32_t block_id, std::byte* buf,
                             uint64_t frame_len) {
  uint64_t offset;
  {
    std::lock_guard<std::mutex> lock(job->mu);
    offset = job->index[block_id].offset;
  }
  job->sink->Submitted(frame_len, NowSeconds());
  job->writer->file().WriteAsync(offset, absl::Span<const std::byte>(buf, frame_len),
                                 [this, job, buf, frame_len](absl::Status s) {
                                   job->sink->Completed(frame_len, NowSeconds());
                                   arena_->Release(buf);
                                   if (!s.ok()) {
                                     std::lock_guard<std::mutex> lock(job->mu);
                                     if (job->error.ok()) job->error = s;
                                   } else {
                                     job->counters->blocks_written += 1;
                                     job->counters->bytes_written += static_cast<int64_t>(frame_len);
                                   }
                                   BlockDone(job);
                                 });
}

void SaveEngine::BlockDone(const std::shared_ptr<SaveJob>& job) {
  bool finalize = false;
  {
    std::lock_guard<std::mutex> lock(job->mu);
    finalize = --job->outstanding == 0 && job->staging_done;
  }
  if (finalize) finalizer_->Submit([this, job] { Finalize(*job); });
}

void SaveEngine::Finalize(SaveJob& job) {
  absl::Status status;
  bool opened;
  {
    std::lock_guard<std::mutex> lock(job.mu);
    status = job.error;
    opened = job.opened;
  }
  // Never opened: Run returned the error, and a file at data_path is not
  // this job's to remove (the step may be another save's).
  if (!opened) return;
  if (status.ok()) status = job.writer->Close(job);
  if (!status.ok()) {
    job.writer->Abandon();
    (void)job.storage->Remove(job.data_path);
    status = Annotate(status, StrCat("save of step ", job.step, " rank ", job.rank));
  }
  if (job.on_finished) job.on_finished(job, status);
}

}  // namespace ckpt

// The background half of Save: a bounded, pre-faulted staging arena, codec
// workers and the writer of one data file per job.
//
//   caller:   Run() copies each block into an arena slot (the only stall),
//             with the engine's staging helpers when it has them
//   workers:  xxh3(raw) -> codec -> xxh3(stored) -> frame -> WriteAsync
//   I/O:      completion releases the slot and records the index entry
//   finalizer: index + footer -> Finish (fdatasync) -> job->on_finished
//
// Where blocks land in the file and what surrounds them is the job's
// ContainerWriter (pipeline/container_writer.h).
#ifndef CKPT_PIPELINE_SAVE_ENGINE_H_
#define CKPT_PIPELINE_SAVE_ENGINE_H_

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "ckpt/codec.h"
#include "ckpt/options.h"
#include "ckpt/state.h"
#include "ckpt/storage.h"
#include "format/data_file.h"
#include "pipeline/auto_codec.h"
#include "pipeline/container_writer.h"
#include "pipeline/staging_arena.h"
#include "util/aligned_buffer.h"
#include "util/background.h"
#include "util/task_pool.h"

namespace ckpt {

/// How far one job has come, read by SaveHandle::Progress while the engine
/// writes.
struct SaveCounters {
  std::atomic<int64_t> blocks_total{0};
  std::atomic<int64_t> blocks_written{0};
  std::atomic<int64_t> bytes_staged{0};
  std::atomic<int64_t> bytes_written{0};
};

/// One packed byte stream to save: a shard or a blob.
struct SavePiece {
  const Shard* shard = nullptr;     ///< tensor data (valid during Run)
  const std::byte* blob = nullptr;  ///< or blob bytes
  DType dtype = DType::kU8;
  uint64_t bytes = 0;
  /// Column tiles of one shard: consecutive pieces with the same `parent`
  /// (whose last dimension is contiguous in memory) are staged together in
  /// one pass over the parent's rows, so memory is read sequentially.
  const Shard* parent = nullptr;
  /// Blobs in an HDF5 container: their name and rank (-1: global).
  std::string blob_name;
  int blob_rank = -1;
  /// Deltas (ckpt data files only): `delta_reference` holds the piece's
  /// bytes in its base step, and the piece is written as its differences
  /// from them (MakeDelta);
  /// `delta_capture` (piece.bytes long) receives the piece's bytes as
  /// staged, to be the base of later saves. Both outlive the job
  /// (SaveJob::keep_alive).
  const std::byte* delta_reference = nullptr;
  std::byte* delta_capture = nullptr;
  /// Compressed with shuffle-zstd where the codec is auto: a chain's base,
  /// and a chunk saved whole because its deltas did not pay.
  bool compress_whole = false;
  // Filled by Run:
  uint64_t first_block = 0;
  uint64_t block_count = 0;
};

/// Rows per staging unit of the column tiles pieces[first, last) of one
/// shard: a band starts every tile's part on a block boundary (its rows
/// times each tile's row segment are whole blocks); the whole shard where
/// no such band fits within its rows.
int64_t TileBandRows(const std::vector<SavePiece>& pieces, size_t first, size_t last, uint64_t block_size);

/// State of one rank's save of one step. Created by the Checkpointer,
/// driven by the engine.
struct SaveJob {
  // Inputs.
  std::shared_ptr<Storage> storage;
  std::string data_path;
  int rank = 0;
  int64_t step = 0;
  uint64_t save_id = 0;
  /// HDF5 containers: xxh3 of the bytes libhdf5 wrote (Hdf5MetadataHash).
  uint64_t container_hash = 0;
  Codec codec = Codec::kNone;
  int zstd_level = 1;
  bool direct = true;
  /// The data file's layout; null: a ckpt data file.
  std::unique_ptr<ContainerWriter> writer;
  std::shared_ptr<SaveCounters> counters;
  /// Runs on the engine's finalizer thread once the data file is durable
  /// (status OK) or the job failed. The data file is removed on failure.
  std::function<void(SaveJob&, absl::Status)> on_finished;
  /// If set, runs on another thread while Run stages the pieces, and
  /// nothing reaches the storage (the data file is not even created) until
  /// it returns OK: staged blocks wait in the arena. A save takes its step's
  /// claim here, so the trainer's stall is the longer of the two, not both.
  /// Its error, or the data file's failure to open after it, is what Run
  /// returns, once staging has stopped; on_finished is then not called.
  std::function<absl::Status(SaveJob&)> before_writes;

  // Results, valid in on_finished.
  std::vector<IndexEntry> index;
  uint64_t block_size = 0;
  uint64_t file_size = 0;
  uint64_t index_offset = 0;
  uint64_t index_len = 0;
  uint64_t index_hash = 0;
  int64_t bytes_logical = 0;
  int64_t bytes_stored = 0;

  // Engine-internal.
  struct HeldBlock {
    uint32_t block_id = 0;
    std::byte* slot = nullptr;
    uint32_t raw_len = 0;
    DType dtype = DType::kU8;
  };
  std::mutex mu;
  absl::Status error;
  int64_t outstanding = 0;
  bool staging_done = false;
  /// The data file was opened. A job that never opened it returned its
  /// error from Run: it has no file to remove and no one to tell.
  bool opened = false;
  /// Blocks staged before before_writes returned, while `holding`.
  bool holding = false;
  std::vector<HeldBlock> held;
  /// The storage's writes, measured for Codec::kAuto.
  std::shared_ptr<SinkMeter> sink;
  /// Per block, from the pieces' delta_reference and delta_capture; empty
  /// when no piece has either.
  struct BlockDelta {
    const std::byte* reference = nullptr;
    std::byte* capture = nullptr;
    bool compress_whole = false;
  };
  std::vector<BlockDelta> deltas;
  /// What the pieces' delta pointers point into.
  std::vector<std::shared_ptr<const void>> keep_alive;
};

/// Staging threads an engine gets when SaveEngineOptions::staging_threads
/// is 0: min(4, hardware threads).
int DefaultStagingThreads();

class SaveEngine {
 public:
  static absl::StatusOr<std::shared_ptr<SaveEngine>> Create(const SaveEngineOptions& options);
  ~SaveEngine();
  SaveEngine(const SaveEngine&) = delete;
  SaveEngine& operator=(const SaveEngine&) = delete;

  /// Opens the job's data file (after job->before_writes, if set), copies
  /// every piece into the arena (blocking while the arena is full) and
  /// returns; the job finishes in the background. Errors of the opening
  /// are returned here (and on_finished is not called); later errors go to
  /// on_finished.
  absl::Status Run(std::shared_ptr<SaveJob> job, std::vector<SavePiece>& pieces);

  size_t block_size() const { return options_.block_size; }
  size_t staging_bytes() const { return arena_->size(); }
  int worker_threads() const { return static_cast<int>(workers_.size()); }
  /// Threads that stage one Run, its caller included.
  int staging_threads() const { return static_cast<int>(stagers_.size()) + 1; }
  /// Bytes copied into the arena by every Run so far.
  int64_t bytes_staged() const { return bytes_staged_.load(std::memory_order_relaxed); }
  /// The arena's memory, for a caller that knows no Run is staging and no
  /// job is in flight: a benchmark that measures memcpy into the very pages
  /// a stall copies into.
  std::span<std::byte> IdleArenaMemory() { return {arena_->data(), arena_->size()}; }

 private:
  struct WorkItem {
    std::shared_ptr<SaveJob> job;
    uint32_t block_id = 0;
    std::byte* slot = nullptr;
    uint32_t raw_len = 0;
    DType dtype = DType::kU8;
  };

  explicit SaveEngine(const SaveEngineOptions& options);
  absl::Status Init();
  /// `out`: this worker's buffer for encoded blocks.
  void WorkerLoop(std::byte* out);
  void ProcessBlock(WorkItem& item, class BlockCodec& codec, std::byte* out);
  void SubmitFrame(const std::shared_ptr<SaveJob>& job, uint32_t block_id, std::byte* buf, uint64_t frame_len);
  void BlockDone(const std::shared_ptr<SaveJob>& job);
  void Finalize(SaveJob& job);
  /// Registers the arena with `storage` (once, in the background) and
  /// returns the meter of its writes, shared by every job headed there.
  std::shared_ptr<SinkMeter> RegisterWith(const std::shared_ptr<Storage>& storage);
  /// Opens the data file and writes its prologue.
  absl::Status OpenFile(const std::shared_ptr<SaveJob>& job, const std::vector<SavePiece>& pieces);
  /// Runs job->before_writes, opens the file, and hands the blocks staged
  /// meanwhile to the workers (or drops them); returns the first error.
  absl::Status OpenWhileStaging(const std::shared_ptr<SaveJob>& job, const std::vector<SavePiece>& pieces);
  /// Marks the job staged; finishes it if nothing is left outstanding.
  void StagingDone(const std::shared_ptr<SaveJob>& job);
  /// Hands a filled slot to the workers. Returns false when the job failed.
  bool Enqueue(const std::shared_ptr<SaveJob>& job, uint64_t block_id, std::byte* slot, uint64_t len, DType dtype);
  /// Stages rows [row_begin, row_end) of pieces[first, last) (the column
  /// tiles of one parent shard) in one pass over those rows; every tile's
  /// part of them starts on a block boundary. Returns false when the job
  /// failed.
  bool StageTiles(const std::shared_ptr<SaveJob>& job, const std::vector<SavePiece>& pieces, size_t first, size_t last,
                  int64_t row_begin, int64_t row_end);
  /// One Run's staging, shared out to the staging threads.
  struct StageTask;
  /// Stages `pieces` on the caller and the staging helpers; returns when
  /// every block is in the arena (or the job failed). Counted in stagings_
  /// while StageAll runs, which does the work.
  void Stage(const std::shared_ptr<SaveJob>& job, const std::vector<SavePiece>& pieces);
  void StageAll(const std::shared_ptr<SaveJob>& job, const std::vector<SavePiece>& pieces);
  /// Stages units of `task` until none is left.
  void StageUnits(StageTask& task);
  void StagerLoop();
  /// REQUIRES: queue_mu_. Whether the workers leave the queue alone.
  bool WorkersPausedLocked() const { return pause_workers_ && stagings_ > 0 && !arena_ran_full_; }

  SaveEngineOptions options_;
  // Slots that multi-tile passes may hold at once, all threads together.
  std::mutex budget_mu_;
  std::condition_variable budget_cv_;
  size_t tile_budget_ = 0;
  size_t tile_budget_max_ = 0;
  size_t out_bytes_ = 0;
  std::unique_ptr<StagingArena> arena_;
  AlignedBuffer out_arena_;

  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<WorkItem> queue_;
  // Runs staging now, and whether the arena ran full since none was: the
  // workers wait meanwhile when pause_workers_ (WorkersPausedLocked).
  bool pause_workers_ = false;
  int stagings_ = 0;
  bool arena_ran_full_ = false;
  bool stop_ = false;
  std::vector<std::thread> workers_;
  std::unique_ptr<RatePacer> pacer_;     // CPU seconds, with a CPU budget
  std::unique_ptr<TaskPool> finalizer_;  // one thread

  // Staging helpers: they join the Run published in stage_task_.
  std::mutex stage_mu_;
  std::condition_variable stage_cv_;
  std::shared_ptr<StageTask> stage_task_;
  uint64_t stage_generation_ = 0;
  bool stop_stagers_ = false;
  std::vector<std::thread> stagers_;

  std::unique_ptr<AutoChooser> auto_;
  std::atomic<int64_t> bytes_staged_{0};

  std::mutex reg_mu_;
  std::vector<std::thread> registrars_;
  // Each storage the engine writes to: the arena's registration with it
  // (token 0: none, or not yet) and the meter of its writes.
  struct KnownStorage {
    std::weak_ptr<Storage> storage;
    uint64_t token = 0;
    std::shared_ptr<SinkMeter> sink;
  };
  std::map<Storage*, KnownStorage> storages_;
};

}  // namespace ckpt

#endif  // CKPT_PIPELINE_SAVE_ENGINE_H_

// Blocks stored as deltas (docs/format.md, "Delta chains"): a delta block's
// decoded bytes are its elements' differences from the same block of its
// chunk's base step (MakeDelta), which may be a delta in turn. DeltaChain rebuilds a base block by walking
// that chain, each link checked by its own checksums, and reads only the
// blocks asked for.
#ifndef CKPT_PIPELINE_DELTA_CHAIN_H_
#define CKPT_PIPELINE_DELTA_CHAIN_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ckpt/storage.h"
#include "format/frame_check.h"
#include "format/manifest.h"
#include "pipeline/block_stream.h"
#include "util/aligned_buffer.h"
#include "util/task_pool.h"

namespace ckpt {

/// The committed manifests of base steps, as the root's rules decide them
/// (core/root.h gives one). Thread-safe.
class BaseManifests {
 public:
  virtual ~BaseManifests() = default;
  /// The manifest of committed step `step`, every chunk listed.
  virtual absl::StatusOr<std::shared_ptr<const Manifest>> Read(int64_t step) = 0;
};

/// The delta transform, element by element of `width` bytes (1, 2, 4 or
/// 8), little-endian: each element of `bytes` becomes the zig-zag coded
/// difference of its bit pattern and the base's, modulo 2^(8 width), so
/// that an element that moved by a few units in its last place becomes a
/// small number whose high bytes are zero (docs/format.md, "Delta chains").
/// Equal lengths, a multiple of `width`.
void MakeDelta(absl::Span<std::byte> bytes, absl::Span<const std::byte> base, size_t width);
/// The inverse: rebuilds the elements from their deltas and the base.
void UndoDelta(absl::Span<std::byte> bytes, absl::Span<const std::byte> base, size_t width);

/// Rebuilds base blocks for the deltas of one or more steps of a root.
/// Thread-safe: each base step is opened once and its files once.
class DeltaChain {
 public:
  DeltaChain(Storage& storage, BaseManifests* manifests);

  ~DeltaChain();

  /// One delta block a load will rebuild: block `block` (relative to the
  /// chunk) of chunk `chunk` of `tensor`.
  struct Need {
    const ManifestTensor* tensor = nullptr;
    const ManifestChunk* chunk = nullptr;
    uint64_t block = 0;
  };
  /// Reads ahead the base frames of `needs` (delta blocks of the step `m`
  /// describes, in the order they will be rebuilt): adjacent frames of a
  /// base file are read together, up to `window` bytes read and not yet
  /// used, several reads at once. A base block needed before its read was
  /// started is read by whoever needs it, as without a plan. Call once,
  /// before the blocks are decoded (again for more blocks).
  void Plan(const Manifest& m, const std::vector<Need>& needs, uint64_t window = uint64_t{8} << 20);

  /// The function DecodeFrame calls for block `block` (relative to the
  /// chunk) of chunk `c` of tensor `t` of the step `m` describes: it applies
  /// in the rebuilt base block. `depth` counts the links already followed.
  /// Empty when `c` names no base.
  DeltaBaseFn For(const Manifest& m, const ManifestTensor& t, const ManifestChunk& c, uint64_t block, int depth = 0);

  /// Rebuilds `bytes` (decoded deltas) from the rebuilt block `block` of the
  /// chunk of `spec` with
  /// box `box` in step `base`, whose files must be that base's save and
  /// have block size `block_size`.
  absl::Status ApplyBase(const ManifestBase& base, const TensorSpec& spec, const Box& box, uint64_t block,
                         uint64_t block_size, absl::Span<std::byte> bytes, int depth);

  /// Bytes of base frames read so far.
  int64_t bytes_read() const { return bytes_read_.load(std::memory_order_relaxed); }

 private:
  struct BaseStep {
    std::shared_ptr<const Manifest> manifest;
    std::unique_ptr<StepFiles> files;
    /// Per tensor, its chunks by box offsets.
    std::map<std::string, std::map<Dims, const ManifestChunk*>, std::less<>> chunks;
  };
  /// A base block found and checked against the delta that needs it.
  struct Located {
    BaseStep* step = nullptr;
    const ManifestTensor* tensor = nullptr;
    const ManifestChunk* chunk = nullptr;
    const IndexEntry* entry = nullptr;
    const StepFiles::File* file = nullptr;
  };
  /// Adjacent base frames of one file, read together (Plan).
  struct Run {
    const StepFiles::File* file = nullptr;
    uint64_t offset = 0;
    uint64_t len = 0;
    AlignedBuffer bytes;
    enum class State : uint8_t { kWaiting, kReading, kDone } state = State::kWaiting;
    absl::Status status;
    int unused = 0;  ///< frames of it not used yet
  };
  struct Slot {
    size_t run = 0;
    uint64_t at = 0;  ///< the frame's offset in the run
  };

  absl::StatusOr<BaseStep*> Open(const ManifestBase& base);
  absl::StatusOr<Located> Locate(const ManifestBase& base, const TensorSpec& spec, const Box& box, uint64_t block,
                                 uint64_t block_size, const std::string& what);
  // REQUIRES: mu_. Starts reads of waiting runs while the window allows.
  void StartRunsLocked();
  // A planned frame taken by the block that needs it: its run's status and,
  // when read, the frame; Done(run) once it is used.
  struct Taken {
    size_t run = 0;
    absl::Status status;
    absl::Span<const std::byte> frame;
  };
  // Takes `at`'s frame from the plan, waiting for its run; nullopt when it
  // is not planned (or taken already) or its run was not started yet: the
  // caller reads it.
  std::optional<Taken> Take(const Located& at);
  void Done(size_t run);
  // REQUIRES: mu_. Frees a run's bytes once read and used.
  void Release(Run& r);
  absl::Status Apply(const Located& at, absl::Span<const std::byte> frame, uint64_t block, absl::Span<std::byte> bytes,
                     int depth, const std::string& what);

  Storage& storage_;
  BaseManifests* manifests_;
  std::mutex mu_;
  std::map<int64_t, std::unique_ptr<BaseStep>> steps_;
  std::atomic<int64_t> bytes_read_{0};
  // The plan (Plan): runs in the order they are needed, and where each
  // planned frame is, by its index entry.
  std::deque<Run> runs_;                     // REQUIRES: mu_ (a deque: runs stay put as plans add more)
  std::map<const IndexEntry*, Slot> slots_;  // REQUIRES: mu_
  size_t next_run_ = 0;                      // REQUIRES: mu_
  uint64_t window_ = 0, held_ = 0;           // REQUIRES: mu_
  int reading_ = 0;                          // REQUIRES: mu_
  std::vector<AlignedBuffer> spare_;         // REQUIRES: mu_; the memory of used runs
  std::condition_variable run_done_;
  // Runs the planned reads (plain reads: a storage's own queue could hold
  // them behind the step's frames). Last: its threads end first.
  TaskPool readers_{kReaders};
  static constexpr int kReaders = 4;
  static constexpr uint64_t kRunBytes = uint64_t{2} << 20;
  // A read that took under kFastReadS plus its bytes at kFastReadBytesPerS
  // came from memory: the plan stops there (no more runs are started).
  static constexpr double kFastReadS = 0.00025;
  static constexpr double kFastReadBytesPerS = 4e9;
  bool fast_ = false;  // REQUIRES: mu_
};

}  // namespace ckpt

#endif  // CKPT_PIPELINE_DELTA_CHAIN_H_

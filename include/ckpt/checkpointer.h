// Asynchronous, checksummed, compressed checkpoints of sharded tensor state.
//
//   auto cp = ckpt::Checkpointer::Open({.uri = "/nvme/ckpt", .rank = r,
//                                       .world_size = n});
//   ckpt::State state;
//   state.AddShard(spec, box, ptr);
//   auto handle = (*cp)->Save(step, state);   // returns after staging
//   ...train...
//   handle->Wait();                            // committed (or an error)
//   (*cp)->Load(state);                        // latest committed step
#ifndef CKPT_CHECKPOINTER_H_
#define CKPT_CHECKPOINTER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ckpt/codec.h"
#include "ckpt/communicator.h"
#include "ckpt/export.h"
#include "ckpt/load_exchange.h"
#include "ckpt/log.h"
#include "ckpt/mesh.h"
#include "ckpt/options.h"
#include "ckpt/state.h"
#include "ckpt/storage.h"

namespace ckpt {

class SaveEngine;
CKPT_EXPORT absl::StatusOr<std::shared_ptr<SaveEngine>> CreateSaveEngine(const SaveEngineOptions& options);

/// Two-phase commit through an outside arbiter; experimental
/// (ckpt/experimental/commit_arbiter.h).
class CommitArbiter;

struct CKPT_EXPORT CheckpointerOptions {
  /// Root of the checkpoints: a path or a storage URI.
  std::string uri;
  /// Use this storage instead of opening `uri`.
  std::shared_ptr<Storage> storage;
  int rank = 0;
  int world_size = 1;
  Codec codec = Codec::kNone;
  int zstd_level = 1;
  /// Layout of the data files (the codec applies to ckpt files only).
  DataContainer container = DataContainer::kAuto;
  /// Engine settings, used when `engine` is null.
  SaveEngineOptions engine_options;
  std::shared_ptr<SaveEngine> engine;
  RetentionPolicy retention;
  /// Delta saves; off by default.
  DeltaOptions delta;
  /// How long the leader waits for every rank's report before aborting.
  double commit_timeout_s = 600;
  /// Recorded in the manifest (the mesh the state was saved from).
  std::optional<Mesh> mesh;
  /// Ask the storage for O_DIRECT writes (falls back where refused).
  bool direct_io = true;
  /// Shards cut along their last dimension (and large whole tensors) are
  /// saved as up to this many column tiles (each its own chunk), and shards
  /// of 256 KiB or more cut along their first dimension only as up to this
  /// many row slabs, cut where loads onto the tensor-parallel sizes users
  /// move to would cut, so such a load reads only the chunks it needs
  /// (docs/resharding.md). 1 disables both.
  int max_column_tiles = 8;
  /// Collectives among the ranks. With one, Save agrees which replica writes
  /// each box that several ranks hold (balancing bytes), and Load has the
  /// leader read the manifest and hand each rank only the part it needs.
  /// Every rank must then call Open, Save and Load together (Open waits
  /// until the leader's cleanup of crashed saves is done).
  std::shared_ptr<Communicator> communicator;
  /// Limit for each collective; a dead rank fails the call after it.
  double collective_timeout_s = 300;
  /// With a communicator: how the ranks of a load pass each other the
  /// pieces they read for one another (LoadOptions::cooperative;
  /// OpenLoadExchange in ckpt/peer.h). Every rank gives one (built together
  /// over this communicator) or none. Without one every rank reads what it
  /// needs from storage.
  std::shared_ptr<LoadExchange> load_exchange;
  /// Commit through this arbiter (see CommitArbiter) rather than by the
  /// leader polling the storage for every rank's report.
  std::shared_ptr<CommitArbiter> arbiter;
  /// With an arbiter: hash every shard at Save (one xxh3 pass over this
  /// rank's shards, inside the stall) and send the hashes of boxes that
  /// other ranks hold too with the vote.
  bool hash_replicas = false;
  /// On the leader, Open removes uncommitted steps (leftovers of saves that
  /// crashed) and applies retention. Only safe when no other process is
  /// saving to the root at that moment, as when a job starts.
  bool gc_on_open = true;
  /// Where this checkpointer's messages go (ckpt/log.h): its cleanup at
  /// Open, claims, commits, failed saves (warning), loads' fallbacks and
  /// failovers, on whichever thread they happen. Empty: the process's sink
  /// (SetLogSink; stderr until one is set).
  LogSink log;
  /// The memory level (docs/levels.md): where saves with
  /// SaveOptions::level = kMemory go and loads with LoadOptions::level =
  /// kMemory come from, usually OpenPeerStorage (ckpt/peer.h). Every rank
  /// removes the memory level's older steps once a newer one is committed
  /// there; nothing else of the options' retention applies to it.
  std::shared_ptr<Storage> memory_storage;
  /// The memory level's commit arbiter (the coordinator client's
  /// memory_arbiter()); without one, as `arbiter` is for the durable level.
  std::shared_ptr<CommitArbiter> memory_arbiter;
};

/// Tracks one asynchronous save. Thread-safe; copies share state.
class CKPT_EXPORT SaveHandle {
 public:
  int64_t step() const;
  /// Blocks until the step is committed (or failed). On a non-leader rank it
  /// waits for the leader's outcome; on the leader, also until retention
  /// removed the steps this commit put past it.
  absl::Status Wait() const;
  /// Blocks until this rank's data is durable (its part of the two-phase
  /// commit), or failed.
  absl::Status WaitDurable() const;
  /// Wait(), then until the step has reached the storage's most durable
  /// tier (tiered://: drained from the local tier). Same as Wait() on
  /// single-tier storage.
  absl::Status WaitReplicated() const;
  /// Wait with a time limit; DeadlineExceeded when still running.
  absl::Status WaitFor(double seconds) const;
  bool Done() const;
  SaveProgress Progress() const;
  /// Final once Done().
  SaveStats Stats() const;

 private:
  friend class Checkpointer;  // the only maker of handles
  struct Shared;              // core/save_handle.h
  explicit SaveHandle(std::shared_ptr<Shared> shared);
  std::shared_ptr<Shared> shared_;
};

/// What a step directory is. A step is committed once its MANIFEST exists
/// (the atomic rename is the commit point) or, if that is lost, its copy
/// MANIFEST.copy (written only after the rename); whether they decode does
/// not change that.
///
/// Only what the storage proves counts: "partial" needs every account the
/// storage gives to agree that neither manifest exists, "damaged" needs bytes
/// read that are wrong (or a manifest proven missing beside its copy). When
/// the storage errs instead (EIO, a timeout, a 5xx) or contradicts itself (a
/// listing names a manifest that its GET cannot find), the step is
/// "unreadable": nothing is known, and no cleanup ever removes it.
enum class StepState : uint8_t {
  kPartial,     ///< neither MANIFEST nor its copy: a save that never committed
  kCommitted,   ///< MANIFEST decodes and its copy is intact
  kDamaged,     ///< committed, but MANIFEST or its copy is missing or does not decode
  kUnreadable,  ///< the storage erred or contradicted itself reading its manifests
};
CKPT_EXPORT std::string_view StepStateName(StepState state);

/// A step found under the root.
struct CKPT_EXPORT StepInfo {
  int64_t step = 0;
  StepState state = StepState::kPartial;
  /// A manifest of the step decodes (from MANIFEST or its copy): it can be
  /// loaded and verified. True for every committed step, and for a damaged
  /// one whose other manifest copy is intact.
  bool committed = false;
  /// The manifest that decodes is MANIFEST.copy: MANIFEST itself is
  /// damaged or missing.
  bool manifest_from_copy = false;
  /// For a damaged step: what is wrong, naming the file and byte offset;
  /// for an unreadable one, the storage's error.
  std::string damage;
  int64_t bytes = 0;  ///< sum of file sizes
  int64_t created_unix_ns = 0;
  /// Steps its chunks are deltas against (their bases' bases are in their
  /// own StepInfo); empty for a step saved whole.
  std::vector<int64_t> delta_bases;
};

/// The result of a garbage-collection pass. Damaged steps are never removed
/// unless asked for by name (GcOptions::remove_damaged, `ckpt gc --damaged`).
struct CKPT_EXPORT GcReport {
  std::vector<int64_t> removed_steps;    ///< committed steps past retention
  std::vector<int64_t> removed_partial;  ///< uncommitted leftovers
  std::vector<int64_t> removed_damaged;  ///< damaged steps, only when asked for
  std::vector<int64_t> kept_damaged;     ///< damaged steps left in place
  /// Steps whose manifests the storage could not read (or contradicted
  /// itself about): never removed.
  std::vector<int64_t> kept_unreadable;
  /// Uncommitted steps kept because their claim names a save still running
  /// on this host (a live process); claims from other hosts are not kept.
  std::vector<int64_t> kept_running;
  /// Unfinished multipart uploads aborted (object stores): paths of the
  /// objects they were writing, under steps that are committed or gone.
  std::vector<std::string> aborted_uploads;
  /// Rank reports left in committed steps (paths): a leader stopped between
  /// the commit and removing them. The manifest holds all they said.
  std::vector<std::string> removed_reports;
  /// Committed steps past retention kept because a kept step's deltas need
  /// them (a reason line names the steps that pin each).
  std::vector<int64_t> kept_bases;
  /// One line per step removed or kept for damage, with the reason.
  std::vector<std::string> reasons;
  int64_t bytes_freed = 0;
};

/// What a checkpointer's saves of one level came to, since it was opened:
/// metrics to export (a failed save also fails its handle and is logged).
struct CKPT_EXPORT SaveCounts {
  int64_t started = 0;    ///< Save calls that began a save
  int64_t committed = 0;  ///< saves whose step this rank saw committed
  int64_t failed = 0;     ///< saves refused at Save, or failed later
  int64_t last_failed_step = -1;
  std::string last_error;  ///< the last failure's message
};

constexpr int64_t kLatestStep = -1;

/// Latest committed step under a root (LATEST, or a scan when LATEST is
/// damaged); NotFound when there is none.
CKPT_EXPORT absl::StatusOr<int64_t> LatestCommittedStep(Storage& storage);

/// The step the LATEST pointer names, as written, whether or not that step
/// is committed: NotFound when there is no LATEST, DataLoss when it is
/// damaged, FailedPrecondition when a newer ckpt wrote it.
/// (LatestCommittedStep is what a restore wants; this is for tools
/// that check the pointer itself.)
CKPT_EXPORT absl::StatusOr<int64_t> ReadLatestPointer(Storage& storage);

/// Loads `target` from a committed step without opening a Checkpointer (no
/// side effects on the root). `rank` selects per-rank blobs.
CKPT_EXPORT absl::StatusOr<LoadStats> LoadCheckpoint(Storage& storage, const State& target, int64_t step = kLatestStep,
                                                     int rank = 0, const LoadOptions& options = {});

/// A committed step opened once for reading: its manifest is read and
/// checked when it opens (from MANIFEST.copy if MANIFEST is damaged), then
/// each Load reads only the blocks its target needs, as LoadCheckpoint does,
/// without reading the manifest again. For loading a step piece by piece
/// (one tensor at a time, as the exporters do). Loads may run at once.
class CKPT_EXPORT StepReader {
 public:
  /// Opens `step` of the root (kLatestStep: the latest committed one);
  /// NotFound when it is not committed there. `allow_fallback`: as
  /// LoadOptions::allow_fallback, the newest older committed step that reads
  /// when this one cannot (step() and damage_note() say so).
  static absl::StatusOr<std::unique_ptr<StepReader>> Open(std::shared_ptr<Storage> storage, int64_t step = kLatestStep,
                                                          bool allow_fallback = false);
  ~StepReader();
  StepReader(const StepReader&) = delete;
  StepReader& operator=(const StepReader&) = delete;

  int64_t step() const;
  /// The step's metadata (SaveOptions::metadata of its save).
  const std::map<std::string, std::string>& metadata() const;
  /// Its tensors (global shapes), ascending by name.
  const std::vector<TensorSpec>& tensors() const;
  /// Damage met while opening (the manifest read from its copy), or empty.
  const std::string& damage_note() const;
  /// Fills `target` (`rank` selects per-rank blobs whose source rank is
  /// unspecified).
  absl::StatusOr<LoadStats> Load(const State& target, int rank = 0, const LoadOptions& options = {}) const;

 private:
  struct Impl;
  explicit StepReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Whether `name` is one of a checkpoint root's own top-level entries:
/// LATEST (and the temporary files a backend writes it through) or a step
/// directory ("step-0000000100"). For tools that must not take a directory
/// holding anything else for a root, or must remove only what a root holds.
CKPT_EXPORT bool IsCheckpointRootEntry(std::string_view name);

/// One step directory's state, as ListCheckpointSteps lists it (kUnreadable
/// when the storage could not read it), examining that step alone.
/// NotFound when it does not exist.
CKPT_EXPORT absl::StatusOr<StepInfo> DescribeCheckpointStep(Storage& storage, int64_t step);

/// All step directories under a root, ascending.
CKPT_EXPORT absl::StatusOr<std::vector<StepInfo>> ListCheckpointSteps(Storage& storage);

/// What a garbage-collection pass over a root may remove.
struct CKPT_EXPORT GcOptions {
  RetentionPolicy retention;
  bool dry_run = false;
  /// Also remove uncommitted steps newer than the latest committed one
  /// (safe only when no save is running, e.g. when a job starts).
  bool remove_newer_partial = false;
  /// Remove damaged steps too. Never implied: a damaged step is a committed
  /// checkpoint that may still be repaired.
  bool remove_damaged = false;
  /// Steps never removed (saves of this process in flight or just made).
  std::set<int64_t> protect;
  /// Look for rank reports left after the commit in every kept committed
  /// step (one listing each), not only in the newest: what `ckpt gc` does.
  /// A job's start looks at the newest, the one a leader that died while
  /// publishing leaves them in.
  bool sweep_every_step = false;
};

/// Applies retention to intact committed steps and removes uncommitted
/// leftovers, without opening a Checkpointer (what `ckpt gc` runs); damaged
/// steps are kept (and listed) unless `remove_damaged`, unreadable ones
/// always. The latest committed step is always kept. Each removal is
/// un-committed first (copy, then MANIFEST), so a crash mid-way leaves a
/// partial step.
CKPT_EXPORT absl::StatusOr<GcReport> CollectGarbage(Storage& storage, const GcOptions& options);

/// One rank's view of a checkpoint root. Thread-safe; Save calls are
/// serialized (a Save waits until the previous one has left the staging
/// arena).
class CKPT_EXPORT Checkpointer {
 public:
  static absl::StatusOr<std::unique_ptr<Checkpointer>> Open(CheckpointerOptions options);
  ~Checkpointer();

  /// Copies `state` into the staging arena and returns; the rest happens in
  /// the background. Fails fast on invalid input (bad boxes, a step that is
  /// already committed, the memory level asked for without one); later
  /// failures arrive through the handle. The levels commit independently.
  absl::StatusOr<SaveHandle> Save(int64_t step, const State& state, const SaveOptions& options = {});

  /// Fills the target's shards and blobs from `step` (kLatestStep: the
  /// latest committed). The target may be cut differently from the save.
  absl::StatusOr<LoadStats> Load(const State& target, int64_t step = kLatestStep, const LoadOptions& options = {});

  /// Latest committed step (of the durable level); NotFound when there is
  /// none.
  absl::StatusOr<int64_t> LatestStep();
  /// Latest committed step of `level`: for the memory level, what this
  /// process's memory or its peers' say (FailedPrecondition without
  /// CheckpointerOptions::memory_storage).
  absl::StatusOr<int64_t> LatestStep(SaveLevel level);
  absl::StatusOr<std::vector<StepInfo>> ListSteps();

  /// Applies retention and removes uncommitted leftovers older than the
  /// latest committed step. With `dry_run` only reports.
  absl::StatusOr<GcReport> CollectGarbage(bool dry_run = false);

  /// Waits for every save this checkpointer started.
  absl::Status WaitAll();

  /// Counts of this checkpointer's saves at `level` (zeros for a level it
  /// does not have).
  SaveCounts Counts(SaveLevel level = SaveLevel::kDurable) const;

  /// Changes CheckpointerOptions::delta at both levels from the next save
  /// on (chain 0 turns deltas off: later saves are whole). InvalidArgument
  /// for a negative chain or a ratio that is not positive.
  absl::Status SetDeltaOptions(const DeltaOptions& delta);

  Storage& storage();
  /// The memory level's storage; null without one.
  Storage* memory_storage();
  const CheckpointerOptions& options() const;

 private:
  class Impl;
  Checkpointer(std::unique_ptr<Impl> impl, std::unique_ptr<Impl> memory);
  Impl* For(SaveLevel level) const;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<Impl> memory_;  // null without a memory level
};

}  // namespace ckpt

#endif  // CKPT_CHECKPOINTER_H_

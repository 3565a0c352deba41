// Saving and checking synthetic training states with one simulated rank per
// mesh position. Shared by `ckpt synth`, `ckpt restore-check`, `ckpt demo`
// and the benchmarks.
#ifndef CKPT_TOOLS_SYNTH_JOB_H_
#define CKPT_TOOLS_SYNTH_JOB_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/checkpointer.h"
#include "ckpt/communicator.h"
#include "ckpt/mesh.h"
#include "ckpt/plan.h"
#include "ckpt/synthetic.h"

namespace ckpt::tools {

struct SynthJobOptions {
  std::string uri;
  SyntheticOptions model;
  Mesh mesh;
  Codec codec = Codec::kNone;
  int zstd_level = 1;
  SaveEngineOptions engine;
  RetentionPolicy retention;
  /// Delta saves (CheckpointerOptions::delta).
  DeltaOptions delta;
  bool direct_io = true;
  double commit_timeout_s = 600;
  /// Saves may name a step at or below the latest committed one.
  bool allow_older_step = false;
  /// >= 0: this process is that rank only (one process per rank, e.g. under
  /// mpirun); -1: every rank of the mesh, as threads of this process.
  int only_rank = -1;
  /// The job's communicator when ranks are processes (replica agreement and
  /// the leader's cleanup at open are collective then).
  std::shared_ptr<Communicator> communicator;
};

/// Figures of one save across all simulated ranks.
struct SynthSaveResult {
  int64_t step = 0;
  int ranks = 0;
  int64_t bytes_logical = 0;
  int64_t bytes_stored = 0;
  int64_t bytes_written = 0;
  double stall_max_s = 0;    ///< longest single-rank stall
  double stall_total_s = 0;  ///< sum over ranks (they share one process here)
  double write_s = 0;        ///< first rank's Save call to the last rank durable
  double commit_s = 0;       ///< first rank's Save call to the step committed
                             ///< (both include generating later ranks' values)
  double generate_s = 0;     ///< time spent producing the synthetic values
};

class SyntheticJob {
 public:
  static absl::StatusOr<std::unique_ptr<SyntheticJob>> Create(SynthJobOptions options);

  /// Generates every rank's state (values seeded by `seed`) and saves it.
  /// Returns once all ranks are staged; Finish() waits for the commit.
  absl::Status SaveAsync(int64_t step, uint64_t seed);
  bool InFlight() const { return !handles_.empty(); }
  /// True when every rank's save of the in-flight step has finished.
  bool Done() const;
  absl::StatusOr<SynthSaveResult> Finish();

  /// Figures known once SaveAsync returned (stalls, logical bytes).
  const SynthSaveResult& pending() const { return pending_; }
  const SyntheticModel& model() const { return model_; }
  /// The values the last rank saved came from: all of the state when this
  /// process runs one rank (they stay allocated between saves, as a
  /// trainer's do).
  std::vector<std::span<const std::byte>> Values() const;
  Checkpointer& leader() { return *ranks_.front(); }
  SaveEngine& engine() { return *engine_; }

 private:
  SyntheticJob() = default;
  SynthJobOptions options_;
  SyntheticModel model_;
  // Per entry of ranks_: the boxes it writes (tensor index, box), the ones
  // to fill with values (the Checkpointer, given the layouts, chooses the
  // same by the same rule). A process running one rank plans that rank
  // alone (PlanRankWrites); one simulating several plans the mesh once
  // (PlanSave).
  std::vector<std::vector<std::pair<int32_t, Box>>> writes_;
  std::shared_ptr<SaveEngine> engine_;
  std::vector<std::unique_ptr<Checkpointer>> ranks_;
  std::vector<int> rank_ids_;  // mesh rank of each entry of ranks_
  std::vector<SaveHandle> handles_;
  SynthSaveResult pending_;
  std::vector<double> rank_start_;
  std::vector<std::vector<std::byte>> buffers_;  // the values being saved
  std::optional<uint64_t> buffers_seed_;         // what buffers_ hold (one rank)
  // The replicas a rank holds but does not write: never read, never filled.
  struct HeldBuffer {
    std::unique_ptr<std::byte[]> data;
    size_t size = 0;
  };
  std::vector<HeldBuffer> held_;
};

struct RestoreCheckResult {
  int64_t step = 0;
  int ranks = 0;
  int64_t tensors = 0;
  int64_t elements = 0;
  int64_t mismatches = 0;
  int64_t bytes_read = 0;
  int64_t bytes_decoded = 0;
  int64_t bytes_needed = 0;
  double seconds = 0;          ///< the whole check: loads and comparisons
  double load_seconds = 0;     ///< the load calls alone (target buffers already allocated)
  int64_t loads = 0;           ///< load calls: ranks x passes (load_seconds sums each rank's median)
  std::string first_mismatch;  ///< tensor, box and index of the first one
  std::string saved_mesh;
  std::string damage_note;  ///< damage met on the way to the step (LoadStats::damage_note)
  /// Where the bytes came from, summed over the ranks (LoadStats): a
  /// cooperative load reads each stored byte about once from storage and
  /// passes it between ranks.
  bool cooperative = false;
  int64_t bytes_from_storage = 0;
  int64_t bytes_from_peers = 0;
  int64_t bytes_for_peers = 0;
  int64_t peer_failovers = 0;
};

/// Loads `step` (kLatestStep for the latest) of a checkpoint written by
/// `ckpt synth` onto `mesh`, one simulated rank at a time, and compares every
/// element with the generator. The model is rebuilt from the manifest's
/// metadata. With `load_passes` > 1 each rank is loaded that many times
/// into the same buffers before the check, and the median of its times
/// counts: a benchmark's figure on a device whose speed wanders.
absl::StatusOr<RestoreCheckResult> RestoreCheck(Storage& storage, int64_t step, const Mesh& mesh,
                                                const LoadOptions& options = {}, int load_passes = 1);

/// The same for one rank of a job whose ranks are separate processes: every
/// rank calls it together; the leader reads the manifest once and hands each
/// rank its part through `comm`. The leader's result sums all ranks. The
/// targets are laid out over `mesh`; with an `exchange` (over `comm`) the
/// load is cooperative where the layout replicates data.
absl::StatusOr<RestoreCheckResult> RestoreCheckCollective(std::shared_ptr<Storage> storage, int64_t step,
                                                          const Mesh& mesh, std::shared_ptr<Communicator> comm,
                                                          const LoadOptions& options = {},
                                                          std::shared_ptr<LoadExchange> exchange = nullptr);

/// Sums per-rank save figures on the leader (bytes add up; times take the
/// maximum). Collective.
absl::StatusOr<SynthSaveResult> CombineSaveResults(Communicator& comm, const SynthSaveResult& mine);

/// The generator options and seed recorded by `ckpt synth` in a step's
/// metadata.
absl::StatusOr<SyntheticOptions> SyntheticOptionsOf(const std::map<std::string, std::string>& metadata, int64_t step,
                                                    uint64_t* seed);

/// "1.5 GiB", "12.0 MiB".
std::string HumanBytes(double bytes);

}  // namespace ckpt::tools

#endif  // CKPT_TOOLS_SYNTH_JOB_H_

// Commits of laid-out states (State::AddLayout): each rank plans alone what
// it writes (PlanRankWrites) and files a summary of its data file
// (format/rank_summary.h); the leader builds the step's manifest from the
// layouts' rules (SaveManifestByRules), once per change of layout, and takes
// from each summary only what the rules cannot know.
#ifndef CKPT_CORE_RULE_COMMIT_H_
#define CKPT_CORE_RULE_COMMIT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/mesh.h"
#include "ckpt/state.h"
#include "format/manifest.h"
#include "format/rank_summary.h"

namespace ckpt {

/// What fixes the structure of every rank's data file in a save of layouts.
struct SaveRules {
  std::vector<TensorLayout> layouts;
  Mesh mesh;
  uint64_t block_size = 0;
  int max_tiles = 1;
  uint64_t hash = 0;  ///< RulesHash of the above
};

/// A hash of layouts, mesh, block size and tiling: equal on two ranks when
/// their data files follow the same rules.
uint64_t RulesHash(const std::vector<TensorLayout>& layouts, const Mesh& mesh, uint64_t block_size, int max_tiles);

/// One rank's side of a save of a laid-out state: the rules it saves by and,
/// per shard of the state, whether it writes it. Kept from save to save
/// while the layouts do not change (the rules hash), so a steady state plans
/// nothing.
class RankRules {
 public:
  /// For `state` (LaidOut()) saved by rank `rank` of `world_size` with this
  /// block size and tiling. InvalidArgument when the state's mesh or rank
  /// is not the checkpointer's, or `expected_mesh` (the options' mesh) is
  /// set and differs.
  absl::Status Update(const State& state, int rank, int world_size, const std::optional<Mesh>& expected_mesh,
                      uint64_t block_size, int max_tiles);
  const std::shared_ptr<const SaveRules>& rules() const { return rules_; }
  /// Per shard of the state given to the last Update: true when this rank
  /// writes it.
  const std::vector<bool>& writes() const { return writes_; }
  /// Times Update planned (the layouts changed).
  int64_t plans() const { return plans_; }

 private:
  std::shared_ptr<const SaveRules> rules_;
  std::vector<int8_t> writes_by_layout_;  // -1: holds nothing
  std::vector<bool> writes_;
  int64_t plans_ = 0;
};

/// The leader's side: the manifest the rules give, built once per rules
/// hash and filled in place for each save.
class RuleManifest {
 public:
  /// Builds the rules' manifest unless it is the one for `rules` already.
  absl::Status Prepare(const SaveRules& rules);
  /// The step's manifest from the summaries of every rank (index = rank):
  /// each must be bound to this step, save and rules (else Aborted, naming
  /// the rank) and its file must hold the blocks the rules give its rank
  /// plus its blobs' (else DataLoss). Takes each file's size, index and
  /// container hash, the blobs and the timings; step, creation time,
  /// library version, codec and metadata come from `head` (the leader's own
  /// report). Valid until the next call. Prepare first.
  absl::StatusOr<Manifest*> Fill(const Manifest& head, uint64_t save_id, const std::vector<RankSummary>& summaries);
  /// Seconds the last Prepare that built took.
  double build_seconds() const { return build_seconds_; }

 private:
  uint64_t hash_ = 0;
  bool ready_ = false;
  Manifest manifest_;
  std::vector<uint64_t> shard_blocks_;  // per rank, from the rules
  std::vector<int64_t> shard_bytes_;    // per rank
  double build_seconds_ = 0;
};

/// The blobs a save of `state` writes after its shards, as a summary lists
/// them (load targets are not saved).
std::vector<SummaryBlob> SummaryBlobsOf(const State& state);
/// Puts what a summary says of a written data file into `s`.
void SummarizeFile(const ManifestFile& file, RankSummary* s);

}  // namespace ckpt

#endif  // CKPT_CORE_RULE_COMMIT_H_

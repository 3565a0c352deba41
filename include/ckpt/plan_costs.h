// What planning a save and a resharded restart costs at any scale, measured
// on the library's own planner with no tensor data: the manifest a save's
// leader commits, built from the layouts' rules; the leader's checks; and
// each rank of the new mesh reading its part of that manifest and planning
// its own load. What `ckpt plan` prints.
#ifndef CKPT_PLAN_COSTS_H_
#define CKPT_PLAN_COSTS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/export.h"
#include "ckpt/mesh.h"
#include "ckpt/plan.h"

namespace ckpt {

struct CKPT_EXPORT PlanCostOptions {
  uint64_t block_size = 1 << 20;  ///< raw bytes per uncompressed block
  int max_tiles = 8;              ///< column tiles a shard is cut into at most
  /// Ranks of the new mesh that plan their own load, evenly spread over it
  /// (the last one included).
  int64_t rank_samples = 16;
  /// > 0: the restart's ranks sit this many to a host (ranks 0..N-1 on the
  /// first), and the cooperative load is planned too: each needed byte
  /// read from storage by one of the ranks that need it.
  int64_t ranks_per_host = 0;
};

/// A cooperative load as planned (not measured): what the restart reads
/// from storage, against every rank reading what it needs itself.
struct CKPT_EXPORT CoopPlanFigures {
  int64_t hosts = 0;
  int64_t pieces = 0;             ///< pieces with a reader of their own
  uint64_t bytes_once = 0;        ///< raw bytes read from storage, each once
  uint64_t bytes_every_rank = 0;  ///< what every rank reading its own reads
  uint64_t host_bytes_max = 0;    ///< the most one host reads from storage
  double plan_s = 0;              ///< planning it for every rank on this core
};

/// Seconds are this process's, on one core.
struct CKPT_EXPORT PlanCosts {
  // The save, on the old mesh:
  RuleManifestStats save;  ///< the manifest from the layouts' rules
  double save_plan_s = 0;  ///< building it
  double cover_s = 0;      ///< the leader's exact-cover check of the chunks listed one by one
  double encode_s = 0;
  int64_t manifest_bytes = 0;
  // The restart, on the new mesh:
  double decode_s = 0;  ///< its leader decoding and checking the whole manifest (grids kept)
  /// Per sampled rank (rank_samples of them): the rank, the seconds it
  /// took to read its part of the manifest and plan its load, the bytes of
  /// the manifest it read.
  std::vector<int64_t> sampled_ranks;
  std::vector<double> rank_plan_s;
  std::vector<double> rank_manifest_bytes;
  uint64_t rank_manifest_reads_max = 0;  ///< most ranged reads one rank made
  /// What the restart waits for: the save's plan and manifest, the leader's
  /// check, and the slowest sampled rank's own plan.
  double total_s = 0;
  /// Every rank of the new mesh planned here (not a step of a restart: for
  /// the read amplification over the whole mesh).
  LoadPlanStats load;
  double load_plan_s = 0;
  /// With PlanCostOptions::ranks_per_host > 0.
  CoopPlanFigures coop;
};

/// Measures the planning of a save of `saved` over `from` and its restart
/// onto `target` over `to`. InvalidArgument for layouts that do not fit
/// their mesh or that differ between the two (dtype, shape).
CKPT_EXPORT absl::StatusOr<PlanCosts> MeasurePlanCosts(const std::vector<TensorLayout>& saved, const Mesh& from,
                                                       const std::vector<TensorLayout>& target, const Mesh& to,
                                                       const PlanCostOptions& options = {});

}  // namespace ckpt

#endif  // CKPT_PLAN_COSTS_H_

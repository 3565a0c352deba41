// Who reads what in a cooperative load: the blocks a laid-out target needs,
// each with the ranks that need it, and one reader per piece of a run of
// blocks chosen among them. The choice depends on the piece and its needers
// alone, so a rank that knows only its own part of the manifest gives the
// pieces it needs the readers every other rank gives them: nothing about the
// ranks' targets is gathered. Pieces lie on a grid of cells over each data
// file; the needers of a piece take the file's cells in turn, alternating
// hosts: each host reads its share of every replicated run, give or take a
// cell.
#ifndef CKPT_PLAN_COOP_READS_H_
#define CKPT_PLAN_COOP_READS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/mesh.h"
#include "format/manifest.h"

namespace ckpt {

/// A run of blocks of one data file that the same ranks need.
struct CoopSegment {
  uint32_t file = 0;             ///< index into the manifest's files
  uint64_t first_block = 0;      ///< inclusive, in the file's block numbering
  uint64_t last_block = 0;       ///< inclusive
  uint64_t raw_bytes = 0;        ///< raw (decoded) bytes of its blocks
  std::vector<int32_t> needers;  ///< ascending
  int32_t reader = -1;           ///< one of needers
};

struct CoopReadOptions {
  /// Runs are cut into pieces at a grid of cells of this many raw bytes
  /// (whole blocks) over each data file, each piece with a reader of its
  /// own: large replicated tensors are then read by several hosts, and a
  /// receiver gets the first piece while later ones are read.
  uint64_t max_segment_bytes = uint64_t{4} << 20;
  /// Target tensors the manifest lacks are passed over (the manifest is one
  /// rank's part) instead of failing the plan.
  bool manifest_is_part = false;
};

struct CoopReadPlan {
  std::vector<CoopSegment> segments;      ///< by file, then block
  uint64_t bytes_once = 0;                ///< raw bytes read from storage, each once
  uint64_t bytes_every_needer = 0;        ///< what every rank reading its own would read
  std::vector<uint64_t> bytes_by_reader;  ///< per rank
  std::vector<std::string> hosts;         ///< distinct hosts, ascending
  std::vector<uint64_t> bytes_by_host;    ///< parallel to hosts
};

/// Plans the cooperative load of `target` (tensor layouts over `mesh`) from
/// `m`. `host_of_rank[r]` names rank r's host (its failure domain); ranks of
/// one host share the host's storage link. Fails as PlanMeshLoad does when a
/// target tensor is missing or differs, and when `host_of_rank` does not
/// name every rank's host.
absl::StatusOr<CoopReadPlan> PlanCooperativeReads(const Manifest& m, const std::vector<TensorLayout>& target,
                                                  const Mesh& mesh, const std::vector<std::string>& host_of_rank,
                                                  const CoopReadOptions& options = {});

}  // namespace ckpt

#endif  // CKPT_PLAN_COOP_READS_H_

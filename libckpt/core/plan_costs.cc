#include "core/plan_costs.h"

#include <algorithm>
#include <string>
#include <utility>

#include "ckpt/plan_costs.h"
#include "ckpt/state.h"
#include "format/manifest.h"
#include "pipeline/loader.h"
#include "plan/coop_reads.h"
#include "plan/cover.h"
#include "plan/load_plan.h"
#include "plan/rule_manifest.h"
#include "util/clock.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt {

absl::StatusOr<int64_t> PlanRankFromManifestPart(const ManifestRangeReader& read, uint64_t size,
                                                 const std::vector<TensorLayout>& target, const Mesh& mesh,
                                                 int64_t rank, ManifestPartStats* stats) {
  static std::byte nowhere[1];
  State st;
  CKPT_RETURN_IF_ERROR(st.SetMesh(mesh, rank));
  for (const TensorLayout& layout : target) CKPT_RETURN_IF_ERROR(st.AddLayout(layout, nowhere));
  ManifestWants wants;
  for (const Shard& s : st.shards()) wants.boxes.push_back({s.spec.fqn, s.box});
  CKPT_ASSIGN_OR_RETURN(Manifest part, ReadManifestPart(read, size, wants, "manifest", stats));
  CKPT_ASSIGN_OR_RETURN(LoadPlanCounts plan, PlanLoad(part, st, static_cast<int>(rank)));
  return plan.chunks;
}

absl::StatusOr<PlanCosts> MeasurePlanCosts(const std::vector<TensorLayout>& saved, const Mesh& from,
                                           const std::vector<TensorLayout>& target, const Mesh& to,
                                           const PlanCostOptions& options) {
  PlanCosts c;
  // The save: every chunk's writer and blocks, as the manifest the leader
  // commits, from the layouts' rules (grids; no object per chunk).
  double t = NowSeconds();
  CKPT_ASSIGN_OR_RETURN(Manifest built,
                        SaveManifestByRules(saved, from, options.block_size, options.max_tiles, &c.save));
  c.save_plan_s = NowSeconds() - t;
  // The leader's exact-cover check, on the tensors listed chunk by chunk (a
  // grid covers its tensor exactly).
  t = NowSeconds();
  for (const ManifestTensor& mt : built.tensors) {
    if (mt.grid.has_value()) continue;
    std::vector<Box> boxes;
    boxes.reserve(mt.chunks.size());
    for (const ManifestChunk& chunk : mt.chunks) boxes.push_back(chunk.box);
    CKPT_RETURN_IF_ERROR(CheckExactCover(mt.spec, boxes));
  }
  c.cover_s = NowSeconds() - t;
  t = NowSeconds();
  const std::string encoded = EncodeManifest(built);
  c.encode_s = NowSeconds() - t;
  c.manifest_bytes = static_cast<int64_t>(encoded.size());
  built = Manifest();
  // The leader of the restart checks the whole manifest (every cell's file
  // and blocks) without expanding its grids.
  t = NowSeconds();
  CKPT_ASSIGN_OR_RETURN(Manifest decoded,
                        DecodeManifest(encoded, "planned manifest", kMaxManifestChunks, GridChunks::kGridsOnly));
  c.decode_s = NowSeconds() - t;
  // Each sampled rank of the new mesh reads its part and plans its own load.
  const int64_t n = to.NumRanks();
  const int64_t samples = std::min(std::max<int64_t>(1, options.rank_samples), n);
  auto read = [&](uint64_t off, uint64_t len) -> absl::StatusOr<std::string> { return encoded.substr(off, len); };
  for (int64_t k = 0; k < samples; ++k) {
    const int64_t rank = samples == 1 ? 0 : k * (n - 1) / (samples - 1);
    t = NowSeconds();
    ManifestPartStats stats;
    CKPT_RETURN_IF_ERROR(PlanRankFromManifestPart(read, encoded.size(), target, to, rank, &stats).status());
    c.sampled_ranks.push_back(rank);
    c.rank_plan_s.push_back(NowSeconds() - t);
    c.rank_manifest_bytes.push_back(static_cast<double>(stats.bytes_read));
    c.rank_manifest_reads_max = std::max(c.rank_manifest_reads_max, stats.reads);
  }
  c.total_s = c.save_plan_s + c.cover_s + c.encode_s + c.decode_s +
              *std::max_element(c.rank_plan_s.begin(), c.rank_plan_s.end());
  // Every rank's load planned on this one core, for the read amplification
  // over the whole mesh.
  t = NowSeconds();
  CKPT_ASSIGN_OR_RETURN(c.load, PlanMeshLoad(decoded, target, to));
  c.load_plan_s = NowSeconds() - t;
  if (options.ranks_per_host > 0) {
    std::vector<std::string> hosts;
    hosts.reserve(static_cast<size_t>(to.NumRanks()));
    for (int64_t r = 0; r < to.NumRanks(); ++r) hosts.push_back(StrCat("host", r / options.ranks_per_host));
    t = NowSeconds();
    CKPT_ASSIGN_OR_RETURN(CoopReadPlan coop, PlanCooperativeReads(decoded, target, to, hosts));
    c.coop.plan_s = NowSeconds() - t;
    c.coop.hosts = static_cast<int64_t>(coop.hosts.size());
    c.coop.pieces = static_cast<int64_t>(coop.segments.size());
    c.coop.bytes_once = coop.bytes_once;
    c.coop.bytes_every_rank = coop.bytes_every_needer;
    for (uint64_t b : coop.bytes_by_host) c.coop.host_bytes_max = std::max(c.coop.host_bytes_max, b);
  }
  return c;
}

}  // namespace ckpt

// ckpt plan: the save plan, manifest and load plan of a simulated model at
// any scale, without tensor data.
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>

#include "ckpt/plan.h"
#include "ckpt/synthetic.h"
#include "ckpt/version.h"
#include "commands.h"
#include "common/cli.h"
#include "common/synth_job.h"
#include "plan/cover.h"
#include "plan/load_plan.h"
#include "plan/rule_manifest.h"
#include "util/clock.h"
#include "util/errors.h"
#include "util/json.h"

namespace ckpt::tools {
namespace {

// What ranks of the target mesh read of the manifest and how long each takes
// to plan its own load from it: the head, the directory, the records of its
// tensors and the file records of the chunks it meets (ReadManifestPart),
// then the blocks of every chunk it meets. `samples` ranks evenly spread over
// the mesh, the last one included.
struct RankPlanning {
  int64_t ranks = 0;
  std::vector<double> seconds;
  std::vector<double> bytes;
  uint64_t reads_max = 0;
};

absl::StatusOr<RankPlanning> PlanRanksFromParts(const std::string& manifest, const SyntheticModel& target,
                                                const Mesh& mesh, int64_t samples) {
  RankPlanning out;
  const int64_t n = mesh.NumRanks();
  samples = std::min(samples, n);
  for (int64_t k = 0; k < samples; ++k) {
    const int64_t rank = samples == 1 ? 0 : k * (n - 1) / (samples - 1);
    const double t0 = NowSeconds();
    ManifestPartStats stats;
    CKPT_RETURN_IF_ERROR(
        PlanRankFromManifestPart(
            [&](uint64_t off, uint64_t len) -> absl::StatusOr<std::string> { return manifest.substr(off, len); },
            manifest.size(), target, mesh, rank, &stats)
            .status());
    out.seconds.push_back(NowSeconds() - t0);
    out.bytes.push_back(static_cast<double>(stats.bytes_read));
    out.reads_max = std::max(out.reads_max, stats.reads);
    ++out.ranks;
  }
  return out;
}

double Max(const std::vector<double>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }
double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// What `ckpt plan` measures: the phases' times and sizes of a save on one
// mesh and a restart onto another.
struct PlanFigures {
  std::optional<SyntheticModel> model, target;
  RuleManifestStats rules;
  int64_t writer_bytes_max = 0, writer_bytes_total = 0;
  double t_save_plan = 0, t_manifest = 0, t_encode = 0, t_decode = 0, t_load_plan = 0, total = 0, wall = 0, rss = 0;
  size_t manifest_bytes = 0;
  std::optional<RankPlanning> per_rank;
  std::optional<LoadPlanStats> load;
};

// A failed phase: its message and the exit code it calls for.
struct PlanFailure {
  int exit;
  absl::Status status;
};

std::optional<PlanFailure> MeasurePlan(const SyntheticOptions& so, const Mesh& from, const Mesh& to, int64_t block,
                                       int64_t tiles, int64_t rank_samples, PlanFigures& f) {
  const double t0 = NowSeconds();
  auto model = BuildSyntheticModel(so, from);
  if (!model.ok()) return PlanFailure{kExitUsage, model.status()};
  f.model = std::move(*model);
  // The save: every chunk's writer and blocks, as the manifest the leader
  // commits, from the layouts' rules (grids; no object per chunk).
  double t = NowSeconds();
  auto built =
      SaveManifestByRules(f.model->tensors, from, static_cast<uint64_t>(block), static_cast<int>(tiles), &f.rules);
  if (!built.ok()) return PlanFailure{kExitProblem, built.status()};
  f.t_save_plan = NowSeconds() - t;
  f.writer_bytes_max = *std::max_element(f.rules.bytes_by_rank.begin(), f.rules.bytes_by_rank.end());
  for (int64_t b : f.rules.bytes_by_rank) f.writer_bytes_total += b;

  // The leader's exact-cover check, on the tensors listed chunk by chunk (a
  // grid covers its tensor exactly).
  t = NowSeconds();
  for (const ManifestTensor& mt : built->tensors) {
    if (mt.grid.has_value()) continue;
    std::vector<Box> boxes;
    boxes.reserve(mt.chunks.size());
    for (const ManifestChunk& c : mt.chunks) boxes.push_back(c.box);
    if (absl::Status cover = CheckExactCover(mt.spec, boxes); !cover.ok()) return PlanFailure{kExitProblem, cover};
  }
  f.t_manifest = NowSeconds() - t;

  t = NowSeconds();
  const std::string encoded = EncodeManifest(*built);
  f.t_encode = NowSeconds() - t;
  f.manifest_bytes = encoded.size();
  *built = Manifest();
  // The leader of the restart checks the whole manifest (every cell's file
  // and blocks) without expanding its grids.
  t = NowSeconds();
  auto decoded = DecodeManifest(encoded, "simulated manifest", kMaxManifestChunks, GridChunks::kGridsOnly);
  f.t_decode = NowSeconds() - t;
  if (!decoded.ok()) return PlanFailure{kExitProblem, decoded.status()};

  auto target = BuildSyntheticModel(so, to);
  if (!target.ok()) return PlanFailure{kExitUsage, target.status()};
  f.target = std::move(*target);
  // Each rank of the new mesh reads its part and plans its own load.
  auto per_rank = PlanRanksFromParts(encoded, *f.target, to, std::max<int64_t>(1, rank_samples));
  if (!per_rank.ok()) return PlanFailure{kExitProblem, per_rank.status()};
  f.per_rank = std::move(*per_rank);
  // The planning a save and a restart wait for: the save's plan and
  // manifest, the leader's check, and the slowest rank's own load plan.
  f.total = f.t_save_plan + f.t_manifest + f.t_encode + f.t_decode + Max(f.per_rank->seconds);

  // Every rank's load planned on this one core, for the read amplification
  // over the whole mesh (a figure of this tool, not a step of a restart).
  t = NowSeconds();
  auto load = PlanMeshLoad(*decoded, f.target->tensors, to);
  if (!load.ok()) return PlanFailure{kExitProblem, load.status()};
  f.load = std::move(*load);
  f.t_load_plan = NowSeconds() - t;
  f.wall = NowSeconds() - t0;
  f.rss = PeakRssBytes();
  return std::nullopt;
}

void WritePlanJson(JsonWriter& w, const Mesh& from, const Mesh& to, const PlanFigures& f) {
  const LoadPlanStats& load = *f.load;
  const RankPlanning& per_rank = *f.per_rank;
  w.BeginObject()
      .Field("ranks_from", from.NumRanks())
      .Field("ranks_to", to.NumRanks())
      .Field("mesh_from", from.ToString())
      .Field("mesh_to", to.ToString())
      .Field("params", f.model->params)
      .Field("tensors", static_cast<int64_t>(f.model->tensors.size()))
      .Field("layers", f.model->layers)
      .Field("chunks", f.rules.chunks)
      .Field("manifest_bytes", static_cast<int64_t>(f.manifest_bytes))
      .Field("save_plan_s", f.t_save_plan)
      .Field("manifest_and_cover_s", f.t_manifest)
      .Field("encode_s", f.t_encode)
      .Field("decode_s", f.t_decode)
      .Field("load_plan_s", f.t_load_plan)
      .Field("total_s", f.total)
      .Field("wall_s", f.wall)
      .Field("grid_tensors", f.rules.grid_tensors)
      .Field("listed_chunks", f.rules.listed_chunks)
      .Field("writer_bytes_max", f.writer_bytes_max)
      .Field("writer_bytes_mean", static_cast<double>(f.writer_bytes_total) / static_cast<double>(from.NumRanks()))
      .Field("peak_rss_bytes", f.rss)
      .Field("distinct_target_boxes", load.distinct_boxes)
      .Field("overlaps", load.overlaps)
      .Field("read_requests", load.block_ranges)
      .Field("bytes_needed", load.bytes_needed)
      .Field("bytes_read", load.bytes_read)
      .Field("read_amplification", load.Amplification())
      .Field("ranks_sampled", per_rank.ranks)
      .Field("rank_manifest_bytes_max", Max(per_rank.bytes))
      .Field("rank_manifest_bytes_median", Median(per_rank.bytes))
      .Field("rank_manifest_reads_max", static_cast<int64_t>(per_rank.reads_max))
      .Field("rank_plan_s_max", Max(per_rank.seconds))
      .Field("rank_plan_s_median", Median(per_rank.seconds))
      .EndObject();
}

// The tensors whose load reads the most bytes beyond those it needs.
void PrintPerTensor(const PlanFigures& f) {
  const LoadPlanStats& load = *f.load;
  std::vector<size_t> order(f.target->tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto excess = [&](size_t i) { return load.per_tensor[i].second - load.per_tensor[i].first; };
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return excess(a) > excess(b); });
  std::printf("\n%-52s %12s %12s %8s\n", "tensor (most extra bytes first)", "needed", "read", "ratio");
  for (size_t k = 0; k < std::min<size_t>(15, order.size()); ++k) {
    const size_t i = order[k];
    const auto [needed, read] = load.per_tensor[i];
    if (read <= needed) break;
    std::printf("%-52s %12s %12s %8.3f\n", f.target->tensors[i].spec.fqn.c_str(),
                HumanBytes(static_cast<double>(needed)).c_str(), HumanBytes(static_cast<double>(read)).c_str(),
                needed ? static_cast<double>(read) / static_cast<double>(needed) : 0.0);
  }
}

void PrintPlanText(const Mesh& from, const Mesh& to, bool adam, const PlanFigures& f) {
  const LoadPlanStats& load = *f.load;
  const RankPlanning& per_rank = *f.per_rank;
  std::printf("model: %.3g params, %d layers, %zu tensors%s\n", static_cast<double>(f.model->params), f.model->layers,
              f.model->tensors.size(), adam ? " (with Adam state)" : "");
  std::printf(
      "save on %s (%lld ranks): %lld chunks (%lld tensors as grids, %lld chunks listed), planned with its "
      "manifest in %.3f s; the most bytes one rank writes %s (mean %s)\n",
      from.ToString().c_str(), static_cast<long long>(from.NumRanks()), static_cast<long long>(f.rules.chunks),
      static_cast<long long>(f.rules.grid_tensors), static_cast<long long>(f.rules.listed_chunks), f.t_save_plan,
      HumanBytes(static_cast<double>(f.writer_bytes_max)).c_str(),
      HumanBytes(static_cast<double>(f.writer_bytes_total) / static_cast<double>(from.NumRanks())).c_str());
  std::printf(
      "manifest: %s, listed chunks exact-cover checked in %.3f s, encoded %.3f s, "
      "checked whole by the leader in %.3f s\n",
      HumanBytes(static_cast<double>(f.manifest_bytes)).c_str(), f.t_manifest, f.t_encode, f.t_decode);
  std::printf(
      "load onto %s (%lld ranks), every rank planned on this core: %lld distinct boxes, %lld overlaps, %lld read "
      "requests, %.3f s\n",
      to.ToString().c_str(), static_cast<long long>(to.NumRanks()), static_cast<long long>(load.distinct_boxes),
      static_cast<long long>(load.overlaps), static_cast<long long>(load.block_ranges), f.t_load_plan);
  std::printf("read amplification %.4f (%s read for %s needed, all ranks)\n", load.Amplification(),
              HumanBytes(static_cast<double>(load.bytes_read)).c_str(),
              HumanBytes(static_cast<double>(load.bytes_needed)).c_str());
  std::printf(
      "each rank planning alone (%lld of %lld ranks): reads %s of manifest at most (median %s, %llu reads), "
      "plans in %.1f ms at most (median %.1f ms)\n",
      static_cast<long long>(per_rank.ranks), static_cast<long long>(to.NumRanks()),
      HumanBytes(Max(per_rank.bytes)).c_str(), HumanBytes(Median(per_rank.bytes)).c_str(),
      static_cast<unsigned long long>(per_rank.reads_max), Max(per_rank.seconds) * 1e3, Median(per_rank.seconds) * 1e3);
  std::printf(
      "planning total %.3f s (save plan and manifest, cover, encode, leader's check, slowest rank's "
      "load plan); peak memory %s; wall %.3f s\n",
      f.total, HumanBytes(f.rss).c_str(), f.wall);
}

}  // namespace

int PlanMain(int argc, char** argv, int first) {
  std::string from_text, to_text, dtype = "bf16", optimizer;
  int64_t params = 0, layers = 0, experts = 0, block = 1 << 20, tiles = 8, rank_samples = 256;
  bool zero = false, json = false, per_tensor = false;
  Args args("plan", "--ranks-from MESH --ranks-to MESH --params N [options]",
            "Builds, for a simulated model of that size and without any tensor data, the save\n"
            "plan (each box written once, replicas balanced), the manifest a save would\n"
            "commit (with the leader's exact-cover check), and the load plan of every rank of\n"
            "the target mesh. Prints the time of each phase, the manifest size, the chunk\n"
            "count and the read amplification of the resharded load.");
  args.String("ranks-from", &from_text, "mesh the state is saved from, e.g. dp=128,tp=8,pp=16");
  args.String("ranks-to", &to_text, "mesh it is loaded onto, e.g. dp=64,tp=8,pp=32");
  args.Size("params", &params, "parameter count, e.g. 70G", false);
  args.Int("layers", &layers, "transformer layers (default: from --params)");
  args.Int("experts", &experts, "experts per layer (mixture of experts over ep)");
  args.String("dtype", &dtype, "parameter dtype (default bf16)");
  args.String("optimizer", &optimizer, "'adam' adds fp32 exp_avg/exp_avg_sq and a step");
  args.Switch("zero", &zero, "shard optimizer state over dp (ZeRO-1)");
  args.Size("block-size", &block, "raw bytes per block (default 1M)", true);
  args.Int("max-tiles", &tiles, "column tiles per column-sharded shard (default 8)");
  args.Int("rank-samples", &rank_samples,
           "target ranks that plan their own load from the manifest's parts (default 256)");
  args.Switch("per-tensor", &per_tensor, "list the tensors whose load reads the most extra bytes");
  args.Switch("json", &json, "print a JSON object");
  int exit = 0;
  if (!args.Parse(argc, argv, first, &exit)) return exit;
  auto from = Mesh::Parse(from_text);
  auto to = Mesh::Parse(to_text);
  auto dt = ParseDType(dtype);
  if (!from.ok() || !to.ok() || !dt || params <= 0 || (!optimizer.empty() && optimizer != "adam")) {
    std::fprintf(stderr, "ckpt plan: need --ranks-from, --ranks-to, --params and a valid --dtype\n%s",
                 args.Usage().c_str());
    return kExitUsage;
  }
  SyntheticOptions so;
  so.params = params;
  so.dtype = *dt;
  so.adam = optimizer == "adam";
  so.zero = zero;
  so.layers = static_cast<int>(layers);
  so.experts = static_cast<int>(experts);
  PlanFigures figures;
  if (auto failed = MeasurePlan(so, *from, *to, block, tiles, rank_samples, figures)) {
    std::fprintf(stderr, "ckpt plan: %s\n", std::string(failed->status.message()).c_str());
    return failed->exit;
  }
  Render(
      json, [&](JsonWriter& w) { WritePlanJson(w, *from, *to, figures); },
      [&] {
        PrintPlanText(*from, *to, so.adam, figures);
        if (per_tensor) PrintPerTensor(figures);
      });
  return kExitOk;
}

}  // namespace ckpt::tools

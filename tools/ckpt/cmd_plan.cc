// ckpt plan: the save plan, manifest and load plan of a simulated model at
// any scale, without tensor data.
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>

#include "ckpt/plan.h"
#include "ckpt/plan_costs.h"
#include "ckpt/synthetic.h"
#include "ckpt/version.h"
#include "commands.h"
#include "common/cli.h"
#include "common/synth_job.h"
#include "util/clock.h"
#include "util/errors.h"
#include "util/json.h"

namespace ckpt::tools {
namespace {

double Max(const std::vector<double>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }
double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// What `ckpt plan` measures (MeasurePlanCosts) and of what.
struct PlanFigures {
  std::optional<SyntheticModel> model, target;
  PlanCosts costs;
  int64_t writer_bytes_max = 0, writer_bytes_total = 0;
  double wall = 0, rss = 0;
};

// A failed phase: its message and the exit code it calls for.
struct PlanFailure {
  int exit;
  absl::Status status;
};

std::optional<PlanFailure> MeasurePlan(const SyntheticOptions& so, const Mesh& from, const Mesh& to,
                                       const PlanCostOptions& options, PlanFigures& f) {
  const double t0 = NowSeconds();
  auto model = BuildSyntheticModel(so, from);
  if (!model.ok()) return PlanFailure{kExitUsage, model.status()};
  f.model = std::move(*model);
  auto target = BuildSyntheticModel(so, to);
  if (!target.ok()) return PlanFailure{kExitUsage, target.status()};
  f.target = std::move(*target);
  auto costs = MeasurePlanCosts(f.model->tensors, from, f.target->tensors, to, options);
  if (!costs.ok()) return PlanFailure{kExitProblem, costs.status()};
  f.costs = std::move(*costs);
  const std::vector<int64_t>& by_rank = f.costs.save.bytes_by_rank;
  f.writer_bytes_max = by_rank.empty() ? 0 : *std::max_element(by_rank.begin(), by_rank.end());
  for (int64_t b : by_rank) f.writer_bytes_total += b;
  f.wall = NowSeconds() - t0;
  f.rss = PeakRssBytes();
  return std::nullopt;
}

void WritePlanJson(JsonWriter& w, const Mesh& from, const Mesh& to, const PlanFigures& f) {
  const PlanCosts& c = f.costs;
  const LoadPlanStats& load = c.load;
  w.BeginObject()
      .Field("ranks_from", from.NumRanks())
      .Field("ranks_to", to.NumRanks())
      .Field("mesh_from", from.ToString())
      .Field("mesh_to", to.ToString())
      .Field("params", f.model->params)
      .Field("tensors", static_cast<int64_t>(f.model->tensors.size()))
      .Field("layers", f.model->layers)
      .Field("chunks", f.costs.save.chunks)
      .Field("manifest_bytes", c.manifest_bytes)
      .Field("save_plan_s", c.save_plan_s)
      .Field("manifest_and_cover_s", c.cover_s)
      .Field("encode_s", c.encode_s)
      .Field("decode_s", c.decode_s)
      .Field("load_plan_s", c.load_plan_s)
      .Field("total_s", c.total_s)
      .Field("wall_s", f.wall)
      .Field("grid_tensors", f.costs.save.grid_tensors)
      .Field("listed_chunks", f.costs.save.listed_chunks)
      .Field("writer_bytes_max", f.writer_bytes_max)
      .Field("writer_bytes_mean", static_cast<double>(f.writer_bytes_total) / static_cast<double>(from.NumRanks()))
      .Field("peak_rss_bytes", f.rss)
      .Field("distinct_target_boxes", load.distinct_boxes)
      .Field("overlaps", load.overlaps)
      .Field("read_requests", load.block_ranges)
      .Field("bytes_needed", load.bytes_needed)
      .Field("bytes_read", load.bytes_read)
      .Field("read_amplification", load.Amplification())
      .Field("ranks_sampled", static_cast<int64_t>(c.sampled_ranks.size()))
      .Field("rank_manifest_bytes_max", Max(c.rank_manifest_bytes))
      .Field("rank_manifest_bytes_median", Median(c.rank_manifest_bytes))
      .Field("rank_manifest_reads_max", static_cast<int64_t>(c.rank_manifest_reads_max))
      .Field("rank_plan_s_max", Max(c.rank_plan_s))
      .Field("rank_plan_s_median", Median(c.rank_plan_s));
  if (c.coop.hosts > 0) {
    // A plan, not a measurement: what the cooperative load would read.
    w.Key("cooperative_plan")
        .BeginObject()
        .Field("hosts", c.coop.hosts)
        .Field("pieces", c.coop.pieces)
        .Field("storage_bytes", c.coop.bytes_once)
        .Field("storage_bytes_every_rank", c.coop.bytes_every_rank)
        .Field("storage_bytes_ratio", c.coop.bytes_every_rank > 0 ? static_cast<double>(c.coop.bytes_once) /
                                                                        static_cast<double>(c.coop.bytes_every_rank)
                                                                  : 0.0)
        .Field("host_bytes_max", c.coop.host_bytes_max)
        .Field("plan_s", c.coop.plan_s)
        .EndObject();
  }
  w.EndObject();
}

// The tensors whose load reads the most bytes beyond those it needs.
void PrintPerTensor(const PlanFigures& f) {
  const LoadPlanStats& load = f.costs.load;
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
  const PlanCosts& c = f.costs;
  const LoadPlanStats& load = c.load;
  std::printf("model: %.3g params, %d layers, %zu tensors%s\n", static_cast<double>(f.model->params), f.model->layers,
              f.model->tensors.size(), adam ? " (with Adam state)" : "");
  std::printf(
      "save on %s (%lld ranks): %lld chunks (%lld tensors as grids, %lld chunks listed), planned with its "
      "manifest in %.3f s; the most bytes one rank writes %s (mean %s)\n",
      from.ToString().c_str(), static_cast<long long>(from.NumRanks()), static_cast<long long>(f.costs.save.chunks),
      static_cast<long long>(f.costs.save.grid_tensors), static_cast<long long>(f.costs.save.listed_chunks),
      c.save_plan_s, HumanBytes(static_cast<double>(f.writer_bytes_max)).c_str(),
      HumanBytes(static_cast<double>(f.writer_bytes_total) / static_cast<double>(from.NumRanks())).c_str());
  std::printf(
      "manifest: %s, listed chunks exact-cover checked in %.3f s, encoded %.3f s, "
      "checked whole by the leader in %.3f s\n",
      HumanBytes(static_cast<double>(c.manifest_bytes)).c_str(), c.cover_s, c.encode_s, c.decode_s);
  std::printf(
      "load onto %s (%lld ranks), every rank planned on this core: %lld distinct boxes, %lld overlaps, %lld read "
      "requests, %.3f s\n",
      to.ToString().c_str(), static_cast<long long>(to.NumRanks()), static_cast<long long>(load.distinct_boxes),
      static_cast<long long>(load.overlaps), static_cast<long long>(load.block_ranges), c.load_plan_s);
  std::printf("read amplification %.4f (%s read for %s needed, all ranks)\n", load.Amplification(),
              HumanBytes(static_cast<double>(load.bytes_read)).c_str(),
              HumanBytes(static_cast<double>(load.bytes_needed)).c_str());
  std::printf(
      "each rank planning alone (%lld of %lld ranks): reads %s of manifest at most (median %s, %llu reads), "
      "plans in %.1f ms at most (median %.1f ms)\n",
      static_cast<long long>(static_cast<int64_t>(c.sampled_ranks.size())), static_cast<long long>(to.NumRanks()),
      HumanBytes(Max(c.rank_manifest_bytes)).c_str(), HumanBytes(Median(c.rank_manifest_bytes)).c_str(),
      static_cast<unsigned long long>(c.rank_manifest_reads_max), Max(c.rank_plan_s) * 1e3,
      Median(c.rank_plan_s) * 1e3);
  if (c.coop.hosts > 0) {
    std::printf(
        "cooperative load (planned over %lld hosts, %lld pieces, %.3f s): %s from storage instead of %s "
        "(%.3f), the most one host reads %s\n",
        static_cast<long long>(c.coop.hosts), static_cast<long long>(c.coop.pieces), c.coop.plan_s,
        HumanBytes(static_cast<double>(c.coop.bytes_once)).c_str(),
        HumanBytes(static_cast<double>(c.coop.bytes_every_rank)).c_str(),
        c.coop.bytes_every_rank > 0
            ? static_cast<double>(c.coop.bytes_once) / static_cast<double>(c.coop.bytes_every_rank)
            : 0.0,
        HumanBytes(static_cast<double>(c.coop.host_bytes_max)).c_str());
  }
  std::printf(
      "planning total %.3f s (save plan and manifest, cover, encode, leader's check, slowest rank's "
      "load plan); peak memory %s; wall %.3f s\n",
      c.total_s, HumanBytes(f.rss).c_str(), f.wall);
}

}  // namespace

int PlanMain(int argc, char** argv, int first) {
  std::string from_text, to_text, dtype = "bf16", optimizer;
  int64_t params = 0, layers = 0, experts = 0, block = 1 << 20, tiles = 8, rank_samples = 256, ranks_per_host = 0;
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
  args.Int("ranks-per-host", &ranks_per_host,
           "plan the cooperative load too, the target's ranks this many to a host: what the restart "
           "reads from storage when each needed byte is read once, by a rank that needs it");
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
  PlanCostOptions po;
  po.block_size = static_cast<uint64_t>(block);
  po.max_tiles = static_cast<int>(tiles);
  po.rank_samples = rank_samples;
  po.ranks_per_host = ranks_per_host;
  PlanFigures figures;
  if (auto failed = MeasurePlan(so, *from, *to, po, figures)) {
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

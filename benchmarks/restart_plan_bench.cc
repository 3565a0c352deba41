// A restart at scale, from "generation formed" to "every rank has its plan":
// a committed step of a simulated model (its manifest only, as `ckpt plan`
// builds it) is resolved by the leader, then every rank of the new mesh reads
// its part of the manifest from storage and plans its own load — ranks run as
// tasks on --threads threads, each timed alone. For comparison the scheme of
// manifest versions 1-3 is timed on a sample of ranks: the leader cuts each
// rank's part from the whole manifest and encodes it, one rank after another.
//
//   build/benchmarks/restart_plan_bench --dir /dev/shm/rp --ranks-from dp=128,tp=8,pp=16
//       --ranks-to dp=64,tp=8,pp=32 --params 70G --layers 80 --optimizer adam --zero
// (one command line).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "ckpt/storage.h"
#include "ckpt/synthetic.h"
#include "common/cli.h"
#include "common/synth_job.h"
#include "core/collective_plan.h"
#include "core/plan_costs.h"
#include "core/root.h"
#include "format/manifest.h"
#include "format/manifest_part.h"
#include "format/root_files.h"
#include "plan/rule_manifest.h"
#include "util/bytes.h"
#include "util/clock.h"
#include "util/errors.h"
#include "util/json.h"

namespace ckpt::bench {
namespace {

struct RankFigures {
  double seconds = 0;
  uint64_t bytes = 0;
  uint64_t reads = 0;
  int64_t chunks = 0;
};

// One rank of the new generation, reading its part through the storage.
absl::StatusOr<RankFigures> PlanOneRank(Storage& storage, const std::string& path, const SyntheticModel& target,
                                        const Mesh& mesh, int64_t rank) {
  RankFigures f;
  const double t0 = NowSeconds();
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> file, storage.OpenReadable(path));
  ManifestPartStats stats;
  CKPT_ASSIGN_OR_RETURN(
      f.chunks, PlanRankFromManifestPart(FileRangeReader(*file), file->size(), target.tensors, mesh, rank, &stats));
  f.seconds = NowSeconds() - t0;
  f.bytes = stats.bytes_read;
  f.reads = stats.reads;
  return f;
}

// A root holding one committed step whose manifest is `encoded` (and its copy).
absl::Status WriteRoot(Storage& storage, const std::string& encoded) {
  for (const std::string& name :
       {StepDir(1) + "/" + std::string(kManifestName), StepDir(1) + "/" + std::string(kManifestCopyName)}) {
    CKPT_RETURN_IF_ERROR(storage.PutAtomic(name, AsBytesView(encoded)));
  }
  return storage.PutAtomic(kLatestName, AsBytesView(EncodeLatest(1)));
}

// Every rank (or `planned` of them, evenly spread) reading its part and
// planning its load, on `threads` threads; returns the time for all.
absl::StatusOr<double> PlanEveryRank(Storage& storage, const std::string& path, const SyntheticModel& target,
                                     const Mesh& to, int64_t planned, int64_t threads,
                                     std::vector<RankFigures>& figures) {
  const int64_t n = to.NumRanks();
  figures.assign(static_cast<size_t>(planned), RankFigures{});
  const double t0 = NowSeconds();
  CKPT_RETURN_IF_ERROR(ParallelFor(planned, threads, [&](int64_t k) -> absl::Status {
    const int64_t rank = planned == n ? k : (planned == 1 ? 0 : k * (n - 1) / (planned - 1));
    CKPT_ASSIGN_OR_RETURN(figures[static_cast<size_t>(k)], PlanOneRank(storage, path, target, to, rank));
    return absl::OkStatus();
  }));
  return NowSeconds() - t0;
}

// The old scheme: the leader expands the manifest, then cuts and encodes
// each rank's part (timed on `samples` ranks).
struct OldScheme {
  double leader_s = 0, cut_mean = 0;
  int64_t samples = 0;
};

absl::StatusOr<OldScheme> TimeOldScheme(Storage& storage, const SyntheticModel& target, const Mesh& to,
                                        int64_t leader_samples) {
  OldScheme o;
  const int64_t n = to.NumRanks();
  const double t0 = NowSeconds();
  CKPT_ASSIGN_OR_RETURN(const LoadableStep found, ResolveLoadable(storage, kLatestStep, false));
  o.leader_s = NowSeconds() - t0;
  std::vector<char> dummy(1);
  Samples cut_s;
  o.samples = std::min(leader_samples, n);
  for (int64_t k = 0; k < o.samples; ++k) {
    const int64_t rank = o.samples == 1 ? 0 : k * (n - 1) / (o.samples - 1);
    State st;
    for (const TensorLayout& layout : target.tensors) {
      auto box = RankBox(layout, to, rank);
      if (box.ok() && box->has_value()) (void)st.AddShard(layout.spec, **box, dummy.data());
    }
    const double c0 = NowSeconds();
    const std::string part = EncodeManifest(RestrictManifest(found.manifest, st, static_cast<int>(rank)));
    cut_s.Add(NowSeconds() - c0);
  }
  for (double x : cut_s.v) o.cut_mean += x;
  o.cut_mean /= std::max<size_t>(1, cut_s.v.size());
  return o;
}

int Main(int argc, char** argv) {
  std::string dir, from_text, to_text, optimizer, json_path;
  int64_t params = 0, layers = 0, threads = 2, leader_samples = 64, max_ranks = 0;
  bool zero = false;
  tools::Args args("restart_plan_bench", "--dir DIR --ranks-from MESH --ranks-to MESH --params N [options]",
                   "Times a restart's planning at scale: the leader resolving the step, then every rank of the\n"
                   "new mesh reading its part of the manifest and planning its own load.");
  args.String("dir", &dir, "directory for the generated root (tmpfs recommended)");
  args.String("ranks-from", &from_text, "mesh the state is saved from, e.g. dp=128,tp=8,pp=16");
  args.String("ranks-to", &to_text, "mesh it is loaded onto, e.g. dp=64,tp=8,pp=32");
  args.Size("params", &params, "parameter count, e.g. 70G", false);
  args.Int("layers", &layers, "transformer layers (default: from --params)");
  args.String("optimizer", &optimizer, "'adam' adds fp32 exp_avg/exp_avg_sq and a step");
  args.Switch("zero", &zero, "shard optimizer state over dp (ZeRO-1)");
  args.Int("threads", &threads, "threads the ranks run on (default 2)");
  args.Int("max-ranks", &max_ranks, "plan only this many ranks, evenly spread (default: all)");
  args.Int("leader-samples", &leader_samples,
           "ranks whose part the leader cuts in the old scheme, to extrapolate (default 64)");
  args.String("json", &json_path, "also write the figures as JSON to this file");
  int exit = 0;
  if (!ParseBenchArgs(args, argc, argv, dir, &exit)) return exit;
  auto from = Mesh::Parse(from_text);
  auto to = Mesh::Parse(to_text);
  if (!from.ok() || !to.ok() || params <= 0) {
    std::fprintf(stderr, "restart_plan_bench: need --ranks-from, --ranks-to and --params\n%s", args.Usage().c_str());
    return 2;
  }
  SyntheticOptions so;
  so.params = params;
  so.adam = optimizer == "adam";
  so.zero = zero;
  so.layers = static_cast<int>(layers);
  auto model = BuildSyntheticModel(so, *from);
  auto target = BuildSyntheticModel(so, *to);
  if (!model.ok() || !target.ok()) {
    std::fprintf(stderr, "restart_plan_bench: %s\n",
                 std::string((model.ok() ? target : model).status().message()).c_str());
    return 2;
  }
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "restart_plan_bench: %s\n", std::string(s.message()).c_str());
    return 1;
  };
  auto built = SaveManifestByRules(model->tensors, *from, 1 << 20, 8);
  if (!built.ok()) return fail(built.status());
  const std::string encoded = EncodeManifest(*built);
  *built = Manifest();
  const std::string root = dir + "/root";
  std::filesystem::remove_all(root);
  auto storage = OpenStorage(root);
  if (!storage.ok()) return fail(storage.status());
  if (absl::Status s = WriteRoot(**storage, encoded); !s.ok()) return fail(s);
  const std::string path = StepDir(1) + "/" + std::string(kManifestName);

  // The leader: the step resolved, its manifest read whole and checked
  // (grids kept as grids, as LoadStepTogether's leader does).
  const double t0 = NowSeconds();
  auto found = ResolveLoadable(**storage, kLatestStep, false, GridChunks::kGridsOnly);
  const double leader_s = NowSeconds() - t0;
  if (!found.ok()) return fail(found.status());
  *found = LoadableStep();

  const int64_t n = to->NumRanks();
  const int64_t planned = max_ranks > 0 ? std::min(max_ranks, n) : n;
  std::vector<RankFigures> figures;
  auto all_ranks_s = PlanEveryRank(**storage, path, *target, *to, planned, threads, figures);
  if (!all_ranks_s.ok()) return fail(all_ranks_s.status());
  Samples rank_s, rank_bytes;
  uint64_t reads_max = 0;
  for (const RankFigures& f : figures) {
    rank_s.Add(f.seconds);
    rank_bytes.Add(static_cast<double>(f.bytes));
    reads_max = std::max(reads_max, f.reads);
  }
  auto old_scheme = TimeOldScheme(**storage, *target, *to, leader_samples);
  if (!old_scheme.ok()) return fail(old_scheme.status());
  const double old_leader_s = old_scheme->leader_s, cut_mean = old_scheme->cut_mean;
  const int64_t samples = old_scheme->samples;

  const double formed_to_plans = leader_s + rank_s.Max();
  const double old_formed_to_plans = old_leader_s + cut_mean * static_cast<double>(n);
  std::printf("manifest %s, %lld ranks from %s onto %lld ranks %s\n",
              tools::HumanBytes(static_cast<double>(encoded.size())).c_str(), static_cast<long long>(from->NumRanks()),
              from->ToString().c_str(), static_cast<long long>(n), to->ToString().c_str());
  std::printf("leader resolves the step (manifest read whole and checked, grids kept): %.3f s (%.3f s expanded)\n",
              leader_s, old_leader_s);
  std::printf(
      "each rank plans alone (%lld ranks): %.2f ms median, %.2f ms max; reads %s of manifest at most "
      "(%llu reads)\n",
      static_cast<long long>(planned), rank_s.Median() * 1e3, rank_s.Max() * 1e3,
      tools::HumanBytes(rank_bytes.Max()).c_str(), static_cast<unsigned long long>(reads_max));
  std::printf("all %lld ranks one after another on %lld threads here: %.2f s\n", static_cast<long long>(planned),
              static_cast<long long>(threads), *all_ranks_s);
  std::printf("generation formed -> every rank has its plan (ranks on their own hosts): %.3f s\n", formed_to_plans);
  std::printf(
      "the leader cutting every rank's part instead (versions 1-3): %.2f ms per rank, %.1f s for %lld ranks "
      "(from %lld sampled)\n",
      cut_mean * 1e3, old_formed_to_plans, static_cast<long long>(n), static_cast<long long>(samples));
  if (!json_path.empty()) {
    JsonWriter j;
    j.BeginObject()
        .Field("manifest_bytes", static_cast<int64_t>(encoded.size()))
        .Field("ranks_from", from->NumRanks())
        .Field("ranks_to", n)
        .Field("ranks_planned", planned)
        .Field("leader_resolve_s", leader_s)
        .Field("leader_resolve_expanded_s", old_leader_s)
        .Field("rank_plan_s_median", rank_s.Median())
        .Field("rank_plan_s_max", rank_s.Max())
        .Field("rank_manifest_bytes_max", rank_bytes.Max())
        .Field("all_ranks_here_s", *all_ranks_s)
        .Field("threads", threads)
        .Field("formed_to_every_plan_s", formed_to_plans)
        .Field("leader_cut_per_rank_s", cut_mean)
        .Field("leader_cuts_every_plan_s", old_formed_to_plans)
        .EndObject();
    WriteTextFile(json_path, j.str());
  }
  std::filesystem::remove_all(root);
  return 0;
}

}  // namespace
}  // namespace ckpt::bench

int main(int argc, char** argv) { return ckpt::bench::Main(argc, argv); }

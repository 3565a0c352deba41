// The commit of a save at scale, on the Checkpointer's own code. Every rank
// of the mesh runs its part of a save of a laid-out state (the State built
// by AddLayout, RankRules planning which boxes it writes, BuildSavePieces
// cutting them, the summary it files); the leader then runs PublishStep, as
// the Checkpointer's committer does: it reads the ranks' summaries from the
// storage, builds the manifest from the layouts' rules on the first save and
// reuses it after, checks every summary against it, writes MANIFEST, its
// copy and LATEST. Data files are skipped (only metadata is measured): each
// summary describes the file the rank's pieces make when stored
// uncompressed. Ranks run one after another on --threads threads here; on a
// cluster each runs on its own host, so a rank's figure is its own time.
//
// Then a restart onto --ranks-to, through Load's code: the leader resolves
// the step and checks its manifest (ResolveLoadable, grids kept), and each of
// --rank-samples ranks of the new mesh reads its part of the manifest
// (ReadOwnPart) and plans its load (PlanLoad, the loader's own planning).
//
//   build/benchmarks/commit_bench --ranks-from dp=1024,tp=8,pp=16 --ranks-to dp=512,tp=8,pp=32
//       --params 405G --layers 126 --optimizer adam --zero --json
//   (one command line)
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "ckpt/storage.h"
#include "ckpt/synthetic.h"
#include "common/cli.h"
#include "common/synth_job.h"
#include "core/claim.h"
#include "core/load_step.h"
#include "core/publish.h"
#include "core/rule_commit.h"
#include "core/save_pieces.h"
#include "format/chunk_grid.h"
#include "format/data_file.h"
#include "format/root_files.h"
#include "pipeline/loader.h"
#include "util/bytes.h"
#include "util/clock.h"
#include "util/errors.h"
#include "util/hash.h"
#include "util/json.h"
#include "util/strings.h"

namespace ckpt::bench {
namespace {

constexpr uint64_t kBlockSize = 1 << 20;
constexpr int kTiles = 8;
constexpr size_t kRngBytes = 5056;  // torch's CPU generator state and some

// Resident and peak resident bytes of this process; resetting the peak.
int64_t StatusBytes(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(std::string(key).size())) * 1024;
  }
  return -1;
}
void ResetPeak() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
}

// One rank's part of the save: what it plans, and the summary it files.
struct RankOut {
  double plan_s = 0;    // first save: RankRules planning the rank's writes
  double steady_s = 0;  // a later save with the same layouts
  double state_s = 0;   // building the laid-out State
  RankSummary summary;
};

absl::StatusOr<RankOut> RunRank(const SyntheticModel& model, const Mesh& mesh, int64_t rank,
                                std::shared_ptr<const SaveRules>* rules_out) {
  static const std::byte dummy[1] = {};  // data is never read: no file is written
  RankOut out;
  double t0 = NowSeconds();
  State st;
  CKPT_RETURN_IF_ERROR(st.SetMesh(mesh, rank));
  for (const TensorLayout& l : model.tensors) CKPT_RETURN_IF_ERROR(st.AddLayout(l, const_cast<std::byte*>(dummy)));
  static const std::string rng(kRngBytes, 'r');
  CKPT_RETURN_IF_ERROR(st.AddBlob("rng", rng.data(), rng.size()));
  out.state_s = NowSeconds() - t0;
  RankRules rr;
  const int world = static_cast<int>(mesh.NumRanks());
  t0 = NowSeconds();
  CKPT_RETURN_IF_ERROR(rr.Update(st, static_cast<int>(rank), world, mesh, kBlockSize, kTiles));
  out.plan_s = NowSeconds() - t0;
  t0 = NowSeconds();
  CKPT_RETURN_IF_ERROR(rr.Update(st, static_cast<int>(rank), world, mesh, kBlockSize, kTiles));
  out.steady_s = NowSeconds() - t0;
  if (rules_out != nullptr) *rules_out = rr.rules();
  // The file the pieces make, stored uncompressed (as the engine numbers
  // blocks: each piece's bytes cut into blocks of the block size).
  SavePieces pieces = BuildSavePieces(st, rr.writes(), kTiles, static_cast<int>(rank));
  uint64_t blocks = 0, frames = kDataHeaderSize, raw = 0;
  for (const SavePiece& p : pieces.pieces) {
    blocks += BlocksOf(p.bytes, kBlockSize);
    frames +=
        p.bytes / kBlockSize * FrameLength(kBlockSize) + (p.bytes % kBlockSize ? FrameLength(p.bytes % kBlockSize) : 0);
    raw += p.bytes;
  }
  RankSummary& s = out.summary;
  s.rank = static_cast<int32_t>(rank);
  s.block_count = blocks;
  s.index_offset = frames;
  s.size = frames + kIndexHeaderSize + blocks * kIndexEntrySize + kFooterSize;
  s.index_hash = Xxh3Seeded(&rank, sizeof(rank), 1);
  s.bytes_stored = raw;
  s.blobs = SummaryBlobsOf(st);
  return out;
}

// The leader's two saves: the first builds the rules' manifest, the second
// is the steady state.
struct LeaderSave {
  double seconds = 0;
  int64_t peak = 0;
  int64_t received = 0;
  int64_t manifest_bytes = 0;
};

// What a restart costs: the leader resolving the step, then each sampled
// rank reading its part and planning its load.
struct RestartFigures {
  double resolve_s = 0;
  Samples rank_s, part_bytes;
  int64_t samples = 0;
};

// Every rank's part, on `threads` threads; rank 0 also returns the rules.
absl::StatusOr<double> RunAllRanks(const SyntheticModel& model, const Mesh& mesh, int64_t threads,
                                   std::vector<RankOut>& ranks, std::shared_ptr<const SaveRules>* rules) {
  const int64_t n = mesh.NumRanks();
  ranks.assign(static_cast<size_t>(n), RankOut{});
  const double t0 = NowSeconds();
  CKPT_RETURN_IF_ERROR(ParallelFor(n, threads, [&](int64_t r) -> absl::Status {
    CKPT_ASSIGN_OR_RETURN(ranks[static_cast<size_t>(r)], RunRank(model, mesh, r, r == 0 ? rules : nullptr));
    return absl::OkStatus();
  }));
  return NowSeconds() - t0;
}

// Two saves committed by the leader from every rank's summary.
absl::Status LeaderSaves(Storage& storage, std::vector<RankOut>& ranks, const SaveRules& rules, const Mesh& mesh,
                         RuleManifest& rule_manifest, LeaderSave (&saves)[2]) {
  const int64_t n = mesh.NumRanks();
  const int64_t rss_before = StatusBytes("VmRSS:");
  for (int i = 0; i < 2; ++i) {
    const int64_t step = i + 1;
    ClaimRequest claim;
    claim.step = step;
    claim.world_size = static_cast<int>(n);
    CKPT_ASSIGN_OR_RETURN(const uint64_t id, ClaimForSave(storage, nullptr, claim));
    // The ranks file their summaries, bound to this save.
    for (RankOut& r : ranks) {
      r.summary.binding = RuleBinding(step, id, rules.hash);
      const std::string bytes = EncodeRankSummary(r.summary);
      saves[i].received += static_cast<int64_t>(bytes.size());
      CKPT_RETURN_IF_ERROR(
          storage.PutAtomic(StrCat(StepDir(step), "/", ReportName(r.summary.rank)), AsBytesView(bytes)));
    }
    const Manifest head = NewRankReport(step, static_cast<int>(n), Codec::kNone, mesh, SaveOptions{});
    const RuleCommit commit{&rules, &rule_manifest, &head};
    ResetPeak();
    const int64_t rss0 = StatusBytes("VmRSS:");
    const double t0 = NowSeconds();
    absl::Status published = PublishStep(storage, step, id, static_cast<int>(n), &commit);
    saves[i].seconds = NowSeconds() - t0;
    saves[i].peak = StatusBytes("VmHWM:") - std::min(rss0, rss_before);
    if (!published.ok()) return Annotate(published, StrCat("step ", step));
    auto size = storage.FileSize(StrCat(StepDir(step), "/", kManifestName));
    saves[i].manifest_bytes = size.ok() ? static_cast<int64_t>(*size) : -1;
  }
  return absl::OkStatus();
}

// The restart onto `to`, through Load's code.
absl::StatusOr<RestartFigures> Restart(Storage& storage, const SyntheticModel& target, const Mesh& to,
                                       int64_t rank_samples) {
  RestartFigures f;
  double t0 = NowSeconds();
  auto found = ResolveLoadable(storage, kLatestStep, false, GridChunks::kGridsOnly);
  f.resolve_s = NowSeconds() - t0;
  if (!found.ok()) return Annotate(found.status(), "restart");
  *found = LoadableStep();
  const std::string manifest_path = StrCat(StepDir(2), "/", kManifestName);
  const int64_t n_to = to.NumRanks();
  f.samples = std::min(rank_samples, n_to);
  for (int64_t k = 0; k < f.samples; ++k) {
    static std::byte nowhere[1];
    const int64_t rank = f.samples == 1 ? 0 : k * (n_to - 1) / (f.samples - 1);
    const double r0 = NowSeconds();
    State st;
    absl::Status s = st.SetMesh(to, rank);
    for (const TensorLayout& l : target.tensors) {
      if (s.ok()) s = st.AddLayout(l, nowhere);
    }
    int64_t bytes = 0;
    auto part =
        s.ok() ? ReadOwnPart(storage, manifest_path, st, static_cast<int>(rank), &bytes) : absl::StatusOr<Manifest>(s);
    auto plan = part.ok() ? PlanLoad(*part, st, static_cast<int>(rank)) : absl::StatusOr<LoadPlanCounts>(part.status());
    if (!plan.ok()) return Annotate(plan.status(), StrCat("restart, rank ", rank));
    f.rank_s.Add(NowSeconds() - r0);
    f.part_bytes.Add(static_cast<double>(bytes));
  }
  return f;
}

// Everything the benchmark reports.
struct CommitFigures {
  int64_t n = 0, n_to = 0, threads = 0;
  std::string mesh, to, root;
  size_t tensors = 0;
  Samples plan_s, steady_s, state_s;
  double all_ranks_s = 0, rules_build_s = 0;
  LeaderSave saves[2];
  RestartFigures restart;
  double restart_plan_s() const { return restart.resolve_s + restart.rank_s.Max(); }
};

void PrintCommitText(const CommitFigures& f) {
  const LeaderSave* saves = f.saves;
  std::printf("%lld ranks over %s, %zu tensors; storage %s; data files skipped\n", static_cast<long long>(f.n),
              f.mesh.c_str(), f.tensors, f.root.c_str());
  std::printf(
      "each rank: builds its laid-out state %.2f ms max, plans its writes %.2f ms max (%.2f ms median); "
      "a save with the same layouts %.3f ms max\n",
      f.state_s.Max() * 1e3, f.plan_s.Max() * 1e3, f.plan_s.Median() * 1e3, f.steady_s.Max() * 1e3);
  std::printf("all %lld ranks one after another on %lld threads here: %.1f s\n", static_cast<long long>(f.n),
              static_cast<long long>(f.threads), f.all_ranks_s);
  std::printf("leader, first save: %.3f s (the rules' manifest built in %.3f s), peak +%s\n", saves[0].seconds,
              f.rules_build_s, tools::HumanBytes(static_cast<double>(saves[0].peak)).c_str());
  std::printf("leader, steady state: %.3f s, peak +%s; received %s (%.1f bytes per rank); manifest %s\n",
              saves[1].seconds, tools::HumanBytes(static_cast<double>(saves[1].peak)).c_str(),
              tools::HumanBytes(static_cast<double>(saves[1].received)).c_str(),
              static_cast<double>(saves[1].received) / static_cast<double>(f.n),
              tools::HumanBytes(static_cast<double>(saves[1].manifest_bytes)).c_str());
  std::printf(
      "restart onto %s (%lld ranks): the leader resolves the step in %.3f s; each rank reads its part "
      "(%s at most) and plans its load in %.2f ms at most (%.2f ms median, %lld sampled); generation formed "
      "-> every rank has its plan %.3f s\n",
      f.to.c_str(), static_cast<long long>(f.n_to), f.restart.resolve_s,
      tools::HumanBytes(f.restart.part_bytes.Max()).c_str(), f.restart.rank_s.Max() * 1e3,
      f.restart.rank_s.Median() * 1e3, static_cast<long long>(f.restart.samples), f.restart_plan_s());
}

void WriteCommitJson(JsonWriter& w, const CommitFigures& f) {
  const LeaderSave* saves = f.saves;
  w.BeginObject()
      .Field("ranks", f.n)
      .Field("mesh", f.mesh)
      .Field("tensors", static_cast<int64_t>(f.tensors))
      .Field("storage", f.root)
      .Field("data_files", std::string("skipped"))
      .Field("leader_seconds", saves[1].seconds)
      .Field("leader_peak_bytes", saves[1].peak)
      .Field("leader_bytes_received", saves[1].received)
      .Field("first_save_seconds", saves[0].seconds)
      .Field("first_save_peak_bytes", saves[0].peak)
      .Field("rules_manifest_build_seconds", f.rules_build_s)
      .Field("manifest_bytes", saves[1].manifest_bytes)
      .Field("rank_state_seconds_max", f.state_s.Max())
      .Field("rank_plan_seconds_max", f.plan_s.Max())
      .Field("rank_plan_seconds_median", f.plan_s.Median())
      .Field("rank_steady_seconds_max", f.steady_s.Max())
      .Field("all_ranks_here_seconds", f.all_ranks_s)
      .Field("restart_mesh", f.to)
      .Field("restart_leader_seconds", f.restart.resolve_s)
      .Field("restart_rank_seconds_max", f.restart.rank_s.Max())
      .Field("restart_rank_manifest_bytes_max", f.restart.part_bytes.Max())
      .Field("restart_plan_seconds", f.restart_plan_s())
      .Field("threads", f.threads)
      .EndObject();
}

int Main(int argc, char** argv) {
  std::string dir, from_text, to_text, optimizer;
  int64_t params = 0, layers = 0, threads = 2, rank_samples = 256;
  bool zero = false, json = false;
  tools::Args args("commit_bench", "--ranks-from MESH --params N [options]",
                   "Times a save's commit at scale on the Checkpointer's code: every rank's planning and\n"
                   "summary, then the leader's PublishStep (first save and steady state). Data files are\n"
                   "skipped; the metadata is real.");
  args.String("dir", &dir, "root directory for the step (default: mem://, the storage in this process)");
  args.String("ranks-from", &from_text, "the mesh saved from, e.g. dp=1024,tp=8,pp=16");
  args.String("ranks-to", &to_text, "the mesh of the restart (default: the same)");
  args.Int("rank-samples", &rank_samples, "ranks of the restart that plan their loads, evenly spread (default 256)");
  args.Size("params", &params, "parameter count, e.g. 405G", false);
  args.Int("layers", &layers, "transformer layers (default: from --params)");
  args.String("optimizer", &optimizer, "'adam' adds fp32 exp_avg/exp_avg_sq and a step");
  args.Switch("zero", &zero, "shard optimizer state over dp (ZeRO-1)");
  args.Int("threads", &threads, "threads the ranks run on (default 2)");
  args.Switch("json", &json, "print the figures as one JSON object instead of text");
  int exit = 0;
  args.Program("");  // a benchmark is a program of its own
  if (!args.Parse(argc, argv, 1, &exit)) return exit;
  auto mesh = Mesh::Parse(from_text);
  auto to = Mesh::Parse(to_text.empty() ? from_text : to_text);
  if (!mesh.ok() || !to.ok() || params <= 0) {
    std::fprintf(stderr, "commit_bench: need --ranks-from and --params\n%s", args.Usage().c_str());
    return 2;
  }
  SyntheticOptions so;
  so.params = params;
  so.adam = optimizer == "adam";
  so.zero = zero;
  so.layers = static_cast<int>(layers);
  auto model = BuildSyntheticModel(so, *mesh);
  auto target = BuildSyntheticModel(so, *to);
  if (!model.ok() || !target.ok()) {
    std::fprintf(stderr, "commit_bench: %s\n", std::string((model.ok() ? target : model).status().message()).c_str());
    return 2;
  }
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "commit_bench: %s\n", std::string(s.message()).c_str());
    return 1;
  };
  CommitFigures f;
  f.n = mesh->NumRanks();
  f.n_to = to->NumRanks();
  f.threads = threads;
  f.mesh = mesh->ToString();
  f.to = to->ToString();
  f.tensors = model->tensors.size();
  std::vector<RankOut> ranks;
  std::shared_ptr<const SaveRules> rules;
  auto all_ranks_s = RunAllRanks(*model, *mesh, threads, ranks, &rules);
  if (!all_ranks_s.ok()) return fail(all_ranks_s.status());
  f.all_ranks_s = *all_ranks_s;
  for (const RankOut& r : ranks) {
    f.plan_s.Add(r.plan_s);
    f.steady_s.Add(r.steady_s);
    f.state_s.Add(r.state_s);
  }
  f.root = dir.empty() ? "mem://" : dir + "/root";
  if (!dir.empty()) std::filesystem::remove_all(f.root);
  auto storage = OpenStorage(f.root);
  if (!storage.ok()) return fail(storage.status());
  RuleManifest rule_manifest;
  if (absl::Status s = LeaderSaves(**storage, ranks, *rules, *mesh, rule_manifest, f.saves); !s.ok()) return fail(s);
  f.rules_build_s = rule_manifest.build_seconds();
  auto restart = Restart(**storage, *target, *to, rank_samples);
  if (!restart.ok()) return fail(restart.status());
  f.restart = std::move(*restart);
  tools::Render(
      json, [&](JsonWriter& w) { WriteCommitJson(w, f); }, [&] { PrintCommitText(f); });
  if (!dir.empty()) std::filesystem::remove_all(f.root);
  return 0;
}

}  // namespace
}  // namespace ckpt::bench

int main(int argc, char** argv) { return ckpt::bench::Main(argc, argv); }

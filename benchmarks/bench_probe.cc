// One measured operation per process, for benchmarks/run: the runner starts
// each contender as its own process so that its peak RSS is its own, and
// reads the figures from the JSON line printed here.
//
//   bench_probe memcpy --size 256M
//   bench_probe save --root DIR --params 128M --dtype bf16 --codec none --mesh dp=1
//   bench_probe load --root DIR --step 1 --mesh tp=2
#include <cstdio>
#include <string>

#include "bench_util.h"
#include "common/cli.h"
#include "common/synth_job.h"
#include "pipeline/save_engine.h"
#include "util/json.h"

namespace ckpt::bench {
namespace {

int Fail(const std::string& what, const absl::Status& s) {
  std::fprintf(stderr, "bench_probe %s: %s\n", what.c_str(), std::string(s.message()).c_str());
  return tools::kExitProblem;
}

// Medians over --repeat: one pass of a few milliseconds is at the mercy of
// whatever else the host runs in them.
int Memcpy(int argc, char** argv) {
  int64_t size = int64_t{256} << 20, threads = 1, repeat = 1;
  tools::Args args("memcpy", "[--size 256M] [--threads 1] [--repeat 1]",
                   "memcpy bandwidth of --size bytes (after a warming pass), split over --threads threads; "
                   "the median of --repeat passes.");
  args.Size("size", &size, "bytes copied (default 256M)", true);
  args.Int("threads", &threads,
           "threads copying at once, each an equal part (default 1; 0: as many as a save stages with)");
  args.Int("repeat", &repeat, "passes measured, the median reported (default 1)");
  args.Program("bench_probe");
  int exit = 0;
  if (!args.Parse(argc, argv, 2, &exit)) return exit;
  if (threads == 0) threads = DefaultStagingThreads();
  if (threads < 1 || threads > 256 || repeat < 1 || repeat > 1000) {
    std::fprintf(stderr, "bench_probe memcpy: --threads must be between 1 and 256, --repeat between 1 and 1000\n");
    return tools::kExitUsage;
  }
  Samples bw;
  for (int64_t i = 0; i < repeat; ++i) bw.Add(MemcpyBandwidth(size, static_cast<int>(threads)));
  JsonWriter j;
  j.BeginObject()
      .Field("bytes", size)
      .Field("threads", threads)
      .Field("repeat", repeat)
      .Field("bytes_per_s", bw.Median())
      .Field("bytes_per_s_min", bw.Min())
      .Field("bytes_per_s_max", bw.Max())
      .EndObject();
  std::printf("%s\n", j.str().c_str());
  return tools::kExitOk;
}

// Warm-up saves (the first maps and registers the staging arena, as a
// trainer's first save would; a store whose old steps are removed reaches its
// steady state after a second) and the measured ones after them.
int Save(int argc, char** argv) {
  std::string root, dtype = "bf16", mesh_text = "dp=1";
  Codec codec = Codec::kNone;
  int64_t params = int64_t{128} << 20, staging = 0, layers = 0, staging_threads = 0, repeat = 1, warmup = 1, keep = 0;
  int64_t pause_workers = -1;
  bool memcpy_beside = false;
  std::string memcpy_into = "arena";
  tools::Args args("save",
                   "--root DIR [--params 128M] [--dtype bf16] [--codec none] [--mesh dp=1] [--staging B] [--repeat 1] "
                   "[--warmup 1] [--keep N] [--pause-workers -1] [--memcpy-beside [--memcpy-into arena]]",
                   "Saves a synthetic transformer-like state: --warmup saves (steps 0..W-1), then --repeat "
                   "measured ones (steps W..W+R-1); prints the medians of the stall, the time until durable and "
                   "until committed.");
  args.String("root", &root, "checkpoint root (required)");
  args.Size("params", &params, "parameters (default 128M)", false);
  args.String("dtype", &dtype, "bf16, f32 or f16 (default bf16)");
  args.CodecFlag("codec", &codec, "default none");
  args.String("mesh", &mesh_text, "mesh of simulated ranks, threads of this process (default dp=1)");
  args.Size("staging", &staging, "staging arena (default: the state plus 16 MiB)", true);
  args.Int("layers", &layers, "transformer layers (default: from --params)");
  args.Int("staging-threads", &staging_threads,
           "threads that stage a save, the caller's included (default: the library's)");
  args.Int("repeat", &repeat, "measured saves (default 1)");
  args.Int("warmup", &warmup, "saves before the measured ones (default 1: maps the staging arena)");
  args.Int("keep", &keep, "retention: keep the newest N committed steps (default 0: all)");
  args.Int("pause-workers", &pause_workers,
           "whether the workers wait while a save stages: 1, 0 or -1 (default: the library's choice)");
  args.Switch("memcpy-beside", &memcpy_beside,
              "after each measured save, memcpy on as many threads as staged it (a warming pass, then the "
              "measured one) of the state itself (one rank; several: a buffer of its size) into the staging "
              "arena (several ranks: a buffer on huge pages), and the median of each save's stall against its "
              "own pass (more memory: not for measuring peak RSS)");
  args.String("memcpy-into", &memcpy_into,
              "where one rank's passes copy to: arena (the save engine's own staging arena, idle between saves: "
              "the very pages the stall copies into) or buffer (one of its own, on huge pages); default arena");
  args.Program("bench_probe");
  int exit = 0;
  if (!args.Parse(argc, argv, 2, &exit)) return exit;
  auto mesh = Mesh::Parse(mesh_text);
  auto dt = ParseDType(dtype);
  const std::optional<Codec> c = codec;
  if (root.empty() || !mesh.ok() || !dt || !c || repeat < 1 || repeat > 1000 || warmup < 1 || warmup > 100 ||
      keep < 0 || keep > 1000 || (memcpy_into != "arena" && memcpy_into != "buffer")) {
    std::fprintf(stderr,
                 "bench_probe save: needs --root, a valid --mesh, --dtype and --codec, --repeat 1..1000, --warmup "
                 "1..100, --keep 0..1000 and --memcpy-into arena or buffer\n");
    return tools::kExitUsage;
  }
  tools::SynthJobOptions o;
  o.uri = root;
  o.mesh = *mesh;
  o.model.params = params;
  o.model.dtype = *dt;
  o.model.layers = static_cast<int>(layers);
  o.codec = *c;
  o.retention.keep_last = static_cast<int>(keep);
  // The exact state size is known once the model is built; size the arena
  // from it unless told.
  auto model = BuildSyntheticModel(o.model, o.mesh);
  if (!model.ok()) return Fail("save", model.status());
  const int64_t state_bytes = model->params * static_cast<int64_t>(DTypeSize(*dt));
  o.engine.staging_bytes = static_cast<size_t>(staging > 0 ? staging : state_bytes + (16 << 20));
  o.engine.staging_threads = static_cast<int>(staging_threads);
  o.engine.pause_workers_while_staging = static_cast<int>(pause_workers);
  auto job = tools::SyntheticJob::Create(o);
  if (!job.ok()) return Fail("save", job.status());
  const int threads = staging_threads > 0 ? static_cast<int>(staging_threads) : DefaultStagingThreads();
  std::unique_ptr<MemcpyPasses> passes;
  // One rank: the passes copy the very buffers the save copies (after the
  // warm-up, once they exist) into the engine's arena, idle between saves:
  // the very pages the stall writes (--memcpy-into buffer: a buffer of
  // their own on huge pages, whose placement differs from the arena's by
  // process, so its ratios vary more from process to process). Passes over
  // other memory of the state's size slowed the saves between them
  // (docs/performance.md, "Figures behind the code"): the host pays for touching a gigabyte of other
  // 4 KiB pages, and the saved state, untouched since, comes back slower. A
  // trainer's state is written by every step. Several simulated ranks
  // stage one after another from buffers made per save, so their passes
  // use buffers of their own of the state's size.
  const bool over_state = memcpy_beside && mesh->NumRanks() == 1;
  if (memcpy_beside && !over_state) {
    // As many bytes as the save copies: a smaller copy runs faster, so a
    // smaller pass would be the ceiling of another copy.
    auto m = MemcpyPasses::Create(state_bytes);
    if (!m.ok()) return Fail("save", m.status());
    passes = std::move(*m);
  }
  tools::SynthSaveResult res;
  Samples stall, durable, commit, ceiling, stall_x_memcpy;
  for (int64_t step = 0; step < warmup + repeat; ++step) {
    absl::Status s = (*job)->SaveAsync(step, 1);
    if (!s.ok()) return Fail("save", s);
    auto r = (*job)->Finish();
    if (!r.ok()) return Fail("save", r.status());
    res = *r;
    if (step < warmup) {
      if (over_state && passes == nullptr) {
        auto m = memcpy_into == "arena" ? MemcpyPasses::Into((*job)->Values(), (*job)->engine().IdleArenaMemory())
                                        : MemcpyPasses::Over((*job)->Values());
        if (!m.ok()) return Fail("save", m.status());
        passes = std::move(*m);
      }
      continue;
    }
    stall.Add(res.stall_max_s);
    durable.Add(res.write_s);
    commit.Add(res.commit_s);
    if (passes != nullptr) {
      // A warming pass first: buffers idle through a save can be slow to
      // touch again, and the ceiling is the memory's speed, not that.
      passes->Pass(threads);
      const double bw = passes->Pass(threads);
      ceiling.Add(bw);
      stall_x_memcpy.Add(static_cast<double>(res.bytes_logical) / res.stall_max_s / bw);
    }
  }
  JsonWriter j;
  j.BeginObject()
      .Field("bytes", res.bytes_logical)
      .Field("bytes_stored", res.bytes_stored)
      .Field("state_bytes", state_bytes)
      .Field("staging_bytes", static_cast<int64_t>(o.engine.staging_bytes))
      .Field("ranks", res.ranks)
      .Field("staging_threads", threads)
      .Field("repeat", repeat)
      .Field("warmup", warmup)
      .Field("first_step", warmup)
      .Field("keep", keep)
      .Field("stall_s", stall.Median())
      .Field("stall_s_min", stall.Min())
      .Field("stall_s_max", stall.Max())
      .Field("durable_s", durable.Median())
      .Field("commit_s", commit.Median());
  if (passes != nullptr) {
    j.Field("memcpy_into", over_state ? memcpy_into : std::string("buffer"))
        .Field("memcpy_bytes_per_s", ceiling.Median())
        .Field("memcpy_bytes_per_s_min", ceiling.Min())
        .Field("memcpy_bytes_per_s_max", ceiling.Max())
        .Field("stall_x_memcpy", stall_x_memcpy.Median())
        .Field("stall_x_memcpy_min", stall_x_memcpy.Min())
        .Field("stall_x_memcpy_max", stall_x_memcpy.Max());
  }
  j.EndObject();
  std::printf("%s\n", j.str().c_str());
  return tools::kExitOk;
}

int Load(int argc, char** argv) {
  std::string root, mesh_text = "dp=1";
  int64_t step = 1, repeat = 1;
  tools::Args args("load", "--root DIR [--step 1] [--mesh dp=1] [--repeat 1]",
                   "Loads a step written by `save` onto --mesh (ranks one after another), times "
                   "the loads alone, then compares every element with the generator.");
  args.String("root", &root, "checkpoint root (required)");
  args.Int("step", &step, "step to load (default 1)");
  args.String("mesh", &mesh_text, "target mesh (default dp=1)");
  args.Int("repeat", &repeat, "loads of each rank, one after another; load_s sums each rank's median (default 1)");
  args.Program("bench_probe");
  int exit = 0;
  if (!args.Parse(argc, argv, 2, &exit)) return exit;
  auto mesh = Mesh::Parse(mesh_text);
  if (root.empty() || !mesh.ok() || repeat < 1 || repeat > 1000) {
    std::fprintf(stderr, "bench_probe load: needs --root, a valid --mesh and --repeat between 1 and 1000\n");
    return tools::kExitUsage;
  }
  auto storage = OpenStorage(root);
  if (!storage.ok()) return Fail("load", storage.status());
  auto res = tools::RestoreCheck(**storage, step, *mesh, {}, static_cast<int>(repeat));
  if (!res.ok()) return Fail("load", res.status());
  if (res->mismatches != 0) {
    std::fprintf(stderr, "bench_probe load: %lld elements differ; first: %s\n", static_cast<long long>(res->mismatches),
                 res->first_mismatch.c_str());
    return tools::kExitProblem;
  }
  JsonWriter j;
  j.BeginObject()
      .Field("ranks", res->ranks)
      .Field("elements", res->elements)
      .Field("bytes_read", res->bytes_read)
      .Field("bytes_decoded", res->bytes_decoded)
      .Field("bytes_needed", res->bytes_needed)
      .Field("repeat", repeat)
      .Field("load_s", res->load_seconds)
      .EndObject();
  std::printf("%s\n", j.str().c_str());
  return tools::kExitOk;
}

int Main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "";
  if (what == "memcpy") return Memcpy(argc, argv);
  if (what == "save") return Save(argc, argv);
  if (what == "load") return Load(argc, argv);
  std::fprintf(what == "--help" ? stdout : stderr,
               "usage: bench_probe memcpy|save|load [options]   (--help after one for its options)\n");
  return what == "--help" ? tools::kExitOk : tools::kExitUsage;
}

}  // namespace
}  // namespace ckpt::bench

int main(int argc, char** argv) { return ckpt::bench::Main(argc, argv); }

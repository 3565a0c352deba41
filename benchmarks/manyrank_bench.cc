// `verify --fast` on a checkpoint written by many ranks: generates a root
// with --ranks data files (each rank saving one row of a shared tensor and
// its own blob, one after another through a shared engine), then times the
// fast verification (manifest, every file's size and index, exact cover)
// and a deep one. Put --dir on tmpfs to time the checks, not the disk.
//
//   build/benchmarks/manyrank_bench --dir /dev/shm/manyrank --ranks 16384
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "bench_util.h"
#include "ckpt/checkpointer.h"
#include "ckpt/verify.h"
#include "common/cli.h"
#include "util/clock.h"
#include "util/json.h"

namespace ckpt::bench {
namespace {

int Main(int argc, char** argv) {
  std::string dir, json_path;
  int64_t ranks = 16384, runs = 3;
  tools::Args args("manyrank_bench", "--dir DIR [--ranks 16384] [--runs 3] [--json FILE]",
                   "Times verify --fast (and deep) on a checkpoint written by many ranks.");
  args.String("dir", &dir, "directory for the generated root (tmpfs recommended)");
  args.Int("ranks", &ranks, "ranks, one data file each (default 16384)");
  args.Int("runs", &runs, "timed verifications of each kind (default 3)");
  args.String("json", &json_path, "also write the figures as JSON to this file");
  int exit = 0;
  if (!ParseBenchArgs(args, argc, argv, dir, &exit)) return exit;
  const std::string root = dir + "/root";
  std::filesystem::remove_all(root);
  SaveEngineOptions eo;
  eo.staging_bytes = 8 << 20;
  auto engine = CreateSaveEngine(eo);
  if (!engine.ok()) return 1;
  // One storage for all ranks of this process, as ranks sharing a node would.
  auto shared = OpenStorage(root);
  if (!shared.ok()) return 1;
  const TensorSpec spec{"model.embed_tokens.weight", DType::kF32, {ranks, 64}};
  std::vector<float> row(64);
  const double t0 = NowSeconds();
  // Rank 0 (the leader) last: it merges the reports of all the others. A
  // Checkpointer waits for its save's outcome when destroyed, so all stay
  // open until the leader has committed.
  std::vector<std::unique_ptr<Checkpointer>> open;
  for (int64_t i = 1; i <= ranks; ++i) {
    const int rank = static_cast<int>(i % ranks);
    CheckpointerOptions o;
    o.storage = *shared;
    o.rank = rank;
    o.world_size = static_cast<int>(ranks);
    o.engine = *engine;
    o.gc_on_open = false;
    o.commit_timeout_s = 3600;
    auto cp = Checkpointer::Open(o);
    if (!cp.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, std::string(cp.status().message()).c_str());
      return 1;
    }
    for (int c = 0; c < 64; ++c) row[c] = static_cast<float>(rank) + 0.01f * static_cast<float>(c);
    State s;
    Box box = Box::Whole(spec.shape);
    box.offsets[0] = rank;
    box.sizes[0] = 1;
    (void)s.AddShard(spec, box, row.data());
    const std::string rng = "rng-state-of-rank-" + std::to_string(rank);
    (void)s.AddBlob("rng", rng.data(), rng.size());
    auto h = (*cp)->Save(1, s);
    absl::Status st = !h.ok() ? h.status() : rank == 0 ? h->Wait() : h->WaitDurable();
    if (!st.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, std::string(st.message()).c_str());
      return 1;
    }
    open.push_back(std::move(cp).value());
    if (i % 2048 == 0) {
      std::printf("  %lld ranks saved\n", static_cast<long long>(i));
      std::fflush(stdout);
    }
  }
  open.clear();
  const double gen = NowSeconds() - t0;
  auto storage = OpenStorage(root);
  if (!storage.ok()) return 1;
  Samples fast, deep;
  int64_t files = 0, chunks = 0;
  for (int64_t r = 0; r < runs; ++r) {
    for (bool is_deep : {false, true}) {
      VerifyOptions vo;
      vo.deep = is_deep;
      const double v0 = NowSeconds();
      auto rep = VerifyStep(**storage, 1, vo);
      const double dt = NowSeconds() - v0;
      if (!rep.ok() || !rep->ok()) {
        std::fprintf(stderr, "verify failed\n");
        return 1;
      }
      (is_deep ? deep : fast).Add(dt);
      files = rep->files;
      chunks = rep->chunks;
    }
  }
  std::printf("%lld ranks: generated in %.1f s; %lld files, %lld chunks\n", static_cast<long long>(ranks), gen,
              static_cast<long long>(files), static_cast<long long>(chunks));
  std::printf("verify --fast: %.3f s (median; %.3f..%.3f)\n", fast.Median(), fast.Min(), fast.Max());
  std::printf("verify (deep): %.3f s (median; %.3f..%.3f)\n", deep.Median(), deep.Min(), deep.Max());
  JsonWriter w;
  w.BeginObject()
      .Field("ranks", ranks)
      .Field("files", files)
      .Field("chunks", chunks)
      .Field("fast_s", fast.Median())
      .Field("deep_s", deep.Median())
      .EndObject();
  WriteTextFile(json_path, w.str());
  std::filesystem::remove_all(root);
  return 0;
}

}  // namespace
}  // namespace ckpt::bench

int main(int argc, char** argv) { return ckpt::bench::Main(argc, argv); }

// ckpt bench: save, load and verify costs on the user's own storage, and a
// costs file for `ckpt interval --costs`.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "ckpt/verify.h"
#include "commands.h"
#include "common/cli.h"
#include "common/stats.h"
#include "common/synth_job.h"
#include "util/clock.h"
#include "util/json.h"
#include "util/strings.h"

namespace ckpt::tools {

int BenchMain(int argc, char** argv, int first) {
  std::string out, mesh_text = "dp=1", costs_path;
  Codec codec_choice = Codec::kNone;
  int64_t size = int64_t{256} << 20, runs = 3;
  bool json = false;
  Args args("bench", "--out URI [--size 256M] [--runs 3] [--mesh dp=1] [--codec none] [--costs FILE] [--json]",
            "Measures what a checkpoint costs on this storage: a synthetic bf16 state of\n"
            "--size is saved --runs times (the stall: how long training is blocked; the\n"
            "time until durable and until committed), loaded back onto the same mesh and\n"
            "deep-verified. Medians are printed, and --costs writes them as JSON that\n"
            "`ckpt interval --costs FILE` reads. Steps are written under --out and removed\n"
            "afterwards.");
  args.String("out", &out, "checkpoint root to measure (path or storage URI; required)");
  args.Size("size", &size, "state size (default 256M)", true);
  args.Int("runs", &runs, "saves measured; the median is reported (default 3)");
  args.String("mesh", &mesh_text, "simulated ranks (default dp=1)");
  args.CodecFlag("codec", &codec_choice, "default none");
  args.String("costs", &costs_path, "write the medians as JSON for `ckpt interval --costs`");
  args.Switch("json", &json, "print a JSON object instead of text");
  int exit = 0;
  if (!args.Parse(argc, argv, first, &exit)) return exit;
  auto mesh = Mesh::Parse(mesh_text);
  const std::optional<Codec> codec = codec_choice;
  if (out.empty() || !mesh.ok() || !codec || runs < 1 || size < (1 << 20)) {
    std::fprintf(stderr, "ckpt bench: needs --out, a valid --mesh and --codec, --runs >= 1, --size >= 1M\n%s",
                 args.Usage().c_str());
    return kExitUsage;
  }
  auto storage = OpenStorage(out);
  if (!storage.ok()) {
    std::fprintf(stderr, "ckpt bench: %s\n", std::string(storage.status().message()).c_str());
    return kExitUsage;
  }
  if (auto steps = ListCheckpointSteps(**storage); steps.ok() && !steps->empty()) {
    std::fprintf(stderr, "ckpt bench: %s already holds checkpoints; give an empty root\n", out.c_str());
    return kExitUsage;
  }
  SynthJobOptions o;
  o.uri = out;
  o.mesh = *mesh;
  o.model.params = size / 2;  // bf16
  o.model.dtype = DType::kBF16;
  o.codec = *codec;
  o.retention.keep_last = 1;
  o.engine.staging_bytes = static_cast<size_t>(std::min<int64_t>(size + (64 << 20), int64_t{1} << 30));
  auto job = SyntheticJob::Create(o);
  if (!job.ok()) {
    std::fprintf(stderr, "ckpt bench: %s\n", std::string(job.status().message()).c_str());
    return kExitProblem;
  }
  std::vector<double> stall, write, commit, load, verify;
  int64_t bytes = 0, stored = 0;
  ProgressBar bar("bench");
  for (int64_t run = 1; run <= runs; ++run) {
    absl::Status s = (*job)->SaveAsync(run, static_cast<uint64_t>(run));
    auto res = s.ok() ? (*job)->Finish() : absl::StatusOr<SynthSaveResult>(s);
    if (!res.ok()) {
      std::fprintf(stderr, "ckpt bench: save %lld: %s\n", static_cast<long long>(run),
                   std::string(res.status().message()).c_str());
      return kExitProblem;
    }
    stall.push_back(res->stall_max_s);
    write.push_back(res->write_s);
    commit.push_back(res->commit_s);
    bytes = res->bytes_logical;
    stored = res->bytes_stored;
    auto rc = RestoreCheck(**storage, run, *mesh);
    if (!rc.ok() || rc->mismatches != 0) {
      std::fprintf(stderr, "ckpt bench: load of step %lld: %s\n", static_cast<long long>(run),
                   rc.ok() ? rc->first_mismatch.c_str() : std::string(rc.status().message()).c_str());
      return kExitProblem;
    }
    load.push_back(rc->seconds);
    const double t0 = NowSeconds();
    auto v = VerifyStep(**storage, run);
    if (!v.ok() || !v->ok()) {
      std::fprintf(stderr, "ckpt bench: verify of step %lld failed\n", static_cast<long long>(run));
      return kExitProblem;
    }
    verify.push_back(NowSeconds() - t0);
    bar.Update(run, runs);
  }
  bar.Finish();
  // What the runs wrote: the root held no checkpoint before.
  if (auto entries = (*storage)->List(""); entries.ok()) {
    for (const DirEntry& e : *entries) {
      if (!IsCheckpointRootEntry(e.name)) continue;
      (void)(e.is_dir ? (*storage)->RemoveAll(e.name) : (*storage)->Remove(e.name));
    }
  }
  auto write_json = [&](JsonWriter& w) {
    w.BeginObject()
        .Field("uri", out)
        .Field("bytes", bytes)
        .Field("bytes_stored", stored)
        .Field("codec", std::string(CodecName(*codec)))
        .Field("ranks", mesh->NumRanks())
        .Field("runs", runs)
        .Field("stall_s", Median(stall))
        .Field("write_s", Median(write))
        .Field("commit_s", Median(commit))
        .Field("load_s", Median(load))
        .Field("verify_s", Median(verify))
        .EndObject();
  };
  if (!costs_path.empty()) {
    JsonWriter costs;
    write_json(costs);
    std::ofstream f(costs_path);
    f << costs.str() << "\n";
    if (!f) {
      std::fprintf(stderr, "ckpt bench: cannot write %s\n", costs_path.c_str());
      return kExitUsage;
    }
  }
  // The costs file holds the same JSON that --json prints.
  Render(json, write_json, [&] {
    const double gb = static_cast<double>(bytes) / 1e9;
    std::printf("%s: %s of bf16 on %lld rank(s), codec %s, medians of %lld run(s)\n", out.c_str(),
                HumanBytes(static_cast<double>(bytes)).c_str(), static_cast<long long>(mesh->NumRanks()),
                std::string(CodecName(*codec)).c_str(), static_cast<long long>(runs));
    std::printf("  stall (training blocked)  %8.3f s  %7.2f GB/s\n", Median(stall), gb / Median(stall));
    std::printf("  durable                   %8.3f s  %7.2f GB/s\n", Median(write), gb / Median(write));
    std::printf("  committed                 %8.3f s\n", Median(commit));
    std::printf("  load (same mesh)          %8.3f s  %7.2f GB/s\n", Median(load), gb / Median(load));
    std::printf("  verify (deep)             %8.3f s  %7.2f GB/s\n", Median(verify), gb / Median(verify));
    if (!costs_path.empty()) {
      std::printf("costs written to %s: ckpt interval --costs %s --mtbf 24h\n", costs_path.c_str(), costs_path.c_str());
    }
  });
  return kExitOk;
}

}  // namespace ckpt::tools

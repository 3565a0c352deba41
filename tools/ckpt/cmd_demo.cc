// ckpt demo: a small synthetic training job on a local directory.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "ckpt/verify.h"
#include "cli.h"
#include "commands.h"
#include "format/layout.h"
#include "synth_job.h"
#include "util/clock.h"
#include "util/strings.h"

namespace ckpt::tools {
namespace {

// The demo owns its directory: it may reuse one that holds only a checkpoint
// root (LATEST, step-*), and refuses anything else.
bool PrepareDir(const std::string& dir, std::string* why) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return true;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("LATEST", 0) == 0 || ParseStepDir(name).has_value()) continue;
    *why = "it holds '" + name + "', which is not part of a checkpoint root";
    return false;
  }
  fs::remove_all(dir, ec);
  if (ec) {
    *why = ec.message();
    return false;
  }
  return true;
}

void Print(const char* fmt, auto... args) {
  std::printf(fmt, args...);
  std::fflush(stdout);
}

}  // namespace

int DemoMain(int argc, char** argv, int first) {
  std::string dir = "ckpt-demo", mesh_text = "dp=2,tp=2", restore_text = "tp=4",
              codec_name = "shuffle-zstd";
  int64_t params = 8000000, steps = 12, every = 4, keep = 2, step_ms = 60;
  Args args("demo", "[--dir DIR] [options]",
            "Runs a small synthetic training job: each step 'computes' for a while, every few\n"
            "steps the state is saved asynchronously (training goes on while blocks are\n"
            "checksummed, compressed and written), old steps are retired by retention, then a\n"
            "node loss is simulated: the latest checkpoint is restored onto a different mesh\n"
            "and every element compared, and all kept steps are verified.");
  args.String("dir", &dir, "checkpoint root (default ./ckpt-demo, recreated each run)");
  args.Size("params", &params, "parameter count (default 8M)", false);
  args.String("mesh", &mesh_text, "training mesh (default dp=2,tp=2)");
  args.String("restore-mesh", &restore_text, "mesh to restore onto (default tp=4)");
  args.String("codec", &codec_name, "none, zstd or shuffle-zstd (default shuffle-zstd)");
  args.Int("steps", &steps, "training steps (default 12)");
  args.Int("every", &every, "save every N steps (default 4)");
  args.Int("keep", &keep, "retention: keep the newest K steps (default 2)");
  args.Int("step-ms", &step_ms, "simulated compute per step in ms (default 60)");
  int exit = 0;
  if (!args.Parse(argc, argv, first, &exit)) return exit;
  auto mesh = Mesh::Parse(mesh_text);
  auto restore_mesh = Mesh::Parse(restore_text);
  auto codec = ParseCodec(codec_name);
  if (!mesh.ok() || !restore_mesh.ok() || !codec || steps < 1 || every < 1) {
    std::fprintf(stderr, "ckpt demo: bad --mesh, --restore-mesh, --codec, --steps or --every\n");
    return kExitUsage;
  }
  std::string why;
  if (!PrepareDir(dir, &why)) {
    std::fprintf(stderr, "ckpt demo: refusing to use %s: %s\n", dir.c_str(), why.c_str());
    return kExitUsage;
  }
  const double t0 = NowSeconds();
  SynthJobOptions o;
  o.uri = dir;
  o.mesh = *mesh;
  o.model.params = params;
  o.model.dtype = DType::kBF16;
  o.model.adam = true;
  o.model.zero = mesh->SizeOf("dp") > 1;
  o.codec = *codec;
  o.retention.keep_last = static_cast<int>(keep);
  o.engine.staging_bytes = 64 << 20;
  auto job = SyntheticJob::Create(o);
  if (!job.ok()) {
    std::fprintf(stderr, "ckpt demo: %s\n", std::string(job.status().message()).c_str());
    return kExitProblem;
  }
  auto storage = OpenStorage(dir);
  if (!storage.ok()) {
    std::fprintf(stderr, "ckpt demo: %s\n", std::string(storage.status().message()).c_str());
    return kExitProblem;
  }
  const StorageCaps caps = (*storage)->caps();
  Print("ckpt demo: %lld simulated ranks (%s), %.1fM params bf16 + Adam%s, codec %s\n",
        static_cast<long long>(mesh->NumRanks()), mesh->ToString().c_str(),
        static_cast<double>((*job)->model().params) / 1e6, o.model.zero ? " (ZeRO-1)" : "",
        std::string(CodecName(*codec)).c_str());
  Print("  root %s (%s, %s)\n", dir.c_str(), caps.engine.c_str(),
        caps.direct_io ? "O_DIRECT where the filesystem allows" : "buffered");

  int64_t save_step = -1;
  int64_t steps_since = 0;
  auto report = [&](bool waited) -> bool {
    auto res = (*job)->Finish();
    if (!res.ok()) {
      Print("  step %4lld  save FAILED: %s\n", static_cast<long long>(save_step),
            std::string(res.status().message()).c_str());
      return false;
    }
    Print("  step %4lld  committed %s: %s -> %s (ratio %.3f), durable after %.2f s\n",
          static_cast<long long>(res->step),
          waited ? "(training waited for it)"
                 : StrCat("while training ran ", steps_since, " more step(s)").c_str(),
          HumanBytes(static_cast<double>(res->bytes_logical)).c_str(),
          HumanBytes(static_cast<double>(res->bytes_stored)).c_str(),
          static_cast<double>(res->bytes_stored) / static_cast<double>(res->bytes_logical),
          res->write_s);
    return true;
  };
  for (int64_t step = 1; step <= steps; ++step) {
    std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));  // "compute"
    ++steps_since;
    if ((*job)->InFlight() && (*job)->Done() && !report(false)) return kExitProblem;
    if (step % every != 0) continue;
    if ((*job)->InFlight() && !report(true)) return kExitProblem;
    absl::Status s = (*job)->SaveAsync(step, static_cast<uint64_t>(step));
    if (!s.ok()) {
      Print("  step %4lld  save refused: %s\n", static_cast<long long>(step),
            std::string(s.message()).c_str());
      return kExitProblem;
    }
    save_step = step;
    steps_since = 0;
    // The stall is what each simulated rank's Save call blocked for.
    const SynthSaveResult& p = (*job)->pending();
    Print("  step %4lld  save started: each rank stalled <= %.1f ms to stage %s\n",
          static_cast<long long>(step), 1000.0 * p.stall_max_s,
          HumanBytes(static_cast<double>(p.bytes_logical) / p.ranks).c_str());
  }
  if ((*job)->InFlight() && !report(true)) return kExitProblem;

  auto list = ListCheckpointSteps(**storage);
  std::string kept;
  if (list.ok()) {
    for (const StepInfo& s : *list) {
      if (s.committed) kept += (kept.empty() ? "" : ", ") + std::to_string(s.step);
    }
  }
  Print("  retention keeps the newest %lld: steps %s\n", static_cast<long long>(keep),
        kept.c_str());

  Print("  node lost: restoring the latest step onto %s (%lld ranks)...\n",
        restore_mesh->ToString().c_str(), static_cast<long long>(restore_mesh->NumRanks()));
  auto rc = RestoreCheck(**storage, kLatestStep, *restore_mesh);
  if (!rc.ok()) {
    Print("  restore FAILED: %s\n", std::string(rc.status().message()).c_str());
    return kExitProblem;
  }
  Print("  restored step %lld: %lld elements, %s, read amplification %.3f\n",
        static_cast<long long>(rc->step), static_cast<long long>(rc->elements),
        rc->mismatches == 0 ? "all identical to what was saved"
                            : StrCat(rc->mismatches, " DIFFER; first ", rc->first_mismatch).c_str(),
        rc->bytes_needed ? static_cast<double>(rc->bytes_decoded) / rc->bytes_needed : 1.0);
  bool ok = rc->mismatches == 0;
  if (list.ok()) {
    for (const StepInfo& s : *list) {
      if (!s.committed) continue;
      auto v = VerifyStep(**storage, s.step);
      if (!v.ok() || !v->ok()) {
        Print("  verify step %lld: %s\n", static_cast<long long>(s.step),
              !v.ok() ? std::string(v.status().message()).c_str()
                      : v->problems.front().message.c_str());
        ok = false;
      } else {
        Print("  verify step %lld: ok, %lld blocks, both checksums of each\n",
              static_cast<long long>(s.step), static_cast<long long>(v->blocks));
      }
    }
  }
  Print("%s in %.1f s\n", ok ? "done" : "FAILED", NowSeconds() - t0);
  return ok ? kExitOk : kExitProblem;
}

}  // namespace ckpt::tools

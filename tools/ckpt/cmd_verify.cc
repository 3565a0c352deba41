// ckpt verify: every block, both checksums, indexes, exact cover.
#include <cstdio>

#include "ckpt/verify.h"
#include "cli.h"
#include "commands.h"
#include "synth_job.h"
#include "util/json.h"

namespace ckpt::tools {
namespace {

void ProblemJson(JsonWriter& w, const VerifyProblem& p) {
  w.BeginObject().Field("message", p.message);
  if (!p.tensor.empty()) w.Field("tensor", p.tensor);
  if (!p.chunk.empty()) w.Field("chunk", p.chunk);
  if (!p.file.empty()) w.Field("file", p.file);
  if (p.offset >= 0) w.Field("offset", p.offset);
  w.EndObject();
}

}  // namespace

int VerifyMain(int argc, char** argv, int first) {
  std::string dir;
  int64_t step = kLatestStep, threads = 0;
  bool all = false, fast = false, json = false;
  Args args("verify", "DIR [--step S | --all] [--fast] [--json]",
            "Reads every block of a committed step, checks both checksums (stored and\n"
            "decoded bytes), the trailers, padding, file headers, footers and indexes against\n"
            "the manifest, and that each tensor's chunks cover it exactly once. Problems name\n"
            "the tensor, chunk, file and byte offset. --fast skips reading the blocks.");
  args.Positional("DIR", &dir, "checkpoint root (path or storage URI)");
  args.Int("step", &step, "step to verify (default: latest committed)");
  args.Switch("all", &all, "verify every committed step");
  args.Switch("fast", &fast, "metadata, sizes, indexes and exact cover only");
  args.Int("threads", &threads, "checking threads (default min(4, cores))");
  args.Switch("json", &json, "print a JSON report");
  int exit = 0;
  if (!args.Parse(argc, argv, first, &exit)) return exit;
  if (all && args.Given("step")) {
    std::fprintf(stderr, "ckpt verify: --all and --step exclude each other\n");
    return kExitUsage;
  }
  auto storage = OpenStorage(dir);
  if (!storage.ok()) {
    std::fprintf(stderr, "ckpt verify: %s\n", std::string(storage.status().message()).c_str());
    return kExitUsage;
  }
  Storage& st = **storage;
  std::vector<int64_t> steps;
  std::optional<VerifyProblem> latest_problem = CheckLatestPointer(st);
  if (all) {
    auto list = ListCheckpointSteps(st);
    if (!list.ok()) {
      std::fprintf(stderr, "ckpt verify: %s\n", std::string(list.status().message()).c_str());
      return kExitUsage;
    }
    for (const StepInfo& s : *list) {
      if (s.committed) steps.push_back(s.step);
    }
    if (steps.empty()) {
      std::fprintf(stderr, "ckpt verify: no committed step under %s\n", dir.c_str());
      return kExitUsage;
    }
  } else if (step == kLatestStep) {
    auto latest = LatestCommittedStep(st);
    if (!latest.ok()) {
      std::fprintf(stderr, "ckpt verify: %s\n", std::string(latest.status().message()).c_str());
      return kExitUsage;
    }
    steps.push_back(*latest);
  } else {
    steps.push_back(step);
  }

  bool ok = !latest_problem.has_value();
  std::vector<VerifyReport> reports;
  for (int64_t s : steps) {
    VerifyOptions vo;
    vo.deep = !fast;
    vo.worker_threads = static_cast<int>(threads);
    ProgressBar bar("verify step " + std::to_string(s));
    vo.progress = [&bar](int64_t done, int64_t total) { bar.Update(done, total); };
    auto rep = VerifyStep(st, s, vo);
    bar.Finish();
    if (!rep.ok()) {
      std::fprintf(stderr, "ckpt verify: %s\n", std::string(rep.status().message()).c_str());
      return kExitUsage;
    }
    ok = ok && rep->ok();
    reports.push_back(std::move(rep).value());
  }
  if (json) {
    JsonWriter w;
    w.BeginObject().Field("root", dir).Field("ok", ok);
    if (latest_problem) {
      w.Key("latest_problem");
      ProblemJson(w, *latest_problem);
    }
    w.Key("steps").BeginArray();
    for (const VerifyReport& r : reports) {
      w.BeginObject()
          .Field("step", r.step)
          .Field("ok", r.ok())
          .Field("deep", r.deep)
          .Field("files", r.files)
          .Field("tensors", r.tensors)
          .Field("chunks", r.chunks)
          .Field("blocks", r.blocks)
          .Field("bytes_read", r.bytes_read)
          .Field("seconds", r.seconds)
          .Field("throughput_bytes_per_s", r.seconds > 0 ? r.bytes_read / r.seconds : 0.0);
      w.Key("problems").BeginArray();
      for (const VerifyProblem& p : r.problems) ProblemJson(w, p);
      w.EndArray().EndObject();
    }
    w.EndArray().EndObject();
    std::printf("%s\n", w.str().c_str());
  } else {
    if (latest_problem) std::printf("LATEST: %s\n", latest_problem->message.c_str());
    for (const VerifyReport& r : reports) {
      if (r.ok()) {
        std::printf("step %lld: ok (%s) %lld files, %lld tensors, %lld chunks, %lld blocks, "
                    "%s read in %.2f s\n",
                    static_cast<long long>(r.step), r.deep ? "deep" : "fast",
                    static_cast<long long>(r.files), static_cast<long long>(r.tensors),
                    static_cast<long long>(r.chunks), static_cast<long long>(r.blocks),
                    HumanBytes(static_cast<double>(r.bytes_read)).c_str(), r.seconds);
      } else {
        std::printf("step %lld: %zu problem(s)\n", static_cast<long long>(r.step),
                    r.problems.size());
        for (const VerifyProblem& p : r.problems) std::printf("  %s\n", p.message.c_str());
      }
    }
  }
  return ok ? kExitOk : kExitProblem;
}

}  // namespace ckpt::tools

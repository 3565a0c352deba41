// ckpt inspect: steps, tensors, blobs and mesh of a checkpoint.
#include <cstdio>
#include <ctime>

#include "ckpt/verify.h"
#include "commands.h"
#include "common/cli.h"
#include "common/synth_job.h"
#include "util/json.h"
#include "util/strings.h"

namespace ckpt::tools {
namespace {

std::string TimeText(int64_t unix_ns) {
  if (unix_ns <= 0) return "-";
  std::time_t t = static_cast<std::time_t>(unix_ns / 1000000000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string ShapeText(const Shape& s) { return ShapeToString(s); }

}  // namespace

int InspectMain(int argc, char** argv, int first) {
  std::string dir;
  int64_t step = kLatestStep;
  bool json = false;
  Args args("inspect", "DIR [--step S] [--json]",
            "Lists the steps under a checkpoint root and describes one (default: the latest\n"
            "committed): mesh, library version, tensors with dtype, shape, chunk count,\n"
            "stored size and compression ratio, and blobs.");
  args.Positional("DIR", &dir, "checkpoint root (path or storage URI)");
  args.Int("step", &step, "step to describe (default: latest committed)");
  args.Switch("json", &json, "print JSON");
  int exit = 0;
  if (!args.Parse(argc, argv, first, &exit)) return exit;
  auto storage = OpenStorage(dir);
  if (!storage.ok()) {
    std::fprintf(stderr, "ckpt inspect: %s\n", std::string(storage.status().message()).c_str());
    return kExitUsage;
  }
  auto steps = ListCheckpointSteps(**storage);
  if (!steps.ok()) {
    std::fprintf(stderr, "ckpt inspect: %s\n", std::string(steps.status().message()).c_str());
    return kExitUsage;
  }
  if (step == kLatestStep) {
    auto latest = LatestCommittedStep(**storage);
    if (!latest.ok()) {
      std::fprintf(stderr, "ckpt inspect: %s\n", std::string(latest.status().message()).c_str());
      return kExitUsage;
    }
    step = *latest;
  }
  WarnIfDamaged(**storage, step, "inspect");
  auto sum = SummarizeStep(**storage, step);
  if (!sum.ok()) {
    std::fprintf(stderr, "ckpt inspect: %s\n", std::string(sum.status().message()).c_str());
    return absl::IsNotFound(sum.status()) ? kExitUsage : kExitProblem;
  }
  auto ratio = [](int64_t stored, int64_t logical) {
    return logical ? static_cast<double>(stored) / static_cast<double>(logical) : 1.0;
  };
  Render(
      json,
      [&](JsonWriter& w) {
        w.BeginObject().Field("root", dir);
        w.Key("steps").BeginArray();
        for (const StepInfo& s : *steps) {
          w.BeginObject()
              .Field("step", s.step)
              .Field("committed", s.committed)
              .Field("bytes", s.bytes)
              .Field("created", TimeText(s.created_unix_ns))
              .EndObject();
        }
        w.EndArray();
        w.Key("checkpoint")
            .BeginObject()
            .Field("step", sum->step)
            .Field("world_size", sum->world_size)
            .Field("created", TimeText(sum->created_unix_ns))
            .Field("library_version", sum->library_version)
            .Field("codec", sum->codec);
        w.Key("blocks_by_codec").BeginObject();
        for (const auto& [name, n] : sum->blocks_by_codec) w.Field(name, n);
        w.EndObject()
            .Field("mesh", sum->mesh ? sum->mesh->ToString() : std::string())
            .Field("files", sum->files)
            .Field("bytes_logical", sum->bytes_logical)
            .Field("bytes_stored", sum->bytes_stored)
            .Field("bytes_on_disk", sum->bytes_on_disk)
            .Field("ratio", ratio(sum->bytes_stored, sum->bytes_logical));
        w.Key("metadata").BeginObject();
        for (const auto& [k, v] : sum->metadata) w.Field(k, v);
        w.EndObject();
        w.Key("tensors").BeginArray();
        for (const TensorSummary& t : sum->tensors) {
          w.BeginObject().Field("fqn", t.fqn).Field("dtype", DTypeName(t.dtype));
          w.Key("shape").BeginArray();
          for (int64_t d : t.shape) w.Int(d);
          w.EndArray()
              .Field("chunks", t.chunks)
              .Field("bytes_logical", t.bytes_logical)
              .Field("bytes_stored", t.bytes_stored)
              .Field("ratio", ratio(t.bytes_stored, t.bytes_logical))
              .EndObject();
        }
        w.EndArray();
        w.Key("blobs").BeginArray();
        for (const BlobSummary& b : sum->blobs) {
          w.BeginObject().Field("name", b.name).Field("rank", b.rank).Field("size", b.size).EndObject();
        }
        w.EndArray().EndObject().EndObject();
      },
      [&] {
        std::printf("%s: %zu step(s)\n", dir.c_str(), steps->size());
        for (const StepInfo& s : *steps) {
          std::printf("  step %-10lld %-11s %10s  %s\n", static_cast<long long>(s.step),
                      s.committed ? "committed" : "incomplete", HumanBytes(static_cast<double>(s.bytes)).c_str(),
                      TimeText(s.created_unix_ns).c_str());
        }
        std::printf("\nstep %lld: saved by ckpt %s at %s from %d rank(s)%s%s\n", static_cast<long long>(sum->step),
                    sum->library_version.c_str(), TimeText(sum->created_unix_ns).c_str(), sum->world_size,
                    sum->mesh ? ", mesh " : "", sum->mesh ? sum->mesh->ToString().c_str() : "");
        std::printf("  %s logical, %s stored (ratio %.3f, codec %s), %s in %lld file(s)\n",
                    HumanBytes(static_cast<double>(sum->bytes_logical)).c_str(),
                    HumanBytes(static_cast<double>(sum->bytes_stored)).c_str(),
                    ratio(sum->bytes_stored, sum->bytes_logical), sum->codec.c_str(),
                    HumanBytes(static_cast<double>(sum->bytes_on_disk)).c_str(), static_cast<long long>(sum->files));
        if (!sum->blocks_by_codec.empty()) {
          std::string blocks;
          for (const auto& [name, n] : sum->blocks_by_codec) {
            blocks += StrCat(blocks.empty() ? "" : ", ", n, " ", name);
          }
          std::printf("  blocks: %s\n", blocks.c_str());
        }
        for (const auto& [k, v] : sum->metadata) std::printf("  %s = %s\n", k.c_str(), v.c_str());
        std::printf("\n  %-52s %-7s %-16s %6s %10s %6s\n", "tensor", "dtype", "shape", "chunks", "stored", "ratio");
        for (const TensorSummary& t : sum->tensors) {
          std::printf("  %-52s %-7s %-16s %6lld %10s %6.3f\n", t.fqn.c_str(), std::string(DTypeName(t.dtype)).c_str(),
                      ShapeText(t.shape).c_str(), static_cast<long long>(t.chunks),
                      HumanBytes(static_cast<double>(t.bytes_stored)).c_str(), ratio(t.bytes_stored, t.bytes_logical));
        }
        if (!sum->blobs.empty()) {
          std::printf("\n  blobs:\n");
          for (const BlobSummary& b : sum->blobs) {
            std::printf("    %-30s %-8s %s\n", b.name.c_str(), b.rank < 0 ? "global" : StrCat("rank ", b.rank).c_str(),
                        HumanBytes(static_cast<double>(b.size)).c_str());
          }
        }
      });
  return kExitOk;
}

}  // namespace ckpt::tools

// ckpt stats: the numerical health of a step's tensors (NaN, Inf, ranges,
// norms), and drift against an earlier step.
#include <cstdio>

#include "ckpt/audit.h"
#include "ckpt/checkpointer.h"
#include "ckpt/storage.h"
#include "ckpt/verify.h"
#include "commands.h"
#include "common/cli.h"
#include "util/bytes.h"
#include "util/json.h"
#include "util/strings.h"

namespace ckpt::tools {

int StatsMain(int argc, char** argv, int first) {
  std::string dir, glob;
  int64_t step = kLatestStep;
  bool json = false, gate = false, allow_zero = false;
  double max_change = 0.5;
  Args args("stats", "DIR [--step S] [--tensor GLOB] [--gate] [--json]",
            "Per tensor: NaN and Inf counts, min, max, mean, L2 norm and the fraction of\n"
            "zeros, streamed block by block (memory does not grow with the checkpoint),\n"
            "every block checksum-verified. --gate exits 1 when a tensor has NaN or Inf, is all\n"
            "zeros, or its L2 norm moved more than --max-norm-change since the previous\n"
            "committed step, printing why: a check to run before promoting a checkpoint.\n"
            "Also per tensor: its stored bytes as a share of its raw bytes, and the steps its\n"
            "chunks are deltas against (docs/format.md, \"Delta chains\").");
  args.Positional("DIR", &dir, "checkpoint root (path or storage URI)");
  args.Int("step", &step, "step (default: the latest committed)");
  args.String("tensor", &glob, "only tensors matching this glob, e.g. '*.mlp.*'");
  args.Switch("gate", &gate, "fail (exit 1) on NaN/Inf, all-zero tensors or norm jumps");
  args.Double("max-norm-change", &max_change, "gate: largest relative L2 change allowed (default 0.5)");
  args.Switch("allow-zero", &allow_zero, "gate: all-zero tensors are fine");
  args.Switch("json", &json, "print JSON");
  int exit = 0;
  if (!args.Parse(argc, argv, first, &exit)) return exit;
  auto storage = OpenStorage(dir);
  if (!storage.ok()) return FailUnreadable("stats", storage.status());
  if (step == kLatestStep) {
    auto latest = LatestCommittedStep(**storage);
    if (!latest.ok()) return FailUnreadable("stats", latest.status());
    step = *latest;
  }
  WarnIfDamaged(**storage, step, "stats");
  AuditOptions o;
  o.tensor_glob = glob;
  ProgressBar bar("stats");
  o.progress = [&](int64_t d, int64_t t) { bar.Update(d, t); };
  auto stats = ComputeStats(**storage, step, o);
  bar.Finish();
  if (!stats.ok()) return FailUnreadable("stats", stats.status());

  std::vector<std::string> problems;
  int64_t previous_step = -1;
  if (gate) {
    std::vector<TensorStats> before;
    auto steps = ListCheckpointSteps(**storage);
    if (steps.ok()) {
      for (const StepInfo& s : *steps) {
        if (s.committed && s.step < step) previous_step = s.step;
      }
    }
    if (previous_step >= 0) {
      AuditOptions po;
      po.tensor_glob = glob;
      auto prev = ComputeStats(**storage, previous_step, po);
      if (!prev.ok()) return FailUnreadable("stats", prev.status());
      before = std::move(prev).value();
    }
    GateOptions g;
    g.max_norm_change = max_change;
    g.allow_all_zero = allow_zero;
    problems = GateProblems(*stats, previous_step >= 0 ? &before : nullptr, g);
  }

  Render(
      json,
      [&](JsonWriter& w) {
        w.BeginObject().Field("step", step);
        w.Key("tensors").BeginArray();
        for (const TensorStats& t : *stats) {
          w.BeginObject()
              .Field("name", t.fqn)
              .Field("dtype", DTypeName(t.dtype))
              .Field("shape", ShapeToString(t.shape))
              .Field("elements", t.elements)
              .Field("nan", t.nan)
              .Field("inf", t.inf)
              .Field("zero_fraction", t.ZeroFraction())
              .Field("min", t.min)
              .Field("max", t.max)
              .Field("mean", t.mean)
              .Field("l2", t.l2)
              .Field("bytes_logical", t.bytes_logical)
              .Field("bytes_stored", t.bytes_stored)
              .Field("delta_chunks", t.delta_chunks);
          w.Key("delta_bases").BeginArray();
          for (int64_t b : t.delta_bases) w.Int(b);
          w.EndArray().EndObject();
        }
        w.EndArray();
        if (gate) {
          w.Field("previous_step", previous_step).Field("ok", problems.empty());
          w.Key("problems").BeginArray();
          for (const std::string& p : problems) w.String(p);
          w.EndArray();
        }
        w.EndObject();
      },
      [&] {
        std::printf("step %lld: %zu tensors\n", static_cast<long long>(step), stats->size());
        std::printf("%-48s %6s %6s %8s %12s %12s %12s %12s %7s  %s\n", "tensor", "nan", "inf", "zeros", "min", "max",
                    "mean", "l2", "stored", "delta of");
        for (const TensorStats& t : *stats) {
          std::string bases;
          for (int64_t b : t.delta_bases) bases += (bases.empty() ? "" : ",") + std::to_string(b);
          const double stored =
              t.bytes_logical > 0 ? static_cast<double>(t.bytes_stored) / static_cast<double>(t.bytes_logical) : 1;
          std::printf("%-48s %6lld %6lld %7.1f%% %12.5g %12.5g %12.5g %12.5g %6.1f%%  %s\n", t.fqn.c_str(),
                      static_cast<long long>(t.nan), static_cast<long long>(t.inf), 100 * t.ZeroFraction(), t.min,
                      t.max, t.mean, t.l2, 100 * stored, bases.empty() ? "-" : bases.c_str());
        }
        if (gate) {
          if (problems.empty()) {
            std::printf("gate: ok%s\n", previous_step >= 0 ? StrCat(" (norms against step ", previous_step, ")").c_str()
                                                           : " (no earlier step to compare norms with)");
          } else {
            std::printf("gate: FAILED\n");
            for (const std::string& p : problems) std::printf("  %s\n", p.c_str());
          }
        }
      });
  return problems.empty() ? kExitOk : kExitProblem;
}

}  // namespace ckpt::tools

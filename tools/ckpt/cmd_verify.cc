// ckpt verify: every block, both checksums, indexes, exact cover.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/verify.h"
#include "commands.h"
#include "common/cli.h"
#include "common/synth_job.h"
#include "util/errors.h"
#include "util/json.h"
#include "util/strings.h"

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

// One step checked, in one tier of a tiered root ("" otherwise).
struct Checked {
  std::string tier;
  StepState state = StepState::kCommitted;
  VerifyReport report;
};

struct VerifyOutcome {
  bool ok = true;
  std::optional<VerifyProblem> latest_problem;
  std::vector<Checked> reports;
};

using Targets = std::vector<std::pair<std::string, std::shared_ptr<Storage>>>;

// The roots to check: the root, or each tier of a tiered root, which must
// hold intact copies of the steps it has.
absl::StatusOr<Targets> VerifyTargets(const std::string& dir) {
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<Storage> storage, OpenStorage(dir));
  Targets targets = {{"", storage}};
  if (std::vector<StorageTier> tiers = TiersOf(*storage); !tiers.empty()) {
    targets.clear();
    for (StorageTier& t : tiers) targets.emplace_back(std::move(t.name), std::move(t.storage));
  }
  return targets;
}

// Which steps: every one (--all), the one asked for, or the step LATEST
// names and the newest committed step (damaged or not).
absl::StatusOr<std::vector<const StepInfo*>> ChooseSteps(Storage& st, const std::vector<StepInfo>& list,
                                                         const std::string& tier, const std::string& where, bool all,
                                                         int64_t step) {
  std::vector<const StepInfo*> chosen;
  const StepInfo* newest = nullptr;
  for (const StepInfo& s : list) {
    if (s.state != StepState::kPartial) newest = &s;
  }
  if (all) {
    for (const StepInfo& s : list) chosen.push_back(&s);
  } else if (step != kLatestStep) {
    for (const StepInfo& s : list) {
      if (s.step == step) chosen.push_back(&s);
    }
    if (chosen.empty() && tier.empty()) {
      return absl::NotFoundError(StrCat("step ", step, " not found under ", where));
    }
  } else {
    if (auto named = ReadLatestPointer(st); named.ok()) {
      for (const StepInfo& s : list) {
        if (s.step == *named && s.state != StepState::kPartial && &s != newest) chosen.push_back(&s);
      }
    }
    if (newest != nullptr) chosen.push_back(newest);
  }
  if (newest == nullptr && tier.empty() && !all) return absl::NotFoundError(StrCat("no committed step under ", where));
  return chosen;
}

// Checks the chosen steps of one target into `out`; an error is a root or
// step that could not be read.
absl::Status VerifyTarget(const std::string& dir, const std::string& tier, Storage& st, bool all, int64_t step,
                          bool fast, int64_t threads, VerifyOutcome& out) {
  const std::string where = tier.empty() ? dir : StrCat(dir, " (", tier, " tier)");
  // The steps first: a root that cannot be listed is unreadable (exit 2)
  // before anything else is asked of it.
  auto list = ListCheckpointSteps(st);
  if (!list.ok()) {
    if (!tier.empty() && absl::IsNotFound(list.status())) return absl::OkStatus();  // an empty tier
    return absl::Status(list.status().code(), Printable(SV(list.status().message())));
  }
  if (auto lp = CheckLatestPointer(st)) {
    if (!out.latest_problem) out.latest_problem = lp;
    out.ok = false;
  }
  CKPT_ASSIGN_OR_RETURN(const std::vector<const StepInfo*> chosen, ChooseSteps(st, *list, tier, where, all, step));
  for (const StepInfo* info : chosen) {
    Checked c;
    c.tier = tier;
    c.state = info->state;
    if (info->state == StepState::kPartial) {
      c.report.step = info->step;
      out.reports.push_back(std::move(c));
      continue;
    }
    VerifyOptions vo;
    vo.deep = !fast;
    vo.worker_threads = static_cast<int>(threads);
    ProgressBar bar(StrCat("verify step ", info->step, tier.empty() ? "" : StrCat(" (", tier, ")")));
    vo.progress = [&bar](int64_t done, int64_t total) { bar.Update(done, total); };
    auto rep = VerifyStep(st, info->step, vo);
    bar.Finish();
    if (!rep.ok()) return rep.status();
    out.ok = out.ok && rep->ok();
    c.report = std::move(rep).value();
    out.reports.push_back(std::move(c));
  }
  return absl::OkStatus();
}

void WriteVerifyJson(JsonWriter& w, const std::string& dir, const VerifyOutcome& v) {
  w.BeginObject().Field("root", dir).Field("ok", v.ok);
  if (v.latest_problem) {
    w.Key("latest_problem");
    ProblemJson(w, *v.latest_problem);
  }
  w.Key("steps").BeginArray();
  for (const Checked& c : v.reports) {
    const VerifyReport& r = c.report;
    w.BeginObject().Field("step", r.step).Field("state", std::string(StepStateName(c.state)));
    if (!c.tier.empty()) w.Field("tier", c.tier);
    if (c.state == StepState::kPartial) {
      w.Field("ok", true).EndObject();
      continue;
    }
    w.Field("ok", r.ok())
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
    w.EndArray();
    w.Key("notes").BeginArray();
    for (const std::string& n : r.notes) w.String(n);
    w.EndArray().EndObject();
  }
  w.EndArray().EndObject();
}

void PrintVerifyText(const VerifyOutcome& v) {
  if (v.latest_problem) std::printf("LATEST: %s\n", v.latest_problem->message.c_str());
  for (const Checked& c : v.reports) {
    const VerifyReport& r = c.report;
    const std::string label = c.tier.empty() ? "" : StrCat(" (", c.tier, ")");
    if (c.state == StepState::kPartial) {
      std::printf("step %lld%s: partial (never committed: a save that stopped; `ckpt gc` removes it)\n",
                  static_cast<long long>(r.step), label.c_str());
    } else if (r.ok()) {
      std::printf(
          "step %lld%s: ok (%s) %lld files, %lld tensors, %lld chunks, %lld blocks, "
          "%s read in %.2f s\n",
          static_cast<long long>(r.step), label.c_str(), r.deep ? "deep" : "fast", static_cast<long long>(r.files),
          static_cast<long long>(r.tensors), static_cast<long long>(r.chunks), static_cast<long long>(r.blocks),
          HumanBytes(static_cast<double>(r.bytes_read)).c_str(), r.seconds);
    } else {
      std::printf("step %lld%s: %s, %zu problem(s)\n", static_cast<long long>(r.step), label.c_str(),
                  c.state == StepState::kDamaged ? "DAMAGED" : "committed", r.problems.size());
      for (const VerifyProblem& p : r.problems) std::printf("  %s\n", p.message.c_str());
    }
    for (const std::string& n : r.notes) std::printf("  note: %s\n", n.c_str());
  }
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
            "the tensor, chunk, file and byte offset. --fast skips reading the blocks.\n"
            "Without --step it checks the step LATEST names and the newest committed step;\n"
            "--all checks every committed and damaged step and lists partial ones. A damaged\n"
            "step (MANIFEST or its copy missing or failing its checksums) is a problem.\n"
            "Exit status: 0 all intact, 1 a problem found, 2 unreadable or usage.");
  args.Positional("DIR", &dir, "checkpoint root (path or storage URI)");
  args.Int("step", &step, "step to verify (default: LATEST's and the newest committed)");
  args.Switch("all", &all, "verify every committed and damaged step, list partial ones");
  args.Switch("fast", &fast, "metadata, sizes, indexes and exact cover only");
  args.Int("threads", &threads, "checking threads (default min(4, cores))");
  args.Switch("json", &json, "print a JSON report");
  int exit = 0;
  if (!args.Parse(argc, argv, first, &exit)) return exit;
  if (all && args.Given("step")) {
    std::fprintf(stderr, "ckpt verify: --all and --step exclude each other\n");
    return kExitUsage;
  }
  auto unreadable = [](const absl::Status& s) {
    std::fprintf(stderr, "ckpt verify: %s\n", std::string(s.message()).c_str());
    return kExitUsage;
  };
  auto targets = VerifyTargets(dir);
  if (!targets.ok()) return unreadable(targets.status());
  VerifyOutcome outcome;
  for (const auto& [tier, target] : *targets) {
    if (absl::Status s = VerifyTarget(dir, tier, *target, all, step, fast, threads, outcome); !s.ok()) {
      return unreadable(s);
    }
  }
  Render(
      json, [&](JsonWriter& w) { WriteVerifyJson(w, dir, outcome); }, [&] { PrintVerifyText(outcome); });
  return outcome.ok ? kExitOk : kExitProblem;
}

}  // namespace ckpt::tools

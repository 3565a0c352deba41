// ckpt repair: a step's damaged blocks and metadata restored from a good
// copy (a replica or the other tier), and a wrong LATEST rewritten.
#include <cstdio>
#include <set>

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

namespace {

// `ckpt repair ROOT` with no other copy: manifests from their copies (and
// back), LATEST from the steps.
int RepairMetadataOnly(Storage& storage, const std::string& dir, int64_t step, bool dry_run, bool json) {
  auto report = RepairMetadata(storage, step, dry_run);
  if (!report.ok()) return FailUnreadable("repair", report.status());
  const std::vector<std::string>& repaired = report->repaired;
  const std::vector<std::string>& lost = report->lost;
  Render(
      json,
      [&](JsonWriter& w) {
        w.BeginObject().Field("root", dir).Field("dry_run", dry_run).Field("ok", lost.empty());
        w.Key("repaired").BeginArray();
        for (const std::string& r : repaired) w.String(r);
        w.EndArray().Key("lost").BeginArray();
        for (const std::string& r : lost) w.String(r);
        w.EndArray().EndObject();
      },
      [&] {
        if (repaired.empty() && lost.empty()) std::printf("%s: metadata intact\n", dir.c_str());
        for (const std::string& r : repaired) std::printf("%s %s\n", dry_run ? "would fix" : "fixed", r.c_str());
        for (const std::string& r : lost) std::printf("lost: %s\n", r.c_str());
      });
  return lost.empty() ? kExitOk : kExitProblem;
}

}  // namespace

int RepairMain(int argc, char** argv, int first) {
  std::string dir, from;
  int64_t step = kLatestStep;
  bool dry_run = false, json = false;
  Args args("repair", "ROOT [--step S] [--from OTHER_ROOT] [--dry-run] [--json]",
            "Without --from, on a plain root: rebuilds the metadata of every committed\n"
            "step (or --step S) from itself, a damaged or missing MANIFEST from its copy or\n"
            "the copy from MANIFEST, byte-identically, and a damaged LATEST.\n"
            "With another copy of the same save, the other tier of a tiered:// root (each\n"
            "tier is repaired from the other) or --from a replica root, it also repairs\n"
            "data: damaged or missing files are made byte-identical to an intact copy\n"
            "(only differing ranges are rewritten), then verified again. What no intact\n"
            "copy covers is listed precisely and the exit status is 1.");
  args.Positional("ROOT", &dir, "checkpoint root (path or storage URI)");
  args.Int("step", &step, "step to repair (default: every committed step the root holds)");
  args.String("from", &from, "a replica root holding the same save");
  args.Switch("dry-run", &dry_run, "say what would be rewritten, write nothing");
  args.Switch("json", &json, "print JSON");
  int exit = 0;
  if (!args.Parse(argc, argv, first, &exit)) return exit;
  std::vector<std::pair<std::shared_ptr<Storage>, std::shared_ptr<Storage>>> pairs;  // (damaged, source)
  std::vector<std::string> labels;
  std::shared_ptr<Storage> root;
  if (from.empty()) {
    auto opened = OpenStorage(dir);
    if (!opened.ok()) return FailUnreadable("repair", opened.status());
    root = *opened;
  }
  if (const std::vector<StorageTier> tiers = root ? TiersOf(*root) : std::vector<StorageTier>{}; tiers.size() == 2) {
    pairs = {{tiers[0].storage, tiers[1].storage}, {tiers[1].storage, tiers[0].storage}};
    labels = {StrCat(tiers[0].name, " tier (from the ", tiers[1].name, " tier)"),
              StrCat(tiers[1].name, " tier (from the ", tiers[0].name, " tier)")};
  } else {
    if (from.empty()) return RepairMetadataOnly(*root, dir, step, dry_run, json);
    auto a = OpenStorage(dir);
    auto b = OpenStorage(from);
    if (!a.ok()) return FailUnreadable("repair", a.status());
    if (!b.ok()) return FailUnreadable("repair", b.status());
    pairs = {{*a, *b}};
    labels = {dir + " (from " + from + ")"};
  }
  // Every committed step either copy holds, unless one is named.
  std::set<int64_t> steps;
  if (step != kLatestStep) {
    steps.insert(step);
  } else {
    for (const auto& [a, b] : pairs) {
      for (Storage* st : {a.get(), b.get()}) {
        auto list = ListCheckpointSteps(*st);
        if (!list.ok()) continue;
        for (const StepInfo& s : *list) {
          if (s.state != StepState::kPartial) steps.insert(s.step);
        }
      }
    }
    if (steps.empty()) return FailUnreadable("repair", absl::NotFoundError(StrCat("no committed step under ", dir)));
  }
  bool ok = true;
  JsonWriter w;
  w.BeginObject().Field("dry_run", dry_run);
  w.Key("copies").BeginArray();
  for (size_t i = 0; i < pairs.size(); ++i) {
    // Without --step, only the steps this copy holds (a tier that keeps
    // fewer steps is not refilled).
    std::set<int64_t> held;
    if (step == kLatestStep) {
      if (auto list = ListCheckpointSteps(*pairs[i].first); list.ok()) {
        for (const StepInfo& s : *list) {
          if (s.state != StepState::kPartial) held.insert(s.step);
        }
      }
    }
    for (int64_t each : steps) {
      if (step == kLatestStep && !held.count(each)) continue;
      auto r = RepairStep(*pairs[i].first, *pairs[i].second, each, dry_run);
      if (absl::IsNotFound(r.status())) continue;  // not in this copy, nor the other
      if (!r.ok()) return FailUnreadable("repair", r.status());
      ok = ok && r->ok();
      if (r->repaired.empty() && r->lost.empty() && step == kLatestStep) continue;  // intact: said once below
      w.BeginObject()
          .Field("copy", labels[i])
          .Field("step", each)
          .Field("ok", r->ok())
          .Field("bytes_rewritten", r->bytes_rewritten);
      w.Key("repaired").BeginArray();
      for (const std::string& s : r->repaired) w.String(s);
      w.EndArray().Key("lost").BeginArray();
      for (const std::string& s : r->lost) w.String(s);
      w.EndArray().EndObject();
      if (!json) {
        std::printf("step %lld, %s: %s\n", static_cast<long long>(each), labels[i].c_str(),
                    r->repaired.empty() && r->lost.empty() ? "intact"
                    : !r->ok()                             ? "NOT fully repairable"
                    : dry_run                              ? "repairable"
                                                           : "repaired");
        for (const std::string& s : r->repaired) std::printf("  %s %s\n", dry_run ? "would fix" : "fixed", s.c_str());
        for (const std::string& s : r->lost) std::printf("  lost: %s\n", s.c_str());
      }
    }
    // The copy's LATEST, from its own steps.
    auto latest_fixed = RepairLatestPointer(*pairs[i].first, dry_run);
    if (!latest_fixed.ok()) return FailUnreadable("repair", latest_fixed.status());
    for (const std::string& f : *latest_fixed) {
      w.BeginObject().Field("copy", labels[i]).Field("ok", true).Key("repaired").BeginArray().String(f);
      w.EndArray().EndObject();
      if (!json) std::printf("%s: %s %s\n", labels[i].c_str(), dry_run ? "would fix" : "fixed", f.c_str());
    }
  }
  if (!json && ok)
    std::printf("%zu step(s) checked: %s\n", steps.size(), dry_run ? "nothing lost" : "intact or repaired");
  w.EndArray().Field("ok", ok).EndObject();
  if (json) std::printf("%s\n", w.str().c_str());
  return ok ? kExitOk : kExitProblem;
}

}  // namespace ckpt::tools

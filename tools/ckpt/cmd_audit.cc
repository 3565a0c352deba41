// ckpt stats, diff, list, gc: numerical health, differences between steps,
// and housekeeping of a checkpoint root.
#include <cmath>
#include <cstdio>
#include <ctime>
#include <set>

#include "ckpt/audit.h"
#include "ckpt/checkpointer.h"
#include "ckpt/storage.h"
#include "ckpt/verify.h"
#include "commands.h"
#include "common/cli.h"
#include "common/synth_job.h"
#include "coordinator/records.h"
#include "coordinator/state_log.h"
#include "core/root.h"
#include "format/root_files.h"
#include "net/uri.h"
#include "util/bytes.h"
#include "util/clock.h"
#include "util/json.h"
#include "util/strings.h"

namespace ckpt::tools {
namespace {

int Fail(const char* cmd, const absl::Status& s) {
  std::fprintf(stderr, "ckpt %s: %s\n", cmd, std::string(s.message()).c_str());
  return kExitUsage;
}

}  // namespace

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
            "committed step, printing why: a check to run before promoting a checkpoint.");
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
  if (!storage.ok()) return Fail("stats", storage.status());
  if (step == kLatestStep) {
    auto latest = LatestCommittedStep(**storage);
    if (!latest.ok()) return Fail("stats", latest.status());
    step = *latest;
  }
  WarnIfDamaged(**storage, step, "stats");
  AuditOptions o;
  o.tensor_glob = glob;
  ProgressBar bar("stats");
  o.progress = [&](int64_t d, int64_t t) { bar.Update(d, t); };
  auto stats = ComputeStats(**storage, step, o);
  bar.Finish();
  if (!stats.ok()) return Fail("stats", stats.status());

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
      if (!prev.ok()) return Fail("stats", prev.status());
      before = std::move(prev).value();
    }
    GateOptions g;
    g.max_norm_change = max_change;
    g.allow_all_zero = allow_zero;
    problems = GateProblems(*stats, previous_step >= 0 ? &before : nullptr, g);
  }

  if (json) {
    JsonWriter w;
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
          .EndObject();
    }
    w.EndArray();
    if (gate) {
      w.Field("previous_step", previous_step).Field("ok", problems.empty());
      w.Key("problems").BeginArray();
      for (const std::string& p : problems) w.String(p);
      w.EndArray();
    }
    w.EndObject();
    std::printf("%s\n", w.str().c_str());
  } else {
    std::printf("step %lld: %zu tensors\n", static_cast<long long>(step), stats->size());
    std::printf("%-48s %6s %6s %8s %12s %12s %12s %12s\n", "tensor", "nan", "inf", "zeros", "min", "max", "mean", "l2");
    for (const TensorStats& t : *stats) {
      std::printf("%-48s %6lld %6lld %7.1f%% %12.5g %12.5g %12.5g %12.5g\n", t.fqn.c_str(),
                  static_cast<long long>(t.nan), static_cast<long long>(t.inf), 100 * t.ZeroFraction(), t.min, t.max,
                  t.mean, t.l2);
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
  }
  return problems.empty() ? kExitOk : kExitProblem;
}

int DiffMain(int argc, char** argv, int first) {
  std::string a, b, glob;
  int64_t step_a = kLatestStep, step_b = kLatestStep;
  bool json = false, all = false, tensors_only = false;
  Args args("diff", "A B [--step-a S] [--step-b S] [--tensor GLOB] [--tensors-only] [--json]",
            "Compares two checkpoints tensor by tensor as global tensors, so they may come\n"
            "from different meshes. A tensor is identical (decided from the stored block\n"
            "checksums without reading data when both were cut the same way) or changed:\n"
            "the count of differing elements, the first one's row-major index, the largest\n"
            "absolute difference and the relative L2 difference. Tensors only in one side\n"
            "and shape or dtype changes are listed. A and B may be the same root with\n"
            "different steps. Blobs (by name and rank) and metadata entries are compared\n"
            "too (--tensors-only leaves them out, e.g. across meshes, whose per-rank blobs\n"
            "differ by construction). Exit 0 identical, 1 differences found, 2 unreadable.");
  args.Positional("A", &a, "first checkpoint root");
  args.Positional("B", &b, "second checkpoint root");
  args.Int("step-a", &step_a, "step of A (default: latest)");
  args.Int("step-b", &step_b, "step of B (default: latest)");
  args.String("tensor", &glob, "only tensors matching this glob");
  args.Switch("all", &all, "also list identical tensors");
  args.Switch("tensors-only", &tensors_only, "compare tensors only, not blobs and metadata");
  args.Switch("json", &json, "print JSON");
  int exit = 0;
  if (!args.Parse(argc, argv, first, &exit)) return exit;
  auto sa = OpenStorage(a);
  if (!sa.ok()) return Fail("diff", sa.status());
  auto sb = OpenStorage(b);
  if (!sb.ok()) return Fail("diff", sb.status());
  AuditOptions o;
  o.tensor_glob = glob;
  ProgressBar bar("diff");
  o.progress = [&](int64_t d, int64_t t) { bar.Update(d, t); };
  for (auto [st, which] : {std::pair{sa->get(), step_a}, std::pair{sb->get(), step_b}}) {
    if (which == kLatestStep) {
      auto latest = LatestCommittedStep(*st);
      if (!latest.ok()) continue;  // DiffSteps reports it
      which = *latest;
    }
    WarnIfDamaged(*st, which, "diff");
  }
  auto diffs = DiffSteps(**sa, step_a, **sb, step_b, o);
  bar.Finish();
  if (!diffs.ok()) return Fail("diff", diffs.status());
  auto items = tensors_only ? absl::StatusOr<std::vector<ItemDiff>>(std::vector<ItemDiff>{})
                            : DiffBlobsAndMetadata(**sa, step_a, **sb, step_b);
  if (!items.ok()) return Fail("diff", items.status());
  int64_t items_identical = 0, items_different = 0;
  for (const ItemDiff& d : *items) (d.kind == ItemDiff::Kind::kIdentical ? items_identical : items_different) += 1;
  auto item_kind = [](ItemDiff::Kind k) {
    switch (k) {
      case ItemDiff::Kind::kIdentical:
        return "identical";
      case ItemDiff::Kind::kChanged:
        return "changed";
      case ItemDiff::Kind::kOnlyInA:
        return "only_in_a";
      case ItemDiff::Kind::kOnlyInB:
        return "only_in_b";
    }
    return "?";
  };
  int64_t identical = 0, by_checksum = 0, different = 0;
  for (const TensorDiff& d : *diffs) {
    if (d.kind == TensorDiff::Kind::kIdentical) {
      ++identical;
      by_checksum += d.by_checksum;
    } else {
      ++different;
    }
  }
  if (json) {
    JsonWriter w;
    w.BeginObject()
        .Field("identical", identical)
        .Field("identical_by_checksum", by_checksum)
        .Field("different", different);
    w.Key("tensors").BeginArray();
    for (const TensorDiff& d : *diffs) {
      if (d.kind == TensorDiff::Kind::kIdentical && !all) continue;
      w.BeginObject().Field("name", d.fqn).Field("kind", DiffKindName(d.kind)).Field("elements", d.elements);
      if (d.kind == TensorDiff::Kind::kChanged) {
        w.Field("differing", d.differing)
            .Field("first_index", d.first_index)
            .Field("max_abs", d.max_abs)
            .Field("rel_l2", d.rel_l2);
      }
      if (!d.note.empty()) w.Field("note", d.note);
      w.EndObject();
    }
    w.EndArray();
    w.Field("blobs_and_metadata_identical", items_identical).Field("blobs_and_metadata_different", items_different);
    w.Key("blobs_and_metadata").BeginArray();
    for (const ItemDiff& d : *items) {
      if (d.kind == ItemDiff::Kind::kIdentical && !all) continue;
      w.BeginObject().Field("name", d.what).Field("kind", item_kind(d.kind));
      if (!d.note.empty()) w.Field("note", d.note);
      w.EndObject();
    }
    w.EndArray().EndObject();
    std::printf("%s\n", w.str().c_str());
  } else {
    for (const TensorDiff& d : *diffs) {
      switch (d.kind) {
        case TensorDiff::Kind::kIdentical:
          if (all) std::printf("  identical  %s%s\n", d.fqn.c_str(), d.by_checksum ? " (by checksum)" : "");
          break;
        case TensorDiff::Kind::kChanged:
          std::printf(
              "  changed    %s: %lld of %lld elements differ (first at index %lld), max |a-b| %.6g, "
              "relative L2 %.3g\n",
              d.fqn.c_str(), static_cast<long long>(d.differing), static_cast<long long>(d.elements),
              static_cast<long long>(d.first_index), d.max_abs, d.rel_l2);
          break;
        case TensorDiff::Kind::kOnlyInA:
          std::printf("  only in A  %s\n", d.fqn.c_str());
          break;
        case TensorDiff::Kind::kOnlyInB:
          std::printf("  only in B  %s\n", d.fqn.c_str());
          break;
        case TensorDiff::Kind::kMismatch:
          std::printf("  mismatch   %s: %s\n", d.fqn.c_str(), d.note.c_str());
          break;
      }
    }
    for (const ItemDiff& d : *items) {
      if (d.kind == ItemDiff::Kind::kIdentical && !all) continue;
      const char* label = d.kind == ItemDiff::Kind::kIdentical ? "identical"
                          : d.kind == ItemDiff::Kind::kChanged ? "changed  "
                          : d.kind == ItemDiff::Kind::kOnlyInA ? "only in A"
                                                               : "only in B";
      std::printf("  %s  %s%s%s\n", label, d.what.c_str(), d.note.empty() ? "" : ": ", d.note.c_str());
    }
    std::printf(
        "%lld identical (%lld by checksum), %lld different tensors; %lld identical, %lld different blobs "
        "and metadata entries\n",
        static_cast<long long>(identical), static_cast<long long>(by_checksum), static_cast<long long>(different),
        static_cast<long long>(items_identical), static_cast<long long>(items_different));
  }
  return different > 0 || items_different > 0 ? kExitProblem : kExitOk;
}

int ListMain(int argc, char** argv, int first) {
  std::string dir, state_dir, store;
  bool json = false;
  Args args("list", "DIR [--state-dir DIR | --store URI] [--json]",
            "Lists the steps of a root: committed or partial, size, age, and for a\n"
            "tiered:// root which tiers hold each step. With the coordinator's state\n"
            "(--state-dir or --store, as given to `ckpt coordinator`) it also lists the\n"
            "memory level's newest step and whether the job's processes hold it, and\n"
            "names the newest step of either level. Exit status: 0 ok, 1 a damaged\n"
            "step, 2 unreadable.");
  args.Positional("DIR", &dir, "checkpoint root (path or storage URI)");
  args.String("state-dir", &state_dir, "the coordinator's --state-dir: also list the memory level");
  args.String("store", &store, "the coordinator's --store (etcd): also list the memory level");
  args.Switch("json", &json, "print JSON");
  int exit = 0;
  if (!args.Parse(argc, argv, first, &exit)) return exit;
  if (!state_dir.empty() && !store.empty()) {
    std::fprintf(stderr, "ckpt list: give at most one of --state-dir and --store\n%s", args.Usage().c_str());
    return kExitUsage;
  }
  auto storage = OpenStorage(dir);
  if (!storage.ok()) return Fail("list", storage.status());
  auto steps = ListCheckpointSteps(**storage);
  if (!steps.ok()) return Fail("list", steps.status());
  auto latest = LatestCommittedStep(**storage);
  // The memory level, from the coordinator's log (read only).
  const bool with_memory = !state_dir.empty() || !store.empty();
  coord::History history;
  if (with_memory) {
    std::string where;
    if (absl::Status s = coord::ReadHistory(state_dir, store, &history, &where); !s.ok()) return Fail("list", s);
  }
  const coord::MemoryLevelView& memory = history.memory;
  using MemoryState = coord::MemoryLevelView::State;
  const bool memory_listed = memory.state == MemoryState::kHeld || memory.state == MemoryState::kUnconfirmed;
  const int64_t latest_step = latest.ok() ? *latest : -1;
  // The newest step a restart would restore: the held memory step when it
  // is newer than every durable one.
  const bool newest_is_memory = memory.state == MemoryState::kHeld && memory.step > latest_step;
  const int64_t newest = newest_is_memory ? memory.step : latest_step;
  std::string memory_detail;
  switch (memory.state) {
    case MemoryState::kNone:
      memory_detail = "no memory step committed";
      break;
    case MemoryState::kHeld:
      memory_detail = StrCat("held by the processes of generation ", memory.held_by, " (committed by generation ",
                             memory.generation, ", ", memory.save_world, " ranks)");
      break;
    case MemoryState::kUnconfirmed:
      memory_detail = StrCat("generation ", memory.held_by,
                             " ended; the next generation to form finds out whether its members still hold it");
      break;
    case MemoryState::kDropped:
      memory_detail = StrCat("dropped: generation ", memory.held_by, " did not restore it");
      break;
    case MemoryState::kGone:
      memory_detail = StrCat("gone: the job finished (every member of generation ", memory.held_by, " left)");
      break;
  }
  // Tiers of a tiered root, opened on their own.
  std::shared_ptr<Storage> local, durable;
  if (auto parsed = ParseUri(dir); parsed.ok() && parsed->scheme == "tiered") {
    if (auto l = OpenStorage(parsed->Str("local", "")); l.ok()) local = *l;
    if (auto d = OpenStorage(parsed->Str("durable", "")); d.ok()) durable = *d;
  }
  auto tiers = [&](int64_t step) -> std::string {
    if (!local || !durable) return "";
    const std::string m = StrCat(StepDir(step), "/", kManifestName);
    const bool l = local->FileSize(m).ok(), d = durable->FileSize(m).ok();
    return l && d ? "local+durable" : l ? "local" : d ? "durable" : "-";
  };
  // Nanoseconds, like the steps' creation times: whole seconds made a step
  // saved within the current second look younger than now ("-").
  const double now = static_cast<double>(UnixNanos()) / 1e9;
  JsonWriter w;
  w.BeginObject().Field("root", dir).Field("latest", latest_step);
  if (with_memory) {
    w.Key("newest").BeginObject().Field("step", newest).Field("level", newest_is_memory ? "memory" : "durable");
    w.EndObject();
    w.Key("memory").BeginObject().Field("state", coord::MemoryLevelStateName(memory.state));
    if (memory.state != MemoryState::kNone) {
      w.Field("step", memory.step).Field("generation", memory.generation).Field("save_world", memory.save_world);
      w.Field("held_by", memory.held_by);
    }
    w.Field("detail", memory_detail).EndObject();
  }
  w.Key("steps").BeginArray();
  if (!json) {
    std::printf("%-12s %s%-10s %10s %10s %s\n", "step", with_memory ? "level    " : "", "state", "size", "age",
                local ? "tiers" : "");
  }
  bool any_damaged = false, any_unreadable = false;
  for (const StepInfo& s : *steps) {
    any_damaged = any_damaged || s.state == StepState::kDamaged;
    any_unreadable = any_unreadable || s.state == StepState::kUnreadable;
  }
  auto print_memory = [&] {
    const std::string state = coord::MemoryLevelStateName(memory.state);
    if (json) {
      w.BeginObject()
          .Field("step", memory.step)
          .Field("level", "memory")
          .Field("state", state)
          .Field("newest", newest_is_memory)
          .Field("generation", memory.generation)
          .EndObject();
    } else {
      std::printf("%-12lld memory   %-10s %10s %10s %s\n", static_cast<long long>(memory.step),
                  newest_is_memory ? (state + " *").c_str() : state.c_str(), "-", "-", memory_detail.c_str());
    }
  };
  bool memory_printed = !memory_listed;
  for (const StepInfo& s : *steps) {
    // The memory step among the durable ones, by step number (after a
    // durable step of the same number).
    if (!memory_printed && memory.step < s.step) {
      print_memory();
      memory_printed = true;
    }
    double age = s.created_unix_ns > 0 ? now - static_cast<double>(s.created_unix_ns) / 1e9 : -1;
    if (age < 0 && age > -1) age = 0;  // another host's clock a little ahead
    const bool is_latest = latest.ok() && *latest == s.step;
    const bool mark = with_memory ? is_latest && !newest_is_memory : is_latest;
    const std::string state(StepStateName(s.state));
    if (json) {
      w.BeginObject()
          .Field("step", s.step)
          .Field("level", "durable")
          .Field("state", state)
          .Field("latest", is_latest)
          .Field("bytes", s.bytes)
          .Field("age_s", age);
      if (with_memory) w.Field("newest", mark);
      if (!s.damage.empty()) w.Field("damage", s.damage);
      if (local) w.Field("tiers", tiers(s.step));
      w.EndObject();
    } else {
      std::string age_text = "-";
      if (age >= 0) {
        char b[32];
        if (age < 120) {
          std::snprintf(b, sizeof(b), "%.0f s", age);
        } else if (age < 7200) {
          std::snprintf(b, sizeof(b), "%.0f min", age / 60);
        } else if (age < 3 * 86400) {
          std::snprintf(b, sizeof(b), "%.1f h", age / 3600);
        } else {
          std::snprintf(b, sizeof(b), "%.1f d", age / 86400);
        }
        age_text = b;
      }
      std::printf("%-12lld %s%-10s %10s %10s %s\n", static_cast<long long>(s.step), with_memory ? "durable  " : "",
                  mark ? (state + " *").c_str() : state.c_str(), HumanBytes(static_cast<double>(s.bytes)).c_str(),
                  age_text.c_str(), tiers(s.step).c_str());
      if (!s.damage.empty()) std::printf("             %s\n", Printable(s.damage).c_str());
    }
  }
  if (!memory_printed) print_memory();
  w.EndArray().EndObject();
  if (json) std::printf("%s\n", w.str().c_str());
  if (!json && with_memory) {
    if (!memory_listed) std::printf("memory level: %s\n", memory_detail.c_str());
    if (newest >= 0) {
      std::printf("(* the newest step a restart restores: %s)\n",
                  newest_is_memory ? StrCat("memory step ", newest, ", from the processes' memory").c_str()
                                   : StrCat("step ", newest, ", from the root").c_str());
    }
    if (memory.state == MemoryState::kUnconfirmed && memory.step > latest_step) {
      std::printf(
          "(memory step %lld is newer: the next generation restores it instead if its members hold every "
          "rank's files)\n",
          static_cast<long long>(memory.step));
    }
  } else if (!json && latest.ok()) {
    std::printf("(* the latest committed step)\n");
  }
  if (!json && any_damaged) {
    std::printf(
        "damaged steps are kept by every cleanup; `ckpt verify DIR --all` details them, "
        "`ckpt repair DIR` rebuilds damaged manifests\n");
  }
  if (!json && any_unreadable) {
    std::printf(
        "unreadable steps: the storage erred or contradicted itself reading their manifests; nothing removes them "
        "(try again when the storage is healthy)\n");
  }
  return any_damaged || any_unreadable ? kExitProblem : kExitOk;
}

int GcMain(int argc, char** argv, int first) {
  std::string dir;
  int64_t keep_last = 0, keep_every = 0;
  bool yes = false, json = false, partial = false, damaged = false;
  Args args("gc", "DIR [--keep-last N] [--keep-every N] [--damaged] [--yes] [--json]",
            "Applies retention and removes uncommitted leftovers. A dry run unless --yes:\n"
            "it prints what it would remove, and why. The latest committed step is always\n"
            "kept. Damaged steps (committed, but a manifest is missing or fails its\n"
            "checksums) are kept and listed unless --damaged asks for their removal.\n"
            "--newer-partial also removes uncommitted steps newer than the latest one\n"
            "(only when no job is saving into the root).");
  args.Positional("DIR", &dir, "checkpoint root (path or storage URI)");
  args.Int("keep-last", &keep_last, "keep the newest N committed steps (0: all)");
  args.Int("keep-every", &keep_every, "also keep steps that are multiples of N");
  args.Switch("newer-partial", &partial, "also remove uncommitted steps newer than the latest");
  args.Switch("damaged", &damaged, "also remove damaged steps (committed checkpoints: repair them first if you can)");
  args.Switch("yes", &yes, "really remove");
  args.Switch("json", &json, "print JSON");
  int exit = 0;
  if (!args.Parse(argc, argv, first, &exit)) return exit;
  if (keep_last < 0 || keep_every < 0) return Fail("gc", absl::InvalidArgumentError("counts must be >= 0"));
  auto storage = OpenStorage(dir);
  if (!storage.ok()) return Fail("gc", storage.status());
  if (absl::Status listed = ListCheckpointSteps(**storage).status(); !listed.ok()) {
    return Fail("gc", absl::IsNotFound(listed) ? absl::NotFoundError(StrCat("checkpoint root ", dir, " does not exist"))
                                               : listed);
  }
  GcOptions o;
  o.retention.keep_last = static_cast<int>(keep_last);
  o.retention.keep_every = keep_every;
  o.dry_run = !yes;
  o.remove_newer_partial = partial;
  o.remove_damaged = damaged;
  auto report = CollectGarbageIn(**storage, o);
  if (!report.ok()) return Fail("gc", report.status());
  if (json) {
    JsonWriter w;
    w.BeginObject().Field("dry_run", !yes);
    w.Key("removed_steps").BeginArray();
    for (int64_t s : report->removed_steps) w.Int(s);
    w.EndArray().Key("removed_partial").BeginArray();
    for (int64_t s : report->removed_partial) w.Int(s);
    w.EndArray().Key("removed_damaged").BeginArray();
    for (int64_t s : report->removed_damaged) w.Int(s);
    w.EndArray().Key("kept_damaged").BeginArray();
    for (int64_t s : report->kept_damaged) w.Int(s);
    w.EndArray().Key("kept_unreadable").BeginArray();
    for (int64_t s : report->kept_unreadable) w.Int(s);
    w.EndArray().Key("aborted_uploads").BeginArray();
    for (const std::string& u : report->aborted_uploads) w.String(u);
    w.EndArray().Key("reasons").BeginArray();
    for (const std::string& r : report->reasons) w.String(r);
    w.EndArray().Field("bytes_freed", report->bytes_freed).EndObject();
    std::printf("%s\n", w.str().c_str());
    return report->kept_unreadable.empty() ? kExitOk : kExitProblem;
  }
  for (const std::string& r : report->reasons) std::printf("%s\n", Printable(r).c_str());
  std::printf("%s %s%s\n", yes ? "freed" : "would free", HumanBytes(static_cast<double>(report->bytes_freed)).c_str(),
              yes ? "" : " (dry run: add --yes to remove)");
  // Steps the storage could not account for are a problem to look at.
  return report->kept_unreadable.empty() ? kExitOk : kExitProblem;
}

}  // namespace ckpt::tools

namespace ckpt::tools {

namespace {

// Rewrites a LATEST that CheckLatestPointer finds wrong to name the newest
// committed step.
absl::Status RepairLatest(Storage& storage, bool dry_run, std::vector<std::string>* repaired) {
  auto problem = CheckLatestPointer(storage);
  if (!problem) return absl::OkStatus();
  auto newest = ResolveLatest(storage);
  if (!newest.ok()) return absl::IsNotFound(newest.status()) ? absl::OkStatus() : newest.status();
  repaired->push_back(StrCat("LATEST: rewritten to name step ", *newest, " (", problem->message, ")"));
  if (dry_run) return absl::OkStatus();
  return storage.PutAtomic(kLatestName, AsBytesView(EncodeLatest(*newest)));
}

// `ckpt repair ROOT` with no other copy: manifests from their copies (and
// back), LATEST from the steps.
int RepairMetadataOnly(const std::string& dir, int64_t step, bool dry_run, bool json) {
  auto storage = OpenStorage(dir);
  if (!storage.ok()) return Fail("repair", storage.status());
  auto steps = ListCheckpointSteps(**storage);
  if (!steps.ok()) return Fail("repair", steps.status());
  std::vector<std::string> repaired, lost;
  std::vector<int64_t> touched;
  for (const StepInfo& s : *steps) {
    if (s.state == StepState::kPartial) continue;
    if (step != kLatestStep && s.step != step) continue;
    const size_t before = repaired.size();
    if (absl::Status r = RepairStepMetadata(**storage, s.step, dry_run, &repaired, &lost); !r.ok()) {
      return Fail("repair", r);
    }
    if (repaired.size() > before) touched.push_back(s.step);
  }
  if (absl::Status r = RepairLatest(**storage, dry_run, &repaired); !r.ok()) return Fail("repair", r);
  // A repair is done when the step verifies: what it rewrote is checked
  // against the data files once more, and a step that still fails is lost.
  if (!dry_run) {
    for (int64_t each : touched) {
      VerifyOptions vo;
      vo.deep = false;
      auto rep = VerifyStep(**storage, each, vo);
      if (!rep.ok()) {
        lost.push_back(StrCat("step ", each, " after the repair: ", rep.status().message()));
      } else if (!rep->ok()) {
        lost.push_back(StrCat("step ", each,
                              " still fails `ckpt verify --fast` after the repair: ", rep->problems.front().message));
      }
    }
  }
  if (json) {
    JsonWriter w;
    w.BeginObject().Field("root", dir).Field("dry_run", dry_run).Field("ok", lost.empty());
    w.Key("repaired").BeginArray();
    for (const std::string& r : repaired) w.String(r);
    w.EndArray().Key("lost").BeginArray();
    for (const std::string& r : lost) w.String(r);
    w.EndArray().EndObject();
    std::printf("%s\n", w.str().c_str());
  } else {
    if (repaired.empty() && lost.empty()) std::printf("%s: metadata intact\n", dir.c_str());
    for (const std::string& r : repaired) std::printf("%s %s\n", dry_run ? "would fix" : "fixed", r.c_str());
    for (const std::string& r : lost) std::printf("lost: %s\n", r.c_str());
  }
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
  auto parsed = ParseUri(dir);
  if (!parsed.ok()) return Fail("repair", parsed.status());
  if (parsed->scheme == "tiered" && from.empty()) {
    auto l = OpenStorage(parsed->Str("local", ""));
    auto d = OpenStorage(parsed->Str("durable", ""));
    if (!l.ok()) return Fail("repair", l.status());
    if (!d.ok()) return Fail("repair", d.status());
    pairs = {{*l, *d}, {*d, *l}};
    labels = {"local tier (from the durable tier)", "durable tier (from the local tier)"};
  } else {
    if (from.empty()) return RepairMetadataOnly(dir, step, dry_run, json);
    auto a = OpenStorage(dir);
    auto b = OpenStorage(from);
    if (!a.ok()) return Fail("repair", a.status());
    if (!b.ok()) return Fail("repair", b.status());
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
    if (steps.empty()) return Fail("repair", absl::NotFoundError(StrCat("no committed step under ", dir)));
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
      if (!r.ok()) return Fail("repair", r.status());
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
    std::vector<std::string> latest_fixed;
    if (absl::Status l = RepairLatest(*pairs[i].first, dry_run, &latest_fixed); !l.ok()) return Fail("repair", l);
    for (const std::string& f : latest_fixed) {
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

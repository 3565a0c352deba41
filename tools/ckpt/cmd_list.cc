// ckpt list: the steps of a root, committed, partial, damaged or
// unreadable, at both levels.
#include <cstdio>

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
  if (!storage.ok()) return FailUnreadable("list", storage.status());
  auto steps = ListCheckpointSteps(**storage);
  if (!steps.ok()) return FailUnreadable("list", steps.status());
  auto latest = LatestCommittedStep(**storage);
  // The memory level, from the coordinator's log (read only).
  const bool with_memory = !state_dir.empty() || !store.empty();
  coord::History history;
  if (with_memory) {
    std::string where;
    if (absl::Status s = coord::ReadHistory(state_dir, store, &history, &where); !s.ok())
      return FailUnreadable("list", s);
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

}  // namespace ckpt::tools

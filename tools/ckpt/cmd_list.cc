// ckpt list: the steps of a root, committed, partial, damaged or
// unreadable, at both levels.
#include <cstdio>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/audit.h"
#include "ckpt/checkpointer.h"
#include "ckpt/coordinator.h"
#include "ckpt/storage.h"
#include "ckpt/verify.h"
#include "commands.h"
#include "common/cli.h"
#include "common/synth_job.h"
#include "util/bytes.h"
#include "util/clock.h"
#include "util/json.h"
#include "util/strings.h"

namespace ckpt::tools {

namespace {

using MemoryState = CoordinatorMemoryLevel::State;

// What the memory level's state means, in words.
std::string MemoryDetail(const CoordinatorMemoryLevel& memory) {
  switch (memory.state) {
    case MemoryState::kNone:
      return "no memory step committed";
    case MemoryState::kHeld:
      return StrCat("held by the processes of generation ", memory.held_by, " (committed by generation ",
                    memory.generation, ", ", memory.save_world, " ranks",
                    memory.erasure_k > 0 ? StrCat(", erasure coded ", memory.erasure_k, "+", memory.erasure_m) : "",
                    ")");
    case MemoryState::kUnconfirmed:
      return StrCat("generation ", memory.held_by,
                    " ended; the next generation to form finds out whether its members still hold it");
    case MemoryState::kDropped:
      return StrCat("dropped: generation ", memory.held_by, " did not restore it");
    case MemoryState::kGone:
      return StrCat("gone: the job finished (every member of generation ", memory.held_by, " left)");
  }
  return "";
}

// "12 s", "5 min", "3.0 h", "2.0 d"; "-" when unknown.
std::string AgeText(double age) {
  if (age < 0) return "-";
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
  return b;
}

// Which tiers of a tiered:// root hold a step (each tier listed on its
// own); empty for any other root.
class TierColumn {
 public:
  explicit TierColumn(Storage& root) {
    for (const StorageTier& t : TiersOf(root)) {
      std::set<int64_t> held;
      if (auto steps = ListCheckpointSteps(*t.storage); steps.ok()) {
        for (const StepInfo& s : *steps) {
          if (s.state != StepState::kPartial) held.insert(s.step);
        }
      }
      tiers_.emplace_back(t.name, std::move(held));
    }
  }
  bool shown() const { return !tiers_.empty(); }
  std::string Of(int64_t step) const {
    std::string out;
    for (const auto& [name, held] : tiers_) {
      if (held.count(step)) out += (out.empty() ? "" : "+") + name;
    }
    return shown() && out.empty() ? "-" : out;
  }

 private:
  std::vector<std::pair<std::string, std::set<int64_t>>> tiers_;
};

// The listing, as JSON or as a table: a row per step of either level.
class ListPrinter {
 public:
  ListPrinter(bool json, bool with_memory, const TierColumn& tiers, const CoordinatorMemoryLevel& memory,
              bool newest_is_memory)
      : json_(json),
        with_memory_(with_memory),
        tiers_(tiers),
        memory_(memory),
        newest_is_memory_(newest_is_memory),
        memory_detail_(MemoryDetail(memory)) {}

  void Begin(const std::string& root, int64_t latest, int64_t newest) {
    w_.BeginObject().Field("root", root).Field("latest", latest);
    if (with_memory_) {
      w_.Key("newest").BeginObject().Field("step", newest).Field("level", newest_is_memory_ ? "memory" : "durable");
      w_.EndObject();
      w_.Key("memory").BeginObject().Field("state", CoordinatorMemoryStateName(memory_.state));
      if (memory_.state != MemoryState::kNone) {
        w_.Field("step", memory_.step).Field("generation", memory_.generation).Field("save_world", memory_.save_world);
        w_.Field("held_by", memory_.held_by);
        if (memory_.erasure_k > 0) w_.Field("erasure", StrCat(memory_.erasure_k, "+", memory_.erasure_m));
      }
      w_.Field("detail", memory_detail_).EndObject();
    }
    w_.Key("steps").BeginArray();
    if (!json_) {
      std::printf("%-12s %s%-10s %10s %10s %s\n", "step", with_memory_ ? "level    " : "", "state", "size", "age",
                  tiers_.shown() ? "tiers" : "");
    }
  }

  void Memory() {
    const std::string state = CoordinatorMemoryStateName(memory_.state);
    if (json_) {
      w_.BeginObject()
          .Field("step", memory_.step)
          .Field("level", "memory")
          .Field("state", state)
          .Field("newest", newest_is_memory_)
          .Field("generation", memory_.generation)
          .EndObject();
      return;
    }
    std::printf("%-12lld memory   %-10s %10s %10s %s\n", static_cast<long long>(memory_.step),
                newest_is_memory_ ? (state + " *").c_str() : state.c_str(), "-", "-", memory_detail_.c_str());
  }

  // `mark`: the step a restart restores (the latest, or the newest of both levels).
  void Durable(const StepInfo& s, double age, bool is_latest, bool mark) {
    const std::string state(StepStateName(s.state));
    if (json_) {
      w_.BeginObject()
          .Field("step", s.step)
          .Field("level", "durable")
          .Field("state", state)
          .Field("latest", is_latest)
          .Field("bytes", s.bytes)
          .Field("age_s", age);
      if (with_memory_) w_.Field("newest", mark);
      if (!s.damage.empty()) w_.Field("damage", s.damage);
      if (tiers_.shown()) w_.Field("tiers", tiers_.Of(s.step));
      // The steps its deltas need (format.md, "Delta chains").
      w_.Key("delta_bases").BeginArray();
      for (int64_t b : s.delta_bases) w_.Int(b);
      w_.EndArray();
      w_.EndObject();
      return;
    }
    std::string bases;
    for (int64_t b : s.delta_bases) bases += (bases.empty() ? "deltas of " : ", ") + std::to_string(b);
    const std::string tiers = tiers_.Of(s.step);
    const std::string note = tiers.empty() ? bases : bases.empty() ? tiers : tiers + "  " + bases;
    std::printf("%-12lld %s%-10s %10s %10s %s\n", static_cast<long long>(s.step), with_memory_ ? "durable  " : "",
                mark ? (state + " *").c_str() : state.c_str(), HumanBytes(static_cast<double>(s.bytes)).c_str(),
                AgeText(age).c_str(), note.c_str());
    if (!s.damage.empty()) std::printf("             %s\n", Printable(s.damage).c_str());
  }

  void End(bool latest_known, int64_t latest_step, int64_t newest, bool memory_listed, bool any_damaged,
           bool any_unreadable) {
    w_.EndArray().EndObject();
    if (json_) {
      std::printf("%s\n", w_.str().c_str());
      return;
    }
    if (with_memory_) {
      if (!memory_listed) std::printf("memory level: %s\n", memory_detail_.c_str());
      if (newest >= 0) {
        std::printf("(* the newest step a restart restores: %s)\n",
                    newest_is_memory_ ? StrCat("memory step ", newest, ", from the processes' memory").c_str()
                                      : StrCat("step ", newest, ", from the root").c_str());
      }
      if (memory_.state == MemoryState::kUnconfirmed && memory_.step > latest_step) {
        std::printf(
            "(memory step %lld is newer: the next generation restores it instead if its members hold every "
            "rank's files)\n",
            static_cast<long long>(memory_.step));
      }
    } else if (latest_known) {
      std::printf("(* the latest committed step)\n");
    }
    if (any_damaged) {
      std::printf(
          "damaged steps are kept by every cleanup; `ckpt verify DIR --all` details them, "
          "`ckpt repair DIR` rebuilds damaged manifests\n");
    }
    if (any_unreadable) {
      std::printf(
          "unreadable steps: the storage erred or contradicted itself reading their manifests; nothing removes "
          "them (try again when the storage is healthy)\n");
    }
  }

 private:
  const bool json_, with_memory_;
  const TierColumn& tiers_;
  const CoordinatorMemoryLevel& memory_;
  const bool newest_is_memory_;
  const std::string memory_detail_;
  JsonWriter w_;
};

}  // namespace

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
  CoordinatorHistory history;
  if (with_memory) {
    auto read = ReadCoordinatorHistory(state_dir, store);
    if (!read.ok()) return FailUnreadable("list", read.status());
    history = std::move(*read);
  }
  const CoordinatorMemoryLevel& memory = history.memory;
  const bool memory_listed = memory.state == MemoryState::kHeld || memory.state == MemoryState::kUnconfirmed;
  const int64_t latest_step = latest.ok() ? *latest : -1;
  // The newest step a restart would restore: the held memory step when it
  // is newer than every durable one.
  const bool newest_is_memory = memory.state == MemoryState::kHeld && memory.step > latest_step;
  const int64_t newest = newest_is_memory ? memory.step : latest_step;
  const TierColumn tiers(**storage);
  ListPrinter out(json, with_memory, tiers, memory, newest_is_memory);
  out.Begin(dir, latest_step, newest);
  bool any_damaged = false, any_unreadable = false;
  for (const StepInfo& s : *steps) {
    any_damaged = any_damaged || s.state == StepState::kDamaged;
    any_unreadable = any_unreadable || s.state == StepState::kUnreadable;
  }
  // Nanoseconds, like the steps' creation times: whole seconds made a step
  // saved within the current second look younger than now ("-").
  const double now = static_cast<double>(UnixNanos()) / 1e9;
  bool memory_printed = !memory_listed;
  for (const StepInfo& s : *steps) {
    // The memory step among the durable ones, by step number (after a
    // durable step of the same number).
    if (!memory_printed && memory.step < s.step) {
      out.Memory();
      memory_printed = true;
    }
    double age = s.created_unix_ns > 0 ? now - static_cast<double>(s.created_unix_ns) / 1e9 : -1;
    if (age < 0 && age > -1) age = 0;  // another host's clock a little ahead
    const bool is_latest = latest.ok() && *latest == s.step;
    out.Durable(s, age, is_latest, with_memory ? is_latest && !newest_is_memory : is_latest);
  }
  if (!memory_printed) out.Memory();
  out.End(latest.ok(), latest_step, newest, memory_listed, any_damaged, any_unreadable);
  return any_damaged || any_unreadable ? kExitProblem : kExitOk;
}

}  // namespace ckpt::tools

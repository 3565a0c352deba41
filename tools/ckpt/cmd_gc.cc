// ckpt gc: retention over a root's steps, partial steps and unfinished
// uploads, as a dry run unless --yes.
#include <cstdio>

#include "ckpt/audit.h"
#include "ckpt/checkpointer.h"
#include "ckpt/storage.h"
#include "ckpt/verify.h"
#include "commands.h"
#include "common/cli.h"
#include "common/synth_job.h"
#include "util/bytes.h"
#include "util/json.h"
#include "util/strings.h"

namespace ckpt::tools {

int GcMain(int argc, char** argv, int first) {
  std::string dir;
  int64_t keep_last = 0, keep_every = 0, keep_within = 0;
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
  args.Int("keep-within", &keep_within, "also keep every step within N steps of the newest");
  args.Switch("newer-partial", &partial, "also remove uncommitted steps newer than the latest");
  args.Switch("damaged", &damaged, "also remove damaged steps (committed checkpoints: repair them first if you can)");
  args.Switch("yes", &yes, "really remove");
  args.Switch("json", &json, "print JSON");
  int exit = 0;
  if (!args.Parse(argc, argv, first, &exit)) return exit;
  if (keep_last < 0 || keep_every < 0 || keep_within < 0)
    return FailUnreadable("gc", absl::InvalidArgumentError("counts must be >= 0"));
  auto storage = OpenStorage(dir);
  if (!storage.ok()) return FailUnreadable("gc", storage.status());
  if (absl::Status listed = ListCheckpointSteps(**storage).status(); !listed.ok()) {
    return FailUnreadable("gc", absl::IsNotFound(listed)
                                    ? absl::NotFoundError(StrCat("checkpoint root ", dir, " does not exist"))
                                    : listed);
  }
  GcOptions o;
  o.retention.keep_last = static_cast<int>(keep_last);
  o.retention.keep_every = keep_every;
  o.retention.keep_within = keep_within;
  o.dry_run = !yes;
  o.remove_newer_partial = partial;
  o.remove_damaged = damaged;
  o.sweep_every_step = true;
  auto report = CollectGarbage(**storage, o);
  if (!report.ok()) return FailUnreadable("gc", report.status());
  Render(
      json,
      [&](JsonWriter& w) {
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
        w.EndArray().Key("kept_bases").BeginArray();
        for (int64_t s : report->kept_bases) w.Int(s);
        w.EndArray().Key("aborted_uploads").BeginArray();
        for (const std::string& u : report->aborted_uploads) w.String(u);
        w.EndArray().Key("removed_reports").BeginArray();
        for (const std::string& r : report->removed_reports) w.String(r);
        w.EndArray().Key("reasons").BeginArray();
        for (const std::string& r : report->reasons) w.String(r);
        w.EndArray().Field("bytes_freed", report->bytes_freed).EndObject();
      },
      [&] {
        for (const std::string& r : report->reasons) std::printf("%s\n", Printable(r).c_str());
        std::printf("%s %s%s\n", yes ? "freed" : "would free",
                    HumanBytes(static_cast<double>(report->bytes_freed)).c_str(),
                    yes ? "" : " (dry run: add --yes to remove)");
      });
  // Steps the storage could not account for are a problem to look at.
  return report->kept_unreadable.empty() ? kExitOk : kExitProblem;
}

}  // namespace ckpt::tools

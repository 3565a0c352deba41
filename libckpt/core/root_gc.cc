// Garbage collection of a root (root.h): which steps a retention policy
// keeps, which partial steps are provably abandoned, and the removal that
// marks a step RETIRING before it deletes it; and whether a step's claimant
// still runs on this host.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/root.h"
#include "format/root_files.h"
#include "storage/capabilities.h"
#include "util/bytes.h"
#include "util/clock.h"
#include "util/errors.h"
#include "util/log.h"
#include "util/strings.h"

namespace ckpt {
namespace {

// A partial step that a gc began removing (ExamineStep said so).
bool Retiring(const StepInfo& s) {
  return s.state == StepState::kPartial && absl::StrContains(s.damage, AV(kRetiringName));
}

}  // namespace

std::string ThisHostName() {
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == 0) return "?";
  return name;
}

namespace {

// State letter and start time (clock ticks since boot) of a process from
// /proc/PID/stat; false when it does not exist (or /proc cannot say).
bool ReadProcStat(int64_t pid, char* state, int64_t* start_ticks) {
  FILE* f = std::fopen(StrCat("/proc/", pid, "/stat").c_str(), "r");
  if (f == nullptr) return false;
  char buf[1024];
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = 0;
  // "PID (COMM) STATE f4 ... f22=starttime"; COMM may hold spaces and ')'.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr || p[1] != ' ') return false;
  *state = p[2];
  p += 3;
  for (int field = 4; field <= 22 && *p; ++field) {
    while (*p == ' ') ++p;
    const char* end = p;
    while (*end && *end != ' ') ++end;
    if (field == 22) {
      int64_t v = 0;
      if (!ParseInt64(std::string_view(p, static_cast<size_t>(end - p)), &v)) return false;
      *start_ticks = v;
      return true;
    }
    p = end;
  }
  return false;
}

}  // namespace

int64_t ProcessStartTicks(int64_t pid) {
  char state = 0;
  int64_t start = 0;
  return ReadProcStat(pid, &state, &start) ? start : 0;
}

namespace {

// Whether process `pid` of this host still runs: not a zombie (killed, not
// yet reaped), and, when `start_ticks` is known, the same process (not
// another that got the pid).
bool ProcessRunsHere(int64_t pid, int64_t start_ticks) {
  if (pid <= 0 || pid > (int64_t{1} << 31)) return false;
  char state = 0;
  int64_t start = 0;
  if (ReadProcStat(pid, &state, &start)) {
    if (state == 'Z' || state == 'X') return false;
    return start_ticks == 0 || start == start_ticks;
  }
  return kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

}  // namespace

bool ClaimIsRunningHere(const StepClaim& claim) {
  if (claim.host != ThisHostName()) return false;
  // This process's own saves in flight are protected by their Checkpointer
  // (GcOptions::protect); an old claim of this pid is a leftover.
  if (claim.pid == getpid()) return false;
  return ProcessRunsHere(claim.pid, claim.pid_start);
}

namespace {

// Rank reports in committed steps that stay: a committed step is never
// saved again, so each is a leftover of a leader stopped between the commit
// and its cleanup (the manifest holds what it said). The newest committed
// step only, unless asked for every one.
absl::Status SweepLeftoverReports(Storage& storage, const std::vector<StepInfo>& steps, const std::set<int64_t>& keep,
                                  const GcOptions& options, GcReport* report) {
  int64_t newest = -1;
  for (const StepInfo& s : steps) {
    if (s.state == StepState::kCommitted) newest = s.step;
  }
  for (const StepInfo& s : steps) {
    if (s.state != StepState::kCommitted || keep.count(s.step) == 0) continue;
    if (!options.sweep_every_step && s.step != newest) continue;
    const std::string dir = StepDir(s.step);
    auto files = storage.List(dir);
    if (!files.ok()) {
      if (absl::IsNotFound(files.status())) continue;
      return Annotate(files.status(), StrCat("listing ", dir, " for rank reports left after its commit"));
    }
    int found = 0;
    for (const DirEntry& f : *files) {
      if (f.is_dir || !IsReportName(f.name)) continue;
      const std::string path = StrCat(dir, "/", f.name);
      if (!options.dry_run) {
        auto size = storage.FileSize(path);
        absl::Status r = storage.Remove(path);
        if (!r.ok() && !absl::IsNotFound(r)) return r;
        if (size.ok()) report->bytes_freed += static_cast<int64_t>(*size);
      }
      report->removed_reports.push_back(path);
      ++found;
    }
    if (found > 0) {
      report->reasons.push_back(StrCat(options.dry_run ? "would remove " : "removed ", found,
                                       " rank report(s) left in committed step ", s.step,
                                       ": its leader stopped between the commit and removing them"));
    }
  }
  return absl::OkStatus();
}

// Steps that kept steps' deltas need stay, down their chains. A step whose
// bases cannot be known (damaged with no manifest that decodes, or
// unreadable) keeps every committed step older than it, in a root that
// holds deltas at all.
void KeepDeltaBases(const std::vector<StepInfo>& steps, const GcOptions& options, std::set<int64_t>* keep,
                    GcReport* report) {
  std::map<int64_t, const StepInfo*> by_step;
  bool deltas = false;
  for (const StepInfo& s : steps) {
    by_step[s.step] = &s;
    deltas = deltas || !s.delta_bases.empty();
  }
  if (!deltas) return;
  const std::set<int64_t> by_retention = *keep;
  // Steps that stay whatever retention says: kept ones, damaged ones (unless
  // asked to remove them) and unreadable ones.
  std::vector<int64_t> todo;
  int64_t unknown_below = -1;
  for (const StepInfo& s : steps) {
    const bool stays = keep->count(s.step) > 0 || s.state == StepState::kUnreadable ||
                       (s.state == StepState::kDamaged && !options.remove_damaged);
    if (!stays || s.state == StepState::kPartial) continue;
    todo.push_back(s.step);
    if (!s.committed) unknown_below = std::max(unknown_below, s.step);
  }
  std::map<int64_t, std::set<int64_t>> pinned_by;
  while (!todo.empty()) {
    const int64_t s = todo.back();
    todo.pop_back();
    auto it = by_step.find(s);
    if (it == by_step.end()) continue;
    for (int64_t b : it->second->delta_bases) {
      pinned_by[b].insert(s);
      if (keep->insert(b).second) todo.push_back(b);
    }
  }
  for (const auto& [base, users] : pinned_by) {
    auto it = by_step.find(base);
    if (it == by_step.end() || it->second->state != StepState::kCommitted || by_retention.count(base)) continue;
    std::string names;
    for (int64_t u : users) names = names.empty() ? StrCat(u) : StrCat(names, ", ", u);
    report->kept_bases.push_back(base);
    report->reasons.push_back(StrCat("kept committed step ", base, ": the base of delta step(s) ", names));
  }
  if (unknown_below < 0) return;
  for (const StepInfo& s : steps) {
    if (s.step >= unknown_below || s.state != StepState::kCommitted || !keep->insert(s.step).second) continue;
    report->kept_bases.push_back(s.step);
    report->reasons.push_back(StrCat("kept committed step ", s.step, ": step ", unknown_below,
                                     " has no manifest that can be read, so which bases its deltas need is "
                                     "not known"));
  }
}

}  // namespace

absl::StatusOr<GcReport> CollectGarbageIn(Storage& storage, const GcOptions& options) {
  GcReport report;
  auto steps = ListStepsIn(storage);
  if (!steps.ok()) {
    if (absl::IsNotFound(steps.status())) return report;
    return steps.status();
  }
  // Retention counts intact committed steps only: a damaged step neither
  // takes the place of an intact one nor is removed by it.
  std::vector<int64_t> intact;
  int64_t newest = -1;  // newest committed step, damaged or not
  for (const StepInfo& s : *steps) {
    if (s.state == StepState::kCommitted) intact.push_back(s.step);
    if (s.state != StepState::kPartial) newest = std::max(newest, s.step);
  }
  std::set<int64_t> keep(intact.begin(), intact.end());
  const RetentionPolicy& rp = options.retention;
  if (rp.keep_last > 0 || rp.keep_every > 0 || rp.keep_within > 0) {
    keep.clear();
    for (size_t i = 0; i < intact.size(); ++i) {
      const bool recent = rp.keep_last > 0 && i + static_cast<size_t>(rp.keep_last) >= intact.size();
      const bool milestone = rp.keep_every > 0 && intact[i] % rp.keep_every == 0;
      const bool window = rp.keep_within > 0 && !intact.empty() && intact[i] > intact.back() - rp.keep_within;
      if (recent || milestone || window) keep.insert(intact[i]);
    }
  }
  if (newest >= 0) keep.insert(newest);
  if (auto text = storage.GetAll(kLatestName); text.ok()) {
    if (auto pointed = DecodeLatest(*text); pointed.ok()) keep.insert(*pointed);
  } else if (!absl::IsNotFound(text.status())) {
    // Which step LATEST protects is not known: nothing is removed blind.
    return Annotate(text.status(), "reading LATEST before removing anything");
  }
  keep.insert(options.protect.begin(), options.protect.end());
  KeepDeltaBases(*steps, options, &keep, &report);
  const char* removes = options.dry_run ? "would remove" : "removed";
  // Newest first: a base is always older than the steps that are deltas
  // against it, so a removal stopped at any point never leaves a committed
  // step whose base is gone.
  for (auto it = steps->rbegin(); it != steps->rend(); ++it) {
    const StepInfo& s = *it;
    const std::string dir = StepDir(s.step);
    if (options.protect.count(s.step)) continue;
    switch (s.state) {
      case StepState::kCommitted:
        if (keep.count(s.step)) continue;
        report.removed_steps.push_back(s.step);
        report.reasons.push_back(StrCat(removes, " committed step ", s.step, ": past retention"));
        break;
      case StepState::kDamaged:
        if (!options.remove_damaged) {
          report.kept_damaged.push_back(s.step);
          report.reasons.push_back(StrCat("kept damaged step ", s.step, ": ", s.damage,
                                          "; repair it (ckpt repair), or remove it explicitly (ckpt gc --damaged)"));
          continue;
        }
        report.removed_damaged.push_back(s.step);
        report.reasons.push_back(StrCat(removes, " damaged step ", s.step, " as asked: ", s.damage));
        break;
      case StepState::kUnreadable:
        // Nothing is known of it: never removed, whatever was asked.
        report.kept_unreadable.push_back(s.step);
        report.reasons.push_back(StrCat("kept unreadable step ", s.step, ": ", s.damage,
                                        "; the storage could not say what it is, so nothing removes it"));
        continue;
      case StepState::kPartial:
        if (s.step > newest && !options.remove_newer_partial) continue;
        // A save another process on this host is still writing (not a
        // removal: its claim names the save that once committed it).
        if (auto claim = ReadStepClaim(storage, s.step); !Retiring(s) && claim.ok() && ClaimIsRunningHere(*claim)) {
          report.kept_running.push_back(s.step);
          report.reasons.push_back(StrCat("kept partial step ", s.step, ": claimed by a save still running, ",
                                          DescribeClaim(*claim, UnixNanos())));
          continue;
        }
        report.removed_partial.push_back(s.step);
        report.reasons.push_back(
            StrCat(removes, " partial step ", s.step, ": ",
                   !s.damage.empty() ? s.damage
                                     : StrCat("never committed (no ", kManifestName, " nor ", kManifestCopyName, ")"),
                   ", ",
                   s.step > newest ? "newer than every committed step, left by a save that stopped"
                                   : StrCat("older than committed step ", newest)));
        break;
    }
    report.bytes_freed += s.bytes;
    if (options.dry_run) continue;
    // Un-commit first: the marker, then the copy, then MANIFEST, so that a
    // removal stopped at any point leaves either a committed step (retention
    // decides again) or one that ExamineStep calls partial, which the next
    // gc removes; never a damaged one.
    if (s.state != StepState::kPartial) {
      CKPT_RETURN_IF_ERROR(
          storage.PutAtomic(StrCat(dir, "/", kRetiringName), AsBytesView(std::string_view("ckpt-retiring 1\n"))));
      for (std::string_view name : {kManifestCopyName, kManifestName}) {
        absl::Status r = storage.Remove(StrCat(dir, "/", name));
        if (!r.ok() && !absl::IsNotFound(r)) return r;
      }
      CKPT_RETURN_IF_ERROR(storage.SyncDir(dir));
      // Then the claim, so that what a failed removal leaves is never taken
      // for a save still running.
      absl::Status r = storage.Remove(StrCat(dir, "/", kClaimName));
      if (!r.ok() && !absl::IsNotFound(r)) return r;
    }
    CKPT_RETURN_IF_ERROR(storage.RemoveAll(dir));
  }
  // Removed newest first, reported in step order.
  for (std::vector<int64_t>* v : {&report.removed_steps, &report.removed_partial, &report.removed_damaged,
                                  &report.kept_damaged, &report.kept_unreadable, &report.kept_running}) {
    std::sort(v->begin(), v->end());
  }
  CKPT_RETURN_IF_ERROR(SweepLeftoverReports(storage, *steps, keep, options, &report));
  // Temporary files of interrupted atomic writes at the root.
  auto entries = storage.List("");
  if (entries.ok() && !options.dry_run) {
    for (const DirEntry& e : *entries) {
      if (!e.is_dir && absl::StartsWith(e.name, StrCat(kLatestName, ".tmp."))) {
        // "LATEST.tmp.<pid>.<n>": a process of this host still running may
        // be about to rename it.
        std::string_view rest = std::string_view(e.name).substr(kLatestName.size() + 5);
        int64_t pid = 0;
        const size_t dot = rest.find('.');
        if (dot != std::string_view::npos && ParseInt64(rest.substr(0, dot), &pid) && pid != getpid() &&
            ProcessRunsHere(pid, 0)) {
          continue;
        }
        (void)storage.Remove(e.name);
      }
    }
  }
  // Unfinished multipart uploads (object stores) bill for their parts and
  // never show in a listing. Those of a step still being written (partial
  // and kept above) stay; any other is a leftover: its step committed
  // without it, or was removed, or it is outside every step.
  PendingUploads* pending = FindCapability<PendingUploads>(storage);
  std::vector<PendingUpload> uploads;
  if (pending != nullptr) {
    CKPT_ASSIGN_OR_RETURN(uploads, pending->ListPending());
  }
  std::set<int64_t> writing;
  for (const StepInfo& s : *steps) {
    const bool removed = std::count(report.removed_partial.begin(), report.removed_partial.end(), s.step) > 0;
    if (s.state == StepState::kPartial && !removed) writing.insert(s.step);
  }
  for (const PendingUpload& u : uploads) {
    const size_t slash = u.path.find('/');
    const std::optional<int64_t> step =
        slash == std::string::npos ? std::nullopt : ParseStepDir(std::string_view(u.path).substr(0, slash));
    if (step && writing.count(*step)) continue;
    report.aborted_uploads.push_back(u.path);
    report.reasons.push_back(StrCat(options.dry_run ? "would abort" : "aborted", " unfinished upload of ", u.path,
                                    u.age_s >= 0 ? StrCat(" (started ", u.age_s, " s ago)") : std::string(),
                                    step ? StrCat(": step ", *step, " is not being written") : ": outside any step"));
    if (!options.dry_run) CKPT_RETURN_IF_ERROR(pending->AbortPending(u));
  }
  if (!options.dry_run &&
      (!report.removed_steps.empty() || !report.removed_partial.empty() || !report.removed_damaged.empty())) {
    CKPT_RETURN_IF_ERROR(storage.SyncDir(""));
  }
  return report;
}

absl::StatusOr<GcReport> CollectGarbage(Storage& storage, const GcOptions& options) {
  return CollectGarbageIn(storage, options);
}

absl::Status CleanRootAtJobStart(Storage& storage, const RetentionPolicy& retention) {
  if (auto healed = HealManifestCopies(storage); healed.ok()) {
    for (int64_t step : *healed) {
      LogInfo(StrCat("wrote the missing ", kManifestCopyName, " of step ", step));
    }
  }
  GcOptions gc;
  gc.retention = retention;
  gc.remove_newer_partial = true;
  auto report = CollectGarbageIn(storage, gc);
  if (!report.ok()) return absl::IsNotFound(report.status()) ? absl::OkStatus() : report.status();
  for (const std::string& why : report->reasons) LogInfo(why);
  return absl::OkStatus();
}

}  // namespace ckpt

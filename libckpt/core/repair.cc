#include <algorithm>
#include <map>
#include <set>

#include "ckpt/checkpointer.h"
#include "ckpt/verify.h"
#include "core/root.h"
#include "format/root_files.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt {
namespace {

// Makes `path` in `dst` byte-identical to `path` in `src`, rewriting only
// the 1 MiB pieces that differ. Returns the bytes written.
absl::StatusOr<int64_t> SyncFile(Storage& dst, Storage& src, const std::string& path, bool dry_run) {
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> in, src.OpenReadable(path));
  std::unique_ptr<ReadableFile> old;
  if (auto o = dst.OpenReadable(path); o.ok()) old = std::move(o).value();
  const uint64_t size = in->size();
  constexpr uint64_t kPiece = 1 << 20;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  std::string a(kPiece, '\0'), b(kPiece, '\0');
  for (uint64_t off = 0; off < size; off += kPiece) {
    const uint64_t n = std::min(kPiece, size - off);
    CKPT_RETURN_IF_ERROR(in->ReadAt(off, absl::Span<std::byte>(reinterpret_cast<std::byte*>(a.data()), n)));
    bool same = old != nullptr && off + n <= old->size() &&
                old->ReadAt(off, absl::Span<std::byte>(reinterpret_cast<std::byte*>(b.data()), n)).ok() &&
                std::equal(a.begin(), a.begin() + static_cast<int64_t>(n), b.begin());
    if (!same) ranges.push_back({off, n});
  }
  const bool resize = old == nullptr || old->size() != size;
  old.reset();
  int64_t written = 0;
  for (const auto& r : ranges) written += static_cast<int64_t>(r.second);
  if (dry_run || (ranges.empty() && !resize)) return written;
  WriteOptions wo;
  wo.direct = false;
  wo.truncate = false;
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> out, dst.OpenWritable(path, wo));
  absl::Status write_status;
  for (const auto& [off, n] : ranges) {
    CKPT_RETURN_IF_ERROR(in->ReadAt(off, absl::Span<std::byte>(reinterpret_cast<std::byte*>(a.data()), n)));
    out->WriteAsync(off, absl::Span<const std::byte>(reinterpret_cast<const std::byte*>(a.data()), n),
                    [&write_status](absl::Status s) {
                      if (!s.ok() && write_status.ok()) write_status = s;
                    });
    CKPT_RETURN_IF_ERROR(out->Drain());  // `a` is reused
  }
  CKPT_RETURN_IF_ERROR(write_status);
  CKPT_RETURN_IF_ERROR(out->Finish(size));
  return written;
}

}  // namespace

absl::StatusOr<RepairReport> RepairStep(Storage& damaged, Storage& source, int64_t step, bool dry_run) {
  RepairReport report;
  report.step = step;
  const std::string dir = StepDir(step);
  const std::string manifest = StrCat(dir, "/", kManifestName);

  // Along its chains: the bases first (each older than the step, so this
  // ends), so that the step's deltas are checked against intact bases.
  if (auto ex = ExamineStep(damaged, step); ex.ok() && ex->manifest.has_value()) {
    for (const ManifestBase& base : ex->manifest->bases) {
      CKPT_ASSIGN_OR_RETURN(RepairReport below, RepairStep(damaged, source, base.step, dry_run));
      for (const std::string& r : below.repaired)
        report.repaired.push_back(StrCat("delta base step ", base.step, ": ", r));
      for (const std::string& l : below.lost) report.lost.push_back(StrCat("delta base step ", base.step, ": ", l));
      report.bytes_rewritten += below.bytes_rewritten;
    }
  }

  auto check = VerifyStep(damaged, step);
  if (check.ok() && check->ok()) return report;  // intact: the source is not read
  // Metadata first from the step's own copy: MANIFEST and MANIFEST.copy
  // stand in for each other.
  if (check.ok()) {
    std::vector<std::string> lost;
    CKPT_RETURN_IF_ERROR(RepairStepMetadata(damaged, step, dry_run, &report.repaired, &lost));
    if (!report.repaired.empty() && !dry_run) {
      check = VerifyStep(damaged, step);
      if (check.ok() && check->ok()) return report;
    }
  }
  auto source_check = VerifyStep(source, step);
  if (!check.ok()) {
    // The manifest itself is missing or undecodable here.
    if (!source_check.ok()) {
      report.lost.push_back(
          StrCat("step ", step, ": ", check.status().message(), "; the other copy: ", source_check.status().message()));
      return report;
    }
    CKPT_ASSIGN_OR_RETURN(std::string bytes, source.GetAll(manifest));
    if (!dry_run) {
      CKPT_RETURN_IF_ERROR(damaged.PutAtomic(
          manifest, absl::Span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size())));
    }
    report.repaired.push_back(StrCat(manifest, ": replaced (", check.status().message(), ")"));
    report.bytes_rewritten += static_cast<int64_t>(bytes.size());
    if (dry_run) return report;
    check = VerifyStep(damaged, step);
    if (!check.ok()) return check.status();
  }
  if (check->ok()) return report;

  // A manifest that decodes but fails its checksums: replace it first when
  // the other copy's is intact.
  const std::string manifest_copy = StrCat(dir, "/", kManifestCopyName);
  auto problem_in = [&](const VerifyReport& r, const std::string& file) {
    return std::any_of(r.problems.begin(), r.problems.end(), [&](const VerifyProblem& p) { return p.file == file; });
  };
  auto theirs_ex = ExamineStep(source, step);
  const bool theirs_intact = theirs_ex.ok() && theirs_ex->manifest.has_value();
  bool replaced = false;
  for (const std::string& file : {manifest, manifest_copy}) {
    if (!problem_in(*check, file) || !theirs_intact) continue;
    const std::string& bytes = theirs_ex->intact_bytes;
    report.repaired.push_back(StrCat(file, ": replaced from the other copy"));
    report.bytes_rewritten += static_cast<int64_t>(bytes.size());
    replaced = true;
    if (dry_run) continue;
    CKPT_RETURN_IF_ERROR(damaged.PutAtomic(
        file, absl::Span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size())));
  }
  if (replaced) {
    if (dry_run) return report;
    check = VerifyStep(damaged, step);
    if (!check.ok()) return check.status();
    if (check->ok()) return report;
  }

  // Both copies must be of the same save.
  auto mine_ex = ExamineStep(damaged, step);
  if (!mine_ex.ok() || !mine_ex->manifest || !theirs_intact || mine_ex->intact_bytes != theirs_ex->intact_bytes) {
    for (const VerifyProblem& p : check->problems) {
      report.lost.push_back(StrCat(p.message, " (the other copy holds a different save of step ", step, ")"));
    }
    return report;
  }
  std::map<std::string, std::vector<const VerifyProblem*>> by_file;
  for (const VerifyProblem& p : check->problems) by_file[p.file].push_back(&p);
  std::set<std::string> source_bad, unfixable;
  if (source_check.ok()) {
    for (const VerifyProblem& p : source_check->problems) source_bad.insert(p.file);
  }
  for (const auto& [file, problems] : by_file) {
    if (file.empty() || !source_check.ok() || source_bad.count(file)) {
      unfixable.insert(file);
      for (const VerifyProblem* p : problems) {
        report.lost.push_back(StrCat(p->message, file.empty() ? "" : " (the other copy of this file is damaged too)"));
      }
      continue;
    }
    const std::string path = file.find('/') == std::string::npos ? StrCat(dir, "/", file) : file;
    auto n = SyncFile(damaged, source, path, dry_run);
    if (!n.ok()) {
      report.lost.push_back(StrCat(path, ": could not be rewritten: ", n.status().message()));
      continue;
    }
    report.bytes_rewritten += *n;
    report.repaired.push_back(StrCat(path, ": ", *n, " bytes ", dry_run ? "would be " : "", "rewritten (",
                                     problems.size(), " problem(s), first: ", problems[0]->message, ")"));
  }
  if (dry_run) return report;
  auto again = VerifyStep(damaged, step);
  if (!again.ok()) return again.status();
  for (const VerifyProblem& p : again->problems) {
    if (unfixable.count(p.file)) continue;  // already listed
    const std::string m = StrCat("still damaged after repair: ", p.message);
    if (std::find(report.lost.begin(), report.lost.end(), m) == report.lost.end()) report.lost.push_back(m);
  }
  return report;
}

absl::StatusOr<std::vector<std::string>> RepairLatestPointer(Storage& storage, bool dry_run) {
  std::vector<std::string> repaired;
  auto problem = CheckLatestPointer(storage);
  if (!problem) return repaired;
  auto newest = ResolveLatest(storage);
  if (!newest.ok()) {
    if (absl::IsNotFound(newest.status())) return repaired;
    return newest.status();
  }
  repaired.push_back(StrCat("LATEST: rewritten to name step ", *newest, " (", problem->message, ")"));
  if (!dry_run) CKPT_RETURN_IF_ERROR(storage.PutAtomic(kLatestName, AsBytesView(EncodeLatest(*newest))));
  return repaired;
}

absl::StatusOr<RepairReport> RepairMetadata(Storage& storage, int64_t step, bool dry_run) {
  CKPT_ASSIGN_OR_RETURN(std::vector<StepInfo> steps, ListCheckpointSteps(storage));
  RepairReport report;
  report.step = step;
  std::vector<int64_t> touched;
  for (const StepInfo& s : steps) {
    if (s.state == StepState::kPartial) continue;
    if (step != kLatestStep && s.step != step) continue;
    const size_t before = report.repaired.size();
    CKPT_RETURN_IF_ERROR(RepairStepMetadata(storage, s.step, dry_run, &report.repaired, &report.lost));
    if (report.repaired.size() > before) touched.push_back(s.step);
  }
  CKPT_ASSIGN_OR_RETURN(std::vector<std::string> latest, RepairLatestPointer(storage, dry_run));
  report.repaired.insert(report.repaired.end(), latest.begin(), latest.end());
  if (dry_run) return report;
  // A repair is done when the step verifies: what it rewrote is checked
  // against the data files once more, and a step that still fails is lost.
  for (int64_t each : touched) {
    VerifyOptions vo;
    vo.deep = false;
    auto rep = VerifyStep(storage, each, vo);
    if (!rep.ok()) {
      report.lost.push_back(StrCat("step ", each, " after the repair: ", rep.status().message()));
    } else if (!rep->ok()) {
      report.lost.push_back(
          StrCat("step ", each, " still fails `ckpt verify --fast` after the repair: ", rep->problems.front().message));
    }
  }
  return report;
}

}  // namespace ckpt

#include "core/root.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "format/data_file.h"
#include "format/root_files.h"
#include "plan/cover.h"
#include "storage/capabilities.h"
#include "util/bytes.h"
#include "util/clock.h"
#include "util/errors.h"
#include "util/hash.h"
#include "util/strings.h"

namespace ckpt {

namespace {

// Decodes the manifest bytes found at `path` and checks that they describe
// `step`. The message names the file.
absl::StatusOr<Manifest> DecodeStepManifest(std::string_view bytes, const std::string& path, int64_t step,
                                            GridChunks grids) {
  auto m = DecodeManifest(bytes, path, kMaxManifestChunks, grids);
  if (!m.ok()) return m.status();
  if (m->kind != Manifest::Kind::kManifest || m->step != step) {
    return absl::DataLossError(StrCat(path, ": describes step ", m->step,
                                      m->kind != Manifest::Kind::kManifest ? " and is a rank report" : "",
                                      ", expected the manifest of step ", step));
  }
  return m;
}

// True when the file exists (an I/O error other than NotFound counts as
// existing: it must not make a committed step look partial). A storage out
// of time is an error: it would not answer the next question either.
absl::StatusOr<bool> Exists(Storage& storage, const std::string& path) {
  auto size = storage.FileSize(path);
  if (absl::IsDeadlineExceeded(size.status())) return size.status();
  return size.ok() || !absl::IsNotFound(size.status());
}

// The commit mark of a step: its MANIFEST, or the copy standing in for it.
absl::StatusOr<bool> HasCommitMark(Storage& storage, int64_t step) {
  const std::string dir = StepDir(step);
  CKPT_ASSIGN_OR_RETURN(bool primary, Exists(storage, StrCat(dir, "/", kManifestName)));
  if (primary) return true;
  return Exists(storage, StrCat(dir, "/", kManifestCopyName));
}

// Step directories under the root, newest first; NotFound when the root
// does not exist.
absl::StatusOr<std::vector<int64_t>> StepDirsNewestFirst(Storage& storage) {
  auto entries = storage.List("");
  if (!entries.ok()) {
    if (absl::IsNotFound(entries.status())) {
      return absl::NotFoundError(StrCat("checkpoint root ", storage.uri(), " does not exist"));
    }
    return entries.status();
  }
  std::vector<int64_t> steps;
  for (const DirEntry& e : *entries) {
    std::optional<int64_t> step = ParseStepDir(e.name);
    if (step && e.is_dir) steps.push_back(*step);
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

// What a step's own files say about which save wrote them: its CLAIM and
// the save id in each data file's footer, each read once however many
// manifests are weighed against them.
class StepEvidence {
 public:
  StepEvidence(Storage& storage, std::string dir) : storage_(storage), dir_(std::move(dir)) {}

  // "" when `m` is the commit of the save whose files the step holds: its
  // record of CLAIM is the CLAIM on the storage, and the footer of each of
  // its data files carries the save id it records; otherwise what disagrees
  // (or could not be read: that is no evidence for it either).
  std::string Disagreement(const Manifest& m) {
    if (m.format_version < 3) return "a manifest of format version < 3 records no save ids";
    const std::string claim_path = StrCat(dir_, "/", kClaimName);
    if (!claim_) claim_ = storage_.GetAll(claim_path);
    if (!claim_->ok()) return StrCat(claim_path, ": ", claim_->status().message());
    if (**claim_ != m.claim) return StrCat("its record of ", kClaimName, " is not the ", kClaimName, " in the step");
    for (const ManifestFile& f : m.files) {
      if (!absl::EndsWith(f.name, ".ckd")) continue;
      const std::string path = StrCat(dir_, "/", f.name);
      auto [it, fresh] = footers_.try_emplace(f.name, absl::UnknownError(""));
      if (fresh) it->second = FooterSaveId(path);
      if (!it->second.ok()) return std::string(it->second.status().message());
      if (*it->second != f.save_id) {
        char want[19], got[19];
        return StrCat(path, " was written by save ", HexHashTo(*it->second, got), ", it records save ",
                      HexHashTo(f.save_id, want));
      }
    }
    return "";
  }

 private:
  absl::StatusOr<uint64_t> FooterSaveId(const std::string& path) {
    CKPT_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> file, storage_.OpenReadable(path));
    const uint64_t size = file->size();
    if (size < kFooterSize) return absl::DataLossError(StrCat(path, " is too short for a footer"));
    std::byte tail[kFooterSize];
    CKPT_RETURN_IF_ERROR(file->ReadAt(size - kFooterSize, absl::MakeSpan(tail, kFooterSize)));
    CKPT_ASSIGN_OR_RETURN(DataFileFooter footer, DecodeFooter(tail, path, size - kFooterSize));
    return footer.save_id;
  }

  Storage& storage_;
  const std::string dir_;
  std::optional<absl::StatusOr<std::string>> claim_;
  std::map<std::string, absl::StatusOr<uint64_t>> footers_;  // data file name -> save id
};

// A partial step that a gc began removing (ExamineStep said so).
bool Retiring(const StepInfo& s) {
  return s.state == StepState::kPartial && absl::StrContains(s.damage, AV(kRetiringName));
}

// "PATH: message", unless the message already starts with the path.
std::string Located(const std::string& path, absl::string_view message) {
  if (absl::StartsWith(message, path)) return std::string(message);
  return StrCat(path, ": ", message);
}

}  // namespace

std::string_view StepStateName(StepState state) {
  switch (state) {
    case StepState::kPartial:
      return "partial";
    case StepState::kCommitted:
      return "committed";
    case StepState::kDamaged:
      return "damaged";
    case StepState::kUnreadable:
      return "unreadable";
  }
  return "unknown";
}

absl::StatusOr<StepExamination> ExamineStep(Storage& storage, int64_t step, GridChunks grids) {
  const std::string dir = StepDir(step);
  const std::string primary = StrCat(dir, "/", kManifestName);
  const std::string copy = StrCat(dir, "/", kManifestCopyName);
  StepExamination ex;
  ex.info.step = step;
  // A storage that ran out of time answers nothing more for this step.
  auto a = storage.GetAll(primary);
  if (absl::IsDeadlineExceeded(a.status())) return a.status();
  auto b = storage.GetAll(copy);
  if (absl::IsDeadlineExceeded(b.status())) return b.status();
  const bool missing_a = absl::IsNotFound(a.status()), missing_b = absl::IsNotFound(b.status());
  // "Missing" needs the listing to agree: a GET that answers NotFound for a
  // manifest the listing names (a lagging replica, a caching proxy) proves
  // nothing either way.
  std::vector<std::string> contradicted;
  if (missing_a || missing_b) {
    auto files = storage.List(dir);
    if (!files.ok()) {
      if (absl::IsNotFound(files.status()) && missing_a && missing_b) {
        return absl::NotFoundError(StrCat("step ", step, " not found under ", storage.uri()));
      }
      if (absl::IsDeadlineExceeded(files.status())) return files.status();
      if (!absl::IsNotFound(files.status())) {
        ex.info.state = StepState::kUnreadable;
        ex.info.damage = StrCat("listing ", dir, ": ", files.status().message());
        return ex;
      }
    } else {
      bool retiring = false;
      for (const DirEntry& f : *files) {
        if ((missing_a && f.name == kManifestName) || (missing_b && f.name == kManifestCopyName)) {
          contradicted.push_back(StrCat(dir, "/", f.name));
        }
        retiring = retiring || f.name == kRetiringName;
      }
      // gc removes the copy first, then MANIFEST: its marker with the copy
      // gone is a removal that stopped half-way.
      const bool removal_stopped = retiring && missing_b && contradicted.empty();
      if ((missing_a && missing_b && contradicted.empty()) || removal_stopped) {
        ex.info.state = StepState::kPartial;
        if (retiring) {
          ex.info.damage = StrCat("a gc began removing it (", kRetiringName, "); the next gc finishes the removal");
        }
        for (const DirEntry& f : *files) {
          auto size = storage.FileSize(StrCat(dir, "/", f.name));
          if (size.ok()) ex.info.bytes += static_cast<int64_t>(*size);
        }
        return ex;
      }
    }
  }
  // What the storage could not tell: errors other than NotFound, and
  // listings that contradict a NotFound.
  std::vector<std::string> unreadable;
  for (const std::string& path : contradicted) {
    unreadable.push_back(StrCat(path,
                                ": the listing names it but reading it answers NotFound (the storage "
                                "contradicts itself: a lagging replica or a caching proxy?)"));
  }
  if (!a.ok() && !missing_a) unreadable.push_back(Located(primary, a.status().message()));
  if (!b.ok() && !missing_b) unreadable.push_back(Located(copy, b.status().message()));
  // Committed. Decode what was read; an intact MANIFEST wins.
  absl::StatusOr<Manifest> ma = absl::NotFoundError("");
  if (a.ok()) {
    ma = DecodeStepManifest(*a, primary, step, grids);
    if (!ma.ok()) ex.manifest_problem = Located(primary, ma.status().message());
  } else if (missing_a && contradicted.empty()) {
    ex.manifest_problem = StrCat(primary, " is missing (its copy proves the step was committed)");
  }
  if (b.ok()) {
    if (ma.ok() && *b == *a) {
      // Byte-identical to an intact MANIFEST: intact too.
    } else {
      auto mb = DecodeStepManifest(*b, copy, step, grids);
      if (!mb.ok()) {
        ex.copy_problem = Located(copy, mb.status().message());
      } else if (ma.ok()) {
        // Two commits of two saves: the step's own files say which is right.
        StepEvidence evidence(storage, dir);
        const std::string against_a = evidence.Disagreement(*ma);
        const std::string against_b = evidence.Disagreement(*mb);
        const std::string differ =
            StrCat(" decodes but differs from ", kManifestName, " (both cannot be the commit of one save)");
        if (against_a.empty() && !against_b.empty()) {
          ex.copy_problem = StrCat(copy, differ, "; it is not the commit of the step's files: ", against_b);
        } else if (against_b.empty() && !against_a.empty()) {
          ex.manifest_problem = StrCat(primary, " decodes but differs from ", kManifestCopyName,
                                       "; it is not the commit of the step's files: ", against_a);
          ma = std::move(mb);
          ex.from_copy = true;
        } else {
          ex.copy_problem = StrCat(copy, differ);
          ex.undecided = against_a.empty() ? std::string("both agree with CLAIM and the data files")
                                           : StrCat("neither agrees with the step's files (", kManifestName, ": ",
                                                    against_a, "; ", kManifestCopyName, ": ", against_b, ")");
          ex.manifest_problem = StrCat(primary, " and ", kManifestCopyName,
                                       " are the commits of two saves and the evidence does not "
                                       "decide which is right: ",
                                       ex.undecided);
          ma = absl::DataLossError(ex.manifest_problem);
        }
      } else {
        ma = std::move(mb);
        ex.from_copy = true;
      }
    }
  } else if (missing_b && contradicted.empty() && a.ok() && (!ma.ok() || ma->format_version >= 2)) {
    // Manifests of version 1 were written without a copy.
    ex.copy_problem = StrCat(copy,
                             " is missing (the save stopped between its commit and the copy, or it was "
                             "removed; the next open or `ckpt repair` writes it)");
  }
  if (ma.ok()) {
    ex.info.committed = true;
    ex.info.created_unix_ns = ma->created_unix_ns;
    for (const ManifestFile& f : ma->files) ex.info.bytes += static_cast<int64_t>(f.size);
    ex.intact_bytes = ex.from_copy ? *b : *a;
    ex.manifest = std::move(ma).value();
  }
  if (!unreadable.empty()) {
    // Whatever else was found, the state is not known: never "damaged".
    ex.info.state = StepState::kUnreadable;
    std::string what;
    for (const std::string& u : unreadable) what = what.empty() ? u : StrCat(what, "; ", u);
    ex.info.damage = what;
    return ex;
  }
  const bool damaged = !ex.manifest_problem.empty() || !ex.copy_problem.empty();
  ex.info.state = damaged ? StepState::kDamaged : StepState::kCommitted;
  if (damaged) {
    std::string what = ex.manifest_problem;
    if (!ex.copy_problem.empty()) what = what.empty() ? ex.copy_problem : StrCat(what, "; ", ex.copy_problem);
    ex.info.damage = what;
  }
  return ex;
}

namespace {

// The examination of a committed step with an intact manifest, or why it has
// none: NotFound when it was never committed, DataLoss when it is damaged.
absl::StatusOr<StepExamination> ExamineCommitted(Storage& storage, int64_t step, GridChunks grids) {
  CKPT_ASSIGN_OR_RETURN(StepExamination ex, ExamineStep(storage, step, grids));
  if (ex.info.state == StepState::kPartial) {
    return absl::NotFoundError(StrCat("step ", step, " was never committed (", StepDir(step),
                                      " has no MANIFEST; a save was interrupted or aborted)"));
  }
  if (!ex.manifest) {
    return absl::DataLossError(StrCat("step ", step, " is committed but damaged: ", ex.info.damage));
  }
  return ex;
}

// What a reader is told when the manifest came from the copy (else empty).
std::string CopyNote(const StepExamination& ex, int64_t step) {
  return ex.from_copy ? StrCat("step ", step, " is damaged (", ex.manifest_problem, "); its manifest was read from ",
                               kManifestCopyName)
                      : std::string();
}

}  // namespace

absl::StatusOr<Manifest> ReadManifest(Storage& storage, int64_t step, std::string* note, bool* from_copy,
                                      GridChunks grids) {
  CKPT_ASSIGN_OR_RETURN(StepExamination ex, ExamineCommitted(storage, step, grids));
  if (from_copy != nullptr) *from_copy = ex.from_copy;
  if (note != nullptr) *note = CopyNote(ex, step);
  return std::move(*ex.manifest);
}

absl::StatusOr<std::vector<StepInfo>> ListStepsIn(Storage& storage) {
  CKPT_ASSIGN_OR_RETURN(std::vector<DirEntry> entries, storage.List(""));
  std::vector<StepInfo> out;
  for (const DirEntry& e : entries) {
    if (!e.is_dir) continue;
    std::optional<int64_t> step = ParseStepDir(e.name);
    if (!step) continue;
    auto ex = ExamineStep(storage, *step, GridChunks::kGridsOnly);
    if (!ex.ok()) {
      if (absl::IsNotFound(ex.status())) continue;  // removed meanwhile
      // Out of time: the storage does not answer, for the other steps either.
      if (absl::IsDeadlineExceeded(ex.status())) return ex.status();
      StepInfo info;
      info.step = *step;
      info.state = StepState::kUnreadable;
      info.damage = std::string(ex.status().message());
      out.push_back(info);
      continue;
    }
    out.push_back(ex->info);
  }
  std::sort(out.begin(), out.end(), [](const StepInfo& a, const StepInfo& b) { return a.step < b.step; });
  return out;
}

absl::StatusOr<int64_t> ResolveLatest(Storage& storage, std::string* note) {
  // The commit point of a step is its MANIFEST (its copy stands in when
  // MANIFEST is lost); LATEST is a pointer written just after, so it can lag
  // by one step after a crash. Whether the newest committed step decodes is
  // for the loader to find out and report, never a reason to skip it.
  CKPT_ASSIGN_OR_RETURN(std::vector<int64_t> steps, StepDirsNewestFirst(storage));
  std::optional<int64_t> best;
  for (int64_t step : steps) {
    CKPT_ASSIGN_OR_RETURN(bool committed, HasCommitMark(storage, step));
    if (committed) {
      best = step;
      break;
    }
  }
  if (note) {
    note->clear();
    auto text = storage.GetAll(kLatestName);
    if (absl::IsDeadlineExceeded(text.status())) return text.status();
    if (text.ok()) {
      auto pointed = DecodeLatest(*text);
      if (!pointed.ok()) {
        *note = std::string(pointed.status().message());
      } else if (!best || *pointed != *best) {
        *note = StrCat("LATEST names step ", *pointed, " but the latest committed step is ",
                       best ? std::to_string(*best) : std::string("none"));
      }
    } else if (best && !absl::IsNotFound(text.status())) {
      *note = std::string(text.status().message());
    }
  }
  if (!best) return absl::NotFoundError(StrCat("no committed checkpoint under ", storage.uri()));
  return *best;
}

absl::StatusOr<std::vector<int64_t>> CommittedStepsNewestFirst(Storage& storage) {
  CKPT_ASSIGN_OR_RETURN(std::vector<int64_t> steps, StepDirsNewestFirst(storage));
  std::vector<int64_t> committed;
  for (int64_t step : steps) {
    CKPT_ASSIGN_OR_RETURN(bool mark, HasCommitMark(storage, step));
    if (mark) committed.push_back(step);
  }
  return committed;
}

absl::StatusOr<LoadableStep> ResolveLoadable(Storage& storage, int64_t step, bool allow_fallback, GridChunks grids) {
  LoadableStep out;
  const bool latest = step == kLatestStep;
  if (latest) {
    std::string note;
    CKPT_ASSIGN_OR_RETURN(step, ResolveLatest(storage, &note));
    out.note = note;
  }
  // Takes an intact step's manifest, where it came from and its size.
  auto take = [&](StepExamination& ex, int64_t at) {
    out.step = at;
    out.from_copy = ex.from_copy;
    out.manifest_bytes = static_cast<int64_t>(ex.intact_bytes.size());
    out.manifest = std::move(*ex.manifest);
    return CopyNote(ex, at);
  };
  auto ex = ExamineCommitted(storage, step, grids);
  if (ex.ok()) {
    const std::string copy_note = take(*ex, step);
    if (!copy_note.empty()) out.note = out.note.empty() ? copy_note : StrCat(out.note, "; ", copy_note);
    return out;
  }
  if (!latest || !absl::IsDataLoss(ex.status())) return ex.status();
  // The newest committed step is damaged beyond its copy.
  CKPT_ASSIGN_OR_RETURN(std::vector<StepInfo> steps, ListStepsIn(storage));
  const StepInfo* older = nullptr;
  for (const StepInfo& s : steps) {
    if (s.step < step && s.committed) older = &s;
  }
  if (!allow_fallback || older == nullptr) {
    return absl::DataLossError(
        StrCat(ex.status().message(), older == nullptr
                                          ? std::string("; no older intact step exists")
                                          : StrCat("; the newest intact step is ", older->step,
                                                   " (allow falling back to restore it: LoadOptions::allow_fallback, "
                                                   "--fallback), or `ckpt repair` the damaged one")));
  }
  CKPT_ASSIGN_OR_RETURN(StepExamination older_ex, ExamineCommitted(storage, older->step, grids));
  const std::string older_note = take(older_ex, older->step);
  out.fell_back_from = step;
  out.note = StrCat(ex.status().message(), "; restored step ", older->step, " instead");
  if (!older_note.empty()) out.note = StrCat(out.note, "; ", older_note);
  return out;
}

absl::StatusOr<std::vector<int64_t>> HealManifestCopies(Storage& storage) {
  std::vector<int64_t> healed;
  auto steps = StepDirsNewestFirst(storage);
  if (!steps.ok()) {
    if (absl::IsNotFound(steps.status())) return healed;
    return steps.status();
  }
  // Only a MANIFEST without its copy is read; existence is checked first.
  for (int64_t step : *steps) {
    const std::string dir = StepDir(step);
    const std::string copy = StrCat(dir, "/", kManifestCopyName);
    CKPT_ASSIGN_OR_RETURN(bool has_primary, Exists(storage, StrCat(dir, "/", kManifestName)));
    if (!has_primary) continue;
    CKPT_ASSIGN_OR_RETURN(bool has_copy, Exists(storage, copy));
    if (has_copy) continue;
    auto ex = ExamineStep(storage, step);
    if (!ex.ok() || ex->info.state != StepState::kDamaged || !ex->manifest || ex->from_copy ||
        ex->copy_problem.empty()) {
      continue;  // v1, unreadable, or damaged otherwise
    }
    CKPT_RETURN_IF_ERROR(storage.PutAtomic(copy, AsBytesView(ex->intact_bytes)));
    healed.push_back(step);
  }
  std::sort(healed.begin(), healed.end());
  return healed;
}

absl::Status RepairStepMetadata(Storage& storage, int64_t step, bool dry_run, std::vector<std::string>* repaired,
                                std::vector<std::string>* lost) {
  CKPT_ASSIGN_OR_RETURN(StepExamination ex, ExamineStep(storage, step));
  const std::string dir = StepDir(step);
  if (ex.info.state == StepState::kUnreadable) {
    lost->push_back(StrCat("step ", step, " is unreadable (", ex.info.damage, "); nothing was changed"));
    return absl::OkStatus();
  }
  // A damaged or missing CLAIM of a committed step, from the manifest's
  // record of it (a CLAIM the storage could not read is left alone).
  if (ex.manifest && !ex.manifest->claim.empty()) {
    const std::string path = StrCat(dir, "/", kClaimName);
    auto text = storage.GetAll(path);
    if (!text.ok() && !absl::IsNotFound(text.status())) {
      lost->push_back(StrCat(path, " is unreadable (", text.status().message(), "); nothing was changed"));
      return absl::OkStatus();
    }
    if (!text.ok() || *text != ex.manifest->claim) {
      if (!dry_run) CKPT_RETURN_IF_ERROR(storage.PutAtomic(path, AsBytesView(ex.manifest->claim)));
      repaired->push_back(StrCat(path, ": rewritten from the manifest (",
                                 text.ok() ? "it differed" : std::string(text.status().message()), ")"));
    }
  }
  if (ex.info.state != StepState::kDamaged) return absl::OkStatus();
  if (!ex.manifest) {
    if (!ex.undecided.empty()) {
      lost->push_back(StrCat("step ", step, ": ", kManifestName, " and ", kManifestCopyName,
                             " are the commits of two saves and the evidence does not decide which is right (",
                             ex.undecided, "); nothing was changed"));
      return absl::OkStatus();
    }
    lost->push_back(StrCat("step ", step, ": neither manifest decodes (", ex.info.damage,
                           "); a copy of the step from another tier is needed (ckpt repair --from)"));
    return absl::OkStatus();
  }
  const std::string primary = StrCat(dir, "/", kManifestName);
  const std::string copy = StrCat(dir, "/", kManifestCopyName);
  // The copy first when MANIFEST is the bad one: the step stays committed
  // throughout (each write is atomic).
  if (!ex.manifest_problem.empty()) {
    if (!dry_run) CKPT_RETURN_IF_ERROR(storage.PutAtomic(primary, AsBytesView(ex.intact_bytes)));
    repaired->push_back(StrCat(primary, ": rewritten from ", kManifestCopyName, " (", ex.manifest_problem, ")"));
  }
  if (!ex.copy_problem.empty()) {
    if (!dry_run) CKPT_RETURN_IF_ERROR(storage.PutAtomic(copy, AsBytesView(ex.intact_bytes)));
    repaired->push_back(StrCat(copy, ": rewritten from ", ex.from_copy ? kManifestCopyName : kManifestName, " (",
                               ex.copy_problem, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Manifest> MergeReports(const std::vector<Manifest>& reports) {
  if (reports.empty()) return absl::InvalidArgumentError("no rank reports to merge");
  Manifest m;
  const Manifest& lead = reports.front();
  m.kind = Manifest::Kind::kManifest;
  m.step = lead.step;
  m.world_size = static_cast<int32_t>(reports.size());
  m.created_unix_ns = lead.created_unix_ns;
  m.library_version = lead.library_version;
  m.codec = lead.codec;
  m.mesh = lead.mesh;
  m.metadata = lead.metadata;
  std::map<std::string, ManifestTensor> tensors;
  std::map<std::string, int> rank_of_tensor;
  std::set<std::pair<std::string, int32_t>> blob_keys;
  for (size_t r = 0; r < reports.size(); ++r) {
    const Manifest& rep = reports[r];
    if (rep.kind != Manifest::Kind::kRankReport || rep.step != m.step || rep.files.size() != 1 ||
        rep.files[0].rank != static_cast<int32_t>(r)) {
      return absl::DataLossError(StrCat("report of rank ", r, " for step ", m.step, " is inconsistent (step ", rep.step,
                                        ", ", rep.files.size(), " files)"));
    }
    const uint32_t file_index = static_cast<uint32_t>(m.files.size());
    m.files.push_back(rep.files[0]);
    m.bytes_logical += rep.bytes_logical;
    m.bytes_stored += rep.bytes_stored;
    m.stall_s = std::max(m.stall_s, rep.stall_s);
    m.write_s = std::max(m.write_s, rep.write_s);
    for (const ManifestTensor& t : rep.tensors) {
      auto [it, inserted] = tensors.try_emplace(t.spec.fqn);
      if (inserted) {
        it->second.spec = t.spec;
        rank_of_tensor[t.spec.fqn] = static_cast<int>(r);
      } else if (!(it->second.spec == t.spec)) {
        return absl::InvalidArgumentError(
            StrCat("tensor '", t.spec.fqn, "': rank ", r, " saved ", DTypeName(t.spec.dtype), " ",
                   ShapeToString(t.spec.shape), " but rank ", rank_of_tensor[t.spec.fqn], " saved ",
                   DTypeName(it->second.spec.dtype), " ", ShapeToString(it->second.spec.shape)));
      }
      for (ManifestChunk c : t.chunks) {
        c.file = file_index;
        it->second.chunks.push_back(std::move(c));
      }
    }
    for (ManifestBlob b : rep.blobs) {
      if (!blob_keys.insert({b.name, b.rank}).second) {
        return absl::InvalidArgumentError(StrCat("blob '", b.name, "' (",
                                                 b.rank < 0 ? std::string("global") : StrCat("rank ", b.rank),
                                                 ") was saved twice; global blobs must come from one rank"));
      }
      b.file = file_index;
      m.blobs.push_back(std::move(b));
    }
  }
  for (auto& [fqn, t] : tensors) m.tensors.push_back(std::move(t));
  // A tensor whose chunks are a grid's cells covers its shape exactly (the
  // grid was checked chunk by chunk); the others are checked box by box.
  DescribeByRules(m);
  for (const ManifestTensor& t : m.tensors) {
    if (t.grid.has_value()) continue;
    std::vector<Box> boxes;
    boxes.reserve(t.chunks.size());
    for (const ManifestChunk& c : t.chunks) boxes.push_back(c.box);
    CKPT_RETURN_IF_ERROR(CheckExactCover(t.spec, boxes));
  }
  return m;
}

absl::Status PublishLatest(Storage& storage, int64_t step) {
  auto text = storage.GetAll(kLatestName);
  if (text.ok()) {
    auto current = DecodeLatest(*text);
    if (current.ok() && *current > step) {
      CKPT_ASSIGN_OR_RETURN(bool newer_committed, HasCommitMark(storage, *current));
      if (newer_committed) return absl::OkStatus();
    }
  }
  return storage.PutAtomic(kLatestName, AsBytesView(EncodeLatest(step)));
}

absl::StatusOr<StepClaim> ReadStepClaim(Storage& storage, int64_t step) {
  const std::string path = StrCat(StepDir(step), "/", kClaimName);
  CKPT_ASSIGN_OR_RETURN(std::string text, storage.GetAll(path));
  return DecodeClaim(text, path);
}

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
  if (rp.keep_last > 0 || rp.keep_every > 0) {
    keep.clear();
    for (size_t i = 0; i < intact.size(); ++i) {
      const bool recent = rp.keep_last > 0 && i + static_cast<size_t>(rp.keep_last) >= intact.size();
      const bool milestone = rp.keep_every > 0 && intact[i] % rp.keep_every == 0;
      if (recent || milestone) keep.insert(intact[i]);
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
  const char* removes = options.dry_run ? "would remove" : "removed";
  for (const StepInfo& s : *steps) {
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

absl::Status CleanRootAtJobStart(Storage& storage, const RetentionPolicy& retention) {
  if (auto healed = HealManifestCopies(storage); healed.ok()) {
    for (int64_t step : *healed) {
      std::fprintf(stderr, "ckpt: wrote the missing %s of step %lld\n", std::string(kManifestCopyName).c_str(),
                   static_cast<long long>(step));
    }
  }
  GcOptions gc;
  gc.retention = retention;
  gc.remove_newer_partial = true;
  auto report = CollectGarbageIn(storage, gc);
  if (!report.ok()) return absl::IsNotFound(report.status()) ? absl::OkStatus() : report.status();
  for (const std::string& why : report->reasons) std::fprintf(stderr, "ckpt: %s\n", why.c_str());
  return absl::OkStatus();
}

}  // namespace ckpt

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
    ex.info.manifest_from_copy = ex.from_copy;
    ex.info.created_unix_ns = ma->created_unix_ns;
    for (const ManifestBase& base : ma->bases) ex.info.delta_bases.push_back(base.step);
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
// none: NotFound when it was never committed, DataLoss when it is damaged,
// Unavailable when the storage cannot tell.
absl::StatusOr<StepExamination> ExamineCommitted(Storage& storage, int64_t step, GridChunks grids) {
  CKPT_ASSIGN_OR_RETURN(StepExamination ex, ExamineStep(storage, step, grids));
  if (ex.info.state == StepState::kPartial) {
    return absl::NotFoundError(StrCat("step ", step, " was never committed (", StepDir(step),
                                      " has no MANIFEST; a save was interrupted or aborted)"));
  }
  if (ex.info.state == StepState::kUnreadable) {
    // The storage could not say (a dead server, too few pieces in memory):
    // not damaged, and nothing to fall back from.
    return absl::UnavailableError(StrCat("step ", step, " cannot be read now: ", ex.info.damage));
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

absl::StatusOr<std::shared_ptr<const Manifest>> RootBaseManifests::Read(int64_t step) {
  CKPT_ASSIGN_OR_RETURN(Manifest m, ReadManifest(storage_, step));
  return std::make_shared<const Manifest>(std::move(m));
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
        if (c.base != 0) {
          const ManifestBase* base = rep.BaseOf(c);
          if (base == nullptr) {
            return absl::DataLossError(StrCat("report of rank ", r, " for step ", m.step, ": tensor '", t.spec.fqn,
                                              "' chunk ", c.box.ToString(), " names a delta base it does not list"));
          }
          // Two saves of one step never both commit, so a base step names
          // one save; ranks that disagree on it are refused.
          for (const ManifestBase& known : m.bases) {
            if (known.step == base->step && known.save_id != base->save_id) {
              return absl::DataLossError(StrCat("report of rank ", r, " for step ", m.step, ": delta base step ",
                                                base->step, " is save ", base->save_id, ", another rank's is save ",
                                                known.save_id));
            }
          }
          c.base = m.AddBase(*base);
        }
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

}  // namespace ckpt

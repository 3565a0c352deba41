#include "core/root.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "util/strings.h"
#include "format/layout.h"
#include "plan/cover.h"
#include "util/bytes.h"
#include "util/errors.h"

namespace ckpt {

absl::StatusOr<Manifest> ReadManifest(Storage& storage, int64_t step) {
  const std::string dir = StepDir(step);
  const std::string path = StrCat(dir, "/", kManifestName);
  auto bytes = storage.GetAll(path);
  if (!bytes.ok()) {
    if (absl::IsNotFound(bytes.status())) {
      if (storage.List(dir).ok()) {
        return absl::NotFoundError(StrCat(
            "step ", step, " was never committed (", dir,
            " has no MANIFEST; a save was interrupted or aborted)"));
      }
      return absl::NotFoundError(
          StrCat("step ", step, " not found under ", storage.uri()));
    }
    return bytes.status();
  }
  auto m = DecodeManifest(*bytes, path);
  if (!m.ok()) return m.status();
  if (m->kind != Manifest::Kind::kManifest || m->step != step) {
    return absl::DataLossError(StrCat(
        path, ": describes step ", m->step,
        m->kind != Manifest::Kind::kManifest ? " and is a rank report" : "",
        ", expected the manifest of step ", step));
  }
  return m;
}

absl::StatusOr<std::vector<StepInfo>> ListStepsIn(Storage& storage) {
  CKPT_ASSIGN_OR_RETURN(std::vector<DirEntry> entries, storage.List(""));
  std::vector<StepInfo> out;
  for (const DirEntry& e : entries) {
    if (!e.is_dir) continue;
    std::optional<int64_t> step = ParseStepDir(e.name);
    if (!step) continue;
    StepInfo info;
    info.step = *step;
    auto m = ReadManifest(storage, *step);
    if (m.ok()) {
      info.committed = true;
      info.created_unix_ns = m->created_unix_ns;
      for (const ManifestFile& f : m->files) info.bytes += static_cast<int64_t>(f.size);
    } else {
      auto files = storage.List(e.name);
      if (files.ok()) {
        for (const DirEntry& f : *files) {
          auto size = storage.FileSize(StrCat(e.name, "/", f.name));
          if (size.ok()) info.bytes += static_cast<int64_t>(*size);
        }
      }
    }
    out.push_back(info);
  }
  std::sort(out.begin(), out.end(),
            [](const StepInfo& a, const StepInfo& b) { return a.step < b.step; });
  return out;
}

absl::StatusOr<int64_t> ResolveLatest(Storage& storage, std::string* note) {
  // The commit point of a step is its manifest; LATEST is a pointer written
  // just after it, so it can lag by one step after a crash. The latest
  // committed step is the highest one whose manifest decodes.
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
  std::optional<int64_t> best;
  std::string skipped;
  absl::Status first_damage;
  for (int64_t step : steps) {
    if (!storage.FileSize(StrCat(StepDir(step), "/", kManifestName)).ok()) continue;
    auto m = ReadManifest(storage, step);
    if (m.ok()) {
      best = step;
      break;
    }
    if (first_damage.ok()) first_damage = m.status();
    if (skipped.empty()) skipped = StrCat("step ", step, " skipped: ", m.status().message());
  }
  if (note) {
    note->clear();
    auto text = storage.GetAll(kLatestName);
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
    if (!skipped.empty()) *note = note->empty() ? skipped : StrCat(*note, "; ", skipped);
  }
  if (!best) {
    if (!first_damage.ok()) return first_damage;  // committed, but damaged
    return absl::NotFoundError(StrCat("no committed checkpoint under ", storage.uri()));
  }
  return *best;
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
    if (rep.kind != Manifest::Kind::kRankReport || rep.step != m.step ||
        rep.files.size() != 1 || rep.files[0].rank != static_cast<int32_t>(r)) {
      return absl::DataLossError(StrCat(
          "report of rank ", r, " for step ", m.step, " is inconsistent (step ",
          rep.step, ", ", rep.files.size(), " files)"));
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
        return absl::InvalidArgumentError(StrCat(
            "tensor '", t.spec.fqn, "': rank ", r, " saved ",
            DTypeName(t.spec.dtype), " ", ShapeToString(t.spec.shape),
            " but rank ", rank_of_tensor[t.spec.fqn], " saved ",
            DTypeName(it->second.spec.dtype), " ",
            ShapeToString(it->second.spec.shape)));
      }
      for (ManifestChunk c : t.chunks) {
        c.file = file_index;
        it->second.chunks.push_back(std::move(c));
      }
    }
    for (ManifestBlob b : rep.blobs) {
      if (!blob_keys.insert({b.name, b.rank}).second) {
        return absl::InvalidArgumentError(StrCat(
            "blob '", b.name, "' (",
            b.rank < 0 ? std::string("global") : StrCat("rank ", b.rank),
            ") was saved twice; global blobs must come from one rank"));
      }
      b.file = file_index;
      m.blobs.push_back(std::move(b));
    }
  }
  for (auto& [fqn, t] : tensors) {
    std::vector<Box> boxes;
    boxes.reserve(t.chunks.size());
    for (const ManifestChunk& c : t.chunks) boxes.push_back(c.box);
    CKPT_RETURN_IF_ERROR(CheckExactCover(t.spec, boxes));
    m.tensors.push_back(std::move(t));
  }
  return m;
}

absl::Status PublishLatest(Storage& storage, int64_t step) {
  auto text = storage.GetAll(kLatestName);
  if (text.ok()) {
    auto current = DecodeLatest(*text);
    if (current.ok() && *current > step &&
        storage.FileSize(StrCat(StepDir(*current), "/", kManifestName)).ok()) {
      return absl::OkStatus();
    }
  }
  return storage.PutAtomic(kLatestName, AsBytesView(EncodeLatest(step)));
}

absl::StatusOr<GcReport> CollectGarbageIn(Storage& storage,
                                          const GcOptions& options) {
  GcReport report;
  auto steps = ListStepsIn(storage);
  if (!steps.ok()) {
    if (absl::IsNotFound(steps.status())) return report;
    return steps.status();
  }
  std::vector<int64_t> committed;
  for (const StepInfo& s : *steps) {
    if (s.committed) committed.push_back(s.step);
  }
  std::set<int64_t> keep(committed.begin(), committed.end());
  const RetentionPolicy& rp = options.retention;
  if (rp.keep_last > 0 || rp.keep_every > 0) {
    keep.clear();
    for (size_t i = 0; i < committed.size(); ++i) {
      const bool recent = rp.keep_last > 0 &&
                          i + static_cast<size_t>(rp.keep_last) >= committed.size();
      const bool milestone = rp.keep_every > 0 && committed[i] % rp.keep_every == 0;
      if (recent || milestone) keep.insert(committed[i]);
    }
  }
  std::string note;
  auto latest = ResolveLatest(storage, &note);
  if (latest.ok()) keep.insert(*latest);
  const int64_t newest = committed.empty() ? -1 : committed.back();
  for (const StepInfo& s : *steps) {
    const std::string dir = StepDir(s.step);
    if (s.committed) {
      if (keep.count(s.step)) continue;
      report.removed_steps.push_back(s.step);
    } else {
      if (s.step > newest && !options.remove_newer_partial) continue;
      report.removed_partial.push_back(s.step);
    }
    report.bytes_freed += s.bytes;
    if (options.dry_run) continue;
    // Un-commit first so a crash mid-removal leaves an uncommitted step.
    if (s.committed) {
      CKPT_RETURN_IF_ERROR(storage.Remove(StrCat(dir, "/", kManifestName)));
      CKPT_RETURN_IF_ERROR(storage.SyncDir(dir));
    }
    CKPT_RETURN_IF_ERROR(storage.RemoveAll(dir));
  }
  // Temporary files of interrupted atomic writes at the root.
  auto entries = storage.List("");
  if (entries.ok() && !options.dry_run) {
    for (const DirEntry& e : *entries) {
      if (!e.is_dir && absl::StartsWith(e.name, StrCat(kLatestName, ".tmp."))) {
        (void)storage.Remove(e.name);
      }
    }
  }
  if (!options.dry_run && (!report.removed_steps.empty() || !report.removed_partial.empty())) {
    CKPT_RETURN_IF_ERROR(storage.SyncDir(""));
  }
  return report;
}

}  // namespace ckpt

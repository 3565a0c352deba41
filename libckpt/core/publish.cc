// The leader's half of a commit on the storage.
#include "core/publish.h"

#include <cstdio>
#include <string>
#include <vector>

#include "core/claim.h"
#include "core/root.h"
#include "format/manifest.h"
#include "format/root_files.h"
#include "util/bytes.h"
#include "util/strings.h"

namespace ckpt {

absl::Status PublishStep(Storage& storage, int64_t step, uint64_t id, int world) {
  const std::string dir = StepDir(step);
  std::vector<Manifest> reports;
  reports.reserve(world);
  for (int r = 0; r < world; ++r) {
    const std::string path = StrCat(dir, "/", ReportName(r));
    auto bytes = storage.GetAll(path);
    if (!bytes.ok()) return AbortStep(storage, step, id, bytes.status());
    auto rep = DecodeManifest(*bytes, path);
    if (!rep.ok()) return AbortStep(storage, step, id, rep.status());
    // Only this save's files are committed.
    for (const ManifestFile& f : rep->files) {
      if (f.save_id != id) {
        return AbortStep(
            storage, step, id,
            absl::AbortedError(StrCat(path, " describes ", f.name, " of save ", SaveIdText(f.save_id),
                                      ", not of this save (save ", SaveIdText(id), "); the step is not committed")));
      }
    }
    reports.push_back(std::move(rep).value());
  }
  auto merged = MergeReports(reports);
  if (!merged.ok()) return AbortStep(storage, step, id, merged.status());
  // The last look at the claim before the commit; the manifest keeps its
  // bytes, so the claim is bound to (and rebuilt from) the commit.
  if (absl::Status own = CheckOwnClaim(storage, step, id, &merged->claim); !own.ok()) {
    return LostClaim(own) ? own : AbortStep(storage, step, id, own);
  }
  const std::string bytes = EncodeManifest(*merged);
  absl::Status s = storage.PutAtomic(StrCat(dir, "/", kManifestName), AsBytesView(bytes));
  if (!s.ok()) return AbortStep(storage, step, id, s);
  // Committed. The copy makes the step's metadata survive damage to either
  // file; if writing it fails, the next Open writes it.
  if (absl::Status c = storage.PutAtomic(StrCat(dir, "/", kManifestCopyName), AsBytesView(bytes)); !c.ok()) {
    std::fprintf(stderr, "ckpt: step %lld is committed, but writing %s/%s failed: %s\n", static_cast<long long>(step),
                 dir.c_str(), std::string(kManifestCopyName).c_str(), std::string(c.message()).c_str());
  }
  // The step is committed whatever happens to LATEST, which only speeds
  // up finding it (loads, `ckpt repair` and the next commit mend it).
  s = PublishLatest(storage, step);
  if (!s.ok()) s = PublishLatest(storage, step);
  if (!s.ok()) {
    std::fprintf(stderr, "ckpt: step %lld is committed, but moving %s to it failed: %s\n", static_cast<long long>(step),
                 std::string(kLatestName).c_str(), std::string(s.message()).c_str());
  }
  for (int r = 0; r < world; ++r) {
    (void)storage.Remove(StrCat(dir, "/", ReportName(r)));
  }
  return absl::OkStatus();
}

absl::Status AbortStep(Storage& storage, int64_t step, uint64_t id, absl::Status why) {
  if (absl::Status own = CheckOwnClaim(storage, step, id); LostClaim(own)) return why;
  const std::string dir = StepDir(step);
  (void)storage.PutAtomic(StrCat(dir, "/", kAbortedName),
                          AsBytesView(TagMarker(id, std::string_view(why.message().data(), why.message().size()))));
  (void)storage.Remove(StrCat(dir, "/", kClaimName));
  return why;
}

}  // namespace ckpt

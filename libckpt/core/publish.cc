// The leader's half of a commit on the storage.
#include "core/publish.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/claim.h"
#include "core/root.h"
#include "format/manifest.h"
#include "format/rank_summary.h"
#include "format/root_files.h"
#include "util/bytes.h"
#include "util/errors.h"
#include "util/log.h"
#include "util/strings.h"

namespace ckpt {

namespace {

// Every rank's report, read with several requests in flight: an object
// store answers each GET in milliseconds, and a large job has a report per
// rank.
absl::StatusOr<std::vector<std::string>> FetchReports(Storage& storage, const std::string& dir, int world) {
  std::vector<std::string> out(static_cast<size_t>(world));
  const int threads = std::clamp(world / 64, 1, 16);
  std::atomic<int> next{0};
  std::mutex mu;
  absl::Status failure;
  auto work = [&] {
    for (int r; (r = next.fetch_add(1)) < world;) {
      auto bytes = storage.GetAll(StrCat(dir, "/", ReportName(r)));
      if (!bytes.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (failure.ok()) failure = bytes.status();
        next = world;  // the others stop
        return;
      }
      out[static_cast<size_t>(r)] = std::move(bytes).value();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (!failure.ok()) return failure;
  return out;
}

// Every rank's report: full reports merged chunk by chunk, or summaries of
// a save of layouts filled into the rules' manifest.
absl::StatusOr<Manifest*> CollectReports(Storage& storage, int64_t step, uint64_t id, int world,
                                         const RuleCommit* rules, Manifest* merged) {
  const std::string dir = StepDir(step);
  CKPT_ASSIGN_OR_RETURN(std::vector<std::string> all, FetchReports(storage, dir, world));
  std::vector<Manifest> reports;
  std::vector<RankSummary> summaries;
  for (int r = 0; r < world; ++r) {
    const std::string path = StrCat(dir, "/", ReportName(r));
    const std::string bytes = std::move(all[r]);
    if (LooksLikeRankSummary(bytes)) {
      if (!reports.empty() || rules == nullptr) {
        return absl::InvalidArgumentError(StrCat(path, " summarizes a save of layouts, but ",
                                                 rules == nullptr ? std::string("the leader's state has none")
                                                                  : StrCat("rank ", r - 1, " sent its chunk list"),
                                                 "; every rank's state must be laid out (State::AddLayout) or none"));
      }
      CKPT_ASSIGN_OR_RETURN(RankSummary s, DecodeRankSummary(bytes, path));
      summaries.push_back(std::move(s));
      continue;
    }
    if (!summaries.empty()) {
      return absl::InvalidArgumentError(StrCat(path, " lists chunks, but rank ", r - 1,
                                               " summarized a save of layouts; every rank's state must be laid out "
                                               "(State::AddLayout) or none"));
    }
    CKPT_ASSIGN_OR_RETURN(Manifest rep, DecodeManifest(bytes, path));
    // Only this save's files are committed.
    for (const ManifestFile& f : rep.files) {
      if (f.save_id != id) {
        return absl::AbortedError(StrCat(path, " describes ", f.name, " of save ", SaveIdText(f.save_id),
                                         ", not of this save (save ", SaveIdText(id), "); the step is not committed"));
      }
    }
    reports.push_back(std::move(rep));
  }
  if (!summaries.empty()) {
    CKPT_RETURN_IF_ERROR(rules->manifest->Prepare(*rules->rules));
    return rules->manifest->Fill(*rules->head, id, summaries);
  }
  CKPT_ASSIGN_OR_RETURN(*merged, MergeReports(reports));
  return merged;
}

}  // namespace

absl::Status PublishStep(Storage& storage, int64_t step, uint64_t id, int world, const RuleCommit* rules) {
  const std::string dir = StepDir(step);
  Manifest merged_reports;
  auto collected = CollectReports(storage, step, id, world, rules, &merged_reports);
  if (!collected.ok()) return AbortStep(storage, step, id, collected.status());
  // The rules' manifest is filled in place: the leader's to reuse.
  Manifest* merged = *collected;
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
    LogWarning(StrCat("step ", step, " is committed, but writing ", dir, "/", kManifestCopyName,
                      " failed: ", c.message(), " (the next Open writes it)"));
  }
  // The step is committed whatever happens to LATEST, which only speeds
  // up finding it (loads, `ckpt repair` and the next commit mend it).
  s = PublishLatest(storage, step);
  if (!s.ok()) s = PublishLatest(storage, step);
  if (!s.ok()) {
    LogWarning(StrCat("step ", step, " is committed, but moving ", kLatestName, " to it failed: ", s.message()));
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

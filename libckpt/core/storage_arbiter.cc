#include "core/storage_arbiter.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_join.h"
#include "core/claim.h"
#include "format/root_files.h"
#include "util/clock.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt {

StorageArbiter::StorageArbiter(std::shared_ptr<Storage> storage, int world_size)
    : storage_(std::move(storage)), world_size_(world_size) {}

absl::Status StorageArbiter::Vote(int rank, int64_t step, const SaveVote& vote) {
  (void)rank;
  if (!vote.ok) return absl::OkStatus();  // the rank's FAILED marker says it; nothing awaits
  std::lock_guard<std::mutex> lock(mu_);
  ids_[step] = vote.save_id;
  return absl::OkStatus();
}

uint64_t StorageArbiter::TakeId(int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ids_.find(step);
  if (it == ids_.end()) return 0;
  const uint64_t id = it->second;
  ids_.erase(it);
  return id;
}

absl::Status StorageArbiter::Published(int64_t step, const absl::Status& outcome) {
  (void)step;
  (void)outcome;
  return absl::OkStatus();
}

absl::Status StorageArbiter::AwaitDecision(int64_t step, double timeout_s) {
  const uint64_t id = TakeId(step);
  const std::string dir = StepDir(step);
  const double deadline = NowSeconds() + timeout_s;
  double delay = 0.001;
  std::vector<int> missing;
  while (true) {
    // A save that lost its step stops at once instead of waiting for ranks
    // that will never report.
    if (absl::Status own = CheckOwnClaim(*storage_, step, id); LostClaim(own)) return own;
    auto entries = storage_->List(dir);
    if (!entries.ok()) return Annotate(entries.status(), "listing reports");
    std::vector<bool> have(world_size_, false);
    for (const DirEntry& e : *entries) {
      if (auto r = ParseRankFile(e.name, "failed"); r && *r < world_size_) {
        auto text = storage_->GetAll(StrCat(dir, "/", e.name));
        std::string why = "(reason unreadable)";
        if (text.ok()) {
          const uint64_t tag = UntagMarker(*text, &why);
          if (tag != 0 && tag != id) continue;  // another save's
        }
        return absl::AbortedError(StrCat("rank ", *r, " failed to save step ", step, ": ", why));
      }
      if (auto r = ParseRankFile(e.name, "report"); r && *r < world_size_) have[*r] = true;
    }
    missing.clear();
    for (int r = 0; r < world_size_; ++r) {
      if (!have[r]) missing.push_back(r);
    }
    if (missing.empty()) return absl::OkStatus();
    if (NowSeconds() > deadline) {
      if (missing.size() > 16) missing.resize(16);
      return absl::DeadlineExceededError(StrCat("step ", step, ": rank(s) ", absl::StrJoin(missing, ", "),
                                                " did not report within ", timeout_s, " s; the step is not committed"));
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(delay));
    delay = std::min(delay * 2, 0.05);
  }
}

absl::Status StorageArbiter::AwaitOutcome(int64_t step, double timeout_s) {
  const uint64_t id = TakeId(step);
  const std::string dir = StepDir(step);
  const double deadline = NowSeconds() + timeout_s;
  const double max_delay = PollCeiling(world_size_);
  double delay = 0.001;
  // This save's ABORTED, if there is one.
  auto aborted = [&]() -> std::optional<std::string> {
    auto text = storage_->GetAll(StrCat(dir, "/", kAbortedName));
    if (!text.ok()) return std::nullopt;
    std::string why;
    const uint64_t tag = UntagMarker(*text, &why);
    if (tag != 0 && tag != id) return std::nullopt;
    return why;
  };
  while (true) {
    if (storage_->FileSize(StrCat(dir, "/", kManifestName)).ok()) {
      absl::Status own = CheckOwnClaim(*storage_, step, id);
      if (own.ok()) return own;
      return absl::AbortedError(StrCat("step ", step, " was committed, but not by this save: ", own.message()));
    }
    if (auto why = aborted()) return absl::AbortedError(StrCat("step ", step, " was aborted by the leader: ", *why));
    if (absl::Status own = CheckOwnClaim(*storage_, step, id); LostClaim(own)) {
      // The leader releases the claim right after writing ABORTED.
      if (auto why = aborted()) {
        return absl::AbortedError(StrCat("step ", step, " was aborted by the leader: ", *why));
      }
      return own;
    }
    if (NowSeconds() > deadline) {
      return absl::DeadlineExceededError(
          StrCat("step ", step, ": the leader neither committed nor aborted within ", timeout_s, " s"));
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(delay));
    delay = std::min(delay * 2, max_delay);
  }
}

}  // namespace ckpt

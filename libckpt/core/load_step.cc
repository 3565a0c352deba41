#include "core/load_step.h"

#include <cstdio>
#include <utility>
#include <vector>

#include "absl/strings/str_split.h"
#include "core/collective_plan.h"
#include "format/manifest.h"
#include "pipeline/loader.h"
#include "util/errors.h"
#include "util/status_wire.h"
#include "util/strings.h"

namespace ckpt {

void ReportDamage(const LoadableStep& found, const std::string& uri) {
  if (found.note.empty()) return;
  std::fprintf(stderr, "ckpt: loading step %lld%s%s: %s\n", static_cast<long long>(found.step),
               uri.empty() ? "" : " of ", uri.c_str(), found.note.c_str());
}

absl::StatusOr<LoadStats> LoadStepAlone(Storage& storage, const State& target, int64_t step, int rank,
                                        const LoadOptions& options) {
  CKPT_ASSIGN_OR_RETURN(LoadableStep found, ResolveLoadable(storage, step, options.allow_fallback));
  ReportDamage(found, storage.uri());
  CKPT_ASSIGN_OR_RETURN(LoadStats stats, LoadFromManifest(storage, found.manifest, target, rank, options));
  stats.damage_note = found.note;
  stats.fell_back_from = found.fell_back_from;
  return stats;
}

absl::StatusOr<LoadStats> LoadStepTogether(Storage& storage, Communicator& comm, const State& target, int64_t step,
                                           int rank, const LoadOptions& options, double timeout_s) {
  Manifest manifest;
  std::string verdict;
  if (comm.rank() == 0) {
    auto found = ResolveLoadable(storage, step, options.allow_fallback);
    if (found.ok()) {
      manifest = std::move(found->manifest);
      ReportDamage(*found);
      verdict = EncodeOutcome(StrCat(found->step, " ", found->fell_back_from, " ", found->note));
    } else {
      verdict = EncodeOutcome(found.status());
    }
  }
  CKPT_ASSIGN_OR_RETURN(verdict, comm.Broadcast(verdict, timeout_s));
  CKPT_ASSIGN_OR_RETURN(verdict, DecodeOutcome(verdict, "the leader's choice of the step to load"));
  // "STEP FELL_BACK_FROM NOTE"
  std::vector<std::string> parts = absl::StrSplit(verdict, absl::MaxSplits(' ', 2));
  int64_t fell_back_from = -1;
  if (parts.size() >= 2) ParseInt64(parts[1], &fell_back_from);
  const std::string note = parts.size() >= 3 ? parts[2] : "";
  CKPT_ASSIGN_OR_RETURN(std::string plan,
                        DistributeLoadPlan(comm, target, comm.rank() == 0 ? &manifest : nullptr, timeout_s));
  CKPT_ASSIGN_OR_RETURN(Manifest mine, DecodeManifest(plan, "load plan from the leader"));
  CKPT_ASSIGN_OR_RETURN(LoadStats stats, LoadFromManifest(storage, mine, target, rank, options));
  stats.damage_note = note;
  stats.fell_back_from = fell_back_from;
  return stats;
}

}  // namespace ckpt

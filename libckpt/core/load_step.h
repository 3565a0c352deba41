// Loading a committed step into a target state: by one rank alone, or by
// every rank of a communicator, where the leader resolves the step and reads
// its manifest once and each rank receives only the part its target needs.
#ifndef CKPT_CORE_LOAD_STEP_H_
#define CKPT_CORE_LOAD_STEP_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "ckpt/communicator.h"
#include "ckpt/load_exchange.h"
#include "ckpt/options.h"
#include "ckpt/state.h"
#include "ckpt/storage.h"
#include "core/root.h"

namespace ckpt {

/// `step` (or the latest, kLatestStep) into `target`; `rank` selects
/// per-rank blobs. Damage met on the way is said on stderr and in the
/// statistics.
absl::StatusOr<LoadStats> LoadStepAlone(Storage& storage, const State& target, int64_t step, int rank,
                                        const LoadOptions& options);

/// The same, by every rank of `comm` at once (a collective: every rank
/// calls it). The leader's choice of step, or its error, reaches every rank.
/// With an `exchange` the ranks load cooperatively where they can
/// (core/coop_load.h).
absl::StatusOr<LoadStats> LoadStepTogether(Storage& storage, Communicator& comm, const State& target, int64_t step,
                                           int rank, const LoadOptions& options, double timeout_s,
                                           LoadExchange* exchange = nullptr);

/// A rank's part of a version-4 manifest at `path`, read by ranged reads:
/// what LoadStepTogether's ranks other than the leader plan their loads
/// from. `bytes` receives the bytes read.
absl::StatusOr<Manifest> ReadOwnPart(Storage& storage, const std::string& path, const State& target, int rank,
                                     int64_t* bytes);

/// What a load met on its way to the step it read, on stderr: the trainer's
/// log is where an operator looks at 3 a.m.
void ReportDamage(const LoadableStep& found, const std::string& uri = "");

}  // namespace ckpt

#endif  // CKPT_CORE_LOAD_STEP_H_

// Cooperative collective loads (docs/resharding.md, "Cooperative loads"):
// the ranks that need the same stored bytes read each piece once. Each rank
// plans from its own part of the manifest and the layouts every rank shares
// (plan/coop_reads.h), so all give a piece the same reader without sending
// their targets anywhere. A reader reads its pieces from storage ahead of
// its own load and offers them through the LoadExchange; the other needers
// fetch them as their loads reach them, check every frame against the
// index, and read a piece from storage themselves when its reader died,
// forwent it or is late.
#ifndef CKPT_CORE_COOP_LOAD_H_
#define CKPT_CORE_COOP_LOAD_H_

#include <string>

#include "absl/status/statusor.h"
#include "ckpt/communicator.h"
#include "ckpt/load_exchange.h"
#include "ckpt/options.h"
#include "ckpt/state.h"
#include "ckpt/storage.h"
#include "format/manifest.h"

namespace ckpt {

/// Whether the ranks of `comm` load `target` cooperatively: every rank
/// asks for it, has an exchange over this communicator, and declares the
/// same layouts over the same mesh, some of which replicate data. A
/// collective (a gather of one hash and a broadcast). Returns the load's
/// name, new for every load, or "" when they do not.
absl::StatusOr<std::string> AgreeOnCooperation(Communicator& comm, const State& target, const LoadOptions& options,
                                               LoadExchange* exchange, double timeout_s);

/// Fills `target` from `mine` (this rank's part of the step's manifest) as
/// load `load` of AgreeOnCooperation. The statistics say where the bytes
/// came from.
absl::StatusOr<LoadStats> LoadCooperatively(Storage& storage, const Manifest& mine, const State& target, int rank,
                                            const LoadOptions& options, LoadExchange& exchange,
                                            const std::string& load);

/// After load `load`, whatever its outcome, on every rank: waits for every
/// rank to finish (a barrier; one that fails is said on stderr), then
/// withdraws the pieces this rank offered.
void FinishCooperation(Communicator& comm, LoadExchange& exchange, const std::string& load, double timeout_s);

}  // namespace ckpt

#endif  // CKPT_CORE_COOP_LOAD_H_

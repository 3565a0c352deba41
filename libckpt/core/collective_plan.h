// Planning that needs every rank's view: which replica writes a chunk held
// by several ranks, and which part of the manifest each rank needs to load.
#ifndef CKPT_CORE_COLLECTIVE_PLAN_H_
#define CKPT_CORE_COLLECTIVE_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/communicator.h"
#include "ckpt/state.h"
#include "format/manifest.h"

namespace ckpt {

/// What a rank agreed to write last time, so an unchanged layout costs one
/// 8-byte gather and a broadcast instead of exchanging every shard list.
struct WriterCache {
  uint64_t layout_hash = 0;
  std::vector<bool> mask;
  bool valid = false;
  // Leader only: every rank's hash last time.
  std::vector<uint64_t> all_hashes;
};

/// Collective: every rank passes its State; each learns which of its shards
/// it writes (mask over state.shards()). A box held identically by several
/// ranks is written by the one plan/'s replica rule (ChooseReplicaWriters)
/// names, its holders taken as its replica group: the writers a save of the
/// same state by its layouts chooses. Errors when ranks disagree on a
/// tensor's dtype or shape.
absl::StatusOr<std::vector<bool>> AgreeOnWriters(Communicator& comm, const State& state, double timeout_s,
                                                 WriterCache* cache);

/// Collective: the leader reads nothing itself; it receives every rank's
/// requested boxes and blobs and returns, per rank, the encoded manifest
/// restricted to the chunks, files and blobs that rank needs. `manifest` is
/// only read on the leader.
absl::StatusOr<std::string> DistributeLoadPlan(Communicator& comm, const State& target, const Manifest* manifest,
                                               double timeout_s);

/// The part of `m` that overlaps the given boxes and blobs (per-rank blobs
/// of `rank` or of their source rank): a manifest LoadFromManifest accepts.
/// Grid-only tensors of `m` are cut on their grid; the part lists chunks.
Manifest RestrictManifest(const Manifest& m, const State& wants, int rank);

}  // namespace ckpt

#endif  // CKPT_CORE_COLLECTIVE_PLAN_H_

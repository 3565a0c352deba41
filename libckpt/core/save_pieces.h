// What one rank's save hands the save engine, and the report it files
// afterwards: the state's shards cut into pieces (large shards into column
// tiles), its blobs, and — once the engine has numbered the blocks — the
// chunks and blobs of the rank's report. No I/O, no threads: the
// Checkpointer orchestrates, this says what is written where.
#ifndef CKPT_CORE_SAVE_PIECES_H_
#define CKPT_CORE_SAVE_PIECES_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "ckpt/experimental/commit_arbiter.h"
#include "ckpt/mesh.h"
#include "ckpt/options.h"
#include "ckpt/state.h"
#include "format/manifest.h"
#include "pipeline/save_engine.h"

namespace ckpt {

struct SavePieces {
  std::deque<Shard> tiles;            ///< stable addresses: the engine points into them
  std::vector<const Shard*> parents;  ///< per tile, its shard when the shard was cut into column tiles
  std::vector<const Blob*> blobs;     ///< per blob piece, its blob
  /// Tiles first (in order), then blobs.
  std::vector<SavePiece> pieces;
};

/// The pieces of `state` this rank writes: non-empty shards whose `writes`
/// entry is true (the replicas' agreement), each cut into at most
/// `max_column_tiles` column tiles or row slabs (SaveTiles), then every
/// blob that has data (load targets are skipped). Rank-scoped blobs carry
/// `rank`.
SavePieces BuildSavePieces(const State& state, const std::vector<bool>& writes, int max_column_tiles, int rank);

/// Refuses a save request before anything is claimed or written: a negative
/// step, or a metadata key or value over kMaxMetadataBytes.
absl::Status CheckSaveRequest(int64_t step, const SaveOptions& options);

/// A rank's report before its chunks (FillReport) and file are known.
Manifest NewRankReport(int64_t step, int world_size, Codec codec, const std::optional<Mesh>& mesh,
                       const SaveOptions& options);

/// Fills the tensors and blobs of a rank's report from pieces the engine has
/// numbered (first_block, block_count). Every tensor of the state appears,
/// those whose shards here are all empty too when they have no elements, so
/// zero-size tensors are recorded. `bases` (per tile, when given) names
/// the base of each tile saved as a delta.
void FillReport(const SavePieces& pieces, const State& state, int rank, Manifest* report,
                const std::vector<std::optional<ManifestBase>>* bases = nullptr);

/// The report's entry for the data file a finished job wrote.
ManifestFile DataFileEntry(const SaveJob& job);
/// Adds what a finished job measured and wrote to its rank's report.
void CompleteReport(const SaveJob& job, double write_s, Manifest* report);

/// One hash per non-empty shard, keyed by tensor and box, for the arbiter's
/// check that replicas agree (silent data corruption); `writes` says which
/// replica wrote it.
std::vector<ReplicaHash> HashReplicas(const State& state, const std::vector<bool>& writes);

}  // namespace ckpt

#endif  // CKPT_CORE_SAVE_PIECES_H_

// Auditing a checkpoint: verification of every byte, and a summary for
// inspection.
#ifndef CKPT_VERIFY_H_
#define CKPT_VERIFY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/checkpointer.h"
#include "ckpt/export.h"
#include "ckpt/mesh.h"
#include "ckpt/storage.h"

namespace ckpt {

struct CKPT_EXPORT VerifyOptions {
  /// Read and check every block (both checksums, decode). False: metadata,
  /// sizes, indexes and exact cover only.
  bool deep = true;
  int worker_threads = 0;
  size_t read_buffer_bytes = size_t{128} << 20;
  /// Called from worker threads with bytes checked so far and the total.
  std::function<void(int64_t done, int64_t total)> progress;
};

/// One thing found wrong, located as precisely as possible.
struct CKPT_EXPORT VerifyProblem {
  std::string message;  ///< full sentence, names everything known
  std::string tensor;   ///< fqn, or blob name, when known
  std::string chunk;    ///< chunk box, when known
  std::string file;     ///< path relative to the root, when known
  int64_t offset = -1;  ///< byte offset in `file`, when known
};

struct CKPT_EXPORT VerifyReport {
  int64_t step = 0;
  bool deep = true;
  int64_t files = 0;
  int64_t tensors = 0;
  int64_t chunks = 0;
  int64_t blocks = 0;
  int64_t bytes_read = 0;
  double seconds = 0;
  std::vector<VerifyProblem> problems;
  /// What the check could not cover, or covered another way (safetensors
  /// files carry no checksums; a SHA256SUMS beside them was checked).
  std::vector<std::string> notes;
  bool ok() const { return problems.empty(); }
};

/// Verifies one committed step. Problems found (corruption, truncation,
/// missing files, gaps) are listed in the report; an error status means the
/// step could not be examined at all (no such root or step).
CKPT_EXPORT absl::StatusOr<VerifyReport> VerifyStep(Storage& storage, int64_t step, const VerifyOptions& options = {});

/// The newest committed step at or below `at_most` (any step when negative)
/// that passes a fast verification, for restarts: damage to one of its two
/// manifest files alone does not disqualify it (the other describes it). -1
/// when none. `log` gets a line for each step passed over, and for one
/// restored from its intact manifest.
CKPT_EXPORT int64_t NewestRestorableStep(Storage& storage, int64_t at_most,
                                         const std::function<void(const std::string&)>& log);

/// Checks the root's LATEST pointer: nullopt when fine or absent, else what
/// is wrong with it.
CKPT_EXPORT std::optional<VerifyProblem> CheckLatestPointer(Storage& storage);

struct CKPT_EXPORT TensorSummary {
  std::string fqn;
  DType dtype = DType::kF32;
  Shape shape;
  int64_t chunks = 0;
  int64_t bytes_logical = 0;
  int64_t bytes_stored = 0;
};

struct CKPT_EXPORT BlobSummary {
  std::string name;
  int rank = -1;  ///< -1: global
  int64_t size = 0;
};

struct CKPT_EXPORT CheckpointSummary {
  int64_t step = 0;
  int world_size = 0;
  int64_t created_unix_ns = 0;
  std::string library_version;
  std::string codec;  ///< what the save asked for ("auto": chosen per block)
  /// What the blocks got, from the data files' indexes: codec name -> blocks.
  std::map<std::string, int64_t> blocks_by_codec;
  std::optional<Mesh> mesh;
  std::map<std::string, std::string> metadata;
  int64_t files = 0;
  int64_t bytes_logical = 0;
  int64_t bytes_stored = 0;
  int64_t bytes_on_disk = 0;
  std::vector<TensorSummary> tensors;
  std::vector<BlobSummary> blobs;
};

struct CKPT_EXPORT RepairReport {
  int64_t step = 0;
  std::vector<std::string> repaired;  ///< what was rewritten, from where
  std::vector<std::string> lost;      ///< problems no intact copy could fix
  int64_t bytes_rewritten = 0;
  bool ok() const { return lost.empty(); }
};

/// Repairs `step` in `damaged` from `source`, another copy of the same save
/// (the other tier of a tiered root, or a replicated root): each damaged or
/// missing file whose copy in `source` verifies is made byte-identical to
/// it (only the differing ranges are rewritten; a damaged MANIFEST is
/// replaced), then `damaged` is verified again. Problems that remain, or
/// whose source copy is damaged too, are listed in `lost`. With `dry_run`
/// nothing is written and `repaired` says what would be. A step saved as
/// deltas has the bases of its chains repaired first, the same way (their
/// lines say which base).
CKPT_EXPORT absl::StatusOr<RepairReport> RepairStep(Storage& damaged, Storage& source, int64_t step,
                                                    bool dry_run = false);

/// Rewrites a LATEST that CheckLatestPointer finds wrong to name the newest
/// committed step. Returns what it rewrote (empty when LATEST was right,
/// or when no step is committed); with `dry_run`, what it would.
CKPT_EXPORT absl::StatusOr<std::vector<std::string>> RepairLatestPointer(Storage& storage, bool dry_run = false);

/// Repairs what a root can rebuild from itself, with no other copy: the
/// metadata of each committed step (or only `step`), a damaged or missing
/// MANIFEST from its copy or the copy from MANIFEST, byte-identically; then
/// LATEST from the steps. Each step it rewrote is verified again (fast), and
/// one that still fails is listed in `lost`, as is what no copy covers.
/// `report.step` is `step` as given.
CKPT_EXPORT absl::StatusOr<RepairReport> RepairMetadata(Storage& storage, int64_t step = kLatestStep,
                                                        bool dry_run = false);

/// Summarizes a committed step from its manifest and file indexes.
CKPT_EXPORT absl::StatusOr<CheckpointSummary> SummarizeStep(Storage& storage, int64_t step);

}  // namespace ckpt

#endif  // CKPT_VERIFY_H_

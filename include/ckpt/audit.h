// Numerical audits of committed checkpoints: per-tensor statistics with a
// health gate, and differences between two steps (also across meshes).
// Both stream blocks in file order (diff of tensors cut differently in the
// two steps: slabs of rows), so memory does not grow with the checkpoint;
// every byte read is checksum-verified as in any load.
#ifndef CKPT_AUDIT_H_
#define CKPT_AUDIT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/export.h"
#include "ckpt/storage.h"
#include "ckpt/tensor.h"

namespace ckpt {

struct CKPT_EXPORT TensorStats {
  std::string fqn;
  DType dtype = DType::kF32;
  Shape shape;
  int64_t elements = 0;
  int64_t nan = 0;
  int64_t inf = 0;
  int64_t zeros = 0;
  double min = 0;  ///< over finite values (0 when none)
  double max = 0;
  double mean = 0;  ///< over finite values
  double l2 = 0;    ///< sqrt of the sum of squares of finite values
  /// What the step stores for it: raw bytes, stored bytes of its blocks
  /// (compressed; a delta's own bytes only), how many of its chunks are
  /// deltas, and the steps those are deltas against.
  int64_t bytes_logical = 0;
  int64_t bytes_stored = 0;
  int64_t delta_chunks = 0;
  std::vector<int64_t> delta_bases;
  double ZeroFraction() const { return elements > 0 ? static_cast<double>(zeros) / elements : 0; }
};

struct CKPT_EXPORT AuditOptions {
  /// Only tensors whose name matches this glob ('*', '?'); empty: all.
  std::string tensor_glob;
  /// Read memory per checkpoint: blocks in flight while streaming, or the
  /// slabs of rows loaded when two steps cut a tensor differently (diff).
  int64_t slab_bytes = 128 << 20;
  /// Called after each tensor with (done, total) bytes, for progress bars.
  std::function<void(int64_t, int64_t)> progress;
};

/// Statistics of every tensor of `step` (kLatestStep: the latest).
CKPT_EXPORT absl::StatusOr<std::vector<TensorStats>> ComputeStats(Storage& storage, int64_t step,
                                                                  const AuditOptions& options = {});

/// Health gate over the statistics of a step and, optionally, of the step
/// before it. Returns one line per problem: NaN or Inf present, a tensor
/// that is all zeros, an L2 norm that moved by more than
/// `max_norm_change` (relative) since `previous`.
struct CKPT_EXPORT GateOptions {
  double max_norm_change = 0.5;
  bool allow_all_zero = false;
};
CKPT_EXPORT std::vector<std::string> GateProblems(const std::vector<TensorStats>& current,
                                                  const std::vector<TensorStats>* previous,
                                                  const GateOptions& options = {});

struct CKPT_EXPORT TensorDiff {
  enum class Kind { kIdentical, kChanged, kOnlyInA, kOnlyInB, kMismatch };
  std::string fqn;
  Kind kind = Kind::kIdentical;
  /// kIdentical: decided from the stored block checksums, no data read.
  bool by_checksum = false;
  int64_t elements = 0;
  int64_t differing = 0;
  int64_t first_index = -1;  ///< row-major index of the first difference
  double max_abs = 0;        ///< over elements finite in both
  double rel_l2 = 0;         ///< ||a - b|| / ||a|| (||a - b|| when ||a|| = 0)
  std::string note;          ///< kMismatch: what differs (shape, dtype)
};

CKPT_EXPORT const char* DiffKindName(TensorDiff::Kind kind);

/// Compares every tensor of two steps (possibly of different roots and
/// meshes) as global tensors. NaNs at the same place count as equal.
CKPT_EXPORT absl::StatusOr<std::vector<TensorDiff>> DiffSteps(Storage& a, int64_t step_a, Storage& b, int64_t step_b,
                                                              const AuditOptions& options = {});

/// A blob (by name and owning rank) or a metadata entry of two steps.
struct CKPT_EXPORT ItemDiff {
  enum class Kind { kIdentical, kChanged, kOnlyInA, kOnlyInB };
  std::string what;  ///< "blob 'rng' (rank 2)", "blob 'config' (global)", "metadata 'lr'"
  Kind kind = Kind::kIdentical;
  std::string note;  ///< kChanged: the sizes, or the first differing byte
};

/// Compares the blobs (by name and rank, byte for byte) and the metadata of
/// two steps. Sorted: blobs, then metadata.
CKPT_EXPORT absl::StatusOr<std::vector<ItemDiff>> DiffBlobsAndMetadata(Storage& a, int64_t step_a, Storage& b,
                                                                       int64_t step_b);

}  // namespace ckpt

#endif  // CKPT_AUDIT_H_

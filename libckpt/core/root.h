// Operations on a checkpoint root that do not depend on a rank: resolving
// LATEST, reading manifests, listing steps, merging rank reports into a
// manifest, and garbage collection.
#ifndef CKPT_CORE_ROOT_H_
#define CKPT_CORE_ROOT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/checkpointer.h"
#include "format/manifest.h"

namespace ckpt {

/// Reads and decodes the manifest of `step`. NotFound when the step does not
/// exist or was never committed (the message says which).
absl::StatusOr<Manifest> ReadManifest(Storage& storage, int64_t step);

/// The latest committed step: LATEST when it is valid and its manifest
/// exists; otherwise the highest step with a manifest. NotFound when none.
/// When LATEST was unusable `*note` (if given) says why.
absl::StatusOr<int64_t> ResolveLatest(Storage& storage,
                                      std::string* note = nullptr);

/// Every step directory, ascending. NotFound when the root does not exist.
absl::StatusOr<std::vector<StepInfo>> ListStepsIn(Storage& storage);

/// Merges one report per rank (index = rank) into the step's manifest and
/// checks it: one data file per rank, consistent tensor specs, unique
/// blobs, exact cover of every tensor.
absl::StatusOr<Manifest> MergeReports(const std::vector<Manifest>& reports);

/// Points LATEST at `step` unless it already names a newer committed step.
absl::Status PublishLatest(Storage& storage, int64_t step);

struct GcOptions {
  RetentionPolicy retention;
  bool dry_run = false;
  /// Also remove uncommitted steps newer than the latest committed one
  /// (safe only when no save is running, e.g. when a job starts).
  bool remove_newer_partial = false;
};

/// Applies retention to committed steps and removes uncommitted leftovers.
/// The latest committed step is always kept.
absl::StatusOr<GcReport> CollectGarbageIn(Storage& storage,
                                          const GcOptions& options);

}  // namespace ckpt

#endif  // CKPT_CORE_ROOT_H_

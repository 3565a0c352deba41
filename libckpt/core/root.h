// Operations on a checkpoint root that do not depend on a rank: resolving
// LATEST, reading manifests, listing steps, merging rank reports into a
// manifest, and garbage collection.
#ifndef CKPT_CORE_ROOT_H_
#define CKPT_CORE_ROOT_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/checkpointer.h"
#include "format/manifest.h"
#include "format/root_files.h"
#include "pipeline/delta_chain.h"

namespace ckpt {

/// What the manifests of one step directory say. The step is committed when
/// MANIFEST or MANIFEST.copy exists, whether or not they decode.
struct StepExamination {
  StepInfo info;
  /// Decoded from MANIFEST, or from the copy when MANIFEST is damaged.
  std::optional<Manifest> manifest;
  bool from_copy = false;
  /// What is wrong with each manifest file (empty: present and intact).
  std::string manifest_problem;
  std::string copy_problem;
  /// The bytes of the intact one (for repairs).
  std::string intact_bytes;
  /// When MANIFEST and its copy both decode but differ (the commits of two
  /// saves), the one whose save id agrees with CLAIM and with the data
  /// files' footers is `manifest` (and its bytes `intact_bytes`); when the
  /// evidence decides nothing, `manifest` is empty and this says why.
  std::string undecided;
};

/// Examines `step`: NotFound when its directory does not exist; otherwise a
/// state (partial, committed, damaged) and, when either manifest decodes,
/// the manifest. The one place that decides what a step is: listing,
/// verification, garbage collection, retention and loads all use it.
/// `grids` as DecodeManifest takes it (listings keep grids as they are).
absl::StatusOr<StepExamination> ExamineStep(Storage& storage, int64_t step,
                                            GridChunks grids = GridChunks::kExpandGrids);

/// Reads and decodes the manifest of `step`, from its copy when MANIFEST is
/// damaged (then `*note`, if given, says so). NotFound when the step does
/// not exist or was never committed (the message says which); DataLoss when
/// it is committed but neither manifest decodes.
/// `grids` as DecodeManifest takes it.
absl::StatusOr<Manifest> ReadManifest(Storage& storage, int64_t step, std::string* note = nullptr,
                                      bool* from_copy = nullptr, GridChunks grids = GridChunks::kExpandGrids);

/// The committed steps of a root as bases of delta chains (pipeline/
/// delta_chain.h): ReadManifest's answer, every chunk listed.
class RootBaseManifests : public BaseManifests {
 public:
  explicit RootBaseManifests(Storage& storage) : storage_(storage) {}
  absl::StatusOr<std::shared_ptr<const Manifest>> Read(int64_t step) override;

 private:
  Storage& storage_;
};

/// The latest committed step: the highest step whose MANIFEST (or its copy)
/// exists, damaged or not. LATEST only speeds the search up; when it names
/// another step `*note` (if given) says so. NotFound when none.
absl::StatusOr<int64_t> ResolveLatest(Storage& storage, std::string* note = nullptr);

/// Committed steps (MANIFEST or its copy exists, decodable or not), newest
/// first, found without reading a manifest. NotFound when the root does not
/// exist.
absl::StatusOr<std::vector<int64_t>> CommittedStepsNewestFirst(Storage& storage);

/// The step a load of "the latest" reads and its manifest: the latest
/// committed step; when that one is damaged beyond its copy, the newest
/// intact one if `allow_fallback`, else DataLoss naming both.
struct LoadableStep {
  int64_t step = -1;
  Manifest manifest;
  std::string note;  ///< damage met on the way, for LoadStats and logs
  int64_t fell_back_from = -1;
  bool from_copy = false;      ///< the manifest was read from MANIFEST.copy
  int64_t manifest_bytes = 0;  ///< the size of the manifest file read
};
absl::StatusOr<LoadableStep> ResolveLoadable(Storage& storage, int64_t step, bool allow_fallback,
                                             GridChunks grids = GridChunks::kExpandGrids);

/// Every step directory, ascending, with its state. NotFound when the root
/// does not exist.
absl::StatusOr<std::vector<StepInfo>> ListStepsIn(Storage& storage);

/// Writes the missing MANIFEST.copy of committed steps whose MANIFEST is
/// intact (a save that crashed between its commit and the copy). Returns the
/// steps healed. Damaged copies are left for `ckpt repair`.
absl::StatusOr<std::vector<int64_t>> HealManifestCopies(Storage& storage);

/// Rebuilds the metadata of `step` from itself: a damaged or missing
/// MANIFEST from an intact copy, or the copy from an intact MANIFEST,
/// byte-identically. Lists what it rewrote in `repaired` and what it could
/// not in `lost`.
absl::Status RepairStepMetadata(Storage& storage, int64_t step, bool dry_run, std::vector<std::string>* repaired,
                                std::vector<std::string>* lost);

/// Merges one report per rank (index = rank) into the step's manifest and
/// checks it: one data file per rank, consistent tensor specs, unique
/// blobs, exact cover of every tensor.
absl::StatusOr<Manifest> MergeReports(const std::vector<Manifest>& reports);

/// Points LATEST at `step` unless it already names a newer committed step.
absl::Status PublishLatest(Storage& storage, int64_t step);

/// The claim of `step` (its CLAIM file): NotFound when there is none,
/// DataLoss when it does not decode.
absl::StatusOr<StepClaim> ReadStepClaim(Storage& storage, int64_t step);

/// This machine's host name, as claims record it.
std::string ThisHostName();

/// When process `pid` started (clock ticks since boot), 0 when unknown.
int64_t ProcessStartTicks(int64_t pid);

/// True when `claim` was made on this host by another process that is
/// still alive. Claims from other hosts cannot be checked; this process's
/// own saves are protected by their Checkpointer.
bool ClaimIsRunningHere(const StepClaim& claim);

/// CollectGarbage (ckpt/checkpointer.h), for the Checkpointer's own passes.
absl::StatusOr<GcReport> CollectGarbageIn(Storage& storage, const GcOptions& options);

/// A new job's leader, before its first save: writes the missing
/// MANIFEST.copy of committed steps whose save (or removal) stopped half-way,
/// then removes uncommitted steps (leftovers of crashed saves, except those
/// a live process of this host claims) and applies `retention`. Each copy
/// written, each removal and each damaged step kept is said on stderr.
absl::Status CleanRootAtJobStart(Storage& storage, const RetentionPolicy& retention);

}  // namespace ckpt

#endif  // CKPT_CORE_ROOT_H_

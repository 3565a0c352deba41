// The files of a checkpoint root: their names, the LATEST pointer and the
// CLAIM of a step. (Tensor layouts, shards and meshes are libckpt/layout/.)
//
//   ROOT/LATEST
//   ROOT/step-0000000100/MANIFEST
//   ROOT/step-0000000100/MANIFEST.copy       the same bytes, written after it
//   ROOT/step-0000000100/rank-000000.ckd     data file of rank 0
//   ROOT/step-0000000100/rank-000000.report  rank 0's report (until commit)
//   ROOT/step-0000000100/rank-000000.failed  rank 0 could not save
//   ROOT/step-0000000100/ABORTED             the leader gave up on the step
//   ROOT/step-0000000100/CLAIM               the one save that may write the step
#ifndef CKPT_FORMAT_ROOT_FILES_H_
#define CKPT_FORMAT_ROOT_FILES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "ckpt/limits.h"
#include "format/data_file.h"  // DataFileName: a rank's .ckd file

namespace ckpt {

inline constexpr std::string_view kLatestName = "LATEST";
inline constexpr std::string_view kManifestName = "MANIFEST";
/// A byte-identical copy of MANIFEST, written right after the commit (the
/// rename of MANIFEST), so that either alone proves and describes the step.
inline constexpr std::string_view kManifestCopyName = "MANIFEST.copy";
inline constexpr std::string_view kAbortedName = "ABORTED";
/// Created exclusively (Storage::PutIfAbsent) by a save's leader before any
/// rank writes: the step's one writer. Kept after the commit.
inline constexpr std::string_view kClaimName = "CLAIM";
/// Written by gc into a committed step before it un-commits it (removes
/// MANIFEST.copy, then MANIFEST): a step holding it whose copy is gone is a
/// removal that stopped half-way, which the next gc finishes, not damage.
inline constexpr std::string_view kRetiringName = "RETIRING";

std::string StepDir(int64_t step);
/// The step of a directory name written by StepDir ("step-" and at least ten
/// digits, no leading zeros beyond those), or nullopt: "step-200" and
/// "step-0000000200" do not both name step 200.
std::optional<int64_t> ParseStepDir(std::string_view name);
std::string ReportName(int rank);
bool IsReportName(std::string_view name);
std::string FailedName(int rank);
/// Rank of "rank-<digits>.<ext>" with the given extension, or nullopt.
std::optional<int> ParseRankFile(std::string_view name, std::string_view ext);

/// LATEST is a short text file that carries its own checksum:
///   "ckpt-latest 1\nstep <n>\nxxh3 0x<hex of the lines above>\n"
std::string EncodeLatest(int64_t step);
absl::StatusOr<int64_t> DecodeLatest(std::string_view text);

/// Who claimed a step: the save's identity (shared by every rank's data file
/// and report, and recorded in the manifest's files) and where it ran.
struct StepClaim {
  uint64_t save_id = 0;
  int64_t world_size = 0;
  std::string host;  ///< 1-255 bytes of printable ASCII, no spaces
  int64_t pid = 0;
  /// When that process started (/proc/PID/stat, clock ticks since boot; 0
  /// unknown), so that a reused pid is not taken for the claimant.
  int64_t pid_start = 0;
  int64_t claimed_unix_ns = 0;
};

/// CLAIM is a short text file that carries its own checksum:
///   "ckpt-claim 1\nsave 0x<16 hex>\nworld <n>\nhost <name>\npid <n>\n"
///   "pid_start <ticks>\ntime <unix ns>\nxxh3 0x<hex of the lines above>\n"
/// A host name outside the allowed bytes is written with '?' in their place.
std::string EncodeClaim(const StepClaim& claim);
/// `where` names the file in messages.
absl::StatusOr<StepClaim> DecodeClaim(std::string_view text, std::string_view where);
/// "save 0x.. (host H, pid P, N ranks, claimed T ago)".
std::string DescribeClaim(const StepClaim& claim, int64_t now_unix_ns);

}  // namespace ckpt

#endif  // CKPT_FORMAT_ROOT_FILES_H_

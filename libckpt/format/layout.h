// Names of the objects under a checkpoint root, and the LATEST pointer.
//
//   ROOT/LATEST
//   ROOT/step-0000000100/MANIFEST
//   ROOT/step-0000000100/MANIFEST.copy       the same bytes, written after it
//   ROOT/step-0000000100/rank-000000.ckd     data file of rank 0
//   ROOT/step-0000000100/rank-000000.report  rank 0's report (until commit)
//   ROOT/step-0000000100/rank-000000.failed  rank 0 could not save
//   ROOT/step-0000000100/ABORTED             the leader gave up on the step
#ifndef CKPT_FORMAT_LAYOUT_H_
#define CKPT_FORMAT_LAYOUT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace ckpt {

inline constexpr std::string_view kLatestName = "LATEST";
inline constexpr std::string_view kManifestName = "MANIFEST";
/// A byte-identical copy of MANIFEST, written right after the commit (the
/// rename of MANIFEST), so that either alone proves and describes the step.
inline constexpr std::string_view kManifestCopyName = "MANIFEST.copy";
inline constexpr std::string_view kAbortedName = "ABORTED";

std::string StepDir(int64_t step);
/// The step of a directory name written by StepDir ("step-" and at least ten
/// digits, no leading zeros beyond those), or nullopt: "step-200" and
/// "step-0000000200" do not both name step 200.
std::optional<int64_t> ParseStepDir(std::string_view name);
std::string DataFileName(int rank);
std::string ReportName(int rank);
std::string FailedName(int rank);
/// Rank of "rank-<digits>.<ext>" with the given extension, or nullopt.
std::optional<int> ParseRankFile(std::string_view name, std::string_view ext);

/// LATEST is a short text file that carries its own checksum:
///   "ckpt-latest 1\nstep <n>\nxxh3 0x<hex of the lines above>\n"
std::string EncodeLatest(int64_t step);
absl::StatusOr<int64_t> DecodeLatest(std::string_view text);

}  // namespace ckpt

#endif  // CKPT_FORMAT_LAYOUT_H_

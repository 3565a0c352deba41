#include "format/layout.h"

#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "util/strings.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "util/hash.h"

namespace ckpt {

std::string StepDir(int64_t step) {
  return absl::StrFormat("step-%010d", step);
}

std::optional<int64_t> ParseStepDir(std::string_view name) {
  if (!ConsumePrefix(&name, "step-") || name.empty()) return std::nullopt;
  for (char c : name) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  int64_t step = 0;
  if (!ParseInt64(name, &step)) return std::nullopt;
  if (StepDir(step).size() != name.size() + 5) return std::nullopt;  // not canonical
  return step;
}

std::string DataFileName(int rank) {
  return absl::StrFormat("rank-%06d.ckd", rank);
}
std::string ReportName(int rank) {
  return absl::StrFormat("rank-%06d.report", rank);
}
std::string FailedName(int rank) {
  return absl::StrFormat("rank-%06d.failed", rank);
}

std::optional<int> ParseRankFile(std::string_view name, std::string_view ext) {
  if (!ConsumePrefix(&name, "rank-")) return std::nullopt;
  if (!ConsumeSuffix(&name, ext)) return std::nullopt;
  if (!ConsumeSuffix(&name, ".") || name.empty()) return std::nullopt;
  for (char c : name) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  int64_t rank = 0;
  if (!ParseInt64(name, &rank) || rank > (1 << 30)) return std::nullopt;
  return static_cast<int>(rank);
}

std::string EncodeLatest(int64_t step) {
  std::string body = StrCat("ckpt-latest 1\nstep ", step, "\n");
  char hex[19];
  return StrCat(body, "xxh3 ", HexHashTo(Xxh3(body), hex), "\n");
}

absl::StatusOr<int64_t> DecodeLatest(std::string_view text) {
  size_t pos = text.find("xxh3 ");
  if (!text.starts_with("ckpt-latest ") || pos == std::string_view::npos) {
    return absl::DataLossError("LATEST: not a LATEST file (bad header)");
  }
  std::string_view body = text.substr(0, pos);
  char hex[19];
  std::string expect = StrCat("xxh3 ", HexHashTo(Xxh3(body), hex), "\n");
  if (text.substr(pos) != expect) {
    return absl::DataLossError(StrCat(
        "LATEST at byte offset ", pos, ": checksum mismatch or trailing bytes"));
  }
  if (!body.starts_with("ckpt-latest 1\n")) {
    return absl::FailedPreconditionError(
        "LATEST: unknown version (upgrade ckpt)");
  }
  std::string_view rest = body.substr(14);
  int64_t step = -1;
  if (!ConsumePrefix(&rest, "step ") || !ConsumeSuffix(&rest, "\n") ||
      !ParseInt64(rest, &step) || step < 0) {
    return absl::DataLossError("LATEST: malformed step line");
  }
  return step;
}

}  // namespace ckpt

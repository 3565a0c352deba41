#include "format/root_files.h"

#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "util/hash.h"
#include "util/strings.h"

namespace ckpt {

std::string StepDir(int64_t step) { return absl::StrFormat("step-%010d", step); }

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

std::string ReportName(int rank) { return absl::StrFormat("rank-%06d.report", rank); }
bool IsReportName(std::string_view name) { return ParseRankFile(name, "report").has_value(); }
std::string FailedName(int rank) { return absl::StrFormat("rank-%06d.failed", rank); }

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
    return absl::DataLossError(StrCat("LATEST at byte offset ", pos, ": checksum mismatch or trailing bytes"));
  }
  if (!body.starts_with("ckpt-latest 1\n")) {
    return absl::FailedPreconditionError("LATEST: unknown version (upgrade ckpt)");
  }
  std::string_view rest = body.substr(14);
  int64_t step = -1;
  if (!ConsumePrefix(&rest, "step ") || !ConsumeSuffix(&rest, "\n") || !ParseInt64(rest, &step) || step < 0) {
    return absl::DataLossError("LATEST: malformed step line");
  }
  return step;
}

namespace {

bool ClaimHostByte(char c) { return c > ' ' && c < 0x7f; }

// The next "<key> <value>\n" line of `rest`, or false.
bool NextField(std::string_view* rest, std::string_view key, std::string_view* value) {
  std::string_view r = *rest;
  if (!ConsumePrefix(&r, key) || !ConsumePrefix(&r, " ")) return false;
  const size_t nl = r.find('\n');
  if (nl == std::string_view::npos || nl == 0) return false;
  *value = r.substr(0, nl);
  r.remove_prefix(nl + 1);
  *rest = r;
  return true;
}

}  // namespace

std::string EncodeClaim(const StepClaim& claim) {
  std::string host(claim.host.empty() ? std::string_view("?")
                                      : std::string_view(claim.host).substr(0, kMaxClaimHostBytes));
  for (char& c : host) {
    if (!ClaimHostByte(c)) c = '?';
  }
  char id[19];
  std::string body =
      StrCat("ckpt-claim 1\nsave ", HexHashTo(claim.save_id, id), "\nworld ", claim.world_size, "\nhost ", host,
             "\npid ", claim.pid, "\npid_start ", claim.pid_start, "\ntime ", claim.claimed_unix_ns, "\n");
  char hex[19];
  return StrCat(body, "xxh3 ", HexHashTo(Xxh3(body), hex), "\n");
}

absl::StatusOr<StepClaim> DecodeClaim(std::string_view text, std::string_view where) {
  const size_t pos = text.rfind("xxh3 ");
  if (!text.starts_with("ckpt-claim ") || pos == std::string_view::npos) {
    return absl::DataLossError(StrCat(where, ": not a claim file (bad header)"));
  }
  std::string_view body = text.substr(0, pos);
  char hex[19];
  if (text.substr(pos) != StrCat("xxh3 ", HexHashTo(Xxh3(body), hex), "\n")) {
    return absl::DataLossError(StrCat(where, " at byte offset ", pos, ": checksum mismatch or trailing bytes"));
  }
  if (!ConsumePrefix(&body, "ckpt-claim 1\n")) {
    return absl::FailedPreconditionError(StrCat(where, ": unknown claim version (upgrade ckpt)"));
  }
  StepClaim c;
  std::string_view v;
  auto bad = [&](std::string_view field) {
    return absl::DataLossError(
        StrCat(where, " at byte offset ", body.data() - text.data(), ": malformed ", field, " line"));
  };
  if (!NextField(&body, "save", &v) || !ParseHex64(v, &c.save_id) || c.save_id == 0) return bad("save");
  if (!NextField(&body, "world", &v) || !ParseInt64(v, &c.world_size) || c.world_size < 1) return bad("world");
  if (!NextField(&body, "host", &v) || v.size() > kMaxClaimHostBytes) return bad("host");
  for (char ch : v) {
    if (!ClaimHostByte(ch)) return bad("host");
  }
  c.host = std::string(v);
  if (!NextField(&body, "pid", &v) || !ParseInt64(v, &c.pid) || c.pid < 0) return bad("pid");
  if (!NextField(&body, "pid_start", &v) || !ParseInt64(v, &c.pid_start) || c.pid_start < 0) return bad("pid_start");
  if (!NextField(&body, "time", &v) || !ParseInt64(v, &c.claimed_unix_ns) || c.claimed_unix_ns < 0) {
    return bad("time");
  }
  if (!body.empty()) return bad("final");
  return c;
}

std::string DescribeClaim(const StepClaim& claim, int64_t now_unix_ns) {
  char id[19];
  const double ago = static_cast<double>(now_unix_ns - claim.claimed_unix_ns) / 1e9;
  return absl::StrFormat("save %s (host %s, pid %d, %d rank%s, claimed %.1f s ago)", HexHashTo(claim.save_id, id),
                         claim.host, claim.pid, claim.world_size, claim.world_size == 1 ? "" : "s", ago);
}

}  // namespace ckpt

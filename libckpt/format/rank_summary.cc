#include "format/rank_summary.h"

#include <cstring>

#include "ckpt/limits.h"
#include "util/bytes.h"
#include "util/hash.h"
#include "util/strings.h"

namespace ckpt {
namespace {

constexpr uint8_t kSummaryVersion = 1;
constexpr uint64_t kMaxSummaryBlobs = uint64_t{1} << 16;

uint32_t F32Bits(float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, 4);
  return u;
}

float BitsF32(uint32_t u) {
  float f = 0;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

uint64_t RuleBinding(int64_t step, uint64_t save_id, uint64_t rules_hash) {
  uint8_t bytes[24];
  StoreLE64(bytes, static_cast<uint64_t>(step));
  StoreLE64(bytes + 8, save_id);
  StoreLE64(bytes + 16, rules_hash);
  return Xxh3(bytes, sizeof(bytes));
}

std::string EncodeRankSummary(const RankSummary& s) {
  ByteWriter w;
  w.Raw(kRankSummaryMagic, 4);
  w.U8(kSummaryVersion);
  w.Var(static_cast<uint64_t>(s.rank));
  w.U64(s.binding);
  w.Var(s.size);
  w.Var(s.index_offset);
  w.U64(s.index_hash);
  w.Var(s.block_count);
  w.Var(s.container_hash);
  w.U32(F32Bits(s.stall_s));
  w.U32(F32Bits(s.write_s));
  w.Var(s.bytes_stored);
  w.Var(s.blobs.size());
  for (const SummaryBlob& b : s.blobs) {
    w.Str(b.name);
    w.U8(b.global ? 1 : 0);
    w.Var(b.size);
  }
  const uint32_t check = static_cast<uint32_t>(Xxh3(w.str()));
  w.U32(check);
  return w.Take();
}

bool LooksLikeRankSummary(std::string_view bytes) {
  return bytes.size() >= 4 && std::memcmp(bytes.data(), kRankSummaryMagic, 4) == 0;
}

absl::StatusOr<RankSummary> DecodeRankSummary(std::string_view bytes, std::string_view what) {
  if (!LooksLikeRankSummary(bytes)) return absl::DataLossError(StrCat(what, ": not a rank summary (bad magic)"));
  if (bytes.size() < 9) return absl::DataLossError(StrCat(what, ": truncated rank summary (", bytes.size(), " bytes)"));
  const uint32_t stored = LoadLE32(reinterpret_cast<const uint8_t*>(bytes.data()) + bytes.size() - 4);
  if (stored != static_cast<uint32_t>(Xxh3(bytes.substr(0, bytes.size() - 4)))) {
    return absl::DataLossError(StrCat(what, ": rank summary checksum mismatch"));
  }
  ByteReader r(bytes.substr(0, bytes.size() - 4), std::string(what));
  r.Bytes(4);
  if (const uint8_t v = r.U8(); r.ok() && v != kSummaryVersion) {
    return absl::DataLossError(
        StrCat(what, ": rank summary version ", v, " (this library reads ", kSummaryVersion, ")"));
  }
  RankSummary s;
  s.rank = static_cast<int32_t>(r.Count(uint64_t{1} << 24, "rank"));
  s.binding = r.U64();
  s.size = r.Var();
  s.index_offset = r.Var();
  s.index_hash = r.U64();
  s.block_count = r.Var();
  s.container_hash = r.Var();
  s.stall_s = BitsF32(r.U32());
  s.write_s = BitsF32(r.U32());
  s.bytes_stored = r.Var();
  const uint64_t n = r.Count(kMaxSummaryBlobs, "blob count");
  for (uint64_t i = 0; i < n && r.ok(); ++i) {
    SummaryBlob b;
    b.name = r.Str(kMaxNameBytes);
    const uint8_t g = r.U8();
    if (r.ok() && g > 1) r.Fail(StrCat("blob scope ", g));
    b.global = g == 1;
    b.size = r.Count(kMaxBlobBytes, "blob size");
    s.blobs.push_back(std::move(b));
  }
  if (r.ok() && !r.AtEnd()) r.Fail(StrCat(r.remaining(), " bytes after the summary"));
  if (!r.ok()) return r.status();
  return s;
}

}  // namespace ckpt

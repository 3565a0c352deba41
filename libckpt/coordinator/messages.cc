#include "coordinator/messages.h"

#include <bit>
#include <concepts>
#include <string>
#include <type_traits>
#include <utility>

#include "ckpt/limits.h"
#include "util/bytes.h"
#include "util/status_wire.h"
#include "util/strings.h"

namespace ckpt::coord {
namespace {

template <typename T>
absl::StatusOr<T> Done(const ByteReader& r, T m) {
  if (!r.ok()) return r.status();
  return m;
}

}  // namespace

std::string EncodeDecision(const absl::Status& s) {
  ByteWriter w;
  w.U8(s.ok() ? 1 : 0);
  WriteStatus(w, s);
  return w.Take();
}
absl::Status DecodeDecision(std::string_view payload, absl::Status* decision) {
  ByteReader r(payload, "decision");
  const bool ok = r.U8() != 0;
  const absl::Status s = ReadStatus(r);
  if (!r.ok()) return r.status();
  *decision = ok ? absl::OkStatus() : (s.ok() ? absl::AbortedError("") : s);
  return absl::OkStatus();
}

std::string EncodeParts(const std::vector<std::string>& parts) {
  ByteWriter w;
  w.Var(parts.size());
  for (const std::string& p : parts) w.Str(p);
  return w.Take();
}
absl::StatusOr<std::vector<std::string>> DecodeParts(std::string_view payload, uint64_t max_part,
                                                     std::string_view what) {
  ByteReader r(payload, std::string(what));
  const uint64_t n = r.Count(kMaxListEntries, "messages");
  std::vector<std::string> out;
  for (uint64_t i = 0; i < n && r.ok(); ++i) out.push_back(r.Str(max_part));
  return Done(r, std::move(out));
}

std::string EncodeBytes(std::string_view bytes) {
  ByteWriter w;
  w.Str(bytes);
  return w.Take();
}
absl::StatusOr<std::string> DecodeBytes(std::string_view payload, uint64_t max_len, std::string_view what) {
  ByteReader r(payload, std::string(what));
  std::string out = r.Str(max_len);
  return Done(r, std::move(out));
}

}  // namespace ckpt::coord

#include "util/status_wire.h"

#include "util/strings.h"

namespace ckpt {

void WriteStatus(ByteWriter& w, const absl::Status& s) {
  w.Var(static_cast<uint64_t>(s.code()));
  w.Str(std::string_view(s.message().data(), s.message().size()));
}

absl::Status ReadStatus(ByteReader& r) {
  const uint64_t code = r.Var();
  std::string message = r.Str();
  if (!r.ok() || code == 0) return absl::OkStatus();
  const auto c = code > static_cast<uint64_t>(absl::StatusCode::kUnauthenticated) ? absl::StatusCode::kUnknown
                                                                                  : static_cast<absl::StatusCode>(code);
  return absl::Status(c, message);
}

std::string EncodeOutcome(const absl::StatusOr<std::string>& outcome) {
  if (outcome.ok()) return StrCat("v", *outcome);
  ByteWriter w;
  w.U8('e');
  WriteStatus(w, outcome.status());
  return w.Take();
}

absl::StatusOr<std::string> DecodeOutcome(std::string_view bytes, std::string_view what) {
  if (!bytes.empty() && bytes[0] == 'v') return std::string(bytes.substr(1));
  if (bytes.empty() || bytes[0] != 'e') {
    return absl::DataLossError(StrCat(what, ": neither a value nor an error (", bytes.size(), " bytes)"));
  }
  ByteReader r(bytes.substr(1), std::string(what), 1);
  absl::Status s = ReadStatus(r);
  if (!r.ok()) return r.status();
  if (s.ok()) return absl::DataLossError(StrCat(what, ": an error without a code"));
  return s;
}

}  // namespace ckpt

// The one way a Status crosses a process boundary: collectives among ranks
// and the coordinator's replies carry the code as well as the message, so a
// DataLoss on the leader is a DataLoss on every rank.
#ifndef CKPT_UTIL_STATUS_WIRE_H_
#define CKPT_UTIL_STATUS_WIRE_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "util/bytes.h"

namespace ckpt {

/// var code, str message (code 0 is OK, with an empty message).
void WriteStatus(ByteWriter& w, const absl::Status& s);
/// What WriteStatus wrote; a code no Status has reads as Unknown. A
/// malformed input fails `r` (check r.ok()).
absl::Status ReadStatus(ByteReader& r);

/// A payload of a collective: a value, or the error that took its place.
/// 'v' + value, or 'e' + WriteStatus.
std::string EncodeOutcome(const absl::StatusOr<std::string>& outcome);
/// The value, or the error as sent; DataLoss naming `what` when malformed.
absl::StatusOr<std::string> DecodeOutcome(std::string_view bytes, std::string_view what);

}  // namespace ckpt

#endif  // CKPT_UTIL_STATUS_WIRE_H_

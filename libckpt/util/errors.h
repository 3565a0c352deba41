// Turning errno into an absl::Status that says what failed and whether a
// retry can help.
#ifndef CKPT_UTIL_ERRORS_H_
#define CKPT_UTIL_ERRORS_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ckpt {

/// Maps errno to a status code and a message "<what>: <strerror> (<hint>)".
/// ENOSPC/EDQUOT -> ResourceExhausted ("free space, then retry"),
/// EIO -> Unavailable ("I/O error; retrying may help, check the device"),
/// ENOENT -> NotFound, EACCES/EPERM -> PermissionDenied, others Internal or
/// InvalidArgument.
absl::Status ErrnoStatus(int err, std::string_view what);

/// Prepends context to a status message, keeping its code.
absl::Status Annotate(const absl::Status& status, std::string_view context);

/// Opens `path` read-only (close-on-exec) when it is a regular file. A FIFO,
/// a socket or a device is refused (InvalidArgument naming it) before
/// anything can block on it: open(2) of a FIFO without a writer waits for
/// one forever. The descriptor, blocking, or the errno status.
absl::StatusOr<int> OpenRegularFile(const std::string& path);

}  // namespace ckpt

#define CKPT_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::absl::Status ckpt_status_ = (expr);        \
    if (!ckpt_status_.ok()) return ckpt_status_; \
  } while (0)

#define CKPT_CONCAT_INNER(a, b) a##b
#define CKPT_CONCAT(a, b) CKPT_CONCAT_INNER(a, b)
#define CKPT_ASSIGN_OR_RETURN(lhs, expr) CKPT_ASSIGN_OR_RETURN_IMPL(CKPT_CONCAT(ckpt_statusor_, __LINE__), lhs, expr)
#define CKPT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

#endif  // CKPT_UTIL_ERRORS_H_

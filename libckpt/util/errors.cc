#include "util/errors.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "util/strings.h"

namespace ckpt {

absl::Status ErrnoStatus(int err, std::string_view what) {
  std::string msg = StrCat(what, ": ", std::strerror(err));
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(StrCat(msg, " (out of space; free space, then retry)"));
    case EIO:
      return absl::UnavailableError(StrCat(msg, " (I/O error; a retry may help, check the device)"));
    case EAGAIN:
    case EINTR:
    case EBUSY:
      return absl::UnavailableError(StrCat(msg, " (transient; retry)"));
    case ENOENT:
      return absl::NotFoundError(msg);
    case EEXIST:
      return absl::AlreadyExistsError(msg);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(msg);
    case EINVAL:
    case ENAMETOOLONG:
    case ENOTDIR:
    case EISDIR:
      return absl::InvalidArgumentError(msg);
    case ENOMEM:
      return absl::ResourceExhaustedError(msg);
    default:
      return absl::InternalError(msg);
  }
}

absl::Status Annotate(const absl::Status& status, std::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), StrCat(context, ": ", status.message()));
}

}  // namespace ckpt

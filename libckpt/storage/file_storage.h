// The file:// backend: POSIX files, I/O through io_uring (or threads where
// io_uring is refused), O_DIRECT where the filesystem accepts it.
//
// URI: file:///abs/path or a plain path, with optional parameters
//   direct=0|1       O_DIRECT for data writes and aligned reads (default 1)
//   engine=auto|io_uring|threads   (default auto: io_uring, else threads)
//   qd=N             requests in flight (default 64)
//   threads=N        workers of the threads engine (default 4)
#ifndef CKPT_STORAGE_FILE_STORAGE_H_
#define CKPT_STORAGE_FILE_STORAGE_H_

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "ckpt/storage.h"

namespace ckpt {

absl::StatusOr<std::shared_ptr<Storage>> OpenFileStorage(std::string_view uri);

/// Like file:// but never uses io_uring (the "posix" backend).
absl::StatusOr<std::shared_ptr<Storage>> OpenPosixStorage(std::string_view uri);

}  // namespace ckpt

#endif  // CKPT_STORAGE_FILE_STORAGE_H_

// Asynchronous positional I/O on file descriptors: io_uring, or a pool of
// threads doing pread/pwrite where io_uring is refused.
#ifndef CKPT_STORAGE_ROOTS_FILE_IO_ENGINE_H_
#define CKPT_STORAGE_ROOTS_FILE_IO_ENGINE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ckpt/storage.h"

namespace ckpt {

struct IoRequest {
  /// kSync: fdatasync of `fd` (offset, buf and len unused).
  enum class Kind : uint8_t { kRead, kWrite, kSync };
  Kind kind = Kind::kRead;
  int fd = -1;
  uint64_t offset = 0;
  std::byte* buf = nullptr;
  size_t len = 0;
  size_t done = 0;                          ///< bytes transferred so far
  std::shared_ptr<const std::string> path;  ///< for messages
  IoCallback callback;
};

/// Thread-safe. Requests complete in any order; every callback runs exactly
/// once, on an engine thread. The destructor waits for nothing: callers drain
/// their own requests first.
class IoEngine {
 public:
  virtual ~IoEngine() = default;
  /// Queues a request; blocks while the engine's queue depth is reached.
  virtual void Submit(std::unique_ptr<IoRequest> request) = 0;
  virtual std::string_view name() const = 0;
  virtual bool supports_registered_buffers() const { return false; }
  virtual uint64_t RegisterBuffers(const std::vector<absl::Span<std::byte>>& regions) { return 0; }
  virtual void UnregisterBuffers(uint64_t token) {}
};

/// io_uring with `depth` requests in flight. Fails when the kernel or
/// sandbox refuses io_uring_setup.
absl::StatusOr<std::unique_ptr<IoEngine>> CreateUringEngine(unsigned depth);

/// `threads` workers doing blocking pread/pwrite.
std::unique_ptr<IoEngine> CreateThreadEngine(int threads, unsigned depth);

/// kSync requests completed so far by every engine of the process (a
/// statistic; tests read it).
uint64_t SyncRequestsCompleted();

/// Builds the status of a failed request: "<kind> of N bytes at offset X in
/// <path>: <errno text>" ("fdatasync of <path>: ..." for kSync).
absl::Status IoError(const IoRequest& r, int err);

}  // namespace ckpt

#endif  // CKPT_STORAGE_ROOTS_FILE_IO_ENGINE_H_

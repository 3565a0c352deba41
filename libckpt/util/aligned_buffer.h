// Page-aligned anonymous memory, optionally pre-faulted.
#ifndef CKPT_UTIL_ALIGNED_BUFFER_H_
#define CKPT_UTIL_ALIGNED_BUFFER_H_

#include <cstddef>

#include "absl/status/statusor.h"

namespace ckpt {

constexpr size_t kPageSize = 4096;

inline size_t AlignUp(size_t n, size_t a) { return (n + a - 1) / a * a; }

/// Owns an mmap'ed region. Move-only.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  /// Maps `size` bytes (rounded up to pages). With `prefault` every page is
  /// touched now so later copies never fault.
  static absl::StatusOr<AlignedBuffer> Allocate(size_t size, bool prefault);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ckpt

#endif  // CKPT_UTIL_ALIGNED_BUFFER_H_

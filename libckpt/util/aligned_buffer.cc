#include "util/aligned_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt {

absl::StatusOr<AlignedBuffer> AlignedBuffer::Allocate(size_t size, bool prefault) {
  AlignedBuffer buf;
  if (size == 0) return buf;
  size = AlignUp(size, kPageSize);
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | (prefault ? MAP_POPULATE : 0);
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (p == MAP_FAILED) {
    return ErrnoStatus(errno, StrCat("mmap of ", size, " bytes"));
  }
  if (prefault) {
    // MAP_POPULATE may be ignored under memory pressure; touch each page.
    volatile std::byte* b = static_cast<std::byte*>(p);
    for (size_t off = 0; off < size; off += kPageSize) b[off] = std::byte{0};
  }
  buf.data_ = static_cast<std::byte*>(p);
  buf.size_ = size;
  return buf;
}

AlignedBuffer::~AlignedBuffer() {
  if (data_ != nullptr) munmap(data_, size_);
}

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

}  // namespace ckpt

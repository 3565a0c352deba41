#include "util/aligned_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt {

namespace {

constexpr size_t kHugePage = size_t{2} << 20;

void* MapHuge(size_t size) {
  void* raw = mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return MAP_FAILED;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (begin + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > begin) munmap(raw, aligned - begin);
  const uintptr_t end = begin + size + kHugePage;
  if (end > aligned + size) munmap(reinterpret_cast<void*>(aligned + size), end - (aligned + size));
  void* p = reinterpret_cast<void*>(aligned);
  AdviseHugePages(p, size);  // advice only: 4 KiB pages where refused
  return p;
}

}  // namespace

bool PopulateForWrite(void* p, size_t n) {
#ifndef MADV_POPULATE_WRITE
  constexpr int MADV_POPULATE_WRITE = 23;  // Linux 5.14
#endif
  const uintptr_t begin = AlignUp(reinterpret_cast<uintptr_t>(p), kPageSize);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n) / kPageSize * kPageSize;
  if (end <= begin) return true;
  return madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE) == 0;
}

void AdviseHugePages(void* p, size_t n) {
#ifdef MADV_HUGEPAGE
  if (n < kHugePagesFrom) return;
  const uintptr_t begin = AlignUp(reinterpret_cast<uintptr_t>(p), kHugePage);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n) / kHugePage * kHugePage;
  if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#endif
}

bool HugePagesAdvisable() {
  static const bool advisable = [] {
    std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string line;
    std::getline(f, line);
    return line.find("[always]") != std::string::npos || line.find("[madvise]") != std::string::npos;
  }();
  return advisable;
}

absl::StatusOr<AlignedBuffer> AlignedBuffer::Allocate(size_t size, bool prefault, bool huge) {
  AlignedBuffer buf;
  if (size == 0) return buf;
  size = AlignUp(size, kPageSize);
  void* p;
  if (huge && size >= kHugePagesFrom) {
    p = MapHuge(size);
  } else {
    p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | (prefault ? MAP_POPULATE : 0), -1, 0);
  }
  if (p == MAP_FAILED) {
    return ErrnoStatus(errno, StrCat("mmap of ", size, " bytes"));
  }
  if (prefault) {
    (void)PopulateForWrite(p, size);
    // MAP_POPULATE and the above may be refused under memory pressure;
    // touch each page (cheap where they worked).
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

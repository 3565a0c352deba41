// Page-aligned anonymous memory, optionally pre-faulted.
#ifndef CKPT_UTIL_ALIGNED_BUFFER_H_
#define CKPT_UTIL_ALIGNED_BUFFER_H_

#include <cstddef>

#include "absl/status/statusor.h"

namespace ckpt {

constexpr size_t kPageSize = 4096;

inline size_t AlignUp(size_t n, size_t a) { return (n + a - 1) / a * a; }

/// Maps the whole pages inside [p, p + n) for writing in one call
/// (MADV_POPULATE_WRITE) rather than one page fault each: on some hosts,
/// virtual machines above all, page faults are costly enough that first
/// writes to fresh memory run at a fraction of the memory's speed
/// (docs/performance.md, "Figures behind the code"). Returns false where the kernel
/// lacks it (before Linux 5.14); the memory then faults in as usual.
bool PopulateForWrite(void* p, size_t n);

/// Advises the kernel to back the 2 MiB-aligned part of [p, p + n) with
/// transparent huge pages (advice only; nothing happens for n under 4 MiB).
/// For large long-lived buffers that the caller then populates: on hosts
/// where the page tables are shadowed by a hypervisor, copies and hashes
/// over 2 MiB pages ran several times faster than over 4 KiB pages
/// (docs/performance.md, "Figures behind the code").
void AdviseHugePages(void* p, size_t n);
/// Buffers of at least this many bytes are given AdviseHugePages.
inline constexpr size_t kHugePagesFrom = size_t{4} << 20;
/// Whether this kernel takes the advice (transparent huge pages "always"
/// or "madvise"); read once.
bool HugePagesAdvisable();

/// Owns an mmap'ed region. Move-only.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  /// Maps `size` bytes (rounded up to pages). With `prefault` every page is
  /// touched now so later copies never fault. With `huge` (for long-lived
  /// buffers of 4 MiB and more) the region sits on 2 MiB boundaries and is
  /// advised to be backed by transparent huge pages, which fault in faster
  /// but now and then stall long on a first fault, so buffers made on a
  /// latency-sensitive path stay on small pages (docs/performance.md, "Figures behind the code").
  static absl::StatusOr<AlignedBuffer> Allocate(size_t size, bool prefault, bool huge = false);
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

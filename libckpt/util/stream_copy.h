// Copies into staging memory with non-temporal stores.
//
// Staged bytes are read once more by a hashing worker and then leave for the
// disk; caching them only evicts the trainer's working set. For multi-MiB
// copies glibc's memcpy stays below its non-temporal threshold and runs
// slower than streaming stores. Streaming one line after another is itself
// below glibc's large memcpy: copies of 16 KiB and more stream four pages at
// once, a line of each in turn, as glibc does past its threshold. The
// figures are in docs/performance.md, "Figures behind the code".
#ifndef CKPT_UTIL_STREAM_COPY_H_
#define CKPT_UTIL_STREAM_COPY_H_

#include <cstddef>

namespace ckpt {

/// memcpy semantics (no overlap). Uses streaming stores for copies of 1 KiB
/// and more on x86-64; plain memcpy elsewhere. Ends with a store fence.
void StreamCopy(void* dst, const void* src, size_t n);

/// StreamCopy without the closing fence, for many runs in a row; call
/// StreamFence() after the last one, before handing the memory to another
/// thread.
void StreamCopyNoFence(void* dst, const void* src, size_t n);
void StreamFence();

/// Appends many short runs (rows of a column tile) to one destination with
/// streaming stores in whole cache lines only: the bytes of an unfinished
/// line wait in a line buffer until the next run completes it. Streaming
/// each short run directly leaves a partial line at both of its ends,
/// which the CPU turns into slow partial writes (docs/performance.md, "Figures behind the code").
/// Call StreamFence() after
/// Finish(), before handing the memory to another thread.
class StreamAppender {
 public:
  static constexpr size_t kLine = 64;
  /// Starts appending at `dst`, which must be kLine-aligned.
  void Reset(std::byte* dst) {
    dst_ = dst;
    pos_ = 0;
  }
  void Append(const std::byte* src, size_t n);
  /// Writes the unfinished last line (ordinary stores).
  void Finish();
  size_t size() const { return pos_; }

 private:
  std::byte* dst_ = nullptr;
  size_t pos_ = 0;
  alignas(kLine) std::byte line_[kLine];
};

}  // namespace ckpt

#endif  // CKPT_UTIL_STREAM_COPY_H_

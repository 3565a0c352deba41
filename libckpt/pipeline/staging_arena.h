// The save engine's bounded staging memory: one buffer, allocated (and
// pre-faulted) once, handed out in extents of whole 4 KiB pages. Requests
// are placed back to back from a cursor that moves on through the buffer
// and wraps at its end, so a save's blocks, whatever their lengths (the
// last block of each piece is short), fill the arena with no gaps and an
// arena of a save's size holds the save. Released extents merge with free
// neighbours. Acquire waits while no free extent is long enough: that wait
// is the only way a save slows its caller down (backpressure).
//
// Fragmentation cannot starve a request: if the threads that wait hold h
// extents between them and every other extent is eventually released, the
// free space is at most h + 1 runs of at least size() - h * max_request()
// bytes, so one of them fits a request of max_request() whenever size() >=
// (2h + 1) * max_request(). Callers that hold extents while they wait for
// another keep h below that bound (the save engine's tile budget).
// Thread-safe.
#ifndef CKPT_PIPELINE_STAGING_ARENA_H_
#define CKPT_PIPELINE_STAGING_ARENA_H_

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/statusor.h"
#include "util/aligned_buffer.h"

namespace ckpt {

class StagingArena {
 public:
  static constexpr size_t kPage = 4096;

  /// An arena of `bytes` (a multiple of kPage, at least `max_request`) for
  /// requests of at most `max_request` bytes (a multiple of kPage);
  /// `prefault` touches every page now rather than on first use.
  static absl::StatusOr<std::unique_ptr<StagingArena>> Create(size_t max_request, size_t bytes, bool prefault);

  /// Room for `bytes` (a multiple of kPage, at most max_request()), waiting
  /// while no free extent is long enough.
  std::byte* Acquire(size_t bytes);
  /// Gives back what Acquire returned.
  void Release(std::byte* p);

  size_t max_request() const { return max_request_; }
  /// The whole arena, for registering it with a storage's I/O engine.
  std::byte* data() { return memory_.data(); }
  size_t size() const { return memory_.size(); }
  /// Bytes not handed out.
  size_t free_bytes() const;
  /// The longest free extent.
  size_t largest_free() const;
  /// Called (without the arena's lock) each time an Acquire finds no room,
  /// before it waits. Set before the arena is shared.
  void SetOnFull(std::function<void()> on_full) { on_full_ = std::move(on_full); }

 private:
  StagingArena() = default;
  /// Takes `bytes` from the first free extent long enough at or after the
  /// cursor (wrapping); -1 when none is.
  int64_t TakeLocked(size_t bytes);

  AlignedBuffer memory_;
  size_t max_request_ = 0;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<size_t, size_t> free_;  ///< offset -> length, never adjacent
  std::vector<uint32_t> pages_;    ///< per first page of a handed-out extent: its pages
  size_t cursor_ = 0;              ///< where the next request is placed if it fits
  size_t free_bytes_ = 0;
  std::function<void()> on_full_;
};

}  // namespace ckpt

#endif  // CKPT_PIPELINE_STAGING_ARENA_H_

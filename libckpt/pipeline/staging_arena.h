// The save engine's bounded staging memory. Fixed slots, each the size of
// one block and its frame, allocated (and pre-faulted) once. Requests
// shorter than a slot (the last block of a piece) are packed several to a
// slot, so a state of many tensors fits an arena of its size: one slot at a
// time is packed, and a request of more than half a slot that does not fit
// there takes a slot of its own, whose rest becomes the packing slot when
// it is the larger room. A slot is free again once every request placed in
// it was released. Acquire waits while no slot is free:
// that wait is the only way a save slows its caller down (backpressure).
// Thread-safe.
#ifndef CKPT_PIPELINE_STAGING_ARENA_H_
#define CKPT_PIPELINE_STAGING_ARENA_H_

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/statusor.h"
#include "util/aligned_buffer.h"

namespace ckpt {

class StagingArena {
 public:
  /// `slot_count` >= 1 slots of `slot_bytes` (a multiple of 4096) each;
  /// `prefault` touches every page now rather than on first use.
  static absl::StatusOr<std::unique_ptr<StagingArena>> Create(size_t slot_bytes, size_t slot_count, bool prefault);

  /// Room for `bytes` (at most slot_bytes(); callers pass multiples of the
  /// frame alignment so packed requests stay aligned), waiting while the
  /// arena is full.
  std::byte* Acquire(size_t bytes);
  /// Gives back what Acquire returned.
  void Release(std::byte* p);

  size_t slot_bytes() const { return slot_bytes_; }
  size_t slot_count() const { return slot_count_; }
  /// The whole arena, for registering it with a storage's I/O engine.
  std::byte* data() { return memory_.data(); }
  size_t size() const { return memory_.size(); }
  /// Slots holding no request and not being packed into.
  size_t free_slots() const;
  /// Called (without the arena's lock) each time an Acquire finds no free
  /// slot, before it waits. Set before the arena is shared.
  void SetOnFull(std::function<void()> on_full) { on_full_ = std::move(on_full); }

 private:
  StagingArena() = default;
  size_t SlotIndex(const std::byte* p) const { return static_cast<size_t>(p - memory_.data()) / slot_bytes_; }
  std::byte* TakeFreeSlotLocked(std::unique_lock<std::mutex>& lock);
  bool DropRefLocked(const std::byte* p);
  /// `bytes` at the packing slot's end. REQUIRES: it fits.
  std::byte* PlaceLocked(size_t bytes);

  AlignedBuffer memory_;
  size_t slot_bytes_ = 0;
  size_t slot_count_ = 0;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::byte*> free_;
  std::vector<uint32_t> refs_;    ///< per slot: requests in it, +1 while it is being packed
  std::byte* packing_ = nullptr;  ///< the slot small requests are packed into
  size_t packed_ = 0;             ///< bytes of packing_ handed out
  std::function<void()> on_full_;
};

}  // namespace ckpt

#endif  // CKPT_PIPELINE_STAGING_ARENA_H_

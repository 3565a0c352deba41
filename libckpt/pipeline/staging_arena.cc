#include "pipeline/staging_arena.h"

#include "util/errors.h"
#include "util/strings.h"

namespace ckpt {

absl::StatusOr<std::unique_ptr<StagingArena>> StagingArena::Create(size_t slot_bytes, size_t slot_count,
                                                                   bool prefault) {
  if (slot_bytes == 0 || slot_bytes % 4096 != 0 || slot_count == 0) {
    return absl::InvalidArgumentError(StrCat("staging arena: ", slot_count, " slots of ", slot_bytes,
                                             " bytes (want >= 1 slot of a multiple of 4096)"));
  }
  std::unique_ptr<StagingArena> a(new StagingArena());
  CKPT_ASSIGN_OR_RETURN(a->memory_, AlignedBuffer::Allocate(slot_bytes * slot_count, prefault, /*huge=*/true));
  a->slot_bytes_ = slot_bytes;
  a->slot_count_ = slot_count;
  for (size_t i = 0; i < slot_count; ++i) a->free_.push_back(a->memory_.data() + i * slot_bytes);
  a->refs_.assign(slot_count, 0);
  return a;
}

std::byte* StagingArena::TakeFreeSlotLocked(std::unique_lock<std::mutex>& lock) {
  auto ready = [&] {
    if (!free_.empty()) return true;
    // A packing slot whose requests have all been released is given back
    // rather than held while a whole one is awaited.
    if (packing_ == nullptr || refs_[SlotIndex(packing_)] != 1) return false;
    DropRefLocked(packing_);
    packing_ = nullptr;
    return true;
  };
  if (!ready()) {
    if (on_full_) {
      lock.unlock();
      on_full_();
      lock.lock();
    }
    cv_.wait(lock, ready);
  }
  std::byte* s = free_.back();
  free_.pop_back();
  refs_[SlotIndex(s)] = 1;
  return s;
}

std::byte* StagingArena::Acquire(size_t bytes) {
  std::unique_lock<std::mutex> lock(mu_);
  if (bytes > slot_bytes_ / 2) {
    // A long request (a whole block, or a long last block of a piece) goes
    // where the packing slot still has room for it...
    if (packing_ != nullptr && packed_ + bytes <= slot_bytes_) return PlaceLocked(bytes);
    // ...or into a slot of its own. When what that slot has left exceeds
    // what the packing slot has left, it becomes the packing slot: the
    // short requests after it fill its rest, so a save's tails do not each
    // waste most of a slot and an arena of a save's size holds the save.
    std::byte* s = TakeFreeSlotLocked(lock);  // this request's reference
    if (bytes < slot_bytes_ && (packing_ == nullptr || bytes < packed_)) {
      const bool freed = packing_ != nullptr && DropRefLocked(packing_);
      packing_ = s;
      packed_ = bytes;
      ++refs_[SlotIndex(s)];  // the packer's
      if (freed) {
        lock.unlock();
        cv_.notify_all();
      }
    }
    return s;
  }
  while (packing_ == nullptr || packed_ + bytes > slot_bytes_) {
    if (packing_ != nullptr) {
      DropRefLocked(packing_);
      packing_ = nullptr;  // before waiting: the wait may reclaim packing_
    }
    std::byte* fresh = TakeFreeSlotLocked(lock);  // holds the packer's reference
    if (packing_ == nullptr) {
      packing_ = fresh;
      packed_ = 0;
      break;
    }
    // Another caller installed a packing slot while this one waited: give
    // this one back (it would otherwise never be freed) and try theirs.
    if (DropRefLocked(fresh)) cv_.notify_one();
  }
  return PlaceLocked(bytes);
}

std::byte* StagingArena::PlaceLocked(size_t bytes) {
  std::byte* p = packing_ + packed_;
  packed_ += bytes;
  ++refs_[SlotIndex(packing_)];
  return p;
}

bool StagingArena::DropRefLocked(const std::byte* p) {
  const size_t i = SlotIndex(p);
  if (--refs_[i] != 0) return false;
  free_.push_back(memory_.data() + i * slot_bytes_);
  return true;
}

void StagingArena::Release(std::byte* p) {
  bool freed, reclaimable;
  {
    std::lock_guard<std::mutex> lock(mu_);
    freed = DropRefLocked(p);
    // The packing slot's last request gone: a waiter may take it back.
    reclaimable = packing_ != nullptr && refs_[SlotIndex(packing_)] == 1;
  }
  if (reclaimable) {
    cv_.notify_all();
  } else if (freed) {
    cv_.notify_one();
  }
}

size_t StagingArena::free_slots() const {
  std::lock_guard<std::mutex> lock(mu_);
  return free_.size();
}

}  // namespace ckpt

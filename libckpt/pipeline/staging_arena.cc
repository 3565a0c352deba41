#include "pipeline/staging_arena.h"

#include <algorithm>
#include <cassert>
#include <iterator>

#include "util/errors.h"
#include "util/strings.h"

namespace ckpt {

absl::StatusOr<std::unique_ptr<StagingArena>> StagingArena::Create(size_t max_request, size_t bytes, bool prefault) {
  if (max_request == 0 || max_request % kPage != 0 || bytes % kPage != 0 || bytes < max_request) {
    return absl::InvalidArgumentError(StrCat("staging arena of ", bytes, " bytes for requests of up to ", max_request,
                                             " (want multiples of ", kPage, ", the arena no smaller than a request)"));
  }
  std::unique_ptr<StagingArena> a(new StagingArena());
  CKPT_ASSIGN_OR_RETURN(a->memory_, AlignedBuffer::Allocate(bytes, prefault, /*huge=*/true));
  a->max_request_ = max_request;
  a->pages_.assign(bytes / kPage, 0);
  a->free_.emplace(0, bytes);
  a->free_bytes_ = bytes;
  return a;
}

int64_t StagingArena::TakeLocked(size_t bytes) {
  if (free_bytes_ < bytes) return -1;
  auto carve = [&](std::map<size_t, size_t>::iterator it, size_t at) {
    const size_t begin = it->first, end = it->first + it->second;
    free_.erase(it);
    if (at > begin) free_.emplace(begin, at - begin);
    if (at + bytes < end) free_.emplace(at + bytes, end - at - bytes);
    pages_[at / kPage] = static_cast<uint32_t>(bytes / kPage);
    free_bytes_ -= bytes;
    cursor_ = at + bytes == memory_.size() ? 0 : at + bytes;
    return static_cast<int64_t>(at);
  };
  // The extent the cursor lies in, from the cursor on.
  auto after = free_.upper_bound(cursor_);
  if (after != free_.begin()) {
    auto in = std::prev(after);
    if (in->first + in->second >= cursor_ + bytes) return carve(in, cursor_);
  }
  // Then the first long enough from there on, wrapping round.
  for (auto it = after; it != free_.end(); ++it) {
    if (it->second >= bytes) return carve(it, it->first);
  }
  for (auto it = free_.begin(); it != after; ++it) {
    if (it->second >= bytes) return carve(it, it->first);
  }
  return -1;
}

std::byte* StagingArena::Acquire(size_t bytes) {
  bytes = std::max(kPage, (bytes + kPage - 1) / kPage * kPage);
  assert(bytes <= max_request_);
  std::unique_lock<std::mutex> lock(mu_);
  int64_t at = TakeLocked(bytes);
  if (at < 0) {
    if (on_full_) {
      lock.unlock();
      on_full_();
      lock.lock();
    }
    cv_.wait(lock, [&] { return (at = TakeLocked(bytes)) >= 0; });
  }
  return memory_.data() + at;
}

void StagingArena::Release(std::byte* p) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    size_t at = static_cast<size_t>(p - memory_.data());
    assert(at % kPage == 0 && at < memory_.size() && pages_[at / kPage] != 0);
    size_t len = static_cast<size_t>(pages_[at / kPage]) * kPage;
    pages_[at / kPage] = 0;
    free_bytes_ += len;
    auto next = free_.lower_bound(at);
    if (next != free_.end() && next->first == at + len) {
      len += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == at) {
        prev->second += len;
        len = 0;
      }
    }
    if (len != 0) free_.emplace_hint(next, at, len);
  }
  // Waiters want different lengths: each checks for its own.
  cv_.notify_all();
}

size_t StagingArena::free_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return free_bytes_;
}

size_t StagingArena::largest_free() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t best = 0;
  for (const auto& [at, len] : free_) best = std::max(best, len);
  return best;
}

}  // namespace ckpt

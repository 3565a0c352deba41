// The save engine's staging arena on its own: placement, merging of
// released room, the bound on fragmentation, and backpressure.
#include "pipeline/staging_arena.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "testutil/test_util.h"

namespace ckpt::testing {
namespace {

constexpr size_t kFrame = 64 << 10;  // the longest request
constexpr size_t kPage = StagingArena::kPage;

TEST(StagingArena, RefusesImpossibleShapes) {
  EXPECT_FALSE(StagingArena::Create(0, 4 * kFrame, false).ok());
  EXPECT_FALSE(StagingArena::Create(1000, 4 * kFrame, false).ok());
  EXPECT_FALSE(StagingArena::Create(kFrame, kFrame - kPage, false).ok()) << "smaller than one request";
  EXPECT_FALSE(StagingArena::Create(kFrame, 4 * kFrame + 100, false).ok()) << "not whole pages";
}

// An Acquire that finds no room says so before it waits (the save engine
// wakes its workers then); the hook runs without the arena's lock, so it may
// release something itself.
TEST(StagingArena, AFullArenaCallsItsHookBeforeWaiting) {
  auto arena = StagingArena::Create(kFrame, 2 * kFrame, false);
  ASSERT_OK(arena);
  std::byte* a = (*arena)->Acquire(kFrame);
  std::byte* b = (*arena)->Acquire(kFrame);
  int calls = 0;
  (*arena)->SetOnFull([&] {
    ++calls;
    (*arena)->Release(a);
  });
  std::byte* c = (*arena)->Acquire(kFrame);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(c, a);
  (*arena)->Release(b);
  std::byte* d = (*arena)->Acquire(kFrame);  // there was room: no call
  EXPECT_EQ(calls, 1);
  (*arena)->Release(c);
  (*arena)->Release(d);
  EXPECT_EQ((*arena)->free_bytes(), 2 * kFrame);
  EXPECT_EQ((*arena)->largest_free(), 2 * kFrame);
}

// Requests of any length lie back to back: a save's short last blocks
// waste nothing, so an arena exactly the size of a save's frames holds them
// all. (With one slot per long request, 40 KiB tails of 64 KiB slots wasted
// a third of the arena, and a save sized to fit ran out of room at its end
// and waited for the disk.)
TEST(StagingArena, RequestsOfAnyLengthLieBackToBack) {
  const std::vector<size_t> lengths = {kFrame, 40 << 10, 20 << 10, kFrame, 36 << 10, 4 << 10, 60 << 10, 28 << 10};
  size_t total = 0;
  for (size_t n : lengths) total += n;
  ASSERT_EQ(total % kPage, 0u);
  auto arena = StagingArena::Create(kFrame, total, false);
  ASSERT_OK(arena);
  StagingArena& a = **arena;
  int calls = 0;
  a.SetOnFull([&] { ++calls; });
  std::vector<std::byte*> got;
  size_t at = 0;
  for (size_t n : lengths) {
    got.push_back(a.Acquire(n));
    EXPECT_EQ(got.back() - a.data(), static_cast<ptrdiff_t>(at)) << n;
    at += n;
  }
  EXPECT_EQ(calls, 0) << "the arena ran out of room with every request fitting";
  EXPECT_EQ(a.free_bytes(), 0u);
  for (std::byte* p : got) a.Release(p);
  EXPECT_EQ(a.free_bytes(), total);
  EXPECT_EQ(a.largest_free(), total) << "released neighbours merge";
}

// The cursor moves on past released room and wraps at the end, so blocks
// freed in the order they were written leave the arena whole: a ring.
TEST(StagingArena, TheCursorWrapsAndReleasedRoomMerges) {
  auto arena = StagingArena::Create(kFrame, 3 * kFrame, false);
  ASSERT_OK(arena);
  StagingArena& a = **arena;
  std::byte* p0 = a.Acquire(kFrame);
  std::byte* p1 = a.Acquire(kFrame);
  a.Release(p0);
  std::byte* p2 = a.Acquire(kFrame);
  EXPECT_EQ(p2 - a.data(), static_cast<ptrdiff_t>(2 * kFrame)) << "placed at the cursor, not in the freed room";
  std::byte* p3 = a.Acquire(kFrame);
  EXPECT_EQ(p3, p0) << "wrapped to the start";
  a.Release(p1);
  a.Release(p3);
  EXPECT_EQ(a.largest_free(), 2 * kFrame) << "the first two frames merged";
  // A request longer than the room at the cursor goes to the next run that
  // fits: the cursor is at kFrame, inside the free run [0, 2 * kFrame).
  std::byte* half = a.Acquire(kFrame / 2);
  EXPECT_EQ(half - a.data(), static_cast<ptrdiff_t>(kFrame));
  std::byte* whole = a.Acquire(kFrame);
  EXPECT_EQ(whole, a.data()) << "the room after the cursor is too short: the run before it";
  a.Release(p2);
  a.Release(half);
  a.Release(whole);
  EXPECT_EQ(a.free_bytes(), 3 * kFrame);
  EXPECT_EQ(a.largest_free(), 3 * kFrame);
}

TEST(StagingArena, AFullArenaMakesTheCallerWaitUntilRoomIsReleased) {
  auto arena = StagingArena::Create(kFrame, 2 * kFrame, false);
  ASSERT_OK(arena);
  StagingArena& a = **arena;
  std::byte* first = a.Acquire(kFrame);
  std::byte* second = a.Acquire(kFrame);
  std::atomic<bool> got{false};
  auto third = std::async(std::launch::async, [&] {
    std::byte* p = a.Acquire(kFrame);
    got = true;
    return p;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(got) << "nothing was free";
  a.Release(second);
  ASSERT_EQ(third.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(third.get(), second) << "the released room is what is handed out";
  a.Release(first);
}

// A waiter for a whole frame is not served by scattered free pages: it is
// woken when releases merge into a run long enough.
TEST(StagingArena, AWaiterIsServedOnceFreedRoomMergesIntoARunLongEnough) {
  auto arena = StagingArena::Create(kFrame, 2 * kFrame, false);
  ASSERT_OK(arena);
  StagingArena& a = **arena;
  std::vector<std::byte*> quarters;
  for (int i = 0; i < 8; ++i) quarters.push_back(a.Acquire(kFrame / 4));
  auto waiter = std::async(std::launch::async, [&] { return a.Acquire(kFrame); });
  // Every other quarter: half the arena free, no run longer than a quarter.
  for (int i = 0; i < 8; i += 2) a.Release(quarters[i]);
  EXPECT_EQ(a.free_bytes(), kFrame);
  EXPECT_EQ(a.largest_free(), kFrame / 4);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(waiter.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  // Quarters 1 and 3 join 0..4 into one run of a whole frame.
  a.Release(quarters[1]);
  EXPECT_EQ(waiter.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  a.Release(quarters[3]);
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(5)), std::future_status::ready)
      << "freed room merged into a whole frame, and the waiter was not served";
  std::byte* got = waiter.get();
  EXPECT_EQ(got, quarters[0]);
  a.Release(got);
  for (int i = 5; i < 8; i += 2) a.Release(quarters[i]);
  EXPECT_EQ(a.free_bytes(), 2 * kFrame);
}

// The bound the save engine relies on: whatever h extents of up to a frame
// stay held, and wherever they lie, an arena of at least 2h + 1 frames has a
// whole frame free once everything else is released.
TEST(StagingArena, HeldExtentsBelowTheBoundAlwaysLeaveAWholeFrame) {
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    const size_t held = 1 + rng() % 6;
    const size_t frames = 2 * held + 1;
    auto arena = StagingArena::Create(kFrame, frames * kFrame, false);
    ASSERT_OK(arena);
    StagingArena& a = **arena;
    // Fill the arena with requests of random lengths, keep `held` of them
    // chosen at random, release the rest.
    std::vector<std::byte*> all;
    size_t used = 0;
    while (true) {
      const size_t n = kPage * (1 + rng() % (kFrame / kPage));
      if (a.largest_free() < n) break;
      all.push_back(a.Acquire(n));
      used += n;
    }
    std::shuffle(all.begin(), all.end(), rng);
    const size_t keep = std::min(held, all.size());
    for (size_t i = keep; i < all.size(); ++i) a.Release(all[i]);
    EXPECT_GE(a.largest_free(), kFrame) << "round " << round << ": " << keep << " held in " << frames << " frames";
    for (size_t i = 0; i < keep; ++i) a.Release(all[i]);
    EXPECT_EQ(a.free_bytes(), frames * kFrame);
  }
}

// Many threads acquiring and releasing mixed sizes never get overlapping
// memory and leave every slot free.
TEST(StagingArena, ConcurrentUseNeverOverlapsAndLeavesNothingHeld) {
  auto arena = StagingArena::Create(kFrame, 3 * kFrame, false);
  ASSERT_OK(arena);
  StagingArena& a = **arena;
  std::atomic<int> overlaps{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        // Whole frames, long tails and short ones.
        const size_t bytes = (i + t) % 3 == 0   ? kFrame
                             : (i + t) % 3 == 1 ? 4096 * static_cast<size_t>(9 + (i % 4))
                                                : 4096 * static_cast<size_t>(1 + (i % 4));
        std::byte* p = a.Acquire(bytes);
        const auto tag = static_cast<std::byte>(t * 16 + (i & 15));
        std::memset(p, static_cast<int>(tag), bytes);
        std::this_thread::yield();
        for (size_t k = 0; k < bytes; k += 512) {
          if (p[k] != tag) {
            ++overlaps;
            break;
          }
        }
        a.Release(p);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(a.free_bytes(), 3 * kFrame);
  EXPECT_EQ(a.largest_free(), 3 * kFrame) << "everything released merged back into one run";
}

}  // namespace
}  // namespace ckpt::testing

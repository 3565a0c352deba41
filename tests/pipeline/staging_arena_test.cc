// The save engine's staging arena on its own: packing, reference counts and
// backpressure.
#include "pipeline/staging_arena.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <set>
#include <thread>
#include <vector>

#include "testutil/test_util.h"

namespace ckpt::testing {
namespace {

constexpr size_t kSlot = 64 << 10;

TEST(StagingArena, RefusesImpossibleShapes) {
  EXPECT_FALSE(StagingArena::Create(0, 4, false).ok());
  EXPECT_FALSE(StagingArena::Create(1000, 4, false).ok());
  EXPECT_FALSE(StagingArena::Create(kSlot, 0, false).ok());
}

// An Acquire that finds no free slot says so before it waits (the save
// engine wakes its workers then); the hook runs without the arena's lock,
// so it may free a slot itself.
TEST(StagingArena, AFullArenaCallsItsHookBeforeWaiting) {
  auto arena = StagingArena::Create(kSlot, 2, false);
  ASSERT_OK(arena);
  std::byte* a = (*arena)->Acquire(kSlot);
  std::byte* b = (*arena)->Acquire(kSlot);
  int calls = 0;
  (*arena)->SetOnFull([&] {
    ++calls;
    (*arena)->Release(a);
  });
  std::byte* c = (*arena)->Acquire(kSlot);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(c, a);
  (*arena)->Release(b);
  std::byte* d = (*arena)->Acquire(kSlot);  // a slot was free: no call
  EXPECT_EQ(calls, 1);
  (*arena)->Release(c);
  (*arena)->Release(d);
  EXPECT_EQ((*arena)->free_slots(), 2u);
}

TEST(StagingArena, LargeRequestsTakeASlotEachSmallOnesArePacked) {
  auto arena = StagingArena::Create(kSlot, 4, false);
  ASSERT_OK(arena);
  StagingArena& a = **arena;
  EXPECT_EQ(a.size(), 4 * kSlot);
  std::byte* whole = a.Acquire(kSlot);
  EXPECT_EQ(a.free_slots(), 3u);
  // Eight small requests share one slot, back to back.
  std::vector<std::byte*> small;
  for (int i = 0; i < 8; ++i) small.push_back(a.Acquire(kSlot / 8));
  EXPECT_EQ(a.free_slots(), 2u);
  for (int i = 1; i < 8; ++i) EXPECT_EQ(small[i] - small[i - 1], static_cast<ptrdiff_t>(kSlot / 8)) << i;
  EXPECT_EQ((small[0] - a.data()) % static_cast<ptrdiff_t>(kSlot), 0);
  // The ninth does not fit: a new packing slot.
  std::byte* ninth = a.Acquire(kSlot / 8);
  EXPECT_EQ(a.free_slots(), 1u);
  EXPECT_NE((ninth - a.data()) / static_cast<ptrdiff_t>(kSlot), (small[0] - a.data()) / static_cast<ptrdiff_t>(kSlot));
  // Every request lies inside the arena and none overlap.
  std::set<std::byte*> seen(small.begin(), small.end());
  seen.insert(whole);
  seen.insert(ninth);
  EXPECT_EQ(seen.size(), 10u);
  // The full packed slot is free once all eight of its requests are.
  for (int i = 0; i < 7; ++i) a.Release(small[i]);
  EXPECT_EQ(a.free_slots(), 1u);
  a.Release(small[7]);
  EXPECT_EQ(a.free_slots(), 2u);
  a.Release(whole);
  EXPECT_EQ(a.free_slots(), 3u);
  a.Release(ninth);  // the packing slot stays the packer's until it is needed
  EXPECT_EQ(a.free_slots(), 3u);
}

// Last blocks of more than half a slot: each used to take a slot of its own
// and waste the rest, so an arena of a save's size did not hold the save.
// Now the rest of such a slot is packed: three long and three short tails
// (40 and 20 KiB of 64) take three slots, not four, and a fourth short one
// still fits where a long one left room.
TEST(StagingArena, TheRestOfALongRequestsSlotIsPacked) {
  auto arena = StagingArena::Create(kSlot, 4, false);
  ASSERT_OK(arena);
  StagingArena& a = **arena;
  std::vector<std::byte*> held;
  for (int i = 0; i < 3; ++i) {
    std::byte* longer = a.Acquire(40 << 10);
    std::byte* shorter = a.Acquire(20 << 10);
    EXPECT_EQ(shorter - longer, 40 << 10) << i << ": the short one follows the long one in its slot";
    held.push_back(longer);
    held.push_back(shorter);
  }
  EXPECT_EQ(a.free_slots(), 1u);
  // A short one fills the packing slot's last 4 KiB.
  std::byte* small = a.Acquire(4 << 10);
  EXPECT_EQ(small - held[5], 20 << 10);
  EXPECT_EQ(a.free_slots(), 1u);
  // A long one that fits nowhere takes the last slot; the packing slot
  // stays the fuller one's unless the new one leaves more room.
  std::byte* last = a.Acquire(36 << 10);
  EXPECT_EQ((last - a.data()) % static_cast<ptrdiff_t>(kSlot), 0);
  EXPECT_EQ(a.free_slots(), 0u);
  std::byte* after = a.Acquire(28 << 10);
  EXPECT_EQ(after - last, 36 << 10) << "packed after the new slot's request (28 KiB left there, 0 in the old)";
  held.push_back(small);
  held.push_back(last);
  held.push_back(after);
  for (std::byte* p : held) a.Release(p);
  // Every slot comes back (the packing slot once a whole request needs it).
  std::vector<std::byte*> all;
  for (int i = 0; i < 4; ++i) all.push_back(a.Acquire(kSlot));
  for (std::byte* p : all) a.Release(p);
  EXPECT_EQ(a.free_slots(), 4u);
  // A long one goes where the packing slot has room for it.
  std::byte* first = a.Acquire(8 << 10);
  std::byte* fits = a.Acquire(40 << 10);
  EXPECT_EQ(fits - first, 8 << 10);
  EXPECT_EQ(a.free_slots(), 3u);
  a.Release(first);
  a.Release(fits);
}

TEST(StagingArena, AFullArenaMakesTheCallerWaitUntilASlotIsReleased) {
  auto arena = StagingArena::Create(kSlot, 2, false);
  ASSERT_OK(arena);
  StagingArena& a = **arena;
  std::byte* first = a.Acquire(kSlot);
  std::byte* second = a.Acquire(kSlot);
  std::atomic<bool> got{false};
  auto third = std::async(std::launch::async, [&] {
    std::byte* p = a.Acquire(kSlot);
    got = true;
    return p;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(got) << "nothing was free";
  a.Release(second);
  ASSERT_EQ(third.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(third.get(), second) << "the released slot is the one handed out";
  a.Release(first);
}

// Regression: a waiter for a whole slot was woken only when a slot became
// free, not when the packing slot's last request was released (the slot it
// may take back), so it waited for an unrelated block to finish.
TEST(StagingArena, AWaiterTakesBackThePackingSlotOnceItEmpties) {
  auto arena = StagingArena::Create(kSlot, 2, false);
  ASSERT_OK(arena);
  StagingArena& a = **arena;
  std::byte* small = a.Acquire(4096);   // slot A, being packed
  std::byte* whole = a.Acquire(kSlot);  // slot B, held throughout
  auto waiter = std::async(std::launch::async, [&] { return a.Acquire(kSlot); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(waiter.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  a.Release(small);
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(5)), std::future_status::ready)
      << "the emptied packing slot was not handed to the waiter";
  std::byte* got = waiter.get();
  EXPECT_EQ((got - a.data()) / static_cast<ptrdiff_t>(kSlot), (small - a.data()) / static_cast<ptrdiff_t>(kSlot));
  a.Release(got);
  a.Release(whole);
  EXPECT_EQ(a.free_slots(), 2u);
}

// Many threads acquiring and releasing mixed sizes never get overlapping
// memory and leave every slot free.
TEST(StagingArena, ConcurrentUseNeverOverlapsAndLeavesNothingHeld) {
  auto arena = StagingArena::Create(kSlot, 3, false);
  ASSERT_OK(arena);
  StagingArena& a = **arena;
  std::atomic<int> overlaps{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        // Whole slots, long tails (36-48 KiB: a slot of their own whose rest
        // may be packed) and short ones.
        const size_t bytes = (i + t) % 3 == 0   ? kSlot
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
  // Everything released; the packing slot is reclaimed by the next whole request.
  std::vector<std::byte*> all;
  for (int i = 0; i < 3; ++i) all.push_back(a.Acquire(kSlot));
  for (std::byte* p : all) a.Release(p);
  EXPECT_EQ(a.free_slots(), 3u);
}

}  // namespace
}  // namespace ckpt::testing

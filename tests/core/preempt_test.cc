// Preemption saves through the C++ API: a signal reaches one of two ranks
// mid-training; at the next step boundary both agree, save that step within
// the deadline (memory level, then durable), and the step restores. A
// deadline already spent abandons the save, which is never committed.
#include "ckpt/preempt.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "ckpt/checkpointer.h"
#include "ckpt/communicator.h"
#include "testutil/test_util.h"
#include "util/strings.h"

namespace ckpt::testing {
namespace {

const TensorSpec kSpec{"w", DType::kF32, {128, 256}};

TEST(Preemption, RanksAgreeAtTheNextStepAndCommitItBeforeTheDeadline) {
  static int runs = 0;
  ++runs;
  ASSERT_OK(WatchForPreemption({SIGUSR1}));
  EXPECT_FALSE(WatchForPreemption({SIGKILL}).ok());
  TempDir dir;
  ClearPreemption();
  auto comms = CreateLocalCommunicators(2);
  std::atomic<int> agreed_at[2] = {{-1}, {-1}};
  std::vector<PreemptionSave> done(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      CheckpointerOptions o;
      o.uri = dir.Join("root");
      o.rank = r;
      o.world_size = 2;
      o.communicator = comms[r];
      o.engine_options.staging_bytes = 1 << 20;
      // One memory level, shared by the two ranks (and new for each run).
      o.memory_storage = *OpenStorage(StrCat("mem://preempt-memory-", getpid(), "-", runs));
      auto cp = Checkpointer::Open(o);
      ASSERT_OK(cp);
      std::vector<OwnedShard> shard = {MakeShard(kSpec, Box({r * 64, 0}, {64, 256}), 7)};
      const State state = StateOf(shard);
      for (int step = 1; step <= 200; ++step) {
        if (step == 5 && r == 1) raise(SIGUSR1);  // the scheduler's signal, to one rank's process
        auto now = AgreeOnPreemption(comms[r].get(), 30);
        ASSERT_OK(now);
        if (*now) {
          agreed_at[r] = step;
          done[r] = SaveForPreemption(**cp, step, state, 20);
          return;
        }
      }
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_TRUE(PreemptionRequested());
  EXPECT_GE(SecondsSincePreemption(), 0);
  ClearPreemption();
  EXPECT_FALSE(PreemptionRequested());
  EXPECT_EQ(SecondsSincePreemption(), -1);
  // Both ranks stop at the step after the signal (the one signalled at its
  // step 5 boundary agrees at 5 itself; every rank agrees at the same step).
  EXPECT_EQ(agreed_at[0].load(), agreed_at[1].load());
  EXPECT_GE(agreed_at[0].load(), 5);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(done[r].committed, (std::vector<SaveLevel>{SaveLevel::kMemory, SaveLevel::kDurable})) << r;
    EXPECT_FALSE(done[r].abandoned);
    EXPECT_LT(done[r].seconds, 20);
  }
  auto storage = OpenStorage(dir.Join("root"));
  ASSERT_OK(storage);
  auto latest = LatestCommittedStep(**storage);
  ASSERT_OK(latest);
  EXPECT_EQ(*latest, agreed_at[0].load());
  std::vector<OwnedShard> out = {EmptyShard(kSpec, Box::Whole(kSpec.shape))};
  State target = StateOf(out);
  ASSERT_OK(LoadCheckpoint(**storage, target, *latest));
  EXPECT_EQ(Mismatches(out[0], 7), 0);
}

TEST(Preemption, ASaveThatCannotMeetTheDeadlineIsAbandonedUncommitted) {
  ClearPreemption();  // the deadline counts from this call
  TempDir dir;
  CheckpointerOptions o;
  // A device of 1 MB/s: 128 KiB takes longer than the deadline.
  o.uri = StrCat("faulty://", dir.Join("root"), "?fault.write_bandwidth=1M&direct=0");
  o.engine_options.staging_bytes = 1 << 20;
  o.engine_options.block_size = 64 << 10;
  auto cp = Checkpointer::Open(o);
  ASSERT_OK(cp);
  std::vector<OwnedShard> shard = {MakeShard(kSpec, Box::Whole(kSpec.shape), 3)};
  const PreemptionSave done = SaveForPreemption(**cp, 1, StateOf(shard), 0.05);
  EXPECT_TRUE(done.committed.empty());
  EXPECT_TRUE(done.abandoned);
  // Nothing committed when it returned: a process exiting now leaves a
  // partial step for the next start to collect.
  EXPECT_TRUE(absl::IsNotFound(LatestCommittedStep((*cp)->storage()).status()));
  (*cp)->WaitAll().IgnoreError();
}

}  // namespace
}  // namespace ckpt::testing

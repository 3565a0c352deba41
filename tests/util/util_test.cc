// The small shared parts of libckpt/util: the task pool the backends run
// their background work on, and the one CPU-feature probe.
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "testutil/test_util.h"
#include "util/background.h"
#include "util/cpu.h"
#include "util/task_pool.h"

namespace ckpt::testing {
namespace {

// Every task runs, on the pool's threads, several at once; destroying the
// pool runs what is still queued first.
TEST(TaskPool, RunsEveryTaskAndDrainsTheQueueOnDestruction) {
  std::atomic<int> ran{0}, running{0}, most{0};
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<bool> on_caller{false};
  {
    TaskPool pool(4);
    for (int i = 0; i < 200; ++i) {
      pool.Submit([&] {
        const int now = ++running;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        if (std::this_thread::get_id() == caller) on_caller = true;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        --running;
        ++ran;
      });
    }
  }
  EXPECT_EQ(ran.load(), 200);
  EXPECT_GT(most.load(), 1) << "the tasks ran one at a time";
  EXPECT_LE(most.load(), 4);
  EXPECT_FALSE(on_caller.load());
}

// With a bound, Submit waits while that many tasks are queued.
TEST(TaskPool, ABoundedQueueMakesSubmitWait) {
  TaskPool pool(1, 2);
  std::atomic<bool> release{false};
  std::atomic<int> ran{0};
  auto blocker = [&] {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ++ran;
  };
  pool.Submit(blocker);  // runs, and holds the one thread
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  pool.Submit(blocker);
  pool.Submit(blocker);  // two queued: the bound
  std::atomic<bool> fourth_in{false};
  std::thread submitter([&] {
    pool.Submit([&] { ++ran; });
    fourth_in = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(fourth_in.load()) << "Submit did not wait for room";
  release = true;
  submitter.join();
  EXPECT_TRUE(fourth_in.load());
  for (int i = 0; i < 1000 && ran < 4; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(ran.load(), 4);
}

// Each thread runs the start hook once, before any task, on itself: what
// lowers a background thread's priority reaches every thread that runs tasks.
TEST(TaskPool, EachThreadRunsTheStartHookBeforeItsTasks) {
  std::mutex mu;
  std::set<std::thread::id> started;
  std::atomic<int> before_start{0}, ran{0};
  {
    TaskPool pool(3, 0, [&] {
      std::lock_guard<std::mutex> lock(mu);
      EXPECT_TRUE(started.insert(std::this_thread::get_id()).second) << "the hook ran twice on one thread";
    });
    for (int i = 0; i < 60; ++i) {
      pool.Submit([&] {
        {
          std::lock_guard<std::mutex> lock(mu);
          if (!started.count(std::this_thread::get_id())) ++before_start;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(300));
        ++ran;
      });
    }
  }
  EXPECT_EQ(ran.load(), 60);
  EXPECT_EQ(before_start.load(), 0);
  EXPECT_EQ(started.size(), 3u);
}

// A pool destroyed as soon as its last task says it is done, while the
// thread that submitted that task may still be returning from Submit (how
// the frame reader's decoders end: the task was submitted from an I/O
// completion). ThreadSanitizer found Submit still notifying the pool's
// condition variable as the destructor destroyed it.
TEST(TaskPool, MayBeDestroyedAsSoonAsItsLastTaskSaysItIsDone) {
  for (int round = 0; round < 200; ++round) {
    auto pool = std::make_unique<TaskPool>(2);
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::thread submitter([&] {
      pool->Submit([&] {
        std::lock_guard<std::mutex> lock(mu);
        done = true;
        cv.notify_all();
      });
    });
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return done; });
    }
    pool.reset();
    submitter.join();
  }
}

// The probe can be overridden (the portable paths' tests), and put back.
TEST(Cpu, FeaturesCanBeTurnedOffAndBack) {
  const CpuFeatures machine = Cpu();
  const CpuFeatures before = internal::SetCpuForTest(CpuFeatures{});
  EXPECT_EQ(before.avx2, machine.avx2);
  EXPECT_FALSE(Cpu().avx2);
  EXPECT_FALSE(Cpu().avx512f);
  internal::SetCpuForTest(machine);
  EXPECT_EQ(Cpu().avx2, machine.avx2);
  EXPECT_EQ(Cpu().avx512f, machine.avx512f);
}

// A pacer holds what two threads charge to its rate: 0.6 s of CPU at half
// a core takes at least 1.2 s less the slack, and not much more.
TEST(Background, PacerHoldsTheThreadsToTheRate) {
  RatePacer pacer(0.5, 0.01);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 30; ++i) pacer.Charge(0.01);
    });
  }
  for (std::thread& t : threads) t.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(wall, (0.6 - 0.01) / 0.5 - 0.01);
  EXPECT_LT(wall, 2.5);
  RatePacer none(0, 0);
  none.Charge(100);  // no rate: no wait
}

// Background threads are batch threads at nice 10 by default, or idle ones,
// and in the idle I/O class where the kernel has it; nice 0 leaves a
// thread as it was.
TEST(Background, ThreadsAreLoweredAsAsked) {
  auto in_thread = [](BackgroundPriority p) {
    int policy = -1, nice = -100, io = -2;
    std::thread t([&] {
      LowerThisThread(p);
      policy = sched_getscheduler(0);
      errno = 0;
      nice = getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
      io = ThisThreadIoClass();
    });
    t.join();
    return std::make_tuple(policy, nice, io);
  };
  auto [policy, nice, io] = in_thread(BackgroundPriority{});
  EXPECT_EQ(policy, SCHED_BATCH);
  EXPECT_EQ(nice, 10);
  if (io >= 0) EXPECT_EQ(io, 3);  // IOPRIO_CLASS_IDLE
  std::tie(policy, nice, io) = in_thread(BackgroundPriority{10, true, true});
  EXPECT_EQ(policy, SCHED_IDLE);
  std::tie(policy, nice, io) = in_thread(BackgroundPriority{0, false, true});
  EXPECT_EQ(policy, SCHED_OTHER);
  EXPECT_EQ(nice, 0);
  if (io >= 0) EXPECT_NE(io, 3);
}

}  // namespace
}  // namespace ckpt::testing

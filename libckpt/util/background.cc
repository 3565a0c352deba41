#include "util/background.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

namespace ckpt {

namespace {

// linux/ioprio.h, which glibc does not wrap.
constexpr int kIoprioWhoProcess = 1;  // a thread id acts on that thread
constexpr int kIoprioClassShift = 13;
constexpr int kIoprioClassIdle = 3;

}  // namespace

void LowerThisThread(const BackgroundPriority& p) {
  const sched_param none{};
  if (p.idle) {
    (void)sched_setscheduler(0, SCHED_IDLE, &none);
  } else if (p.nice > 0) {
    // A batch thread never preempts a running one when it wakes: without
    // it, the workers woken as a Save's staging ended took the caller's
    // core before it returned, and its stall grew by the wait to run again.
    (void)sched_setscheduler(0, SCHED_BATCH, &none);  // this thread; keeps its nice value
    (void)setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), p.nice);
  }
  if (p.io_idle && (p.idle || p.nice > 0)) {
    (void)syscall(SYS_ioprio_set, kIoprioWhoProcess, static_cast<int>(syscall(SYS_gettid)),
                  kIoprioClassIdle << kIoprioClassShift);
  }
}

bool ThisThreadIsSchedIdle() { return sched_getscheduler(0) == SCHED_IDLE; }

int ThisThreadIoClass() {
  const long v = syscall(SYS_ioprio_get, kIoprioWhoProcess, static_cast<int>(syscall(SYS_gettid)));
  return v < 0 ? -1 : static_cast<int>(v >> kIoprioClassShift);
}

double ThisThreadCpuSeconds() {
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

RatePacer::RatePacer(double rate, double burst) : rate_(rate), burst_(burst), credit_(burst), last_(Clock::now()) {}

void RatePacer::Charge(double amount) {
  if (rate_ <= 0 || amount <= 0) return;
  double wait_s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const Clock::time_point now = Clock::now();
    credit_ = std::min(burst_, credit_ + std::chrono::duration<double>(now - last_).count() * rate_);
    last_ = now;
    credit_ -= amount;
    wait_s = credit_ < 0 ? -credit_ / rate_ : 0;
  }
  if (wait_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait_s));
}

}  // namespace ckpt

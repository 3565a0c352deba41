// Background threads that yield to the trainer: a lower CPU priority (nice
// and SCHED_BATCH, or SCHED_IDLE), the idle I/O class, and a pacer that
// holds their combined CPU time to a budget of cores.
#ifndef CKPT_UTIL_BACKGROUND_H_
#define CKPT_UTIL_BACKGROUND_H_

#include <chrono>
#include <mutex>

namespace ckpt {

struct BackgroundPriority {
  int nice = 10;        ///< 0: the caller's priority and policy
  bool idle = false;    ///< SCHED_IDLE instead of nice + SCHED_BATCH
  bool io_idle = true;  ///< the idle I/O class
};

/// Applies `p` to the calling thread. What the kernel refuses (a sandbox
/// without sched_setscheduler, a kernel without ioprio) is left as it was.
void LowerThisThread(const BackgroundPriority& p);

/// Whether the calling thread runs as SCHED_IDLE, and its I/O class (the
/// kernel's IOPRIO_CLASS_*; -1 when it cannot say): for tests.
bool ThisThreadIsSchedIdle();
int ThisThreadIoClass();

/// Seconds of CPU the calling thread has used.
double ThisThreadCpuSeconds();

/// Holds what threads report (CPU seconds, bytes sent) to `rate` per second
/// on average: a token bucket refilled at `rate` and holding at most `burst`
/// units. A thread reports what a piece of work took or is about to send
/// (Charge) and sleeps off any debt. Thread-safe.
class RatePacer {
 public:
  RatePacer(double rate, double burst);
  /// Records `amount` and sleeps until the bucket covers it.
  void Charge(double amount);
  double rate() const { return rate_; }

 private:
  using Clock = std::chrono::steady_clock;
  const double rate_;
  const double burst_;
  std::mutex mu_;
  double credit_;  // REQUIRES: mu_; negative: debt
  Clock::time_point last_;
};

}  // namespace ckpt

#endif  // CKPT_UTIL_BACKGROUND_H_

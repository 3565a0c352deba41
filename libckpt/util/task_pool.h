// Threads that run queued tasks in the background: the one worker loop
// (thread, mutex, condition variable, queue, stop) the backends share.
#ifndef CKPT_UTIL_TASK_POOL_H_
#define CKPT_UTIL_TASK_POOL_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/functional/any_invocable.h"

namespace ckpt {

class TaskPool {
 public:
  /// `threads` threads (at least 1), started by the first Submit. Submit
  /// blocks while `max_queued` tasks wait (0: never blocks). Each thread
  /// runs `on_start` first, when given (e.g. to lower its priority).
  explicit TaskPool(int threads, size_t max_queued = 0, std::function<void()> on_start = nullptr);
  /// Runs every task still queued, then joins the threads.
  ~TaskPool();
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  /// Queues `task` to run on one of the threads. Submit is done with the
  /// pool before the task can start, so the pool may be destroyed as soon
  /// as its tasks say they are done, even while the threads that submitted
  /// them (I/O completions) are still returning from Submit.
  void Submit(absl::AnyInvocable<void() &&> task);

 private:
  void Loop();

  const int threads_wanted_;
  const size_t max_queued_;
  const std::function<void()> on_start_;
  std::mutex mu_;
  std::condition_variable work_, room_;
  std::deque<absl::AnyInvocable<void() &&>> tasks_;
  std::vector<std::thread> threads_;
  bool stop_ = false;
};

}  // namespace ckpt

#endif  // CKPT_UTIL_TASK_POOL_H_

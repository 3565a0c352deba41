#include "util/task_pool.h"

#include <algorithm>
#include <utility>

namespace ckpt {

TaskPool::TaskPool(int threads, size_t max_queued, std::function<void()> on_start)
    : threads_wanted_(std::max(1, threads)), max_queued_(max_queued), on_start_(std::move(on_start)) {}

TaskPool::~TaskPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void TaskPool::Submit(absl::AnyInvocable<void() &&> task) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (threads_.empty()) {
      for (int i = 0; i < threads_wanted_; ++i) threads_.emplace_back([this] { Loop(); });
    }
    if (max_queued_ > 0) room_.wait(lock, [&] { return tasks_.size() < max_queued_; });
    tasks_.push_back(std::move(task));
    // Under the lock: no thread can take the task, run it and let the
    // pool's owner destroy the pool while this call still touches it.
    work_.notify_one();
  }
}

void TaskPool::Loop() {
  if (on_start_) on_start_();
  for (;;) {
    absl::AnyInvocable<void() &&> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping, and nothing left to run
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    room_.notify_one();
    std::move(task)();
  }
}

}  // namespace ckpt

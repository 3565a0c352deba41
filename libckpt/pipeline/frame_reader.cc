#include "pipeline/frame_reader.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "codec/codec.h"
#include "util/aligned_buffer.h"
#include "util/errors.h"

namespace ckpt {

absl::Status ReadFrames(
    std::vector<FrameTask>& tasks, const FrameReaderOptions& options,
    const std::function<absl::Status(const FrameTask&, absl::Span<const std::byte>,
                                     BlockCodec&, std::vector<std::byte>&)>& process,
    const std::function<void(const FrameTask&, const absl::Status&)>& on_error,
    const std::function<void(const FrameTask&)>& on_done) {
  if (tasks.empty()) return absl::OkStatus();
  size_t max_frame = 0;
  for (const FrameTask& t : tasks) max_frame = std::max<size_t>(max_frame, t.entry->frame_len);
  const size_t nbuf = std::clamp<size_t>(options.buffer_bytes / std::max<size_t>(max_frame, 1), 2,
                                         std::max<size_t>(2, tasks.size()));
  CKPT_ASSIGN_OR_RETURN(AlignedBuffer pool, AlignedBuffer::Allocate(nbuf * max_frame, true));

  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::byte*> free_bufs;
  for (size_t i = 0; i < nbuf; ++i) free_bufs.push_back(pool.data() + i * max_frame);
  std::deque<std::pair<const FrameTask*, std::byte*>> ready;
  absl::Status first_error;
  bool stop = false;

  auto fail = [&](const FrameTask& t, const absl::Status& s) {
    // REQUIRES: mu held.
    if (first_error.ok()) first_error = s;
    if (on_error) on_error(t, s);
  };

  int workers = options.worker_threads;
  if (workers <= 0) {
    workers = static_cast<int>(std::min(4u, std::max(1u, std::thread::hardware_concurrency())));
  }
  std::vector<std::thread> threads;
  for (int i = 0; i < workers; ++i) {
    threads.emplace_back([&] {
      BlockCodec codec;
      std::vector<std::byte> scratch;
      while (true) {
        std::pair<const FrameTask*, std::byte*> item;
        {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return stop || !ready.empty(); });
          if (ready.empty()) return;
          item = ready.front();
          ready.pop_front();
        }
        absl::Status s = process(*item.first,
                                 absl::Span<const std::byte>(item.second, item.first->entry->frame_len),
                                 codec, scratch);
        std::lock_guard<std::mutex> lock(mu);
        if (!s.ok()) fail(*item.first, s);
        if (on_done) on_done(*item.first);
        free_bufs.push_back(item.second);
        cv.notify_all();
      }
    });
  }

  for (const FrameTask& task : tasks) {
    std::byte* buf;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return !free_bufs.empty(); });
      if (!first_error.ok() && options.stop_on_error) break;
      buf = free_bufs.back();
      free_bufs.pop_back();
    }
    task.file->ReadAsync(task.entry->offset, absl::Span<std::byte>(buf, task.entry->frame_len),
                         [&, t = &task, buf](absl::Status s) {
                           std::lock_guard<std::mutex> lock(mu);
                           if (!s.ok()) {
                             fail(*t, s);
                             if (on_done) on_done(*t);
                             free_bufs.push_back(buf);
                           } else {
                             ready.emplace_back(t, buf);
                           }
                           cv.notify_all();
                         });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return free_bufs.size() == nbuf && ready.empty(); });
    stop = true;
  }
  cv.notify_all();
  for (auto& t : threads) t.join();
  return first_error;
}

}  // namespace ckpt

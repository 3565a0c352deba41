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

absl::Status ReadFrames(std::vector<FrameTask>& tasks, const FrameReaderOptions& options,
                        const std::function<absl::Status(const FrameTask&, absl::Span<const std::byte>, BlockCodec&,
                                                         std::vector<std::byte>&)>& process,
                        const std::function<void(const FrameTask&, const absl::Status&)>& on_error,
                        const std::function<void(const FrameTask&)>& on_done) {
  if (tasks.empty()) return absl::OkStatus();
  // Frames that follow each other in one file are read with one request of
  // up to max_read bytes: fewer, larger requests keep a device's queue full
  // with less per-request work.
  struct Group {
    size_t first = 0;  // tasks[first, last)
    size_t last = 0;
    uint64_t offset = 0;
    uint64_t bytes = 0;
  };
  std::vector<Group> groups;
  uint64_t largest = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const FrameTask& t = tasks[i];
    const uint64_t len = t.entry->frame_len;
    if (!groups.empty()) {
      Group& g = groups.back();
      const FrameTask& prev = tasks[g.last - 1];
      if (prev.file == t.file && g.offset + g.bytes == t.entry->offset && g.bytes + len <= options.max_read_bytes) {
        g.last = i + 1;
        g.bytes += len;
        largest = std::max(largest, g.bytes);
        continue;
      }
    }
    groups.push_back(Group{i, i + 1, t.entry->offset, len});
    largest = std::max(largest, len);
  }
  uint64_t total = 0;
  for (const Group& g : groups) total += g.bytes;
  // The pool holds what is in flight, never more than the whole read.
  const size_t nbuf = static_cast<size_t>(
      std::clamp<uint64_t>(std::min<uint64_t>(options.buffer_bytes, total) / std::max<uint64_t>(largest, 1), 2,
                           std::max<size_t>(2, groups.size())));
  // Not prefaulted: touching the pool first delayed every load's first
  // read; the pages now fault in as reads first fill them, while earlier
  // reads are in flight. On huge pages: every byte loaded is copied into the
  // pool and out of it again, and where the page tables are shadowed by a
  // hypervisor those copies ran several times faster from 2 MiB pages
  // (docs/performance.md, "Figures behind the code").
  CKPT_ASSIGN_OR_RETURN(AlignedBuffer pool, AlignedBuffer::Allocate(nbuf * largest, false, true));

  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::byte*> free_bufs;
  for (size_t i = 0; i < nbuf; ++i) free_bufs.push_back(pool.data() + i * largest);
  std::deque<std::pair<const Group*, std::byte*>> ready;
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
        std::pair<const Group*, std::byte*> item;
        {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return stop || !ready.empty(); });
          if (ready.empty()) return;
          item = ready.front();
          ready.pop_front();
        }
        const Group& g = *item.first;
        for (size_t k = g.first; k < g.last; ++k) {
          const FrameTask& t = tasks[k];
          absl::Status st =
              process(t, absl::Span<const std::byte>(item.second + (t.entry->offset - g.offset), t.entry->frame_len),
                      codec, scratch);
          std::lock_guard<std::mutex> lock(mu);
          if (!st.ok()) fail(t, st);
          if (on_done) on_done(t);
        }
        std::lock_guard<std::mutex> lock(mu);
        free_bufs.push_back(item.second);
        cv.notify_all();
      }
    });
  }

  for (const Group& g : groups) {
    std::byte* buf;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return !free_bufs.empty(); });
      if (!first_error.ok() && options.stop_on_error) break;
      buf = free_bufs.back();
      free_bufs.pop_back();
    }
    tasks[g.first].file->ReadAsync(g.offset, absl::Span<std::byte>(buf, g.bytes), [&, gp = &g, buf](absl::Status s) {
      std::lock_guard<std::mutex> lock(mu);
      if (!s.ok()) {
        for (size_t k = gp->first; k < gp->last; ++k) {
          fail(tasks[k], s);
          if (on_done) on_done(tasks[k]);
        }
        free_bufs.push_back(buf);
      } else {
        ready.emplace_back(gp, buf);
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

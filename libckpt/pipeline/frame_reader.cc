#include "pipeline/frame_reader.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "codec/codec.h"
#include "util/aligned_buffer.h"
#include "util/errors.h"
#include "util/task_pool.h"

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
  absl::Status first_error;

  auto fail = [&](const FrameTask& t, const absl::Status& s) {
    // REQUIRES: mu held.
    if (first_error.ok()) first_error = s;
    if (on_error) on_error(t, s);
  };

  int workers = options.worker_threads;
  if (workers <= 0) {
    workers = static_cast<int>(std::min(4u, std::max(1u, std::thread::hardware_concurrency())));
  }
  // A group read is checked and decoded on a worker, each with a codec of
  // its own. Declared after what its tasks use, so that it is joined first.
  TaskPool decoders(workers);
  auto decode = [&](const Group& g, std::byte* buf) {
    thread_local BlockCodec codec;
    thread_local std::vector<std::byte> scratch;
    for (size_t k = g.first; k < g.last; ++k) {
      const FrameTask& t = tasks[k];
      absl::Status st = process(t, absl::Span<const std::byte>(buf + (t.entry->offset - g.offset), t.entry->frame_len),
                                codec, scratch);
      std::lock_guard<std::mutex> lock(mu);
      if (!st.ok()) fail(t, st);
      if (on_done) on_done(t);
    }
    std::lock_guard<std::mutex> lock(mu);
    free_bufs.push_back(buf);
    cv.notify_all();
  };

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
      if (s.ok()) {
        decoders.Submit([&decode, gp, buf] { decode(*gp, buf); });
        return;
      }
      std::lock_guard<std::mutex> lock(mu);
      for (size_t k = gp->first; k < gp->last; ++k) {
        fail(tasks[k], s);
        if (on_done) on_done(tasks[k]);
      }
      free_bufs.push_back(buf);
      cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return free_bufs.size() == nbuf; });
  return first_error;
}

}  // namespace ckpt

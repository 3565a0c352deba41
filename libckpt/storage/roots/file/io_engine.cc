#include "storage/roots/file/io_engine.h"

#include <liburing.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <shared_mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "util/errors.h"
#include "util/strings.h"
#include "util/task_pool.h"
#include "util/tsan.h"

namespace ckpt {

namespace {
std::atomic<uint64_t> g_syncs_completed{0};
}  // namespace

uint64_t SyncRequestsCompleted() { return g_syncs_completed.load(std::memory_order_relaxed); }

absl::Status IoError(const IoRequest& r, int err) {
  if (r.kind == IoRequest::Kind::kSync) return ErrnoStatus(err, StrCat("fdatasync of ", r.path ? *r.path : "?"));
  return ErrnoStatus(err, StrCat(r.kind == IoRequest::Kind::kRead ? "read" : "write", " of ", r.len - r.done,
                                 " bytes at offset ", r.offset + r.done, " in ", r.path ? *r.path : "?"));
}

namespace {

absl::Status TruncatedRead(const IoRequest& r) {
  return absl::OutOfRangeError(StrCat("truncated: ", r.path ? *r.path : "?", " ends before byte offset ",
                                      r.offset + r.len, " (read ", r.done, " of ", r.len, " bytes at offset ", r.offset,
                                      ")"));
}

// One long-lived thread submits every request and another reaps them.
// Submitting from the caller's thread would tie each request to that thread:
// the kernel cancels a thread's pending io_uring work when it exits
// (ECANCELED), and short-lived caller threads are common in trainers.
class UringEngine final : public IoEngine {
 public:
  explicit UringEngine(unsigned depth) : depth_(depth) {}

  absl::Status Init() {
    int rc = io_uring_queue_init(depth_, &ring_, 0);
    if (rc < 0) return ErrnoStatus(-rc, "io_uring_queue_init");
    initialized_ = true;
    sparse_ok_ = io_uring_register_buffers_sparse(&ring_, kMaxRegions) == 0;
    slot_used_.assign(kMaxRegions, false);
    reaper_ = std::thread([this] { ReapLoop(); });
    submitter_ = std::thread([this] { SubmitLoop(); });
    return absl::OkStatus();
  }

  ~UringEngine() override {
    if (!initialized_) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    submitter_.join();
    reaper_.join();
    io_uring_queue_exit(&ring_);
  }

  std::string_view name() const override { return "io_uring"; }
  bool supports_registered_buffers() const override { return sparse_ok_; }

  void Submit(std::unique_ptr<IoRequest> request) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      slots_cv_.wait(lock, [&] { return inflight_ < depth_; });
      ++inflight_;
      pending_.push_back(request.release());
    }
    cv_.notify_all();
  }

  uint64_t RegisterBuffers(const std::vector<absl::Span<std::byte>>& regions) override {
    if (!sparse_ok_) return 0;
    std::unique_lock<std::shared_mutex> lock(reg_mu_);
    std::vector<int> slots;
    for (int i = 0; i < kMaxRegions && slots.size() < regions.size(); ++i) {
      if (!slot_used_[i]) slots.push_back(i);
    }
    if (slots.size() < regions.size()) return 0;
    const uint64_t token = ++next_token_;
    for (size_t i = 0; i < regions.size(); ++i) {
      iovec iov{regions[i].data(), regions[i].size()};
      __u64 tag = 0;
      if (io_uring_register_buffers_update_tag(&ring_, slots[i], &iov, &tag, 1) != 1) {
        // Pinning failed (e.g. RLIMIT_MEMLOCK): undo and fall back.
        lock.unlock();
        UnregisterBuffers(token);
        return 0;
      }
      slot_used_[slots[i]] = true;
      regions_.push_back(Region{reinterpret_cast<uintptr_t>(regions[i].data()),
                                reinterpret_cast<uintptr_t>(regions[i].data()) + regions[i].size(), slots[i], token});
    }
    return token;
  }

  void UnregisterBuffers(uint64_t token) override {
    std::unique_lock<std::shared_mutex> lock(reg_mu_);
    for (auto it = regions_.begin(); it != regions_.end();) {
      if (it->token != token) {
        ++it;
        continue;
      }
      iovec iov{nullptr, 0};
      __u64 tag = 0;
      io_uring_register_buffers_update_tag(&ring_, it->index, &iov, &tag, 1);
      slot_used_[it->index] = false;
      it = regions_.erase(it);
    }
  }

 private:
  static constexpr int kMaxRegions = 64;
  struct Region {
    uintptr_t begin;
    uintptr_t end;
    int index;
    uint64_t token;
  };

  int FixedIndex(const IoRequest& r) {
    std::shared_lock<std::shared_mutex> lock(reg_mu_);
    const uintptr_t b = reinterpret_cast<uintptr_t>(r.buf + r.done);
    const uintptr_t e = b + (r.len - r.done);
    for (const Region& reg : regions_) {
      if (b >= reg.begin && e <= reg.end) return reg.index;
    }
    return -1;
  }

  // Submitter thread only.
  io_uring_sqe* GetSqe() {
    io_uring_sqe* sqe;
    while ((sqe = io_uring_get_sqe(&ring_)) == nullptr) io_uring_submit(&ring_);
    return sqe;
  }

  // Submitter thread only.
  void Prepare(IoRequest* r) {
    if (r->kind == IoRequest::Kind::kSync) {
      io_uring_sqe* sqe = GetSqe();
      io_uring_prep_fsync(sqe, r->fd, IORING_FSYNC_DATASYNC);
      TsanRelease(r);
      io_uring_sqe_set_data(sqe, r);
      return;
    }
    const int fixed = FixedIndex(*r);
    io_uring_sqe* sqe = GetSqe();
    void* buf = r->buf + r->done;
    const unsigned len = static_cast<unsigned>(std::min<size_t>(r->len - r->done, size_t{1} << 30));
    const uint64_t off = r->offset + r->done;
    if (r->kind == IoRequest::Kind::kWrite) {
      if (fixed >= 0) {
        io_uring_prep_write_fixed(sqe, r->fd, buf, len, off, fixed);
      } else {
        io_uring_prep_write(sqe, r->fd, buf, len, off);
      }
    } else {
      if (fixed >= 0) {
        io_uring_prep_read_fixed(sqe, r->fd, buf, len, off, fixed);
      } else {
        io_uring_prep_read(sqe, r->fd, buf, len, off);
      }
    }
    TsanRelease(r);  // the reaper takes it back from the kernel
    io_uring_sqe_set_data(sqe, r);
  }

  void SubmitLoop() {
    std::vector<IoRequest*> batch;
    while (true) {
      bool stopping;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
        batch.assign(pending_.begin(), pending_.end());
        pending_.clear();
        stopping = stop_ && batch.empty();
      }
      if (stopping) {
        io_uring_sqe* sqe = GetSqe();
        io_uring_prep_nop(sqe);
        io_uring_sqe_set_data(sqe, nullptr);
        io_uring_submit(&ring_);
        return;
      }
      for (IoRequest* r : batch) Prepare(r);
      io_uring_submit(&ring_);
    }
  }

  // Reaper thread: a partly done or interrupted request goes back to the
  // submitter, keeping its slot.
  void Resubmit(IoRequest* r) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.push_back(r);
    }
    cv_.notify_all();
  }

  void Complete(IoRequest* r, absl::Status status) {
    if (r->kind == IoRequest::Kind::kSync) g_syncs_completed.fetch_add(1, std::memory_order_relaxed);
    IoCallback cb = std::move(r->callback);
    delete r;
    std::move(cb)(std::move(status));
    {
      std::lock_guard<std::mutex> lock(mu_);
      --inflight_;
    }
    slots_cv_.notify_one();
  }

  void ReapLoop() {
    while (true) {
      io_uring_cqe* cqe = nullptr;
      int rc = io_uring_wait_cqe(&ring_, &cqe);
      if (rc < 0) continue;  // -EINTR/-EAGAIN: wait again
      IoRequest* r = static_cast<IoRequest*>(io_uring_cqe_get_data(cqe));
      if (r != nullptr) TsanAcquire(r);
      const int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      if (r == nullptr) return;  // shutdown
      if (res == -EAGAIN || res == -EINTR) {
        Resubmit(r);
      } else if (res < 0) {
        Complete(r, IoError(*r, -res));
      } else if (r->kind == IoRequest::Kind::kSync) {
        Complete(r, absl::OkStatus());
      } else if (res == 0) {
        if (r->kind == IoRequest::Kind::kRead) {
          Complete(r, TruncatedRead(*r));
        } else {
          Complete(r, IoError(*r, EIO));
        }
      } else {
        r->done += static_cast<size_t>(res);
        if (r->done < r->len) {
          Resubmit(r);
        } else {
          Complete(r, absl::OkStatus());
        }
      }
    }
  }

  const unsigned depth_;
  io_uring ring_{};
  bool initialized_ = false;
  bool sparse_ok_ = false;
  std::mutex mu_;
  std::condition_variable cv_;        // submitter: work or stop
  std::condition_variable slots_cv_;  // callers: a slot freed
  std::deque<IoRequest*> pending_;
  unsigned inflight_ = 0;
  bool stop_ = false;
  std::thread reaper_;
  std::thread submitter_;
  std::shared_mutex reg_mu_;
  std::vector<Region> regions_;
  std::vector<bool> slot_used_;
  uint64_t next_token_ = 0;
};

// Blocking pread/pwrite/fdatasync on a pool of threads; Submit waits while
// `depth` requests are queued.
class ThreadEngine final : public IoEngine {
 public:
  ThreadEngine(int threads, unsigned depth) : pool_(std::max(1, threads), std::max(1u, depth)) {}
  std::string_view name() const override { return "threads"; }

  void Submit(std::unique_ptr<IoRequest> request) override {
    pool_.Submit([r = std::move(request)]() mutable {
      absl::Status status = r->kind == IoRequest::Kind::kSync ? Sync(*r) : Transfer(*r);
      IoCallback cb = std::move(r->callback);
      r.reset();
      std::move(cb)(std::move(status));
    });
  }

 private:
  static absl::Status Sync(const IoRequest& r) {
    int rc;
    do {
      rc = fdatasync(r.fd);
    } while (rc != 0 && errno == EINTR);
    g_syncs_completed.fetch_add(1, std::memory_order_relaxed);
    return rc == 0 ? absl::OkStatus() : IoError(r, errno);
  }

  static absl::Status Transfer(IoRequest& r) {
    while (r.done < r.len) {
      ssize_t n = r.kind == IoRequest::Kind::kRead
                      ? pread(r.fd, r.buf + r.done, r.len - r.done, static_cast<off_t>(r.offset + r.done))
                      : pwrite(r.fd, r.buf + r.done, r.len - r.done, static_cast<off_t>(r.offset + r.done));
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return IoError(r, errno);
      }
      if (n == 0) return r.kind == IoRequest::Kind::kRead ? TruncatedRead(r) : IoError(r, EIO);
      r.done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

  TaskPool pool_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<IoEngine>> CreateUringEngine(unsigned depth) {
  auto engine = std::make_unique<UringEngine>(std::max(2u, depth));
  absl::Status s = engine->Init();
  if (!s.ok()) return s;
  return std::unique_ptr<IoEngine>(std::move(engine));
}

std::unique_ptr<IoEngine> CreateThreadEngine(int threads, unsigned depth) {
  return std::make_unique<ThreadEngine>(threads, depth);
}

}  // namespace ckpt

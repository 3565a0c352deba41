#include "storage/adapters/tiered/tiered_storage.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "net/uri.h"
#include "storage/backend.h"
#include "storage/capabilities.h"
#include "util/aligned_buffer.h"
#include "util/background.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt {
namespace {

std::string TopDir(std::string_view path) {
  const size_t slash = path.find('/');
  return slash == std::string_view::npos ? std::string() : std::string(path.substr(0, slash));
}

std::string Parent(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? std::string() : std::string(path.substr(0, slash));
}

class TieredStorage : public Storage,
                      public TierEviction,
                      public Replication,
                      public Tiers,
                      public std::enable_shared_from_this<TieredStorage> {
 public:
  TieredStorage(std::shared_ptr<Storage> local, std::shared_ptr<Storage> durable, int64_t keep_local, std::string uri)
      : local_(std::move(local)), durable_(std::move(durable)), keep_local_(keep_local), uri_(std::move(uri)) {
    drainer_ = std::thread([this] { DrainLoop(); });
  }
  ~TieredStorage() override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      idle_.wait(lock, [&] { return queue_.empty() && !busy_; });
      stop_ = true;
    }
    work_.notify_all();
    drainer_.join();
  }

  std::string uri() const override { return uri_; }
  StorageCaps caps() const override {
    StorageCaps c = local_->caps();
    const StorageCaps d = durable_->caps();
    c.engine = StrCat("tiered(", c.engine, " -> ", d.engine, ")");
    c.durable = d.durable;
    c.registered_buffers = false;
    return c;
  }

  // Its own, and the durable tier's unfinished uploads (they live there).
  // Not the tiers' others: their files are not this store's files (a local
  // path or registered buffers of one tier would bypass the other).
  StorageCapability* Capability(std::string_view name) override {
    if (name == TierEviction::kName) return static_cast<TierEviction*>(this);
    if (name == Replication::kName) return static_cast<Replication*>(this);
    if (name == Tiers::kName) return static_cast<Tiers*>(this);
    if (name == PendingUploads::kName) return durable_->Capability(name);
    return nullptr;
  }

  std::vector<StorageTier> tiers() override { return {{"local", local_}, {"durable", durable_}}; }

  void CompleteWhenHolding(std::string_view file) override {
    std::lock_guard<std::mutex> lock(mu_);
    complete_marker_ = std::string(file);
  }

  absl::StatusOr<std::unique_ptr<WritableFile>> OpenWritable(std::string_view path,
                                                             const WriteOptions& options) override {
    CKPT_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> w, local_->OpenWritable(path, options));
    return std::unique_ptr<WritableFile>(new Writer(this, std::move(w)));
  }
  absl::StatusOr<std::unique_ptr<ReadableFile>> OpenReadable(std::string_view path) override {
    auto r = local_->OpenReadable(path);
    if (r.ok() || !absl::IsNotFound(r.status())) return r;
    return durable_->OpenReadable(path);
  }
  absl::Status PutAtomic(std::string_view path, absl::Span<const std::byte> data) override {
    CKPT_RETURN_IF_ERROR(local_->PutAtomic(path, data));
    Enqueue(std::string(path), /*atomic=*/true);
    return absl::OkStatus();
  }
  // Writers meet on the local tier; a name the durable tier already holds
  // (a step drained and dropped locally) counts as taken too.
  absl::Status PutIfAbsent(std::string_view path, absl::Span<const std::byte> data) override {
    auto there = durable_->FileSize(path);
    if (there.ok()) return absl::AlreadyExistsError(StrCat(path, " already exists on the durable tier"));
    if (!absl::IsNotFound(there.status())) return there.status();
    CKPT_RETURN_IF_ERROR(local_->PutIfAbsent(path, data));
    Enqueue(std::string(path), /*atomic=*/true);
    return absl::OkStatus();
  }
  absl::StatusOr<uint64_t> FileSize(std::string_view path) override {
    auto s = local_->FileSize(path);
    if (s.ok() || !absl::IsNotFound(s.status())) return s;
    return durable_->FileSize(path);
  }
  absl::StatusOr<std::vector<DirEntry>> List(std::string_view dir) override {
    auto a = local_->List(dir);
    auto b = durable_->List(dir);
    if (!a.ok() && !absl::IsNotFound(a.status())) return a.status();
    if (!b.ok() && !absl::IsNotFound(b.status())) return b.status();
    if (!a.ok() && !b.ok()) return a.status();
    std::map<std::string, bool> merged;
    for (auto* list : {&a, &b}) {
      if (!list->ok()) continue;
      for (const DirEntry& e : **list) {
        // The drain's own atomic writes in flight on the durable tier are
        // not part of the namespace (and must not be "cleaned up").
        if (list == &b && e.name.find(".tmp.") != std::string::npos) continue;
        merged[e.name] = merged[e.name] || e.is_dir;
      }
    }
    std::vector<DirEntry> out;
    for (const auto& [name, is_dir] : merged) out.push_back(DirEntry{name, is_dir});
    return out;
  }
  absl::Status Remove(std::string_view path) override {
    Quiesce(path, /*tree=*/false);
    absl::Status a = local_->Remove(path);
    absl::Status b = durable_->Remove(path);
    if (absl::IsNotFound(a) && absl::IsNotFound(b)) return a;
    if (!a.ok() && !absl::IsNotFound(a)) return a;
    if (!b.ok() && !absl::IsNotFound(b)) return b;
    return absl::OkStatus();
  }
  absl::Status RemoveAll(std::string_view dir) override {
    Quiesce(dir, /*tree=*/true);
    CKPT_RETURN_IF_ERROR(local_->RemoveAll(dir));
    return durable_->RemoveAll(dir);
  }
  absl::Status SyncDir(std::string_view dir) override { return local_->SyncDir(dir); }

  absl::Status WaitReplicated() override {
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [&] { return queue_.empty() && !busy_; });
    return first_error_;
  }

 private:
  class Writer : public WritableFile {
   public:
    Writer(TieredStorage* owner, std::unique_ptr<WritableFile> base) : owner_(owner), base_(std::move(base)) {}
    void WriteAsync(uint64_t offset, absl::Span<const std::byte> data, IoCallback done) override {
      base_->WriteAsync(offset, data, std::move(done));
    }
    absl::Status Drain() override { return base_->Drain(); }
    void Reserve(uint64_t bytes) override { base_->Reserve(bytes); }
    absl::Status Finish(uint64_t final_size) override {
      CKPT_RETURN_IF_ERROR(base_->Finish(final_size));
      owner_->Enqueue(base_->path(), /*atomic=*/false);
      return absl::OkStatus();
    }
    size_t alignment() const override { return base_->alignment(); }
    const std::string& path() const override { return base_->path(); }

   private:
    TieredStorage* owner_;
    std::unique_ptr<WritableFile> base_;
  };

  struct Job {
    std::string path;
    bool atomic;
  };

  // Before a removal: drops queued copies of `path` (or of everything under
  // it) and waits for such a copy in flight, so the drain cannot bring a
  // removed file back on the durable tier.
  void Quiesce(std::string_view path, bool tree) {
    auto matches = [&](const std::string& p) {
      return p == path ||
             (tree && (path.empty() || (p.size() > path.size() && p.starts_with(path) && p[path.size()] == '/')));
    };
    std::unique_lock<std::mutex> lock(mu_);
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (matches(it->path)) {
        if (--pending_in_[TopDir(it->path)] == 0) pending_in_.erase(TopDir(it->path));
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
    idle_.wait(lock, [&] { return !busy_ || !matches(current_); });
  }

  void Enqueue(std::string path, bool atomic) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++pending_in_[TopDir(path)];
      queue_.push_back(Job{std::move(path), atomic});
    }
    work_.notify_one();
  }

  void DrainLoop() {
    LowerThisThread(BackgroundPriority{});  // copies to the durable tier while the trainer runs
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        job = std::move(queue_.front());
        queue_.pop_front();
        busy_ = true;
        current_ = job.path;
      }
      absl::Status st = Copy(job);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!st.ok() && first_error_.ok()) {
          first_error_ = Annotate(st, StrCat("draining ", job.path, " to the durable tier"));
        }
        if (--pending_in_[TopDir(job.path)] == 0) pending_in_.erase(TopDir(job.path));
      }
      if (st.ok() && keep_local_ >= 0) Evict();
      {
        std::lock_guard<std::mutex> lock(mu_);
        busy_ = false;
        current_.clear();
      }
      idle_.notify_all();
    }
  }

  absl::Status Copy(const Job& job) {
    if (job.atomic) {
      auto bytes = local_->GetAll(job.path);
      if (absl::IsNotFound(bytes.status())) return absl::OkStatus();  // removed meanwhile
      if (!bytes.ok()) return bytes.status();
      CKPT_RETURN_IF_ERROR(durable_->PutAtomic(
          job.path, absl::Span<const std::byte>(reinterpret_cast<const std::byte*>(bytes->data()), bytes->size())));
      return absl::OkStatus();
    }
    auto in = local_->OpenReadable(job.path);
    if (absl::IsNotFound(in.status())) return absl::OkStatus();
    if (!in.ok()) return in.status();
    const uint64_t size = (*in)->size();
    CKPT_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> out, durable_->OpenWritable(job.path, WriteOptions{}));
    const size_t align = std::max<size_t>(out->alignment(), 1);
    constexpr size_t kChunk = 8 << 20;
    // Two buffers: one is read while the other is written.
    AlignedBuffer bufs[2];
    for (AlignedBuffer& b : bufs) {
      CKPT_ASSIGN_OR_RETURN(b, AlignedBuffer::Allocate(kChunk, false));
    }
    absl::Status write_status;
    std::mutex wmu;
    int cur = 0;
    for (uint64_t off = 0; off < size; off += kChunk) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, size - off));
      if (off >= 2 * kChunk) {
        if (absl::Status d = out->Drain(); !d.ok()) return d;  // the buffer is free again
      }
      std::byte* buf = bufs[cur].data();
      if (absl::Status r = (*in)->ReadAt(off, absl::Span<std::byte>(buf, n)); !r.ok()) {
        (void)out->Drain();  // no write may still use the buffers
        return r;
      }
      const size_t padded = AlignUp(n, align);
      std::fill(buf + n, buf + padded, std::byte{0});
      out->WriteAsync(off, absl::Span<const std::byte>(buf, padded), [&](absl::Status s) {
        std::lock_guard<std::mutex> lock(wmu);
        if (!s.ok() && write_status.ok()) write_status = s;
      });
      cur ^= 1;
    }
    CKPT_RETURN_IF_ERROR(out->Finish(size));
    {
      std::lock_guard<std::mutex> lock(wmu);
      CKPT_RETURN_IF_ERROR(write_status);
    }
    CKPT_RETURN_IF_ERROR(durable_->SyncDir(Parent(job.path)));
    // Removed on the local tier while it was copied (a report deleted at
    // commit, a step collected): do not leave it behind on the durable tier.
    if (absl::IsNotFound(local_->FileSize(job.path).status())) {
      absl::Status gone = durable_->Remove(job.path);
      if (!gone.ok() && !absl::IsNotFound(gone)) return gone;
    }
    return absl::OkStatus();
  }

  // Keeps the `keep_local_` newest fully drained top-level directories on the
  // local tier; the others are read from the durable tier from now on. A
  // directory counts once its complete_marker_ file is on the durable tier.
  void Evict() {
    auto entries = local_->List("");
    if (!entries.ok()) return;
    std::vector<std::string> drained;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (complete_marker_.empty()) return;  // nobody said what completes a directory
      for (const DirEntry& e : *entries) {
        if (e.is_dir && !pending_in_.count(e.name) && durable_->FileSize(e.name + "/" + complete_marker_).ok()) {
          drained.push_back(e.name);
        }
      }
    }
    if (static_cast<int64_t>(drained.size()) <= keep_local_) return;
    for (size_t i = 0; i + keep_local_ < drained.size(); ++i) {
      (void)local_->RemoveAll(drained[i]);
    }
  }

  std::shared_ptr<Storage> local_, durable_;
  int64_t keep_local_;
  std::string uri_;
  std::mutex mu_;
  std::condition_variable work_, idle_;
  std::deque<Job> queue_;
  std::map<std::string, int64_t> pending_in_;
  bool busy_ = false;
  std::string current_;          ///< the path being copied while busy_
  std::string complete_marker_;  ///< CompleteWhenHolding; empty: evict nothing
  bool stop_ = false;
  absl::Status first_error_;
  std::thread drainer_;
};

}  // namespace

std::shared_ptr<Storage> MakeTieredStorage(std::shared_ptr<Storage> local, std::shared_ptr<Storage> durable,
                                           int64_t keep_local, std::string uri) {
  return std::make_shared<TieredStorage>(std::move(local), std::move(durable), keep_local, std::move(uri));
}

absl::StatusOr<std::shared_ptr<Storage>> OpenTieredStorage(std::string_view uri) {
  CKPT_ASSIGN_OR_RETURN(ParsedUri parsed, ParseUri(uri));
  const std::string local = parsed.Str("local", ""), durable = parsed.Str("durable", "");
  if (local.empty() || durable.empty()) {
    return absl::InvalidArgumentError(StrCat("storage URI '", uri,
                                             "': tiered:// needs local= and durable=, e.g. "
                                             "tiered://?local=/nvme/ckpt&durable=/shared/ckpt"));
  }
  if (local == durable) {
    return absl::InvalidArgumentError(StrCat("storage URI '", uri, "': the local and durable tiers are the same"));
  }
  CKPT_ASSIGN_OR_RETURN(int64_t keep_local, parsed.Int("keep_local", -1));
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<Storage> l, OpenStorage(local));
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<Storage> d, OpenStorage(durable));
  return MakeTieredStorage(std::move(l), std::move(d), keep_local, std::string(uri));
}

CKPT_STORAGE_BACKEND(tiered) {
  r.Add({"tiered", "", "commit on a fast local tier, drain to a durable tier in the background",
         BackendCaps("tiered", true, true, true)},
        OpenTieredStorage);
}

}  // namespace ckpt

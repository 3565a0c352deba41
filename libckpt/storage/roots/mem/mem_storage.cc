#include "storage/roots/mem/mem_storage.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "net/uri.h"
#include "storage/backend.h"
#include "util/aligned_buffer.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt {
namespace {

// Zero-initialised bytes: from calloc while small, so that a small file
// costs neither a system call nor a whole page, and on (advised) huge pages
// once large.
class ZeroedBytes {
 public:
  static absl::StatusOr<ZeroedBytes> Allocate(size_t n) {
    ZeroedBytes b;
    if (n >= kHugePagesFrom) {
      CKPT_ASSIGN_OR_RETURN(b.large_, AlignedBuffer::Allocate(n, /*prefault=*/false, /*huge=*/true));
    } else if (n > 0) {
      b.small_.reset(static_cast<std::byte*>(std::calloc(n, 1)));
      if (b.small_ == nullptr) return absl::ResourceExhaustedError(StrCat("calloc of ", n, " bytes failed"));
    }
    b.size_ = n;
    return b;
  }
  std::byte* data() { return small_ ? small_.get() : large_.data(); }
  const std::byte* data() const { return small_ ? small_.get() : large_.data(); }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> small_;
  AlignedBuffer large_;
  size_t size_ = 0;
};

// The memory of removed files kept for new ones (`mem://name?spare=BYTES`):
// a buffer taken from here is already faulted in, so a store whose old
// steps are removed as new ones are saved (retention, a tiered store's
// keep_local) does not pay the kernel's page zeroing on every save. Its
// bytes are not zero; MemFile zeroes what it must.
class SparePool {
 public:
  explicit SparePool(int64_t cap) : cap_(cap) {}
  int64_t cap() const { return cap_; }

  /// Keeps `b` if it is large and there is room; frees it otherwise.
  void Give(ZeroedBytes b) {
    if (b.size() < kHugePagesFrom || cap_ <= 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (held_ + static_cast<int64_t>(b.size()) > cap_) return;
    held_ += static_cast<int64_t>(b.size());
    const size_t n = b.size();
    bufs_.emplace(n, std::move(b));
  }

  /// The smallest kept buffer of at least `n` bytes and at most a quarter
  /// more (a large one stays for a large file), if any.
  std::optional<ZeroedBytes> Take(size_t n) {
    if (n < kHugePagesFrom || cap_ <= 0) return std::nullopt;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = bufs_.lower_bound(n);
    if (it == bufs_.end() || it->first > n + n / 4) return std::nullopt;
    ZeroedBytes b = std::move(it->second);
    bufs_.erase(it);
    held_ -= static_cast<int64_t>(b.size());
    return b;
  }

  int64_t held() const {
    std::lock_guard<std::mutex> lock(mu_);
    return held_;
  }

 private:
  const int64_t cap_;
  mutable std::mutex mu_;
  int64_t held_ = 0;
  std::multimap<size_t, ZeroedBytes> bufs_;
};

// The bytes of one file. Every byte below `size` was written or is zero.
// A buffer from fresh anonymous memory is zero past `size` (the kernel zeroes
// it), so a write past the end (writes of a save arrive out of order) need
// not fill the gap. Copies in and out hold the lock shared, so a save's
// writers copy in parallel; only growing the buffer takes it exclusively. A
// file whose size is reserved up front (as a data file is) is never copied to
// grow, and its pages are faulted in by the writes themselves, 2 MiB at a time
// where huge pages are allowed. A buffer from the spare pool holds old bytes
// past `size`: there a write that raises `size` takes the lock exclusively
// and zeroes the gap it leaves, so no shared writer is inside it meanwhile.
// The buffer goes back to the pool when the file is gone.
class MemFile {
 public:
  explicit MemFile(std::shared_ptr<SparePool> pool = nullptr) : pool_(std::move(pool)) {}
  ~MemFile() {
    if (pool_) pool_->Give(std::move(buf_));
  }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;

  uint64_t size() const { return size_.load(std::memory_order_acquire); }

  absl::Status Reserve(uint64_t bytes) {
    std::unique_lock<std::shared_mutex> lock(mu_);
    return GrowLocked(bytes, /*exact=*/true);
  }

  absl::Status Write(uint64_t offset, absl::Span<const std::byte> data, const std::string& path) {
    if (offset > UINT64_MAX - data.size()) {
      return absl::InvalidArgumentError(StrCat("mem:", path, ": write of ", data.size(), " bytes at byte offset ",
                                               offset, " is past the largest file"));
    }
    const uint64_t end = offset + data.size();
    {
      std::shared_lock<std::shared_mutex> lock(mu_);
      if (end <= buf_.size() && (!dirty_ || end <= size())) {
        Copy(offset, data, end);
        return absl::OkStatus();
      }
    }
    std::unique_lock<std::shared_mutex> lock(mu_);
    absl::Status s = GrowLocked(end, /*exact=*/false);
    if (!s.ok()) return Annotate(s, StrCat("mem:", path, ": write of ", data.size(), " bytes at byte offset ", offset));
    ZeroGapLocked(offset);
    Copy(offset, data, end);
    return absl::OkStatus();
  }

  absl::Status Read(uint64_t offset, absl::Span<std::byte> dst, const std::string& path) const {
    std::shared_lock<std::shared_mutex> lock(mu_);
    const uint64_t n = size();
    if (offset > n || dst.size() > n - offset) {
      return absl::OutOfRangeError(
          StrCat("truncated: mem:", path, " has ", n, " bytes, reading ", dst.size(), " at byte offset ", offset));
    }
    if (!dst.empty()) std::memcpy(dst.data(), buf_.data() + offset, dst.size());
    return absl::OkStatus();
  }

  /// Sets the size; bytes cut off are zeroed, so they read as zero if the
  /// file grows again.
  absl::Status Resize(uint64_t n, const std::string& path) {
    std::unique_lock<std::shared_mutex> lock(mu_);
    const uint64_t old = size();
    if (n > old) {
      absl::Status s = GrowLocked(n, /*exact=*/true);
      if (!s.ok()) return Annotate(s, StrCat("mem:", path, ": resize to ", n, " bytes"));
      ZeroGapLocked(n);
    } else if (n < old) {
      std::memset(buf_.data() + n, 0, old - n);
    }
    size_.store(n, std::memory_order_release);
    return absl::OkStatus();
  }

 private:
  // REQUIRES: mu_ held (shared or exclusive) and end <= buf_.size().
  void Copy(uint64_t offset, absl::Span<const std::byte> data, uint64_t end) {
    if (!data.empty()) std::memcpy(buf_.data() + offset, data.data(), data.size());
    uint64_t cur = size_.load(std::memory_order_relaxed);
    while (cur < end && !size_.compare_exchange_weak(cur, end, std::memory_order_acq_rel)) {
    }
  }

  // REQUIRES: mu_ held exclusively, `to` <= buf_.size(). Zeroes the old
  // bytes of a spare buffer between the size and `to`.
  void ZeroGapLocked(uint64_t to) {
    const uint64_t n = size();
    if (dirty_ && to > n) std::memset(buf_.data() + n, 0, to - n);
  }

  // REQUIRES: mu_ held exclusively. Doubles unless `exact` (a known final
  // size), so appends cost amortised O(1) copies. Takes a spare buffer where
  // the pool has one of the size.
  absl::Status GrowLocked(uint64_t want, bool exact) {
    if (want <= buf_.size()) return absl::OkStatus();
    uint64_t cap = want;
    if (!exact) cap = std::max<uint64_t>({want, 2 * static_cast<uint64_t>(buf_.size()), 4096});
    if (cap > SIZE_MAX / 2) return absl::ResourceExhaustedError(StrCat("out of memory for ", cap, " bytes"));
    std::optional<ZeroedBytes> grown = pool_ ? pool_->Take(static_cast<size_t>(cap)) : std::nullopt;
    const bool spare = grown.has_value();
    if (!spare) {
      auto fresh = ZeroedBytes::Allocate(static_cast<size_t>(cap));
      if (!fresh.ok()) {
        return absl::ResourceExhaustedError(StrCat("out of memory for ", cap, " bytes: ", fresh.status().message()));
      }
      grown = std::move(fresh).value();
    }
    const uint64_t n = size();
    if (n > 0) std::memcpy(grown->data(), buf_.data(), n);
    ZeroedBytes old = std::exchange(buf_, std::move(*grown));
    dirty_ = spare;
    if (pool_) pool_->Give(std::move(old));
    return absl::OkStatus();
  }

  const std::shared_ptr<SparePool> pool_;
  mutable std::shared_mutex mu_;
  ZeroedBytes buf_;                // capacity; zero past size_ unless dirty_
  bool dirty_ = false;             // buf_ came from the spare pool
  std::atomic<uint64_t> size_{0};  // raised by writes under a shared lock
};

class MemStorage;

class MemWritable final : public WritableFile {
 public:
  MemWritable(std::shared_ptr<MemFile> file, std::string path) : file_(std::move(file)), path_(std::move(path)) {}
  void WriteAsync(uint64_t offset, absl::Span<const std::byte> data, IoCallback done) override {
    absl::Status s = file_->Write(offset, data, path_);
    if (!s.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      if (first_error_.ok()) first_error_ = s;
    }
    std::move(done)(std::move(s));
  }
  absl::Status Drain() override {
    std::lock_guard<std::mutex> lock(mu_);
    return first_error_;
  }
  void Reserve(uint64_t bytes) override {
    // Like fallocate: a shortage shows up in the write that needs the room.
    (void)file_->Reserve(bytes);
  }
  absl::Status Finish(uint64_t final_size) override {
    CKPT_RETURN_IF_ERROR(Drain());
    return file_->Resize(final_size, path_);
  }
  size_t alignment() const override { return 1; }
  const std::string& path() const override { return path_; }

 private:
  std::shared_ptr<MemFile> file_;
  std::string path_;
  std::mutex mu_;
  absl::Status first_error_;
};

class MemReadable final : public ReadableFile {
 public:
  MemReadable(std::shared_ptr<MemFile> file, std::string path) : file_(std::move(file)), path_(std::move(path)) {}
  uint64_t size() const override { return file_->size(); }
  absl::Status ReadAt(uint64_t offset, absl::Span<std::byte> dst) override { return file_->Read(offset, dst, path_); }
  void ReadAsync(uint64_t offset, absl::Span<std::byte> dst, IoCallback done) override {
    std::move(done)(ReadAt(offset, dst));
  }
  size_t direct_alignment() const override { return 0; }
  const std::string& path() const override { return path_; }

 private:
  std::shared_ptr<MemFile> file_;
  std::string path_;
};

// A file holding `data`, for whole-file puts.
absl::StatusOr<std::shared_ptr<MemFile>> FileOf(std::string_view path, absl::Span<const std::byte> data,
                                                std::shared_ptr<SparePool> pool) {
  auto file = std::make_shared<MemFile>(std::move(pool));
  const std::string p(path);
  CKPT_RETURN_IF_ERROR(file->Reserve(data.size()));
  CKPT_RETURN_IF_ERROR(file->Write(0, data, p));
  return file;
}

// How much removed files' memory a mem:// store keeps now (tests).
class SpareHeld : public StorageCapability {
 public:
  static constexpr std::string_view kName = "mem-spare-held";
  virtual int64_t held() const = 0;
};

class MemStorage final : public Storage, public SpareHeld {
 public:
  MemStorage(std::string uri, int64_t spare) : uri_(std::move(uri)), pool_(std::make_shared<SparePool>(spare)) {}

  int64_t spare_cap() const { return pool_->cap(); }
  int64_t held() const override { return pool_->held(); }
  StorageCapability* Capability(std::string_view name) override {
    return name == SpareHeld::kName ? static_cast<SpareHeld*>(this) : nullptr;
  }

  std::string uri() const override { return uri_; }
  StorageCaps caps() const override {
    StorageCaps c;
    c.engine = "memory";
    c.atomic_rename = true;
    c.durable = false;
    return c;
  }

  absl::StatusOr<std::unique_ptr<WritableFile>> OpenWritable(std::string_view path, const WriteOptions&) override {
    CKPT_RETURN_IF_ERROR(Check(path));
    auto file = std::make_shared<MemFile>(pool_);
    std::lock_guard<std::mutex> lock(mu_);
    files_[std::string(path)] = file;
    return std::unique_ptr<WritableFile>(std::make_unique<MemWritable>(file, std::string(path)));
  }

  absl::StatusOr<std::unique_ptr<ReadableFile>> OpenReadable(std::string_view path) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = files_.find(std::string(path));
    if (it == files_.end()) {
      return absl::NotFoundError(StrCat("open mem:", path, ": no such file"));
    }
    return std::unique_ptr<ReadableFile>(std::make_unique<MemReadable>(it->second, std::string(path)));
  }

  absl::Status PutAtomic(std::string_view path, absl::Span<const std::byte> data) override {
    CKPT_RETURN_IF_ERROR(Check(path));
    CKPT_ASSIGN_OR_RETURN(std::shared_ptr<MemFile> file, FileOf(path, data, pool_));
    std::lock_guard<std::mutex> lock(mu_);
    files_[std::string(path)] = std::move(file);
    return absl::OkStatus();
  }

  absl::Status PutIfAbsent(std::string_view path, absl::Span<const std::byte> data) override {
    CKPT_RETURN_IF_ERROR(Check(path));
    CKPT_ASSIGN_OR_RETURN(std::shared_ptr<MemFile> file, FileOf(path, data, pool_));
    std::lock_guard<std::mutex> lock(mu_);
    if (!files_.emplace(std::string(path), std::move(file)).second) {
      return absl::AlreadyExistsError(StrCat("mem:", path, " already exists"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> FileSize(std::string_view path) override {
    std::shared_ptr<MemFile> f;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = files_.find(std::string(path));
      if (it == files_.end()) {
        return absl::NotFoundError(StrCat("stat mem:", path, ": no such file"));
      }
      f = it->second;
    }
    return f->size();
  }

  absl::StatusOr<std::vector<DirEntry>> List(std::string_view dir) override {
    std::string prefix = dir.empty() ? "" : StrCat(dir, "/");
    std::map<std::string, bool> entries;
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = files_.lower_bound(prefix); it != files_.end(); ++it) {
      if (!absl::StartsWith(it->first, prefix)) break;
      std::string_view rest = std::string_view(it->first).substr(prefix.size());
      size_t slash = rest.find('/');
      if (slash == std::string_view::npos) {
        entries[std::string(rest)] = false;
      } else {
        entries[std::string(rest.substr(0, slash))] = true;
      }
    }
    if (entries.empty() && !dir.empty()) {
      return absl::NotFoundError(StrCat("list mem:", dir, ": no such directory"));
    }
    std::vector<DirEntry> out;
    for (auto& [name, is_dir] : entries) out.push_back(DirEntry{name, is_dir});
    return out;
  }

  absl::Status Remove(std::string_view path) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (files_.erase(std::string(path)) == 0) {
      return absl::NotFoundError(StrCat("remove mem:", path, ": no such file"));
    }
    return absl::OkStatus();
  }

  absl::Status RemoveAll(std::string_view dir) override {
    if (dir.empty()) return absl::InvalidArgumentError("refusing to remove the storage root");
    std::string prefix = StrCat(dir, "/");
    std::lock_guard<std::mutex> lock(mu_);
    files_.erase(std::string(dir));
    for (auto it = files_.lower_bound(prefix); it != files_.end() && absl::StartsWith(it->first, prefix);) {
      it = files_.erase(it);
    }
    return absl::OkStatus();
  }

  absl::Status SyncDir(std::string_view) override { return absl::OkStatus(); }

 private:
  static absl::Status Check(std::string_view path) {
    if (path.empty() || path.front() == '/' || path.find("..") != std::string_view::npos) {
      return absl::InvalidArgumentError(StrCat("bad mem path '", path, "'"));
    }
    return absl::OkStatus();
  }

  std::string uri_;
  const std::shared_ptr<SparePool> pool_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<MemFile>> files_;
};

}  // namespace

std::shared_ptr<Storage> NewMemStorage(int64_t spare_bytes) {
  return std::make_shared<MemStorage>(spare_bytes > 0 ? StrCat("mem://?spare=", spare_bytes) : "mem://", spare_bytes);
}

absl::StatusOr<std::shared_ptr<Storage>> OpenMemStorage(std::string_view uri) {
  CKPT_ASSIGN_OR_RETURN(ParsedUri parsed, ParseUri(uri));
  for (const auto& [key, value] : parsed.params) {
    if (key != "spare")
      return absl::InvalidArgumentError(StrCat(uri, ": unknown option '", key, "' (mem:// takes spare=BYTES)"));
  }
  CKPT_ASSIGN_OR_RETURN(const int64_t spare, parsed.Bytes("spare", 0));
  if (spare < 0) return absl::InvalidArgumentError(StrCat(uri, ": spare must not be negative"));
  const std::string name = parsed.Path();
  if (name.empty()) return NewMemStorage(spare);
  // Named stores live for the process so separate opens share files. The
  // first open sets the spare memory; a later one naming another fails.
  static std::mutex mu;
  static auto* stores = new std::map<std::string, std::shared_ptr<MemStorage>>();
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = (*stores)[name];
  if (!slot) {
    slot = std::make_shared<MemStorage>(StrCat("mem://", parsed.location), spare);
  } else if (parsed.params.count("spare") && slot->spare_cap() != spare) {
    return absl::InvalidArgumentError(
        StrCat(uri, ": mem://", name, " is open in this process with spare=", slot->spare_cap()));
  }
  return std::shared_ptr<Storage>(slot);
}

namespace internal {
int64_t MemSpareBytesHeld(Storage& storage) {
  SpareHeld* m = FindCapability<SpareHeld>(storage);
  return m == nullptr ? -1 : m->held();
}
}  // namespace internal

CKPT_STORAGE_BACKEND(mem) {
  r.Add({"mem", "", "process memory, shared by name within the process", BackendCaps("memory", false, true, false)},
        OpenMemStorage);
}

}  // namespace ckpt

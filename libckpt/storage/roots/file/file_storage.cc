// file:// (io_uring) and posix:// (pread/pwrite threads): a local or shared filesystem.

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "net/uri.h"
#include "storage/backend.h"
#include "storage/roots/file/io_engine.h"
#include "util/errors.h"
#include "util/log.h"
#include "util/strings.h"

namespace ckpt {
namespace {

constexpr size_t kDirectAlign = 4096;

absl::Status CheckRelative(std::string_view path) {
  if (!path.empty() && path.front() == '/') {
    return absl::InvalidArgumentError(StrCat("storage path '", path, "' must be relative"));
  }
  for (absl::string_view part : absl::StrSplit(AV(path), '/')) {
    if (part == "..") {
      return absl::InvalidArgumentError(StrCat("storage path '", path, "' must not contain '..'"));
    }
  }
  return absl::OkStatus();
}

absl::Status MakeDirs(const std::string& dir) {
  if (dir.empty()) return absl::OkStatus();
  struct stat st;
  if (stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return absl::OkStatus();
    return absl::FailedPreconditionError(StrCat(dir, " exists and is not a directory"));
  }
  size_t slash = dir.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    CKPT_RETURN_IF_ERROR(MakeDirs(dir.substr(0, slash)));
  }
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoStatus(errno, StrCat("mkdir ", dir));
  }
  return absl::OkStatus();
}

absl::Status FsyncPath(const std::string& path, bool dir) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | (dir ? O_DIRECTORY : 0));
  if (fd < 0) return ErrnoStatus(errno, StrCat("open ", path, " for fsync"));
  int rc = fsync(fd);
  int err = errno;
  close(fd);
  if (rc != 0) return ErrnoStatus(err, StrCat("fsync ", path));
  return absl::OkStatus();
}

std::string ParentOf(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

absl::Status WriteAll(int fd, const std::byte* p, size_t n, const std::string& path) {
  size_t done = 0;
  while (done < n) {
    ssize_t w = write(fd, p + done, n - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, StrCat("write ", path, " at offset ", done));
    }
    done += static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

class FileStorage;

// A writable file is flushed (fdatasync) each time this many more bytes of
// it have been written; `flush_every` in the URI overrides it, 0 turns it
// off. See FileWritable::WriteAsync.
constexpr int64_t kDefaultFlushEvery = int64_t{32} << 20;

class FileWritable final : public WritableFile {
 public:
  FileWritable(IoEngine* engine, int fd, bool direct, uint64_t flush_every, std::string full, std::string rel)
      : engine_(engine),
        fd_(fd),
        direct_(direct),
        flush_every_(flush_every),
        full_(std::make_shared<const std::string>(std::move(full))),
        rel_(std::move(rel)) {}

  ~FileWritable() override {
    if (fd_ >= 0) {
      (void)Drain();
      close(fd_);
    }
  }

  void WriteAsync(uint64_t offset, absl::Span<const std::byte> data, IoCallback done) override {
    if (direct_ && (offset % kDirectAlign || data.size() % kDirectAlign ||
                    reinterpret_cast<uintptr_t>(data.data()) % kDirectAlign)) {
      std::move(done)(absl::InvalidArgumentError(
          StrCat("unaligned O_DIRECT write of ", data.size(), " bytes at offset ", offset, " in ", *full_)));
      return;
    }
    bool flush = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++outstanding_;
      // Flush behind the writes: once flush_every more bytes have landed
      // since the last flush began, make them durable now (one flush at a
      // time), so the device's write cache drains while the save is still
      // producing, and Finish's fdatasync finds little left.
      if (flush_every_ > 0 && !flushing_ && written_ >= flush_mark_ + flush_every_) {
        flushing_ = flush = true;
        flush_mark_ = written_;
        ++outstanding_;
      }
    }
    if (flush) SubmitFlush();
    auto req = std::make_unique<IoRequest>();
    req->kind = IoRequest::Kind::kWrite;
    req->fd = fd_;
    req->offset = offset;
    req->buf = const_cast<std::byte*>(data.data());
    req->len = data.size();
    req->path = full_;
    req->callback = [this, done = std::move(done), len = data.size()](absl::Status s) mutable {
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        if (first_error_.ok()) first_error_ = s;
      }
      const bool ok = s.ok();
      std::move(done)(std::move(s));
      std::lock_guard<std::mutex> lock(mu_);
      if (ok) written_ += len;
      if (--outstanding_ == 0) cv_.notify_all();
    };
    engine_->Submit(std::move(req));
  }

  absl::Status Drain() override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return outstanding_ == 0; });
    return first_error_;
  }

  void Reserve(uint64_t bytes) override {
    // Filesystems without fallocate, or without the space, simply get
    // appending writes (a lack of space is then reported by the write).
    if (fd_ >= 0 && bytes > 0) (void)fallocate(fd_, 0, 0, static_cast<off_t>(bytes));
  }

  absl::Status Finish(uint64_t final_size) override {
    CKPT_RETURN_IF_ERROR(Drain());
    if (fd_ < 0) return absl::FailedPreconditionError("file already finished");
    struct stat st;
    if (fstat(fd_, &st) != 0) return ErrnoStatus(errno, StrCat("fstat ", *full_));
    if (static_cast<uint64_t>(st.st_size) != final_size && ftruncate(fd_, static_cast<off_t>(final_size)) != 0) {
      return ErrnoStatus(errno, StrCat("ftruncate ", *full_));
    }
    if (fdatasync(fd_) != 0) {
      return ErrnoStatus(errno, StrCat("fdatasync ", *full_));
    }
    int rc = close(fd_);
    fd_ = -1;
    if (rc != 0) return ErrnoStatus(errno, StrCat("close ", *full_));
    return absl::OkStatus();
  }

  size_t alignment() const override { return direct_ ? kDirectAlign : 1; }
  const std::string& path() const override { return rel_; }

 private:
  void SubmitFlush() {
    auto req = std::make_unique<IoRequest>();
    req->kind = IoRequest::Kind::kSync;
    req->fd = fd_;
    req->path = full_;
    // An error here is the file's: the kernel reports a writeback error to
    // one fdatasync only, so Finish's own would not see it again.
    req->callback = [this](absl::Status s) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!s.ok() && first_error_.ok()) first_error_ = std::move(s);
      flushing_ = false;
      if (--outstanding_ == 0) cv_.notify_all();
    };
    engine_->Submit(std::move(req));
  }

  IoEngine* engine_;
  int fd_;
  bool direct_;
  const uint64_t flush_every_;  ///< 0: only Finish flushes
  std::shared_ptr<const std::string> full_;
  std::string rel_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t outstanding_ = 0;
  absl::Status first_error_;
  uint64_t written_ = 0;     ///< bytes whose writes completed
  uint64_t flush_mark_ = 0;  ///< written_ when the last flush began
  bool flushing_ = false;
};

class FileReadable final : public ReadableFile {
 public:
  FileReadable(IoEngine* engine, int fd, int direct_fd, uint64_t size, std::string full, std::string rel)
      : engine_(engine),
        fd_(fd),
        direct_fd_(direct_fd),
        size_(size),
        full_(std::make_shared<const std::string>(std::move(full))),
        rel_(std::move(rel)) {}
  ~FileReadable() override {
    close(fd_);
    if (direct_fd_ >= 0) close(direct_fd_);
  }

  uint64_t size() const override { return size_; }

  absl::Status ReadAt(uint64_t offset, absl::Span<std::byte> dst) override {
    if (offset > size_ || dst.size() > size_ - offset) {
      return absl::OutOfRangeError(
          StrCat("truncated: ", *full_, " has ", size_, " bytes, reading ", dst.size(), " at byte offset ", offset));
    }
    size_t done = 0;
    while (done < dst.size()) {
      ssize_t n = pread(fd_, dst.data() + done, dst.size() - done, static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(errno, StrCat("read of ", dst.size(), " bytes at offset ", offset, " in ", *full_));
      }
      if (n == 0) {
        return absl::OutOfRangeError(StrCat("truncated: ", *full_, " ends at byte offset ", offset + done));
      }
      done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

  void ReadAsync(uint64_t offset, absl::Span<std::byte> dst, IoCallback done) override {
    if (offset > size_ || dst.size() > size_ - offset) {
      std::move(done)(absl::OutOfRangeError(
          StrCat("truncated: ", *full_, " has ", size_, " bytes, reading ", dst.size(), " at byte offset ", offset)));
      return;
    }
    auto req = std::make_unique<IoRequest>();
    req->kind = IoRequest::Kind::kRead;
    const bool aligned = direct_fd_ >= 0 && offset % kDirectAlign == 0 && dst.size() % kDirectAlign == 0 &&
                         reinterpret_cast<uintptr_t>(dst.data()) % kDirectAlign == 0;
    req->fd = aligned ? direct_fd_ : fd_;
    req->offset = offset;
    req->buf = dst.data();
    req->len = dst.size();
    req->path = full_;
    req->callback = std::move(done);
    engine_->Submit(std::move(req));
  }

  size_t direct_alignment() const override { return direct_fd_ >= 0 ? kDirectAlign : 0; }
  const std::string& path() const override { return rel_; }

 private:
  IoEngine* engine_;
  int fd_;
  int direct_fd_;
  uint64_t size_;
  std::shared_ptr<const std::string> full_;
  std::string rel_;
};

class FileStorage final : public Storage, public BufferRegistry, public LocalFiles {
 public:
  FileStorage(std::string uri, std::string root, bool direct, uint64_t flush_every, std::unique_ptr<IoEngine> engine)
      : uri_(std::move(uri)),
        root_(std::move(root)),
        direct_(direct),
        flush_every_(flush_every),
        engine_(std::move(engine)) {}

  std::string uri() const override { return uri_; }

  StorageCaps caps() const override {
    StorageCaps c;
    c.engine = std::string(engine_->name());
    c.direct_io = direct_;
    c.atomic_rename = true;
    c.ranged_reads = true;
    c.registered_buffers = engine_->supports_registered_buffers();
    c.durable = true;
    return c;
  }

  std::string Full(std::string_view rel) const { return rel.empty() ? root_ : StrCat(root_, "/", rel); }

  absl::StatusOr<std::unique_ptr<WritableFile>> OpenWritable(std::string_view path,
                                                             const WriteOptions& options) override {
    CKPT_RETURN_IF_ERROR(CheckRelative(path));
    std::string full = Full(path);
    CKPT_RETURN_IF_ERROR(MakeDirs(ParentOf(full)));
    const int base = O_WRONLY | O_CREAT | O_CLOEXEC | (options.truncate ? O_TRUNC : 0);
    bool direct = direct_ && options.direct;
    int fd = -1;
    if (direct) {
      fd = open(full.c_str(), base | O_DIRECT, 0644);
      if (fd < 0 && errno == EINVAL) direct = false;  // fs refuses O_DIRECT
    }
    if (fd < 0) fd = open(full.c_str(), base, 0644);
    if (fd < 0) return ErrnoStatus(errno, StrCat("create ", full));
    return std::unique_ptr<WritableFile>(
        std::make_unique<FileWritable>(engine_.get(), fd, direct, flush_every_, std::move(full), std::string(path)));
  }

  std::string LocalPath(std::string_view path) override {
    return CheckRelative(path).ok() ? Full(path) : std::string();
  }

  StorageCapability* Capability(std::string_view name) override {
    if (name == BufferRegistry::kName) return static_cast<BufferRegistry*>(this);
    if (name == LocalFiles::kName) return static_cast<LocalFiles*>(this);
    return nullptr;
  }

  absl::StatusOr<std::unique_ptr<ReadableFile>> OpenReadable(std::string_view path) override {
    CKPT_RETURN_IF_ERROR(CheckRelative(path));
    std::string full = Full(path);
    CKPT_ASSIGN_OR_RETURN(const int fd, OpenRegularFile(full));
    struct stat st;
    if (fstat(fd, &st) != 0) {
      int err = errno;
      close(fd);
      return ErrnoStatus(err, StrCat("fstat ", full));
    }
    int dfd = direct_ ? open(full.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT) : -1;
    return std::unique_ptr<ReadableFile>(std::make_unique<FileReadable>(
        engine_.get(), fd, dfd, static_cast<uint64_t>(st.st_size), std::move(full), std::string(path)));
  }

  absl::Status PutAtomic(std::string_view path, absl::Span<const std::byte> data) override {
    CKPT_RETURN_IF_ERROR(CheckRelative(path));
    const std::string full = Full(path);
    CKPT_ASSIGN_OR_RETURN(std::string tmp, WriteTempBeside(full, data));
    if (rename(tmp.c_str(), full.c_str()) != 0) {
      absl::Status s = ErrnoStatus(errno, StrCat("rename ", tmp, " to ", full));
      unlink(tmp.c_str());
      return s;
    }
    return FsyncPath(ParentOf(full), true);
  }

  // link(2) gives the temporary file the name only if nothing has it:
  // atomic and exclusive on local and shared POSIX filesystems (NFS
  // included), never a partial file under the name.
  absl::Status PutIfAbsent(std::string_view path, absl::Span<const std::byte> data) override {
    CKPT_RETURN_IF_ERROR(CheckRelative(path));
    const std::string full = Full(path);
    CKPT_ASSIGN_OR_RETURN(std::string tmp, WriteTempBeside(full, data));
    absl::Status s;
    if (link(tmp.c_str(), full.c_str()) != 0) {
      s = errno == EEXIST ? absl::AlreadyExistsError(StrCat(full, " already exists"))
                          : ErrnoStatus(errno, StrCat("link ", tmp, " to ", full));
    }
    unlink(tmp.c_str());
    if (!s.ok()) return s;
    return FsyncPath(ParentOf(full), true);
  }

  absl::StatusOr<uint64_t> FileSize(std::string_view path) override {
    CKPT_RETURN_IF_ERROR(CheckRelative(path));
    std::string full = Full(path);
    struct stat st;
    if (stat(full.c_str(), &st) != 0) return ErrnoStatus(errno, StrCat("stat ", full));
    return static_cast<uint64_t>(st.st_size);
  }

  absl::StatusOr<std::vector<DirEntry>> List(std::string_view dir) override {
    CKPT_RETURN_IF_ERROR(CheckRelative(dir));
    std::string full = Full(dir);
    DIR* d = opendir(full.c_str());
    if (d == nullptr) return ErrnoStatus(errno, StrCat("list ", full));
    std::vector<DirEntry> out;
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      bool is_dir = e->d_type == DT_DIR;
      if (e->d_type == DT_UNKNOWN) {
        struct stat st;
        is_dir = stat(StrCat(full, "/", name).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
      }
      out.push_back(DirEntry{std::move(name), is_dir});
    }
    closedir(d);
    std::sort(out.begin(), out.end(), [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
    return out;
  }

  absl::Status Remove(std::string_view path) override {
    CKPT_RETURN_IF_ERROR(CheckRelative(path));
    std::string full = Full(path);
    if (unlink(full.c_str()) != 0) return ErrnoStatus(errno, StrCat("remove ", full));
    return absl::OkStatus();
  }

  absl::Status RemoveAll(std::string_view dir) override {
    CKPT_RETURN_IF_ERROR(CheckRelative(dir));
    if (dir.empty()) return absl::InvalidArgumentError("refusing to remove the storage root");
    return RemoveTree(Full(dir));
  }

  absl::Status SyncDir(std::string_view dir) override {
    CKPT_RETURN_IF_ERROR(CheckRelative(dir));
    return FsyncPath(Full(dir), true);
  }

  uint64_t RegisterBuffers(const std::vector<absl::Span<std::byte>>& regions) override {
    return engine_->RegisterBuffers(regions);
  }
  void UnregisterBuffers(uint64_t token) override { engine_->UnregisterBuffers(token); }

 private:
  // Writes `data` durably to a fresh temporary file next to `full` (creating
  // the directory) and returns its path; the caller names or removes it.
  absl::StatusOr<std::string> WriteTempBeside(const std::string& full, absl::Span<const std::byte> data) {
    CKPT_RETURN_IF_ERROR(MakeDirs(ParentOf(full)));
    // Unique in the process, whichever storage object writes: two roots
    // opened on one directory by two Checkpointers share temporary names.
    static std::atomic<uint64_t> counter{0};
    std::string tmp = StrCat(full, ".tmp.", getpid(), ".", counter.fetch_add(1));
    int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoStatus(errno, StrCat("create ", tmp));
    absl::Status s = WriteAll(fd, data.data(), data.size(), tmp);
    if (s.ok() && fsync(fd) != 0) s = ErrnoStatus(errno, StrCat("fsync ", tmp));
    if (close(fd) != 0 && s.ok()) s = ErrnoStatus(errno, StrCat("close ", tmp));
    if (!s.ok()) {
      unlink(tmp.c_str());
      return s;
    }
    return tmp;
  }

  static absl::Status RemoveTree(const std::string& path) {
    struct stat st;
    if (lstat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) return absl::OkStatus();
      return ErrnoStatus(errno, StrCat("stat ", path));
    }
    if (S_ISDIR(st.st_mode)) {
      DIR* d = opendir(path.c_str());
      if (d == nullptr) return ErrnoStatus(errno, StrCat("list ", path));
      std::vector<std::string> names;
      while (dirent* e = readdir(d)) {
        std::string name = e->d_name;
        if (name != "." && name != "..") names.push_back(name);
      }
      closedir(d);
      for (const auto& n : names) {
        CKPT_RETURN_IF_ERROR(RemoveTree(StrCat(path, "/", n)));
      }
      if (rmdir(path.c_str()) != 0 && errno != ENOENT) {
        return ErrnoStatus(errno, StrCat("rmdir ", path));
      }
    } else if (unlink(path.c_str()) != 0 && errno != ENOENT) {
      return ErrnoStatus(errno, StrCat("remove ", path));
    }
    return absl::OkStatus();
  }

  std::string uri_;
  std::string root_;
  bool direct_;
  uint64_t flush_every_;
  std::unique_ptr<IoEngine> engine_;
};

absl::StatusOr<std::shared_ptr<Storage>> OpenLocal(std::string_view uri, bool allow_uring) {
  CKPT_ASSIGN_OR_RETURN(ParsedUri parsed, ParseUri(uri));
  std::string root = parsed.Path();
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  if (root.empty()) {
    return absl::InvalidArgumentError(StrCat("storage URI '", uri, "' names no path"));
  }
  CKPT_ASSIGN_OR_RETURN(bool direct, parsed.Bool("direct", true));
  CKPT_ASSIGN_OR_RETURN(int64_t qd, parsed.Int("qd", 64));
  CKPT_ASSIGN_OR_RETURN(int64_t flush_every, parsed.Bytes("flush_every", kDefaultFlushEvery));
  CKPT_ASSIGN_OR_RETURN(int64_t threads, parsed.Int("threads", 4));
  std::string engine_name = parsed.Str("engine", allow_uring ? "auto" : "threads");
  if (flush_every < 0) {
    return absl::InvalidArgumentError(StrCat("storage URI '", uri, "': flush_every must be a byte count (0: off)"));
  }
  if (qd < 1 || qd > 4096 || threads < 1 || threads > 256) {
    return absl::InvalidArgumentError(StrCat("storage URI '", uri, "': qd must be 1..4096 and threads 1..256"));
  }
  if (engine_name != "auto" && engine_name != "io_uring" && engine_name != "threads") {
    return absl::InvalidArgumentError(StrCat("storage URI '", uri, "': engine must be auto, io_uring or threads"));
  }
  std::unique_ptr<IoEngine> engine;
  if (allow_uring && engine_name != "threads") {
    auto uring = CreateUringEngine(static_cast<unsigned>(qd));
    if (uring.ok()) {
      engine = std::move(uring).value();
    } else if (engine_name == "io_uring") {
      return Annotate(uring.status(), "io_uring requested but unavailable");
    } else {
      static std::once_flag once;
      std::string why(uring.status().message());
      std::call_once(once, [&] {
        LogMessage(LogLevel::kInfo, "storage", StrCat("io_uring unavailable (", why, "); using the threads engine"));
      });
    }
  }
  if (!engine) engine = CreateThreadEngine(static_cast<int>(threads), static_cast<unsigned>(qd));
  return std::shared_ptr<Storage>(std::make_shared<FileStorage>(std::string(uri), std::move(root), direct,
                                                                static_cast<uint64_t>(flush_every), std::move(engine)));
}

absl::StatusOr<std::shared_ptr<Storage>> OpenFileStorage(std::string_view uri) { return OpenLocal(uri, true); }

absl::StatusOr<std::shared_ptr<Storage>> OpenPosixStorage(std::string_view uri) { return OpenLocal(uri, false); }

}  // namespace

CKPT_STORAGE_BACKEND(file) {
  StorageCaps file = BackendCaps("io_uring", true, true, true);
  file.registered_buffers = true;
  r.Add({"file", "", "local or shared filesystem through io_uring (threads where io_uring is refused)", file},
        OpenFileStorage);
  r.Add({"posix", "", "local or shared filesystem through pread/pwrite threads",
         BackendCaps("threads", true, true, true)},
        OpenPosixStorage);
}

}  // namespace ckpt

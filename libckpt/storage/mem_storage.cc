#include "storage/mem_storage.h"

#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "storage/uri.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt {
namespace {

struct MemFile {
  std::mutex mu;
  std::string data;
};

class MemStorage;

class MemWritable final : public WritableFile {
 public:
  MemWritable(std::shared_ptr<MemFile> file, std::string path) : file_(std::move(file)), path_(std::move(path)) {}
  void WriteAsync(uint64_t offset, absl::Span<const std::byte> data, IoCallback done) override {
    {
      std::lock_guard<std::mutex> lock(file_->mu);
      if (file_->data.size() < offset + data.size()) {
        file_->data.resize(offset + data.size());
      }
      std::memcpy(file_->data.data() + offset, data.data(), data.size());
    }
    std::move(done)(absl::OkStatus());
  }
  absl::Status Drain() override { return absl::OkStatus(); }
  absl::Status Finish(uint64_t final_size) override {
    std::lock_guard<std::mutex> lock(file_->mu);
    file_->data.resize(final_size);
    return absl::OkStatus();
  }
  size_t alignment() const override { return 1; }
  const std::string& path() const override { return path_; }

 private:
  std::shared_ptr<MemFile> file_;
  std::string path_;
};

class MemReadable final : public ReadableFile {
 public:
  MemReadable(std::shared_ptr<MemFile> file, std::string path) : file_(std::move(file)), path_(std::move(path)) {}
  uint64_t size() const override {
    std::lock_guard<std::mutex> lock(file_->mu);
    return file_->data.size();
  }
  absl::Status ReadAt(uint64_t offset, absl::Span<std::byte> dst) override {
    std::lock_guard<std::mutex> lock(file_->mu);
    if (offset > file_->data.size() || dst.size() > file_->data.size() - offset) {
      return absl::OutOfRangeError(StrCat("truncated: mem:", path_, " has ", file_->data.size(), " bytes, reading ",
                                          dst.size(), " at byte offset ", offset));
    }
    std::memcpy(dst.data(), file_->data.data() + offset, dst.size());
    return absl::OkStatus();
  }
  void ReadAsync(uint64_t offset, absl::Span<std::byte> dst, IoCallback done) override {
    std::move(done)(ReadAt(offset, dst));
  }
  size_t direct_alignment() const override { return 0; }
  const std::string& path() const override { return path_; }

 private:
  std::shared_ptr<MemFile> file_;
  std::string path_;
};

class MemStorage final : public Storage {
 public:
  explicit MemStorage(std::string uri) : uri_(std::move(uri)) {}

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
    auto file = std::make_shared<MemFile>();
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
    auto file = std::make_shared<MemFile>();
    file->data.assign(reinterpret_cast<const char*>(data.data()), data.size());
    std::lock_guard<std::mutex> lock(mu_);
    files_[std::string(path)] = std::move(file);
    return absl::OkStatus();
  }

  absl::Status PutIfAbsent(std::string_view path, absl::Span<const std::byte> data) override {
    CKPT_RETURN_IF_ERROR(Check(path));
    auto file = std::make_shared<MemFile>();
    file->data.assign(reinterpret_cast<const char*>(data.data()), data.size());
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
    std::lock_guard<std::mutex> lock(f->mu);
    return f->data.size();
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
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<MemFile>> files_;
};

}  // namespace

std::shared_ptr<Storage> NewMemStorage() { return std::make_shared<MemStorage>("mem://"); }

absl::StatusOr<std::shared_ptr<Storage>> OpenMemStorage(std::string_view uri) {
  CKPT_ASSIGN_OR_RETURN(ParsedUri parsed, ParseUri(uri));
  const std::string name = parsed.Path();
  if (name.empty()) return NewMemStorage();
  // Named stores live for the process so separate opens share files.
  static std::mutex mu;
  static auto* stores = new std::map<std::string, std::shared_ptr<Storage>>();
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = (*stores)[name];
  if (!slot) slot = std::make_shared<MemStorage>(StrCat("mem://", parsed.location));
  return slot;
}

}  // namespace ckpt

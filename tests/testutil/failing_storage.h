// A storage decorator whose writes fail on demand (ENOSPC, EIO), for tests
// of error paths that a real disk cannot be made to produce on request.
#ifndef CKPT_TESTS_FAILING_STORAGE_H_
#define CKPT_TESTS_FAILING_STORAGE_H_

#include <atomic>
#include <cerrno>
#include <memory>
#include <string>

#include "ckpt/storage.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt::testing {

class FailingStorage : public ForwardingStorage {
 public:
  using ForwardingStorage::ForwardingStorage;

  /// Data writes fail with `err` once `after_bytes` bytes were written to
  /// files whose path contains `match` (all files when empty). 0 disables.
  void FailWrites(int err, int64_t after_bytes, std::string match = "") {
    err_ = err;
    budget_ = after_bytes;
    match_ = std::move(match);
  }
  void Heal() { err_ = 0; }

  absl::StatusOr<std::unique_ptr<WritableFile>> OpenWritable(std::string_view path,
                                                             const WriteOptions& options = {}) override {
    auto w = ForwardingStorage::OpenWritable(path, options);
    if (!w.ok()) return w;
    return std::unique_ptr<WritableFile>(new Writer(this, std::move(w).value()));
  }

  absl::Status PutAtomic(std::string_view path, absl::Span<const std::byte> data) override {
    if (err_ != 0 && Matches(path) && budget_ <= 0) {
      return ErrnoStatus(err_, StrCat("atomic write of ", path));
    }
    return ForwardingStorage::PutAtomic(path, data);
  }

 private:
  bool Matches(std::string_view path) const { return match_.empty() || path.find(match_) != std::string_view::npos; }

  class Writer : public WritableFile {
   public:
    Writer(FailingStorage* owner, std::unique_ptr<WritableFile> base) : owner_(owner), base_(std::move(base)) {}
    void WriteAsync(uint64_t offset, absl::Span<const std::byte> data, IoCallback done) override {
      if (owner_->err_ != 0 && owner_->Matches(base_->path())) {
        if (owner_->budget_.fetch_sub(static_cast<int64_t>(data.size())) <= 0) {
          std::move(done)(ErrnoStatus(
              owner_->err_, StrCat("write of ", data.size(), " bytes at offset ", offset, " in ", base_->path())));
          return;
        }
      }
      base_->WriteAsync(offset, data, std::move(done));
    }
    absl::Status Drain() override { return base_->Drain(); }
    absl::Status Finish(uint64_t final_size) override { return base_->Finish(final_size); }
    size_t alignment() const override { return base_->alignment(); }
    const std::string& path() const override { return base_->path(); }

   private:
    FailingStorage* owner_;
    std::unique_ptr<WritableFile> base_;
  };

  std::atomic<int> err_{0};
  std::atomic<int64_t> budget_{0};
  std::string match_;
};

}  // namespace ckpt::testing

#endif  // CKPT_TESTS_FAILING_STORAGE_H_

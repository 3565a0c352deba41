// The files of s3://: a file being written (parts uploaded as they fill,
// completed or PUT whole at Finish) and a file being read (ranged GETs,
// split and run in parallel past read_chunk).
#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <set>

#include "storage/roots/s3/s3_client.h"
#include "storage/roots/s3/s3_parse.h"
#include "util/aligned_buffer.h"
#include "util/errors.h"

namespace ckpt::s3 {
namespace {

// A file being written: bytes gather into part buffers; each part goes up
// as soon as every byte of it is written; Finish sends the rest and
// completes the upload (or, for a file of one part, PUTs it whole).
class S3Writable final : public WritableFile {
 public:
  S3Writable(std::shared_ptr<S3Shared> s, std::string path)
      : s_(std::move(s)), path_(std::move(path)), key_(s_->client.Key(path_)), part_size_(s_->client.cfg().part_size) {}

  // WriteOptions::truncate == false: bytes not written by Finish keep the
  // existing object's (`size` bytes, ETag `etag`): an object store cannot
  // change an object in place, so Finish fetches them (a repair rewrites
  // only damaged ranges of a file this way).
  void KeepExisting(uint64_t size, std::string etag) {
    old_size_ = size;
    old_etag_ = std::move(etag);
    keep_old_ = true;
  }

  ~S3Writable() override {
    WaitIdle();
    if (!finished_ && !upload_id_.empty()) Abort();
  }

  void WriteAsync(uint64_t offset, absl::Span<const std::byte> data, IoCallback done) override {
    absl::Status st = Write(offset, data);
    std::move(done)(std::move(st));
  }

  absl::Status Drain() override {
    WaitIdle();
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }

  void Reserve(uint64_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!parts_.empty() || !upload_id_.empty()) return;  // too late to change the part size
    const uint64_t need = (bytes + kPlannedParts - 1) / kPlannedParts;
    if (need > part_size_) part_size_ = (need + kMiB - 1) / kMiB * kMiB;
  }

  absl::Status Finish(uint64_t final_size) override {
    CKPT_RETURN_IF_ERROR(Drain());
    std::unique_lock<std::mutex> lock(mu_);
    if (final_size == 0) {
      parts_.clear();
      lock.unlock();
      if (!upload_id_.empty()) Abort();
      CKPT_RETURN_IF_ERROR(PutWhole({}));
      finished_ = true;
      return absl::OkStatus();
    }
    const uint64_t last = (final_size - 1) / part_size_;
    for (auto it = parts_.upper_bound(last); it != parts_.end();) it = parts_.erase(it);  // padding past the end
    if (keep_old_) {
      lock.unlock();
      CKPT_RETURN_IF_ERROR(FillFromExisting(last, final_size));
      lock.lock();
    }
    if (upload_id_.empty() && last == 0) {
      auto it = parts_.find(0);
      if (it == parts_.end()) return Hole(0, final_size);
      if (it->second.Covered(0, final_size) < final_size) return HoleIn(0, it->second, final_size);
      Part part = std::move(it->second);
      parts_.clear();
      lock.unlock();
      CKPT_RETURN_IF_ERROR(PutWhole(absl::Span<const std::byte>(part.buf.data(), final_size)));
      finished_ = true;
      return absl::OkStatus();
    }
    // Every part before the last went up when its last byte was written;
    // what is still here must be the last one (or a hole).
    std::vector<std::pair<uint64_t, Part>> rest;
    for (auto& [idx, part] : parts_) rest.emplace_back(idx, std::move(part));
    parts_.clear();
    const uint64_t last_len = final_size - last * part_size_;
    std::shared_ptr<Part> resend;
    if (auto sl = sent_.find(last); sl != sent_.end() && sl->second != last_len) {
      // Padding past the final size filled the last part: send it again, cut.
      if (tail_ == nullptr || tail_idx_ != last) return Hole(last * part_size_, final_size);
      resend = tail_;
    }
    lock.unlock();
    for (auto& [idx, part] : rest) {
      const uint64_t lo = idx * part_size_, len = std::min(part_size_, final_size - lo);
      if (part.Covered(0, len) != len) return HoleIn(idx, part, len);
      if (idx != last) {  // a whole part goes up when written; one left here is a fault of this file
        return absl::InternalError(StrCat(s_->client.Uri(key_), ": part ", idx + 1, " was whole and not sent"));
      }
      CKPT_RETURN_IF_ERROR(EnsureUpload());
      s_->budget.Acquire(len);
      Submit(idx, std::make_shared<Part>(std::move(part)), len);
    }
    if (resend != nullptr) {
      s_->budget.Acquire(last_len);
      Submit(last, std::move(resend), last_len);
    }
    CKPT_RETURN_IF_ERROR(Drain());
    lock.lock();
    for (uint64_t i = 0; i <= last; ++i) {
      if (etags_.find(i + 1) == etags_.end()) return Hole(i * part_size_, std::min((i + 1) * part_size_, final_size));
    }
    std::string xml = "<CompleteMultipartUpload>";
    for (const auto& [num, etag] : etags_) {
      if (num > last + 1) break;
      StrAppend(&xml, "<Part><PartNumber>", num, "</PartNumber><ETag>", etag, "</ETag></Part>");
    }
    xml += "</CompleteMultipartUpload>";
    lock.unlock();
    CKPT_RETURN_IF_ERROR(Complete(xml, final_size));
    finished_ = true;
    return absl::OkStatus();
  }

  size_t alignment() const override { return 1; }
  const std::string& path() const override { return path_; }

 private:
  struct Part {
    AlignedBuffer buf;
    std::vector<std::pair<uint64_t, uint64_t>> have;  // written ranges, merged, sorted
    // Adds [lo, hi); returns the bytes now covered in total.
    uint64_t Add(uint64_t lo, uint64_t hi) {
      have.emplace_back(lo, hi);
      std::sort(have.begin(), have.end());
      std::vector<std::pair<uint64_t, uint64_t>> merged;
      for (const auto& r : have) {
        if (!merged.empty() && r.first <= merged.back().second) {
          merged.back().second = std::max(merged.back().second, r.second);
        } else {
          merged.push_back(r);
        }
      }
      have = std::move(merged);
      uint64_t n = 0;
      for (const auto& r : have) n += r.second - r.first;
      return n;
    }
    // The first range of [0, len) not written, as offsets in the part.
    std::pair<uint64_t, uint64_t> FirstGap(uint64_t len) const {
      uint64_t at = 0;
      for (const auto& r : have) {
        if (r.first > at) return {at, std::min(r.first, len)};
        at = std::max(at, r.second);
        if (at >= len) break;
      }
      return {at, len};
    }
    uint64_t Covered(uint64_t lo, uint64_t hi) const {
      uint64_t n = 0;
      for (const auto& r : have) {
        const uint64_t a = std::max(lo, r.first), b = std::min(hi, r.second);
        if (a < b) n += b - a;
      }
      return n;
    }
  };

  absl::Status Write(uint64_t offset, absl::Span<const std::byte> data) {
    if (finished_) return absl::FailedPreconditionError(StrCat(s_->client.Uri(key_), ": written after Finish"));
    while (!data.empty()) {
      const uint64_t idx = offset / part_size_;
      const uint64_t in = offset - idx * part_size_;
      const uint64_t n = std::min<uint64_t>(data.size(), part_size_ - in);
      if (idx >= kMaxParts) {
        return absl::ResourceExhaustedError(StrCat(s_->client.Uri(key_), ": byte offset ", offset, " is past ",
                                                   kMaxParts, " parts of ", part_size_,
                                                   " bytes; raise part_size= in the URI"));
      }
      std::unique_lock<std::mutex> lock(mu_);
      CKPT_RETURN_IF_ERROR(error_);
      if (sent_.count(idx) != 0) {
        return absl::FailedPreconditionError(
            StrCat(s_->client.Uri(key_), ": bytes at offset ", offset, " rewritten after their part was uploaded"));
      }
      auto it = parts_.find(idx);
      if (it == parts_.end()) {
        lock.unlock();
        CKPT_ASSIGN_OR_RETURN(AlignedBuffer buf, AlignedBuffer::Allocate(part_size_, false));
        lock.lock();
        it = parts_.find(idx);
        if (it == parts_.end()) it = parts_.emplace(idx, Part{std::move(buf), {}}).first;
      }
      std::memcpy(it->second.buf.data() + in, data.data(), n);
      const bool full = it->second.Add(in, in + n) == part_size_;
      std::shared_ptr<Part> part;
      if (full) {
        part = std::make_shared<Part>(std::move(it->second));
        parts_.erase(it);
        sent_[idx] = part_size_;
      }
      lock.unlock();
      if (full) {
        CKPT_RETURN_IF_ERROR(EnsureUpload());
        s_->budget.Acquire(part_size_);  // waits while too many parts are queued
        Submit(idx, std::move(part), part_size_);
      }
      offset += n;
      data.remove_prefix(n);
    }
    return absl::OkStatus();
  }

  // Fills what was not written of parts 0..last from the existing object;
  // whole parts go up at once (as in Write), the last stays for Finish.
  absl::Status FillFromExisting(uint64_t last, uint64_t final_size) {
    for (uint64_t idx = 0; idx <= last; ++idx) {
      const uint64_t base = idx * part_size_, len = std::min(part_size_, final_size - base);
      std::shared_ptr<Part> full;
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (sent_.count(idx) != 0) continue;
        auto it = parts_.find(idx);
        if (it == parts_.end()) {
          lock.unlock();
          CKPT_ASSIGN_OR_RETURN(AlignedBuffer buf, AlignedBuffer::Allocate(part_size_, false));
          lock.lock();
          it = parts_.emplace(idx, Part{std::move(buf), {}}).first;
        }
        Part& part = it->second;
        while (part.Covered(0, len) < len) {
          const auto [a, b] = part.FirstGap(len);
          if (base + a >= old_size_) break;  // beyond the old object: a hole, said below
          const uint64_t end = std::min<uint64_t>(b, old_size_ - base);
          lock.unlock();
          absl::Status got = GetExisting(base + a, absl::Span<std::byte>(part.buf.data() + a, end - a));
          lock.lock();
          CKPT_RETURN_IF_ERROR(got);
          part.Add(a, end);
        }
        if (idx < last && part.Covered(0, part_size_) == part_size_) {
          full = std::make_shared<Part>(std::move(part));
          parts_.erase(it);
          sent_[idx] = part_size_;
        }
      }
      if (full != nullptr) {
        CKPT_RETURN_IF_ERROR(EnsureUpload());
        s_->budget.Acquire(part_size_);
        Submit(idx, std::move(full), part_size_);
      }
    }
    return absl::OkStatus();
  }

  absl::Status GetExisting(uint64_t offset, absl::Span<std::byte> dst) {
    return RangedGet(s_->client, key_, old_etag_, old_size_, offset, dst, "GET (bytes kept)");
  }

  absl::Status Hole(uint64_t lo, uint64_t hi) {
    return absl::InvalidArgumentError(
        StrCat(s_->client.Uri(key_), ": bytes ", lo, "..", hi, " were never written before Finish"));
  }
  // The first gap of part `idx`, whose first `len` bytes must be written.
  absl::Status HoleIn(uint64_t idx, const Part& part, uint64_t len) {
    const auto [a, b] = part.FirstGap(len);
    return Hole(idx * part_size_ + a, idx * part_size_ + b);
  }

  absl::Status EnsureUpload() {
    std::lock_guard<std::mutex> lock(create_mu_);
    if (!upload_id_.empty()) return absl::OkStatus();
    S3Call call;
    call.method = "POST";
    call.key = key_;
    call.query = {{"uploads", ""}};
    call.what = StrCat("CreateMultipartUpload ", s_->client.Uri(key_));
    auto resp = s_->client.Do(call);
    if (!resp.ok()) return Fail(resp.status());
    auto id = ParseInitiateMultipartUpload(resp->body);
    if (!id.ok()) return Fail(Annotate(id.status(), call.what));
    std::lock_guard<std::mutex> l2(mu_);
    upload_id_ = *id;
    return absl::OkStatus();
  }

  absl::Status Fail(absl::Status st) {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.ok()) error_ = st;
    return st;
  }

  // Sends part `idx` (its first `len` bytes). The highest part sent so far
  // keeps its buffer: Finish may have to send it again shorter, when the
  // bytes that filled it were padding past the file's final size.
  void Submit(uint64_t idx, std::shared_ptr<Part> holder, uint64_t len) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++inflight_;
      sent_[idx] = len;
      if (tail_ == nullptr || idx >= tail_idx_) {
        tail_ = holder;
        tail_idx_ = idx;
      }
    }
    s_->client.pool().Submit([this, idx, holder, len] {
      S3Call call;
      call.method = "PUT";
      call.key = key_;
      call.query = {{"partNumber", std::to_string(idx + 1)}, {"uploadId", upload_id_}};
      call.body = absl::Span<const std::byte>(holder->buf.data(), len);
      call.what = StrCat("UploadPart ", idx + 1, " of ", s_->client.Uri(key_));
      auto resp = s_->client.Do(call);
      s_->budget.Release(len);
      std::lock_guard<std::mutex> lock(mu_);
      if (resp.ok()) {
        auto e = resp->headers.find("etag");
        if (e == resp->headers.end()) {
          if (error_.ok()) error_ = absl::DataLossError(StrCat(call.what, ": the answer has no ETag"));
        } else {
          etags_[idx + 1] = e->second;
        }
      } else if (error_.ok()) {
        error_ = resp.status();
      }
      --inflight_;
      cv_.notify_all();
    });
  }

  void WaitIdle() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return inflight_ == 0; });
  }

  absl::Status PutWhole(absl::Span<const std::byte> data) {
    S3Call call;
    call.method = "PUT";
    call.key = key_;
    call.body = data;
    call.what = StrCat("PUT ", s_->client.Uri(key_));
    return s_->client.Do(call).status();
  }

  absl::Status Complete(const std::string& xml, uint64_t final_size) {
    S3Call call;
    call.method = "POST";
    call.key = key_;
    call.query = {{"uploadId", upload_id_}};
    call.body = absl::Span<const std::byte>(reinterpret_cast<const std::byte*>(xml.data()), xml.size());
    call.what = StrCat("CompleteMultipartUpload ", s_->client.Uri(key_));
    int attempts = 0;
    auto resp = s_->client.Send(call, &attempts);
    CKPT_RETURN_IF_ERROR(resp.status());
    if (resp->status == 404 && attempts > 1) {
      // An earlier attempt completed it and its answer was lost: the
      // object must now be there with the size written.
      S3Call head;
      head.method = "HEAD";
      head.key = key_;
      head.what = StrCat("HEAD ", s_->client.Uri(key_));
      auto h = s_->client.Do(head);
      if (h.ok()) {
        auto cl = h->headers.find("content-length");
        int64_t n = -1;
        if (cl != h->headers.end() && ParseInt64(cl->second, &n) && static_cast<uint64_t>(n) == final_size) {
          return absl::OkStatus();
        }
      }
    }
    if (resp->status < 200 || resp->status >= 300) return s_->client.ErrorOf(call, *resp);
    // S3 may answer 200 and put the error in the body.
    const S3ErrorBody e = ParseS3Error(resp->body);
    if (!e.code.empty()) {
      return absl::UnavailableError(StrCat(call.what, ": ", e.code, " (", e.message, ")"));
    }
    return absl::OkStatus();
  }

  void Abort() {
    S3Call call;
    call.method = "DELETE";
    call.key = key_;
    call.query = {{"uploadId", upload_id_}};
    call.what = StrCat("AbortMultipartUpload ", s_->client.Uri(key_));
    (void)s_->client.Do(call);  // what is left is found by gc
    upload_id_.clear();
  }

  std::shared_ptr<S3Shared> s_;
  const std::string path_;
  const std::string key_;
  uint64_t part_size_;
  std::mutex create_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Part> parts_;     // not yet sent
  std::map<uint64_t, uint64_t> sent_;  // part index -> length sent
  std::shared_ptr<Part> tail_;         // the highest part sent, kept for Finish
  uint64_t tail_idx_ = 0;
  std::map<uint64_t, std::string> etags_;  // part number -> ETag
  std::string upload_id_;
  int inflight_ = 0;
  absl::Status error_;
  bool finished_ = false;
  bool keep_old_ = false;  // truncate == false over an existing object
  uint64_t old_size_ = 0;
  std::string old_etag_;
};

// ---------------------------------------------------------------------------
class S3Readable final : public ReadableFile {
 public:
  S3Readable(std::shared_ptr<S3Shared> s, std::string path, uint64_t size, std::string etag)
      : s_(std::move(s)), path_(std::move(path)), key_(s_->client.Key(path_)), size_(size), etag_(std::move(etag)) {}

  uint64_t size() const override { return size_; }

  absl::Status ReadAt(uint64_t offset, absl::Span<std::byte> dst) override {
    if (offset > size_ || dst.size() > size_ - offset) {
      return absl::OutOfRangeError(StrCat("truncated: ", s_->client.Uri(key_), " has ", size_, " bytes, reading ",
                                          dst.size(), " at byte offset ", offset));
    }
    if (dst.empty()) return absl::OkStatus();
    const uint64_t chunk = s_->client.cfg().read_chunk;
    if (dst.size() <= 2 * chunk) return Get(offset, dst);
    // A large range: pieces in parallel on the workers, the last here.
    struct Join {
      std::mutex mu;
      std::condition_variable cv;
      int left = 0;
      absl::Status first;
    };
    auto join = std::make_shared<Join>();
    const size_t pieces = (dst.size() + chunk - 1) / chunk;
    join->left = static_cast<int>(pieces - 1);
    for (size_t i = 0; i + 1 < pieces; ++i) {
      const uint64_t off = i * chunk;
      s_->client.pool().Submit([this, join, offset, off, dst, chunk] {
        absl::Status st = Get(offset + off, dst.subspan(off, chunk));
        std::lock_guard<std::mutex> lock(join->mu);
        if (join->first.ok()) join->first = st;
        if (--join->left == 0) join->cv.notify_all();
      });
    }
    const uint64_t tail = (pieces - 1) * chunk;
    absl::Status st = Get(offset + tail, dst.subspan(tail));
    std::unique_lock<std::mutex> lock(join->mu);
    join->cv.wait(lock, [&] { return join->left == 0; });
    return st.ok() ? join->first : st;
  }

  void ReadAsync(uint64_t offset, absl::Span<std::byte> dst, IoCallback done) override {
    if (dst.size() > 2 * s_->client.cfg().read_chunk) {
      // Large: split from this thread (the workers must not wait on workers).
      std::move(done)(ReadAt(offset, dst));
      return;
    }
    auto cb = std::make_shared<IoCallback>(std::move(done));  // ReadAt of a small range does not split
    s_->client.pool().Submit([this, offset, dst, cb] { std::move (*cb)(ReadAt(offset, dst)); });
  }

  size_t direct_alignment() const override { return 0; }
  const std::string& path() const override { return path_; }

 private:
  absl::Status Get(uint64_t offset, absl::Span<std::byte> dst) {
    return RangedGet(s_->client, key_, etag_, size_, offset, dst, "GET");
  }

  std::shared_ptr<S3Shared> s_;
  const std::string path_;
  const std::string key_;
  const uint64_t size_;
  const std::string etag_;
};

// ---------------------------------------------------------------------------

}  // namespace

std::unique_ptr<WritableFile> NewS3Writable(std::shared_ptr<S3Shared> s, std::string path,
                                            std::optional<std::pair<uint64_t, std::string>> existing) {
  auto w = std::make_unique<S3Writable>(std::move(s), std::move(path));
  if (existing) w->KeepExisting(existing->first, std::move(existing->second));
  return w;
}

std::unique_ptr<ReadableFile> NewS3Readable(std::shared_ptr<S3Shared> s, std::string path, uint64_t size,
                                            std::string etag) {
  return std::make_unique<S3Readable>(std::move(s), std::move(path), size, std::move(etag));
}

}  // namespace ckpt::s3

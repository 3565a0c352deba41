#include "storage/roots/s3/s3_storage.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "absl/functional/any_invocable.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "net/http_client.h"
#include "net/uri.h"
#include "storage/backend.h"
#include "storage/capabilities.h"
#include "storage/roots/s3/s3_parse.h"
#include "storage/roots/s3/s3_sign.h"
#include "util/aligned_buffer.h"
#include "util/errors.h"
#include "util/strings.h"
#include "util/task_pool.h"

namespace ckpt {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kMinPart = 5 * kMiB;  // S3's smallest part but the last
constexpr int kMaxParts = 10000;
constexpr int kPlannedParts = 9000;  // headroom under the limit when the size is a hint
constexpr const char* kEmptySha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

struct S3Config {
  std::string bucket;
  std::string prefix;  // no leading or trailing '/'
  std::string scheme;  // "http" or "https"
  std::string host;    // host[:port] of the endpoint
  std::string region;
  bool virtual_host = false;
  uint64_t part_size = 16 * kMiB;
  int connections = 16;
  uint64_t buffer_bytes = 0;
  uint64_t read_chunk = 8 * kMiB;
  double deadline_s = 120;
  std::string ca_file;  // https: the CAs to trust; empty: the system's store
  S3Credentials creds;
};

// ---------------------------------------------------------------------------
// One S3 request, signed, with retries.
struct S3Call {
  std::string method = "GET";
  std::string key;  // full object key; empty: the bucket
  std::vector<std::pair<std::string, std::string>> query;
  std::vector<std::pair<std::string, std::string>> headers;  // beyond host/date/sha256/auth
  absl::Span<const std::byte> body;
  std::string payload_hash;  // empty: computed from body
  absl::Span<std::byte> into;
  bool has_into = false;
  std::string what;  // for messages: "GET s3://b/k"
  // When the whole operation this request belongs to must end (a listing's
  // pages share one); unset: the configured deadline from the first attempt.
  std::optional<Clock::time_point> deadline;
};

bool Retryable(long status, const std::string& code) {
  if (status >= 500) return true;
  if (status == 429 || status == 408) return true;
  return code == "SlowDown" || code == "RequestTimeout" || code == "ConditionalRequestConflict" ||
         code == "OperationAborted" || code == "InternalError";
}

class S3Client {
 public:
  explicit S3Client(S3Config cfg) : cfg_(std::move(cfg)), pool_(cfg_.connections) {}

  const S3Config& cfg() const { return cfg_; }
  TaskPool& pool() { return pool_; }

  std::string Uri(std::string_view key) const { return StrCat("s3://", cfg_.bucket, "/", key); }
  /// The server, for messages: "http://127.0.0.1:7480".
  std::string Endpoint() const { return StrCat(cfg_.scheme, "://", cfg_.host); }

  std::string Key(std::string_view path) const {
    return cfg_.prefix.empty() ? std::string(path) : StrCat(cfg_.prefix, "/", path);
  }

  // When an operation that starts now must end.
  Clock::time_point DeadlineFromNow() const {
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(cfg_.deadline_s));
  }

  // Sends `call`, retrying transport failures, 5xx and throttling with
  // exponential backoff and full jitter until the deadline, which bounds
  // the whole: each attempt (its connection included) is cut at the time
  // left. Returns the response of the last attempt (any status) or the
  // transport error, saying how many attempts were made over how long.
  // What Send did, for the error of an answer that is not a success.
  struct Tried {
    bool out_of_time = false;  // it stopped because the deadline came
    std::string text;          // " (3 attempts in 6012 ms; the deadline of 6 s ran out)"
  };
  absl::StatusOr<HttpResponse> Send(const S3Call& call, int* attempts = nullptr, Tried* tried = nullptr) {
    const auto start = Clock::now();
    const auto deadline = call.deadline.value_or(DeadlineFromNow());
    const std::string payload_hash = !call.payload_hash.empty() ? call.payload_hash
                                     : call.body.empty()        ? std::string(kEmptySha256)
                                                                : Sha256Hex(call.body.data(), call.body.size());
    std::string path, host = cfg_.host;
    if (cfg_.virtual_host) {
      host = StrCat(cfg_.bucket, ".", cfg_.host);
      path = StrCat("/", S3UriEncode(call.key, true));
    } else {
      path = call.key.empty() ? StrCat("/", cfg_.bucket) : StrCat("/", cfg_.bucket, "/", S3UriEncode(call.key, true));
    }
    const std::string query = S3CanonicalQuery(call.query);
    const std::string url = StrCat(cfg_.scheme, "://", host, path, query.empty() ? "" : "?", query);
    int attempt = 0;
    double backoff = 0.05;
    absl::StatusOr<HttpResponse> last = absl::UnavailableError("not sent");
    bool out_of_time = false;
    while (true) {
      const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
      if (left < 0.001) {
        out_of_time = true;
        if (attempt == 0) last = absl::DeadlineExceededError("no time was left to send it");
        break;
      }
      ++attempt;
      SigV4Request sreq;
      sreq.method = call.method;
      sreq.canonical_uri = path;
      sreq.query = call.query;
      const std::string date = AmzDate(std::time(nullptr) + clock_offset_s_.load(std::memory_order_relaxed));
      sreq.headers = {{"host", host}, {"x-amz-date", date}, {"x-amz-content-sha256", payload_hash}};
      if (!cfg_.creds.session_token.empty())
        sreq.headers.emplace_back("x-amz-security-token", cfg_.creds.session_token);
      for (const auto& h : call.headers) sreq.headers.push_back(h);
      sreq.payload_hash = payload_hash;
      HttpRequest req;
      req.method = call.method;
      req.url = url;
      for (const auto& [k, v] : sreq.headers) req.headers.push_back(StrCat(k, ": ", v));
      req.headers.push_back(StrCat("Authorization: ", SigV4Authorization(sreq, cfg_.creds, cfg_.region, date)));
      req.body = call.body;
      req.timeout_s = left;
      req.connect_timeout_s = std::min(req.connect_timeout_s, left);
      req.ca_file = cfg_.ca_file;
      req.into = call.into;
      req.has_into = call.has_into;
      const auto sent = Clock::now();
      last = http_.Perform(req);
      if (trace_) {
        std::fprintf(stderr, "ckpt s3: %s -> %s in %.1f ms%s\n", call.what.c_str(),
                     last.ok() ? std::to_string(last->status).c_str() : std::string(last.status().message()).c_str(),
                     std::chrono::duration<double, std::milli>(Clock::now() - sent).count(),
                     attempt > 1 ? StrCat(" (attempt ", attempt, ")").c_str() : "");
      }
      bool retry;
      if (!last.ok()) {
        retry = absl::IsUnavailable(last.status());
      } else if (last->status >= 200 && last->status < 300) {
        if (call.has_into && last->into_bytes != call.into.size()) {
          last = absl::UnavailableError(
              StrCat(call.what, ": the answer ended after ", last->into_bytes, " of ", call.into.size(), " bytes"));
          retry = true;
        } else {
          break;
        }
      } else {
        const S3ErrorBody e = ParseS3Error(last->body);
        retry = Retryable(last->status, e.code);
        if (e.code == "RequestTimeTooSkewed" && attempt == 1 && AdoptServerClock(*last)) retry = true;
      }
      if (!retry) break;
      // Full jitter: uniform in [0, backoff], the window doubling to 2 s;
      // the last wait ends at the deadline, where one more attempt is cut.
      thread_local std::mt19937_64 rng{std::random_device{}()};
      const double sleep = std::min(std::uniform_real_distribution<double>(0, backoff)(rng),
                                    std::max(0.0, std::chrono::duration<double>(deadline - Clock::now()).count()));
      std::this_thread::sleep_for(std::chrono::duration<double>(sleep));
      backoff = std::min(backoff * 2, 2.0);
    }
    if (attempts != nullptr) *attempts = attempt;
    if (!last.ok()) {
      return absl::Status(out_of_time && absl::IsUnavailable(last.status()) ? absl::StatusCode::kDeadlineExceeded
                                                                            : last.status().code(),
                          StrCat(call.what, ": ", last.status().message(), Tries(attempt, start, out_of_time)));
    }
    // The account of the attempts is made for a failed answer only.
    if (tried != nullptr && (last->status < 200 || last->status >= 300)) {
      *tried = Tried{out_of_time, Tries(attempt, start, out_of_time)};
    }
    return last;
  }

  // " (3 attempts in 6012 ms; the deadline of 6 s ran out)".
  std::string Tries(int attempt, Clock::time_point start, bool out_of_time) const {
    const auto ms = static_cast<int64_t>(std::chrono::duration<double>(Clock::now() - start).count() * 1000 + 0.5);
    return StrCat(" (", attempt, attempt == 1 ? " attempt" : " attempts", " in ", ms, " ms",
                  out_of_time ? StrCat("; the deadline of ", cfg_.deadline_s, " s ran out") : std::string(), ")");
  }

  // Send, then any non-2xx status as an error.
  absl::StatusOr<HttpResponse> Do(const S3Call& call, int* attempts = nullptr) {
    Tried tried;
    CKPT_ASSIGN_OR_RETURN(HttpResponse resp, Send(call, attempts, &tried));
    if (resp.status >= 200 && resp.status < 300) return resp;
    absl::Status error = ErrorOf(call, resp, tried.text);
    // Retried until the deadline: the storage did not answer in time.
    if (tried.out_of_time && absl::IsUnavailable(error)) return absl::DeadlineExceededError(error.message());
    return error;
  }

  // The status for a failed answer: the code says what kind, the message
  // carries the server's code, message and request id.
  // `tries`: how many attempts over how long (Send's account), when known.
  // The server's words are escaped before they reach a terminal or a log.
  absl::Status ErrorOf(const S3Call& call, const HttpResponse& resp, std::string_view tries = "") const {
    S3ErrorBody e = ParseS3Error(resp.body);
    if (e.code.empty()) {
      // HEAD answers carry no body.
      e.code = resp.status == 404 ? "NotFound" : resp.status == 403 ? "Forbidden" : StrCat("HTTP ", resp.status);
    }
    std::string msg = StrCat(Printable(call.what), ": ", Printable(e.code),
                             e.message.empty() ? "" : StrCat(" (", Printable(e.message.substr(0, 1024)), ")"));
    if (!e.request_id.empty()) StrAppend(&msg, " [request ", Printable(e.request_id.substr(0, 256)), "]");
    StrAppend(&msg, tries);
    if (e.code == "RequestTimeTooSkewed") {
      auto d = resp.headers.find("date");
      StrAppend(&msg, ": this machine's clock and the server's differ too much",
                d != resp.headers.end() ? StrCat(" (server: ", d->second, ")") : std::string(),
                "; set the clock (NTP) and retry");
      return absl::FailedPreconditionError(msg);
    }
    if (e.code == "NoSuchBucket") {
      return absl::NotFoundError(StrCat(msg, ": the bucket '", cfg_.bucket, "' does not exist at ", cfg_.scheme, "://",
                                        cfg_.host, " (create it, or check endpoint= and region=)"));
    }
    if (resp.status == 404) return absl::NotFoundError(msg);
    if (resp.status == 403 || resp.status == 401) {
      if (e.code == "InvalidAccessKeyId" || e.code == "SignatureDoesNotMatch" || e.code == "Forbidden" ||
          e.code == "AccessDenied") {
        StrAppend(&msg, ": check the credentials (", cfg_.creds.source, ") and region=", cfg_.region);
      }
      return absl::PermissionDeniedError(msg);
    }
    if (resp.status == 412) return absl::FailedPreconditionError(msg);
    if (resp.status == 409) return absl::AbortedError(msg);
    if (resp.status >= 500 || resp.status == 429) return absl::UnavailableError(msg);
    return absl::InvalidArgumentError(msg);
  }

 private:
  // On RequestTimeTooSkewed, sign later requests with the server's clock
  // (as the AWS SDKs do) when its Date header says how far off we are.
  bool AdoptServerClock(const HttpResponse& resp) {
    auto d = resp.headers.find("date");
    if (d == resp.headers.end()) return false;
    std::tm tm{};
    if (strptime(d->second.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm) == nullptr) return false;
    const int64_t server = static_cast<int64_t>(timegm(&tm));
    clock_offset_s_.store(server - static_cast<int64_t>(std::time(nullptr)), std::memory_order_relaxed);
    return true;
  }

  S3Config cfg_;
  HttpClient http_;
  const bool trace_ = std::getenv("CKPT_S3_TRACE") != nullptr;  // one line per request on stderr
  std::atomic<int64_t> clock_offset_s_{0};
  TaskPool pool_;  // last: its threads stop before the rest goes (part uploads, async reads)
};

// Bytes of parts waiting for or in upload, across every file of a storage.
class UploadBudget {
 public:
  explicit UploadBudget(uint64_t limit) : limit_(limit) {}
  void Acquire(uint64_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return used_ == 0 || used_ + n <= limit_; });
    used_ += n;
  }
  void Release(uint64_t n) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      used_ -= n;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t limit_;
  uint64_t used_ = 0;
};

struct S3Shared {
  explicit S3Shared(S3Config cfg) : client(std::move(cfg)), budget(client.cfg().buffer_bytes) {}
  S3Client client;
  UploadBudget budget;
};

// A ranged GET of `dst.size()` bytes at `offset` of `key`, straight into
// `dst`, of the object with ETag `etag` only (when known): a replaced
// object is an error, never a mix of two versions. `total` is the object's
// size, for the one answer other than 206 that is right (200, whole object).
absl::Status RangedGet(S3Client& client, const std::string& key, const std::string& etag, uint64_t total,
                       uint64_t offset, absl::Span<std::byte> dst, std::string_view verb) {
  S3Call call;
  call.key = key;
  call.headers = {{"range", StrCat("bytes=", offset, "-", offset + dst.size() - 1)}};
  if (!etag.empty()) call.headers.emplace_back("if-match", etag);
  call.into = dst;
  call.has_into = true;
  call.what = StrCat(verb, " ", client.Uri(key), " bytes ", offset, "..", offset + dst.size());
  auto resp = client.Do(call);
  if (!resp.ok()) {
    if (absl::IsFailedPrecondition(resp.status())) {
      return absl::DataLossError(StrCat(resp.status().message(), ": the object changed since it was opened"));
    }
    return resp.status();
  }
  if (resp->status != 206 && !(resp->status == 200 && offset == 0 && dst.size() == total)) {
    return absl::DataLossError(StrCat(call.what, ": the server answered ", resp->status, " to a ranged GET"));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
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
class S3Storage final : public Storage, public PendingUploads {
 public:
  S3Storage(std::string uri, S3Config cfg) : uri_(std::move(uri)), s_(std::make_shared<S3Shared>(std::move(cfg))) {}

  std::string uri() const override { return uri_; }
  StorageCaps caps() const override {
    StorageCaps c;
    c.engine = "s3";
    c.direct_io = false;
    c.atomic_rename = false;
    c.ranged_reads = true;
    c.durable = true;
    return c;
  }

  absl::StatusOr<std::unique_ptr<WritableFile>> OpenWritable(std::string_view path,
                                                             const WriteOptions& options) override {
    CKPT_RETURN_IF_ERROR(Check(path));
    auto w = std::make_unique<S3Writable>(s_, std::string(path));
    if (!options.truncate) {
      auto h = Head(path, "open");
      if (h.ok()) {
        uint64_t size = 0;
        CKPT_RETURN_IF_ERROR(SizeOf(*h, path, &size));
        auto e = h->headers.find("etag");
        w->KeepExisting(size, e != h->headers.end() ? e->second : "");
      } else if (!absl::IsNotFound(h.status())) {
        return h.status();
      }
    }
    return std::unique_ptr<WritableFile>(std::move(w));
  }

  absl::StatusOr<std::unique_ptr<ReadableFile>> OpenReadable(std::string_view path) override {
    CKPT_RETURN_IF_ERROR(Check(path));
    CKPT_ASSIGN_OR_RETURN(HttpResponse h, Head(path, "open"));
    uint64_t size = 0;
    CKPT_RETURN_IF_ERROR(SizeOf(h, path, &size));
    auto e = h.headers.find("etag");
    return std::unique_ptr<ReadableFile>(
        std::make_unique<S3Readable>(s_, std::string(path), size, e != h.headers.end() ? e->second : ""));
  }

  absl::Status PutAtomic(std::string_view path, absl::Span<const std::byte> data) override {
    CKPT_RETURN_IF_ERROR(Check(path));
    S3Call call;
    call.method = "PUT";
    call.key = client().Key(path);
    call.body = data;
    call.what = StrCat("PUT ", client().Uri(call.key));
    return client().Do(call).status();
  }

  absl::Status PutIfAbsent(std::string_view path, absl::Span<const std::byte> data) override {
    CKPT_RETURN_IF_ERROR(Check(path));
    S3Call call;
    call.method = "PUT";
    call.key = client().Key(path);
    call.body = data;
    call.headers = {{"if-none-match", "*"}};
    call.what = StrCat("PUT (if absent) ", client().Uri(call.key));
    int attempts = 0;
    CKPT_ASSIGN_OR_RETURN(HttpResponse resp, client().Send(call, &attempts));
    if (resp.status >= 200 && resp.status < 300) return absl::OkStatus();
    if (resp.status == 412) {
      if (attempts > 1) {
        // An earlier attempt may have been the one that created it and
        // lost its answer: ours if it holds our bytes.
        auto got = GetAll(path);
        if (got.ok() && got->size() == data.size() && std::memcmp(got->data(), data.data(), data.size()) == 0) {
          return absl::OkStatus();
        }
      }
      return absl::AlreadyExistsError(StrCat(client().Uri(call.key), " already exists"));
    }
    return client().ErrorOf(call, resp);
  }

  absl::StatusOr<std::string> GetAll(std::string_view path) override {
    CKPT_RETURN_IF_ERROR(Check(path));
    S3Call call;
    call.key = client().Key(path);
    call.what = StrCat("GET ", client().Uri(call.key));
    CKPT_ASSIGN_OR_RETURN(HttpResponse resp, client().Do(call));
    return std::move(resp.body);
  }

  absl::StatusOr<uint64_t> FileSize(std::string_view path) override {
    CKPT_RETURN_IF_ERROR(Check(path));
    CKPT_ASSIGN_OR_RETURN(HttpResponse h, Head(path, "stat"));
    uint64_t size = 0;
    CKPT_RETURN_IF_ERROR(SizeOf(h, path, &size));
    return size;
  }

  absl::StatusOr<std::vector<DirEntry>> List(std::string_view dir) override {
    if (!dir.empty()) CKPT_RETURN_IF_ERROR(Check(dir));
    const std::string prefix = DirPrefix(dir);
    std::map<std::string, bool> entries;
    CKPT_RETURN_IF_ERROR(ListKeys(prefix, true, [&](const S3ListPage& page, const std::string& what) {
      return AddDirectoryEntries(page, prefix, what, &entries);
    }));
    if (entries.empty() && !dir.empty()) {
      return absl::NotFoundError(StrCat("list ", client().Uri(prefix), ": no such directory (no object under it)"));
    }
    std::vector<DirEntry> out;
    out.reserve(entries.size());
    for (auto& [name, is_dir] : entries) out.push_back(DirEntry{name, is_dir});
    return out;
  }

  absl::Status Remove(std::string_view path) override {
    CKPT_RETURN_IF_ERROR(Check(path));
    // DELETE answers 204 for a missing key too: ask first, so that a
    // missing file is NotFound as on every other backend.
    CKPT_RETURN_IF_ERROR(Head(path, "remove").status());
    S3Call call;
    call.method = "DELETE";
    call.key = client().Key(path);
    call.what = StrCat("DELETE ", client().Uri(call.key));
    return client().Do(call).status();
  }

  absl::Status RemoveAll(std::string_view dir) override {
    if (dir.empty()) return absl::InvalidArgumentError("refusing to remove the storage root");
    CKPT_RETURN_IF_ERROR(Check(dir));
    const std::string prefix = DirPrefix(dir);
    // Unfinished uploads below it first, so none completes into the
    // emptied directory afterwards.
    CKPT_ASSIGN_OR_RETURN(std::vector<S3Upload> uploads, ListUploads(prefix));
    for (const S3Upload& u : uploads) CKPT_RETURN_IF_ERROR(AbortUpload(u.key, u.upload_id));
    std::vector<std::string> keys;
    CKPT_RETURN_IF_ERROR(ListKeys(prefix, false, [&](const S3ListPage& page, const std::string& what) {
      return AddKeysUnder(page, prefix, what, &keys);
    }));
    keys.push_back(client().Key(dir));  // a file of that name, as on a file system
    for (size_t i = 0; i < keys.size(); i += 1000) {
      CKPT_RETURN_IF_ERROR(
          DeleteBatch(std::vector<std::string>(keys.begin() + i, keys.begin() + std::min(keys.size(), i + 1000))));
    }
    return absl::OkStatus();
  }

  absl::Status SyncDir(std::string_view) override { return absl::OkStatus(); }

  StorageCapability* Capability(std::string_view name) override {
    return name == PendingUploads::kName ? static_cast<PendingUploads*>(this) : nullptr;
  }

  absl::StatusOr<std::vector<PendingUpload>> ListPending() override {
    CKPT_ASSIGN_OR_RETURN(std::vector<S3Upload> uploads, ListUploads(DirPrefix("")));
    std::vector<PendingUpload> out;
    const int64_t now = static_cast<int64_t>(std::time(nullptr));
    const std::string root = DirPrefix("");
    for (const S3Upload& u : uploads) {
      PendingUpload p;
      p.path = u.key.substr(root.size());
      p.upload_id = u.upload_id;
      const int64_t t = ParseIso8601(u.initiated);
      p.age_s = t < 0 ? -1 : std::max<int64_t>(0, now - t);
      out.push_back(std::move(p));
    }
    return out;
  }

  absl::Status AbortPending(const PendingUpload& upload) override {
    return AbortUpload(KeyOf(upload.path), upload.upload_id);
  }

  absl::Status AbortUpload(const std::string& key, const std::string& upload_id) {
    S3Call call;
    call.method = "DELETE";
    call.key = key;
    call.query = {{"uploadId", upload_id}};
    call.what = StrCat("AbortMultipartUpload ", client().Uri(key));
    absl::Status st = client().Do(call).status();
    return absl::IsNotFound(st) ? absl::OkStatus() : st;  // already gone
  }

  std::string KeyOf(std::string_view path) { return client().Key(path); }

  // Checks that the bucket answers with these credentials.
  absl::Status Probe() {
    S3Call call;
    call.query = {{"list-type", "2"}, {"max-keys", "1"}, {"prefix", DirPrefix("")}};
    call.what = StrCat("open ", uri_);
    return client().Do(call).status();
  }

 private:
  S3Client& client() { return s_->client; }

  static absl::Status Check(std::string_view path) {
    if (path.empty() || path.front() == '/' || path.back() == '/' || path.find("//") != std::string_view::npos ||
        path == ".." || absl::StartsWith(AV(path), "../") || absl::EndsWith(AV(path), "/..") ||
        path.find("/../") != std::string_view::npos || path.find('\0') != std::string_view::npos) {
      return absl::InvalidArgumentError(StrCat("bad s3 path '", path, "'"));
    }
    return absl::OkStatus();
  }

  std::string DirPrefix(std::string_view dir) {
    const std::string& p = client().cfg().prefix;
    if (dir.empty()) return p.empty() ? std::string() : StrCat(p, "/");
    return StrCat(client().Key(dir), "/");
  }

  absl::StatusOr<HttpResponse> Head(std::string_view path, std::string_view verb) {
    S3Call call;
    call.method = "HEAD";
    call.key = client().Key(path);
    call.what = StrCat(verb, " ", client().Uri(call.key));
    auto r = client().Do(call);
    if (!r.ok() && absl::IsNotFound(r.status())) {
      return absl::NotFoundError(StrCat(verb, " ", client().Uri(call.key), ": no such file"));
    }
    return r;
  }

  absl::Status SizeOf(const HttpResponse& h, std::string_view path, uint64_t* size) {
    auto cl = h.headers.find("content-length");
    int64_t n = -1;
    if (cl == h.headers.end() || !ParseInt64(cl->second, &n) || n < 0) {
      return absl::DataLossError(StrCat(client().Uri(client().Key(path)), ": the server gave no size"));
    }
    *size = static_cast<uint64_t>(n);
    return absl::OkStatus();
  }

  // A listing is one operation: its pages share one deadline, and it ends
  // after more pages than any checkpoint root needs (a server that says
  // "truncated" forever).
  static constexpr int kMaxListPages = 100000;  // 10^8 keys
  static absl::Status TooManyPages(const std::string& what) {
    return absl::DataLossError(
        StrCat(what, ": still truncated after ", kMaxListPages, " pages; refusing a listing that never ends"));
  }

  template <typename F>
  absl::Status ListKeys(const std::string& prefix, bool delimited, F&& on_page) {
    std::string token;
    const auto deadline = client().DeadlineFromNow();
    for (int pages = 0;; ++pages) {
      S3Call call;
      call.deadline = deadline;
      call.query = {{"list-type", "2"}, {"prefix", prefix}};
      if (delimited) call.query.emplace_back("delimiter", "/");
      if (!token.empty()) call.query.emplace_back("continuation-token", token);
      call.what = StrCat("list ", client().Uri(prefix), pages > 0 ? StrCat(" (page ", pages + 1, ")") : "");
      CKPT_ASSIGN_OR_RETURN(HttpResponse resp, client().Do(call));
      auto page = ParseListObjectsV2(resp.body);
      if (!page.ok()) return Annotate(page.status(), call.what);
      CKPT_RETURN_IF_ERROR(on_page(*page, StrCat(call.what, " from ", client().Endpoint())));
      if (!page->truncated) return absl::OkStatus();
      if (page->next_token == token) return absl::DataLossError(StrCat(call.what, ": the listing does not advance"));
      if (pages + 1 >= kMaxListPages) return TooManyPages(call.what);
      token = page->next_token;
    }
  }

  absl::StatusOr<std::vector<S3Upload>> ListUploads(const std::string& prefix) {
    std::vector<S3Upload> out;
    std::string key_marker, id_marker;
    const auto deadline = client().DeadlineFromNow();
    for (int pages = 0;; ++pages) {
      S3Call call;
      call.deadline = deadline;
      call.query = {{"uploads", ""}, {"prefix", prefix}};
      if (!key_marker.empty()) call.query.emplace_back("key-marker", key_marker);
      if (!id_marker.empty()) call.query.emplace_back("upload-id-marker", id_marker);
      call.what = StrCat("ListMultipartUploads ", client().Uri(prefix));
      CKPT_ASSIGN_OR_RETURN(HttpResponse resp, client().Do(call));
      auto page = ParseListMultipartUploads(resp.body);
      if (!page.ok()) return Annotate(page.status(), call.what);
      CKPT_RETURN_IF_ERROR(CheckUploadsUnder(*page, prefix, StrCat(call.what, " from ", client().Endpoint())));
      for (S3Upload& u : page->uploads) out.push_back(std::move(u));
      if (!page->truncated) return out;
      if (page->next_key_marker == key_marker && page->next_upload_id_marker == id_marker) {
        return absl::DataLossError(StrCat(call.what, ": the listing does not advance"));
      }
      if (pages + 1 >= kMaxListPages) return TooManyPages(call.what);
      key_marker = page->next_key_marker;
      id_marker = page->next_upload_id_marker;
    }
  }

  absl::Status DeleteBatch(const std::vector<std::string>& keys) {
    std::string xml = "<Delete><Quiet>true</Quiet>";
    for (const std::string& k : keys) StrAppend(&xml, "<Object><Key>", XmlEscape(k), "</Key></Object>");
    xml += "</Delete>";
    S3Call call;
    call.method = "POST";
    call.query = {{"delete", ""}};
    call.headers = {{"content-md5", Md5Base64(xml)}};
    call.body = absl::Span<const std::byte>(reinterpret_cast<const std::byte*>(xml.data()), xml.size());
    call.what = StrCat("DeleteObjects (", keys.size(), " keys) under ", client().Uri(keys.front()));
    CKPT_ASSIGN_OR_RETURN(HttpResponse resp, client().Do(call));
    auto errors = XmlElements(resp.body, "Error");
    if (!errors.ok()) return Annotate(errors.status(), call.what);
    for (std::string_view e : *errors) {
      auto key = XmlText(e, "Key");
      auto code = XmlText(e, "Code");
      if (code.ok() && *code == "NoSuchKey") continue;
      return absl::UnavailableError(StrCat(call.what, ": ", key.ok() ? *key : "?", ": ", code.ok() ? *code : "?"));
    }
    return absl::OkStatus();
  }

  std::string uri_;
  std::shared_ptr<S3Shared> s_;
};

// ---------------------------------------------------------------------------
std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

absl::StatusOr<S3Credentials> FindCredentials(const std::string& profile_param) {
  S3Credentials c;
  c.access_key = Env("AWS_ACCESS_KEY_ID");
  c.secret_key = Env("AWS_SECRET_ACCESS_KEY");
  if (!c.access_key.empty() || !c.secret_key.empty()) {
    if (c.access_key.empty() || c.secret_key.empty()) {
      return absl::InvalidArgumentError(
          "s3: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set together (one of them is empty)");
    }
    c.session_token = Env("AWS_SESSION_TOKEN");
    c.source = "AWS_ACCESS_KEY_ID in the environment";
    return c;
  }
  std::string file = Env("AWS_SHARED_CREDENTIALS_FILE");
  if (file.empty()) {
    const std::string home = Env("HOME");
    if (!home.empty()) file = home + "/.aws/credentials";
  }
  std::string profile = !profile_param.empty() ? profile_param : Env("AWS_PROFILE");
  if (profile.empty()) profile = "default";
  std::ifstream in(file);
  if (!file.empty() && in) {
    std::stringstream ss;
    ss << in.rdbuf();
    auto ini = ParseIniFile(ss.str());
    if (!ini.ok()) return absl::InvalidArgumentError(StrCat("s3: ", file, ": ", ini.status().message()));
    auto sec = ini->find(profile);
    if (sec != ini->end()) {
      auto get = [&](const char* k) {
        auto it = sec->second.find(k);
        return it != sec->second.end() ? it->second : std::string();
      };
      c.access_key = get("aws_access_key_id");
      c.secret_key = get("aws_secret_access_key");
      c.session_token = get("aws_session_token");
      if (c.access_key.empty() || c.secret_key.empty()) {
        return absl::InvalidArgumentError(
            StrCat("s3: profile [", profile, "] of ", file, " lacks aws_access_key_id or aws_secret_access_key"));
      }
      c.source = StrCat("profile [", profile, "] of ", file);
      return c;
    }
    if (!profile_param.empty() || !Env("AWS_PROFILE").empty()) {
      return absl::NotFoundError(StrCat("s3: no profile [", profile, "] in ", file));
    }
  }
  return absl::UnauthenticatedError(
      StrCat("s3: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or put them in ",
             file.empty() ? "~/.aws/credentials" : file, " under [", profile, "] (AWS_PROFILE chooses the section)"));
}

absl::StatusOr<S3Config> ParseConfig(std::string_view uri) {
  CKPT_ASSIGN_OR_RETURN(ParsedUri parsed, ParseUri(uri));
  static const char* kKnown[] = {"endpoint",    "region", "addressing", "profile",    "part_size",
                                 "connections", "buffer", "deadline",   "read_chunk", "ca_file"};
  for (const auto& param : parsed.params) {
    const std::string& k = param.first;
    if (std::find_if(std::begin(kKnown), std::end(kKnown), [&](const char* n) { return k == n; }) == std::end(kKnown)) {
      return absl::InvalidArgumentError(StrCat("storage URI '", uri, "': unknown s3 option '", k,
                                               "' (known: endpoint, region, addressing, profile, part_size, "
                                               "connections, buffer, deadline, read_chunk, ca_file)"));
    }
  }
  S3Config cfg;
  std::string loc = parsed.Path();
  while (!loc.empty() && loc.back() == '/') loc.pop_back();
  const size_t slash = loc.find('/');
  cfg.bucket = loc.substr(0, slash);
  cfg.prefix = slash == std::string::npos ? "" : loc.substr(slash + 1);
  while (!cfg.prefix.empty() && cfg.prefix.front() == '/') cfg.prefix.erase(0, 1);
  if (cfg.bucket.size() < 3 || cfg.bucket.size() > 63 ||
      cfg.bucket.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.-_") != std::string::npos) {
    return absl::InvalidArgumentError(
        StrCat("storage URI '", uri, "': '", cfg.bucket,
               "' is not a bucket name (3-63 of a-z, 0-9, '.', '-'): s3://BUCKET/PREFIX"));
  }
  cfg.region = parsed.Str("region", "");
  if (cfg.region.empty()) cfg.region = Env("AWS_REGION");
  if (cfg.region.empty()) cfg.region = Env("AWS_DEFAULT_REGION");
  if (cfg.region.empty()) cfg.region = "us-east-1";
  std::string endpoint = parsed.Str("endpoint", "");
  if (endpoint.empty()) endpoint = Env("AWS_ENDPOINT_URL_S3");
  if (endpoint.empty()) endpoint = Env("AWS_ENDPOINT_URL");
  if (endpoint.empty()) endpoint = StrCat("https://s3.", cfg.region, ".amazonaws.com");
  std::string_view ep = endpoint;
  if (ConsumePrefix(&ep, "https://")) {
    cfg.scheme = "https";
  } else if (ConsumePrefix(&ep, "http://")) {
    cfg.scheme = "http";
  } else {
    return absl::InvalidArgumentError(
        StrCat("storage URI '", uri, "': endpoint '", endpoint, "' must start with http:// or https://"));
  }
  while (!ep.empty() && ep.back() == '/') ep.remove_suffix(1);
  if (ep.empty() || ep.find('/') != std::string_view::npos) {
    return absl::InvalidArgumentError(
        StrCat("storage URI '", uri, "': endpoint '", endpoint, "' must be scheme://host[:port] with no path"));
  }
  cfg.host = std::string(ep);
  // Default ports are not part of the signed host.
  if (cfg.scheme == "http" && absl::EndsWith(cfg.host, ":80")) cfg.host.resize(cfg.host.size() - 3);
  if (cfg.scheme == "https" && absl::EndsWith(cfg.host, ":443")) cfg.host.resize(cfg.host.size() - 4);
  const std::string addressing = parsed.Str("addressing", "auto");
  if (addressing == "path") {
    cfg.virtual_host = false;
  } else if (addressing == "virtual") {
    cfg.virtual_host = true;
  } else if (addressing == "auto") {
    cfg.virtual_host = absl::EndsWith(cfg.host, ".amazonaws.com") && cfg.bucket.find('.') == std::string::npos;
  } else {
    return absl::InvalidArgumentError(
        StrCat("storage URI '", uri, "': addressing must be auto, path or virtual, not '", addressing, "'"));
  }
  CKPT_ASSIGN_OR_RETURN(int64_t part, parsed.Bytes("part_size", 16 * kMiB));
  if (part < static_cast<int64_t>(kMinPart) || part > (int64_t{5} << 30)) {
    return absl::InvalidArgumentError(StrCat("storage URI '", uri, "': part_size must be 5M..5G (S3's limits)"));
  }
  cfg.part_size = static_cast<uint64_t>(part);
  CKPT_ASSIGN_OR_RETURN(int64_t conns, parsed.Int("connections", 16));
  if (conns < 1 || conns > 1024) {
    return absl::InvalidArgumentError(StrCat("storage URI '", uri, "': connections must be 1..1024"));
  }
  cfg.connections = static_cast<int>(conns);
  CKPT_ASSIGN_OR_RETURN(int64_t buffer, parsed.Bytes("buffer", static_cast<int64_t>(cfg.part_size) * conns));
  if (buffer < 0) return absl::InvalidArgumentError(StrCat("storage URI '", uri, "': buffer must be >= 0"));
  cfg.buffer_bytes = static_cast<uint64_t>(buffer);
  CKPT_ASSIGN_OR_RETURN(int64_t chunk, parsed.Bytes("read_chunk", static_cast<int64_t>(8 * kMiB)));
  if (chunk < 4096) return absl::InvalidArgumentError(StrCat("storage URI '", uri, "': read_chunk must be >= 4K"));
  cfg.read_chunk = static_cast<uint64_t>(chunk);
  CKPT_ASSIGN_OR_RETURN(cfg.deadline_s, parsed.Seconds("deadline", 120));
  if (cfg.deadline_s <= 0) return absl::InvalidArgumentError(StrCat("storage URI '", uri, "': deadline must be > 0"));
  cfg.ca_file = parsed.Str("ca_file", "");
  if (!cfg.ca_file.empty() && cfg.scheme != "https") {
    return absl::InvalidArgumentError(StrCat("storage URI '", uri, "': ca_file is for https endpoints"));
  }
  if (cfg.ca_file.empty() && cfg.scheme == "https") cfg.ca_file = Env("AWS_CA_BUNDLE");
  CKPT_ASSIGN_OR_RETURN(cfg.creds, FindCredentials(parsed.Str("profile", "")));
  return cfg;
}

}  // namespace

absl::StatusOr<std::shared_ptr<Storage>> OpenS3Storage(std::string_view uri) {
  CKPT_ASSIGN_OR_RETURN(S3Config cfg, ParseConfig(uri));
  auto storage = std::make_shared<S3Storage>(std::string(uri), std::move(cfg));
  CKPT_RETURN_IF_ERROR(storage->Probe());
  return std::shared_ptr<Storage>(std::move(storage));
}

CKPT_STORAGE_BACKEND(s3) {
  r.Add({"s3", "",
         "objects in an S3 bucket (AWS, Ceph RGW, MinIO): multipart uploads, ranged GETs, If-None-Match claims, SigV4",
         BackendCaps("s3", false, false, true)},
        OpenS3Storage);
}

}  // namespace ckpt

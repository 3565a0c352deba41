// The s3:// backend's shared pieces (s3_storage.h says what the backend
// is): its configuration, one signed request with retries and deadlines
// (S3Client), the upload budget, ranged GETs, and the files it opens
// (s3_files.cc).
#ifndef CKPT_STORAGE_ROOTS_S3_S3_CLIENT_H_
#define CKPT_STORAGE_ROOTS_S3_S3_CLIENT_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ckpt/storage.h"
#include "net/http_client.h"
#include "storage/roots/s3/s3_sign.h"
#include "util/strings.h"
#include "util/task_pool.h"

namespace ckpt::s3 {

using Clock = std::chrono::steady_clock;

inline constexpr uint64_t kMiB = uint64_t{1} << 20;
inline constexpr uint64_t kMinPart = 5 * kMiB;  // S3's smallest part but the last
inline constexpr int kMaxParts = 10000;
inline constexpr int kPlannedParts = 9000;  // headroom under the limit when the size is a hint

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

// Whether an answer with this status and S3 error code is worth another try.
bool Retryable(long status, const std::string& code);

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
  absl::StatusOr<HttpResponse> Send(const S3Call& call, int* attempts = nullptr, Tried* tried = nullptr);

  // " (3 attempts in 6012 ms; the deadline of 6 s ran out)".
  std::string Tries(int attempt, Clock::time_point start, bool out_of_time) const;

  // Send, then any non-2xx status as an error.
  absl::StatusOr<HttpResponse> Do(const S3Call& call, int* attempts = nullptr);

  // The status for a failed answer: the code says what kind, the message
  // carries the server's code, message and request id.
  // `tries`: how many attempts over how long (Send's account), when known.
  // The server's words are escaped before they reach a terminal or a log.
  absl::Status ErrorOf(const S3Call& call, const HttpResponse& resp, std::string_view tries = "") const;

 private:
  // On RequestTimeTooSkewed, sign later requests with the server's clock
  // (as the AWS SDKs do) when its Date header says how far off we are.
  bool AdoptServerClock(const HttpResponse& resp);

  S3Config cfg_;
  HttpClient http_;
  const bool trace_ = std::getenv("CKPT_S3_TRACE") != nullptr;  // one message per request
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
                       uint64_t offset, absl::Span<std::byte> dst, std::string_view verb);

/// The configuration a URI names (s3_storage.h lists its options), with the
/// credentials found for it.
absl::StatusOr<S3Config> ParseConfig(std::string_view uri);

/// A file being written to `path` (a multipart upload, or one PUT when it
/// fits a part). `existing`: the size and ETag of the object whose bytes a
/// write that does not truncate keeps where it writes none.
std::unique_ptr<WritableFile> NewS3Writable(std::shared_ptr<S3Shared> s, std::string path,
                                            std::optional<std::pair<uint64_t, std::string>> existing);

/// The object at `path`, `size` bytes with ETag `etag`, read by ranged GETs.
std::unique_ptr<ReadableFile> NewS3Readable(std::shared_ptr<S3Shared> s, std::string path, uint64_t size,
                                            std::string etag);

}  // namespace ckpt::s3

#endif  // CKPT_STORAGE_ROOTS_S3_S3_CLIENT_H_

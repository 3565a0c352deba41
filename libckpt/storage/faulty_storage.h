// The faulty:// backend: wraps another storage and injects failures on
// purpose, for failure tests and for rehearsing what a job does when storage
// misbehaves.
//
// URI: faulty://<inner location>?fault.<option>=<value>&<inner options>
// The fault.* options configure the faults; the rest of the query goes to the
// inner storage, opened as "<inner location>?<rest>" (so
// faulty:///data/ck?fault.enospc_after=64M&direct=0 wraps
// /data/ck?direct=0 and faulty://mem://x wraps mem://x).
//
//   fault.enospc_after=BYTES   data writes fail with ENOSPC once BYTES were written
//   fault.eio_after=BYTES      the same with EIO
//   fault.short_write_every=N  every Nth write stores only its first half, then fails
//   fault.latency=DURATION     every write and read waits this long first ("5ms")
//   fault.flip_read_every=N    every Nth read returns data with one bit flipped
//   fault.match=TEXT           only files whose path contains TEXT are affected
//   fault.crash=1              hold writes back until Finish, so Crash() can
//                              drop everything not yet made durable
#ifndef CKPT_STORAGE_FAULTY_STORAGE_H_
#define CKPT_STORAGE_FAULTY_STORAGE_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "ckpt/storage.h"

namespace ckpt {

struct FaultPlan {
  int64_t enospc_after = -1;  ///< bytes; -1: never
  int64_t eio_after = -1;
  int64_t short_write_every = 0;  ///< 0: never
  double latency_s = 0;
  int64_t flip_read_every = 0;
  std::string match;
  bool crash_mode = false;
};

class FaultyStorage : public ForwardingStorage {
 public:
  FaultyStorage(std::shared_ptr<Storage> base, FaultPlan plan, std::string uri);

  std::string uri() const override { return uri_; }
  StorageCaps caps() const override;
  absl::StatusOr<std::unique_ptr<WritableFile>> OpenWritable(std::string_view path,
                                                             const WriteOptions& options = {}) override;
  absl::StatusOr<std::unique_ptr<ReadableFile>> OpenReadable(std::string_view path) override;
  absl::Status PutAtomic(std::string_view path, absl::Span<const std::byte> data) override;

  /// Replaces the plan and resets the byte and operation counters.
  void SetPlan(FaultPlan plan);
  /// Stops injecting (the plan becomes empty).
  void Heal() { SetPlan(FaultPlan{}); }
  /// Crash mode: discards every write not yet finished. Open files fail from
  /// now on; the storage works again for files opened afterwards.
  void Crash();

  int64_t bytes_written() const { return written_.load(); }
  int64_t faults_injected() const { return faults_.load(); }

 private:
  class Writer;
  class Reader;
  friend class Writer;
  friend class Reader;
  FaultPlan Plan() const;
  bool Affects(std::string_view path) const;
  /// The error a data write of `len` bytes to `path` meets, or OK.
  absl::Status WriteFault(std::string_view path, uint64_t offset, size_t len, bool* short_write);
  void Delay() const;

  std::string uri_;
  mutable std::mutex mu_;
  FaultPlan plan_;
  std::atomic<int64_t> written_{0};
  std::atomic<int64_t> writes_{0};
  std::atomic<int64_t> reads_{0};
  std::atomic<int64_t> faults_{0};
  std::atomic<uint64_t> crash_epoch_{0};
};

absl::StatusOr<std::shared_ptr<Storage>> OpenFaultyStorage(std::string_view uri);

}  // namespace ckpt

#endif  // CKPT_STORAGE_FAULTY_STORAGE_H_

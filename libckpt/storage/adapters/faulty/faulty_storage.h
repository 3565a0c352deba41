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
//   fault.write_bandwidth=BYTES  writes take their turn on one simulated device
//                              that writes BYTES per second ("200M"): a slow
//                              disk, for what a save does when storage is the
//                              bottleneck
//   fault.read_bandwidth=BYTES   reads take their turn on one simulated link
//                              of BYTES per second: a storage server whose
//                              network is the bottleneck, shared by every
//                              reader of this storage object
//   fault.flip_read_every=N    every Nth read returns data with one bit flipped
//   fault.match=TEXT           only files whose path contains TEXT are affected
//   fault.crash=1              hold writes back until Finish, so Crash() can
//                              drop everything not yet made durable
//   fault.fail_on=KINDS        operations of these kinds fail: any of write,
//                              finish (the fsync), put (atomic replace), read,
//                              list, remove, sync_dir (comma-separated)
//   fault.errno=EIO|ENOSPC     the error they fail with (default EIO)
//   fault.fail_after=N         ... from the Nth such operation on (default 1)
//   fault.kill_at_op=N         SIGKILL this process at the Nth operation that
//                              changes the storage (write, finish, put, remove,
//                              remove_all, sync_dir), before it runs: a crash at
//                              an exact point of a save, commit or GC
#ifndef CKPT_STORAGE_ADAPTERS_FAULTY_FAULTY_STORAGE_H_
#define CKPT_STORAGE_ADAPTERS_FAULTY_FAULTY_STORAGE_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "ckpt/storage.h"

namespace ckpt {

struct FaultPlan {
  int64_t enospc_after = -1;  ///< bytes; -1: never
  int64_t eio_after = -1;
  int64_t short_write_every = 0;  ///< 0: never
  double latency_s = 0;
  int64_t write_bandwidth = 0;  ///< bytes per second; 0: unlimited
  int64_t read_bandwidth = 0;   ///< bytes per second; 0: unlimited
  int64_t flip_read_every = 0;
  std::string match;
  bool crash_mode = false;
  std::set<std::string> fail_on;  ///< operation kinds that fail
  int fail_errno = 5;             ///< EIO
  int64_t fail_after = 1;
  int64_t kill_at_op = 0;  ///< 0: never
  /// While a file exists at this path, every operation fails as
  /// Unavailable (an outage a test starts and ends; empty: never).
  std::string outage_file;
};

class FaultyStorage : public ForwardingStorage {
 public:
  FaultyStorage(std::shared_ptr<Storage> base, FaultPlan plan, std::string uri);
  ~FaultyStorage() override;

  std::string uri() const override { return uri_; }
  StorageCaps caps() const override;
  absl::StatusOr<std::unique_ptr<WritableFile>> OpenWritable(std::string_view path,
                                                             const WriteOptions& options = {}) override;
  absl::StatusOr<std::unique_ptr<ReadableFile>> OpenReadable(std::string_view path) override;
  /// Reads of whole small files (manifests, LATEST, CLAIM) meet the read
  /// faults too.
  absl::StatusOr<std::string> GetAll(std::string_view path) override;
  absl::Status PutAtomic(std::string_view path, absl::Span<const std::byte> data) override;
  absl::Status PutIfAbsent(std::string_view path, absl::Span<const std::byte> data) override;
  absl::StatusOr<std::vector<DirEntry>> List(std::string_view dir) override;
  absl::StatusOr<uint64_t> FileSize(std::string_view path) override;
  absl::Status Remove(std::string_view path) override;
  absl::Status RemoveAll(std::string_view dir) override;
  absl::Status SyncDir(std::string_view dir) override;

  /// Replaces the plan and resets the byte and operation counters.
  void SetPlan(FaultPlan plan);
  /// Stops injecting (the plan becomes empty).
  void Heal() { SetPlan(FaultPlan{}); }
  /// Crash mode: discards every write not yet finished. Open files fail from
  /// now on; the storage works again for files opened afterwards.
  void Crash();

  int64_t bytes_written() const { return written_.load(); }
  int64_t faults_injected() const { return faults_.load(); }
  /// Operations that changed the storage so far (what kill_at_op counts).
  int64_t mutating_ops() const { return ops_.load(); }

 private:
  // The faults of one atomic put (put_atomic and put_if_absent alike).
  absl::Status PutFault(std::string_view path, size_t bytes);
  class Writer;
  class Reader;
  friend class Writer;
  friend class Reader;
  FaultPlan Plan() const;
  bool Affects(std::string_view path) const;
  /// The error a data write of `len` bytes to `path` meets, or OK.
  absl::Status WriteFault(std::string_view path, uint64_t offset, size_t len, bool* short_write);
  void Delay() const;
  /// When a write of `bytes` issued now would finish on a device of
  /// plan.write_bandwidth that serves writes one after another; nullopt
  /// when writes are not throttled.
  std::optional<std::chrono::steady_clock::time_point> DeviceDone(size_t bytes);
  /// The same for a read of `bytes` on a link of plan.read_bandwidth.
  std::optional<std::chrono::steady_clock::time_point> LinkDone(size_t bytes);
  /// When `bytes` issued now are done on something that serves `bandwidth`
  /// bytes per second, one request after another, and is free from
  /// `*free_at` on (which moves past them); nullopt when bandwidth <= 0.
  std::optional<std::chrono::steady_clock::time_point> TakeTurn(int64_t bandwidth,
                                                                std::chrono::steady_clock::time_point* free_at,
                                                                size_t bytes);
  /// Runs `fn` on the storage's timer thread at `when` (throttled writes
  /// complete there, so the writer is not held up: a disk's queue).
  void At(std::chrono::steady_clock::time_point when, absl::AnyInvocable<void() &&> fn);
  struct Timer;
  std::shared_ptr<Timer> timer_;  ///< created on first use, guarded by mu_
  /// Counts an operation of `kind` on `path`: kills the process at
  /// kill_at_op (mutating kinds), returns the injected error for fail_on.
  absl::Status OpFault(std::string_view kind, std::string_view path, bool mutating);
  /// Unavailable while the plan's outage file exists.
  absl::Status OutageFault(std::string_view path);

  std::string uri_;
  mutable std::mutex mu_;
  std::chrono::steady_clock::time_point device_free_;  ///< guarded by mu_
  std::chrono::steady_clock::time_point link_free_;    ///< guarded by mu_
  FaultPlan plan_;
  std::atomic<int64_t> written_{0};
  std::atomic<int64_t> ops_{0};
  std::atomic<int64_t> failing_ops_{0};
  std::atomic<int64_t> writes_{0};
  std::atomic<int64_t> reads_{0};
  std::atomic<int64_t> faults_{0};
  std::atomic<uint64_t> crash_epoch_{0};
};

absl::StatusOr<std::shared_ptr<Storage>> OpenFaultyStorage(std::string_view uri);

}  // namespace ckpt

#endif  // CKPT_STORAGE_ADAPTERS_FAULTY_FAULTY_STORAGE_H_

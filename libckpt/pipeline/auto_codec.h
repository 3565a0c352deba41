// What Codec::kAuto decides from, measured while saves run: how fast each
// storage writes what it is given, and how fast and how well the workers
// compress each dtype.
//
// A block is worth compressing when its compressed frame reaches the
// storage before the storage runs out of other bytes to write: then the
// storage never waits on the worker, and it writes fewer bytes. So a
// worker compresses a block when the storage's backlog, at the rate the
// storage drains it, lasts at least kAutoMargin times as long as
// compressing the block takes at the rate that dtype compresses. A storage
// faster than the compressors keeps its backlog too short for any block;
// one slower than them keeps enough for every block; in between, the
// blocks compressed are those the storage's slack pays for. Until both
// rates are measured, a fixed backlog stands in for the comparison.
#ifndef CKPT_PIPELINE_AUTO_CODEC_H_
#define CKPT_PIPELINE_AUTO_CODEC_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>

#include "ckpt/codec.h"
#include "ckpt/dtype.h"

namespace ckpt {

/// How much longer than the compression the backlog must last: the
/// measured rates are averages, and a storage given a shallow queue writes
/// slower than its average.
inline constexpr double kAutoMargin = 2.0;

/// One storage's writes: bytes handed to it and not yet written (its
/// backlog), and the rate it writes them while it has any. Thread-safe;
/// `now` is NowSeconds().
class SinkMeter {
 public:
  /// Older writes count less, by e^-1 per this much busy time.
  static constexpr double kHorizonSeconds = 0.25;
  /// A rate is known after this much busy time or this many writes.
  static constexpr double kMinSeconds = 0.02;
  static constexpr uint64_t kMinCompletions = 1024;

  void Submitted(uint64_t bytes, double now);
  void Completed(uint64_t bytes, double now);
  int64_t backlog() const { return backlog_.load(std::memory_order_relaxed); }
  /// Bytes written per second of the time the backlog was not empty;
  /// 0 until known.
  double drain_rate() const { return rate_.load(std::memory_order_relaxed); }

 private:
  std::mutex mu_;
  std::atomic<int64_t> backlog_{0};
  double busy_since_ = 0;  ///< while the backlog is not empty
  double bytes_sum_ = 0;
  double busy_sum_ = 0;
  double busy_total_ = 0;
  uint64_t completions_ = 0;
  std::atomic<double> rate_{0};
};

/// Codec::kAuto's choice per block. Thread-safe.
class AutoChooser {
 public:
  /// Stored as is once a dtype's compressed blocks keep more than this
  /// much of their size (in 1/1000); one block in 64 is tried again.
  static constexpr uint32_t kIncompressibleMilli = 970;

  /// `fallback_backlog`: the backlog in bytes above which blocks are
  /// compressed while a rate is not measured yet.
  explicit AutoChooser(int64_t fallback_backlog) : fallback_backlog_(fallback_backlog) {}

  /// What a block of `raw_len` bytes of `dtype` is stored with, headed for
  /// the storage `sink` measures.
  Codec Choose(DType dtype, uint64_t raw_len, const SinkMeter& sink);
  /// What compressing a block of `dtype` gave and took (seconds of the
  /// worker's time).
  void Record(DType dtype, uint64_t raw_len, uint64_t stored_len, double seconds);

  /// Measured so far for `dtype`: stored/raw in 1/1000 (0: none yet) and
  /// raw bytes compressed per second of a worker (0: none yet).
  uint32_t ratio_milli(DType dtype) const { return Class(dtype).ratio_milli.load(std::memory_order_relaxed); }
  double compress_rate(DType dtype) const { return Class(dtype).rate.load(std::memory_order_relaxed); }

 private:
  struct PerDType {
    std::atomic<uint32_t> ratio_milli{0};
    std::atomic<double> rate{0};
    std::atomic<uint32_t> skipped{0};
  };
  PerDType& Class(DType dtype) { return classes_[static_cast<size_t>(dtype) % classes_.size()]; }
  const PerDType& Class(DType dtype) const { return classes_[static_cast<size_t>(dtype) % classes_.size()]; }

  int64_t fallback_backlog_;
  std::array<PerDType, 32> classes_;
};

}  // namespace ckpt

#endif  // CKPT_PIPELINE_AUTO_CODEC_H_

// Shared pieces of the benchmarks: medians, the hardware ceilings measured
// next to every figure (fio or an O_DIRECT writer/reader, memcpy), and a
// transformer-like state to save.
#ifndef CKPT_BENCHMARKS_BENCH_UTIL_H_
#define CKPT_BENCHMARKS_BENCH_UTIL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/tensor.h"
#include "common/cli.h"
#include "util/aligned_buffer.h"

namespace ckpt::bench {

struct Samples {
  std::vector<double> v;
  void Add(double x) { v.push_back(x); }
  double Median() const;
  double Min() const;
  double Max() const;
};

/// iperf3 over loopback (one stream, 3 s; its server's log in `dir`):
/// received bits per second / 8, or -1 when iperf3 is not installed or fails.
double IperfLoopback(const std::string& dir);

bool HaveFio();
/// fio's sequential bandwidth in bytes/s (io_uring, O_DIRECT, QD64, 4 MiB), or -1.
double RunFio(const std::string& file, int64_t size, bool write);
/// A plain O_DIRECT sequential writer/reader with 4 MiB requests, when fio is absent.
double DirectIo(const std::string& file, int64_t size, bool write);
/// The write (or read) ceiling of `file`'s disk: fio when installed, else DirectIo.
double DiskCeiling(const std::string& file, int64_t size, bool write);
/// memcpy bandwidth of `size` bytes (after a warming pass), split into
/// `threads` equal parts copied at once by as many threads.
double MemcpyBandwidth(int64_t size, int threads = 1);

/// The buffers of MemcpyBandwidth, kept for passes taken beside each
/// operation they are the ceiling of (one pass a few milliseconds before or
/// after moves with the host).
class MemcpyPasses {
 public:
  /// Source and destination of `size` bytes, touched and warmed by a pass.
  static absl::StatusOr<std::unique_ptr<MemcpyPasses>> Create(int64_t size);
  /// Copies of `sources` (memory the caller keeps alive, e.g. the state a
  /// save copies) into one destination of their total size on huge pages,
  /// as the staging arena is. The destination is touched by a first pass.
  static absl::StatusOr<std::unique_ptr<MemcpyPasses>> Over(std::vector<std::span<const std::byte>> sources);
  /// Copies of `sources` into `destination` (at least their total size),
  /// which the caller keeps alive and otherwise idle while passes run: an
  /// idle save engine's staging arena.
  static absl::StatusOr<std::unique_ptr<MemcpyPasses>> Into(std::vector<std::span<const std::byte>> sources,
                                                            std::span<std::byte> destination);
  /// One pass on `threads` threads (equal parts of the total), bytes/s.
  double Pass(int threads);
  /// Where the passes copy to: the sources' total size.
  std::span<const std::byte> destination() const { return {dst_, static_cast<size_t>(size_)}; }

 private:
  MemcpyPasses() = default;
  void Copy(int64_t begin, int64_t end);
  AlignedBuffer src_, own_dst_;
  std::byte* dst_ = nullptr;
  std::vector<std::span<const std::byte>> sources_;
  int64_t size_ = 0;
};

struct StateBuffers {
  std::vector<TensorSpec> specs;
  std::vector<std::vector<std::byte>> data;
  std::vector<std::vector<std::byte>> out;
  int64_t bytes = 0;
};

/// Parses the benchmark's flags; `dir` (the --dir value) is required.
/// Returns false when the benchmark should exit with `*code`.
bool ParseBenchArgs(tools::Args& args, int argc, char** argv, const std::string& dir, int* code);

/// Writes `text` and a newline to `path` (no-op for an empty path).
void WriteTextFile(const std::string& path, const std::string& text);

/// Transformer-like weights: 64 MiB tensors of `dtype` filling `size` bytes.
StateBuffers MakeState(int64_t size, DType dtype);

/// Runs fn(i) for every i in [0, n) on `threads` threads (at least one),
/// each taking the next index; the first error stops the others and is
/// returned.
absl::Status ParallelFor(int64_t n, int64_t threads, const std::function<absl::Status(int64_t)>& fn);

}  // namespace ckpt::bench

#endif  // CKPT_BENCHMARKS_BENCH_UTIL_H_

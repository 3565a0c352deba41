// Shared pieces of the benchmarks: medians, the hardware ceilings measured
// next to every figure (fio or an O_DIRECT writer/reader, memcpy), and a
// transformer-like state to save.
#ifndef CKPT_BENCHMARKS_BENCH_UTIL_H_
#define CKPT_BENCHMARKS_BENCH_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/tensor.h"
#include "common/cli.h"

namespace ckpt::bench {

struct Samples {
  std::vector<double> v;
  void Add(double x) { v.push_back(x); }
  double Median() const;
  double Min() const;
  double Max() const;
};

bool HaveFio();
/// fio's sequential bandwidth in bytes/s (io_uring, O_DIRECT, QD64, 4 MiB), or -1.
double RunFio(const std::string& file, int64_t size, bool write);
/// A plain O_DIRECT sequential writer/reader with 4 MiB requests, when fio is absent.
double DirectIo(const std::string& file, int64_t size, bool write);
/// The write (or read) ceiling of `file`'s disk: fio when installed, else DirectIo.
double DiskCeiling(const std::string& file, int64_t size, bool write);
/// One memcpy pass of `size` bytes after a warming pass, bytes/s.
/// memcpy bandwidth of `size` bytes (after a warming pass), split into
/// `threads` equal parts copied at once by as many threads.
double MemcpyBandwidth(int64_t size, int threads = 1);

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

}  // namespace ckpt::bench

#endif  // CKPT_BENCHMARKS_BENCH_UTIL_H_

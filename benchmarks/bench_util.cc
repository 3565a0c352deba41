#include "bench_util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "ckpt/synthetic.h"
#include "common/stats.h"
#include "util/aligned_buffer.h"
#include "util/clock.h"
#include "util/errors.h"

namespace ckpt::bench {

double Samples::Median() const { return tools::Median(v); }
double Samples::Min() const { return v.empty() ? 0 : *std::min_element(v.begin(), v.end()); }
double Samples::Max() const { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }

bool HaveFio() { return std::system("command -v fio > /dev/null 2>&1") == 0; }

// fio's bandwidth in bytes/s from its JSON output, or -1.
double RunFio(const std::string& file, int64_t size, bool write) {
  std::string cmd = "fio --name=ceiling --filename=" + file + " --rw=" + (write ? "write" : "read") +
                    " --bs=4m --size=" + std::to_string(size) +
                    " --direct=1 --ioengine=io_uring --iodepth=64 --numjobs=1" + (write ? " --end_fsync=1" : "") +
                    " --output-format=json 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  pclose(p);
  // The per-direction section, not the "rw" option that names it.
  const std::string key = write ? "\"write\" : {" : "\"read\" : {";
  size_t at = out.find(key);
  if (at == std::string::npos) return -1;
  at = out.find("\"bw_bytes\"", at);
  if (at == std::string::npos) return -1;
  at = out.find(':', at);
  return std::strtod(out.c_str() + at + 1, nullptr);
}

// Plain O_DIRECT sequential writer/reader, 4 MiB requests (the file
// preallocated first), when fio is absent.
double DirectIo(const std::string& file, int64_t size, bool write) {
  auto buf = AlignedBuffer::Allocate(4 << 20, true);
  if (!buf.ok()) return -1;
  std::memset(buf->data(), 0x5a, buf->size());
  int fd = open(file.c_str(), (write ? O_WRONLY | O_CREAT | O_TRUNC : O_RDONLY) | O_DIRECT, 0644);
  if (fd < 0) return -1;
  const double t0 = NowSeconds();
  if (write) (void)fallocate(fd, 0, 0, size);  // as fio and ckpt do
  for (int64_t off = 0; off < size; off += 4 << 20) {
    ssize_t r = write ? pwrite(fd, buf->data(), 4 << 20, off) : pread(fd, buf->data(), 4 << 20, off);
    if (r != (4 << 20)) {
      close(fd);
      return -1;
    }
  }
  if (write) fsync(fd);
  const double dt = NowSeconds() - t0;
  close(fd);
  return static_cast<double>(size) / dt;
}

absl::StatusOr<std::unique_ptr<MemcpyPasses>> MemcpyPasses::Create(int64_t size) {
  std::unique_ptr<MemcpyPasses> m(new MemcpyPasses());
  CKPT_ASSIGN_OR_RETURN(m->src_, AlignedBuffer::Allocate(size, true));
  CKPT_ASSIGN_OR_RETURN(m->own_dst_, AlignedBuffer::Allocate(size, true, /*huge=*/true));  // as the staging arena
  m->dst_ = m->own_dst_.data();
  m->size_ = size;
  m->sources_ = {std::span<const std::byte>(m->src_.data(), static_cast<size_t>(size))};
  std::memset(m->src_.data(), 1, size);
  m->Copy(0, size);
  return m;
}

absl::StatusOr<std::unique_ptr<MemcpyPasses>> MemcpyPasses::Over(std::vector<std::span<const std::byte>> sources) {
  int64_t size = 0;
  for (const auto& s : sources) size += static_cast<int64_t>(s.size());
  CKPT_ASSIGN_OR_RETURN(AlignedBuffer dst, AlignedBuffer::Allocate(size, true, /*huge=*/true));
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<MemcpyPasses> m,
                        Into(std::move(sources), std::span<std::byte>(dst.data(), dst.size())));
  m->own_dst_ = std::move(dst);
  m->Copy(0, size);
  return m;
}

absl::StatusOr<std::unique_ptr<MemcpyPasses>> MemcpyPasses::Into(std::vector<std::span<const std::byte>> sources,
                                                                 std::span<std::byte> destination) {
  std::unique_ptr<MemcpyPasses> m(new MemcpyPasses());
  for (const auto& s : sources) m->size_ += static_cast<int64_t>(s.size());
  if (static_cast<int64_t>(destination.size()) < m->size_) {
    return absl::InvalidArgumentError(absl::StrCat("memcpy passes of ", m->size_, " bytes into ", destination.size()));
  }
  m->dst_ = destination.data();
  m->sources_ = std::move(sources);
  return m;
}

// Bytes [begin, end) of the sources, laid end to end, to the same offsets of
// the destination.
void MemcpyPasses::Copy(int64_t begin, int64_t end) {
  int64_t at = 0;
  for (const auto& s : sources_) {
    const int64_t n = static_cast<int64_t>(s.size());
    const int64_t from = std::max(begin, at), to = std::min(end, at + n);
    if (from < to) std::memcpy(dst_ + from, s.data() + (from - at), static_cast<size_t>(to - from));
    at += n;
    if (at >= end) break;
  }
}

double MemcpyPasses::Pass(int threads) {
  if (threads < 1) return -1;
  const int64_t part = (size_ / threads + 63) / 64 * 64;
  auto copy = [&](int i) {
    const int64_t begin = std::min<int64_t>(size_, i * part);
    Copy(begin, std::min<int64_t>(size_, begin + part));
  };
  const double t0 = NowSeconds();
  std::vector<std::thread> helpers;
  for (int i = 1; i < threads; ++i) helpers.emplace_back(copy, i);
  copy(0);
  for (std::thread& t : helpers) t.join();
  return static_cast<double>(size_) / (NowSeconds() - t0);
}

// One pass, like the stall it is compared with (after a pass that warms the
// buffers): a best-of-n would flatter the ceiling.
double MemcpyBandwidth(int64_t size, int threads) {
  auto m = MemcpyPasses::Create(size);
  return m.ok() ? (*m)->Pass(threads) : -1;
}

StateBuffers MakeState(int64_t size, DType dtype) {
  StateBuffers s;
  const int64_t es = static_cast<int64_t>(DTypeSize(dtype));
  const int64_t per = std::min<int64_t>(64 << 20, size);
  int i = 0;
  for (int64_t done = 0; done < size; done += per, ++i) {
    const int64_t bytes = std::min(per, size - done);
    const int64_t cols = 4096;
    const int64_t rows = std::max<int64_t>(1, bytes / es / cols);
    TensorSpec spec{"model.layers." + std::to_string(i) + ".mlp.up_proj.weight", dtype, {rows, cols}};
    s.specs.push_back(spec);
    s.data.emplace_back(static_cast<size_t>(spec.NumElements() * es));
    FillSynthetic(spec, Box::Whole(spec.shape), 1, s.data.back().data());
    s.out.emplace_back(s.data.back().size());
    s.bytes += static_cast<int64_t>(s.data.back().size());
  }
  return s;
}

bool ParseBenchArgs(tools::Args& args, int argc, char** argv, const std::string& dir, int* code) {
  args.Program("");  // a benchmark is a program of its own
  if (!args.Parse(argc, argv, 1, code)) return false;
  if (dir.empty()) {
    std::fprintf(stderr, "--dir is required\n");
    *code = 2;
    return false;
  }
  return true;
}

double IperfLoopback(const std::string& dir) {
  if (std::system("command -v iperf3 > /dev/null 2>&1") != 0) return -1;
  const int port = 20000 + static_cast<int>(getpid() % 20000);
  const std::string server_log = dir + "/iperf3-server.log";
  const pid_t pid = fork();
  if (pid == 0) {
    const std::string p = std::to_string(port);
    execlp("iperf3", "iperf3", "-s", "-1", "-B", "127.0.0.1", "-p", p.c_str(), "--logfile", server_log.c_str(),
           static_cast<char*>(nullptr));
    _exit(127);
  }
  double bps = -1;
  for (int attempt = 0; attempt < 20 && bps < 0; ++attempt) {
    usleep(100000);
    const std::string cmd = "iperf3 -c 127.0.0.1 -p " + std::to_string(port) + " -t 3 -J 2>/dev/null";
    FILE* p = popen(cmd.c_str(), "r");
    if (p == nullptr) break;
    std::string out;
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
    pclose(p);
    const size_t at = out.find("\"sum_received\"");
    const size_t b = at == std::string::npos ? at : out.find("\"bits_per_second\":", at);
    if (b != std::string::npos) bps = std::stod(out.substr(b + 18)) / 8;
  }
  kill(pid, SIGTERM);
  waitpid(pid, nullptr, 0);
  return bps;
}

void WriteTextFile(const std::string& path, const std::string& text) {
  if (path.empty()) return;
  if (FILE* f = std::fopen(path.c_str(), "w")) {
    std::fprintf(f, "%s\n", text.c_str());
    std::fclose(f);
  }
}

double DiskCeiling(const std::string& file, int64_t size, bool write) {
  const double bw = HaveFio() ? RunFio(file, size, write) : -1;
  return bw > 0 ? bw : DirectIo(file, size, write);
}

absl::Status ParallelFor(int64_t n, int64_t threads, const std::function<absl::Status(int64_t)>& fn) {
  std::atomic<int64_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  absl::Status failure;
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < std::max<int64_t>(1, threads); ++t) {
    pool.emplace_back([&] {
      for (int64_t i; !stop.load() && (i = next.fetch_add(1)) < n;) {
        if (absl::Status s = fn(i); !s.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          if (failure.ok()) failure = s;
          stop = true;
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  return failure;
}

}  // namespace ckpt::bench

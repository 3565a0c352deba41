// Save and load throughput of ckpt next to the hardware ceilings measured in
// the same run: sequential O_DIRECT write and read of the same volume (fio
// with io_uring when installed, else a plain O_DIRECT writer/reader) and
// single-thread memcpy. Runs are interleaved so drift on a shared machine
// hits every contender alike; each figure is the median of --runs.
//
//   build/benchmarks/save_load_bench --dir /path/on/the/disk --size 1G --runs 3
//
// Prints a table and, with --json FILE, writes the figures as JSON.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "bench_util.h"
#include "ckpt/checkpointer.h"
#include "ckpt/synthetic.h"
#include "common/cli.h"
#include "common/synth_job.h"
#include "util/aligned_buffer.h"
#include "util/clock.h"
#include "util/errors.h"
#include "util/json.h"
#include "util/strings.h"

namespace ckpt::bench {
namespace {

struct CodecFigures {
  Samples stall_s, save_s, load_s;
  // Per-run ratios to the ceiling measured in the same run.
  Samples stall_x, save_x, load_x;
  double ratio = 0;
};

// The hardware ceilings, each measured beside the ckpt figure it bounds.
struct Ceilings {
  Samples write, read, memcpy;
};

// One run of one codec: a warm engine saves the state (its stall beside
// memcpy, its durable save beside an O_DIRECT write of the same volume,
// alternating which goes first), loads it back and compares every byte,
// then fio reads the data file just loaded for the read ceiling.
absl::Status MeasureCodec(int64_t run, Codec codec, StateBuffers& state, const std::string& dir, bool fio,
                          CodecFigures& f, Ceilings& ceilings) {
  const std::string root = dir + "/ckpt-" + std::string(CodecName(codec));
  std::filesystem::remove_all(root);
  CheckpointerOptions o;
  o.uri = root;
  o.codec = codec;
  o.engine_options.staging_bytes = static_cast<size_t>(state.bytes) + (64 << 20);
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Checkpointer> cp, Checkpointer::Open(o));
  State st;
  for (size_t i = 0; i < state.specs.size(); ++i) (void)st.AddTensor(state.specs[i], state.data[i].data());
  // Warm-up save: maps and registers the arena; not measured.
  CKPT_ASSIGN_OR_RETURN(SaveHandle warm, cp->Save(0, st));
  CKPT_RETURN_IF_ERROR(warm.Wait());

  // Alternate which side goes first (A B, then B A) so the disk's
  // write-back of one does not always slow the other.
  const bool ceiling_first = run % 2 == 0;
  double w = 0, mc = 0;
  auto measure_ceilings = [&] {
    const std::string ceiling_file = dir + "/ceiling.bin";
    w = fio ? RunFio(ceiling_file, state.bytes, true) : DirectIo(ceiling_file, state.bytes, true);
    std::filesystem::remove(ceiling_file);
    ceilings.write.Add(w);
    mc = MemcpyBandwidth(std::min<int64_t>(state.bytes, int64_t{1} << 30));
    ceilings.memcpy.Add(mc);
  };
  if (ceiling_first) measure_ceilings();
  const double t0 = NowSeconds();
  CKPT_ASSIGN_OR_RETURN(SaveHandle h, cp->Save(1, st));
  const double stall = NowSeconds() - t0;
  absl::Status s = h.Wait();
  const double durable = NowSeconds() - t0;
  if (!ceiling_first) measure_ceilings();
  CKPT_RETURN_IF_ERROR(Annotate(s, "save"));
  f.stall_s.Add(stall);
  f.save_s.Add(durable);
  f.stall_x.Add(state.bytes / stall / mc);
  f.save_x.Add(state.bytes / durable / w);
  f.ratio = static_cast<double>(h.Stats().bytes_stored) / state.bytes;

  State target;
  for (size_t i = 0; i < state.specs.size(); ++i) (void)target.AddTensor(state.specs[i], state.out[i].data());
  const double l0 = NowSeconds();
  auto ls = cp->Load(target, 1);
  const double load = NowSeconds() - l0;
  if (!ls.ok()) return Annotate(ls.status(), "load");
  for (size_t i = 0; i < state.specs.size(); ++i) {
    if (state.out[i] != state.data[i]) {
      return absl::DataLossError(StrCat("load returned different bytes for ", state.specs[i].fqn));
    }
  }
  // The read ceiling: the same bytes, read back by fio at full depth.
  const std::string data_file = root + "/step-0000000001/rank-000000.ckd";
  const int64_t file_bytes = static_cast<int64_t>(std::filesystem::file_size(data_file)) / (4 << 20) * (4 << 20);
  const double r = fio ? RunFio(data_file, file_bytes, false) : DirectIo(data_file, file_bytes, false);
  ceilings.read.Add(r);
  f.load_s.Add(load);
  // Compare like for like: bytes that came off the disk per second.
  f.load_x.Add(static_cast<double>(ls->bytes_read) / load / r);
  cp.reset();
  std::filesystem::remove_all(root);
  return absl::OkStatus();
}

// The table on stdout, the same figures as JSON.
std::string Report(const std::vector<Codec>& codecs, std::map<Codec, CodecFigures>& figs, const Ceilings& c,
                   int64_t bytes, const std::string& dtype_text, int64_t runs, bool fio) {
  const double gb = 1e9;
  const double wc = c.write.Median(), rc = c.read.Median();
  const double memcpy_bw = c.memcpy.Median();
  std::printf(
      "\nceilings: memcpy %.2f GB/s [%.2f..%.2f], O_DIRECT write %.3f GB/s [%.3f..%.3f], read %.3f GB/s "
      "[%.3f..%.3f]\n\n",
      memcpy_bw / gb, c.memcpy.Min() / gb, c.memcpy.Max() / gb, wc / gb, c.write.Min() / gb, c.write.Max() / gb,
      rc / gb, c.read.Min() / gb, c.read.Max() / gb);
  std::printf(
      "medians of %lld runs; (x ...) is the median of per-run ratios to the paired ceiling;\n"
      "load's ratio compares stored bytes read per second with fio reading the same file\n",
      static_cast<long long>(runs));
  std::printf("%-13s %6s  %22s  %24s  %24s\n", "codec", "ratio", "stall GB/s (x memcpy)", "durable save GB/s (x wr)",
              "load GB/s (x rd)");
  JsonWriter j;
  j.BeginObject()
      .Field("size_bytes", bytes)
      .Field("dtype", dtype_text)
      .Field("runs", runs)
      .Field("ceiling_tool", fio ? "fio" : "odirect")
      .Field("memcpy_bytes_per_s", memcpy_bw)
      .Field("write_ceiling_bytes_per_s", wc)
      .Field("read_ceiling_bytes_per_s", rc);
  j.Key("codecs").BeginArray();
  const double b = static_cast<double>(bytes);
  for (Codec codec : codecs) {
    const CodecFigures& f = figs[codec];
    const double stall_bw = b / f.stall_s.Median();
    const double save_bw = b / f.save_s.Median();
    const double load_bw = b / f.load_s.Median();
    std::printf("%-13s %6.3f  %8.2f (%.2f) [%.2f..%.2f]  %7.3f (%.2f) [%.3f..%.3f]  %7.3f (%.2f) [%.3f..%.3f]\n",
                std::string(CodecName(codec)).c_str(), f.ratio, stall_bw / gb, f.stall_x.Median(),
                b / f.stall_s.Max() / gb, b / f.stall_s.Min() / gb, save_bw / gb, f.save_x.Median(),
                b / f.save_s.Max() / gb, b / f.save_s.Min() / gb, load_bw / gb, f.load_x.Median(),
                b / f.load_s.Max() / gb, b / f.load_s.Min() / gb);
    j.BeginObject()
        .Field("codec", CodecName(codec))
        .Field("ratio", f.ratio)
        .Field("stall_s_median", f.stall_s.Median())
        .Field("stall_bytes_per_s", stall_bw)
        .Field("stall_vs_memcpy", f.stall_x.Median())
        .Field("save_s_median", f.save_s.Median())
        .Field("save_bytes_per_s", save_bw)
        .Field("save_vs_write_ceiling", f.save_x.Median())
        .Field("load_s_median", f.load_s.Median())
        .Field("load_bytes_per_s", load_bw)
        .Field("load_vs_read_ceiling", f.load_x.Median())
        .EndObject();
  }
  j.EndArray().EndObject();
  return j.str();
}

int Main(int argc, char** argv) {
  std::string dir, json_path, codecs_text = "none,zstd,shuffle-zstd", dtype_text = "bf16";
  int64_t size = int64_t{1} << 30, runs = 3;
  tools::Args args("save_load_bench", "--dir DIR [--size 1G] [--runs 3] [--codecs ...] [--json FILE]",
                   "Measures ckpt save (stall and durable), load and the hardware ceilings in "
                   "one run.");
  args.String("dir", &dir, "directory on the storage to measure (required)");
  args.Size("size", &size, "state size (default 1G)", true);
  args.Int("runs", &runs, "runs per figure; the median is reported (default 3)");
  args.String("codecs", &codecs_text, "codecs to measure (default none,zstd,shuffle-zstd)");
  args.String("dtype", &dtype_text, "tensor dtype (default bf16)");
  args.String("json", &json_path, "also write the figures as JSON to this file");
  int exit = 0;
  if (!ParseBenchArgs(args, argc, argv, dir, &exit)) return exit;
  auto dtype = ParseDType(dtype_text);
  if (!dtype) return 2;
  std::vector<Codec> codecs;
  for (size_t pos = 0; pos <= codecs_text.size();) {
    size_t comma = codecs_text.find(',', pos);
    if (comma == std::string::npos) comma = codecs_text.size();
    auto c = ParseCodec(codecs_text.substr(pos, comma - pos));
    if (!c) return 2;
    codecs.push_back(*c);
    pos = comma + 1;
  }
  std::filesystem::create_directories(dir);
  const bool fio = HaveFio();
  std::printf("state: %s of %s weights; %lld runs; ceilings by %s\n",
              tools::HumanBytes(static_cast<double>(size)).c_str(), dtype_text.c_str(), static_cast<long long>(runs),
              fio ? "fio (io_uring, O_DIRECT, QD64, 4 MiB, file preallocated)" : "O_DIRECT pwrite/pread");
  std::fflush(stdout);
  StateBuffers state = MakeState(size, *dtype);

  // One engine per codec with an arena that holds the whole state, reused
  // (warm) across runs, as a trainer's would be.
  std::map<Codec, CodecFigures> figs;
  Ceilings ceilings;
  // Each ckpt figure is paired with its ceiling measured right before it
  // (memcpy before the stall, an O_DIRECT write of the same volume before the
  // save) or right after it on the same bytes (fio reading the data file ckpt
  // just loaded), so shifts in the shared machine's disk and host caches hit
  // both sides of every ratio alike.
  for (int64_t run = 0; run < runs; ++run) {
    // Rotate the codec order too, so none always following the previous
    // run's last codec does not bias it.
    for (size_t k = 0; k < codecs.size(); ++k) {
      const Codec codec = codecs[(k + static_cast<size_t>(run)) % codecs.size()];
      if (absl::Status s = MeasureCodec(run, codec, state, dir, fio, figs[codec], ceilings); !s.ok()) {
        std::fprintf(stderr, "save_load_bench: %s\n", std::string(s.message()).c_str());
        return 1;
      }
    }
  }
  WriteTextFile(json_path, Report(codecs, figs, ceilings, state.bytes, dtype_text, runs, fio));
  return 0;
}

}  // namespace
}  // namespace ckpt::bench

int main(int argc, char** argv) { return ckpt::bench::Main(argc, argv); }

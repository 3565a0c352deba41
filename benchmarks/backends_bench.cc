// Save cost of each storage backend on the same disk, next to the disk's
// write ceiling measured in the same run: file (io_uring), posix (threads),
// the localfs plugin (through the C ABI), hdf5 containers, and tiered
// (local commit, then the drain to the durable tier). Runs interleave the
// backends; figures are medians of --runs.
//
//   build/benchmarks/backends_bench --dir /local/disk --durable /other/disk --size 512M --runs 3
//
// Without --durable the durable tier is a directory on the --dir disk.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "bench_util.h"
#include "ckpt/checkpointer.h"
#include "common/cli.h"
#include "common/synth_job.h"
#include "util/clock.h"
#include "util/json.h"

#ifndef CKPT_BENCH_PLUGIN_DIR
#define CKPT_BENCH_PLUGIN_DIR ""
#endif

namespace ckpt::bench {
namespace {

struct Figures {
  Samples stall_s, commit_s, drain_bw, commit_x, drain_x;
};

int Main(int argc, char** argv) {
  std::string dir, durable, json_path, backends_text = "file,posix,localfs,hdf5,tiered";
  int64_t size = int64_t{512} << 20, runs = 3;
  tools::Args args("backends_bench", "--dir DIR [--durable DIR] [--size 512M] [--runs 3] [--json FILE]",
                   "Measures the save stall and commit time of each storage backend, the tiered\n"
                   "backend's drain, and the disk's write ceiling, in one run.");
  args.String("dir", &dir, "directory on the (local) disk to measure (required)");
  args.String("durable", &durable, "directory for the tiered backend's durable tier");
  args.Size("size", &size, "state size (default 512M)", true);
  args.Int("runs", &runs, "runs per figure; the median is reported (default 3)");
  args.String("backends", &backends_text, "backends to measure (default file,posix,localfs,hdf5,tiered)");
  args.String("json", &json_path, "also write the figures as JSON to this file");
  int exit = 0;
  if (!ParseBenchArgs(args, argc, argv, dir, &exit)) return exit;
  if (durable.empty()) durable = dir + "/durable-tier";
  if (std::getenv("CKPT_PLUGIN_PATH") == nullptr && std::string(CKPT_BENCH_PLUGIN_DIR).size() > 0) {
    setenv("CKPT_PLUGIN_PATH", CKPT_BENCH_PLUGIN_DIR, 1);
  }
  std::vector<std::string> backends;
  for (size_t pos = 0; pos <= backends_text.size();) {
    size_t comma = backends_text.find(',', pos);
    if (comma == std::string::npos) comma = backends_text.size();
    backends.push_back(backends_text.substr(pos, comma - pos));
    pos = comma + 1;
  }
  std::filesystem::create_directories(dir);
  std::filesystem::create_directories(durable);
  StateBuffers state = MakeState(size, DType::kBF16);
  std::printf("state: %s of bf16 weights; %lld runs; durable tier in %s; ceilings by %s\n",
              tools::HumanBytes(static_cast<double>(state.bytes)).c_str(), static_cast<long long>(runs),
              durable.c_str(), HaveFio() ? "fio" : "O_DIRECT pwrite");
  std::fflush(stdout);

  std::map<std::string, Figures> figs;
  Samples local_ceiling, durable_ceiling;
  for (int64_t run = 0; run < runs; ++run) {
    for (size_t k = 0; k < backends.size(); ++k) {
      const std::string& b = backends[(k + run) % backends.size()];
      const double ceiling = DiskCeiling(dir + "/ceiling.bin", state.bytes, true);
      std::filesystem::remove(dir + "/ceiling.bin");
      local_ceiling.Add(ceiling);
      std::string uri;
      const std::string root = dir + "/bench-" + b;
      std::filesystem::remove_all(root);
      double dceiling = 0;
      if (b == "tiered") {
        dceiling = DiskCeiling(durable + "/ceiling.bin", state.bytes, true);
        std::filesystem::remove(durable + "/ceiling.bin");
        durable_ceiling.Add(dceiling);
        std::filesystem::remove_all(durable + "/bench-tiered");
        uri = "tiered://?local=" + root + "&durable=" + durable + "/bench-tiered";
      } else {
        uri = b + "://" + root;
      }
      CheckpointerOptions o;
      o.uri = uri;
      o.engine_options.staging_bytes = static_cast<size_t>(state.bytes) + (64 << 20);
      auto cp = Checkpointer::Open(o);
      if (!cp.ok()) {
        std::fprintf(stderr, "%s: %s\n", b.c_str(), std::string(cp.status().message()).c_str());
        return 1;
      }
      State s;
      for (size_t i = 0; i < state.specs.size(); ++i) (void)s.AddTensor(state.specs[i], state.data[i].data());
      const double t0 = NowSeconds();
      auto h = (*cp)->Save(1, s);
      absl::Status st = h.ok() ? h->Wait() : h.status();
      const double committed = NowSeconds() - t0;
      if (!st.ok()) {
        std::fprintf(stderr, "%s: %s\n", b.c_str(), std::string(st.message()).c_str());
        return 1;
      }
      Figures& f = figs[b];
      const SaveStats stats = h->Stats();
      f.stall_s.Add(stats.stall_s);
      f.commit_s.Add(committed);
      f.commit_x.Add(state.bytes / committed / ceiling);
      if (b == "tiered") {
        // The data file is queued for the durable tier when it is durable
        // locally; the drain runs from then until WaitReplicated returns.
        absl::Status r = h->WaitReplicated();
        const double replicated = NowSeconds() - t0;
        if (!r.ok()) {
          std::fprintf(stderr, "tiered drain: %s\n", std::string(r.message()).c_str());
          return 1;
        }
        const double bw = static_cast<double>(stats.bytes_written) / (replicated - stats.write_s);
        f.drain_bw.Add(bw);
        f.drain_x.Add(bw / dceiling);
      }
      cp->reset();
      std::filesystem::remove_all(root);
    }
  }

  const double gb = 1e9;
  std::printf("\nwrite ceiling: local %.3f GB/s, durable %.3f GB/s (medians)\n", local_ceiling.Median() / gb,
              durable_ceiling.Median() / gb);
  std::printf("%-8s %10s %12s %14s %18s\n", "backend", "stall s", "commit s", "commit GB/s (x)", "drain GB/s (x)");
  JsonWriter j;
  j.BeginObject()
      .Field("bytes", state.bytes)
      .Field("runs", runs)
      .Field("local_write_ceiling", local_ceiling.Median())
      .Field("durable_write_ceiling", durable_ceiling.Median());
  j.Key("backends").BeginArray();
  for (const std::string& b : backends) {
    const Figures& f = figs[b];
    std::printf("%-8s %10.4f %12.3f %9.3f (%.2f)", b.c_str(), f.stall_s.Median(), f.commit_s.Median(),
                state.bytes / f.commit_s.Median() / gb, f.commit_x.Median());
    if (!f.drain_bw.v.empty()) std::printf(" %11.3f (%.2f)", f.drain_bw.Median() / gb, f.drain_x.Median());
    std::printf("\n");
    j.BeginObject()
        .Field("backend", b)
        .Field("stall_s", f.stall_s.Median())
        .Field("commit_s", f.commit_s.Median())
        .Field("commit_vs_write_ceiling", f.commit_x.Median());
    if (!f.drain_bw.v.empty()) {
      j.Field("drain_bytes_per_s", f.drain_bw.Median()).Field("drain_vs_durable_ceiling", f.drain_x.Median());
    }
    j.EndObject();
  }
  j.EndArray().EndObject();
  auto ratio = [&](const char* what, const std::string& a, const std::string& b, auto get) {
    if (!figs.count(a) || !figs.count(b)) return;
    std::printf("%-34s %.3f\n", what, get(figs[a]) / get(figs[b]));
  };
  std::printf("\n");
  auto stall = [](const Figures& f) { return f.stall_s.Median(); };
  auto commit = [](const Figures& f) { return f.commit_s.Median(); };
  ratio("stall, tiered / file", "tiered", "file", stall);
  ratio("local commit time, tiered / file", "tiered", "file", commit);
  ratio("save throughput, posix / file", "file", "posix", commit);
  ratio("save throughput, localfs / file", "file", "localfs", commit);
  ratio("save throughput, hdf5 / file", "file", "hdf5", commit);
  WriteTextFile(json_path, j.str());
  return 0;
}

}  // namespace
}  // namespace ckpt::bench

int main(int argc, char** argv) { return ckpt::bench::Main(argc, argv); }

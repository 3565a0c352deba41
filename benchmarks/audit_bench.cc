// Throughput of the audit commands next to the disk's read ceiling measured
// in the same run: deep verify, stats (streamed, every block verified) and
// diff (two checkpoints cut differently, so values are compared, not block
// checksums). Runs are interleaved; figures are medians of --runs.
//
// The disk under test may sit behind a host cache that a read warms for the
// next one. So every contender is compared with fio reading the same files
// right after it: each of them follows another reader of those files.
//
//   build/benchmarks/audit_bench --dir /path/on/the/disk --size 1G --runs 3
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "ckpt/audit.h"
#include "ckpt/checkpointer.h"
#include "ckpt/verify.h"
#include "common/cli.h"
#include "common/synth_job.h"
#include "util/clock.h"
#include "util/json.h"

namespace ckpt::bench {
namespace {

int Main(int argc, char** argv) {
  std::string dir, json_path;
  int64_t size = int64_t{1} << 30, runs = 3, slab = 128 << 20;
  tools::Args args("audit_bench", "--dir DIR [--size 1G] [--runs 3] [--json FILE]",
                   "Measures verify, stats and diff throughput and the read ceiling in one run.");
  args.String("dir", &dir, "directory on the disk to measure (required)");
  args.Size("size", &size, "state size (default 1G)", true);
  args.Int("runs", &runs, "runs per figure; the median is reported (default 3)");
  args.Size("slab", &slab, "stats/diff read memory per checkpoint (default 128M)", true);
  args.String("json", &json_path, "also write the figures as JSON to this file");
  int exit = 0;
  if (!ParseBenchArgs(args, argc, argv, dir, &exit)) return exit;
  std::filesystem::remove_all(dir + "/audit-a");
  std::filesystem::remove_all(dir + "/audit-b");
  StateBuffers state = MakeState(size, DType::kBF16);
  // The same values twice, with different block sizes: diff must compare values.
  for (const auto& [name, block] : {std::pair<std::string, size_t>{"a", 1 << 20}, {"b", 4 << 20}}) {
    CheckpointerOptions o;
    o.uri = dir + "/audit-" + name;
    o.engine_options.block_size = block;
    o.engine_options.staging_bytes = static_cast<size_t>(state.bytes) + (64 << 20);
    auto cp = Checkpointer::Open(o);
    if (!cp.ok()) return 1;
    State s;
    for (size_t i = 0; i < state.specs.size(); ++i) (void)s.AddTensor(state.specs[i], state.data[i].data());
    auto h = (*cp)->Save(1, s);
    if (!h.ok() || !h->Wait().ok()) return 1;
  }
  state = StateBuffers();  // the audits must not lean on memory the trainer would hold
  auto a = OpenStorage(dir + "/audit-a");
  auto b = OpenStorage(dir + "/audit-b");
  if (!a.ok() || !b.ok()) return 1;
  const std::string data_file = dir + "/audit-a/step-0000000001/rank-000000.ckd";
  const int64_t bytes = static_cast<int64_t>(std::filesystem::file_size(data_file));
  std::printf("checkpoint: %s of bf16 weights, uncompressed; %lld runs; read ceiling by %s\n",
              tools::HumanBytes(static_cast<double>(bytes)).c_str(), static_cast<long long>(runs),
              HaveFio() ? "fio (io_uring, O_DIRECT, QD64, 4 MiB)" : "O_DIRECT pread");
  std::fflush(stdout);

  const std::string data_file_b = dir + "/audit-b/step-0000000001/rank-000000.ckd";
  const int64_t bytes_b = static_cast<int64_t>(std::filesystem::file_size(data_file_b));
  Samples ceiling, verify_bw, stats_bw, diff_bw, verify_x, stats_x, diff_x;
  AuditOptions ao;
  ao.slab_bytes = slab;
  // Each contender returns the bytes it read (0 on failure).
  auto verify = [&]() -> double {
    auto v = VerifyStep(**a, 1);
    if (!v.ok() || !v->ok()) {
      std::fprintf(stderr, "verify failed: %s\n",
                   v.ok() ? v->problems.front().message.c_str() : std::string(v.status().message()).c_str());
      return 0;
    }
    return static_cast<double>(v->bytes_read);
  };
  auto stats = [&]() -> double {
    auto st = ComputeStats(**a, 1, ao);
    if (!st.ok()) {
      std::fprintf(stderr, "stats failed: %s\n", std::string(st.status().message()).c_str());
      return 0;
    }
    return static_cast<double>(bytes);
  };
  auto diff = [&]() -> double {
    auto d = DiffSteps(**a, 1, **b, 1, ao);
    if (!d.ok()) {
      std::fprintf(stderr, "diff failed: %s\n", std::string(d.status().message()).c_str());
      return 0;
    }
    for (const TensorDiff& t : *d) {
      if (t.kind != TensorDiff::Kind::kIdentical || t.by_checksum) {
        std::fprintf(stderr, "diff did not compare values for %s\n", t.fqn.c_str());
        return 0;
      }
    }
    return static_cast<double>(bytes + bytes_b);
  };
  auto ceiling_a = [&] { return DiskCeiling(data_file, bytes, false); };
  auto ceiling_ab = [&] {
    // Both files, as diff read them. (fio lays a file out to the size asked,
    // so each is given its own.)
    const double ca = DiskCeiling(data_file, bytes, false), cb = DiskCeiling(data_file_b, bytes_b, false);
    return static_cast<double>(bytes + bytes_b) / (static_cast<double>(bytes) / ca + static_cast<double>(bytes_b) / cb);
  };
  struct Contender {
    std::function<double()> run;
    std::function<double()> ceiling;  // on the files `run` read, right after it
    Samples* bw;
    Samples* x;
  };
  const std::vector<Contender> contenders = {{verify, ceiling_a, &verify_bw, &verify_x},
                                             {stats, ceiling_a, &stats_bw, &stats_x},
                                             {diff, ceiling_ab, &diff_bw, &diff_x}};
  (void)ceiling_a();  // the first contender follows a reader too
  for (int64_t run = 0; run < runs; ++run) {
    // The order turns from run to run, so that none always follows the same one.
    for (size_t k = 0; k < contenders.size(); ++k) {
      const Contender& c = contenders[(k + static_cast<size_t>(run)) % contenders.size()];
      const double t0 = NowSeconds();
      const double read = c.run();
      const double dt = NowSeconds() - t0;
      if (read == 0) return 1;
      const double ceil = c.ceiling();
      ceiling.Add(ceil);
      c.bw->Add(read / dt);
      c.x->Add(read / dt / ceil);
    }
  }
  const double gb = 1e9;
  std::printf("\nread ceiling %.3f GB/s (median; %.3f..%.3f)\n", ceiling.Median() / gb, ceiling.Min() / gb,
              ceiling.Max() / gb);
  std::printf("%-14s %10s %8s\n", "", "GB/s", "x ceiling");
  std::printf("%-14s %10.3f %8.2f\n", "verify (deep)", verify_bw.Median() / gb, verify_x.Median());
  std::printf("%-14s %10.3f %8.2f\n", "stats", stats_bw.Median() / gb, stats_x.Median());
  std::printf("%-14s %10.3f %8.2f\n", "diff (values)", diff_bw.Median() / gb, diff_x.Median());
  if (!json_path.empty()) {
    JsonWriter w;
    w.BeginObject()
        .Field("bytes", bytes)
        .Field("read_ceiling", ceiling.Median())
        .Field("verify_bytes_per_s", verify_bw.Median())
        .Field("verify_vs_ceiling", verify_x.Median())
        .Field("stats_bytes_per_s", stats_bw.Median())
        .Field("stats_vs_ceiling", stats_x.Median())
        .Field("diff_bytes_per_s", diff_bw.Median())
        .Field("diff_vs_ceiling", diff_x.Median())
        .EndObject();
    WriteTextFile(json_path, w.str());
  }
  std::filesystem::remove_all(dir + "/audit-a");
  std::filesystem::remove_all(dir + "/audit-b");
  return 0;
}

}  // namespace
}  // namespace ckpt::bench

int main(int argc, char** argv) { return ckpt::bench::Main(argc, argv); }

// The memory level's figures (docs/performance.md "Memory level"): a
// restore from a peer's memory against a restore from the disk and against
// the loopback TCP ceiling iperf3 measures in the same run, and the cost of
// a memory save (its stall, and the time until its copy is in a peer's
// memory) against a durable one, and how much a training loop running while
// each save finishes in the background slows down.
//
//   peer_bench --dir DIR [--size 1G] [--runs 3] [--json FILE]
//
// One process plays three hosts' peer memories (the saver's, its replica
// holder's, and a replacement's that holds nothing), each with its own
// server: every byte of a restore "from peers" crosses loopback TCP, as
// iperf3's do. The restore from disk reads O_DIRECT (no page cache).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "bench_util.h"
#include "ckpt/checkpointer.h"
#include "ckpt/peer.h"
#include "common/cli.h"
#include "common/synth_job.h"
#include "peer/peer_client.h"
#include "util/clock.h"
#include "util/json.h"

namespace ckpt::bench {
namespace {

// iperf3 over loopback (one stream, 3 s): received bits per second / 8, or
// -1 when iperf3 is not installed or fails.
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

// Stands in for the trainer between saves: an optimizer-like pass over
// 64 MiB of f32 (w = 0.999 w + 0.001 g), bound by memory bandwidth as an
// optimizer step is, on the calling thread.
class TrainingLoop {
 public:
  TrainingLoop() : w_(kElems, 1.0f), g_(kElems, 0.5f) {}
  // Passes per second while `busy()` holds, for at least `min_s`.
  template <typename F>
  double RateWhile(F busy, double min_s) {
    const double t0 = NowSeconds();
    int64_t passes = 0;
    double t = t0;
    while (busy() || t - t0 < min_s) {
      for (size_t i = 0; i < kElems; ++i) w_[i] = 0.999f * w_[i] + 0.001f * g_[i];
      ++passes;
      t = NowSeconds();
    }
    sink_ = sink_ + w_[static_cast<size_t>(passes) % kElems];
    return static_cast<double>(passes) / (t - t0);
  }

 private:
  static constexpr size_t kElems = size_t{16} << 20;
  std::vector<float> w_, g_;
  volatile float sink_ = 0;
};

std::shared_ptr<PeerMemory> Memory(const std::string& domain, int64_t budget) {
  PeerMemoryOptions o;
  o.token = "peer-bench-token-0123456789abcdef";
  o.domain = domain;
  o.budget_bytes = budget;
  auto m = PeerMemory::Start(o);
  if (!m.ok()) {
    std::fprintf(stderr, "peer memory: %s\n", std::string(m.status().message()).c_str());
    std::exit(1);
  }
  return *m;
}

}  // namespace

int Main(int argc, char** argv) {
  std::string dir, json_path;
  int64_t size = int64_t{1} << 30, runs = 3;
  tools::Args args("peer_bench", "--dir DIR [--size 1G] [--runs 3] [--json FILE]",
                   "Restore from a peer's memory vs from the disk vs iperf3 on loopback; memory vs durable save.");
  args.String("dir", &dir, "directory on the disk to compare with (required)");
  args.Size("size", &size, "state size (default 1G)", true);
  args.Int("runs", &runs, "runs per figure; the median is reported (default 3)");
  args.String("json", &json_path, "also write the figures as JSON to this file");
  bool times = false;
  args.Switch("times", &times,
              "print when each restore from a peer starts and ends on the monotonic clock (for perf record -k "
              "CLOCK_MONOTONIC, then perf report --time START,END)");
  int exit = 0;
  if (!ParseBenchArgs(args, argc, argv, dir, &exit)) return exit;
  std::filesystem::create_directories(dir);
  StateBuffers state = MakeState(size, DType::kF32);
  std::printf("state: %s of f32 weights; %lld runs\n", tools::HumanBytes(static_cast<double>(state.bytes)).c_str(),
              static_cast<long long>(runs));
  std::fflush(stdout);
  const int64_t budget = 3 * state.bytes + (int64_t{256} << 20);
  auto own = Memory("host-a", budget), holder = Memory("host-b", budget), fresh = Memory("host-c", budget);
  State source, target;
  for (size_t i = 0; i < state.specs.size(); ++i) {
    (void)source.AddTensor(state.specs[i], state.data[i].data());
    (void)target.AddTensor(state.specs[i], state.out[i].data());
  }
  auto check = [&](const char* what) {
    for (size_t i = 0; i < state.specs.size(); ++i) {
      if (state.out[i] != state.data[i]) {
        std::fprintf(stderr, "%s returned different bytes for %s\n", what, state.specs[i].fqn.c_str());
        std::exit(1);
      }
      std::fill(state.out[i].begin(), state.out[i].end(), std::byte{0});
    }
  };
  Samples mem_stall, mem_commit, mem_commit_cold, dur_stall, dur_commit, from_peer, from_own, from_disk, iperf,
      disk_ceiling, raw_get;
  // Training passes per second alone, and while a memory or a durable save
  // finishes in the background (after its stall), as a fraction of alone.
  TrainingLoop training;
  Samples train_alone, train_memory, train_durable;
  for (int64_t run = 0; run < runs; ++run) {
    const std::string root = dir + "/peer-bench-root";
    std::filesystem::remove_all(root);
    PeerRoute route;
    route.replicas = {holder->endpoint()};
    auto memory_storage = OpenPeerStorage(own, route);
    CheckpointerOptions o;
    o.uri = root;
    o.memory_storage = *memory_storage;
    o.engine_options.staging_bytes = static_cast<size_t>(state.bytes) + (64 << 20);
    auto cp = Checkpointer::Open(o);
    if (!cp.ok()) return 1;
    // Warm-up: maps the arena.
    auto warm = (*cp)->Save(1, source);
    if (!warm.ok() || !warm->Wait().ok()) return 1;
    SaveOptions mem;
    mem.level = SaveLevel::kMemory;
    double t0 = NowSeconds();
    auto h = (*cp)->Save(2, source, mem);
    if (!h.ok()) return 1;
    mem_stall.Add(NowSeconds() - t0);
    const double during_memory = training.RateWhile([&] { return !h->Done(); }, 0);
    if (absl::Status s = h->Wait(); !s.ok()) {
      std::fprintf(stderr, "memory save: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    // The first memory save maps its memory afresh (on this kind of host,
    // page faults cost seconds per GiB); later ones reuse what the dropped
    // steps held, as a training job's saves do.
    (run == 0 ? mem_commit_cold : mem_commit).Add(NowSeconds() - t0);
    t0 = NowSeconds();
    auto d = (*cp)->Save(3, source);
    if (!d.ok()) return 1;
    dur_stall.Add(NowSeconds() - t0);
    const double during_durable = training.RateWhile([&] { return !d->Done(); }, 0);
    if (!d->Wait().ok()) return 1;
    dur_commit.Add(NowSeconds() - t0);
    const double alone = training.RateWhile([] { return false; }, 1.0);
    train_alone.Add(alone);
    train_memory.Add(during_memory / alone);
    train_durable.Add(during_durable / alone);

    // Restores: from the holder's memory over TCP (a replacement host that
    // holds nothing), from this process's own memory, from the disk.
    PeerRoute elsewhere;
    elsewhere.holders = [&](int64_t, int) { return std::vector<std::string>{holder->endpoint()}; };
    auto remote = OpenPeerStorage(fresh, elsewhere);
    LoadOptions lo;
    lo.level = SaveLevel::kMemory;
    CheckpointerOptions ro;
    ro.uri = root;
    ro.memory_storage = *remote;
    ro.gc_on_open = false;
    auto reader = Checkpointer::Open(ro);
    if (!reader.ok()) return 1;
    t0 = NowSeconds();
    auto lp = (*reader)->Load(target, 2, lo);
    if (!lp.ok()) {
      std::fprintf(stderr, "restore from a peer: %s\n", std::string(lp.status().message()).c_str());
      return 1;
    }
    from_peer.Add(NowSeconds() - t0);
    if (times) std::printf("restore from a peer: monotonic %.6f,%.6f\n", t0, NowSeconds());
    std::printf(
        "run %lld: memory save committed in %.3f s, restore from a peer %.3f s, RSS %s, held %s + %s + %s\n",
        static_cast<long long>(run), (run == 0 ? mem_commit_cold : mem_commit).v.back(), from_peer.v.back(),
        tools::HumanBytes(static_cast<double>(tools::ResidentBytes())).c_str(),
        tools::HumanBytes(static_cast<double>(own->Stats().held_bytes + own->Stats().spare_bytes)).c_str(),
        tools::HumanBytes(static_cast<double>(holder->Stats().held_bytes + holder->Stats().spare_bytes)).c_str(),
        tools::HumanBytes(static_cast<double>(fresh->Stats().held_bytes + fresh->Stats().spare_bytes)).c_str());
    std::fflush(stdout);
    check("the restore from a peer");
    if (lp->bytes_from_peers < state.bytes) {
      std::fprintf(stderr, "the restore read %lld bytes from peers, less than the state\n",
                   static_cast<long long>(lp->bytes_from_peers));
      return 1;
    }
    // The data plane alone: the whole data file from the holder into a
    // buffer already touched, no decoding (what iperf3 does, plus the frame
    // checksums).
    {
      const std::string data_path = "step-0000000002/rank-000000.ckd";
      auto c = peer::PeerConnection::Open(holder->endpoint(), "peer-bench-token-0123456789abcdef", 30);
      auto size = c.ok() ? (*c)->Stat(data_path) : absl::StatusOr<uint64_t>(c.status());
      if (!size.ok()) return 1;
      std::vector<std::byte> buf(*size, std::byte{1});
      t0 = NowSeconds();
      if (!(*c)->Get(data_path, 0, absl::Span<std::byte>(buf)).ok()) return 1;
      raw_get.Add(static_cast<double>(*size) / (NowSeconds() - t0));
    }
    t0 = NowSeconds();
    auto lo_own = (*cp)->Load(target, 2, lo);
    if (!lo_own.ok()) return 1;
    from_own.Add(NowSeconds() - t0);
    check("the restore from its own memory");
    t0 = NowSeconds();
    auto ld = (*cp)->Load(target, 3);
    if (!ld.ok()) return 1;
    from_disk.Add(NowSeconds() - t0);
    check("the restore from disk");
    reader->reset();
    cp->reset();
    own->DropStepsExcept(-1);
    holder->DropStepsExcept(-1);
    if (run + 1 < runs) std::filesystem::remove_all(root);
  }
  // The ceilings after every run, not between them: with iperf3 and fio run
  // between runs, every later run's memory save and restore from a peer took
  // several times longer (docs/performance.md, "Figures behind the code").
  {
    const std::string data_file = dir + "/peer-bench-root/step-0000000003/rank-000000.ckd";
    const int64_t file_bytes = static_cast<int64_t>(std::filesystem::file_size(data_file)) / (4 << 20) * (4 << 20);
    for (int64_t run = 0; run < runs; ++run) {
      disk_ceiling.Add(DiskCeiling(data_file, file_bytes, false));
      iperf.Add(IperfLoopback(dir));
    }
    std::filesystem::remove_all(dir + "/peer-bench-root");
  }
  const double gb = 1e9, bytes = static_cast<double>(state.bytes);
  const double peer_bw = bytes / from_peer.Median(), own_bw = bytes / from_own.Median(),
               disk_bw = bytes / from_disk.Median(), ip = iperf.Median(), dc = disk_ceiling.Median();
  std::printf("\nrestore of %s (medians of %lld):\n", tools::HumanBytes(bytes).c_str(), static_cast<long long>(runs));
  std::printf("  from a peer's memory   %.3f s  %.2f GB/s  %s\n", from_peer.Median(), peer_bw / gb,
              ip > 0 ? (std::to_string(peer_bw / ip).substr(0, 4) + "x iperf3 loopback (" +
                        std::to_string(ip / gb).substr(0, 4) + " GB/s)")
                           .c_str()
                     : "(iperf3 not installed: no ceiling)");
  std::printf("  from its own memory    %.3f s  %.2f GB/s (the loader's own ceiling: checks and copies, no network)\n",
              from_own.Median(), own_bw / gb);
  std::printf("  data plane alone (one file read whole, frames checked, nothing decoded) %.2f GB/s  %.2fx iperf3\n",
              raw_get.Median() / gb, ip > 0 ? raw_get.Median() / ip : -1.0);
  std::printf("  from the disk (O_DIRECT) %.3f s  %.2f GB/s  %.2fx the disk's read ceiling (%.2f GB/s)\n",
              from_disk.Median(), disk_bw / gb, disk_bw / dc, dc / gb);
  std::printf(
      "save: memory level stall %.3f s, committed (copy in a peer's memory) %.3f s (the first, mapping its memory "
      "afresh: %.3f s); durable stall %.3f s, committed %.3f s\n",
      mem_stall.Median(), runs > 1 ? mem_commit.Median() : -1.0, mem_commit_cold.Median(), dur_stall.Median(),
      dur_commit.Median());
  std::printf(
      "training (an optimizer-like pass over 64 MiB, %.1f passes/s alone) while the save finishes in the "
      "background: %.2fx its speed alone during a memory save, %.2fx during a durable save\n",
      train_alone.Median(), train_memory.Median(), train_durable.Median());
  JsonWriter j;
  j.BeginObject()
      .Field("bytes", state.bytes)
      .Field("runs", runs)
      .Field("restore_peer_s", from_peer.Median())
      .Field("restore_own_s", from_own.Median())
      .Field("restore_disk_s", from_disk.Median())
      .Field("iperf3_bytes_per_s", ip)
      .Field("disk_read_ceiling_bytes_per_s", dc)
      .Field("peer_vs_iperf3", ip > 0 ? peer_bw / ip : -1.0)
      .Field("data_plane_bytes_per_s", raw_get.Median())
      .Field("data_plane_vs_iperf3", ip > 0 ? raw_get.Median() / ip : -1.0)
      .Field("memory_stall_s", mem_stall.Median())
      .Field("memory_commit_s", runs > 1 ? mem_commit.Median() : -1.0)
      .Field("memory_commit_first_s", mem_commit_cold.Median())
      .Field("durable_stall_s", dur_stall.Median())
      .Field("durable_commit_s", dur_commit.Median())
      .Field("training_passes_per_s", train_alone.Median())
      .Field("training_during_memory_save_x", train_memory.Median())
      .Field("training_during_durable_save_x", train_durable.Median())
      .EndObject();
  WriteTextFile(json_path, j.str());
  return 0;
}

}  // namespace ckpt::bench

int main(int argc, char** argv) { return ckpt::bench::Main(argc, argv); }

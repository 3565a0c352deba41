// Cooperative restores (docs/performance.md "Cooperative restores"): a
// dp=4 x tp=2 job restoring a checkpoint that every data-parallel replica
// needs whole, through Checkpointer::Load, cooperatively and with every
// rank reading its own, against one replica (dp=1 x tp=2) reading alone.
//
//   restore_fanout_bench --dir DIR [--size 1G] [--read-bandwidth 125M] [--runs 1] [--json]
//
// A stand-in for separate hosts: the ranks are threads of this process, each
// with its own peer memory and server (every byte passed between ranks
// crosses loopback TCP, as iperf3's do in the same run), in 4 failure
// domains of 2 ranks; the storage is DIR behind one simulated link of
// --read-bandwidth bytes per second (faulty:// fault.read_bandwidth) that
// every rank's reads share, as a storage server's network is shared.
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "ckpt/checkpointer.h"
#include "ckpt/communicator.h"
#include "ckpt/peer.h"
#include "common/cli.h"
#include "common/synth_job.h"
#include "restore_fanout.h"
#include "util/clock.h"
#include "util/errors.h"
#include "util/json.h"
#include "util/strings.h"

namespace ckpt::bench {
using tools::HumanBytes;
namespace {

const std::string kToken = "restore-fanout-bench-token-0123456789";

struct LoadFigures {
  double seconds = 0;
  int64_t from_storage = 0, from_peers = 0, failovers = 0, mismatches = 0;
  bool cooperative = false;
};

// Every rank of `mesh` loads step 1 of `root` behind a fresh link of
// `bandwidth` bytes/s; ranks 2k and 2k+1 share a host.
absl::StatusOr<LoadFigures> Restore(const std::string& root, int64_t bandwidth, const std::vector<TensorLayout>& model,
                                    const Mesh& mesh, bool cooperative) {
  const int n = static_cast<int>(mesh.NumRanks());
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<Storage> storage,
                        OpenStorage(StrCat("faulty://", root, "?fault.read_bandwidth=", bandwidth)));
  auto comms = CreateLocalCommunicators(n);
  std::vector<RankState> states(static_cast<size_t>(n));
  std::vector<LoadStats> stats(static_cast<size_t>(n));
  std::atomic<double> started{0};
  LoadFigures f;
  const double t0 = NowSeconds();
  CKPT_RETURN_IF_ERROR(OnRanks(n, [&](int r) -> absl::Status {
    PeerMemoryOptions mo;
    mo.token = kToken;
    mo.domain = StrCat("host-", r / 2);
    mo.budget_bytes = int64_t{8} << 30;
    CKPT_ASSIGN_OR_RETURN(std::shared_ptr<PeerMemory> memory, PeerMemory::Start(mo));
    CKPT_ASSIGN_OR_RETURN(std::shared_ptr<LoadExchange> exchange, OpenLoadExchange(memory, *comms[r], 60));
    CheckpointerOptions o;
    o.storage = storage;
    o.rank = r;
    o.world_size = n;
    o.communicator = comms[r];
    o.load_exchange = exchange;
    o.gc_on_open = false;
    o.collective_timeout_s = 600;
    o.engine_options.staging_bytes = 1;
    CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Checkpointer> cp, Checkpointer::Open(o));
    RankState& rs = states[static_cast<size_t>(r)];
    CKPT_RETURN_IF_ERROR(Build(model, mesh, r, false, &rs));
    LoadOptions lo;
    lo.cooperative = cooperative;
    CKPT_RETURN_IF_ERROR(comms[r]->Barrier(60));  // every rank set up: the clock starts
    if (r == 0) started = NowSeconds();
    CKPT_ASSIGN_OR_RETURN(stats[static_cast<size_t>(r)], cp->Load(rs.state, 1, lo));
    return absl::OkStatus();
  }));
  f.seconds = NowSeconds() - (started > 0 ? started.load() : t0);
  for (int r = 0; r < n; ++r) {
    const LoadStats& s = stats[static_cast<size_t>(r)];
    f.from_storage += s.bytes_from_storage;
    f.from_peers += s.bytes_from_peers;
    f.failovers += s.peer_failovers;
    f.cooperative = f.cooperative || s.cooperative;
    f.mismatches += Mismatches(states[static_cast<size_t>(r)]);
  }
  return f;
}

int Main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--as-rank") return RankMain(argc, argv);
  std::string dir, storage_rate = "1gbit", host_rate = "4gbit";
  int64_t size = int64_t{1} << 30, bw = 125000000, runs = 1;
  bool json = false, cluster = false;
  tools::Args args("restore_fanout_bench", "--dir DIR [--size 1G] [--read-bandwidth 125M] [--runs 1] [--json]",
                   "A dp=4 x tp=2 job's cooperative restore against every rank reading its own and against one\n"
                   "replica reading alone, behind one simulated storage link (ranks are threads with their own\n"
                   "peer memories on loopback TCP).");
  args.String("dir", &dir, "scratch directory (the checkpoint is written there)");
  args.Size("size", &size, "checkpoint size (f32 tensors split over tp; default 1G)", true);
  args.Size("read-bandwidth", &bw, "the storage link's bytes per second (default 125M: 1 Gbit/s)", false);
  args.Int("runs", &runs, "runs of each restore (medians)");
  args.Switch("json", &json, "print a JSON object");
  args.Switch("cluster", &cluster,
              "hosts as network namespaces instead: 4 hosts of 2 rank processes joined through a coordinator,\n"
              "the checkpoint on an S3 gateway on a fifth host (root; --runs and --read-bandwidth do not apply)");
  args.String("storage-rate", &storage_rate, "with --cluster: the storage host's link (tc tbf; default 1gbit)");
  args.String("host-rate", &host_rate, "with --cluster: each rank host's link (default 4gbit)");
  int code = 0;
  if (!ParseBenchArgs(args, argc, argv, dir, &code)) return code;
  if (cluster) {
    ClusterRun run;
    run.dir = dir;
    run.self = std::filesystem::read_symlink("/proc/self/exe").string();
    run.size = size;
    run.storage_rate = storage_rate;
    run.host_rate = host_rate;
    run.json = json;
    return ClusterMain(run);
  }
  if (size <= 0 || bw <= 0 || runs < 1) {
    std::fprintf(stderr, "restore_fanout_bench: bad --size, --read-bandwidth or --runs\n");
    return 2;
  }
  const std::string root = dir + "/fanout-root";
  std::filesystem::remove_all(root);
  const std::vector<TensorLayout> model = Model(size);
  const Mesh one = *Mesh::Parse("dp=1,tp=2"), four = *Mesh::Parse("dp=4,tp=2");

  // One replica saves the checkpoint.
  if (absl::Status saved = SaveOneReplica(root, model, one); !saved.ok()) {
    std::fprintf(stderr, "restore_fanout_bench: save: %s\n", std::string(saved.message()).c_str());
    return 1;
  }
  int64_t stored = 0;
  for (const auto& e : std::filesystem::directory_iterator(root + "/step-0000000001")) {
    if (e.path().filename().string().rfind("rank-", 0) == 0) stored += static_cast<int64_t>(e.file_size());
  }

  Samples coop, every, single, single_plain;
  LoadFigures last_coop, last_every;
  int64_t mismatches = 0, failovers = 0;
  bool all_coop = true;
  for (int64_t run = 0; run < runs; ++run) {
    struct Case {
      const Mesh* mesh;
      bool cooperative;
      Samples* into;
      LoadFigures* keep;
    };
    for (const Case& c : {Case{&one, true, &single, nullptr}, Case{&four, true, &coop, &last_coop},
                          Case{&four, false, &every, &last_every}, Case{&one, false, &single_plain, nullptr}}) {
      auto f = Restore(root, bw, model, *c.mesh, c.cooperative);
      if (!f.ok()) {
        std::fprintf(stderr, "restore_fanout_bench: restore onto %s: %s\n", c.mesh->ToString().c_str(),
                     std::string(f.status().message()).c_str());
        return 1;
      }
      c.into->Add(f->seconds);
      if (c.keep != nullptr) *c.keep = *f;
      mismatches += f->mismatches;
      failovers += f->failovers;
      if (c.mesh == &four && c.cooperative) all_coop = all_coop && f->cooperative;
      if (!json) {
        std::fprintf(stderr, "  %s %s: %.2f s, %s from storage, %s from peers\n", c.mesh->ToString().c_str(),
                     c.cooperative ? "cooperative" : "every rank alone", f->seconds,
                     HumanBytes(static_cast<double>(f->from_storage)).c_str(),
                     HumanBytes(static_cast<double>(f->from_peers)).c_str());
      }
    }
  }
  const double iperf = IperfLoopback(dir);
  std::filesystem::remove_all(root);
  const double ratio = static_cast<double>(last_coop.from_storage) / static_cast<double>(stored);
  const double every_ratio = static_cast<double>(last_every.from_storage) / static_cast<double>(stored);
  JsonWriter w;
  w.BeginObject()
      .Field("stand_in",
             "loopback: ranks are threads of one process with their own peer memories; one simulated "
             "storage link (faulty:// fault.read_bandwidth) shared by every rank")
      .Field("mesh", four.ToString())
      .Field("hosts", 4)
      .Field("checkpoint_bytes", stored)
      .Field("read_bandwidth_bytes_per_s", bw)
      .Field("runs", runs)
      .Field("seconds", coop.Median())
      .Field("single_replica_seconds", single.Median())
      .Field("time_ratio", coop.Median() / single.Median())
      .Field("storage_bytes_ratio", ratio)
      .Field("every_rank_seconds", every.Median())
      .Field("every_rank_storage_bytes_ratio", every_ratio)
      .Field("dp1_cooperative_seconds", single.Median())
      .Field("dp1_plain_seconds", single_plain.Median())
      .Field("dp1_ratio", single.Median() / single_plain.Median())
      .Field("peer_bytes_per_s", static_cast<double>(last_coop.from_peers) / last_coop.seconds)
      .Field("iperf3_bytes_per_s", iperf)
      .Field("cooperative", all_coop)
      .Field("failovers", failovers)
      .Field("mismatches", mismatches)
      .EndObject();
  if (json) {
    std::printf("%s\n", w.str().c_str());
  } else {
    std::printf(
        "%s checkpoint, storage link %s/s, dp=4 x tp=2 over 4 hosts (threads on loopback)\n"
        "  cooperative: %.2f s, %.3fx the checkpoint from storage\n"
        "  every rank alone: %.2f s, %.3fx\n"
        "  one replica alone: %.2f s (cooperative / one replica: %.2f)\n"
        "  dp=1 with cooperation on: %.2f s, off: %.2f s\n"
        "  iperf3 loopback: %s/s; mismatches %lld\n",
        HumanBytes(static_cast<double>(stored)).c_str(), HumanBytes(static_cast<double>(bw)).c_str(), coop.Median(),
        ratio, every.Median(), every_ratio, single.Median(), coop.Median() / single.Median(), single.Median(),
        single_plain.Median(), HumanBytes(iperf).c_str(), static_cast<long long>(mismatches));
  }
  return mismatches == 0 && all_coop ? 0 : 1;
}

}  // namespace
}  // namespace ckpt::bench

int main(int argc, char** argv) { return ckpt::bench::Main(argc, argv); }

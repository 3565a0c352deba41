// benchmarks/restore_fanout --cluster: the cooperative restore across hosts
// that are separate network stacks (network namespaces on a bridge,
// scripts/cluster.sh). Hosts 0-3 run the ranks, two each, as processes
// joined through a `ckpt coordinator` on host 0; host 4 runs the S3 server
// (Ceph's RADOS Gateway) behind a link limited with tc tbf, the hosts'
// links limited to a faster rate. iperf3 measures both links in the same
// run. The checkpoint is uploaded once from this machine, through the
// storage host's link.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "bench_util.h"
#include "ckpt/checkpointer.h"
#include "ckpt/coordinator.h"
#include "ckpt/peer.h"
#include "common/synth_job.h"
#include "restore_fanout.h"
#include "support/netns_cluster.h"
#include "util/clock.h"
#include "util/json.h"

#if !defined(CKPT_BIN) || !defined(CKPT_S3_SERVER_SH)
#error "CKPT_BIN and CKPT_S3_SERVER_SH must be defined"
#endif

namespace ckpt::bench {
namespace {

using testing::CommandResult;
using testing::NetnsCluster;
using testing::RunCommand;

const char* const kToken = "restore-fanout-cluster-token-0123456789";
const std::vector<std::string> kCreds = {"AWS_ACCESS_KEY_ID=testkey", "AWS_SECRET_ACCESS_KEY=testsecret",
                                         "AWS_DEFAULT_REGION=us-east-1"};

int64_t UnixMicros() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000000 + ts.tv_nsec / 1000;
}

// What one restore measured: from the first rank's start to the last one's
// end, the ranks' sums.
struct Restore {
  double seconds = 0;
  int64_t from_storage = 0, from_peers = 0, failovers = 0, mismatches = 0;
  int cooperative = 0, ranks = 0;
};

// `ranks` rank processes, `per_host` on each of hosts 0.., joined through a
// coordinator of their own on host 0, restore step 1 of `root` onto `mesh`.
absl::StatusOr<Restore> RestoreOn(NetnsCluster& c, const ClusterRun& run, const std::string& name,
                                  const std::string& root, const Mesh& mesh, int per_host, bool cooperative) {
  const int n = static_cast<int>(mesh.NumRanks());
  const std::string dir = StrCat(run.dir, "/", name);
  std::filesystem::remove_all(dir);  // an earlier run's port file and reports
  mkdir(dir.c_str(), 0700);
  {
    std::ofstream(dir + "/token") << kToken;
    chmod((dir + "/token").c_str(), 0600);
  }
  const std::string port_file = dir + "/coordinator.port";
  const pid_t coord = testing::Spawn(
      c.On(0, {CKPT_BIN, "coordinator", "--listen", c.Addr(0) + ":0", "--port-file", port_file, "--state-dir",
               dir + "/state", "--token-file", dir + "/token", "--min-nodes", std::to_string(n), "--max-nodes",
               std::to_string(n), "--heartbeat", "500ms", "--dead-after", "20"}),
      dir + "/coordinator.log");
  int port = 0;
  for (int i = 0; i < 600 && port == 0; ++i) {
    std::ifstream f(port_file);
    if (!(f >> port)) port = 0;
    if (port == 0) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  if (port == 0) {
    kill(coord, SIGKILL);
    testing::WaitExit(coord);
    return absl::UnavailableError("the coordinator did not start: " + testing::ReadFile(dir + "/coordinator.log"));
  }
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    const int host = i / per_host;
    pids.push_back(testing::Spawn(
        c.On(host, {"timeout", "900", run.self, "--as-rank", StrCat(c.Addr(0), ":", port), std::string(kToken), root,
                    StrCat(dir, "/rank-", i, ".out"), c.Addr(host), StrCat("host-", host), mesh.ToString(),
                    std::to_string(run.size), std::string(cooperative ? "1" : "0")}),
        StrCat(dir, "/rank-", i, ".log"), 0, kCreds));
  }
  int failed = 0;
  for (pid_t p : pids) failed += testing::WaitExit(p) != 0 ? 1 : 0;
  kill(coord, SIGTERM);
  testing::WaitExit(coord);
  Restore r;
  int64_t first = INT64_MAX, last = 0;
  for (int i = 0; i < n; ++i) {
    const std::string out = testing::ReadFile(StrCat(dir, "/rank-", i, ".out"));
    long long t0, t1, st, peers, fo, bad;
    int coop;
    if (std::sscanf(out.c_str(), "%lld %lld %lld %lld %lld %lld %d", &t0, &t1, &st, &peers, &fo, &bad, &coop) != 7) {
      return absl::InternalError(StrCat("rank process ", i, " of '", name,
                                        "' reported nothing: ", testing::ReadFile(StrCat(dir, "/rank-", i, ".log"))));
    }
    first = std::min<int64_t>(first, t0);
    last = std::max<int64_t>(last, t1);
    r.from_storage += st;
    r.from_peers += peers;
    r.failovers += fo;
    r.mismatches += bad;
    r.cooperative += coop;
    ++r.ranks;
  }
  if (failed > 0) return absl::InternalError(StrCat(failed, " rank processes of '", name, "' failed"));
  r.seconds = static_cast<double>(last - first) / 1e6;
  return r;
}

absl::Status RankRun(int argc, char** argv) {
  if (argc != 11) return absl::InvalidArgumentError("--as-rank COORDINATOR TOKEN ROOT OUT ADDR DOMAIN MESH SIZE COOP");
  const std::string out = argv[5], addr = argv[6], domain = argv[7];
  CKPT_ASSIGN_OR_RETURN(Mesh mesh, Mesh::Parse(argv[8]));
  const int64_t size = std::atoll(argv[9]);
  CoordinatorClientOptions co;
  co.address = argv[2];
  co.token = argv[3];
  co.host = StrCat(domain, "-", getpid());
  co.heartbeat_s = 0.5;
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorClient> client, CoordinatorClient::Connect(co));
  CKPT_ASSIGN_OR_RETURN(Assignment a, client->Join(300));
  if (a.world_size != mesh.NumRanks()) return absl::InternalError("the job's size is not the mesh's");
  const int rank = a.first_rank;
  PeerMemoryOptions mo;
  mo.listen = addr + ":0";
  mo.token = argv[3];
  mo.domain = domain;
  mo.budget_bytes = int64_t{8} << 30;
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<PeerMemory> memory, PeerMemory::Start(mo));
  std::shared_ptr<Communicator> comm = client->communicator(0);
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<LoadExchange> exchange, OpenLoadExchange(memory, *comm, 300));
  CheckpointerOptions o;
  CKPT_ASSIGN_OR_RETURN(o.storage, OpenStorage(argv[4]));
  o.rank = rank;
  o.world_size = a.world_size;
  o.communicator = comm;
  o.load_exchange = exchange;
  o.gc_on_open = false;
  o.collective_timeout_s = 600;
  o.engine_options.staging_bytes = 1;
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Checkpointer> cp, Checkpointer::Open(o));
  RankState rs;
  CKPT_RETURN_IF_ERROR(Build(Model(size), mesh, rank, false, &rs));
  LoadOptions lo;
  lo.cooperative = std::string(argv[10]) == "1";
  CKPT_RETURN_IF_ERROR(comm->Barrier(300));  // every rank ready: the clock starts
  const int64_t t0 = UnixMicros();
  CKPT_ASSIGN_OR_RETURN(LoadStats stats, cp->Load(rs.state, 1, lo));
  const int64_t t1 = UnixMicros();
  std::ofstream f(out);
  f << t0 << " " << t1 << " " << stats.bytes_from_storage << " " << stats.bytes_from_peers << " "
    << stats.peer_failovers << " " << Mismatches(rs) << " " << (stats.cooperative ? 1 : 0) << "\n";
  return f.good() ? absl::OkStatus() : absl::DataLossError("could not write " + out);
}

}  // namespace

int RankMain(int argc, char** argv) {
  absl::Status s = RankRun(argc, argv);
  if (!s.ok()) {
    std::fprintf(stderr, "restore_fanout_bench --as-rank: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}

int ClusterMain(const ClusterRun& run) {
  auto fail = [](const std::string& what, const absl::Status& s) {
    std::fprintf(stderr, "restore_fanout_bench --cluster: %s: %s\n", what.c_str(), std::string(s.message()).c_str());
    return 1;
  };
  if (geteuid() != 0) return fail("network namespaces", absl::PermissionDeniedError("need root"));
  auto cluster = NetnsCluster::Up(5);
  if (!cluster.ok()) return fail("the cluster", cluster.status());
  NetnsCluster& c = **cluster;
  const std::string storage_addr = c.Addr(4), s3_dir = run.dir + "/s3";
  CommandResult up = RunCommand(
      c.Shell(4, StrCat("CEPH_S3_DIR=", s3_dir, " BIND_ADDR=", storage_addr,
                        " MON_PORT=6789 RGW_PORT=7480 STORE=memstore STORE_BYTES=", 2 * run.size + (int64_t{1} << 30),
                        " ", CKPT_S3_SERVER_SH, " start")) +
      " 2>&1");
  struct StopGateway {
    std::string dir;
    ~StopGateway() { (void)RunCommand(StrCat("CEPH_S3_DIR=", dir, " ", CKPT_S3_SERVER_SH, " stop 2>&1")); }
  } stop_gateway{s3_dir};
  if (up.code != 0) return fail("the S3 gateway", absl::UnavailableError(up.out));
  for (const std::string& kv : kCreds) putenv(const_cast<char*>(kv.c_str()));
  const std::string endpoint = StrCat("http://", storage_addr, ":7480");
  CommandResult mb = RunCommand(StrCat("/usr/bin/aws --endpoint-url ", endpoint, " s3 mb s3://ckpt-bench 2>&1"));
  if (mb.code != 0) return fail("the bucket", absl::UnavailableError(mb.out));
  const std::string root = StrCat("s3://ckpt-bench/fanout?endpoint=", endpoint);

  // The links, and their ceilings by iperf3.
  absl::Status limited = c.Limit(4, run.storage_rate);
  for (int h = 0; h < 4 && limited.ok(); ++h) limited = c.Limit(h, run.host_rate);
  if (!limited.ok()) return fail("tc", limited);
  auto iperf_to = [&](int server_host, int client_host) {
    const pid_t server = testing::Spawn(c.On(server_host, {"iperf3", "-s", "-B", c.Addr(server_host), "-p", "5201"}),
                                        run.dir + "/iperf.log");
    const double bps = c.IperfOnceUp(client_host, c.Addr(server_host), 5, 3);
    kill(server, SIGKILL);
    testing::WaitExit(server);
    return bps / 8;
  };
  const double storage_link = iperf_to(4, 0), host_link = iperf_to(1, 0);

  // One replica saves the checkpoint (from this machine, through the
  // storage host's link).
  const std::vector<TensorLayout> model = Model(run.size);
  const Mesh one = *Mesh::Parse("dp=1,tp=2"), four = *Mesh::Parse("dp=4,tp=2");
  if (absl::Status saved = SaveOneReplica(root, model, one); !saved.ok()) return fail("the save", saved);
  auto stored = OpenStorage(root);
  if (!stored.ok()) return fail("the root", stored.status());
  int64_t checkpoint = 0;
  if (auto entries = (*stored)->List("step-0000000001"); entries.ok()) {
    for (const DirEntry& e : *entries) {
      if (e.name.rfind("rank-", 0) != 0) continue;
      if (auto f = (*stored)->OpenReadable("step-0000000001/" + e.name); f.ok()) {
        checkpoint += static_cast<int64_t>((*f)->size());
      }
    }
  }

  auto single = RestoreOn(c, run, "single", root, one, 2, true);
  if (!single.ok()) return fail("one replica", single.status());
  auto coop = RestoreOn(c, run, "cooperative", root, four, 2, true);
  if (!coop.ok()) return fail("the cooperative restore", coop.status());
  auto every = RestoreOn(c, run, "every-rank", root, four, 2, false);
  if (!every.ok()) return fail("every rank alone", every.status());
  auto plain = RestoreOn(c, run, "single-plain", root, one, 2, false);
  if (!plain.ok()) return fail("one replica, cooperation off", plain.status());

  const double ratio = static_cast<double>(coop->from_storage) / static_cast<double>(checkpoint);
  const double every_ratio = static_cast<double>(every->from_storage) / static_cast<double>(checkpoint);
  const int64_t mismatches = single->mismatches + coop->mismatches + every->mismatches + plain->mismatches;
  JsonWriter w;
  w.BeginObject()
      .Field("hosts", "4 hosts of 2 rank processes and a storage host (RADOS Gateway), network namespaces on a bridge")
      .Field("mesh", four.ToString())
      .Field("checkpoint_bytes", checkpoint)
      .Field("storage_link", run.storage_rate)
      .Field("host_link", run.host_rate)
      .Field("iperf3_storage_bytes_per_s", storage_link)
      .Field("iperf3_bytes_per_s", host_link)
      .Field("seconds", coop->seconds)
      .Field("single_replica_seconds", single->seconds)
      .Field("time_ratio", coop->seconds / single->seconds)
      .Field("storage_bytes_ratio", ratio)
      .Field("every_rank_seconds", every->seconds)
      .Field("every_rank_storage_bytes_ratio", every_ratio)
      .Field("dp1_plain_seconds", plain->seconds)
      .Field("dp1_ratio", single->seconds / plain->seconds)
      .Field("cooperative", coop->cooperative == coop->ranks)
      .Field("failovers", coop->failovers)
      .Field("mismatches", mismatches)
      .EndObject();
  if (run.json) {
    std::printf("%s\n", w.str().c_str());
  } else {
    using tools::HumanBytes;
    std::printf(
        "%s checkpoint on an S3 gateway behind %s (iperf3 %s/s), dp=4 x tp=2 on 4 hosts linked at %s (iperf3 %s/s)\n"
        "  cooperative: %.2f s, %.3fx the checkpoint from storage\n"
        "  every rank alone: %.2f s, %.3fx\n"
        "  one replica alone: %.2f s (cooperative / one replica: %.2f); with cooperation off: %.2f s\n"
        "  mismatches %lld, failovers %lld\n",
        HumanBytes(static_cast<double>(checkpoint)).c_str(), run.storage_rate.c_str(), HumanBytes(storage_link).c_str(),
        run.host_rate.c_str(), HumanBytes(host_link).c_str(), coop->seconds, ratio, every->seconds, every_ratio,
        single->seconds, coop->seconds / single->seconds, plain->seconds, static_cast<long long>(mismatches),
        static_cast<long long>(coop->failovers));
  }
  return mismatches == 0 && coop->cooperative == coop->ranks ? 0 : 1;
}

}  // namespace ckpt::bench

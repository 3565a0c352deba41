// The coordinator's two targets, on loopback:
//  - commit of a save across N simulated ranks: time from the last rank's
//    vote until the leader holds the decision, and until every rank has the
//    outcome after the leader published;
//  - detection of a dead member: time from its last heartbeat until another
//    member receives the stop, against the bound heartbeat x (dead-after + 1).
//
//  - with --etcd, the commit again with the state in etcd, and with
//    --failovers N, the time from a SIGKILLed leader replica to the
//    standby serving and to the job's next committed step.
//
//   build/benchmarks/coordinator_bench --ranks 4096 --runs 5 --etcd --failovers 5
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "ckpt/checkpointer.h"
#include "ckpt/coordinator.h"
#include "ckpt/storage.h"
#include "common/cli.h"
#include "net/http_client.h"
#include "support/free_ports.h"
#include "support/sim_member.h"
#include "util/clock.h"
#include "util/json.h"
#include "util/strings.h"

namespace ckpt::bench {
namespace {
using ckpt::testing::FreePort;

constexpr char kToken[] = "bench-token-0123456789";

void KillAndReap(pid_t pid);

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

struct CommitFigures {
  double join_s = 0;
  Samples decide, outcome;
};

// `ranks` simulated members join a coordinator started with `o`, then
// `runs` saves are committed: every rank but one votes, then the last vote
// is timed until the leader holds the decision and until every rank has
// the outcome (after the leader published).
// The coordinator in a child process of its own, so that its sockets and
// the members' each count against one process's descriptor limit. Returns
// its port (0: it did not start); `*pid` is the child to kill afterwards.
int ForkCoordinator(const CoordinatorOptions& o, pid_t* pid) {
  int fds[2];
  if (pipe(fds) != 0) return 0;
  *pid = fork();
  if (*pid == 0) {
    close(fds[0]);
    auto c = Coordinator::Start(o);
    const int port = c.ok() ? (*c)->port() : 0;
    if (!c.ok()) std::fprintf(stderr, "coordinator_bench: %s\n", std::string(c.status().message()).c_str());
    (void)!write(fds[1], &port, sizeof(port));
    close(fds[1]);
    if (c.ok()) pause();  // until killed
    _exit(c.ok() ? 0 : 1);
  }
  close(fds[1]);
  int port = 0;
  if (*pid < 0 || read(fds[0], &port, sizeof(port)) != sizeof(port)) port = 0;
  close(fds[0]);
  return port;
}

bool MeasureCommits(const CoordinatorOptions& o, int64_t ranks, int64_t runs, bool fork_coordinator, CommitFigures* f) {
  std::unique_ptr<Coordinator> in_process;
  pid_t child = -1;
  int port = 0;
  if (fork_coordinator) {
    port = ForkCoordinator(o, &child);
  } else {
    auto coord = Coordinator::Start(o);
    if (!coord.ok()) {
      std::fprintf(stderr, "coordinator_bench: %s\n", std::string(coord.status().message()).c_str());
      return false;
    }
    in_process = std::move(coord).value();
    port = in_process->port();
  }
  struct Reap {
    pid_t pid;
    ~Reap() { KillAndReap(pid); }
  } reap{child};
  if (port == 0) return false;
  std::vector<std::unique_ptr<coord::SimMember>> m(static_cast<size_t>(ranks));
  const double t_join = NowSeconds();
  for (int64_t i = 0; i < ranks; ++i) {
    m[i] = std::make_unique<coord::SimMember>();
    // From 64 loopback addresses, as members come from many hosts.
    if (!m[i]->Connect(port, static_cast<uint32_t>(1 + i % 64)) || !m[i]->SendJoin(kToken, StrCat("sim-", i))) {
      return false;
    }
  }
  for (auto& s : m) {
    if (!s->ReadAssign()) return false;
  }
  f->join_s = NowSeconds() - t_join;
  coord::SimMember* leader = nullptr;
  for (auto& s : m) {
    if (s->rank() == 0) leader = s.get();
  }
  for (int64_t run = 0; run < runs; ++run) {
    const int64_t step = run + 1;
    // Everyone but one votes and waits for the outcome; the leader waits
    // for the decision.
    if (!leader->SendDecide(step)) return false;
    coord::SimMember* last = m.back().get();
    for (auto& s : m) {
      if (s.get() == last) continue;
      if (!s->SendVote(step) || !s->SendAwaitOutcome(step)) return false;
    }
    for (auto& s : m) {
      if (s.get() == last) continue;
      auto ack = s->Read();
      if (!ack || ack->first != coord::MsgType::kAck) return false;
    }
    const double t0 = NowSeconds();
    if (!last->SendVote(step)) return false;
    auto d = leader->Read();
    while (d && d->first != coord::MsgType::kDecision) d = leader->Read();
    if (!d || d->second.empty() || d->second[0] != 1) return false;
    f->decide.Add(NowSeconds() - t0);
    if (!leader->SendPublished(step)) return false;
    for (auto& s : m) {
      if (s.get() == last) continue;
      auto r = s->Read();
      while (r && r->first != coord::MsgType::kOutcome) r = s->Read();
      if (!r) return false;
    }
    f->outcome.Add(NowSeconds() - t0);
    auto ack = last->Read();
    if (!ack) return false;
  }
  return true;
}

pid_t Spawn(const std::vector<std::string>& args, const std::string& out) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

void KillAndReap(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

// A one-member etcd on free loopback ports, its data under `dir`.
struct Etcd {
  pid_t pid = -1;
  int port = 0;
  bool Start(const std::string& dir) {
    port = FreePort();
    const std::string client = StrCat("http://127.0.0.1:", port), peer = StrCat("http://127.0.0.1:", FreePort());
    pid = Spawn({"/usr/bin/etcd", "--name", "bench", "--data-dir", dir + "/etcd", "--listen-client-urls", client,
                 "--advertise-client-urls", client, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", StrCat("bench=", peer), "--log-level", "error"},
                dir + "/etcd.log");
    HttpClient http;
    for (int i = 0; i < 300; ++i) {
      HttpRequest req;
      req.url = client + "/health";
      req.timeout_s = 1;
      auto r = http.Perform(req);
      if (r.ok() && r->status == 200 && r->body.find("true") != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  ~Etcd() { KillAndReap(pid); }
};

int ReadPortFile(const std::string& file) {
  std::ifstream f(file);
  int port = 0;
  return f >> port ? port : 0;
}

int64_t Latest(Storage& storage) {
  auto l = LatestCommittedStep(storage);
  return l.ok() ? *l : -1;
}

struct FailoverFigures {
  Samples serving, next_step;
};

// Two `ckpt coordinator` replicas on one etcd prefix and three `ckpt worker`
// processes saving every 5 steps of 30 ms; the leader is SIGKILLed `kills`
// times (each time back as the standby). Timed from the kill: until the
// standby serves (its port file appears), and until the job's next step is
// committed in storage after that.
bool MeasureFailover(const std::string& ckpt, const std::string& dir, const std::string& store, int64_t kills,
                     double lease, FailoverFigures* f) {
  WriteTextFile(dir + "/token", kToken);
  chmod((dir + "/token").c_str(), 0600);
  const int ports[2] = {FreePort(), FreePort()};
  pid_t replica[2] = {-1, -1};
  auto start = [&](int r) {
    const std::string port_file = StrCat(dir, "/replica", r, ".port");
    std::remove(port_file.c_str());
    replica[r] = Spawn({ckpt,
                        "coordinator",
                        "--listen",
                        StrCat("127.0.0.1:", ports[r]),
                        "--port-file",
                        port_file,
                        "--store",
                        store,
                        "--token-file",
                        dir + "/token",
                        "--min-nodes",
                        "3",
                        "--max-nodes",
                        "3",
                        "--heartbeat",
                        "200ms",
                        "--dead-after",
                        "3",
                        "--join-timeout",
                        "500ms",
                        "--root",
                        dir + "/root"},
                       StrCat(dir, "/replica", r, ".log"));
  };
  auto wait_port = [&](int r, double seconds) {
    const double until = NowSeconds() + seconds;
    while (NowSeconds() < until) {
      if (ReadPortFile(StrCat(dir, "/replica", r, ".port")) == ports[r]) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  };
  start(0);
  if (!wait_port(0, 20)) return false;
  start(1);
  std::vector<pid_t> workers;
  const std::string connect = StrCat("127.0.0.1:", ports[0], ",127.0.0.1:", ports[1]);
  for (int i = 0; i < 3; ++i) {
    workers.push_back(Spawn({ckpt, "worker", "--connect", connect, "--token-file", dir + "/token", "--root",
                             dir + "/root", "--steps", "1000000", "--save-every", "5", "--step-ms", "30"},
                            StrCat(dir, "/worker", i, ".out")));
  }
  auto storage = OpenStorage(dir + "/root");
  bool ok = storage.ok();
  // Until the first commit.
  for (int i = 0; ok && i < 600 && Latest(**storage) < 10; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  int leader = 0;
  for (int64_t k = 0; ok && k < kills; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(300 + 200 * (k % 3))));
    const double t0 = NowSeconds();
    KillAndReap(replica[leader]);
    const int next = 1 - leader;
    if (!wait_port(next, 10 * lease + 10)) {
      ok = false;
      break;
    }
    f->serving.Add(NowSeconds() - t0);
    const int64_t before = Latest(**storage);
    while (Latest(**storage) <= before && NowSeconds() - t0 < 60) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (Latest(**storage) <= before) {
      ok = false;
      break;
    }
    f->next_step.Add(NowSeconds() - t0);
    start(leader);  // back as the standby
    leader = next;
  }
  for (pid_t w : workers) KillAndReap(w);
  KillAndReap(replica[0]);
  KillAndReap(replica[1]);
  if (!ok) std::fprintf(stderr, "coordinator_bench: the failover run failed; logs in %s\n", dir.c_str());
  return ok;
}

std::string Ms(const Samples& s) {
  return s.v.empty()
             ? std::string("-")
             : StrCat(Fixed(s.Median() * 1e3, 1), " ms (", Fixed(s.Min() * 1e3, 1), "..", Fixed(s.Max() * 1e3, 1), ")");
}

// Detection: two members, one falls silent; the seconds until the other is
// told (-1: never, within ten times the bound; kDetectionFailed: the run
// itself failed).
constexpr double kDetectionFailed = -2;

double MeasureDetection(const CoordinatorOptions& o, const std::string& state_dir, double heartbeat,
                        int64_t dead_after) {
  CoordinatorOptions d = o;
  d.state_dir = state_dir;
  d.min_nodes = d.max_nodes = 2;
  d.heartbeat_s = heartbeat;
  d.dead_after = static_cast<int>(dead_after);
  auto dc = Coordinator::Start(d);
  if (!dc.ok()) return kDetectionFailed;
  coord::SimMember a, b;
  if (!a.Connect((*dc)->port()) || !b.Connect((*dc)->port()) || !a.SendJoin(kToken, "a") || !b.SendJoin(kToken, "b") ||
      !a.ReadAssign() || !b.ReadAssign()) {
    return kDetectionFailed;
  }
  if (!a.Heartbeat()) return kDetectionFailed;
  const double silent_since = NowSeconds();  // `a` sends nothing more
  while (NowSeconds() - silent_since < 10 * heartbeat * static_cast<double>(dead_after + 1)) {
    if (!b.SendHeartbeat()) return kDetectionFailed;
    auto f = b.Read();
    if (!f) return kDetectionFailed;
    if (f->first == coord::MsgType::kStop) return NowSeconds() - silent_since;
    if (f->first == coord::MsgType::kHeartbeatAck && f->second.size() > 1 && f->second[1] == 1) {
      return NowSeconds() - silent_since;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(heartbeat / 4));
  }
  return -1;
}

int Main(int argc, char** argv) {
  std::string dir = "/tmp/ckpt-coordinator-bench", json_path, store, ckpt;
  int64_t ranks = 4096, runs = 5, failovers = 0;
  double heartbeat = 0.2, lease = 2;
  int64_t dead_after = 3;
  bool etcd = false;
  tools::Args args("coordinator_bench",
                   "[--ranks 4096] [--runs 5] [--etcd | --store etcd://...] [--failovers N] [--json FILE]",
                   "Commit latency across simulated ranks with the state in a journal and (with\n"
                   "--etcd or --store) in etcd; dead-member detection time; with --failovers, the\n"
                   "time from a SIGKILLed leader replica to the standby serving and to the job's\n"
                   "next committed step (ckpt coordinator and ckpt worker processes).");
  args.Program("");
  args.String("dir", &dir, "state directory (default /tmp/ckpt-coordinator-bench)");
  args.Int("ranks", &ranks, "simulated ranks, one connection each (default 4096)");
  args.Int("runs", &runs, "commits measured; the median is reported (default 5)");
  args.Double("heartbeat", &heartbeat, "heartbeat interval in s for detection (default 0.2)");
  args.Int("dead-after", &dead_after, "missed heartbeats before death (default 3)");
  args.Switch("etcd", &etcd, "also measure with the state in etcd: starts /usr/bin/etcd on loopback");
  args.String("store", &store, "also measure with the state in this etcd://HOST:PORT/PREFIX");
  args.Int("failovers", &failovers, "leader kills to time (needs etcd; default 0)");
  args.Double("lease", &lease, "the replicas' lease in s for --failovers (default 2)");
  args.String("ckpt", &ckpt, "the ckpt binary for --failovers (default: BUILD/tools/ckpt)");
  args.String("json", &json_path, "also write the figures as JSON to this file");
  int exit = 0;
  if (!args.Parse(argc, argv, 1, &exit)) return exit;
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = lim.rlim_max;
  setrlimit(RLIMIT_NOFILE, &lim);
  // Members and coordinator in one process need two descriptors a rank;
  // past the limit the coordinator runs in a child process (one each).
  const bool fork_coordinator = lim.rlim_cur < static_cast<rlim_t>(2 * ranks + 64);
  if (lim.rlim_cur < static_cast<rlim_t>(ranks + 64)) {
    std::fprintf(stderr, "coordinator_bench: %lld ranks need %lld file descriptors, the limit is %llu\n",
                 static_cast<long long>(ranks), static_cast<long long>(ranks + 64),
                 static_cast<unsigned long long>(lim.rlim_cur));
    return 2;
  }
  if (ckpt.empty()) {
    ckpt = (std::filesystem::canonical("/proc/self/exe").parent_path().parent_path() / "tools/ckpt").string();
  }
  if (failovers > 0 && access(ckpt.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "coordinator_bench: no ckpt binary at %s (--ckpt)\n", ckpt.c_str());
    return 2;
  }
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  Etcd server;
  if (etcd && store.empty()) {
    if (!server.Start(dir)) {
      std::fprintf(stderr, "coordinator_bench: etcd did not start (is etcd-server installed?); see %s/etcd.log\n",
                   dir.c_str());
      return 2;
    }
    store = StrCat("etcd://127.0.0.1:", server.port, "/ckpt/bench");
  }
  if (failovers > 0 && store.empty()) {
    std::fprintf(stderr, "coordinator_bench: --failovers needs --etcd or --store\n");
    return 2;
  }
  CoordinatorOptions o;
  o.state_dir = dir + "/commit";
  o.token = kToken;
  o.min_nodes = o.max_nodes = static_cast<int>(ranks);
  o.heartbeat_s = 5;
  o.dead_after = 100;
  o.log = [](const std::string&) {};
  CommitFigures journal, in_etcd;
  if (!MeasureCommits(o, ranks, runs, fork_coordinator, &journal)) return 1;
  if (!store.empty()) {
    CoordinatorOptions e = o;
    e.state_dir.clear();
    e.store = StrCat(store, store.find('?') == std::string::npos ? "?" : "&", "lease=", static_cast<int>(lease));
    if (!MeasureCommits(e, ranks, runs, fork_coordinator, &in_etcd)) return 1;
  }

  const double detected = MeasureDetection(o, dir + "/detect", heartbeat, dead_after);
  if (detected == kDetectionFailed) return 1;
  FailoverFigures fo;
  if (failovers > 0) {
    const std::string fdir = dir + "/failover";
    std::filesystem::create_directories(fdir);
    const std::string fstore = StrCat(store.substr(0, store.find('?')), "-failover?lease=", static_cast<int>(lease));
    if (!MeasureFailover(ckpt, fdir, fstore, failovers, lease, &fo)) return 1;
  }
  const double bound = heartbeat * static_cast<double>(dead_after + 1);
  std::printf("coordinator on loopback%s, %lld simulated ranks (one connection each)\n",
              fork_coordinator ? " (its own process)" : "", static_cast<long long>(ranks));
  std::printf("  rendezvous of all ranks: journal %.3f s%s\n", journal.join_s,
              store.empty() ? "" : StrCat(", etcd ", Fixed(in_etcd.join_s, 3), " s").c_str());
  std::printf("  last vote -> leader has the decision: journal %s%s, target <= 1000 ms\n", Ms(journal.decide).c_str(),
              store.empty() ? "" : StrCat(", etcd ", Ms(in_etcd.decide)).c_str());
  std::printf("  last vote -> every rank has the outcome (leader published): journal %s%s\n",
              Ms(journal.outcome).c_str(), store.empty() ? "" : StrCat(", etcd ", Ms(in_etcd.outcome)).c_str());
  std::printf("  dead member detected after %.3f s of silence (heartbeat %.3f s, dead after %lld: bound %.3f s)\n",
              detected, heartbeat, static_cast<long long>(dead_after), bound);
  if (failovers > 0) {
    std::printf(
        "  leader replica SIGKILLed (lease %.0f s), %lld times: standby serving after %s, job's next step "
        "committed after %s\n",
        lease, static_cast<long long>(failovers), Ms(fo.serving).c_str(), Ms(fo.next_step).c_str());
  }
  if (!json_path.empty()) {
    JsonWriter w;
    w.BeginObject()
        .Field("ranks", ranks)
        .Field("join_s", journal.join_s)
        .Field("decide_s", journal.decide.Median())
        .Field("outcome_s", journal.outcome.Median())
        .Field("detect_s", detected)
        .Field("detect_bound_s", bound);
    if (!store.empty()) {
      w.Field("etcd_join_s", in_etcd.join_s)
          .Field("etcd_decide_s", in_etcd.decide.Median())
          .Field("etcd_outcome_s", in_etcd.outcome.Median());
    }
    if (failovers > 0) {
      w.Field("lease_s", lease)
          .Field("failover_serving_s", fo.serving.Median())
          .Field("failover_next_step_s", fo.next_step.Median());
    }
    w.EndObject();
    WriteTextFile(json_path, w.str());
  }
  std::filesystem::remove_all(dir);
  const bool decide_ok = journal.decide.Median() <= 1.0 && (store.empty() || in_etcd.decide.Median() <= 1.0);
  return detected > 0 && detected <= bound && decide_ok ? 0 : 1;
}

}  // namespace
}  // namespace ckpt::bench

int main(int argc, char** argv) { return ckpt::bench::Main(argc, argv); }

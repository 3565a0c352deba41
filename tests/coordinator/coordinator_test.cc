// The coordinator with real processes and real TCP on loopback: workers
// SIGKILLed mid-save and between saves, the coordinator itself SIGKILLed and
// restarted, a wrong token, garbage on the socket, replicas that disagree,
// and 1,024 lightweight simulated members.
#include "ckpt/coordinator.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/elastic_model.h"
#include "coordinator/harness.h"
#include "coordinator/held_replay.h"
#include "coordinator/protocol.h"
#include "support/sim_member.h"
#include "testutil/test_util.h"
#include "util/bytes.h"
#include "util/clock.h"

namespace ckpt::testing {
namespace {

using tools::ElasticShard;
using tools::kElasticBias;
using tools::kElasticWeight;

std::string Status(int port) {
  CoordinatorClientOptions o;
  o.address = StrCat("127.0.0.1:", port);
  o.reconnect_timeout_s = 2;
  auto c = CoordinatorClient::Connect(o);
  if (!c.ok()) return "";
  auto s = (*c)->Status();
  return s.ok() ? *s : "";
}

// `ckpt ARGS`: what it printed (stdout), and its exit status in `*code`.
std::string RunCkpt(const std::string& args, int* code) {
  FILE* p = popen(StrCat(CKPT_BIN, " ", args, " 2>/dev/null").c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  const int status = pclose(p);
  *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

// Asks `ckpt coordinator status` until its output holds `want` (up to 10 s:
// the store's view is refreshed every second or two).
std::string StatusHolding(const std::string& args, const std::string& want, int* code) {
  std::string out;
  for (int i = 0; i < 100; ++i) {
    out = RunCkpt(StrCat("coordinator status ", args), code);
    if (out.find(want) != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return out;
}

// The final checkpoint equals the model trained without interruption.
void ExpectFinalStateExact(const std::string& root, int64_t steps) {
  auto storage = OpenStorage(root);
  ASSERT_OK(storage);
  auto latest = LatestCommittedStep(**storage);
  ASSERT_OK(latest);
  EXPECT_EQ(*latest, steps);
  std::vector<float> w(static_cast<size_t>(kElasticWeight.NumElements())), b(64);
  State target;
  ASSERT_OK(target.AddTensor(kElasticWeight, w.data()));
  ASSERT_OK(target.AddTensor(kElasticBias, b.data()));
  ASSERT_OK(LoadCheckpoint(**storage, target, steps));
  const ElasticShard expected = ElasticShard::Expected(steps);
  EXPECT_EQ(0, std::memcmp(w.data(), expected.weight().data(), w.size() * 4)) << "weight differs";
  EXPECT_EQ(0, std::memcmp(b.data(), expected.bias().data(), b.size() * 4)) << "bias differs";
}

std::vector<std::string> WorkerArgs(const TempDir& dir, int port, int i, int64_t steps) {
  return {CKPT_BIN,       "worker",
          "--connect",    StrCat("127.0.0.1:", port),
          "--token-file", dir.Join("token"),
          "--root",       dir.Join("root"),
          "--steps",      std::to_string(steps),
          "--save-every", "5",
          "--log",        dir.Join(StrCat("worker", i, ".log"))};
}

// `n` workers of a `steps`-step run, a step every 30 ms; `connect` (the
// coordinator replicas, "A,B") instead of 127.0.0.1:port when given.
std::vector<pid_t> SpawnSteadyWorkers(const TempDir& dir, int port, int n, int64_t steps = 60,
                                      const std::string& connect = "") {
  std::vector<pid_t> workers;
  for (int i = 0; i < n; ++i) {
    std::vector<std::string> args = WorkerArgs(dir, port, i, steps);
    if (!connect.empty()) args[3] = connect;
    args.insert(args.end(), {"--step-ms", "30"});
    workers.push_back(Spawn(args, dir.Join(StrCat("worker", i, ".out"))));
  }
  return workers;
}

// Waits (up to 15 s) until `step` is committed under `root`.
void WaitForCommitted(const std::string& root, int64_t step) {
  auto storage = OpenStorage(root);
  ASSERT_OK(storage);
  for (int i = 0; i < 600; ++i) {
    auto latest = LatestCommittedStep(**storage);
    if (latest.ok() && *latest >= step) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
}

// The port a coordinator wrote to `file` once it serves, waiting up to
// `seconds` (a standby writes it when it takes over); 0 if none came.
int WaitForPort(const std::string& file, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    if (const int port = ReadPort(file); port > 0) return port;
  }
  return 0;
}

// The coordinator process ends by itself within 30 s with status 1, having
// said it stopped acting (it could not record its state).
void ExpectStopsActing(CoordinatorProcess& coord, const std::string& why) {
  int status = 0;
  for (int i = 0; i < 600 && waitpid(coord.pid, &status, WNOHANG) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(WIFEXITED(status)) << why << ": " << ReadFile(coord.log);
  coord.pid = -1;
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_NE(ReadFile(coord.log).find("stopped acting"), std::string::npos) << ReadFile(coord.log);
}

// The replica said it stopped acting and that it stands by again, and it
// is still running.
void ExpectStandsByAgain(const CoordinatorProcess& coord, const std::string& why) {
  std::string log;
  for (int i = 0; i < 600; ++i) {
    log = ReadFile(coord.log);
    if (log.find("; standing by again") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(log.find("; standing by again"), std::string::npos) << why << ": " << log;
  EXPECT_EQ(waitpid(coord.pid, nullptr, WNOHANG), 0) << "the replica exited: " << log;
}

std::string AllLogs(const TempDir& dir, int n) {
  std::string all;
  for (int i = 0; i < n; ++i) all += ReadFile(dir.Join(StrCat("worker", i, ".log")));
  return all;
}

// 8 workers; one SIGKILLs itself while its save of step 15 is in flight, one
// after step 25 committed. Step 15 of generation 1 is not committed, the
// survivors restore step 10 on 7 ranks, later step 25 on 6 ranks, and the
// final state is exactly the uninterrupted one.
TEST(Coordinator, WorkersKilledMidSaveAndBetweenSaves) {
  TempDir dir;
  WriteToken(dir);
  CoordinatorProcess coord;
  coord.Start(dir, "127.0.0.1:0", 4, 8);
  ASSERT_GT(coord.port, 0) << ReadFile(coord.log);
  std::vector<pid_t> workers;
  for (int i = 0; i < 8; ++i) {
    std::vector<std::string> args = WorkerArgs(dir, coord.port, i, 40);
    if (i == 3) args.insert(args.end(), {"--kill-during-save", "15"});
    if (i == 6) args.insert(args.end(), {"--kill-after-commit", "25"});
    workers.push_back(Spawn(args, dir.Join(StrCat("worker", i, ".out"))));
  }
  for (int i = 0; i < 8; ++i) {
    const int rc = WaitExit(workers[i]);
    if (i == 3 || i == 6) {
      EXPECT_EQ(rc, 128 + SIGKILL) << i;
    } else {
      EXPECT_EQ(rc, 0) << "worker " << i << ": " << ReadFile(dir.Join(StrCat("worker", i, ".out")));
    }
  }
  const std::string logs = AllLogs(dir, 8);
  const std::string status = Status(coord.port);
  coord.Stop();
  const std::string clog = ReadFile(coord.log);
  EXPECT_NE(clog.find("step 15 aborted"), std::string::npos) << clog;
  EXPECT_NE(logs.find("generation=2 rank=0 world=7 restore=10"), std::string::npos) << logs;
  EXPECT_NE(logs.find("generation=3 rank=0 world=6 restore=25"), std::string::npos) << logs;
  EXPECT_NE(status.find("\"deaths\":2"), std::string::npos) << status;
  ExpectFinalStateExact(dir.Join("root"), 40);
}

// Preemption: 4 workers run with --preempt-deadline 3; SIGTERM reaches
// every one mid-run, as a scheduler sends it. At the next step they agree,
// save that step and exit 143 within the deadline; the step committed is
// the uninterrupted run's state, and the next start restores it and
// finishes.
TEST(Coordinator, WorkersPreemptedBySigtermSaveTheStepAndResumeFromIt) {
  TempDir dir;
  WriteToken(dir);
  CoordinatorProcess coord;
  coord.Start(dir, "127.0.0.1:0", 4, 4);
  ASSERT_GT(coord.port, 0) << ReadFile(coord.log);
  std::vector<pid_t> workers;
  for (int i = 0; i < 4; ++i) {
    std::vector<std::string> args = WorkerArgs(dir, coord.port, i, 100000);
    args[args.size() - 3] = "1000";  // --save-every: no periodic save lands on the preempted step
    args.insert(args.end(), {"--preempt-deadline", "3", "--step-ms", "5"});
    workers.push_back(Spawn(args, dir.Join(StrCat("worker", i, ".out"))));
  }
  for (int i = 0; i < 400 && AllLogs(dir, 4).find("generation=1 rank=3") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto signalled = std::chrono::steady_clock::now();
  for (pid_t w : workers) kill(w, SIGTERM);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(WaitExit(workers[i]), 143) << "worker " << i << ": " << ReadFile(dir.Join(StrCat("worker", i, ".out")));
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
  EXPECT_LT(took, 3 + 5.0);
  const std::string logs = AllLogs(dir, 4);
  const size_t at = logs.find(" preempted at step ");
  ASSERT_NE(at, std::string::npos) << logs;
  const int64_t step = std::stoll(logs.substr(at + 19));
  for (int r = 0; r < 4; ++r) {
    EXPECT_NE(logs.find(StrCat("rank=", r, " preempted at step ", step, " committed=durable")), std::string::npos)
        << logs;
  }
  ExpectFinalStateExact(dir.Join("root"), step);
  // The next start restores the step and finishes 10 steps later.
  workers.clear();
  for (int i = 0; i < 4; ++i) {
    workers.push_back(Spawn(WorkerArgs(dir, coord.port, i, step + 10), dir.Join(StrCat("again", i, ".out"))));
  }
  for (int i = 0; i < 4; ++i) EXPECT_EQ(WaitExit(workers[i]), 0) << ReadFile(dir.Join(StrCat("again", i, ".out")));
  coord.Stop();
  EXPECT_NE(AllLogs(dir, 4).find(StrCat("restore=", step)), std::string::npos);
  ExpectFinalStateExact(dir.Join("root"), step + 10);
}

// The memory level: 6 workers in 3 failure domains (2 each) save into
// peers' memory every 2 steps and to the root every 10; `kill_domains`
// domains are lost (both their processes SIGKILL themselves once memory
// step 14 is committed). Returns the workers' logs and the coordinator's.
struct MemoryRun {
  std::string logs, coordinator;
};
// With `erasure` ("4+2") the coordinator codes the memory level, and the
// lost domains' processes kill themselves mid-save instead: right after
// Save(16) returned, while its pieces are being placed.
MemoryRun RunMemoryLevel(const TempDir& dir, int kill_domains, int domains = 3, int per_domain = 2,
                         const std::string& erasure = "") {
  WriteToken(dir);
  CoordinatorProcess coord;
  const int n = per_domain * domains;
  std::vector<std::string> extra;
  if (!erasure.empty()) extra = {"--memory-erasure", erasure};
  coord.Start(dir, "127.0.0.1:0", n - per_domain * kill_domains, n, extra);
  EXPECT_GT(coord.port, 0) << ReadFile(coord.log);
  std::vector<pid_t> workers;
  for (int i = 0; i < n; ++i) {
    std::vector<std::string> args = WorkerArgs(dir, coord.port, i, 40);
    args[args.size() - 3] = "10";  // --save-every
    args.insert(args.end(), {"--memory-every", "2", "--domain", StrCat("node-", i / per_domain)});
    if (i / per_domain >= domains - kill_domains) {
      args.insert(args.end(),
                  {erasure.empty() ? "--kill-after-commit" : "--kill-during-save", erasure.empty() ? "14" : "16"});
    }
    workers.push_back(Spawn(args, dir.Join(StrCat("worker", i, ".out"))));
  }
  for (int i = 0; i < n; ++i) {
    const int rc = WaitExit(workers[i]);
    if (i / per_domain >= domains - kill_domains) {
      EXPECT_EQ(rc, 128 + SIGKILL) << i;
    } else {
      EXPECT_EQ(rc, 0) << "worker " << i << ": " << ReadFile(dir.Join(StrCat("worker", i, ".out")));
    }
  }
  coord.Stop();
  return MemoryRun{AllLogs(dir, n), ReadFile(coord.log)};
}

TEST(Coordinator, ALostNodeRestoresTheNewestMemoryStepFromPeers) {
  TempDir dir;
  const MemoryRun run = RunMemoryLevel(dir, 1);
  EXPECT_NE(run.coordinator.find("restore memory step 14 from peers' memory"), std::string::npos) << run.coordinator;
  // Every rank of the smaller generation restored step 14 from memory,
  // reading nothing from storage; some bytes came from peers (the lost
  // ranks' rows, from their replica holders).
  EXPECT_GT(SumOverMemoryRestores(run.logs, "from_peers"), 0) << run.logs;
  EXPECT_NE(run.logs.find("committed memory step 14"), std::string::npos);
  EXPECT_NE(run.logs.find("committed step 10"), std::string::npos);
  ExpectFinalStateExact(dir.Join("root"), 40);
  // Later memory steps were saved by the 4 ranks, in the 2 domains left.
  EXPECT_NE(run.logs.find("committed memory step 18"), std::string::npos) << run.logs;
  // `ckpt list` with the coordinator's state shows both levels: the last
  // memory step (38: step 40 was durable) went with the job's processes,
  // and durable step 40 is the newest a restart would restore.
  int code = -1;
  const std::string root = dir.Join("root"), state = dir.Join("state");
  const std::string json = RunCkpt(StrCat("list ", root, " --state-dir ", state, " --json"), &code);
  EXPECT_EQ(code, 0) << json;
  EXPECT_NE(json.find("\"newest\":{\"step\":40,\"level\":\"durable\"}"), std::string::npos) << json;
  EXPECT_NE(json.find("\"memory\":{\"state\":\"gone\",\"step\":38,\"generation\":2,\"save_world\":4,\"held_by\":2"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("{\"step\":40,\"level\":\"durable\",\"state\":\"committed\",\"latest\":true"), std::string::npos)
      << json;
  const std::string text = RunCkpt(StrCat("list ", root, " --state-dir ", state), &code);
  EXPECT_EQ(code, 0) << text;
  EXPECT_NE(text.find("memory level: gone: the job finished (every member of generation 2 left)"), std::string::npos)
      << text;
  EXPECT_NE(text.find("(* the newest step a restart restores: step 40, from the root)"), std::string::npos) << text;
  // The history names the levels and the job's end.
  const std::string history = RunCkpt(StrCat("coordinator history --state-dir ", state), &code);
  EXPECT_EQ(code, 0) << history;
  EXPECT_NE(history.find("memory step 14 committed (generation 1)"), std::string::npos) << history;
  EXPECT_NE(history.find("generation 2 ended (every member left: the job finished)"), std::string::npos) << history;
  EXPECT_NE(history.find(" memory step(s) committed (last 38), 0 contradiction(s)"), std::string::npos) << history;
}

// The memory level erasure coded RS(4+2) over 6 hosts (one process each):
// two hosts' processes are SIGKILLed in the middle of memory save 16. The
// four left restore memory step 14 from the pieces the two lost hosts did
// not hold, rebuilding the lost data pieces from parity, reading nothing
// from storage; with 4 domains left no generation codes 4+2, so they save
// durably, and the job ends exact.
TEST(Coordinator, TwoHostsLostMidSaveRestoreFromErasureCodedMemory) {
  TempDir dir;
  const MemoryRun run = RunMemoryLevel(dir, 2, 6, 1, "4+2");
  EXPECT_NE(run.coordinator.find("restore memory step 14 from peers' memory"), std::string::npos) << run.coordinator;
  // Ranks 4 and 5's files lost data pieces with their hosts.
  EXPECT_GT(SumOverMemoryRestores(run.logs, "rebuilt"), 0) << run.logs;
  EXPECT_EQ(run.logs.find("committed memory step 16"), std::string::npos) << run.logs;
  EXPECT_NE(run.logs.find("no memory-level saves: erasure coding 4+2 needs 6 failure domains; the ranks are in 4"),
            std::string::npos)
      << run.logs;
  ExpectFinalStateExact(dir.Join("root"), 40);
  // The history and `ckpt list` name the coding of the memory steps.
  int code = -1;
  const std::string state = dir.Join("state");
  const std::string history = RunCkpt(StrCat("coordinator history --state-dir ", state), &code);
  EXPECT_EQ(code, 0) << history;
  EXPECT_NE(history.find("memory step 14 committed (generation 1, erasure coded 4+2)"), std::string::npos) << history;
  const std::string json = RunCkpt(StrCat("coordinator history --state-dir ", state, " --json"), &code);
  EXPECT_NE(json.find("\"level\":\"memory\",\"erasure\":\"4+2\""), std::string::npos) << json;
  const std::string list = RunCkpt(StrCat("list ", dir.Join("root"), " --state-dir ", state, " --json"), &code);
  EXPECT_EQ(code, 0) << list;
  EXPECT_NE(list.find("\"step\":14,\"generation\":1,\"save_world\":6"), std::string::npos) << list;
  EXPECT_NE(list.find("\"erasure\":\"4+2\""), std::string::npos) << list;
}

// Rank 0's two-level IntervalPolicy decides after each step whether to save
// and at which level, and broadcasts it: the durable level is slow storage
// (1 MB/s per process), so the policy puts memory saves between durable
// ones. Every rank commits exactly the steps rank 0 decided, at the level it
// decided; the pattern follows the policy's durable_every; the job ends exact.
TEST(Coordinator, AnIntervalPolicyDecidesBothLevelsForEveryRank) {
  TempDir dir;
  WriteToken(dir);
  CoordinatorProcess coord;
  coord.Start(dir, "127.0.0.1:0", 4, 4);
  ASSERT_GT(coord.port, 0) << ReadFile(coord.log);
  constexpr int64_t kSteps = 300;
  std::vector<pid_t> workers;
  for (int i = 0; i < 4; ++i) {
    std::vector<std::string> args = WorkerArgs(dir, coord.port, i, kSteps);
    const auto root = std::find(args.begin(), args.end(), "--root");
    ASSERT_NE(root, args.end());
    root[1] = StrCat("faulty://", dir.Join("root"), "?fault.write_bandwidth=1M");
    args.insert(args.end(), {"--step-ms", "20", "--ballast", "1M", "--policy-mtbf", "10", "--policy-min-interval",
                             "0.1", "--memory-level", "--domain", StrCat("node-", i / 2)});
    workers.push_back(Spawn(args, dir.Join(StrCat("worker", i, ".out"))));
  }
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(WaitExit(workers[i]), 0) << "worker " << i << ": " << ReadFile(dir.Join(StrCat("worker", i, ".out")));
  }
  coord.Stop();
  ExpectFinalStateExact(dir.Join("root"), kSteps);
  const std::string logs = AllLogs(dir, 4);
  // Rank 0's decisions, in order.
  struct Decision {
    int64_t step;
    bool memory;
    int64_t durable_every;
  };
  std::vector<Decision> decisions;
  std::istringstream in(logs);
  for (std::string line; std::getline(in, line);) {
    const size_t p = line.find("policy: step ");
    if (p == std::string::npos) continue;
    const size_t k = line.find(" durable_every=");
    ASSERT_NE(k, std::string::npos) << line;
    decisions.push_back({std::stoll(line.substr(p + 13)), line.find(" level=memory ") != std::string::npos,
                         std::stoll(line.substr(k + 15))});
  }
  ASSERT_GE(decisions.size(), 3u) << logs;
  EXPECT_EQ(decisions.back().step, kSteps);
  EXPECT_FALSE(decisions.back().memory);
  int memory = 0, durable = 0, since_durable = 0;
  for (size_t i = 0; i < decisions.size(); ++i) {
    const Decision& d = decisions[i];
    SCOPED_TRACE(StrCat("step ", d.step));
    // Every rank committed it at that level.
    const std::string committed = StrCat(d.memory ? " committed memory step " : " committed step ", d.step);
    size_t ranks = 0;
    for (size_t at = logs.find(committed); at != std::string::npos; at = logs.find(committed, at + 1)) {
      const char next = logs[at + committed.size()];
      ranks += next == '\n' || next == ' ';
    }
    EXPECT_EQ(ranks, 4u) << committed << logs;
    if (i + 1 < decisions.size()) {
      // A memory save while fewer than durable_every - 1 came since the last
      // durable one; a durable save once that many did.
      EXPECT_EQ(d.memory, since_durable + 1 < d.durable_every) << since_durable << " of " << d.durable_every;
    }
    (d.memory ? memory : durable) += 1;
    since_durable = d.memory ? since_durable + 1 : 0;
  }
  EXPECT_GE(memory, 1) << logs;
  EXPECT_GE(durable, 2) << logs;
  std::string pattern;
  for (const Decision& d : decisions) pattern += StrCat(" ", d.step, d.memory ? "m" : "d");
  std::printf("policy: %d memory and %d durable saves (step, level):%s\n", memory, durable, pattern.c_str());
  // No rank saved a step rank 0 did not decide.
  size_t commits = 0;
  for (size_t at = logs.find(" committed "); at != std::string::npos; at = logs.find(" committed ", at + 1)) ++commits;
  EXPECT_EQ(commits, 4 * decisions.size()) << logs;
}

TEST(Coordinator, WhenNoLiveCopyHoldsAShardTheRestoreFallsBackToDurable) {
  TempDir dir;
  const MemoryRun run = RunMemoryLevel(dir, 2);
  // Ranks of node-1 had their copies on node-2: both gone.
  EXPECT_NE(run.coordinator.find("memory step 14 (generation 1, 6 ranks) cannot be restored: no live member holds "
                                 "the files of rank(s) "),
            std::string::npos)
      << run.coordinator;
  EXPECT_NE(run.coordinator.find("restoring durable step 10"), std::string::npos) << run.coordinator;
  for (int r = 0; r < 2; ++r) {
    const std::string line = StrCat("generation=2 rank=", r, " world=2 restore=10 level=durable");
    EXPECT_NE(run.logs.find(line), std::string::npos) << line << "\n" << run.logs;
  }
  // One domain left: no memory-level saves, and the job still ends exact.
  EXPECT_NE(run.logs.find("no memory-level saves: 1 replica(s) need 2 failure domains"), std::string::npos) << run.logs;
  ExpectFinalStateExact(dir.Join("root"), 40);
}

// Regressions: after falling back to durable step 10, the survivors' memory
// still held LATEST naming memory step 14, so their memory saves of steps
// 12 and 14 were refused as "not newer than the latest committed step"; and
// the coordinator answered the new save of memory step 12 with the first
// generation's commit of it.
// With 5 domains, 3 lost (two of them next to each other in the ring of
// replicas, whichever 3: some rank's files are gone), the 2 left save at the
// memory level again.
TEST(Coordinator, AfterAFallbackToDurableTheMemoryLevelSavesAgain) {
  TempDir dir;
  const MemoryRun run = RunMemoryLevel(dir, 3, 5);
  EXPECT_NE(run.coordinator.find("restoring durable step 10"), std::string::npos) << run.coordinator;
  EXPECT_NE(run.logs.find("generation=2 rank=0 world=4 restore=10 level=durable"), std::string::npos) << run.logs;
  EXPECT_EQ(run.logs.find("not newer than the latest committed step"), std::string::npos) << run.logs;
  // Nor answered with the first generation's commit of memory step 12 (the
  // others went on while the leader waited for a decision that never came):
  // one restart only.
  EXPECT_EQ(run.logs.find("no decision within the deadline"), std::string::npos) << run.logs;
  EXPECT_EQ(run.logs.find("generation=3"), std::string::npos) << run.logs;
  // Step 16 was never committed by the first generation (its savers died).
  EXPECT_NE(run.logs.find("committed memory step 16"), std::string::npos) << run.logs;
  ExpectFinalStateExact(dir.Join("root"), 40);
}

// A memory budget too small for a rank's file and the copy it holds for
// another: every memory save fails, cleanly and by name; durable saves and
// training go on.
TEST(Coordinator, AFullMemoryBudgetFailsMemorySavesAndDurableOnesGoOn) {
  TempDir dir;
  WriteToken(dir);
  CoordinatorProcess coord;
  coord.Start(dir, "127.0.0.1:0", 3, 3);
  ASSERT_GT(coord.port, 0) << ReadFile(coord.log);
  std::vector<pid_t> workers;
  for (int i = 0; i < 3; ++i) {
    std::vector<std::string> args = WorkerArgs(dir, coord.port, i, 20);
    args[args.size() - 3] = "10";  // --save-every
    args.insert(args.end(), {"--memory-every", "2", "--domain", StrCat("node-", i), "--memory-budget", "150000"});
    workers.push_back(Spawn(args, dir.Join(StrCat("worker", i, ".out"))));
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(WaitExit(workers[i]), 0) << "worker " << i << ": " << ReadFile(dir.Join(StrCat("worker", i, ".out")));
  }
  coord.Stop();
  const std::string logs = AllLogs(dir, 3);
  EXPECT_NE(logs.find("memory step 2 not committed"), std::string::npos) << logs;
  EXPECT_NE(logs.find("peer memory budget of 150000 bytes exhausted"), std::string::npos) << logs;
  EXPECT_EQ(logs.find("committed memory step"), std::string::npos) << logs;
  EXPECT_NE(logs.find("committed step 10"), std::string::npos) << logs;
  ExpectFinalStateExact(dir.Join("root"), 20);
}

// Regression: the restore step of a forming generation was chosen (the newest
// committed steps verified) on the coordinator's one io thread, so status
// requests, heartbeats and joins waited for the whole verification. Here the
// coordinator reads the root through storage that answers each read after
// 1 s: /status keeps being answered within half of that while the
// second generation forms, and the generation restores the verified step.
TEST(Coordinator, StatusIsServedWhileTheRestoreStepIsVerified) {
  TempDir dir;
  WriteToken(dir);
  CoordinatorProcess coord;
  coord.root = StrCat("faulty://", dir.Join("root"), "?fault.latency=1s");
  coord.Start(dir, "127.0.0.1:0", 1, 1);
  ASSERT_GT(coord.port, 0) << ReadFile(coord.log);
  // Generation 1 commits steps 5 and 10 and leaves.
  ASSERT_EQ(WaitExit(Spawn(WorkerArgs(dir, coord.port, 0, 10), dir.Join("worker0.out"))), 0)
      << ReadFile(dir.Join("worker0.out"));
  // Generation 2 forms around a new worker; meanwhile, /status.
  const pid_t second = Spawn(WorkerArgs(dir, coord.port, 1, 15), dir.Join("worker1.out"));
  const double t0 = NowSeconds();
  double slowest = 0, formed_after = -1;
  int answered = 0;
  bool saw_forming = false;
  while (NowSeconds() - t0 < 30) {
    const double t = NowSeconds();
    const std::string status = HttpGet(coord.port, "/status");
    slowest = std::max(slowest, NowSeconds() - t);
    ASSERT_NE(status.find("HTTP/1.0 200 OK"), std::string::npos) << status;
    ++answered;
    saw_forming = saw_forming || status.find("\"forming\":true") != std::string::npos;
    if (status.find("\"generation\":2,\"running\":true") != std::string::npos) {
      formed_after = NowSeconds() - t0;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(WaitExit(second), 0) << ReadFile(dir.Join("worker1.out"));
  coord.Stop();
  ASSERT_GT(formed_after, 0) << ReadFile(coord.log);
  std::printf(
      "restore step verified off the io thread: generation 2 formed after %.2f s, %d status answers, "
      "slowest %.3f s\n",
      formed_after, answered, slowest);
  EXPECT_TRUE(saw_forming) << "formed after " << formed_after << " s";
  // The verification took at least one 1 s read; no answer waited for it.
  EXPECT_GE(formed_after, 1.0);
  EXPECT_LT(slowest, 0.5) << answered << " answers, generation 2 formed after " << formed_after << " s";
  EXPECT_NE(ReadFile(dir.Join("worker1.log")).find("generation=2 rank=0 world=1 restore=10"), std::string::npos)
      << ReadFile(dir.Join("worker1.log"));
  ExpectFinalStateExact(dir.Join("root"), 15);
}

// The coordinator is SIGKILLed while the job runs and restarted on the same
// port and state dir: the workers reconnect, resume their generation and
// finish; nothing committed is lost.
TEST(Coordinator, CoordinatorKilledAndRestartedMidRun) {
  TempDir dir;
  WriteToken(dir);
  CoordinatorProcess coord;
  coord.Start(dir, "127.0.0.1:0", 3, 3);
  ASSERT_GT(coord.port, 0);
  const int port = coord.port;
  std::vector<pid_t> workers = SpawnSteadyWorkers(dir, port, 3);
  WaitForCommitted(dir.Join("root"), 15);  // kill it once a few steps are committed
  coord.Kill();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  coord.Start(dir, StrCat("127.0.0.1:", port), 3, 3);
  ASSERT_EQ(coord.port, port) << ReadFile(coord.log);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(WaitExit(workers[i]), 0) << ReadFile(dir.Join(StrCat("worker", i, ".out")));
  }
  const std::string status = Status(port);
  coord.Stop();
  const std::string clog = ReadFile(coord.log);
  EXPECT_NE(clog.find("resuming generation 1"), std::string::npos) << clog;
  EXPECT_NE(clog.find("reconnected to generation 1"), std::string::npos) << clog;
  EXPECT_NE(status.find("\"last_committed_step\":60"), std::string::npos) << status;
  ExpectFinalStateExact(dir.Join("root"), 60);
}

// The state in etcd: the coordinator is SIGKILLed mid-run and a new one is
// started with no local state at all (as on another machine) on the same
// store; the workers reconnect, resume their generation and finish exactly.
// Then etcd itself dies: the coordinator cannot record its next decision,
// stops acting and (--exit-when-stopped) exits 1; with etcd and a
// coordinator back, the job ends exactly where an uninterrupted run ends.
TEST(Coordinator, StateInEtcdOutlivesTheCoordinatorsMachine) {
  TempDir dir;
  WriteToken(dir);
  EtcdServer etcd(dir);
  ASSERT_TRUE(etcd.up()) << etcd.log();
  CoordinatorProcess coord;
  coord.store = etcd.Uri("/ckpt/jobs/e2e");
  coord.Start(dir, "127.0.0.1:0", 3, 3);
  ASSERT_GT(coord.port, 0) << ReadFile(coord.log);
  const int port = coord.port;
  std::vector<pid_t> workers = SpawnSteadyWorkers(dir, port, 3);
  WaitForCommitted(dir.Join("root"), 15);
  coord.Kill();
  std::filesystem::remove_all(dir.Join("state"));  // nothing local survives
  coord.Start(dir, StrCat("127.0.0.1:", port), 3, 3, {"--exit-when-stopped"});
  ASSERT_EQ(coord.port, port) << ReadFile(coord.log);
  EXPECT_NE(ReadFile(coord.log).find("resuming generation 1"), std::string::npos) << ReadFile(coord.log);
  WaitForCommitted(dir.Join("root"), 30);
  etcd.Kill();
  ExpectStopsActing(coord, "the coordinator kept acting without its store");
  etcd.Start();
  ASSERT_TRUE(etcd.up()) << etcd.log();
  coord.Start(dir, StrCat("127.0.0.1:", port), 3, 3);
  ASSERT_EQ(coord.port, port) << ReadFile(coord.log);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(WaitExit(workers[i]), 0) << ReadFile(dir.Join(StrCat("worker", i, ".out")));
  }
  const std::string final_status = Status(port);
  coord.Stop();
  EXPECT_NE(final_status.find("\"last_committed_step\":60"), std::string::npos) << final_status;
  ExpectFinalStateExact(dir.Join("root"), 60);
}

// Two coordinator replicas on one etcd prefix: one leads, the other stands
// by. The leader is SIGKILLed: the standby takes over within the lease and
// the workers, given both addresses, reconnect to it. The killed one comes
// back as the standby; then the leader is SIGSTOPped past its lease, the
// standby takes over and decides, and the paused one, continued, finds its
// leadership gone, stops acting without writing anything and stands by
// again by itself. The run ends exactly where an uninterrupted one ends.
TEST(Coordinator, AStandbyReplicaTakesOverAndAPausedLeaderIsFencedOff) {
  TempDir dir;
  WriteToken(dir);
  EtcdServer etcd(dir);
  ASSERT_TRUE(etcd.up()) << etcd.log();
  const int port_a = FreePort(), port_b = FreePort();
  const std::string listen_a = StrCat("127.0.0.1:", port_a), listen_b = StrCat("127.0.0.1:", port_b);
  CoordinatorProcess a, b;
  a.name = "coord-a";
  b.name = "coord-b";
  a.store = b.store = etcd.Uri("/ckpt/jobs/failover?lease=2");
  a.Start(dir, listen_a, 3, 3);
  ASSERT_EQ(a.port, port_a) << ReadFile(a.log);
  b.standby = true;
  b.Start(dir, listen_b, 3, 3);
  // Asked alone, the standby answers with its own view (exit 1: not the
  // leader); asked through both addresses, the leader answers and names the
  // standby and the etcd member's health.
  int code = -1;
  const std::string standby_view =
      StatusHolding(StrCat("--connect ", listen_b), StrCat(listen_a, "; leader changes"), &code);
  EXPECT_EQ(code, 1) << standby_view;
  EXPECT_NE(standby_view.find("standby ("), std::string::npos) << standby_view;
  EXPECT_NE(standby_view.find(StrCat(listen_a, "; leader changes 0")), std::string::npos) << standby_view;
  const std::string leader_view =
      StatusHolding(StrCat("--connect ", listen_b, ",", listen_a), StrCat(listen_b, "\n"), &code);
  EXPECT_EQ(code, 0) << leader_view;
  EXPECT_NE(leader_view.find("leader ("), std::string::npos) << leader_view;
  EXPECT_NE(leader_view.find("  standby: "), std::string::npos) << leader_view;
  EXPECT_NE(leader_view.find(": up, raft leader, term "), std::string::npos) << leader_view;
  EXPECT_NE(leader_view.find("generation "), std::string::npos) << leader_view;
  constexpr int64_t kSteps = 90;
  std::vector<pid_t> workers = SpawnSteadyWorkers(dir, port_a, 3, kSteps, StrCat(listen_a, ",", listen_b));
  const std::string root = dir.Join("root");
  WaitForCommitted(root, 15);
  const auto killed = std::chrono::steady_clock::now();
  a.Kill();
  const int took_over = WaitForPort(dir.Join("coord-b.port"), 20);
  ASSERT_EQ(took_over, port_b) << ReadFile(b.log);
  const double failover_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_NE(ReadFile(b.log).find("standing by"), std::string::npos) << ReadFile(b.log);
  EXPECT_NE(ReadFile(b.log).find("resuming generation 1"), std::string::npos) << ReadFile(b.log);
  // The killed replica comes back as the standby.
  a.standby = true;
  a.Start(dir, listen_a, 3, 3);
  WaitForCommitted(root, 40);
  kill(b.pid, SIGSTOP);
  const int took_back = WaitForPort(dir.Join("coord-a.port"), 20);
  kill(b.pid, SIGCONT);
  ASSERT_EQ(took_back, port_a) << ReadFile(a.log);
  ExpectStandsByAgain(b, "the paused leader kept acting");
  EXPECT_NE(ReadFile(a.log).find("leading"), std::string::npos) << ReadFile(a.log);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(WaitExit(workers[i]), 0) << ReadFile(dir.Join(StrCat("worker", i, ".out")));
  }
  const std::string final_status = Status(port_a);
  // The fenced-off replica is a standby again: the leader names it.
  EXPECT_NE(final_status.find(StrCat("127.0.0.1:", port_b, "\"]")), std::string::npos) << final_status;
  a.Stop();
  b.Stop();
  EXPECT_NE(final_status.find(StrCat("\"last_committed_step\":", kSteps)), std::string::npos) << final_status;
  // a led, b took over, a took back.
  EXPECT_NE(final_status.find("\"role\":\"leader\""), std::string::npos) << final_status;
  EXPECT_NE(final_status.find("\"leader_changes\":2"), std::string::npos) << final_status;
  ExpectFinalStateExact(root, kSteps);
  std::printf("failover: the standby served %.2f s after the leader was killed (lease 2 s)\n", failover_s);
}

// A failover campaign on a three-member etcd cluster: two coordinator
// replicas, four workers, 25 leader kills. Four in five are the leader
// SIGKILLing itself at a named phase (CKPT_COORDINATOR_CRASH_AT): during a
// rendezvous (a worker is killed and replaced to cause one) with half the
// members told, with every vote in and the decision not recorded, with a
// decision recorded and not yet heard, and with an outcome sent to half the
// ranks; the fifth at a random moment. Each time the other replica takes
// over and the killed one comes back as the standby. No committed step is
// lost, the workers finish, the final state is the uninterrupted one, the
// step history in etcd has no contradiction, and every step a worker saw
// committed is committed there.
TEST(Coordinator, LeaderKillsAtEveryPhaseLoseNothing) {
  TempDir dir;
  WriteToken(dir);
  EtcdServer etcd(dir, 3);
  ASSERT_TRUE(etcd.up()) << etcd.log();
  const int ports[2] = {FreePort(), FreePort()};
  const std::string addr[2] = {StrCat("127.0.0.1:", ports[0]), StrCat("127.0.0.1:", ports[1])};
  const std::string store = etcd.Uri("/ckpt/jobs/campaign?lease=1");
  constexpr const char* kPhases[] = {"rendezvous", "votes", "decided", "outcome", ""};
  // Each phase five times; twice under a sanitizer, whose stages run this
  // test beside the release stage's full campaign.
  constexpr int kKills = kSanitized ? 10 : 25, kWorkers = 4;
  constexpr int64_t kSteps = 800;  // long enough that the job outlasts the 25 kills
  CoordinatorProcess replicas[2];
  // Replica r started now performs kill `kill_no` (when it is the leader then).
  auto start = [&](int r, int kill_no, bool standby) {
    replicas[r].name = StrCat("replica", r);
    replicas[r].store = store;
    replicas[r].env.clear();
    if (kill_no < kKills && kPhases[kill_no % 5][0] != '\0') {
      replicas[r].env.push_back(StrCat("CKPT_COORDINATOR_CRASH_AT=", kPhases[kill_no % 5]));
    }
    replicas[r].standby = standby;
    replicas[r].Start(dir, addr[r], kWorkers, kWorkers);
  };
  start(0, 0, false);
  ASSERT_EQ(replicas[0].port, ports[0]) << ReadFile(replicas[0].log);
  start(1, 1, true);
  const std::string connect = StrCat(addr[0], ",", addr[1]);
  std::vector<pid_t> workers = SpawnSteadyWorkers(dir, ports[0], kWorkers, kSteps, connect);
  const std::string root = dir.Join("root");
  auto storage = OpenStorage(root);
  ASSERT_OK(storage);
  std::mt19937 rng(22);
  int leader = 0;
  int64_t last = -1;
  for (int kill_no = 0; kill_no < kKills; ++kill_no) {
    const std::string phase = kPhases[kill_no % 5];
    SCOPED_TRACE(StrCat("kill ", kill_no, " (", phase.empty() ? "random" : phase, ")"));
    CoordinatorProcess& c = replicas[leader];
    if (phase.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 400));
      c.Kill();
    } else {
      if (phase == "rendezvous" && kill_no > 0) {
        // A worker dies and is replaced: the next generation's rendezvous.
        const size_t w = rng() % kWorkers;
        kill(workers[w], SIGKILL);
        WaitExit(workers[w]);
        std::vector<std::string> args = WorkerArgs(dir, ports[0], static_cast<int>(w), kSteps);
        args[3] = connect;
        args.insert(args.end(), {"--step-ms", "30"});
        workers[w] = Spawn(args, dir.Join(StrCat("worker", w, ".out")));
      }
      // Up to 100 s: longer than the workers' own 60 s commit and collective
      // timeouts, after which they re-join whatever was lost.
      int status = 0;
      for (int i = 0; i < 2000 && waitpid(c.pid, &status, WNOHANG) == 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      std::string workers_said;
      for (int i = 0; i < kWorkers; ++i) {
        const std::string log = ReadFile(dir.Join(StrCat("worker", i, ".log")));
        workers_said +=
            StrCat("\n--- worker ", i, " (last lines):\n", log.substr(log.size() > 1500 ? log.size() - 1500 : 0),
                   ReadFile(dir.Join(StrCat("worker", i, ".out"))));
      }
      ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
          << "the leader did not reach its crash point: " << ReadFile(c.log) << workers_said;
      ASSERT_NE(ReadFile(c.log).find(StrCat("crash point '", phase, "' reached")), std::string::npos)
          << ReadFile(c.log);
    }
    const int next = 1 - leader;
    ASSERT_EQ(WaitForPort(dir.Join(StrCat("replica", next, ".port")), 30), ports[next]) << ReadFile(replicas[next].log);
    start(leader, kill_no + 2, true);
    leader = next;
    auto latest = LatestCommittedStep(**storage);
    if (latest.ok()) {
      EXPECT_GE(*latest, last) << "a committed step was lost";
      last = *latest;
    }
  }
  for (int i = 0; i < kWorkers; ++i) {
    EXPECT_EQ(WaitExit(workers[i]), 0) << ReadFile(dir.Join(StrCat("worker", i, ".out")));
  }
  replicas[0].Stop();
  replicas[1].Stop();
  ExpectFinalStateExact(root, kSteps);
  // The history in etcd: no contradiction, and every step a worker saw
  // committed is committed there.
  int code = -1;
  const std::string history = RunCkpt(StrCat("coordinator history --store '", store, "' --summary"), &code);
  EXPECT_EQ(code, 0) << history;
  EXPECT_NE(history.find(" 0 contradiction(s)"), std::string::npos) << history;
  const std::string json = RunCkpt(StrCat("coordinator history --store '", store, "' --summary --json"), &code);
  const size_t at = json.find("\"committed\":[");
  ASSERT_NE(at, std::string::npos) << json;
  std::set<int64_t> committed;
  std::istringstream list(json.substr(at + 13, json.find(']', at) - at - 13));
  for (std::string n; std::getline(list, n, ',');) committed.insert(std::stoll(n));
  EXPECT_TRUE(committed.count(kSteps)) << json;
  size_t seen = 0;
  for (int i = 0; i < kWorkers; ++i) {
    std::istringstream in(ReadFile(dir.Join(StrCat("worker", i, ".log"))));
    for (std::string line; std::getline(in, line);) {
      const size_t p = line.find(" committed step ");
      if (p == std::string::npos) continue;
      const int64_t step = std::stoll(line.substr(p + 16));
      EXPECT_TRUE(committed.count(step)) << "worker " << i << " saw step " << step
                                         << " committed; the history in etcd does not have it";
      ++seen;
    }
  }
  EXPECT_GT(seen, 0u);
  std::printf(
      "campaign: %d leader kills (step %lld committed after the last), %zu commits seen by workers, %zu "
      "steps committed in etcd\n",
      kKills, static_cast<long long>(last), seen, committed.size());
}

// The store is a three-member etcd cluster, with a leader and a standby
// coordinator. Losing one member changes nothing (the coordinator moves to
// another endpoint). Losing a second (quorum gone) stops the decisions: the
// leader cannot record one, so it stops acting and stands by again, and no
// step commits meanwhile; both replicas wait through the outage and their
// status shows the members down. With the members back one of them leads
// again by itself, and the job ends exactly.
TEST(Coordinator, EtcdMemberLossChangesNothingQuorumLossStopsDecisions) {
  TempDir dir;
  WriteToken(dir);
  EtcdServer etcd(dir, 3);
  ASSERT_TRUE(etcd.up()) << etcd.log();
  const int port = FreePort(), spare_port = FreePort();
  CoordinatorProcess coord, spare;
  coord.store = spare.store = etcd.Uri("/ckpt/jobs/quorum?timeout=2&lease=2");
  spare.name = "spare";
  coord.Start(dir, StrCat("127.0.0.1:", port), 3, 3);
  ASSERT_EQ(coord.port, port) << ReadFile(coord.log);
  spare.standby = true;
  spare.Start(dir, StrCat("127.0.0.1:", spare_port), 3, 3);
  constexpr int64_t kSteps = 90;
  const std::string both = StrCat("127.0.0.1:", port, ",127.0.0.1:", spare_port);
  std::vector<pid_t> workers = SpawnSteadyWorkers(dir, port, 3, kSteps, both);
  const std::string root = dir.Join("root");
  WaitForCommitted(root, 15);
  etcd.Kill(0);  // the endpoint the coordinators talk to first
  WaitForCommitted(root, 35);
  auto storage = OpenStorage(root);
  ASSERT_OK(storage);
  auto latest = LatestCommittedStep(**storage);
  ASSERT_OK(latest);
  EXPECT_GE(*latest, 35) << "one member of three lost stopped the job: " << ReadFile(coord.log);
  // Whichever replica leads now (a slow machine may have moved the lease
  // while the first member was down) stops acting once a second member
  // goes, and stands by again: neither process exits.
  const auto stopped_count = [&] {
    auto count = [](const std::string& log) {
      size_t n = 0;
      for (size_t at = log.find("; standing by again"); at != std::string::npos;
           at = log.find("; standing by again", at + 1)) {
        ++n;
      }
      return n;
    };
    return count(ReadFile(coord.log)) + count(ReadFile(spare.log));
  };
  const size_t stopped_before = stopped_count();
  etcd.Kill(1);
  for (int i = 0; i < 600 && stopped_count() == stopped_before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GT(stopped_count(), stopped_before)
      << "the coordinator kept deciding without a quorum: " << ReadFile(coord.log) << ReadFile(spare.log);
  auto stopped_at = LatestCommittedStep(**storage);
  ASSERT_OK(stopped_at);
  // Only standbys answer (exit 1), and they show the members down.
  int code = -1;
  const std::string outage = StatusHolding(StrCat("--connect ", both), ": DOWN (", &code);
  EXPECT_EQ(code, 1) << outage;
  EXPECT_NE(outage.find(": DOWN ("), std::string::npos) << outage;
  auto still = LatestCommittedStep(**storage);
  ASSERT_OK(still);
  EXPECT_EQ(*still, *stopped_at) << "a step committed while the store had no quorum";
  EXPECT_LT(*still, kSteps);
  EXPECT_EQ(waitpid(coord.pid, nullptr, WNOHANG), 0) << "a replica did not outlive the outage: " << ReadFile(coord.log);
  EXPECT_EQ(waitpid(spare.pid, nullptr, WNOHANG), 0) << "a replica did not outlive the outage: " << ReadFile(spare.log);
  // The members come back: one replica leads again by itself (nothing is
  // started by hand) and the job ends exactly.
  etcd.Start(0);
  etcd.Start(1);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(WaitExit(workers[i]), 0) << ReadFile(dir.Join(StrCat("worker", i, ".out"))) << ReadFile(coord.log)
                                       << ReadFile(spare.log);
  }
  coord.Stop();
  spare.Stop();
  ExpectFinalStateExact(root, kSteps);
}

// A worker's copy of a replicated tensor is corrupted while it saves: the
// coordinator raises an SDC alert naming that rank; training carries on and
// the final state is exact.
TEST(Coordinator, CorruptReplicaRaisesAlertEndToEnd) {
  TempDir dir;
  WriteToken(dir);
  CoordinatorProcess coord;
  coord.Start(dir, "127.0.0.1:0", 3, 3);
  ASSERT_GT(coord.port, 0);
  std::vector<pid_t> workers;
  for (int i = 0; i < 3; ++i) {
    std::vector<std::string> args = WorkerArgs(dir, coord.port, i, 20);
    if (i == 1) args.insert(args.end(), {"--corrupt-replica-at", "10"});
    workers.push_back(Spawn(args, dir.Join(StrCat("worker", i, ".out"))));
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(WaitExit(workers[i]), 0) << ReadFile(dir.Join(StrCat("worker", i, ".out")));
  }
  const std::string status = Status(coord.port);
  coord.Stop();
  const std::string logs = AllLogs(dir, 3);
  // Which rank worker 1 got is in its log.
  const std::string w1 = ReadFile(dir.Join("worker1.log"));
  const size_t at = w1.find(" rank=");
  ASSERT_NE(at, std::string::npos) << w1;
  const int rank = std::stoi(w1.substr(at + 6));
  EXPECT_NE(status.find(StrCat("\"chunk\":\"model.bias[0:64]\",\"detail\":\"rank(s) ", rank,
                               " disagree with the other 2 of 3 replicas\"")),
            std::string::npos)
      << status;
  EXPECT_NE(status.find("\"step\":10,\"chunk\""), std::string::npos) << status;
  ExpectFinalStateExact(dir.Join("root"), 20);
}

// Regression: a coordinator restarted under a running job answered a
// reconnecting worker's hello from its io thread while its starting thread
// was still opening the journal, a data race on the journal's path that
// ThreadSanitizer caught in CoordinatorKilledAndRestartedMidRun. Held in the
// middle of its replay, it answers hellos, status, metrics and joins as a
// standby that says why it does not lead, then serves what it replayed.
TEST(Coordinator, RestartedCoordinatorAnswersAsAStandbyWhileItReplaysItsJournal) {
  TempDir dir;
  const CoordinatorOptions o = InProcess(dir, 1);
  ASSERT_NO_FATAL_FAILURE(RecordOneCommittedStep(o, 7));
  ASSERT_NO_FATAL_FAILURE(ExpectStandbyWhileReplaying(o, coord::NewJournalLog(o.state_dir), 7));
}

TEST(Coordinator, WrongTokenIsRefused) {
  TempDir dir;
  std::vector<std::string> lines;
  std::mutex mu;
  CoordinatorOptions o = InProcess(dir, 1);
  o.log = [&](const std::string& l) {
    std::lock_guard<std::mutex> lock(mu);
    lines.push_back(l);
  };
  auto coord = Coordinator::Start(o);
  ASSERT_OK(coord);
  CoordinatorClientOptions co;
  co.address = StrCat("127.0.0.1:", (*coord)->port());
  co.token = "not-the-job-token-at-all";
  auto client = CoordinatorClient::Connect(co);
  ASSERT_OK(client);
  auto a = (*client)->Join(5);
  ASSERT_FALSE(a.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(a.status())) << a.status();
  EXPECT_NE((*coord)->StatusJson().find("\"refused_joins\":1"), std::string::npos);
  {
    std::lock_guard<std::mutex> lock(mu);
    bool logged = false;
    for (const std::string& l : lines) logged = logged || l.find("wrong token") != std::string::npos;
    EXPECT_TRUE(logged);
  }
  // The refusal is visible to Prometheus on the same port.
  const std::string metrics = HttpGet((*coord)->port(), "/metrics");
  EXPECT_NE(metrics.find("HTTP/1.0 200 OK"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("\nckpt_coordinator_refused_joins_total 1\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("# TYPE ckpt_coordinator_generation gauge"), std::string::npos) << metrics;
  EXPECT_NE(HttpGet((*coord)->port(), "/nope").find("404"), std::string::npos);
}

// Garbage, an oversized frame, a bad checksum and a request before joining
// each close their own connection; two members doing collectives meanwhile
// are not disturbed.
TEST(Coordinator, GarbageClosesOnlyThatConnection) {
  TempDir dir;
  auto coord = Coordinator::Start(InProcess(dir, 2));
  ASSERT_OK(coord);
  const int port = (*coord)->port();
  std::vector<std::unique_ptr<CoordinatorClient>> clients;
  for (int i = 0; i < 2; ++i) {
    CoordinatorClientOptions co;
    co.address = StrCat("127.0.0.1:", port);
    co.token = kToken;
    co.heartbeat_s = 0.1;
    auto c = CoordinatorClient::Connect(co);
    ASSERT_OK(c);
    clients.push_back(std::move(c).value());
  }
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      auto a = clients[i]->Join(10);
      if (!a.ok()) return;
      auto comm = clients[i]->communicator(0);
      for (int round = 0; round < 50; ++round) {
        auto g = comm->Gather(StrCat("r", comm->rank(), "-", round), 10);
        if (!g.ok()) return;
        if (comm->rank() == 0 && (g->size() != 2 || (*g)[1] != StrCat("r1-", round))) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      ok += 1;
    });
  }
  // Meanwhile, misbehaving peers.
  {
    const int fd = RawConnect(port);
    const std::string junk = "\x01\x02garbage that is not a frame at all................";
    ASSERT_GT(send(fd, junk.data(), junk.size(), MSG_NOSIGNAL), 0);
    EXPECT_TRUE(ClosedByPeer(fd));
    close(fd);
  }
  {
    const int fd = RawConnect(port);
    uint8_t header[wire::kHeaderSize];
    // A 4 GiB payload declared.
    wire::EncodeHeader(coord::kCoordinatorProtocol, static_cast<uint16_t>(coord::MsgType::kHello), 0xfffffff0u, 1, 0,
                       header);
    ASSERT_GT(send(fd, header, sizeof(header), MSG_NOSIGNAL), 0);
    EXPECT_TRUE(ClosedByPeer(fd));
    close(fd);
  }
  {
    const int fd = RawConnect(port);
    std::string frame = coord::EncodeFrame(coord::MsgType::kStatus, 1, "abc");
    frame.back() ^= 1;  // payload no longer matches its checksum
    ASSERT_GT(send(fd, frame.data(), frame.size(), MSG_NOSIGNAL), 0);
    EXPECT_TRUE(ClosedByPeer(fd));
    close(fd);
  }
  {
    const int fd = RawConnect(port);
    const std::string frame = coord::EncodeFrame(coord::MsgType::kVote, 1, "");
    ASSERT_GT(send(fd, frame.data(), frame.size(), MSG_NOSIGNAL), 0);
    EXPECT_TRUE(ClosedByPeer(fd));  // a vote before joining
    close(fd);
  }
  {
    const int fd = RawConnect(port);
    const std::string frame = coord::EncodeFrame(coord::MsgType::kHello, 1, "");
    ASSERT_GT(send(fd, frame.data(), frame.size() / 2, MSG_NOSIGNAL), 0);
    close(fd);  // truncated, then gone
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 2);
  const std::string status = (*coord)->StatusJson();
  EXPECT_NE(status.find("\"bad_frames\":4"), std::string::npos) << status;
  EXPECT_NE(status.find("\"generation\":1"), std::string::npos) << status;
}

// A rank that heartbeats but never joins a collective (hung in its own
// code) ends the generation at the collective's deadline: the others are
// told to stop rather than wait forever.
TEST(Coordinator, CollectiveDeadlineEndsTheGeneration) {
  TempDir dir;
  auto coord = Coordinator::Start(InProcess(dir, 2));
  ASSERT_OK(coord);
  std::vector<std::unique_ptr<CoordinatorClient>> clients(2);
  std::vector<std::thread> joins;
  for (int i = 0; i < 2; ++i) {
    joins.emplace_back([&, i] {
      CoordinatorClientOptions co;
      co.address = StrCat("127.0.0.1:", (*coord)->port());
      co.token = kToken;
      co.heartbeat_s = 0.1;
      auto c = CoordinatorClient::Connect(co);
      ASSERT_OK(c);
      ASSERT_OK((*c)->Join(10));
      clients[i] = std::move(c).value();
    });
  }
  for (auto& t : joins) t.join();
  absl::Status s = clients[0]->communicator(0)->Barrier(0.5);
  EXPECT_TRUE(absl::IsAborted(s)) << s;
  EXPECT_NE(s.message().find("did not take part"), absl::string_view::npos) << s;
  for (int i = 0; i < 50 && !(clients[0]->stop_requested() && clients[1]->stop_requested()); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(clients[0]->stop_requested());
  EXPECT_TRUE(clients[1]->stop_requested());
}

// A member that waits as a spare while the others finish the job is told
// so at once (OutOfRange), instead of waiting out its join timeout.
TEST(Coordinator, ASpareWaitingWhenTheJobFinishesIsToldTheJobFinished) {
  TempDir dir;
  std::vector<std::string> lines;
  std::mutex mu;
  CoordinatorOptions o = InProcess(dir, 2);
  o.log = [&](const std::string& l) {
    std::lock_guard<std::mutex> lock(mu);
    lines.push_back(l);
  };
  auto coord = Coordinator::Start(o);
  ASSERT_OK(coord);
  auto connect = [&] {
    CoordinatorClientOptions co;
    co.address = StrCat("127.0.0.1:", (*coord)->port());
    co.token = kToken;
    co.heartbeat_s = 0.1;
    auto c = CoordinatorClient::Connect(co);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(c).value() : nullptr;
  };
  auto logged = [&](const std::string& want) {
    std::lock_guard<std::mutex> lock(mu);
    for (const std::string& l : lines) {
      if (l.find(want) != std::string::npos) return true;
    }
    return false;
  };
  std::vector<std::unique_ptr<CoordinatorClient>> members(2);
  std::vector<std::thread> joins;
  for (int i = 0; i < 2; ++i) {
    joins.emplace_back([&, i] {
      members[i] = connect();
      ASSERT_NE(members[i], nullptr);
      ASSERT_OK(members[i]->Join(10));
    });
  }
  for (auto& t : joins) t.join();
  ASSERT_NE(members[0], nullptr);
  ASSERT_NE(members[1], nullptr);
  auto spare = connect();
  ASSERT_NE(spare, nullptr);
  absl::StatusOr<Assignment> spare_join = absl::UnknownError("not answered");
  double answered_after = -1;
  std::thread waiting([&] {
    const auto t0 = std::chrono::steady_clock::now();
    spare_join = spare->Join(60);
    answered_after = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
  // The spare waits beside the running generation.
  auto spare_waits = [&] { return (*coord)->StatusJson().find("\"waiting\":[{") != std::string::npos; };
  for (int i = 0; i < 500 && !spare_waits(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(spare_waits()) << (*coord)->StatusJson();
  ASSERT_OK(members[0]->Leave());
  ASSERT_OK(members[1]->Leave());
  waiting.join();
  ASSERT_FALSE(spare_join.ok());
  EXPECT_TRUE(absl::IsOutOfRange(spare_join.status())) << spare_join.status();
  EXPECT_NE(spare_join.status().message().find("the job finished"), absl::string_view::npos) << spare_join.status();
  EXPECT_LT(answered_after, 10.0);
  EXPECT_TRUE(logged("told the job finished"));
  EXPECT_NE((*coord)->StatusJson().find("\"waiting\":[]"), std::string::npos) << (*coord)->StatusJson();
}

// Replicas of one box that disagree raise an alert naming the minority; a
// step whose written copy is the minority's is not committed.
TEST(Coordinator, ReplicaDisagreementIsCaught) {
  TempDir dir;
  auto coord = Coordinator::Start(InProcess(dir, 3));
  ASSERT_OK(coord);
  std::vector<std::unique_ptr<CoordinatorClient>> clients(3);
  std::vector<std::thread> joins;
  for (int i = 0; i < 3; ++i) {
    joins.emplace_back([&, i] {
      CoordinatorClientOptions co;
      co.address = StrCat("127.0.0.1:", (*coord)->port());
      co.token = kToken;
      auto c = CoordinatorClient::Connect(co);
      ASSERT_OK(c);
      ASSERT_OK((*c)->Join(10));
      clients[i] = std::move(c).value();
    });
  }
  for (auto& t : joins) t.join();
  auto vote = [&](int64_t step, int writer, int odd) {
    std::vector<std::thread> ts;
    for (auto& c : clients) {
      ts.emplace_back([&, step, writer, odd, client = c.get()] {
        auto comm = client->communicator(0);
        const int rank = comm->rank();
        SaveVote v;
        v.replicas.push_back(
            ReplicaHash{"model.bias[0:64]", rank == odd ? uint64_t{0xbad} : uint64_t{0x600d}, rank == writer});
        ASSERT_OK(client->arbiter()->Vote(rank, step, v));
      });
    }
    for (auto& t : ts) t.join();
    CoordinatorClient* leader = nullptr;
    for (auto& c : clients) {
      if (c->communicator(0)->rank() == 0) leader = c.get();
    }
    return leader->arbiter()->AwaitDecision(step, 10);
  };
  // The writer (rank 0) agrees with the majority: committed, rank 2 named.
  EXPECT_OK(vote(1, 0, 2));
  // The writer (rank 1) holds the odd copy: not committed.
  absl::Status s = vote(2, 1, 1);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_NE(s.message().find("silent data corruption"), absl::string_view::npos) << s;
  const std::string status = (*coord)->StatusJson();
  EXPECT_NE(status.find("rank(s) 2 disagree with the other 2 of 3 replicas"), std::string::npos) << status;
  EXPECT_NE(status.find("rank(s) 1 disagree"), std::string::npos) << status;
}

// 1,024 members join, heartbeat, pass a barrier and commit a step.
TEST(Coordinator, ThousandSimulatedMembers) {
  constexpr int kMembers = 1024;
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  if (lim.rlim_cur < 2 * kMembers + 64) {
    lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, 2 * kMembers + 64);
    setrlimit(RLIMIT_NOFILE, &lim);
  }
  ASSERT_GE(lim.rlim_cur, static_cast<rlim_t>(2 * kMembers + 64)) << "needs more file descriptors";
  TempDir dir;
  CoordinatorOptions o = InProcess(dir, kMembers);
  o.heartbeat_s = 1;
  o.dead_after = 30;
  auto coord = Coordinator::Start(o);
  ASSERT_OK(coord);
  std::vector<std::unique_ptr<coord::SimMember>> m(kMembers);
  for (int i = 0; i < kMembers; ++i) {
    m[i] = std::make_unique<coord::SimMember>();
    ASSERT_TRUE(m[i]->Connect((*coord)->port())) << i;
    ASSERT_TRUE(m[i]->SendJoin(kToken, StrCat("sim-", i))) << i;
  }
  std::vector<bool> ranks(kMembers, false);
  for (int i = 0; i < kMembers; ++i) {
    ASSERT_TRUE(m[i]->ReadAssign()) << i;
    ASSERT_GE(m[i]->rank(), 0);
    ASSERT_LT(m[i]->rank(), kMembers);
    EXPECT_FALSE(ranks[m[i]->rank()]);
    ranks[m[i]->rank()] = true;
  }
  for (auto& s : m) ASSERT_TRUE(s->Heartbeat());
  for (auto& s : m) ASSERT_TRUE(s->SendBarrier(0));
  for (auto& s : m) {
    auto f = s->Read();
    ASSERT_TRUE(f && f->first == coord::MsgType::kCollectiveResult);
  }
  coord::SimMember* leader = nullptr;
  for (auto& s : m) {
    ASSERT_TRUE(s->SendVote(7));
    if (s->rank() == 0) leader = s.get();
  }
  for (auto& s : m) {
    auto f = s->Read();  // the vote's ack
    ASSERT_TRUE(f && f->first == coord::MsgType::kAck);
  }
  ASSERT_TRUE(leader->SendDecide(7));
  auto decision = leader->Read();
  ASSERT_TRUE(decision && decision->first == coord::MsgType::kDecision);
  EXPECT_EQ(decision->second[0], 1) << "not decided for commit";
  const std::string status = (*coord)->StatusJson();
  EXPECT_NE(status.find(StrCat("\"world_size\":", kMembers)), std::string::npos);
}

}  // namespace
}  // namespace ckpt::testing

// The coordinator's two targets, on loopback:
//  - commit of a save across N simulated ranks: time from the last rank's
//    vote until the leader holds the decision, and until every rank has the
//    outcome after the leader published;
//  - detection of a dead member: time from its last heartbeat until another
//    member receives the stop, against the bound heartbeat x (dead-after + 1).
//
//   build/benchmarks/coordinator_bench --ranks 4096 --runs 5
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "ckpt/coordinator.h"
#include "common/cli.h"
#include "support/sim_member.h"
#include "util/clock.h"
#include "util/json.h"
#include "util/strings.h"

namespace ckpt::bench {
namespace {

constexpr char kToken[] = "bench-token-0123456789";

int Main(int argc, char** argv) {
  std::string dir = "/tmp/ckpt-coordinator-bench", json_path;
  int64_t ranks = 4096, runs = 5;
  double heartbeat = 0.2;
  int64_t dead_after = 3;
  tools::Args args("coordinator_bench", "[--ranks 4096] [--runs 5] [--json FILE]",
                   "Commit latency across simulated ranks and dead-member detection time.");
  args.String("dir", &dir, "state directory (default /tmp/ckpt-coordinator-bench)");
  args.Int("ranks", &ranks, "simulated ranks, one connection each (default 4096)");
  args.Int("runs", &runs, "commits measured; the median is reported (default 5)");
  args.Double("heartbeat", &heartbeat, "heartbeat interval in s for detection (default 0.2)");
  args.Int("dead-after", &dead_after, "missed heartbeats before death (default 3)");
  args.String("json", &json_path, "also write the figures as JSON to this file");
  int exit = 0;
  if (!args.Parse(argc, argv, 1, &exit)) return exit;
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = lim.rlim_max;
  setrlimit(RLIMIT_NOFILE, &lim);
  if (lim.rlim_cur < static_cast<rlim_t>(2 * ranks + 64)) {
    std::fprintf(stderr, "coordinator_bench: %lld ranks need %lld file descriptors, the limit is %llu\n",
                 static_cast<long long>(ranks), static_cast<long long>(2 * ranks + 64),
                 static_cast<unsigned long long>(lim.rlim_cur));
    return 2;
  }
  std::filesystem::remove_all(dir);
  CoordinatorOptions o;
  o.state_dir = dir + "/commit";
  o.token = kToken;
  o.min_nodes = o.max_nodes = static_cast<int>(ranks);
  o.heartbeat_s = 5;
  o.dead_after = 100;
  o.log = [](const std::string&) {};
  auto coord = Coordinator::Start(o);
  if (!coord.ok()) return 1;
  std::vector<std::unique_ptr<coord::SimMember>> m(static_cast<size_t>(ranks));
  const double t_join = NowSeconds();
  for (int64_t i = 0; i < ranks; ++i) {
    m[i] = std::make_unique<coord::SimMember>();
    if (!m[i]->Connect((*coord)->port()) || !m[i]->SendJoin(kToken, StrCat("sim-", i))) return 1;
  }
  for (auto& s : m) {
    if (!s->ReadAssign()) return 1;
  }
  const double join_s = NowSeconds() - t_join;
  coord::SimMember* leader = nullptr;
  for (auto& s : m) {
    if (s->rank() == 0) leader = s.get();
  }
  Samples decide, outcome;
  for (int64_t run = 0; run < runs; ++run) {
    const int64_t step = run + 1;
    // Everyone but one votes and waits for the outcome; the leader waits
    // for the decision.
    if (!leader->SendDecide(step)) return 1;
    coord::SimMember* last = m.back().get();
    for (auto& s : m) {
      if (s.get() == last) continue;
      if (!s->SendVote(step) || !s->SendAwaitOutcome(step)) return 1;
    }
    for (auto& s : m) {
      if (s.get() == last) continue;
      auto ack = s->Read();
      if (!ack || ack->first != coord::MsgType::kAck) return 1;
    }
    const double t0 = NowSeconds();
    if (!last->SendVote(step)) return 1;
    auto d = leader->Read();
    while (d && d->first != coord::MsgType::kDecision) d = leader->Read();
    if (!d || d->second.empty() || d->second[0] != 1) return 1;
    decide.Add(NowSeconds() - t0);
    if (!leader->SendPublished(step)) return 1;
    for (auto& s : m) {
      if (s.get() == last) continue;
      auto f = s->Read();
      while (f && f->first != coord::MsgType::kOutcome) f = s->Read();
      if (!f) return 1;
    }
    outcome.Add(NowSeconds() - t0);
    auto ack = last->Read();
    if (!ack) return 1;
    (void)leader;
  }
  m.clear();
  coord->reset();

  // Detection: two members, one falls silent.
  CoordinatorOptions d = o;
  d.state_dir = dir + "/detect";
  d.min_nodes = d.max_nodes = 2;
  d.heartbeat_s = heartbeat;
  d.dead_after = static_cast<int>(dead_after);
  auto dc = Coordinator::Start(d);
  if (!dc.ok()) return 1;
  coord::SimMember a, b;
  if (!a.Connect((*dc)->port()) || !b.Connect((*dc)->port()) || !a.SendJoin(kToken, "a") || !b.SendJoin(kToken, "b") ||
      !a.ReadAssign() || !b.ReadAssign()) {
    return 1;
  }
  if (!a.Heartbeat()) return 1;
  const double silent_since = NowSeconds();  // `a` sends nothing more
  double detected = -1;
  while (NowSeconds() - silent_since < 10 * heartbeat * static_cast<double>(dead_after + 1)) {
    if (!b.SendHeartbeat()) return 1;
    auto f = b.Read();
    if (!f) return 1;
    if (f->first == coord::MsgType::kStop) {
      detected = NowSeconds() - silent_since;
      break;
    }
    if (f->first == coord::MsgType::kHeartbeatAck && f->second.size() > 1 && f->second[1] == 1) {
      detected = NowSeconds() - silent_since;
      break;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(heartbeat / 4));
  }
  const double bound = heartbeat * static_cast<double>(dead_after + 1);
  std::printf("coordinator on loopback, %lld simulated ranks (one connection each)\n", static_cast<long long>(ranks));
  std::printf("  rendezvous of all ranks: %.3f s\n", join_s);
  std::printf("  last vote -> leader has the decision: median %.1f ms (%.1f..%.1f), target <= 1000 ms\n",
              decide.Median() * 1e3, decide.Min() * 1e3, decide.Max() * 1e3);
  std::printf("  last vote -> every rank has the outcome (leader published): median %.1f ms (%.1f..%.1f)\n",
              outcome.Median() * 1e3, outcome.Min() * 1e3, outcome.Max() * 1e3);
  std::printf("  dead member detected after %.3f s of silence (heartbeat %.3f s, dead after %lld: bound %.3f s)\n",
              detected, heartbeat, static_cast<long long>(dead_after), bound);
  if (!json_path.empty()) {
    JsonWriter w;
    w.BeginObject()
        .Field("ranks", ranks)
        .Field("join_s", join_s)
        .Field("decide_s", decide.Median())
        .Field("outcome_s", outcome.Median())
        .Field("detect_s", detected)
        .Field("detect_bound_s", bound)
        .EndObject();
    WriteTextFile(json_path, w.str());
  }
  std::filesystem::remove_all(dir);
  return detected > 0 && detected <= bound && decide.Median() <= 1.0 ? 0 : 1;
}

}  // namespace
}  // namespace ckpt::bench

int main(int argc, char** argv) { return ckpt::bench::Main(argc, argv); }
